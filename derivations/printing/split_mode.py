"""Exponent handling shared by the array printers (JAX and NumPy): one scaling plan, printed for both targets.

Products of raw inputs can under- or overflow although the result is representable (float64 partners
of size 1e-170 make a Gram matrix of 1e-340). :class:`ScaledPrinter` is the printer base both targets
share, so that they carry powers of two apart in the same places and flag the same outputs:

* rules with ``msign`` are printed in *split mode* (:meth:`ScaledPrinter.split_body`): each Gram root,
  isotropic scale and scalar argument enters an output as its mantissa (near 1) and its power of two,
  and the exponents are added up and applied once to the finished output (``pow2_unscale``), which
  flags an output below the dtype's range; each factor of an ``msign`` argument is unit-scaled first
  (``msign`` ignores positive factors);
* rules without ``msign`` scale groups of arguments by exact powers of two at the start and the outputs
  back at the end (``scale_group`` … ``pow2_unscale``), the groups and the outputs' powers read off the
  formulas by :func:`derivations.printing.scaling.scaling_plan`.

:func:`compute` prints the lines of one emitted function this way; each target's runtime supplies the routines
of the same names and signatures (:mod:`foundation.compute.jax_runtime`, :mod:`foundation.compute.numpy_runtime`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sympy import Integer, Mul, Pow, Symbol
from sympy.matrices.expressions import MatMul, MatrixSymbol, Transpose

from derivations.engine.rule import EmittedFunction
from derivations.printing.codegen import MatrixCodePrinter
from derivations.printing.scaling import scaling_plan
from derivations.vocabulary.nodes import (
    BLOCK_DIAGONAL,
    GramInvSqrt,
    GramSqrt,
    IsotropicScale,
    Msign,
    RegularizedSylvester,
    facts_of,
)

#: the comment each constant both runtimes export gets where a standalone module defines it
SHARED_NOTES = {"UNDERFLOW_BITS": "an output below tiny * 2**(nmant - this) underflowed"}


class ScaledPrinter(MatrixCodePrinter):
    """The split mode and the unit-scaled ``msign`` arguments, for every array target.

    A target sets :attr:`sylvester_options` (the options its ``sylvester_products_split`` takes after the
    right-hand side) and prints its own routines' calls; the exponent bookkeeping is this class's.
    """

    #: the arguments after the right-hand side of the target's ``sylvester_products_split`` call (its options)
    sylvester_options = ""

    @staticmethod
    def _cast(code: str, like: str) -> str:
        """``code`` cast to the dtype of the array ``like`` (NumPy's and JAX's ``astype``; a target may differ)."""
        return f"{code}.astype({like}.dtype)"

    def _unit_arg(self, arg):
        """An msign argument with each factor of its product unit-scaled (``unit_scale``).

        ``msign`` ignores positive factors, so ``G_Q C_K⁻¹`` is formed from ``G_Q`` and ``C_K⁻¹`` each
        scaled by a power of two to ``max|·| ∈ [1, 2)``: tiny gradients (float32 1e-39) or huge roots
        of tiny partners cannot under- or overflow in the product. A numeric coefficient keeps only
        its sign; anything but a plain product is unit-scaled as a whole.
        """
        def whole():
            return f"unit_scale({self._print(arg)})"

        if not isinstance(arg, MatMul):
            return whole()
        coeff, mats = arg.as_coeff_matrices()
        if not coeff.is_Number or coeff == 0 or any(m.has(RegularizedSylvester) for m in mats):
            return whole()
        blocked = [self.blocked_partners and isinstance(m, (GramSqrt, GramInvSqrt))
                   and BLOCK_DIAGONAL in facts_of(m.base) for m in mats]
        if any(blocked[:-1]) or (blocked[-1] and len(mats) < 2):
            return whole()
        plain = mats[:-1] if blocked[-1] else mats
        code = " @ ".join(self._unit_factor(m) for m in plain)
        if blocked[-1]:  # the stacked blocks share one scale
            code = f"block_right({code}, {self._unit_factor(mats[-1], axes=(-3, -2, -1))})"
        return f"-({code})" if coeff < 0 else code

    def _unit_factor(self, m, axes=None):
        """One factor of an msign argument, unit-scaled: a split root's mantissa is already (in its base's dtype)."""
        if self.split and self._splittable_root(m):
            return self._cast(self._split_root(m)[0], self._print(m.base))
        return f"unit_scale({self._print(m)}{'' if axes is None else f', axes={axes!r}'})"

    # ---- split mode: outputs as a mantissa times a power of two ------------------------------------------
    #: set for rules with msign: their outputs are products ``c · F_1 ⋯ F_k`` of a scalar coefficient, spectral
    #: signs and Gram roots; each root and scalar enters as its mantissa (near 1) and its power of two is
    #: added up and applied once to the finished output (``pow2_unscale``), which flags an output below its
    #: dtype's range from the exponents. Huge or tiny partners, eps or group sizes can then neither flush
    #: an intermediate to zero nor make a silently wrong update.
    split = False

    def _blocked(self, node):
        return self.blocked_partners and BLOCK_DIAGONAL in facts_of(node.base)

    def _splittable_root(self, node):
        return (type(node) in (GramSqrt, GramInvSqrt) and isinstance(node.base, MatrixSymbol)
                and node.base.name in self.arguments)

    def _split_root(self, node):
        """``(mantissa, exponent)`` names of a Gram root (``psd_power_split``), computed once."""
        key = ("split", node)
        if key not in self.temps:
            name = self._temp_name(node)
            blocks = ", blocks=True" if self._blocked(node) else ""
            self.lines.append(f"{name}_m, e_{name} = psd_power_split({self._eigh(node)}, "
                              f"{float(node.exponent)!r}{blocks})")
            self.temps[key] = (f"{name}_m", f"e_{name}")
        return self.temps[key]

    def _root_value(self, node):
        """A split root where its value itself is needed (outside a product the split mode handles)."""
        mant, exp = self._split_root(node)
        exp = f"{exp}[..., None, :, :]" if self._blocked(node) else exp
        return self._cast(f"pow2_scale({mant}, {exp})", self._print(node.base))

    def _split_atom(self, atom):
        """``(mantissa, exponent)`` names of a scalar argument or an isotropic scale, computed once."""
        key = ("split", atom)
        if key not in self.temps:
            if isinstance(atom, IsotropicScale):
                name = self._temp_name(atom)
                names = (f"{name}_m", f"e_{name}")
                call = f"isotropic_scale_split({self._print(atom.base)}, damping)"
            else:
                code = self.scalars[atom]
                names = (f"{code}_m", f"e_{code}")
                call = f"split_scalar({code}, {self.dtype_of}.dtype)"
            self.lines.append(f"{names[0]}, {names[1]} = {call}")
            self.temps[key] = names
        return self.temps[key]

    def _split_atoms(self, coeff):
        """``[(atom, power)]`` of a monomial coefficient (scalar arguments, isotropic scales), else ``None``."""
        atoms = []
        for f in Mul.make_args(coeff):
            if f.is_Number:
                continue
            base, power = (f.base, f.exp) if isinstance(f, Pow) else (f, Integer(1))
            if not power.is_Integer:
                return None
            if isinstance(base, IsotropicScale) or (isinstance(base, Symbol) and base in self.scalars):
                atoms.append((base, int(power)))
            else:
                return None
        return atoms

    def _split_scalar(self, coeff, atoms):
        """``(code of the coefficient's mantissa, [exponent terms])``."""
        names = {atom: self._split_atom(atom) for atom, _ in atoms}
        stand_in = {atom: Symbol(f"_split_{i}") for i, atom in enumerate(names)}
        saved = self.scalars
        self.scalars = {**saved, **{stand_in[a]: names[a][0] for a in names}}
        try:
            code = self._scalar(coeff.xreplace(stand_in))
        finally:
            self.scalars = saved
        return code, [(power, names[atom][1]) for atom, power in atoms]

    def _split_factors(self, expr):
        """``(coefficient, factors, sylvester node or None)`` of an output the split mode prints, else ``None``."""
        coeff, mats = expr.as_coeff_matrices() if isinstance(expr, MatMul) else (Integer(1), [expr])
        if self._split_atoms(coeff) is None:
            return None
        node = self._sylvester_pair(coeff, mats)
        if node is not None:
            inner, _ = node.rhs.as_coeff_matrices() if isinstance(node.rhs, MatMul) else (Integer(1), [node.rhs])
            if self._split_atoms(inner) is None:
                return None
            return coeff * inner, list(mats), node
        blocked = [isinstance(m, (GramSqrt, GramInvSqrt)) and self._blocked(m) for m in mats]
        if any(blocked[:-1]) or (blocked[-1] and len(mats) < 2):
            return None
        return coeff, list(mats), None

    def _sylvester_pair(self, coeff, mats):
        if coeff != 1 or len(mats) != 2:
            return None
        first, partner = mats
        transposed = isinstance(first, Transpose)
        node = first.arg if transposed else first
        if (isinstance(node, RegularizedSylvester) and node.side == "outer"
                and partner == (node.left if transposed else node.right)):
            return node
        return None

    def _split_matrix(self, m):
        """``(code, exponent name or None)`` of one factor: a root's mantissa, else the factor itself."""
        if isinstance(m, Transpose) and self._splittable_root(m.arg):
            mant, exp = self._split_root(m.arg)
            return f"{mant}.mT", exp
        if isinstance(m, (GramSqrt, GramInvSqrt)) and self._splittable_root(m):
            return self._split_root(m)
        return self._atom(m), None

    def split_output(self, expr):
        """``(mantissa code, [(power, exponent name)])`` of an output, or ``None`` (printed as it is)."""
        plan = self._split_factors(expr)
        if plan is None:
            return None
        coeff, mats, node = plan
        c_code, terms = self._split_scalar(coeff, self._split_atoms(coeff))
        if node is not None:
            names = self._sylvester_products_split(node)
            code = names[1 if isinstance(mats[0], Transpose) else 0]
            terms.append((1, names[2]))
        else:
            parts = [self._split_matrix(m) for m in mats]
            terms += [(1, e) for _, e in parts if e is not None]
            codes = [c for c, _ in parts]
            if len(mats) > 1 and isinstance(mats[-1], (GramSqrt, GramInvSqrt)) and self._blocked(mats[-1]):
                rest = " @ ".join(codes[:-1])
                rest = rest if c_code == "1" else f"{c_code} * {rest if len(codes) == 2 else f'({rest})'}"
                return f"block_right({rest}, {codes[-1]})", terms
            code = " @ ".join(codes)
            if len(codes) > 1:
                code = f"({code})"
        return (code if c_code == "1" else f"{c_code} * {code}"), terms

    def _sylvester_products_split(self, node):
        key = ("sylvester_products_split", node)
        if key not in self.temps:
            _, inner = node.rhs.as_coeff_matrices() if isinstance(node.rhs, MatMul) else (Integer(1), [node.rhs])
            rhs = " @ ".join(self._atom(m) for m in inner)
            names = ("HW_K", "HtW_Q", "e_H")
            self.lines.append(f"{', '.join(names)} = sylvester_products_split({self._print(node.left)}, "
                              f"{self._print(node.right)}, {self._scalar(node.damping)}, {rhs}"
                              f"{self.sylvester_options})")
            self.temps[key] = names
        return self.temps[key]

    def split_body(self, outputs, dtype_of):
        """Lines computing every ``(name, expr)`` of ``outputs`` in split mode, and the names of their ``lost``
        flags."""
        self.split, self.dtype_of = True, dtype_of
        for _, expr in outputs:
            self._count(expr)
        if self.stack_heavy:
            self._plan_groups([expr for _, expr in outputs])
        lost = []
        for j, (name, expr) in enumerate(outputs, 1):
            printed = self.split_output(expr)
            if printed is None or not printed[1]:
                self.lines.append(f"{name} = {printed[0] if printed else self._print(expr)}")
                continue
            code, terms = printed
            exponent = " + ".join(f"{'' if p == 1 else f'{p} * '}{e}" for p, e in terms).replace("+ -1 * ", "- ")
            lost.append(f"lost_{j}")
            self.lines.append(f"{name}, lost_{j} = pow2_unscale({code}, {exponent}, {dtype_of}.dtype)")
        return self.lines, lost

    def _print_IsotropicScale(self, expr):
        if self.split:
            return self._cast("pow2_scale({}, {})".format(*self._split_atom(expr)), self._print(expr.base))
        return f"isotropic_scale({self._print(expr.base)}, damping)"


@dataclass(frozen=True)
class Computation:
    """What a printer made of one emitted function's formulas: the lines that compute its outputs (in the JAX
    target the jitted core's, between the validity flag and the casts), the names of its ``lost`` (underflow)
    flags, and which outputs carry one."""

    lines: tuple[str, ...]
    lost: tuple[str, ...]
    flagged: tuple[bool, ...]
    uses_msign: bool


def compute(fn: EmittedFunction, scalars: dict, printer_type: type[ScaledPrinter]) -> Computation:
    """Print the formulas of ``fn`` with ``printer_type`` (a target's printer): in split mode where they have an
    msign, else with scaled argument groups (:func:`scaling_lines`)."""
    args = fn.argument_names
    printer = printer_type({a: a for a in args}, {**scalars, **fn.extra_scalars})
    printer.static_options = frozenset(fn.options)  # a node may print a call that reads an option (``root``)
    outputs = [(out, der.formula) for out, der in fn.outputs]
    uses_msign = any(formula.has(Msign) for _, formula in outputs)
    if uses_msign:
        body, split_lost = printer.split_body(outputs, args[0])
    else:
        body, split_lost = printer.body(outputs), []
    scale_lines, unscale_lines, lost = scaling_lines(fn, scalars, uses_msign)
    flagged = tuple(any(line.startswith(f"{out}, lost_") for line in body + unscale_lines) for out, _ in outputs)
    return Computation(tuple(scale_lines + body + unscale_lines), tuple(split_lost + lost), flagged, uses_msign)


def apart(group) -> bool:
    """Whether a group's members can lie further apart than the dtype's digits (two or more of them, or one and
    the damping) while an output carries its scale: then ``group_underflow`` guards it."""
    return any(d != 0 for d in group.degrees) and (len(group.members) > 1 or group.damping)


def scaling_lines(fn: EmittedFunction, scalars: dict, uses_msign: bool) -> tuple[list[str], list[str], list[str]]:
    """Lines that scale argument groups by powers of two at the start, and the outputs back at the end.

    Only for rules without msign: there the routines and the unit-scaled msign arguments keep every
    intermediate in range; products of raw inputs elsewhere (``C_K W_QᵀW_Q C_K`` in the balancing gauge)
    need their arguments near 1 (:mod:`derivations.printing.scaling`). The plan is made for every function,
    so that a node without a homogeneity degree stops any emission (:class:`~derivations.printing.scaling.
    NoDegreeRule`), not only the one that would have scaled it.
    """
    damping = {sym for sym, name in scalars.items() if name == "damping"}
    plan = scaling_plan(fn.argument_names, [der.formula for _, der in fn.outputs], damping)
    if uses_msign or not plan:
        return [], [], []
    first, last = [], []
    for i, group in enumerate(plan, 1):
        members = ", ".join(group.members) + ","
        lam = "damping" if group.damping else "_"
        k = f"k_{i}" if any(d != 0 for d in group.degrees) else "_"  # a scale no output carries: unused
        first.append(f"({members}), {lam}, {k} = scale_group(({members}), {'damping' if group.damping else 'None'}, "
                     f"{group.multiple})")
        if apart(group):  # members further apart than the dtype's digits: refused as an underflow, never wrong
            first.append(f"lost_g{i} = group_underflow(({members}))")
    lost = [f"lost_g{i}" for i, group in enumerate(plan, 1) if apart(group)]
    for j, (out, _) in enumerate(fn.outputs):
        terms = [f"{d.numerator} * (k_{i} // {d.denominator})" if d.denominator != 1 else f"{d.numerator} * k_{i}"
                 for i, group in enumerate(plan, 1) for d in [group.degrees[j]] if d != 0]
        if terms:
            lost.append(f"lost_{j + 1}")
            last.append(f"{out}, {lost[-1]} = pow2_unscale({out}, -({' + '.join(terms)}), "
                        f"{fn.argument_names[0]}.dtype)")
    return first, last, lost
