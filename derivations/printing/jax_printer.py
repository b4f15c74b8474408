"""JAX printer: a jitted, batched module that imports only ``jax`` and ``functools``."""

from __future__ import annotations

import math
import shlex
import textwrap

from sympy.matrices.expressions import MatMul, Transpose

from derivations.engine.vocabulary import BLOCK_DIAGONAL, GramInvSqrt, GramSqrt, Msign, RegularizedSylvester, facts_of
from derivations.printing.array_module import docstring, header
from derivations.printing.codegen import (
    EmittedFunction,
    MatrixCodePrinter,
    UnsupportedNode,
    check_docstring,
    check_identifier,
    docstring_fragment,
    kernel_source,
)
from derivations.printing.scaling import scaling_plan
from numerics.kernels import jax_kernels as K

KERNELS = (K.compute_dtype, K.lapack_guard, K.max_abs, K.float_layout, K.pow2, K.pow2_scale, K.pow2_normalize,
           K.scale_group, K.underflow_limit, K.pow2_unscale, K.unit_scale, K.real_scalar, K.per_matrix_on_cpu, K.scale_with_damping,
           K.right_singular, K.gram_eigh, K.gram_eigh_stacked, K.psd_power,
           K.isotropic_scale, K.msign_svd, K.schedule_array, K.newton_schulz, K._newton_schulz_oriented, K.spectral_sign,
           K.spectral_sign_stacked, K.output_status, K.nan_unless, K.raise_if_not_finite, K.check_scalar,
           K.check_shapes, K.check_group,
           K.check_schedule, K.validate_inputs, K.safe_ratio, K.sylvester_factor_svd, K.sylvester_products,
           K.sylvester_dense, K.sylvester_gram, K.block_right, K.require_arrays,
           K.check_dense_damping)


class JaxPrinter(MatrixCodePrinter):
    """``_print_<Node>`` rules that call the inlined JAX kernels.

    Same-shape eigendecompositions and spectral signs are stacked into one batched call: fewer
    kernel launches, and on the CPU it avoids running two LAPACK kernels at once, which
    can deadlock jaxlib 0.10's thread pool (see ``per_matrix_on_cpu``).
    """

    printmethod = "_jaxcode"  # a node may carry its own rule for this target

    stack_heavy = True
    blocked_partners = True

    def _stacked_msign(self, args):
        return f"spectral_sign_stacked(({', '.join(args)}), msign, schedule)"

    def _print_Msign(self, expr):
        return f"spectral_sign({self._unit_arg(expr.arg)}, msign, schedule)"

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
        whole = f"unit_scale({self._print(arg)})"
        if not isinstance(arg, MatMul):
            return whole
        coeff, mats = arg.as_coeff_matrices()
        if not coeff.is_Number or coeff == 0 or any(m.has(RegularizedSylvester) for m in mats):
            return whole
        blocked = [self.blocked_partners and isinstance(m, (GramSqrt, GramInvSqrt))
                   and BLOCK_DIAGONAL in facts_of(m.base) for m in mats]
        if any(blocked[:-1]) or (blocked[-1] and len(mats) < 2):
            return whole
        plain = mats[:-1] if blocked[-1] else mats
        code = " @ ".join(f"unit_scale({self._print(m)})" for m in plain)
        if blocked[-1]:  # the stacked blocks share one scale
            code = f"block_right({code}, unit_scale({self._print(mats[-1])}, axes=(-3, -2, -1)))"
        return f"-({code})" if coeff < 0 else code

    def _print_GramInvSqrt(self, expr):
        return f"psd_power({self._eigh(expr)}, -0.5, {self._print(expr.base)}.dtype)"

    def _print_GramSqrt(self, expr):
        return f"psd_power({self._eigh(expr)}, 0.5, {self._print(expr.base)}.dtype)"

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
        return f"isotropic_scale({self._print(expr.base)}, damping)"


CHECKS_DOC = """Inputs are checked where the computation starts: shapes and dtypes always (also under jit
    and vmap: they are static); eps, damping and schedule values when they are concrete. A NaN/Inf
    input never reaches LAPACK: it makes the whole result NaN, and check_finite=True then raises a
    ValueError naming the input (outside an outer jit/vmap, where nothing can be raised: check the
    result with jnp.isfinite there). Undamped rank-deficient partners give the minimum-norm update
    (pseudo-inverse roots, cut where a singular value of [W; √λ I] is at most max(d, d_h)·eps·σ_max;
    ill-conditioned partners get roots from the SVD of W, accurate to about eps·cond(W)); use
    damping > 0 to regularize. Results are right at any input scale while they and the Gram roots
    are representable; an overflow or an underflow (below tiny/(16 eps)) raises a ValueError."""

ARG_DOC = """Arguments after * : eps (step budget ε >= 0), damping (λ >= 0), msign ("newton_schulz"
    or "svd"), schedule (Newton–Schulz steps: a tuple of coefficient tuples or an array
    (steps, k+1), passed as data, so schedules of one shape share one compilation), check_finite
    (raise if an input or the update is NaN/Inf). Returns the update(s) to add, in the input dtype.
    """ + CHECKS_DOC


NO_MSIGN_DOC = """Arguments after * : damping (λ >= 0), check_finite (raise if an input or the result is
    NaN/Inf). Returns the result(s) in the input dtype.
    """ + CHECKS_DOC


def emit_jax(title: str, command: str, functions: list[EmittedFunction], schedule_name: str,
             schedule: tuple, schedule_source: str, msign_default: str, scalars: dict,
             extra_source: str = "", extra_names: tuple = ()) -> str:
    """The module text (deterministic byte for byte)."""
    for step in schedule:
        for c in step:
            if not (isinstance(c, float) and math.isfinite(c)):
                raise ValueError(f"schedule {schedule_name}: coefficient {c!r} is not a finite float64 number")
    if msign_default not in K.MSIGN_METHODS:
        raise ValueError(f"msign_default must be one of {K.MSIGN_METHODS!r}, got {msign_default!r}")
    for public in [fn.name for fn in functions] + list(extra_names):
        check_identifier(public, "emitted function name")
    # every caller-given string is escaped for the docstring (defence in depth: names are also checked where
    # they are read, coeffsearch.polynomial.NAME_PATTERN), and the header must parse as one string literal
    name, quoted = docstring_fragment(schedule_name), shlex.quote(schedule_name)
    escaped = docstring_fragment(quoted)
    extra = ["", f"Newton–Schulz schedule: {name} ({docstring_fragment(schedule_source)}).",
             f"Default msign method: {msign_default}.",
             *textwrap.wrap("The norm equalities above hold for the exact msign (msign=\"svd\"). Newton–Schulz "
                            "maps each singular value into the schedule's certified image instead of to 1 "
                            f"(python -m coeffsearch certify {escaped} "
                            "prints it), so with msign=\"newton_schulz\" they hold up to that factor.", 92,
                            break_long_words=escaped == quoted)]  # never split inside an escape sequence
    head = header(docstring_fragment(title), docstring_fragment(command), functions, extra)
    parts = [check_docstring(head, "module docstring"),
             "import functools\n\nimport jax\nimport jax.numpy as jnp\n",
             f"__all__ = {sorted([fn.name for fn in functions] + list(extra_names))!r}\n",
             f"MSIGN_METHODS = {K.MSIGN_METHODS!r}\n",
             f"UNROLL_LIMIT = {K.UNROLL_LIMIT!r}  # matrices per batched LAPACK call unrolled on the CPU\n",
             (f"GRAM_ROUTE_RATIO = {K.GRAM_ROUTE_RATIO!r}  # Gram eigh while e_min >= this * e_max, else QR + SVD "
              f"of W\nNS_UNROLL_STEPS = {K.NS_UNROLL_STEPS!r}  # Newton–Schulz schedules up to this long are "
              f"unrolled\nMAX_SCHEDULE_STEPS = {K.MAX_SCHEDULE_STEPS!r}  # longer schedules are refused\n"
              f"UNDERFLOW_BITS = {K.UNDERFLOW_BITS!r}  # an output below tiny * 2**(nmant - this) underflowed\n"),
             "NS_SCHEDULE = (\n" + "".join(f"    {tuple(step)!r},\n" for step in schedule) + ")\n",
             "\n" + kernel_source(KERNELS) + "\n"]
    for fn in functions:
        parts.append(_function(fn, scalars, msign_default))
    if extra_source:
        parts.append("\n" + extra_source)
    return "\n".join(parts).rstrip() + "\n"


def _function(fn: EmittedFunction, scalars: dict, msign_default: str) -> str:
    args = fn.argument_names
    for name in [*args, *(out for out, _ in fn.outputs), *fn.options, *fn.extra_scalars.values(), *scalars.values()]:
        check_identifier(name, f"{fn.name}: argument or output name")
    printer = JaxPrinter({a: a for a in args}, {**scalars, **fn.extra_scalars})
    body = printer.body([(out, der.formula) for out, der in fn.outputs])
    dtype_of = args[0]
    extra = list(fn.extra_scalars.values())
    extra_params = "".join(f", {n}" for n in extra)
    opts = list(fn.options)
    static = ", ".join(f'"{o}"' for o in ["msign", *opts])
    opt_params = "".join(f", {o}" for o in opts)
    opt_kw = "".join(f", {o}={d!r}" for o, (d, _) in fn.options.items())
    opt_checks = []
    for o, (_, allowed) in fn.options.items():
        opt_checks += [f"    if {o} not in {tuple(allowed)!r}:",
                       f"        raise ValueError(f\"{fn.name}: {o} must be one of {tuple(allowed)!r}, got {{{o}!r}}\")"]
    for n in extra:
        opt_checks += [f"    if not isinstance({n}, jax.core.Tracer):",
                       f"        check_scalar({fn.name!r}, {n!r}, {n}, positive=True)"]
        if n == "group_size":
            opt_checks += [f"        check_group({fn.name!r}, group_size, {fn.shapes()!r}, "
                           f"{{{', '.join(f'{a!r}: {a}' for a in args)}}})"]
    if fn.positive_damping:
        opt_checks += ["    if not isinstance(damping, jax.core.Tracer):  # the solve divides by 2·damping",
                       f"        check_scalar({fn.name!r}, 'damping', damping, positive=True)"]
    if "solver" in fn.options:
        opt_checks += [f"    check_dense_damping({fn.name!r}, solver, damping, {args[0]}, {args[1]})"]
    uses_msign = any(der.formula.has(Msign) for _, der in fn.outputs)
    scale_lines, unscale_lines, lost = _scaling(fn, scalars, uses_msign)
    valid = " & ".join([*(["(eps >= 0)"] if fn.needs_eps else []),
                        f"(damping {'>' if fn.positive_damping else '>='} 0)", *[f"({n} > 0)" for n in extra]])
    sign_kw = f"msign={msign_default!r}, schedule=NS_SCHEDULE" if uses_msign else ""
    sign_args = "msign, schedule" if uses_msign else "'svd', ()"  # no msign in the formula: nothing to choose
    call_sign = ("msign, schedule_array(schedule) if msign == 'newton_schulz' else None" if uses_msign
                 else "'svd', None")
    arg_doc = ARG_DOC if uses_msign else NO_MSIGN_DOC
    names = [out for out, _ in fn.outputs]
    casts = "".join(f"    {out} = {out}.astype({dtype_of}.dtype)\n" for out in names)
    outs = "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"
    core = [
        "",
        f'@functools.partial(jax.jit, static_argnames=({static},))',
        f"def _{fn.name}({', '.join(args)}, eps{extra_params}, damping, msign, schedule{opt_params}):",
        f"    valid = {valid}  # under an outer jit a bad scalar cannot be refused: NaN",
        *[f"    {line}" for line in scale_lines + body + unscale_lines],
        casts.rstrip("\n"),
        (f"    status = jnp.where(valid, output_status({outs}{', ' + ' | '.join(lost) if lost else ''}), 1)"
         "  # a NaN/Inf input reaches every output computed from it"),
        f"    return nan_unless(status == 0, {outs}), status",
        "",
        "",
        f"def {fn.name}({', '.join(args)}, *, {'eps, ' if fn.needs_eps else ''}{''.join(n + ', ' for n in extra)}"
        f"{'damping' if fn.positive_damping else 'damping=0.0'}, "
        f"{sign_kw + ', ' if sign_kw else ''}{opt_kw.lstrip(', ') + ', ' if opt_kw else ''}check_finite=True):",
        check_docstring(docstring(fn, arg_doc), f"docstring of {fn.name}"),
        f"    validate_inputs({fn.name!r}, {fn.shapes()!r},",
        f"                    {{{', '.join(f'{a!r}: {a}' for a in args)}}},",
        f"                    {'eps' if fn.needs_eps else '0.0'}, damping, {sign_args})",
        *opt_checks,
        (f"    outputs, status = _{fn.name}({', '.join(args)}, {'real_scalar(eps)' if fn.needs_eps else '0.0'}"
         f"{''.join(f', real_scalar({n})' for n in extra)}, real_scalar(damping), {call_sign}{opt_params})"),
        "    if check_finite:",
        f"        raise_if_not_finite({fn.name!r}, status, {{{', '.join(f'{a!r}: {a}' for a in args)}}})",
        "    return outputs" + ("[0]" if len(fn.outputs) == 1 else ""),
    ]
    return "\n".join(core) + "\n"


def _scaling(fn: EmittedFunction, scalars: dict, uses_msign: bool) -> tuple[list[str], list[str], list[str]]:
    """Lines that scale argument groups by powers of two at the start, and the outputs back at the end.

    Only for rules without msign: there the kernels and the unit-scaled msign arguments keep every
    intermediate in range; products of raw inputs elsewhere (``C_K W_QᵀW_Q C_K`` in the balancing gauge)
    need their arguments near 1 (:mod:`derivations.printing.scaling`).
    """
    if uses_msign:
        return [], [], []
    damping = {sym for sym, name in scalars.items() if name == "damping"}
    plan = scaling_plan(fn.argument_names, [der.formula for _, der in fn.outputs], damping)
    if not plan:
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
            last.append(f"{out}, {lost[-1]} = pow2_unscale({out}, -({' + '.join(terms)}))")
    return first, last, lost
