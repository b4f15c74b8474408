"""The PyTorch optimizer ``numerics.torch_optimizer.CompositionalMuon``: equal to the optax optimizer on one tiny
attention model over 3 steps, pairs found by module type (``nn.Linear``, Hugging Face names,
``nn.MultiheadAttention``'s packed rows), a bit-identical ``state_dict`` round trip, and one-line errors."""

from __future__ import annotations

import copy
import io
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the PyTorch optimizer is optional)")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from torch import nn  # noqa: E402

import numerics.torch_optimizer as torch_optimizer  # noqa: E402
from numerics.optimizer import OVPair as JaxOVPair  # noqa: E402
from numerics.optimizer import QKPair as JaxQKPair  # noqa: E402
from numerics.optimizer import compositional_muon  # noqa: E402
from numerics.torch_optimizer import CompositionalMuon, OVPair, QKPair  # noqa: E402

D, HEADS, HEAD_DIM, HIDDEN = 16, 2, 4, 32
HYPER = {"weight_decay": 0.1, "adam_weight_decay": 0.01}


class Attention(nn.Module):
    """One attention layer's projections as ``nn.Linear`` ``q``/``k``/``v``/``o`` (``num_heads`` says the heads)."""

    def __init__(self, names: tuple[str, ...] = ("q", "k", "v", "o"), d: int = D, heads: int = HEADS) -> None:
        super().__init__()
        self.num_heads = heads
        inner = heads * HEAD_DIM
        for name, (n_in, n_out) in zip(names, [(d, inner)] * 3 + [(inner, d)], strict=True):
            setattr(self, name, nn.Linear(n_in, n_out, bias=False))


class Layer(nn.Module):
    """A single layer: attention, an MLP matrix with a bias."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = Attention()
        self.mlp = nn.Linear(D, HIDDEN)


def _layer(seed: int = 0) -> Layer:
    torch.manual_seed(seed)
    return Layer()


def _gradients(model: nn.Module, steps: int, seed: int = 1) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [{n: torch.randn(p.shape, generator=g) for n, p in model.named_parameters()} for _ in range(steps)]


def _set_grads(model: nn.Module, grads: dict[str, torch.Tensor]) -> None:
    for n, p in model.named_parameters():
        p.grad = grads[n].clone()


# ---- the JAX side: the same model in x @ W layouts (the PyTorch weights transposed) -------------------------------
def _to_jax(model: nn.Module) -> dict:
    return {n: jnp.asarray(p.detach().numpy().T if p.ndim == 2 else p.detach().numpy())
            for n, p in model.named_parameters()}


def _jax_grads(grads: dict[str, torch.Tensor]) -> dict:
    return {n: jnp.asarray(g.numpy().T if g.ndim == 2 else g.numpy()) for n, g in grads.items()}


def _optax_trajectory(model: nn.Module, grads: list[dict], lr: float) -> list[dict]:
    pairs = [JaxQKPair("attn.q.weight", "attn.k.weight", heads=HEADS),
             JaxOVPair("attn.o.weight", "attn.v.weight", heads=HEADS, kernels=True)]
    opt = compositional_muon(lr, pairs=pairs, **HYPER)
    params = _to_jax(model)
    state = opt.init(params)
    update = jax.jit(opt.update)
    out = []
    for g in grads:
        u, state = update(_jax_grads(g), state, params)
        params = jax.tree.map(lambda p, d: p + d, params, u)
        out.append({n: np.asarray(p).T if p.ndim == 2 else np.asarray(p) for n, p in params.items()})
    return out


@pytest.fixture(scope="module")
def optax_run() -> tuple[list[dict], list[dict]]:
    """3 steps of the optax optimizer on the tiny layer (weights and gradients shared with the PyTorch runs)."""
    grads = _gradients(_layer(), 3)
    return grads, _optax_trajectory(_layer(), grads, lr=0.05)


def _torch_trajectory(grads: list[dict], **kwargs) -> list[dict]:
    model = _layer()
    opt = CompositionalMuon(model, lr=0.05, **{**HYPER, **kwargs})
    out = []
    for g in grads:
        _set_grads(model, g)
        opt.step()
        out.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return out


def _largest_gap(a: list[dict], b: list[dict]) -> float:
    return max(float(np.max(np.abs(x[n] - y[n]))) for x, y in zip(a, b, strict=True) for n in x)


def test_torch_steps_equal_the_optax_optimizer(optax_run):
    """Pairs (half-split, hybrid), Muon and AdamW with weight decay: each of 3 steps within 1e-5 in float32."""
    grads, reference = optax_run
    assert _largest_gap(_torch_trajectory(grads), reference) < 1e-5


def test_a_transposed_muon_layout_fails_the_equality(optax_run, monkeypatch):
    """Planted: the MLP matrix read as (in, out) (fan sides swapped) moves it by another step."""
    grads, reference = optax_run
    right = torch_optimizer.muon_direction
    monkeypatch.setattr(torch_optimizer, "muon_direction", lambda m, msign, schedule: right(m.mT, msign, schedule).mT)
    assert _largest_gap(_torch_trajectory(grads), reference) > 1e-3


def test_wrong_heads_fail_the_equality(optax_run):
    """Planted: the attention read as one head of width 8 instead of two of width 4."""
    grads, reference = optax_run
    pairs = [QKPair("attn.q.weight", "attn.k.weight", heads=1), OVPair("attn.o.weight", "attn.v.weight", heads=1)]
    assert _largest_gap(_torch_trajectory(grads, pairs=pairs), reference) > 1e-3


def test_declared_pairs_equal_found_pairs(optax_run):
    """The explicit declaration of the layer's pairs takes the same steps as the pairs found from its modules."""
    grads, _ = optax_run
    pairs = [QKPair("attn.q.weight", "attn.k.weight", heads=2), OVPair("attn.o.weight", "attn.v.weight", heads=2)]
    found = _torch_trajectory(grads)
    assert _largest_gap(_torch_trajectory(grads, pairs=pairs), found) == 0.0
    assert _largest_gap(_torch_trajectory(grads, pairs=None), found) > 1e-3  # planted: no pairs, Muon everywhere


def test_grouped_query_attention_steps_equal_the_optax_optimizer():
    """Hugging Face names with ``num_key_value_heads = 1`` (2 query heads share one key/value head): the grouped
    half-split and hybrid rules, one step each, equal to the optax optimizer's within 1e-5 in float32."""
    torch.manual_seed(0)
    model = Attention(("q_proj", "k_proj", "v_proj", "o_proj"))
    model.num_key_value_heads = 1
    model.k_proj, model.v_proj = nn.Linear(D, HEAD_DIM, bias=False), nn.Linear(D, HEAD_DIM, bias=False)
    grads = _gradients(model, 2)
    opt = CompositionalMuon(model, lr=0.05)
    assert [(p.heads, p.kv_heads) for p in opt.pairs] == [(2, 1), (2, 1)]
    jax_opt = compositional_muon(0.05, pairs=[JaxQKPair("q_proj.weight", "k_proj.weight", heads=2, kv_heads=1),
                                              JaxOVPair("o_proj.weight", "v_proj.weight", heads=2, kv_heads=1,
                                                        kernels=True)])
    params = _to_jax(model)
    state, update = jax_opt.init(params), jax.jit(jax_opt.update)
    for g in grads:
        _set_grads(model, g)
        opt.step()
        u, state = update(_jax_grads(g), state, params)
        params = jax.tree.map(lambda p, d: p + d, params, u)
        gap = max(float(np.max(np.abs(np.asarray(params[n]).T - p.detach().numpy())))
                  for n, p in model.named_parameters())
        assert gap < 1e-5


# ---- state_dict round trip -------------------------------------------------------------------------------------
def _round_trip(drop: str | None = None) -> bool:
    """2 steps, save, load into a fresh optimizer on a copy of the model, one step each: bitwise equal?"""
    model = _layer()
    opt = CompositionalMuon(model, lr=0.05, **HYPER)
    grads = _gradients(model, 3)
    for g in grads[:2]:
        _set_grads(model, g)
        opt.step()
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    if drop:
        for s in saved["state"].values():
            s.pop(drop, None)
    twin = copy.deepcopy(model)
    fresh = CompositionalMuon(twin, lr=0.05, **HYPER)
    fresh.load_state_dict(saved)
    for m, o in ((model, opt), (twin, fresh)):
        _set_grads(m, grads[2])
        o.step()
    return all(torch.equal(a, b) for a, b in zip(model.parameters(), twin.parameters(), strict=True))


def test_state_dict_round_trip_is_bit_identical():
    assert _round_trip()


def test_a_state_dict_without_momentum_fails_the_round_trip():
    """Planted: the momentum dropped from the saved state (the fresh optimizer restarts it from 0)."""
    assert not _round_trip(drop="momentum_buffer")


# ---- pairs found by module type ----------------------------------------------------------------------------------
def test_hugging_face_names_and_multihead_attention_are_paired():
    torch.manual_seed(0)
    model = nn.ModuleDict({"hf": Attention(("q_proj", "k_proj", "v_proj", "o_proj")),
                           "mha": nn.MultiheadAttention(D, HEADS)})
    found = {(p.kind, str(p.first), str(p.second)) for p in CompositionalMuon(model, lr=0.1).pairs}
    assert found == {("qk", "hf.q_proj.weight", "hf.k_proj.weight"), ("ov", "hf.o_proj.weight", "hf.v_proj.weight"),
                     ("qk", "mha.in_proj_weight[0:16]", "mha.in_proj_weight[16:32]"),
                     ("ov", "mha.out_proj.weight", "mha.in_proj_weight[32:48]")}


def test_packed_rows_step_like_separate_linears():
    """``nn.MultiheadAttention``'s packed rows take the step of the same weights held as separate q/k/v/o."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(D, HEADS, bias=False)
    plain = Attention(d=D, heads=HEADS)
    for name, rows in (("q", slice(0, 16)), ("k", slice(16, 32)), ("v", slice(32, 48))):
        getattr(plain, name).weight = nn.Parameter(mha.in_proj_weight.detach()[rows].clone())
    plain.o.weight = nn.Parameter(mha.out_proj.weight.detach().clone())
    g = torch.Generator().manual_seed(3)
    packed, out = torch.randn(3 * D, D, generator=g), torch.randn(D, D, generator=g)
    mha.in_proj_weight.grad, mha.out_proj.weight.grad = packed.clone(), out.clone()
    for name, rows in (("q", slice(0, 16)), ("k", slice(16, 32)), ("v", slice(32, 48))):
        getattr(plain, name).weight.grad = packed[rows].clone()
    plain.o.weight.grad = out.clone()
    CompositionalMuon(mha, lr=0.1).step()
    CompositionalMuon(plain, lr=0.1).step()
    stacked = torch.cat([plain.q.weight, plain.k.weight, plain.v.weight])
    assert torch.allclose(mha.in_proj_weight, stacked, atol=1e-6)
    assert torch.allclose(mha.out_proj.weight, plain.o.weight, atol=1e-6)


# ---- errors ----------------------------------------------------------------------------------------------------
class _Projection(nn.Module):
    """A projection whose weight layout the optimizer cannot know (not an ``nn.Linear``)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(8, 16))


@pytest.mark.parametrize(("build", "error", "words"), [
    (lambda m: CompositionalMuon(m, lr=float("nan")), ValueError, "lr must be finite"),
    (lambda m: CompositionalMuon(m, lr="fast"), TypeError, "lr must be a real number"),
    (lambda m: CompositionalMuon(m, lr=0.1, beta=1.0), ValueError, "beta must be in [0, 1)"),
    (lambda m: CompositionalMuon(m, lr=0.1, damping=-1.0), ValueError, "damping"),
    (lambda m: CompositionalMuon(m, lr=0.1, msign="qr"), ValueError, "msign"),
    (lambda m: CompositionalMuon(m, lr=0.1, on_nonfinite="ignore"), ValueError, "on_nonfinite"),
    (lambda m: CompositionalMuon(m.named_parameters(), lr=0.1), ValueError, "pass the model itself"),
    (lambda m: CompositionalMuon(m.parameters(), lr=0.1, pairs=None), TypeError, "named_parameters()"),
    (lambda m: CompositionalMuon(m.named_parameters(), lr=0.1, pairs=[QKPair("attn.q.weight", "nope", 2)]),
     ValueError, "'nope' is not a parameter name"),
])
def test_bad_hyperparameters_and_declarations_are_refused_in_one_line(build, error, words):
    with pytest.raises(error) as caught:
        build(_layer())
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_pair_with_mixed_dtypes_is_refused_naming_both():
    model = _layer()
    model.attn.k.double()
    with pytest.raises(TypeError, match=r"'attn.q.weight' is torch.float32 but 'attn.k.weight' is torch.float64"):
        CompositionalMuon(model, lr=0.1)


def test_an_unknown_layout_or_head_count_is_refused_naming_the_parameter():
    model = _layer()
    model.attn.k = _Projection()
    with pytest.raises(ValueError, match=r"layout of attn.k.weight is unknown \(its module is _Projection"):
        CompositionalMuon(model, lr=0.1)
    model = _layer()
    del model.attn.num_heads
    with pytest.raises(ValueError, match="number of heads of attn.q.weight is unknown: pass heads=H"):
        CompositionalMuon(model, lr=0.1)


def test_nonfinite_gradients_and_updates():
    """A NaN gradient is refused naming it; an update that overflows is skipped (nothing moves) or refused."""
    model = _layer()
    grads = _gradients(model, 1)[0]
    _set_grads(model, {**grads, "mlp.bias": torch.full((HIDDEN,), float("nan"))})
    with pytest.raises(ValueError, match="the gradient of 'mlp.bias' contains NaN or Inf"):
        CompositionalMuon(model, lr=0.1).step()
    _set_grads(model, grads)
    before = [p.detach().clone() for p in model.parameters()]
    opt = CompositionalMuon(model, lr=3e38)  # finite, but lr·√2·msign overflows float32 in the MLP matrix
    opt.step()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert opt.param_groups[0]["skipped_steps"] == 1 and not any(opt.state.values())
    with pytest.raises(ValueError, match=r"the update of 'attn.q.weight' contains NaN or Inf .*\(also 3 more\)"):
        CompositionalMuon(model, lr=3e38, on_nonfinite="raise").step()


# ---- the example ---------------------------------------------------------------------------------------------------
@pytest.mark.e2e
def test_the_torch_training_example_lowers_the_loss():
    """``python examples/torch_train.py`` (about 5 s): three layers' pairs found in nn.MultiheadAttention, the loss
    falling over 12 steps."""
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, str(root / "examples" / "torch_train.py")], cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stdout.count("qk pair: heads=4 kv_heads=4, first of") == 3
    losses = [float(x) for x in re.findall(r"^step +\d+ +loss (\d+\.\d+)$", run.stdout, flags=re.M)]
    assert len(losses) == 12 and losses[-1] < 0.8 * losses[0], losses
    assert run.stdout.rstrip().endswith("loss went down: True")


# ---- the docs page's blocks where torch is missing ----------------------------------------------------------------
def test_an_executed_block_that_requires_a_missing_module_is_shown_not_run(tmp_path):
    """The PyTorch page's ``:requires: torch`` blocks: without the module the block is shown with a note and the
    build passes; with it the block runs (planted: the same failing block without the option stops the build)."""
    pytest.importorskip("sphinx", reason="the docs extra is not installed")
    from sphinx.errors import SphinxError

    from tests.project.test_docs import _plain, build

    block = ".. executed::\n   :requires: {module}\n\n   print('ran: yes')\n   raise RuntimeError('not installed')\n"
    out = build(tmp_path / "missing", {"page": "Page\n====\n\n" + block.format(module="no_such_module_xyz")})
    html = (out / "page.html").read_text()
    assert "Not run in this build: no_such_module_xyz is not installed" in " ".join(_plain(html).split())
    assert "workbench-output" not in html  # nothing printed: the block did not run
    with pytest.raises(SphinxError, match="RuntimeError: not installed"):
        build(tmp_path / "present", {"page": "Page\n====\n\n" + block.format(module="json")})


def test_the_api_check_reads_a_module_of_an_optional_dependency_under_autodoc_mocks(tmp_path, monkeypatch):
    """``numerics.torch_optimizer`` in a docs build without torch: the API coverage check imports the package's
    modules under ``autodoc_mock_imports`` (planted: without the mock the build stops on the missing module)."""
    pytest.importorskip("sphinx", reason="the docs extra is not installed")
    from sphinx.errors import SphinxError

    import tests.project.test_docs as docs

    monkeypatch.syspath_prepend(str(tmp_path))
    package = tmp_path / "planted_optional"
    package.mkdir()
    (package / "__init__.py").write_text('"""A package with a module that needs a missing dependency."""\n')
    (package / "needs_dep.py").write_text('"""Needs it."""\n\nimport not_installed_dep_xyz\n\n\n'
                                          'class Thing(not_installed_dep_xyz.Base):\n    """Documented."""\n')
    page = {"api": "API\n===\n\n.. automodule:: planted_optional.needs_dep\n   :members:\n"}
    monkeypatch.setattr(docs, "CONF", docs.CONF + 'autodoc_mock_imports = ["not_installed_dep_xyz"]\n')
    out = docs.build(tmp_path / "mocked", page, api=["planted_optional"])
    assert "planted_optional.needs_dep.Thing" in (out / "api.html").read_text()
    monkeypatch.setattr(docs, "CONF", docs.CONF.replace('autodoc_mock_imports = ["not_installed_dep_xyz"]\n', ""))
    for name in [n for n in sys.modules if n.startswith("planted_optional")]:
        monkeypatch.delitem(sys.modules, name)  # imported again, now without the mock
    with pytest.raises((SphinxError, ImportError), match="not_installed_dep_xyz"):
        docs.build(tmp_path / "unmocked", page, api=["planted_optional"])
