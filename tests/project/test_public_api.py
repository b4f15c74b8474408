"""The public API (what ``from derivations import …`` and ``from coeffsearch import …`` give) is annotated
in full: every public function and every public method of a public class says the types of its
parameters and of its result. ``mypy`` checks the modules that define it in CI (``.ci/run``)."""

from __future__ import annotations

import inspect
import types

import pytest

import coeffsearch
import derivations

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

PACKAGES = (derivations, coeffsearch)


def callables_of(obj: object, name: str) -> list[tuple[str, object]]:
    """``(qualified name, function)`` for a public function, or for each public method a class defines itself
    (inherited SymPy or dataclass machinery is not ours to annotate)."""
    if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType)):
        return [(name, obj)]
    if not inspect.isclass(obj):
        return []
    out = []
    for attr, value in vars(obj).items():
        if attr.startswith("_") and attr != "__init__":
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        elif hasattr(value, "func") and type(value).__name__ == "cached_property":
            value = value.func
        if (isinstance(value, types.FunctionType) and value.__qualname__.startswith(obj.__qualname__ + ".")
                and value.__module__ == obj.__module__):
            out.append((f"{name}.{attr}", value))
    return out


def unannotated(fn: object) -> list[str]:
    """The parameters (and ``return``) of ``fn`` without an annotation; ``self``/``cls`` and the result of
    ``__init__`` excepted."""
    sig = inspect.signature(fn, follow_wrapped=False)
    missing = [p.name for i, p in enumerate(sig.parameters.values())
               if p.annotation is inspect.Parameter.empty and not (i == 0 and p.name in ("self", "cls"))]
    if sig.return_annotation is inspect.Signature.empty and fn.__name__ != "__init__":
        missing.append("return")
    return missing


def missing_annotations(packages=PACKAGES) -> list[str]:
    out = []
    for package in packages:
        for name in package.__all__:
            for qualified, fn in callables_of(getattr(package, name), f"{package.__name__}.{name}"):
                gaps = unannotated(fn)
                if gaps:
                    out.append(f"{qualified}: {', '.join(gaps)}")
    return sorted(out)


def test_the_public_api_is_annotated():
    assert missing_annotations() == []


def test_a_planted_unannotated_function_is_found():
    planted = types.ModuleType("planted")

    def typed(x: int) -> int:
        return x

    def untyped(x, y: int):
        return x

    class Thing:
        def method(self, a: int):
            return a

        @property
        def size(self) -> int:
            return 1

    for fn in (typed, untyped, Thing.method):
        fn.__module__ = planted.__name__
    Thing.__module__ = planted.__name__
    planted.typed, planted.untyped, planted.Thing = typed, untyped, Thing
    planted.__all__ = ["typed", "untyped", "Thing"]
    assert missing_annotations([planted]) == ["planted.Thing.method: return", "planted.untyped: x, return"]
