"""JAX printer: a jitted, batched module that imports ``jax``, ``functools`` and the routines its code calls.

By default the routines come from :mod:`foundation.compute.jax_runtime` (one import naming exactly the names the
printed code reads); a standalone module (``--emit jax --standalone``) inlines the source of the routines its code
reaches instead, with the constants they read, and imports only ``jax`` and ``functools``.
"""

from __future__ import annotations

import shlex
import textwrap
from dataclasses import dataclass

from sympy import Integer, Mul, Pow, Symbol
from sympy.matrices.expressions import MatMul, MatrixSymbol, Transpose

from derivations.engine.rule import EmittedFunction
from derivations.printing.array_module import docstring, header
from derivations.printing.codegen import (
    MatrixCodePrinter,
    UnsupportedNode,
    check_docstring,
    check_identifier,
    check_resolved,
    docstring_fragment,
    routine_parts,
)
from derivations.printing.function_spec import FunctionSpec, Parameter, render_functions
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
from foundation.compute import jax_runtime
from foundation.schedule import Schedule

#: the comment each constant gets where a standalone module defines it
CONSTANT_NOTES = {
    "GRAM_ASPECT": "msign='auto': Gram Newton–Schulz when long side > this * short side",
    "GRAM_RESTARTS": "default restart positions of Gram Newton–Schulz",
    "GRAM_ROUTE_RATIO": "Gram eigh while e_min >= this * e_max, else QR + SVD of W",
    "MAX_SCHEDULE_STEPS": "longer schedules are refused",
    "UNDERFLOW_BITS": "an output below tiny * 2**(nmant - this) underflowed",
}


class JaxPrinter(MatrixCodePrinter):
    """``_print_<Node>`` rules that call the JAX routines (:mod:`foundation.compute.jax_runtime`).

    Same-shape eigendecompositions and spectral signs are stacked into one batched call: fewer
    compiled ops, and on the CPU it avoids running two LAPACK calls at once, which
    can deadlock jaxlib 0.10's thread pool (see ``per_matrix_on_cpu``).
    """

    printmethod = "_jaxcode"  # a node may carry its own rule for this target

    stack_heavy = True
    blocked_partners = True

    def _stacked_msign(self, args):
        return f"spectral_sign_stacked(({', '.join(args)}), msign, schedule, restarts, gram_aspect)"

    def _print_Msign(self, expr):
        return f"spectral_sign({self._unit_arg(expr.arg)}, msign, schedule, restarts, gram_aspect)"

    def _print_group(self, expr):
        """One stacked spectral-sign call for the group, each argument printed by :meth:`_unit_arg`."""
        members = self.groups[expr]
        args = [self._unit_arg(m.arg) for m in members]
        names = [self._temp_name(m) for m in members]
        self.lines.append(f"{', '.join(names)} = {self._stacked_msign(args)}")
        self.temps.update(zip(members, names, strict=True))
        return self.temps[expr]

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
            return f"{self._split_root(m)[0]}.astype({self._print(m.base)}.dtype)"
        return f"unit_scale({self._print(m)}{'' if axes is None else f', axes={axes!r}'})"

    def _print_GramInvSqrt(self, expr):
        if self.split and self._splittable_root(expr):
            return self._root_value(expr)
        return f"psd_power({self._eigh(expr)}, -0.5, {self._print(expr.base)}.dtype)"

    def _print_GramPower(self, expr):
        """``(WᵀW + λI)^p`` for any rational ``p``, from the singular values of ``W`` (no Gram matrix formed)."""
        return f"psd_power({self._eigh(expr)}, {float(expr.exponent)!r}, {self._print(expr.base)}.dtype)"

    def _print_PolarFactor(self, expr):
        """``U_W``, from the singular vectors of ``W`` (``polar_factor``), not as the product ``W C_W⁻¹``."""
        if expr.side != "right":
            raise UnsupportedNode(f"JaxPrinter prints right polar factors only, not {expr}")
        return f"polar_factor({self._print(expr.base)}, {self._damping_of(expr)})"

    def _print_GramSqrt(self, expr):
        if self.split and self._splittable_root(expr):
            return self._root_value(expr)
        return f"psd_power({self._eigh(expr)}, 0.5, {self._print(expr.base)}.dtype)"

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
        return f"pow2_scale({mant}, {exp}).astype({self._print(node.base)}.dtype)"

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
                              f"{self._print(node.right)}, {self._scalar(node.damping)}, {rhs}, solver)")
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

    def _print_RegularizedSylvester(self, expr):
        if expr.side == "inner":
            return (f"sylvester_gram({self._print(expr.left)}, {self._print(expr.right)}, damping, "
                    f"{self._print(expr.rhs)})")
        raise UnsupportedNode("the outer Sylvester solution H is emitted only in the products H W_K and Hᵀ W_Q "
                              "(sylvester_products: H itself is of size ‖D‖/λ and not formed)")

    def _print_MatMul(self, expr):
        """``H W_K`` and ``Hᵀ W_Q`` of an outer Sylvester solution: one :func:`sylvester_products` call."""
        coeff, mats = expr.as_coeff_matrices()
        if coeff == 1 and len(mats) == 2:
            first, partner = mats
            transposed = isinstance(first, Transpose)
            node = first.arg if transposed else first
            if (isinstance(node, RegularizedSylvester) and node.side == "outer"
                    and partner == (node.left if transposed else node.right)):
                return self._sylvester_products(node)[1 if transposed else 0]
        return super()._print_MatMul(expr)

    def _sylvester_products(self, node):
        key = ("sylvester_products", node)
        if key not in self.temps:
            names = ("HW_K", "HtW_Q")
            self.lines.append(f"{', '.join(names)} = sylvester_products({self._print(node.left)}, "
                              f"{self._print(node.right)}, {self._scalar(node.damping)}, {self._print(node.rhs)}, "
                              f"solver)")
            self.temps[key] = names
        return self.temps[key]

    def _print_IsotropicScale(self, expr):
        if self.split:
            return "pow2_scale({}, {}).astype({}.dtype)".format(*self._split_atom(expr), self._print(expr.base))
        return f"isotropic_scale({self._print(expr.base)}, damping)"


CHECKS_DOC = """Inputs are checked where the computation starts: shapes and dtypes always (also under jit
    and vmap: they are static); eps, damping and schedule values when they are concrete. A NaN/Inf
    input never reaches LAPACK: it makes the whole result NaN, and check_finite=True then raises a
    ValueError naming the input (outside an outer jit/vmap, where nothing can be raised: check the
    result with jnp.isfinite there). Undamped rank-deficient partners give the minimum-norm update
    (pseudo-inverse roots, cut where a singular value of [W; √λ I] is at most max(d, d_h)·eps·σ_max;
    ill-conditioned partners get roots from the SVD of W, accurate to about eps·cond(W)); use
    damping > 0 to regularize. Results are right at any input scale while they are representable:
    roots and scalars carry their powers of two apart until the last step; an overflow or an
    underflow (largest entry below tiny/(16 eps) of the compute dtype, or below the smallest normal
    number for float16) raises a ValueError naming the arguments and their sizes."""

ARG_DOC = """Arguments after * : eps (step budget ε >= 0), damping (λ >= 0), msign ("newton_schulz",
    "svd", "gram_newton_schulz": the same schedule on the small Gram matrix, or "auto": the Gram
    form where its flop model is lower, i.e. long side > gram_aspect * short side), schedule
    (Newton–Schulz steps: a tuple of coefficient tuples or an array (steps, k+1), passed as data, so
    schedules of one shape share one compilation), restarts (the Gram form's restart positions s,
    1 <= s <= steps - 1, passed as data; None: the positions certified for the schedule in the input
    dtype, certified_restarts; where none are, "auto" runs the standard iteration and "gram_newton_schulz"
    is refused; certify with python -m coeffsearch restarts), gram_aspect (None: GRAM_ASPECT), check_finite
    (raise if an input or the update is NaN/Inf); _caller is internal (a stored-layout entry point
    passes its name and arguments, which errors then name). Returns the update(s) to add, in the
    input dtype.
    """ + CHECKS_DOC


NO_MSIGN_DOC = """Arguments after * : damping (λ >= 0), check_finite (raise if an input or the result is
    NaN/Inf); _caller is internal (see the functions with msign). Returns the result(s) in the input dtype.
    """ + CHECKS_DOC


def emit_jax(title: str, command: str, functions: list[EmittedFunction], schedule: Schedule,
             msign_default: str, scalars: dict, extra_source: str = "", extra_names: tuple = (),
             standalone: bool = False) -> str:
    """The module text (deterministic byte for byte).

    ``schedule`` is the default Newton–Schulz schedule, a :class:`~foundation.schedule.Schedule`: validated
    where it was made (its coefficients finite float64 numbers), so it is taken as it is here. The routines the
    printed code calls are imported from :mod:`foundation.compute.jax_runtime`, or with ``standalone`` inlined:
    those it reaches and the constants they read (:func:`~derivations.printing.codegen.routine_parts`).
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a foundation.schedule.Schedule (validated where it is made), "
                        f"got {type(schedule).__name__}")
    if msign_default not in jax_runtime.MSIGN_METHODS:
        raise ValueError(f"msign_default must be one of {jax_runtime.MSIGN_METHODS!r}, got {msign_default!r}")
    for public in [fn.name for fn in functions] + list(extra_names):
        check_identifier(public, "emitted function name")
    head = check_docstring(_module_docstring(title, command, functions, schedule, msign_default), "module docstring")
    own = [f"__all__ = {sorted([fn.name for fn in functions] + list(extra_names))!r}\n",
           "NS_SCHEDULE = (\n" + "".join(f"    {step!r},\n" for step in schedule.as_floats()) + ")\n"]
    printed = [render_functions(list(function_specs(fn, scalars, msign_default))) for fn in functions]
    printed += ["\n" + extra_source] if extra_source else []
    imported, constants, routines = routine_parts("\n".join(own + printed), jax_runtime, standalone, CONSTANT_NOTES)
    parts = [head, "import functools\n\nimport jax\nimport jax.numpy as jnp\n" + ("\n" + imported if imported else ""),
             own[0], *([constants] if constants else []), own[1], *(["\n" + routines + "\n"] if routines else []),
             *printed]
    return check_resolved("\n".join(parts).rstrip() + "\n", "the emitted JAX module")


def _module_docstring(title: str, command: str, functions: list[EmittedFunction], schedule: Schedule,
                      msign_default: str) -> str:
    """The module docstring: the header of every emitted module, then the schedule and the msign default.

    Every caller-given string is escaped for the docstring (defence in depth: names are also checked where
    they are read, foundation.polynomial.NAME_PATTERN), and the header must parse as one string literal.
    """
    name, quoted = docstring_fragment(schedule.name), shlex.quote(schedule.name)
    escaped = docstring_fragment(quoted)
    extra = ["", f"Newton–Schulz schedule: {name} ({docstring_fragment(schedule.source)}).",
             f"Default msign method: {msign_default}.",
             *textwrap.wrap("The norm equalities above hold for the exact msign (msign=\"svd\"). Newton–Schulz "
                            "maps each singular value into the schedule's certified image instead of to 1 "
                            f"(python -m coeffsearch certify {escaped} "
                            "prints it), so with msign=\"newton_schulz\" they hold up to that factor.", 92,
                            break_long_words=escaped == quoted)]  # never split inside an escape sequence
    return header(docstring_fragment(title), docstring_fragment(command), functions, extra)


@dataclass(frozen=True)
class Computation:
    """What the printer made of one emitted function's formulas: the lines of its jitted core between the
    validity flag and the casts, the names of its ``lost`` (underflow) flags, and which outputs carry one."""

    lines: tuple[str, ...]
    lost: tuple[str, ...]
    flagged: tuple[bool, ...]
    uses_msign: bool


def function_specs(fn: EmittedFunction, scalars: dict, msign_default: str) -> tuple[FunctionSpec, FunctionSpec]:
    """The two functions emitted for ``fn``: the jitted core ``_<name>`` and the public entry point ``<name>``."""
    for name in [*fn.argument_names, *(out for out, _ in fn.outputs), *fn.options, *fn.extra_scalars.values(),
                 *scalars.values()]:
        check_identifier(name, f"{fn.name}: argument or output name")
    computation = _compute(fn, scalars)
    return _core_spec(fn, computation), _public_spec(fn, computation.uses_msign, msign_default)


def _compute(fn: EmittedFunction, scalars: dict) -> Computation:
    """Print the formulas of ``fn``: in split mode where they have an msign, else with scaled argument groups."""
    args = fn.argument_names
    printer = JaxPrinter({a: a for a in args}, {**scalars, **fn.extra_scalars})
    outputs = [(out, der.formula) for out, der in fn.outputs]
    uses_msign = any(formula.has(Msign) for _, formula in outputs)
    if uses_msign:
        body, split_lost = printer.split_body(outputs, args[0])
    else:
        body, split_lost = printer.body(outputs), []
    scale_lines, unscale_lines, lost = _scaling(fn, scalars, uses_msign)
    flagged = tuple(any(line.startswith(f"{out}, lost_") for line in body + unscale_lines) for out, _ in outputs)
    return Computation(tuple(scale_lines + body + unscale_lines), tuple(split_lost + lost), flagged, uses_msign)


def _arguments_dict(args: list[str]) -> str:
    """``{'W_Q': W_Q, …}``: the arguments by name, for the checks that name them."""
    return "{" + ", ".join(f"{a!r}: {a}" for a in args) + "}"


def _core_spec(fn: EmittedFunction, c: Computation) -> FunctionSpec:
    """``_<name>``: jitted on its options and msign; every scalar positional, NaN outputs where a scalar is bad."""
    args, extra, opts = fn.argument_names, list(fn.extra_scalars.values()), list(fn.options)
    static = ", ".join(f'"{o}"' for o in ["msign", "gram_aspect", *opts])
    valid = " & ".join([*(["(eps >= 0)"] if fn.needs_eps else []),
                        f"(damping {'>' if fn.positive_damping else '>='} 0)", *[f"({n} > 0)" for n in extra]])
    names = [out for out, _ in fn.outputs]
    outs = "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"
    lost = f", {' | '.join(c.lost)}" if c.lost else ""
    flagged = f", flagged={c.flagged!r}" if any(c.flagged) else ""
    body = (f"valid = {valid}  # under an outer jit a bad scalar cannot be refused: NaN",
            *c.lines,
            *(f"{out} = {out}.astype({args[0]}.dtype)" for out in names),
            (f"status = jnp.where(valid, output_status({outs}{lost}{flagged}), 1)"
             "  # a NaN/Inf input reaches every output computed from it"),
            f"return nan_unless(status == 0, {outs}), status")
    return FunctionSpec(f"_{fn.name}",
                        tuple(Parameter(p) for p in [*args, "eps", *extra, "damping", "msign", "schedule", "restarts",
                                                    "gram_aspect", *opts]),
                        decorators=(f"functools.partial(jax.jit, static_argnames=({static},))",), body=body)


def _public_spec(fn: EmittedFunction, uses_msign: bool, msign_default: str) -> FunctionSpec:
    """``<name>``: keyword scalars with their defaults, the argument checks, the core's call and the finite check."""
    args, extra = fn.argument_names, list(fn.extra_scalars.values())
    keywords = [*([Parameter("eps")] if fn.needs_eps else []), *(Parameter(n) for n in extra),
                Parameter("damping", None if fn.positive_damping else "0.0"),
                *([Parameter("msign", repr(msign_default)), Parameter("schedule", "NS_SCHEDULE"),
                   Parameter("restarts", "None"), Parameter("gram_aspect", "None")] if uses_msign else []),
                *(Parameter(o, repr(default)) for o, (default, _) in fn.options.items()),
                Parameter("check_finite", "True"), Parameter("_caller", "None")]
    # no msign in the formula: nothing to choose
    sign_args = "msign, schedule, restarts, gram_aspect" if uses_msign else "'svd', ()"
    checks = (f"validate_inputs({fn.name!r} if _caller is None else _caller[0], {fn.shapes()!r},",
              f"                {_arguments_dict(args)},",
              f"                {'eps' if fn.needs_eps else '0.0'}, damping, {sign_args})",
              *_option_checks(fn))
    call_sign = ("msign, schedule_array(schedule) if msign != 'svd' else None, "
                 "gram_flags(msign, schedule, restarts), gram_aspect" if uses_msign else "'svd', None, None, None")
    scalars = "".join(f", real_scalar({n})" for n in extra)
    body = ((f"outputs, status = _{fn.name}({', '.join(args)}, {'real_scalar(eps)' if fn.needs_eps else '0.0'}"
             f"{scalars}, real_scalar(damping), {call_sign}{''.join(f', {o}' for o in fn.options)})"),
            "if check_finite:",
            f"    raise_if_not_finite({fn.name!r}, status, {_arguments_dict(args)}, _caller)",
            "return outputs" + ("[0]" if len(fn.outputs) == 1 else ""))
    doc = check_docstring(docstring(fn, ARG_DOC if uses_msign else NO_MSIGN_DOC), f"docstring of {fn.name}")
    return FunctionSpec(fn.name, tuple(Parameter(a) for a in args), tuple(keywords), docstring=doc,
                        checks=checks, body=body)


def _option_checks(fn: EmittedFunction) -> list[str]:
    """The checks of the public entry point after ``validate_inputs``: options, extra scalars, a positive λ."""
    checks = []
    for o, (_, allowed) in fn.options.items():
        checks += [f"if {o} not in {tuple(allowed)!r}:",
                   f"    raise ValueError(f\"{fn.name}: {o} must be one of {tuple(allowed)!r}, got {{{o}!r}}\")"]
    for n in fn.extra_scalars.values():
        checks += [f"if not isinstance({n}, jax.core.Tracer):",
                   f"    check_scalar({fn.name!r}, {n!r}, {n}, positive=True)"]
        if n == "group_size":
            checks += [f"    check_group({fn.name!r}, group_size, {fn.shapes()!r}, "
                       f"{_arguments_dict(fn.argument_names)})"]
    if fn.positive_damping:
        checks += ["if not isinstance(damping, jax.core.Tracer):  # the solve divides by 2·damping",
                   f"    check_scalar({fn.name!r}, 'damping', damping, positive=True)"]
    if "solver" in fn.options:
        checks += [f"check_dense_damping({fn.name!r}, solver, damping, {fn.argument_names[0]}, "
                   f"{fn.argument_names[1]})"]
    return checks


def _scaling(fn: EmittedFunction, scalars: dict, uses_msign: bool) -> tuple[list[str], list[str], list[str]]:
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
    lost = []
    for j, (out, _) in enumerate(fn.outputs):
        terms = [f"{d.numerator} * (k_{i} // {d.denominator})" if d.denominator != 1 else f"{d.numerator} * k_{i}"
                 for i, group in enumerate(plan, 1) for d in [group.degrees[j]] if d != 0]
        if terms:
            lost.append(f"lost_{j + 1}")
            last.append(f"{out}, {lost[-1]} = pow2_unscale({out}, -({' + '.join(terms)}), "
                        f"{fn.argument_names[0]}.dtype)")
    return first, last, lost
