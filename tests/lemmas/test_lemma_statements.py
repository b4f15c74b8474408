"""The lemma statements made SymPy objects after the first ones (1, K, BD, Fl, S, Σp, Gp, f, GU, GT, B1–B3,
B5–B7).

For each: a false variant of its statement fails the statement's self-check (float64 at both sizes and mpmath),
and a step that is not an instance of it is refused by the trusted kernel while the true step is accepted.
GU and GT state definitions only (``X_{t+1} = q_t X_t``): they make no claim a false variant could break, so
their tests are the kernel's (a step whose unfolded sides differ, a definition of another form).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sympy import Rational, Symbol
from sympy.matrices.expressions import Identity, Inverse, MatrixSymbol

from derivations import gram_ns, joint
from derivations.engine import norms
from derivations.lemmas import blocks, counting, descent, gram, isometry, ring, spd_powers, spectral
from derivations.lemmas.kernel import step_instance
from derivations.lemmas.spd_powers import SPDPower
from derivations.lemmas.statement import Clause, Statement
from derivations.vocabulary.algebra import product, total
from derivations.vocabulary.nodes import (
    FULL_COLUMN_RANK,
    ORTHONORMAL_COLUMNS,
    ORTHONORMAL_ROWS,
    SYMMETRIC,
    BlockDiag,
    FactMatrix,
    GramInvSqrt,
    GramPower,
    GramSqrt,
    NuclearNorm,
    OpNorm,
    PolarFactor,
    RegularizedSylvester,
    dimension,
)
from derivations.vocabulary.norm_nodes import AspectScale, FrobeniusNorm, MaxAbsNorm, RmsOpNorm
from derivations.vocabulary.spectral_nodes import Flops, PsdPower, Singular
from foundation.compute import reference

pytestmark = pytest.mark.fast  # the inner loop's tier (pyproject.toml markers)

d, h = dimension("d"), dimension("d_h")
W = FactMatrix("W_K", d, h, [FULL_COLUMN_RANK])
V = FactMatrix("W_Q", d, h, [FULL_COLUMN_RANK])
C, CI = GramSqrt(W), GramInvSqrt(W)
F = product(V, C)  # a full-column-rank product: the balance's W_Q C_K
Y = product(C, V.T, V, C)  # Fᵀ F
P = Symbol("p")


def _ok(lemma, before, after, **params):
    return step_instance(lemma, "rewrite", [before], [after], params=params or None)[1] is None


def _falsified(statement: Statement, index: int, rhs) -> Statement:
    clauses = list(statement.clauses)
    clauses[index] = Clause(clauses[index].lhs, rhs)
    return dataclasses.replace(statement, clauses=tuple(clauses))


def _pattern(statement: Statement, name: str):
    return next(v for v in statement.variables if str(v) == name)


def _false_statements():
    """``(lemma, the statement with one clause made false)``."""
    out = []
    fl = counting.PRODUCT_COST.statement
    x, m, k = _pattern(fl, "X"), *(next(s for s in fl.dimensions if str(s) == n) for n in "mk")
    out.append(("Fl", _falsified(fl, 1, Flops(x) + 2 * m * k * k)))
    s = ring.SYLVESTER_EQUATION.statement
    hh = next(a for a in s.clauses[0].lhs.atoms(RegularizedSylvester))
    out.append(("S", _falsified(s, 0, total(hh.rhs, product(-hh.damping, hh)))))
    sp = spectral.DIAGONAL_POWERS.statement
    sig = s_q = None
    for a in sp.clauses[0].lhs.args:
        sig, s_q = (a, s_q) if sig is None else (sig, a)
    out.append(("Σp", _falsified(sp, 0, Singular(sig.base, sig.power * s_q.power))))
    b1 = spd_powers.POWER_ADD.statement
    first, second = b1.clauses[0].lhs.args
    out.append(("B1", _falsified(b1, 0, SPDPower(first.arg, first.exponent - second.exponent))))
    b3 = spd_powers.POWER_SPLIT.statement
    whole = b3.clauses[0].lhs
    out.append(("B3", _falsified(b3, 0, product(SPDPower(whole.arg, whole.exponent / 2),
                                                 SPDPower(whole.arg, whole.exponent / 4)))))
    b6 = spd_powers.GRAM_OF_PRODUCT.statement
    f6 = _pattern(b6, "F")
    out.append(("B6", _falsified(b6, 0, GramPower(f6, 0, "right", 2 * _pattern(b6, "p")))))
    b7 = spd_powers.POLAR_FORM.statement
    f7 = _pattern(b7, "F")
    out.append(("B7", _falsified(b7, 0, product(PolarFactor(f7), GramPower(f7, 0, "right", _pattern(b7, "p"))))))
    gp = spectral.GRAM_POWER.statement
    w = _pattern(gp, "W")
    out.append(("Gp", _falsified(gp, 0, PsdPower(product(w.T, w), 2 * _pattern(gp, "p")))))
    f = spectral.SPECTRAL_CALCULUS.statement
    q, xs = _pattern(f, "Q"), _pattern(f, "X")
    out.append(("f", _falsified(f, 0, product(q, Singular(xs, _pattern(f, "a") + _pattern(f, "p")), q.T))))
    b2 = spd_powers.POWER_INVERSE.statement
    inv = b2.clauses[0]
    out.append(("B2", _falsified(b2, 0, product(*reversed(inv.rhs.args)))))  # the factors of the inverse swapped
    b5 = spd_powers.CONGRUENCE.statement
    f5, x5, y5 = b5.clauses[0].lhs.args[0].args[0], _pattern(b5, "X"), _pattern(b5, "Y")
    out.append(("B5", _falsified(b5, 0, product(f5, total(x5, y5), f5))))  # F⁻¹ Y F⁻¹ dropped
    bd = blocks.BLOCK_DIAGONAL_ROOT.statement
    root = bd.clauses[0].lhs
    out.append(("BD", _falsified(bd, 0, BlockDiag(*(GramSqrt(blk, root.damping) for blk in root.base.args)))))
    k = blocks.BLOCK_STACKING.statement
    out.append(("K", Statement(tuple(Clause(c.rhs, c.lhs, "<=") for c in k.clauses), sizes=k.sizes,
                               integers=k.integers)))  # reversed: the stacked norm is not below the blocks'
    one = descent.LINEAR_STEEPEST_DESCENT.statement
    value = one.clauses[0]
    a1 = _pattern(one, "A")
    out.append(("1", _falsified(one, 0, value.rhs.xreplace({NuclearNorm(a1): OpNorm(a1)}))))
    return out


@pytest.mark.parametrize(("number", "false"), _false_statements(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_false_variant_of_each_new_statement_fails_its_self_check(number, false):
    errors = false.check(np.random.default_rng(3), trials=1)
    failing = {k for k, err in errors.items() if not err <= Statement.tolerance(k)}
    assert any("float64" in k for k in failing) and any("mpmath" in k for k in failing), (number, errors)


def test_every_new_statement_is_a_sympy_object():
    lemmas = (descent.LINEAR_STEEPEST_DESCENT, blocks.BLOCK_STACKING, blocks.BLOCK_DIAGONAL_ROOT,
              spd_powers.POWER_INVERSE, spd_powers.CONGRUENCE, counting.PRODUCT_COST, ring.SYLVESTER_EQUATION,
              spectral.DIAGONAL_POWERS, spectral.GRAM_POWER,
              spectral.SPECTRAL_CALCULUS, gram.UNROLL, gram.TELESCOPING, spd_powers.POWER_ADD, spd_powers.POWER_SPLIT,
              spd_powers.GRAM_OF_PRODUCT, spd_powers.POLAR_FORM)
    assert all(isinstance(lem.statement, Statement) for lem in lemmas)


def test_sylvester_steps_must_be_instances():
    """``Eᵀ E X + X Fᵀ F = R`` for ``X`` the (inner) solution; the wrong Gram on the right is refused, and so is a
    solution of factors whose rank is unknown."""
    r = MatrixSymbol("R", h, h)
    x = RegularizedSylvester(V, W, 0, r, "inner")
    assert _ok(ring.SYLVESTER_EQUATION, total(product(V.T, V, x), product(x, W.T, W)), r)
    assert not _ok(ring.SYLVESTER_EQUATION, total(product(V.T, V, x), product(x, V.T, V)), r)
    plain = MatrixSymbol("W_Q", d, h)
    xp = RegularizedSylvester(plain, W, 0, r, "inner")
    assert not _ok(ring.SYLVESTER_EQUATION, total(product(plain.T, plain, xp), product(xp, W.T, W)), r)


def test_diagonal_power_steps_must_be_instances():
    g = FactMatrix("G", d, h, [FULL_COLUMN_RANK])
    u, vt = MatrixSymbol("U", d, h), MatrixSymbol("V", h, h).T
    half, sig = Singular(g, Rational(-1, 2)), Singular(g)
    assert _ok(spectral.DIAGONAL_POWERS, product(u, half, sig, half, vt), product(u, vt))
    assert not _ok(spectral.DIAGONAL_POWERS, product(u, half, sig, half, vt), product(u, sig, vt))
    assert _ok(spectral.DIAGONAL_POWERS, product(u, sig, sig, sig, vt), product(u, Singular(g, 3), vt))


def test_spd_power_steps_must_be_instances():
    """B1 merges powers of ``Fᵀ F`` and cancels Gram roots; B6 names a power of ``Fᵀ F`` a Gram power of ``F``;
    B7 writes ``F (FᵀF)^p`` in polar form. Each refuses a wrong exponent."""
    g, k = MatrixSymbol("G", h, h), MatrixSymbol("H", h, h)
    assert _ok(spd_powers.POWER_ADD, product(g, CI, W.T, W, CI, k), product(g, k))
    quarter = SPDPower(Y, Rational(1, 4))
    assert _ok(spd_powers.POWER_ADD, product(quarter, quarter), SPDPower(Y, Rational(1, 2)))
    assert not _ok(spd_powers.POWER_ADD, product(quarter, quarter), quarter)
    assert _ok(spd_powers.GRAM_OF_PRODUCT, SPDPower(Y, -Rational(1, 4)), GramPower(F, 0, "right", -Rational(1, 4)))
    assert not _ok(spd_powers.GRAM_OF_PRODUCT, SPDPower(Y, -Rational(1, 4)), GramPower(F, 0, "right", -Rational(1, 2)))
    before = product(F, GramPower(F, 0, "right", -Rational(1, 4)))
    assert _ok(spd_powers.POLAR_FORM, before, product(PolarFactor(F), GramPower(F, 0, "right", Rational(1, 4))))
    assert not _ok(spd_powers.POLAR_FORM, before, product(PolarFactor(F), GramPower(F, 0, "right", -Rational(1, 4))))


def test_gram_power_and_spectral_calculus_steps_must_be_instances():
    g = FactMatrix("G", d, d, [FULL_COLUMN_RANK])
    power = GramPower(g, 0, "right", -Rational(1, 4))
    assert _ok(spectral.GRAM_POWER, power, PsdPower(product(g.T, g), -Rational(1, 4)))
    assert not _ok(spectral.GRAM_POWER, power, PsdPower(product(g, g.T), -Rational(1, 4)))  # the other Gram
    q = FactMatrix("U", d, d, [ORTHONORMAL_COLUMNS, ORTHONORMAL_ROWS])
    before = PsdPower(product(q, Singular(g, 2), q.T), -Rational(1, 4))
    assert _ok(spectral.SPECTRAL_CALCULUS, before, product(q, Singular(g, -Rational(1, 2)), q.T))
    assert not _ok(spectral.SPECTRAL_CALCULUS, before, product(q, Singular(g, -Rational(1, 4)), q.T))
    tall = FactMatrix("U", d, d, [ORTHONORMAL_COLUMNS])  # not known to be orthogonal
    before = PsdPower(product(tall, Singular(g, 2), tall.T), -Rational(1, 4))
    assert not _ok(spectral.SPECTRAL_CALCULUS, before, product(tall, Singular(g, -Rational(1, 2)), tall.T))


def test_telescoping_names_the_products_it_defines():
    """GT: ``Q_1 = q_0`` (``Q_0 = I``), ``Q_2 = q_1 Q_1``: ``q_1 q_0 X_0 = Q_2 X_0``; a definition in the wrong
    order (``Q_2 = Q_1 q_1`` on the left side) does not unfold to the step's other side."""
    x0 = MatrixSymbol("X_0", d, h)
    q0, q1 = (FactMatrix(f"q_{t}", d, d, [SYMMETRIC]) for t in range(2))
    big1, big2 = (MatrixSymbol(f"Q_{t}", d, d) for t in (1, 2))
    before, after = product(q1, q0, x0), product(big2, x0)
    assert _ok(gram.TELESCOPING, before, after, products={big1: (q0,), big2: (q1, big1)})
    assert not _ok(gram.TELESCOPING, before, after, products={big1: (q0,), big2: (big1, q1)})
    assert not _ok(gram.TELESCOPING, before, product(big2, Identity(d), q0, x0), products={big1: (q0,),
                                                                                          big2: (q1, big1)})


def test_inverse_and_congruence_steps_must_be_instances():
    """B2: ``((C_W⁻¹ Y^{1/4})⁻¹)ᵀ = C_W Y^{-1/4}`` (the transpose of an instance), not ``C_W Y^{1/4}``; B5 factors
    ``C_W⁻¹`` out of ``C_W⁻¹ X C_W⁻¹ + Y`` with ``C_W Y C_W`` inside, not with ``Y``."""
    x, y = MatrixSymbol("Z", h, h), MatrixSymbol("S", h, h)
    before = Inverse(product(CI, SPDPower(Y, Rational(1, 4)))).T
    assert _ok(spd_powers.POWER_INVERSE, before, product(C, SPDPower(Y, -Rational(1, 4))))
    assert not _ok(spd_powers.POWER_INVERSE, before, product(C, SPDPower(Y, Rational(1, 4))))
    sum_ = total(product(CI, x, CI), -y)
    assert _ok(spd_powers.CONGRUENCE, sum_, product(CI, total(x, -product(C, y, C)), CI))
    assert not _ok(spd_powers.CONGRUENCE, sum_, product(CI, total(x, -y), CI))


def test_block_root_steps_must_be_instances():
    g = MatrixSymbol("G", h, 2 * h)
    both = BlockDiag(W, V)
    before = product(g, GramInvSqrt(both))
    assert _ok(blocks.BLOCK_DIAGONAL_ROOT, before, product(g, BlockDiag(CI, GramInvSqrt(V))))
    assert not _ok(blocks.BLOCK_DIAGONAL_ROOT, before, product(g, BlockDiag(GramInvSqrt(V), CI)))  # blocks swapped
    assert not _ok(blocks.BLOCK_DIAGONAL_ROOT, before, product(g, BlockDiag(C, GramSqrt(V))))


def test_the_norm_families_isometry_and_transposition_lemmas_are_checked_statements():
    """Lemmas 2u and Tn (``derivations.engine.norms``): a false variant fails the self-check (an isometry that
    leaves the max-abs norm, which it does not; ``‖Aᵀ‖_* = ‖A‖_F``), and the kernel accepts a true step and
    refuses one that keeps a factor without orthonormal columns."""
    iso, tn = norms.UNITARY_INVARIANCE.statement, norms.NORM_TRANSPOSITION.statement
    u, z = _pattern(iso, "U"), _pattern(iso, "Z")
    bad_iso = Statement((Clause(MaxAbsNorm(product(u, z)), MaxAbsNorm(z)),), sizes=iso.sizes)
    a = _pattern(tn, "A")
    bad_tn = _falsified(tn, 1, FrobeniusNorm(a))
    for false in (bad_iso, bad_tn):
        errors = false.check(np.random.default_rng(3), trials=1)
        assert any(not err <= Statement.tolerance(k) for k, err in errors.items() if "float64" in k), errors
    q = FactMatrix("Q", d, h, [ORTHONORMAL_COLUMNS])
    g = MatrixSymbol("G_0", h, h)
    assert _ok(norms.UNITARY_INVARIANCE, FrobeniusNorm(product(q, g)), FrobeniusNorm(g))
    assert not _ok(norms.UNITARY_INVARIANCE, FrobeniusNorm(product(W, g)), FrobeniusNorm(g))  # W: no isometry
    assert _ok(norms.NORM_TRANSPOSITION, NuclearNorm(W.T), NuclearNorm(W))
    assert not _ok(norms.NORM_TRANSPOSITION, NuclearNorm(W.T), FrobeniusNorm(W))


# ---- GR and GX: claims proven by induction from the derivation's definitions ----------------------------------
def _claims_ok(lemma, before, after, definitions, **params):
    return step_instance(lemma, "rewrite", [before], [after], params=params, definitions=definitions)[1] is None


@pytest.mark.parametrize("side", ["left", "right"])
def test_the_gram_recurrence_claims_are_proven_from_the_definitions(side):
    """GR: ``A_t = R_t`` for t = 0, 1, 2 follows from ``A_t = X_t X_tᵀ``, ``X_{t+1} = q_t(A_t) X_t``,
    ``R_{t+1} = q_t(R_t) R_t q_t(R_t)`` (base case, then each step with the claims before it). Planted: a recurrence
    missing its second ``q_t`` (the numbers of a random instance would disagree too, but the kernel refuses it
    for all sizes), a wrong pairing ``A_1 = R_2``, and a step that leaves an ``A_t`` in place."""
    it = gram_ns.iteration(side)
    der = gram_ns.telescoping(side)
    step = der.steps[1]
    before, after = step.before.parts()[0], step.after.parts()[0]
    grams = dict(zip(it.a, it.r, strict=True))
    assert _claims_ok(gram.GRAM_RECURRENCE, before, after, it.definitions, grams=grams)
    wrong = dict(it.definitions)
    wrong[it.r[2]] = product(it.qr[1], it.r[1])
    assert not _claims_ok(gram.GRAM_RECURRENCE, before, after, wrong, grams=grams)
    swapped = {it.a[0]: it.r[0], it.a[1]: it.r[2], it.a[2]: it.r[1]}
    assert not _claims_ok(gram.GRAM_RECURRENCE, before, after.xreplace({it.r[1]: it.r[2], it.r[2]: it.r[1]}),
                          it.definitions, grams=swapped)
    assert not _claims_ok(gram.GRAM_RECURRENCE, before, after.xreplace({it.r[2]: it.a[2]}), it.definitions,
                          grams=grams)
    assert not _claims_ok(gram.GRAM_RECURRENCE, before, after, it.definitions, grams={})


@pytest.mark.parametrize("side", ["left", "right"])
def test_a_restart_claim_is_proven_and_its_iterate_must_be_the_derivations(side):
    """GX: the recomputed Gram ``G_2 = Y_2 Y_2ᵀ`` with ``Y_2 = Q_2 X_0`` equals ``R_2``; refused: ``G_2 = R_1``, and a
    restarted iterate ``Y_2 = Q_1 X_0`` that is not the derivation's definition."""
    it = gram_ns.iteration(side)
    step = gram_ns.restart(side).steps[0]
    before, after = step.before.parts()[0], step.after.parts()[0]
    restarted = {it.y: it.definitions[it.y]}
    assert _claims_ok(gram.RESTART, before, after, it.definitions, restarted=restarted, grams={it.g: it.r[2]})
    assert not _claims_ok(gram.RESTART, before, after.xreplace({it.r[2]: it.r[1]}), it.definitions,
                          restarted=restarted, grams={it.g: it.r[1]})
    early = {it.y: it.definitions[it.y].xreplace({it.q[2]: it.q[1]})}
    assert not _claims_ok(gram.RESTART, before, after.xreplace({it.q[2]: it.q[1]}), it.definitions,
                          restarted=early, grams={it.g: it.r[2]})


def test_false_variants_of_the_induction_identities_fail_their_self_check():
    """GR with one ``q(R)`` dropped from the Gram matrix of the next iterate, GX with ``Q R Q`` for ``Q R Qᵀ``."""
    gr, gx = gram.GRAM_RECURRENCE.statement, gram.RESTART.statement
    c0, c2 = gr.clauses[0], gx.clauses[2]
    q, r = c0.rhs.args[0], c0.where[0]
    false_gr = dataclasses.replace(gr, clauses=(dataclasses.replace(c0, rhs=product(q, r)), *gr.clauses[1:]))
    big_q = c2.rhs.args[0]
    wrong = dataclasses.replace(c2, rhs=product(big_q, c2.where[0], big_q))
    false_gx = dataclasses.replace(gx, clauses=(*gx.clauses[:2], wrong, *gx.clauses[3:]))
    for false in (false_gr, false_gx):
        errors = false.check(np.random.default_rng(3), trials=1)
        failing = {k for k, err in errors.items() if not err <= Statement.tolerance(k)}
        assert any("float64" in k for k in failing) and any("mpmath" in k for k in failing), errors


def test_gram_power_statements_evaluate_one_side_independently(monkeypatch):
    """B6 and Gp state that two nodes (a Gram power, the PSD power of the Gram matrix) agree; both evaluate by the
    eigendecomposition of the Gram matrix, so their self-check compares the left side computed from the SVD of the
    factor instead. Planted: a PSD power that computes ``A^{2p}`` in both backends; the two nodes still agree with
    each other (error 0), the SVD side does not."""
    for backend in (reference.NumpyBackend, reference.MpmathBackend):
        wrong = backend.psd_power
        monkeypatch.setattr(backend, "psd_power", staticmethod(lambda a, p, wrong=wrong: wrong(a, 2 * p)))
    for statement in (spd_powers.GRAM_OF_PRODUCT.statement, spectral.GRAM_POWER.statement):
        errors = statement.check(np.random.default_rng(3), trials=1)
        failing = {k for k, err in errors.items() if not err <= Statement.tolerance(k)}
        assert any("float64" in k for k in failing) and any("mpmath" in k for k in failing), errors
        shared = dataclasses.replace(statement, reference=None)  # both sides by the same (wrong) numerics
        assert all(err <= Statement.tolerance(k) for k, err in shared.check(np.random.default_rng(3), 1).items())


def test_the_rms_isometry_lemma_is_a_checked_statement():
    """2r: ``‖c U Z V‖_rms = ‖c Z‖_rms / (√(m/n) √(k/p))``. A false variant (no aspect scale) fails the self-check;
    the kernel accepts the rewrite's steps (a polar factor scaled by its partner's shape) and refuses an inverted
    scale, a dropped scale and a factor without orthonormal columns."""
    lemma = isometry.RMS_ISOMETRY
    stmt = lemma.statement
    unscaled = next(a for a in stmt.clauses[0].rhs.args if isinstance(a, RmsOpNorm))
    errors = _falsified(stmt, 0, unscaled).check(np.random.default_rng(3), trials=1)
    assert any(not err <= Statement.tolerance(k) for k, err in errors.items() if "float64" in k), errors
    for case in lemma.cases()[0]:
        assert _ok(lemma, case.lhs, lemma.apply(case.lhs)[0]), case.lhs
    u, y = FactMatrix("U", d, h, [ORTHONORMAL_COLUMNS]), MatrixSymbol("Y", h, h)
    assert _ok(lemma, RmsOpNorm(product(u, y)), RmsOpNorm(y) / AspectScale(u))
    assert _ok(lemma, RmsOpNorm(product(PolarFactor(W), y)), RmsOpNorm(y) / AspectScale(W))
    assert not _ok(lemma, RmsOpNorm(product(u, y)), RmsOpNorm(y) * AspectScale(u))
    assert not _ok(lemma, RmsOpNorm(product(u, y)), RmsOpNorm(y))
    assert not _ok(lemma, RmsOpNorm(product(W, y)), RmsOpNorm(y) / AspectScale(W))


def test_the_concatenation_step_is_an_instance_and_wrong_abbreviations_are_refused():
    """J: joint's concatenation (``P = blockdiag(W_K, W_Q)``, ``G̃ = [G_M | G_Mᵀ]``, the sizes ``n = 2d``,
    ``m = 2d_h`` fixed by them) is an instance. Refused: the partner's blocks swapped, the gradient's blocks swapped;
    a false variant of the statement (the blocks of the partner swapped) fails the self-check."""
    der = joint.joint()
    step = next(s for s in der.steps if s.lemma.number == "J")

    def ok(names):
        params = {**step.params, "names": names}
        return step_instance(blocks.CONCATENATION, "rewrite", step.before.parts(), step.after.parts(), params=params,
                             definitions=der.context.definitions)[1] is None

    names = dict(step.params["names"])
    assert ok(names)
    partner_swapped = {e if s == joint.G_tilde else type(e)(*reversed(e.args)): s for e, s in names.items()}
    gradient_swapped = {e if s == joint.P else type(e)(*reversed(e.args)): s for e, s in names.items()}
    assert not ok(partner_swapped) and not ok(gradient_swapped)
    stmt = blocks.CONCATENATION.statement
    first = stmt.clauses[0]
    stacked, partner = first.rhs.args[0], first.rhs.args[1].arg
    false = _falsified(stmt, 0, product(stacked, type(partner)(*reversed(partner.args)).T))
    errors = false.check(np.random.default_rng(3), trials=1)
    assert any(not err <= Statement.tolerance(k) for k, err in errors.items() if "float64" in k), errors
