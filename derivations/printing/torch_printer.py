"""PyTorch printer: an eager, batched module that imports ``torch`` and the routines its code calls.

By default the routines come from :mod:`foundation.compute.torch_runtime` (one import naming exactly the names the
printed code reads); a standalone module (``--emit torch --standalone``) inlines the source of the routines its
code reaches instead, with the constants they read, and imports only ``torch``. The formulas are printed by the
JAX printer's rules (:class:`~derivations.printing.jax_printer.JaxPrinter`: the routines have the same names and
signatures in both runtimes) with PyTorch's cast (``.to``); the functions have the JAX module's names,
arguments, defaults and checks. Stored-layout adapters are printed by
:mod:`derivations.printing.layout`, their array calls renamed to PyTorch's by :data:`ADAPTER_CALLS`.
"""

from __future__ import annotations

import re

from derivations.engine.rule import EmittedFunction
from derivations.printing.codegen import (
    UnsupportedNode,
    check_docstring,
    check_identifier,
    check_resolved,
    routine_parts,
)
from derivations.printing.function_spec import FunctionSpec, Parameter, checked_name, render_functions
from derivations.printing.jax_printer import (
    CONSTANT_NOTES,
    JaxPrinter,
    arguments_dict,
    module_docstring,
    public_keywords,
    public_spec,
    root_schedule_constant,
)
from derivations.printing.layout import adapter_source
from derivations.printing.split_mode import Computation, compute
from foundation.compute import torch_runtime
from foundation.schedule import Schedule


class TorchPrinter(JaxPrinter):
    """The JAX printer's ``_print_<Node>`` rules (the PyTorch runtime has the same routines), with PyTorch's cast;
    a node's own rule for this target is its ``_torchcode`` method."""

    printmethod = "_torchcode"

    @staticmethod
    def _cast(code: str, like: str) -> str:
        return f"{code}.to({like}.dtype)"

    def _split_matrix(self, m):
        """A factor of a split output; one that is not a root's mantissa (a sign, a gradient: in the input dtype)
        is cast to the compute dtype the mantissas are in, as JAX's type promotion does for 16-bit inputs
        (``torch.matmul`` takes one dtype)."""
        code, exponent = super()._split_matrix(m)
        if exponent is None:
            code = f"{code}.to(compute_dtype({self.dtype_of}.dtype))"
        return code, exponent

    def _print_AspectScale(self, expr):
        """``√(m/n)`` of an ``m × n`` matrix, read off its shape."""
        code = self._print(expr.args[0])
        if not code.isidentifier():
            self.counter += 1
            self.lines.append(f"t_{self.counter} = {code}")
            code = f"t_{self.counter}"
        return f"({code}.shape[-2] / {code}.shape[-1]) ** 0.5"

    def _print_Expr(self, expr):
        """A scalar; a node that prints itself for JAX and NumPy only (``_jaxcode``) has no PyTorch rule here."""
        if hasattr(expr, "_jaxcode"):
            raise UnsupportedNode(f"TorchPrinter has no rule for {type(expr).__name__}: {expr}")
        return super()._print_Expr(expr)


#: the array calls of a printed stored-layout adapter (:mod:`derivations.printing.layout`) and their PyTorch
#: spelling; an adapter that calls anything else of ``jnp`` is refused (:func:`torch_adapter_source`)
ADAPTER_CALLS = (("jnp.asarray(", "torch.as_tensor("), ("jnp.repeat(", "torch.repeat_interleave("),
                 ("jnp.stack(", "torch.stack("), ("jnp.concatenate(", "torch.cat("), (", axis=", ", dim="))


def torch_adapter_source(adapters) -> tuple[str, tuple]:
    """``(source, public names)`` of the stored-layout adapters, with :data:`ADAPTER_CALLS` applied."""
    sources, names = [], []
    for adapter in adapters:
        text, entry = adapter_source(adapter)
        for jax_call, torch_call in ADAPTER_CALLS:
            text = text.replace(jax_call, torch_call)
        left = re.search(r"\bjnp\.\w+|\bjax\.\w+", text)
        if left:
            raise UnsupportedNode(f"layout adapter {adapter.name}: no PyTorch spelling for {left.group(0)}")
        sources.append(text)
        names += list(entry)
    return "\n\n".join(sources), tuple(names)


CHECKS_DOC = """Inputs are checked first: torch.Tensor arguments of one real floating dtype (bool, integer
    and complex tensors are refused) and their shapes, eps, damping and the schedule, each error one
    line naming the function and the argument. A NaN/Inf input never reaches LAPACK: it makes the whole
    result NaN, and check_finite=True then raises a ValueError naming the input. Undamped rank-deficient
    partners give the minimum-norm update (pseudo-inverse roots); use damping > 0 to regularize. Results
    are right at any input scale while they are representable: roots and scalars carry their powers of
    two apart until the last step; an overflow or an underflow (largest entry below tiny/(16 eps) of the
    compute dtype, or below the smallest normal number for float16) raises a ValueError naming the
    arguments and their sizes. Runs under torch.no_grad() whatever the caller's mode. Under torch.compile
    the checks and the error are graph breaks and still raise (nothing becomes NaN silently)."""

ARG_DOC = """Arguments after * : eps (step budget ε >= 0), damping (λ >= 0), msign ("newton_schulz",
    "svd", "gram_newton_schulz": the same schedule on the small Gram matrix, or "auto": the Gram
    form where long side > gram_aspect * short side), schedule (Newton–Schulz steps: a tuple of
    coefficient tuples or a float tensor (steps, k+1)), restarts (the Gram form's restart positions s,
    1 <= s <= steps - 1; None: the positions certified for the schedule in the input dtype; where none
    are, "auto" runs the standard iteration and "gram_newton_schulz" is refused), gram_aspect (None:
    GRAM_ASPECT), check_finite (raise if an input or the update is NaN/Inf). Returns the update(s) to
    add, in the input dtype.
    """ + CHECKS_DOC

NO_MSIGN_DOC = """Arguments after * : damping (λ >= 0), check_finite (raise if an input or the result is
    NaN/Inf). Returns the result(s) in the input dtype.
    """ + CHECKS_DOC


def emit_torch(title: str, command: str, functions: list[EmittedFunction], schedule: Schedule,
               msign_default: str, scalars: dict, adapters=(), standalone: bool = False,
               root_schedules: dict | None = None) -> str:
    """The module text (deterministic byte for byte): the functions of the JAX module, in PyTorch.

    ``schedule`` is the default Newton–Schulz schedule (a validated :class:`~foundation.schedule.Schedule`);
    ``adapters``: the rule's stored-layout adapters (:class:`~derivations.printing.layout.Adapter`). The routines
    are imported from :mod:`foundation.compute.torch_runtime`, or with ``standalone`` inlined.
    """
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a foundation.schedule.Schedule (validated where it is made), "
                        f"got {type(schedule).__name__}")
    if msign_default not in torch_runtime.MSIGN_METHODS:
        raise ValueError(f"msign_default must be one of {torch_runtime.MSIGN_METHODS!r}, got {msign_default!r}")
    extra_source, extra_names = torch_adapter_source(adapters) if adapters else ("", ())
    for public in [fn.name for fn in functions] + list(extra_names):
        check_identifier(public, "emitted function name")
    head = check_docstring(module_docstring(title, command, functions, schedule, msign_default, " (PyTorch)"),
                           "module docstring")
    own = [f"__all__ = {sorted([fn.name for fn in functions] + list(extra_names))!r}\n",
           "NS_SCHEDULE = (\n" + "".join(f"    {step!r},\n" for step in schedule.as_floats()) + ")\n"]
    printed = [render_functions(list(function_specs(fn, scalars, msign_default))) for fn in functions]
    printed += ["\n" + extra_source] if extra_source else []
    own += root_schedule_constant("\n".join(printed), root_schedules)
    imported, constants, routines = routine_parts("\n".join(own + printed), torch_runtime, standalone,
                                                  CONSTANT_NOTES)
    parts = [head, "import torch\n" + ("\n" + imported if imported else ""), own[0],
             *([constants] if constants else []), *own[1:], *(["\n" + routines + "\n"] if routines else []),
             *printed]
    return check_resolved("\n".join(parts).rstrip() + "\n", "the emitted PyTorch module")


def function_specs(fn: EmittedFunction, scalars: dict,
                   msign_default: str) -> tuple[FunctionSpec, FunctionSpec, FunctionSpec]:
    """The three functions emitted for ``fn``, as in the JAX module: the core ``_<name>`` (the formulas), the public
    ``<name>`` and ``_checked_<name>`` (the checks and the core, for ``<name>`` and the stored-layout entry
    points, whose errors name the entry point and its stored arguments)."""
    for name in [fn.name, *fn.argument_names, *(out for out, _ in fn.outputs), *fn.extra_scalars.values(),
                 *scalars.values()]:
        check_identifier(name, f"{fn.name}: function, argument or output name")
    computation = compute(fn, scalars, TorchPrinter)
    keywords = public_keywords(fn, computation.uses_msign, msign_default)
    return (_core_spec(fn, computation), public_spec(fn, keywords, computation.uses_msign, (ARG_DOC, NO_MSIGN_DOC)),
            _checked_spec(fn, keywords, computation.uses_msign))


def _core_spec(fn: EmittedFunction, c: Computation) -> FunctionSpec:
    """``_<name>``: the printed formulas on checked arguments; ``(outputs, status)``, NaN outputs unless status 0."""
    args, extra, opts = fn.argument_names, list(fn.extra_scalars.values()), list(fn.options)
    names = [out for out, _ in fn.outputs]
    outs = "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"
    lost = f", {' | '.join(c.lost)}" if c.lost else ""
    flagged = f", flagged={c.flagged!r}" if any(c.flagged) else ""
    body = (*c.lines,
            *(f"{out} = {out}.to({args[0]}.dtype)" for out in names),
            f"status = output_status({outs}{lost}{flagged})  # a NaN/Inf input reaches every output computed from it",
            f"return nan_unless(status == 0, {outs}), status")
    return FunctionSpec(f"_{fn.name}",
                        tuple(Parameter(p) for p in [*args, "eps", *extra, "damping", "msign", "schedule", "restarts",
                                                    "gram_aspect", *opts]), body=body)


def _checked_spec(fn: EmittedFunction, keywords: tuple[Parameter, ...], uses_msign: bool) -> FunctionSpec:
    """``_checked_<name>``: the argument checks, the core's call under ``torch.no_grad()`` and the finite check;
    errors name ``caller`` (a stored-layout entry point's name and stored arguments) where it is given."""
    args, extra = fn.argument_names, list(fn.extra_scalars.values())
    sign_args = "msign, schedule, restarts, gram_aspect" if uses_msign else "'svd', ()"
    checks = (f"validate_inputs({fn.name!r} if caller is None else caller[0], {fn.shapes()!r},",
              f"                {arguments_dict(args)},",
              f"                {'eps' if fn.needs_eps else '0.0'}, damping, {sign_args})",
              *_option_checks(fn))
    call_sign = ("msign, schedule_array(schedule) if msign != 'svd' else None, "
                 "gram_flags(msign, schedule, restarts), gram_aspect" if uses_msign else "'svd', None, None, None")
    scalars = "".join(f", real_scalar({n})" for n in extra)
    body = ("with torch.no_grad():  # an update, not a function to differentiate",
            (f"    outputs, status = _{fn.name}({', '.join(args)}, {'real_scalar(eps)' if fn.needs_eps else '0.0'}"
             f"{scalars}, real_scalar(damping), {call_sign}{''.join(f', {o}' for o in fn.options)})"),
            "if check_finite:",
            f"    raise_if_not_finite({fn.name!r}, status, {arguments_dict(args)}, caller)",
            "return outputs" + ("[0]" if len(fn.outputs) == 1 else ""))
    doc = (f'    """{fn.name}, its errors naming ``caller`` (the name and the stored arguments of a stored-layout '
           f'entry point)\n    where it is given."""')
    return FunctionSpec(checked_name(fn.name), tuple(Parameter(a) for a in args), keywords + (Parameter("caller"),),
                        docstring=check_docstring(doc, f"docstring of {checked_name(fn.name)}"),
                        checks=checks, body=body)


def _option_checks(fn: EmittedFunction) -> list[str]:
    """The checks after ``validate_inputs``: options, extra scalars (and the group they fix), a positive λ."""
    checks = []
    for o, (_, allowed) in fn.options.items():
        checks += [f"if {o} not in {tuple(allowed)!r}:",
                   f"    raise ValueError(f\"{fn.name}: {o} must be one of {tuple(allowed)!r}, got {{{o}!r}}\")"]
    for n in fn.extra_scalars.values():
        checks += [f"check_scalar({fn.name!r}, {n!r}, {n}, positive=True)"]
        if n == "group_size":
            checks += [f"check_group({fn.name!r}, group_size, {fn.shapes()!r}, {arguments_dict(fn.argument_names)})"]
    if fn.positive_damping:
        checks += [f"check_scalar({fn.name!r}, 'damping', damping, positive=True)  # the solve divides by 2·damping"]
    if "solver" in fn.options:
        checks += [f"check_dense_damping({fn.name!r}, solver, damping, {fn.argument_names[0]}, "
                   f"{fn.argument_names[1]})"]
    return checks
