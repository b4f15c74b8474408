"""JAX printer: a jitted, batched module that imports ``jax``, ``functools`` and the routines its code calls.

By default the routines come from :mod:`foundation.compute.jax_runtime` (one import naming exactly the names the
printed code reads); a standalone module (``--emit jax --standalone``) inlines the source of the routines its code
reaches instead, with the constants they read, and imports only ``jax`` and ``functools``.
"""

from __future__ import annotations

import shlex
import textwrap

from sympy.matrices.expressions import Transpose

from derivations.engine.rule import EmittedFunction
from derivations.printing.array_module import docstring, header
from derivations.printing.codegen import (
    UnsupportedNode,
    check_docstring,
    check_identifier,
    check_resolved,
    docstring_fragment,
    routine_parts,
)
from derivations.printing.function_spec import FunctionSpec, Parameter, checked_name, render_functions
from derivations.printing.split_mode import SHARED_NOTES, Computation, ScaledPrinter, compute
from derivations.vocabulary.nodes import RegularizedSylvester
from foundation.compute import jax_runtime
from foundation.schedule import Schedule

#: the comment each constant gets where a standalone module defines it
CONSTANT_NOTES = {
    "GRAM_ASPECT": "msign='auto': Gram Newton–Schulz when long side > this * short side",
    "GRAM_RESTARTS": "default restart positions of Gram Newton–Schulz",
    "GRAM_ROUTE_RATIO": "Gram eigh while e_min >= this * e_max, else QR + SVD of W",
    "MAX_SCHEDULE_STEPS": "longer schedules are refused",
    **SHARED_NOTES,
}


class JaxPrinter(ScaledPrinter):
    """``_print_<Node>`` rules that call the JAX routines (:mod:`foundation.compute.jax_runtime`).

    Same-shape eigendecompositions and spectral signs are stacked into one batched call: fewer
    compiled ops, and on the CPU it avoids running two LAPACK calls at once, which
    can deadlock jaxlib 0.10's thread pool (see ``per_matrix_on_cpu``).
    """

    printmethod = "_jaxcode"  # a node may carry its own rule for this target

    stack_heavy = True
    blocked_partners = True
    sylvester_options = ", solver"

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
    (raise if an input or the update is NaN/Inf). Returns the update(s) to add, in the input dtype.
    """ + CHECKS_DOC


NO_MSIGN_DOC = """Arguments after * : damping (λ >= 0), check_finite (raise if an input or the result is
    NaN/Inf). Returns the result(s) in the input dtype.
    """ + CHECKS_DOC


def emit_jax(title: str, command: str, functions: list[EmittedFunction], schedule: Schedule,
             msign_default: str, scalars: dict, extra_source: str = "", extra_names: tuple = (),
             standalone: bool = False, root_schedules: dict | None = None) -> str:
    """The module text (deterministic byte for byte).

    ``schedule`` is the default Newton–Schulz schedule, a :class:`~foundation.schedule.Schedule`: validated
    where it was made (its coefficients finite float64 numbers), so it is taken as it is here. The routines the
    printed code calls are imported from :mod:`foundation.compute.jax_runtime`, or with ``standalone`` inlined:
    those it reaches and the constants they read (:func:`~derivations.printing.codegen.routine_parts`).
    ``root_schedules``: the certified inverse-root schedules by root ``q`` (:func:`root_schedule_constant`).
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a foundation.schedule.Schedule (validated where it is made), "
                        f"got {type(schedule).__name__}")
    if msign_default not in jax_runtime.MSIGN_METHODS:
        raise ValueError(f"msign_default must be one of {jax_runtime.MSIGN_METHODS!r}, got {msign_default!r}")
    for public in [fn.name for fn in functions] + list(extra_names):
        check_identifier(public, "emitted function name")
    head = check_docstring(module_docstring(title, command, functions, schedule, msign_default), "module docstring")
    own = [f"__all__ = {sorted([fn.name for fn in functions] + list(extra_names))!r}\n",
           "NS_SCHEDULE = (\n" + "".join(f"    {step!r},\n" for step in schedule.as_floats()) + ")\n"]
    printed = [render_functions(list(function_specs(fn, scalars, msign_default))) for fn in functions]
    printed += ["\n" + extra_source] if extra_source else []
    own += root_schedule_constant("\n".join(printed), root_schedules)
    imported, constants, routines = routine_parts("\n".join(own + printed), jax_runtime, standalone, CONSTANT_NOTES)
    parts = [head, "import functools\n\nimport jax\nimport jax.numpy as jnp\n" + ("\n" + imported if imported else ""),
             own[0], *([constants] if constants else []), *own[1:], *(["\n" + routines + "\n"] if routines else []),
             *printed]
    return check_resolved("\n".join(parts).rstrip() + "\n", "the emitted JAX module")


def root_schedule_constant(printed: str, root_schedules: dict | None) -> list[str]:
    """``INVERSE_ROOT_SCHEDULES = {q: steps, …}`` where the printed code reads it (an inverse root ``X^{-1/q}`` in a
    function with the ``root`` option): the certified schedules of :mod:`coeffsearch.inverse_root_registry`, one
    tuple of ascending factor coefficients per step, which ``root="newton_schulz"`` runs."""
    if "INVERSE_ROOT_SCHEDULES" not in printed:
        return []
    if not root_schedules:
        raise ValueError("the printed code takes inverse roots by Newton–Schulz but no certified schedule was given")
    rows = "".join(f"    {q}: {tuple(tuple(s) for s in steps)!r},\n" for q, steps in sorted(root_schedules.items()))
    return ["INVERSE_ROOT_SCHEDULES = {\n" + rows + "}\n"]


def module_docstring(title: str, command: str, functions: list[EmittedFunction], schedule: Schedule,
                     msign_default: str, target: str = "") -> str:
    """The module docstring: the header of every emitted module (``target``: a note after the title, such as
    ``" (PyTorch)"``), then the schedule and the msign default.

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
    return header(docstring_fragment(title) + target, docstring_fragment(command), functions, extra)


def function_specs(fn: EmittedFunction, scalars: dict,
                   msign_default: str) -> tuple[FunctionSpec, FunctionSpec, FunctionSpec]:
    """The three functions emitted for ``fn``: the jitted core ``_<name>``, the public entry point ``<name>`` and
    ``_checked_<name>``, which runs the checks and the core for both ``<name>`` and the stored-layout entry points
    (their errors name the entry point and its stored arguments: :mod:`derivations.printing.layout`)."""
    for name in [*fn.argument_names, *(out for out, _ in fn.outputs), *fn.options, *fn.extra_scalars.values(),
                 *scalars.values()]:
        check_identifier(name, f"{fn.name}: argument or output name")
    computation = compute(fn, scalars, JaxPrinter)
    keywords = public_keywords(fn, computation.uses_msign, msign_default)
    return (_core_spec(fn, computation), public_spec(fn, keywords, computation.uses_msign, (ARG_DOC, NO_MSIGN_DOC)),
            _checked_spec(fn, keywords, computation.uses_msign))



def arguments_dict(args: list[str]) -> str:
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


def public_keywords(fn: EmittedFunction, uses_msign: bool, msign_default: str) -> tuple[Parameter, ...]:
    """The keyword-only parameters of ``<name>``, with their defaults (``<name>``'s public signature after ``*``)."""
    extra = fn.extra_scalars.values()
    return (*([Parameter("eps")] if fn.needs_eps else []), *(Parameter(n) for n in extra),
            Parameter("damping", None if fn.positive_damping else "0.0"),
            *([Parameter("msign", repr(msign_default)), Parameter("schedule", "NS_SCHEDULE"),
               Parameter("restarts", "None"), Parameter("gram_aspect", "None")] if uses_msign else []),
            *(Parameter(o, repr(default)) for o, (default, _) in fn.options.items()),
            Parameter("check_finite", "True"))


def public_spec(fn: EmittedFunction, keywords: tuple[Parameter, ...], uses_msign: bool,
                docs: tuple[str, str]) -> FunctionSpec:
    """``<name>``: its arguments and keyword scalars with their defaults, passed on to ``_checked_<name>``;
    ``docs``: the target's argument paragraphs with and without msign."""
    passed = ", ".join([*fn.argument_names, *(f"{k.name}={k.name}" for k in keywords), "caller=None"])
    doc = check_docstring(docstring(fn, docs[0] if uses_msign else docs[1]), f"docstring of {fn.name}")
    return FunctionSpec(fn.name, tuple(Parameter(a) for a in fn.argument_names), keywords, docstring=doc,
                        body=(f"return {checked_name(fn.name)}({passed})",))


def _checked_spec(fn: EmittedFunction, keywords: tuple[Parameter, ...], uses_msign: bool) -> FunctionSpec:
    """``_checked_<name>``: the argument checks, the core's call and the finite check; errors name ``caller``
    (a stored-layout entry point's name and stored arguments) where it is given, else ``<name>`` and its own."""
    args = fn.argument_names
    # no msign in the formula: nothing to choose
    sign_args = "msign, schedule, restarts, gram_aspect" if uses_msign else "'svd', ()"
    checks = (f"validate_inputs({fn.name!r} if caller is None else caller[0], {fn.shapes()!r},",
              f"                {arguments_dict(args)},",
              f"                {'eps' if fn.needs_eps else '0.0'}, damping, {sign_args})",
              *_option_checks(fn))
    call_sign = ("msign, schedule_array(schedule) if msign != 'svd' else None, "
                 "gram_flags(msign, schedule, restarts), gram_aspect" if uses_msign else "'svd', None, None, None")
    scalars = "".join(f", real_scalar({n})" for n in fn.extra_scalars.values())
    body = ((f"outputs, status = _{fn.name}({', '.join(args)}, {'real_scalar(eps)' if fn.needs_eps else '0.0'}"
             f"{scalars}, real_scalar(damping), {call_sign}{''.join(f', {o}' for o in fn.options)})"),
            "if check_finite:",
            f"    raise_if_not_finite({fn.name!r}, status, {arguments_dict(args)}, caller)",
            "return outputs" + ("[0]" if len(fn.outputs) == 1 else ""))
    doc = (f'    """{fn.name}, its errors naming ``caller`` (the name and the stored arguments of a stored-layout '
           f'entry point)\n    where it is given."""')
    return FunctionSpec(checked_name(fn.name), tuple(Parameter(a) for a in args),
                        keywords + (Parameter("caller"),),
                        docstring=check_docstring(doc, f"docstring of {checked_name(fn.name)}"),
                        checks=checks, body=body)


def _option_checks(fn: EmittedFunction) -> list[str]:
    """The checks of ``_checked_<name>`` after ``validate_inputs``: options, extra scalars, a positive λ."""
    checks = []
    for o, (_, allowed) in fn.options.items():
        checks += [f"if {o} not in {tuple(allowed)!r}:",
                   f"    raise ValueError(f\"{fn.name}: {o} must be one of {tuple(allowed)!r}, got {{{o}!r}}\")"]
    for n in fn.extra_scalars.values():
        checks += [f"if not isinstance({n}, jax.core.Tracer):",
                   f"    check_scalar({fn.name!r}, {n!r}, {n}, positive=True)"]
        if n == "group_size":
            checks += [f"    check_group({fn.name!r}, group_size, {fn.shapes()!r}, "
                       f"{arguments_dict(fn.argument_names)})"]
    if fn.positive_damping:
        checks += ["if not isinstance(damping, jax.core.Tracer):  # the solve divides by 2·damping",
                   f"    check_scalar({fn.name!r}, 'damping', damping, positive=True)"]
    if "solver" in fn.options:
        checks += [f"check_dense_damping({fn.name!r}, solver, damping, {fn.argument_names[0]}, "
                   f"{fn.argument_names[1]})"]
    return checks
