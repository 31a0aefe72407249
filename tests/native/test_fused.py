"""The fused per-query kernels against plain NumPy, and their independence of the block split."""

import numpy as np
import pytest

from streamrank._native import fused as fz
from streamrank._native import linalg as la
from streamrank._native import pairkernels as pk
from streamrank.features.normalize import Normalizer


def setup(seed=0, n=300, d=13):
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((n, d)) * 10.0 ** rng.uniform(-3, 3, d)).astype(np.float32)
    qp = np.unique(np.concatenate(([0, n], rng.integers(0, n, 30)))).astype(np.int64)
    rank = rng.integers(0, 3, n).astype(np.int32)
    return rng, X, qp, rank


def affine(kind, X, qp):
    n = Normalizer(kind)
    if kind == "zscore":
        n.fit([X], X.shape[1])
    return n, n.affine(X, qp)


@pytest.mark.parametrize("eta", [0.0, 0.4])
@pytest.mark.parametrize("kind", ["none", "zscore", "query_minmax"])
def test_fused_passes_equal_numpy(kind, eta):
    rng, X, qp, rank = setup()
    norm, (shift, scale, mode) = affine(kind, X, qp)
    Phi = norm.transform(X, qp)
    w, v = rng.standard_normal(X.shape[1]), rng.standard_normal(X.shape[1])
    z = np.empty(X.shape[0])
    fz.fused_scores(0, len(qp) - 1, X, w, shift, scale, mode, qp, z)
    np.testing.assert_allclose(z, Phi @ w, rtol=1e-12, atol=1e-12)
    cost = pk.pair_cost(np.ones((3, 3)), eta=eta)
    c = (cost.lam, cost.g, cost.c0, cost.lam_r, cost.g_r, cost.mode, cost.eta)
    nq, n, d = len(qp) - 1, X.shape[0], X.shape[1]
    st = pk.state_arrays(n, eta)
    loss_q, P = np.empty(nq), np.empty((nq, d))
    zz = np.empty(n)
    fz.fused_loss_grad(0, nq, X, w, shift, scale, mode, qp, rank, *c, np.ones(nq), *st, loss_q, P, zz, False)
    assert np.array_equal(zz, z)
    loss, dz, state = pk.loss_grad(Phi @ w, rank, qp, cost, 1.0)
    assert loss_q.sum() == pytest.approx(loss, rel=1e-12)
    want = np.array([Phi[a:b].T @ dz[a:b] for a, b in zip(qp[:-1], qp[1:])])
    np.testing.assert_allclose(P, want, rtol=1e-10, atol=1e-9)
    H = np.empty((nq, d))
    fz.fused_hess(0, nq, X, v, shift, scale, mode, qp, rank, *c, np.ones(nq), *st, H)
    t = pk.hess_prod(Phi @ v, rank, qp, cost, 1.0, state)
    want = np.array([Phi[a:b].T @ t[a:b] for a, b in zip(qp[:-1], qp[1:])])
    np.testing.assert_allclose(H, want, rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("eta", [0.0, 0.4])
def test_same_bits_for_any_block_split(eta):
    rng, X, qp, rank = setup(seed=1)
    w = rng.standard_normal(X.shape[1])
    cost = pk.pair_cost(np.ones((3, 3)), eta=eta)
    c = (cost.lam, cost.g, cost.c0, cost.lam_r, cost.g_r, cost.mode, cost.eta)
    ident = (np.zeros((1, X.shape[1])), np.ones((1, X.shape[1])), 0)

    def grad(cuts):
        acc, loss = np.zeros(X.shape[1]), 0.0
        for a, b in zip(cuts[:-1], cuts[1:]):  # cuts: query indices at block edges
            r0, r1 = qp[a], qp[b]
            lq, P = np.empty(b - a), np.empty((b - a, X.shape[1]))
            st = pk.state_arrays(r1 - r0, eta)
            fz.fused_loss_grad(0, b - a, X[r0:r1], w, *ident, qp[a:b + 1] - r0, rank[r0:r1], *c, np.ones(b - a), *st, lq, P,
                               np.empty(r1 - r0), False)
            loss = la.sum_in_order(loss, lq)
            la.add_rows_in_order(acc, P)
        return loss, acc

    nq = len(qp) - 1
    whole = grad([0, nq])
    for cuts in ([0, 1, nq], [0, nq // 2, nq], list(range(nq + 1))):
        got = grad(cuts)
        assert got[0] == whole[0] and np.array_equal(got[1], whole[1])


@pytest.mark.parametrize("kind", ["zscore", "query_minmax"])
def test_folded_normalisation_within_its_stated_bound(kind):
    """The fused kernels fold (shift, scale) into the vectors (Phi w = X (scale w) - shift .
    (scale w)): on features far from zero (offsets up to 1e6 times their spread) every score and
    X^T product stays within the bound the module states, a few eps64 sum |x scale w|, of the
    exact value (fractions), and far inside the float32 storage's own eps32 |x scale w|."""
    from fractions import Fraction
    rng = np.random.default_rng(7)
    n, d = 120, 9
    spread = 10.0 ** rng.uniform(-3, 3, d)
    offset = spread * 10.0 ** rng.uniform(0, 6, d) * rng.choice([-1, 1], d)
    X = (offset + spread * rng.standard_normal((n, d))).astype(np.float32)
    qp = np.array([0, 30, 31, 75, n], np.int64)
    norm, (shift, scale, mode) = affine(kind, X, qp)
    w, t = rng.standard_normal(d), rng.standard_normal(n)
    z = np.empty(n)
    fz.fused_scores(0, len(qp) - 1, X, w, shift, scale, mode, qp, z)
    eps = np.finfo(np.float64).eps
    for q in range(len(qp) - 1):
        r = q if mode == 2 else 0
        sh, sc = shift[r], scale[r]
        for i in range(qp[q], qp[q + 1]):
            exact = sum(((Fraction(float(X[i, k])) - Fraction(sh[k])) * Fraction(sc[k]) * Fraction(w[k])
                         for k in range(d)), Fraction(0))
            size = sum(abs(float(X[i, k]) * sc[k] * w[k]) + abs(sh[k] * sc[k] * w[k]) for k in range(d))
            assert abs(float(Fraction(z[i]) - exact)) <= 4 * d * eps * size
            assert abs(float(Fraction(z[i]) - exact)) <= 1e-6 * np.finfo(np.float32).eps * size
        out = np.empty(d)
        fz._query_rmatvec(X, qp[q], qp[q + 1], t[qp[q]:qp[q + 1]], shift, scale, mode, q, np.empty(d), out)
        for k in range(d):
            exact = sum(((Fraction(float(X[i, k])) - Fraction(sh[k])) * Fraction(sc[k]) * Fraction(t[i])
                         for i in range(qp[q], qp[q + 1])), Fraction(0))
            size = sum(abs(float(X[i, k]) * t[i]) + abs(sh[k] * t[i]) for i in range(qp[q], qp[q + 1])) * sc[k]
            assert abs(float(Fraction(out[k]) - exact)) <= 4 * (qp[q + 1] - qp[q] + 2) * eps * size
