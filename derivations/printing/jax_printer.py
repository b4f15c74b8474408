"""JAX printer: a jitted, batched module that imports only ``jax`` and ``functools``."""

from __future__ import annotations

from numerics import jax_kernels as K

from .array_module import docstring, header
from ..vocabulary import Msign
from .codegen import EmittedFunction, MatrixCodePrinter, kernel_source

KERNELS = (K.compute_dtype, K.gram_eigh, K.gram_eigh_stacked, K.psd_power, K.isotropic_scale, K.msign_svd,
           K.newton_schulz, K.spectral_sign, K.spectral_sign_stacked, K.all_finite, K.raise_if_not_finite,
           K.validate_inputs, K.sylvester_lowrank, K.sylvester_dense, K.sylvester_solve,
           K.sylvester_gram, K.block_right)


class JaxPrinter(MatrixCodePrinter):
    """``_print_<Node>`` rules that call the inlined JAX kernels.

    Same-shape eigendecompositions and spectral signs are stacked into one batched call: fewer
    kernel launches, and on the CPU it avoids running two LAPACK kernels at once, which
    deadlocks jaxlib 0.10's thread pool on small machines (see ``gram_eigh_stacked``).
    """

    printmethod = "_jaxcode"  # a node may carry its own rule for this target

    stack_heavy = True
    blocked_partners = True

    def _stacked_msign(self, args):
        return f"spectral_sign_stacked(({', '.join(args)}), msign, schedule)"

    def _print_Msign(self, expr):
        return f"spectral_sign({self._print(expr.arg)}, msign, schedule)"

    def _print_GramInvSqrt(self, expr):
        return f"psd_power({self._eigh(expr)}, -0.5, {self._print(expr.base)}.dtype)"

    def _print_GramSqrt(self, expr):
        return f"psd_power({self._eigh(expr)}, 0.5, {self._print(expr.base)}.dtype)"

    def _print_RegularizedSylvester(self, expr):
        if expr.side == "inner":
            return (f"sylvester_gram({self._print(expr.left)}, {self._print(expr.right)}, damping, "
                    f"{self._print(expr.rhs)})")
        return (f"sylvester_solve({self._print(expr.left)}, {self._print(expr.right)}, "
                f"{self._scalar(expr.damping)}, {self._print(expr.rhs)}, solver)")

    def _print_IsotropicScale(self, expr):
        return f"isotropic_scale({self._print(expr.base)}, damping)"


ARG_DOC = """Arguments after * : eps (step budget ε >= 0), damping (λ >= 0), msign ("newton_schulz"
    or "svd"), schedule (Newton–Schulz steps, a tuple of coefficient tuples), check_finite
    (raise if an input or the update is NaN/Inf; skipped under an outer jit). Returns the update(s) to add, in the
    input dtype."""


NO_MSIGN_DOC = """Arguments after * : damping (λ >= 0), check_finite (raise if an input or the result is
    NaN/Inf; skipped under an outer jit). Returns the result(s) in the input dtype."""


def emit_jax(title: str, command: str, functions: list[EmittedFunction], schedule_name: str,
             schedule: tuple, schedule_source: str, msign_default: str, scalars: dict,
             extra_source: str = "", extra_names: tuple = ()) -> str:
    """The module text (deterministic byte for byte)."""
    extra = ["", f"Newton–Schulz schedule: {schedule_name} ({schedule_source}).",
             f"Default msign method: {msign_default}."]
    parts = [header(title, command, functions, extra),
             "import functools\n\nimport jax\nimport jax.numpy as jnp\n",
             f"__all__ = {sorted([fn.name for fn in functions] + list(extra_names))!r}\n",
             f"MSIGN_METHODS = {K.MSIGN_METHODS!r}\n",
             "NS_SCHEDULE = (\n" + "".join(f"    {tuple(step)!r},\n" for step in schedule) + ")\n",
             "\n" + kernel_source(KERNELS) + "\n"]
    for fn in functions:
        parts.append(_function(fn, scalars, msign_default))
    if extra_source:
        parts.append("\n" + extra_source)
    return "\n".join(parts).rstrip() + "\n"


def _function(fn: EmittedFunction, scalars: dict, msign_default: str) -> str:
    args = fn.argument_names
    printer = JaxPrinter({a: a for a in args}, {**scalars, **fn.extra_scalars})
    body = printer.body([(out, der.formula) for out, der in fn.outputs])
    dtype_of = args[0]
    extra = list(fn.extra_scalars.values())
    extra_params = "".join(f", {n}" for n in extra)
    opts = list(fn.options)
    static = ", ".join(f'"{o}"' for o in ["msign", "schedule", *opts])
    opt_params = "".join(f", {o}" for o in opts)
    opt_kw = "".join(f", {o}={d!r}" for o, (d, _) in fn.options.items())
    opt_checks = []
    for o, (_, allowed) in fn.options.items():
        opt_checks += [f"    if {o} not in {tuple(allowed)!r}:",
                       f"        raise ValueError(f\"{fn.name}: {o} must be one of {tuple(allowed)!r}, got {{{o}!r}}\")"]
    for n in extra:
        opt_checks += [f"    if not isinstance({n}, jax.core.Tracer) and not 0 < float({n}) < float('inf'):",
                       f"        raise ValueError(f\"{fn.name}: {n} must be finite and > 0, got {{{n}}}\")"]
    if fn.positive_damping:
        opt_checks += ["    if not isinstance(damping, jax.core.Tracer) and not float(damping) > 0:",
                       f"        raise ValueError(f\"{fn.name}: damping must be > 0 (the regularized solve divides by "
                       f"2·damping), got {{damping}}\")"]
    uses_msign = any(der.formula.has(Msign) for _, der in fn.outputs)
    sign_kw = f"msign={msign_default!r}, schedule=NS_SCHEDULE" if uses_msign else ""
    sign_args = "msign, schedule" if uses_msign else "'svd', ()"  # no msign in the formula: nothing to choose
    arg_doc = ARG_DOC if uses_msign else NO_MSIGN_DOC
    names = [out for out, _ in fn.outputs]
    casts = "".join(f"    {out} = {out}.astype({dtype_of}.dtype)\n" for out in names)
    outs = "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"
    core = [
        "",
        f'@functools.partial(jax.jit, static_argnames=({static},))',
        f"def _{fn.name}({', '.join(args)}, eps{extra_params}, damping, msign, schedule{opt_params}):",
        *[f"    {line}" for line in body],
        casts.rstrip("\n"),
        f"    return {outs}, all_finite({outs})",
        "",
        "",
        f"def {fn.name}({', '.join(args)}, *, {'eps, ' if fn.needs_eps else ''}{''.join(n + ', ' for n in extra)}"
        f"{'damping' if fn.positive_damping else 'damping=0.0'}, "
        f"{sign_kw + ', ' if sign_kw else ''}{opt_kw.lstrip(', ') + ', ' if opt_kw else ''}check_finite=True):",
        docstring(fn, arg_doc),
        f"    validate_inputs({fn.name!r}, {fn.shapes()!r},",
        f"                    {{{', '.join(f'{a!r}: {a}' for a in args)}}},",
        f"                    {'eps' if fn.needs_eps else '0.0'}, damping, {sign_args})",
        *opt_checks,
        f"    outputs, finite = _{fn.name}({', '.join(args)}, {'eps' if fn.needs_eps else '0.0'}{extra_params}, "
        f"damping, {sign_args}{opt_params})",
        "    if check_finite:",
        f"        raise_if_not_finite({fn.name!r}, finite, {{{', '.join(f'{a!r}: {a}' for a in args)}}})",
        "    return outputs" + ("[0]" if len(fn.outputs) == 1 else ""),
    ]
    return "\n".join(core) + "\n"
