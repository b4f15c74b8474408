"""Exact parameter counts of the mainstream decoder families from the shapes of their tensors
(``python -m paramcount --help``): the count and its comparison with a hand or published total (``count``),
each family's tensors (``families``), the shape options (``flags``) and Hugging Face style ``config.json``
files (``config``)."""
