"""Names that do not mislead, over every tracked ``.py``, ``.rst``, ``.md``, ``.toml`` and ``.ipynb`` file.

* **No tracker references**: code, tests and docs say what a check guards, not which issue, item or audit
  round asked for it (:data:`TRACKER`). ``CHANGELOG.md`` keeps the history and is not scanned.
* **"kernel" is the trusted proof kernel** (:mod:`derivations.lemmas.kernel`). The compute code in
  ``foundation/compute/`` is made of *routines*. The word is allowed elsewhere only where it names a
  kernel that is not the project's code: flax's weight leaf, a Jupyter kernel, XLA's compiled kernels. The
  rule (:func:`kernel_misuses`):

  - in :data:`PROOF_KERNEL_FILES`, the kernel's own modules, its tests and the lemmas page, the bare word
    means the proof kernel and is allowed; in :data:`FLAX_LAYOUT_FILES`, the optimizer's readers of flax
    parameter layouts and their tests, it means flax's weight leaf and is allowed;
  - elsewhere an occurrence is allowed when it is part of a spelling that names someone else's kernel
    (:data:`KERNEL_SPELLINGS`: a quoted ``"kernel"`` key, a ``/kernel`` path, the ``kernels=`` flag of the
    pair declarations, ``ipykernel``, ``kernelspec``, the module path ``lemmas.kernel``), or when its line
    says whose kernel it is (:data:`KERNEL_OWNERS`: the trusted or proof kernel, flax and its ``Dense``
    layers, Jupyter or a notebook, an XLA kernel).

Frozen copies of old emissions (``tests/golden/``, compared by number only) and this file, which spells the
patterns, are not scanned. Each rule is shown to fail on a planted line.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = (".py", ".rst", ".md", ".toml", ".ipynb")
#: not scanned: the project's history, frozen emissions of earlier versions, and this file (it spells the patterns)
NOT_SCANNED = ("CHANGELOG.md", "tests/golden/", "tests/project/test_names.py")

#: a reference to a tracker instead of what the code guards: "issue 17", "item 4", "audit", "round 3", "optimizer#53"
TRACKER = re.compile(r"\bissues?\s*#?\d+|\bitems?\s+\d+|audit|\bround\s*\d+\b|\w#\d+", re.IGNORECASE)

#: files about the trusted proof kernel itself: there the bare word means it
PROOF_KERNEL_FILES = frozenset({
    "derivations/lemmas/kernel.py", "derivations/lemmas/matcher.py", "derivations/lemmas/statement.py",
    "tests/lemmas/test_trusted_kernel.py", "tests/lemmas/test_kernel_complexity.py",
    "tests/lemmas/test_false_steps.py", "tests/lemmas/test_lemma_statements.py",
    "tests/lemmas/test_lemma_self_check_sizes.py", "docs/lemmas.rst",
})
#: files about flax's parameter layouts (the pair declarations, their readers and their tests): there the bare
#: word means a flax kernel, the weight leaf of a ``Dense`` or ``DenseGeneral`` layer
FLAX_LAYOUT_FILES = frozenset({
    "numerics/optimizer/pairs.py", "numerics/optimizer/groups.py", "numerics/optimizer/framework_pairs.py",
    "numerics/optimizer/head_axes.py", "tests/numerics/test_optimizer_layouts.py",
    "tests/numerics/test_optimizer_frameworks.py",
})
#: spellings that name someone else's kernel (or the proof kernel's module); an occurrence inside one is allowed
KERNEL_SPELLINGS = re.compile(
    r"""["']kernels?["']"""         # a flax parameter key, a layout name: "kernel", 'kernel'
    r"|``kernel``"                  # the same key in reStructuredText
    r"|/kernel\b"                   # a flax parameter path: params/q/kernel
    r"|\bkernels(?==|: bool\b| must be True)"  # the pair declarations' flag for flax layouts: kernels=True
    r"|\.kernels\b|, kernels\)"      # ... read back and passed on: pair.kernels, f(x, kernels)
    r"|ipykernel|kernelspec"        # the Jupyter kernel package and a notebook's metadata
    r"|lemmas[./]kernel\b",         # the proof kernel's module
    re.IGNORECASE)
#: words that say whose kernel a line means
KERNEL_OWNERS = re.compile(
    r"trusted (?:proof )?kernel|proof kernel"  # the project's own
    r"|flax|\bDense(?:General)?\b"            # flax's weight leaf
    r"|Jupyter|notebook"                       # a notebook's kernel
    r"|\bXLA kernels?\b",                      # XLA's compiled kernels
    re.IGNORECASE)
KERNEL = re.compile(r"kernel", re.IGNORECASE)


def tracked_files() -> list[str]:
    """The tracked files with one of :data:`SUFFIXES`, relative to the root, minus :data:`NOT_SCANNED`."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        names = listed.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):  # no git (an unpacked sdist): every file but the build's
        skip = {".git", ".venv", "_build", "__pycache__", "node_modules"}
        names = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
                 if p.is_file() and not skip & set(p.relative_to(ROOT).parts)]
    return sorted(n for n in names if n.endswith(SUFFIXES) and not n.startswith(NOT_SCANNED)
                  and (ROOT / n).is_file())


def tracker_references(path: str, text: str) -> list[str]:
    """``path:line: text`` of every line of ``text`` that cites a tracker (:data:`TRACKER`)."""
    return [f"{path}:{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1) if TRACKER.search(line)]


def kernel_misuses(path: str, text: str) -> list[str]:
    """``path:line: text`` of every line where "kernel" means something other than the rule allows (module
    docstring): outside :data:`PROOF_KERNEL_FILES` and :data:`FLAX_LAYOUT_FILES`, an occurrence neither inside one of
    :data:`KERNEL_SPELLINGS` nor on a line that names its owner (:data:`KERNEL_OWNERS`)."""
    if path in PROOF_KERNEL_FILES | FLAX_LAYOUT_FILES:
        return []
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not KERNEL.search(line) or KERNEL_OWNERS.search(line):
            continue
        allowed = [m.span() for m in KERNEL_SPELLINGS.finditer(line)]
        if any(not any(a <= m.start() < b for a, b in allowed) for m in KERNEL.finditer(line)):
            out.append(f"{path}:{i}: {line.strip()}")
    return out


def scan(check) -> list[str]:
    return [hit for path in tracked_files() for hit in check(path, (ROOT / path).read_text(encoding="utf-8"))]


def test_the_scan_sees_the_project():
    files = tracked_files()
    assert {"README.md", "pyproject.toml", "derivations/lemmas/kernel.py", "docs/tutorial.ipynb"} <= set(files)
    assert not any(f.startswith(NOT_SCANNED) for f in files)


def test_no_tracker_references():
    assert scan(tracker_references) == []


def test_kernel_means_the_trusted_proof_kernel():
    assert scan(kernel_misuses) == []


@pytest.mark.parametrize("line", [
    '"""Hostile inputs to the emitted modules (issue 17, items 4, 6)."""',
    "# ---- item 4: ill-conditioned partners",
    "def test_audit_case_float16():",
    "# ---- round 2: the number range",
    '"""Audit optimizer#53: ns_steps=10**7 hung."""',
])
def test_a_planted_tracker_reference_is_caught(line):
    assert tracker_references("tests/planted.py", f"x = 1\n{line}\n") == [f"tests/planted.py:2: {line}"]


@pytest.mark.parametrize("line", [
    '"""The JAX kernels the emitted code imports."""',
    "def kernel_parts(code, runtime):",
    "from foundation.compute.numpy_kernels import msign_svd",
    "class KernelFlops(Expr):",
    '    kernel, restarts, why = msign_choice(shape, dtype, "auto", schedule)',
    "    the orientation the emitted kernel picks",
    'params["query"]["kernel"] is read by the kernel',  # a key is allowed, the second word is not
])
def test_a_planted_compute_kernel_is_caught(line):
    assert kernel_misuses("foundation/compute/planted.py", f"x = 1\n{line}\n") == [
        f"foundation/compute/planted.py:2: {line.strip()}"]


@pytest.mark.parametrize("line", [
    "the trusted kernel matches each rewrite against its lemma's statement",
    "from derivations.lemmas.kernel import step_instance",
    'layers = {"query": {"kernel": w}, "out": {"kernel": o}}',
    "OVPair('params/o/kernel', 'params/v/kernel', H, kernels=True)",
    "    if pair.kernels:",
    "flax ``DenseGeneral`` kernels with head axes",
    "MyST-NB runs the tutorial in a fresh Jupyter kernel",
    '"ipykernel>=6.29"',
    "a hung XLA kernel fails its test",
])
def test_what_names_its_kernel_is_allowed(line):
    assert kernel_misuses("numerics/optimizer/planted.py", line) == []


def test_the_proof_kernels_and_flax_layouts_own_files_may_say_kernel():
    assert kernel_misuses("derivations/lemmas/kernel.py", "the kernel refuses the step") == []
    assert kernel_misuses("numerics/optimizer/pairs.py", "as kernels with head axes") == []
    assert kernel_misuses("derivations/lemmas/gram.py", "the kernel refuses the step") != []
    assert kernel_misuses("numerics/optimizer/transform.py", "as kernels with head axes") != []
