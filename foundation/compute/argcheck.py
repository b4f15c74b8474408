"""Argument checks shared by the emitted JAX and NumPy modules (plain Python: inlined into standalone ones).

Every error names the function and the argument, shows what was given, and says what would work.
"""


def check_scalar(function, name, value, positive=False):
    """A finite real scalar ``>= 0`` (``> 0`` with ``positive``): not a string, bool (NumPy's and JAX's
    included), None or array."""
    boolean = isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b"
    if isinstance(value, (str, bytes)) or boolean or value is None or getattr(value, "shape", ()) != ():
        shape = getattr(value, "shape", None)
        got = (f"the boolean {value!r}" if boolean else f"an array of shape {tuple(shape)}" if shape is not None
               else repr(value))
        raise TypeError(f"{function}: {name} must be a real number, got {got}")
    try:
        v = float(value)
    except OverflowError:  # an integer beyond every float (10**400): not finite in any dtype
        raise ValueError(f"{function}: {name} must be finite, got an integer too large for a float") from None
    except (TypeError, ValueError):
        raise TypeError(f"{function}: {name} must be a real number, got {value!r}") from None
    if not (v > 0.0 if positive else v >= 0.0) or v == float("inf"):
        raise ValueError(f"{function}: {name} must be {'> 0 and finite' if positive else 'finite and >= 0'}, "
                         f"got {value}")


def check_shapes(function, shapes, arrays):
    """Trailing dimensions by name (each >= 1), one leading (batch) shape, ``d_h ≤ d``, blocks that tile the gradient.

    A leading (batch) dimension may be 0: the result is then empty too.

    ``shapes`` maps each argument name to its trailing dimension names, e.g. ``{"W_Q": ("d", "d_h")}``;
    every dimension name must get one size and every argument the same leading shape.
    """
    sizes, batch = {}, None
    for name, dims in shapes.items():
        x = arrays[name]
        nd = len(dims)
        if x.ndim < nd:
            raise ValueError(f"{function}: {name} must have shape (..., {', '.join(dims)}), got {tuple(x.shape)}")
        lead = tuple(x.shape[:-nd])
        if batch is None:
            batch = lead
        elif lead != batch:
            raise ValueError(f"{function}: {name} has leading (batch) shape {lead}, expected {batch}")
        for dim, size in zip(dims, x.shape[-nd:]):
            if size == 0:
                raise ValueError(f"{function}: {name} has {dim} = 0 (shape {tuple(x.shape)}); every matrix "
                                 f"dimension must be at least 1, expected shape (..., {', '.join(dims)})")
            if sizes.setdefault(dim, size) != size:
                raise ValueError(f"{function}: {name} has {dim} = {size} but an earlier argument has "
                                 f"{dim} = {sizes[dim]}; expected shape (..., {', '.join(dims)})")
    if "k" in sizes and "d_h" in sizes and "m" in sizes and sizes["m"] != sizes["k"] * sizes["d_h"]:
        raise ValueError(f"{function}: the gradient has m = {sizes['m']} columns but the partner has "
                         f"{sizes['k']} blocks of width {sizes['d_h']}")
    if "d" in sizes and "d_h" in sizes and sizes["d_h"] > sizes["d"]:
        raise ValueError(f"{function}: head dimension d_h = {sizes['d_h']} exceeds model width d = "
                         f"{sizes['d']}; are the weights transposed? expected W of shape (..., d, d_h)")
    return sizes


def check_group(function, group_size, shapes, arrays):
    """A stacked group ``n = G·d`` (``G = group_size``, a whole number >= 1) of ``d``-row blocks."""
    sizes = {}
    for name, dims in shapes.items():
        for dim, size in zip(dims, arrays[name].shape[-len(dims):]):
            sizes.setdefault(dim, size)
    g = float(group_size)
    if g != int(g) or g < 1:
        raise ValueError(f"{function}: group_size must be a whole number >= 1, got {group_size}")
    if "n" in sizes and "d" in sizes and sizes["n"] != int(g) * sizes["d"]:
        stacked = next(name for name, dims in shapes.items() if "n" in dims)
        raise ValueError(f"{function}: {stacked} stacks {sizes['n']} rows but group_size = {int(g)} query heads of "
                         f"d = {sizes['d']} rows need {int(g) * sizes['d']}; stack the group's heads row-wise")


def is_boolean(value):
    """Whether ``value`` is a bool: Python's, NumPy's or a JAX/NumPy array of boolean dtype (``True`` is an
    ``int`` in Python, so an integer check alone takes it as 1)."""
    return isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b"


def check_whole(function, name, value, low=1):
    """``value`` as an ``int`` when it is a whole number ``>= low`` (a Python or NumPy integer, or a 0-d integer
    array); a bool, a float, a string or an array with axes is refused (``TypeError``), and so is a value below
    ``low`` (``ValueError``), naming the function and the argument. The one check wherever an integer is
    expected (``heads``, ``kv_heads``, ``ns_steps``)."""
    kind = getattr(getattr(value, "dtype", None), "kind", "")
    integral = (isinstance(value, int) or kind in ("i", "u")) and getattr(value, "shape", ()) == ()
    if is_boolean(value) or not integral:
        got = f"the boolean {value!r}" if is_boolean(value) else repr(value)
        raise TypeError(f"{function}: {name} must be a whole number >= {low}, got {got}")
    if int(value) < low:
        raise ValueError(f"{function}: {name} must be a whole number >= {low}, got {int(value)}")
    return int(value)
