"""Stored-layout adapters printed from the reduction steps of the derivations.

A reduction step (Lemma K or J, :mod:`derivations.lemmas.blocks`) carries a
:class:`~derivations.lemmas.blocks.HeadLayout`: which stored weight its operand is made of, along
which axis that weight holds its heads, how the heads are arranged (a group stacked row-wise, or
diagonal blocks repeated over a group) and which stored weight holds the shared heads. From those
records and the emitted core functions' inputs and outputs this module prints the adapter that turns
the stored layouts into core calls and the updates back into the stored layouts:

* an input that is a reduction's operand: ``"stack_rows"`` → the stored heads reshaped into groups
  of ``G`` stacked row-wise; ``"diagonal"`` → the (transposed) stored heads as blocks, each repeated
  over its group;
* an input that is a reduction's shared weight, in another core call → its heads repeated over the
  group (head ``h`` pairs with shared head ``h // G``);
* any other stored input → its heads (split along its head axis), or the whole matrix in a call whose
  partner is block diagonal;
* an output ``dW_X`` → merged back along the head axis of the stored ``W_X`` (a block-diagonal call's
  output is already in the stored layout);
* ``"concat"`` (the joint rule, Lemma J): the stored weights as the blocks of one block-diagonal
  partner, the stored gradients side by side, and the output split back into its column blocks.

What the derivations say nothing about stays hand-written and is called by name: the array primitives
``split_heads``/``merge_heads`` (:mod:`foundation.compute.jax_head_layout`) and the input checks
(:mod:`foundation.compute.ov_layout`), imported from :mod:`foundation.compute.jax_runtime` by the emitted module
(or inlined into a standalone one) like every other routine it calls.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from derivations.lemmas.blocks import HeadLayout
from derivations.printing.codegen import UnsupportedNode
from derivations.printing.function_spec import checked_name

#: what an entry point with ``head_dim`` says about it (printed into its docstring)
HEAD_DIM_DOC = ("head_dim is the width d_h of one head, a positive int that divides both stored head widths, with "
                "H_kv dividing H; anything else is refused. Every such value is a valid layout and is computed as "
                "given: the arrays do not say how wide the model's heads are, so a head_dim that divides them but "
                "is not the model's (2 for heads of width 3 when both widths are even) cannot be refused.")


@dataclass(frozen=True)
class Adapter:
    """One stored-layout entry point: ``entry(*stored, *, head_dim?, eps, …)`` → core calls → stored updates.

    ``stored``: argument name → the axis holding its heads (``"columns"`` for ``(d, H·d_h)``, ``"rows"``
    for ``(H·d_h, d)``); ``calls``: ``(parameter name, EmittedFunction)`` in call order; ``check``: the
    input check (a function of :mod:`foundation.compute.ov_layout`), called with the stored arrays (and
    ``head_dim``), returning the group size.
    """

    name: str
    entry: str
    summary: str
    stored: dict
    calls: list
    check: str
    entry_doc: str = ""
    head_dim: bool = True
    notes: list = field(default_factory=list)
    #: stored sizes of its example call (``d``, ``d_h``; ``H``, ``H_kv`` with heads): overrides the rule's
    #: ``example_sizes`` (:mod:`derivations.printing.examples`)
    example_sizes: dict = field(default_factory=dict)


def layouts_of(function) -> list[HeadLayout]:
    """The :class:`HeadLayout` records carried by the steps of ``function``'s derivations."""
    out = []
    for der in function.derivations():
        for step in getattr(der, "steps", ()):
            layout = step.params.get("layout")
            if isinstance(layout, HeadLayout) and layout not in out:
                out.append(layout)
    return out


def _heads(name: str, axis: str, source: str | None = None) -> str:
    x = source or f"jnp.asarray({name})"
    return f"split_heads({x}, head_dim)" if axis == "columns" else f"split_heads({x}.mT, head_dim).mT"


def _merge(value: str, axis: str) -> str:
    return f"merge_heads({value})" if axis == "columns" else f"merge_heads({value}.mT).mT"


class AdapterPrinter:
    """Prints an :class:`Adapter` (a deterministic function of the reduction data)."""

    def __init__(self, adapter: Adapter):
        self.a = adapter
        self.all_layouts = [lay for _, fn in adapter.calls for lay in layouts_of(fn)]
        self.lines: list[str] = []

    def _fail(self, message):
        raise UnsupportedNode(f"layout adapter {self.a.name}: {message}")

    def _stored_axis(self, name):
        if name not in self.a.stored:
            self._fail(f"{name} is not a stored argument ({', '.join(self.a.stored)})")
        return self.a.stored[name]

    def _operand(self, lay: HeadLayout, source: str) -> str:
        axis = self._stored_axis(lay.stored)
        heads = _heads(lay.stored, axis, source)
        if lay.arrangement == "stack_rows":
            self.lines += [f"heads = {heads}  # one block per head",
                           (f"{lay.operand} = heads.reshape(*heads.shape[:-3], heads.shape[-3] // group, "
                            "group * heads.shape[-2], heads.shape[-1])")]  # no -1: an empty batch has size 0
            return lay.operand
        if lay.arrangement == "diagonal":
            if lay.transposed:  # the blocks W_hᵀ: transpose each head
                heads = heads.removesuffix(".mT") if heads.endswith(".mT") else f"{heads}.mT"
            return f"jnp.repeat({heads}, group, axis=-3)"
        self._fail(f"unknown arrangement {lay.arrangement!r}")

    def _argument(self, sym, own):
        name = sym.name

        def source(stored):
            return f"jnp.asarray({stored})"

        for lay in own:
            if lay.arrangement == "concat" and name in (lay.operand, lay.gradient):
                parts = lay.stored if name == lay.operand else lay.gradients
                for part in parts:
                    self._stored_axis(part)
                how = "jnp.stack([{}], axis=-3)" if name == lay.operand else "jnp.concatenate([{}], axis=-1)"
                return how.format(", ".join(source(part) for part in parts))
            if lay.operand == name:
                return self._operand(lay, source(lay.stored))
        axis = self._stored_axis(name)
        if any(lay.arrangement == "diagonal" for lay in own):
            return source(name)
        for lay in self.all_layouts:
            if lay.shared == name and lay not in own:
                return f"jnp.repeat({_heads(name, axis, source(name))}, group, axis=-3)"
        return _heads(name, axis, source(name))

    def body(self) -> list[str]:
        outputs = []
        for k, (param, fn) in enumerate(self.a.calls, 1):
            own = layouts_of(fn)
            args = [self._argument(sym, own) for sym in fn.inputs]
            extra = "".join(f", {kw}=float(group)" for kw in fn.extra_scalars.values())
            out = f"out_{k}"
            call = f"{out} = {param}("
            self.lines.append(call + f"{args[0]},")
            self.lines += [" " * len(call) + f"{arg}," for arg in args[1:]]
            self.lines[-1] = self.lines[-1][:-1] + f"{extra}, **options)"
            diagonal = any(lay.arrangement == "diagonal" for lay in own)
            concat = [lay for lay in own if lay.arrangement == "concat"]
            if concat:  # the update's column blocks, one per stored weight
                k = len(concat[0].outputs)
                self.lines.append(f"width = {out}.shape[-1] // {k}")
                outputs += [f"{out}[..., {i} * width:{i + 1} * width]" if i else f"{out}[..., :width]"
                            for i in range(k)]
                continue
            for name, _ in fn.outputs:
                stored = name.removeprefix("d")
                if diagonal:
                    outputs.append(out)
                else:
                    outputs.append(_merge(out, self._stored_axis(stored)))
        self.lines.append(f"return {', '.join(outputs)}")
        return self.lines

    def source(self) -> str:
        a = self.a
        params = [p for p, _ in a.calls] + list(a.stored) + (["head_dim"] if a.head_dim else []) + ["options"]
        check_args = ", ".join(list(a.stored) + (["head_dim"] if a.head_dim else []))
        described = [f"{lay.describe()} ({der.name} step {step.index}, Lemma {step.lemma.number})"
                     for _, fn in a.calls for der in fn.derivations() for step in getattr(der, "steps", ())
                     if isinstance(step.params.get("layout"), HeadLayout)
                     for lay in [step.params["layout"]]]
        doc = [f'    """{a.summary}', "",
               "    Printed from the reduction steps of the derivations:",
               *[line for text in [*dict.fromkeys(described), *a.notes]
                 for line in textwrap.wrap(text, 100, initial_indent="    ", subsequent_indent="      ")],
               '    """']
        body = self.body()
        uses_group = any("group" in line for line in body)
        lines = [f"def {a.name}({', '.join(params)}):", *doc,
                 f"    {'group = ' if uses_group else ''}{a.check}({check_args})"]
        lines += [f"    {line}" for line in body]
        return "\n".join(lines)

    def entry_source(self) -> str:
        a = self.a
        head = "head_dim, " if a.head_dim else ""
        return "\n".join([
            (f"def {a.entry}({', '.join(a.stored)}, *, {head}eps, damping=0.0, msign=\"newton_schulz\", "
             "schedule=NS_SCHEDULE,"),
            f"{' ' * (len(a.entry) + 5)}restarts=None, gram_aspect=None, check_finite=True):",
            f'    """{a.entry_doc}',
            *([] if not a.head_dim else ["", *textwrap.wrap(HEAD_DIM_DOC, 100, initial_indent="    ",
                                                           subsequent_indent="    ")]),
            '    """',
            ('    options = {"eps": eps, "damping": damping, "msign": msign, "schedule": schedule, '
             '"restarts": restarts,'),
            '               "gram_aspect": gram_aspect, "check_finite": check_finite,',
            (f'               "caller": ({a.entry!r}, {{{", ".join(f"{n!r}: {n}" for n in a.stored)}}})}}'
             '  # errors name this function and its arguments'),
            (f"    return {a.name}({', '.join(checked_name(fn.name) for _, fn in a.calls)}, {', '.join(a.stored)}, "
             f"{head}options)"),
        ])


def adapter_source(adapter: Adapter) -> tuple[str, tuple]:
    """``(source, public names)``: the printed adapter and the entry point (the primitives and the check they
    call are routines of :mod:`foundation.compute.jax_runtime`)."""
    printer = AdapterPrinter(adapter)
    return printer.source() + "\n\n\n" + printer.entry_source() + "\n", (adapter.entry,)
