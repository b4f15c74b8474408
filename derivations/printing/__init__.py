"""Printers: one class per target (text, LaTeX, NumPy, JAX), one ``_print_<Node>`` per node."""
