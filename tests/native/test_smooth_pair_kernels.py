"""Paper 001's smooth hinge in the pair kernels against explicit pairs (pair_oracle.py) and
against finite differences, with label-pair costs, query weights, ties and pairs exactly on the
band's edges."""

import numpy as np
import pytest

import pair_oracle as po
from streamrank._native import pairkernels as pk
from streamrank.errors import ParameterError
from test_pairkernels import cost_tables, make_block

RTOL = 1e-10


def assert_matches_oracle(z, y_rank, qp, lam, mu, cost, rng):
    eta = cost.eta
    loss_ref, grad_ref, grad_scale = po.loss_grad_block(z, y_rank, qp, lam, mu, eta)
    loss, dz, state = pk.loss_grad(z, y_rank, qp, cost, mu)
    assert loss == pytest.approx(loss_ref, rel=RTOL, abs=1e-300)
    assert np.all(np.abs(dz - grad_ref) <= RTOL * grad_scale + 1e-300), cost.mode_name
    for u in (rng.normal(size=len(z)), rng.normal(size=(len(z), 3))):
        for k in range(u.shape[1] if u.ndim == 2 else 1):
            uk = u[:, k] if u.ndim == 2 else u
            hu_ref, hu_scale = po.hess_prod_block(z, y_rank, qp, lam, mu, uk, eta)
            hu = pk.hess_prod(u, y_rank, qp, cost, mu, state)
            hu = hu[:, k] if u.ndim == 2 else hu
            assert np.all(np.abs(hu - hu_ref) <= RTOL * hu_scale + 1e-300), cost.mode_name
    return state


@pytest.mark.parametrize("eta", [0.5, 0.25, 0.1, 0.9])
@pytest.mark.parametrize("n_levels", [2, 3, 5, 32])
def test_smooth_hinge_equals_explicit_pairs(n_levels, eta):
    """Scores on a grid of 0.25 put many margins exactly on -eta, 0 and +eta (eta = 0.25, 0.5):
    the band's edges, where the two sides must agree (p is C2)."""
    rng = np.random.default_rng(200 + n_levels)
    sizes = [1, 0, 2, 17, 300, 1, 64]
    qp = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    z = rng.integers(-12, 13, int(qp[-1])) / 4.0
    y_rank = rng.integers(0, n_levels, int(qp[-1])).astype(np.int32)
    mu = rng.uniform(0.2, 3.0, len(sizes))
    y_rank[qp[3]:qp[4]] = min(1, n_levels - 1)  # a single-label query
    for _, lam, modes in cost_tables(rng, n_levels):
        for mode in modes:
            assert_matches_oracle(z, y_rank, qp, lam, mu, pk.pair_cost(lam, mode, eta=eta), rng)


def test_band_edges_and_ties_are_hit():
    """The grid really puts pairs at m = -eta, 0, eta and in ties (else the test above proves
    less than it says)."""
    rng = np.random.default_rng(203)
    z = rng.integers(-12, 13, 300) / 4.0
    r = rng.integers(0, 3, 300)
    m = (z[None, :] - z[:, None]) + 1.0
    pref = r[:, None] > r[None, :]
    for edge in (-0.5, -0.25, 0.0, 0.25, 0.5, 1.0):
        assert np.any(pref & (m == edge))


@pytest.mark.parametrize("seed", range(4))
def test_random_blocks_continuous_scores(seed):
    rng = np.random.default_rng(300 + seed)
    n_levels = int(rng.integers(2, 9))
    sizes = rng.integers(0, 300, int(rng.integers(1, 6)))
    z, y_rank, qp, mu = make_block(rng, sizes, n_levels, grid=False, zrange=float(rng.choice([0.3, 2.0, 30.0])))
    eta = float(rng.uniform(0.01, 0.9))
    for _, lam, modes in cost_tables(rng, n_levels):
        for mode in modes:
            assert_matches_oracle(z, y_rank, qp, lam, mu, pk.pair_cost(lam, mode, eta=eta), rng)


@pytest.mark.parametrize("n", [400, pytest.param(1500, marks=pytest.mark.slow)])
def test_a_query_of_a_thousand_documents_with_large_scores(n):
    """n documents in one query (the oracle's cost grows as n^2: 1,500 in the slow tier), scores
    offset by 1e3 (exact on the grid), margins in and around the band."""
    rng = np.random.default_rng(9)
    z = rng.integers(-40, 41, n) / 8.0 + 1000.0
    y_rank = rng.integers(0, 5, n).astype(np.int32)
    qp = np.array([0, n])
    for _, lam, modes in cost_tables(rng, 5):
        assert_matches_oracle(z, y_rank, qp, lam, 1.7, pk.pair_cost(lam, modes[-1], eta=0.375), rng)


def test_gradient_and_hessian_match_finite_differences():
    """The smooth hinge is C2: central differences of the loss give the gradient and differences of
    the gradient the Hessian product, with O(h^2) error, across region changes."""
    rng = np.random.default_rng(21)
    z, y_rank, qp, mu = make_block(rng, [30, 1, 50], 5, grid=False, zrange=1.5)
    lam = rng.uniform(0.2, 2.0, (5, 5))
    for eta in (0.5, 0.2):
        cost = pk.pair_cost(lam, eta=eta)
        m, act, _ = po.pair_matrices(z[qp[2]:], y_rank[qp[2]:], lam, 1.0, eta)
        assert np.any(act & (np.abs(m) < eta)) and np.any(act & (m > eta))  # both regions present
        f0, g0, st = pk.loss_grad(z, y_rank, qp, cost, mu)
        for d in [rng.normal(size=len(z)) for _ in range(3)]:
            h = 1e-5
            fd = (pk.loss_grad(z + h * d, y_rank, qp, cost, mu)[0] - pk.loss_grad(z - h * d, y_rank, qp, cost, mu)[0])
            assert fd / (2 * h) == pytest.approx(g0 @ d, rel=1e-6)
            gd = (pk.loss_grad(z + h * d, y_rank, qp, cost, mu)[1] - pk.loss_grad(z - h * d, y_rank, qp, cost, mu)[1])
            hd = pk.hess_prod(d, y_rank, qp, cost, mu, st)
            np.testing.assert_allclose(gd / (2 * h), hd, rtol=1e-5, atol=1e-6 * np.abs(hd).max())


def test_hessian_symmetric_and_diag():
    rng = np.random.default_rng(31)
    z, y_rank, qp, mu = make_block(rng, [80, 3, 120], 4, grid=True, zrange=2.0)
    lam = rng.uniform(0.5, 2.0, (4, 4))
    cost = pk.pair_cost(lam, eta=0.5)
    _, _, st = pk.loss_grad(z, y_rank, qp, cost, mu)
    u, v = rng.normal(size=len(z)), rng.normal(size=len(z))
    assert v @ pk.hess_prod(u, y_rank, qp, cost, mu, st) == pytest.approx(
        u @ pk.hess_prod(v, y_rank, qp, cost, mu, st), rel=1e-12)
    d = pk.hess_diag(y_rank, qp, cost, mu, st)
    for q in range(len(qp) - 1):
        s, e = qp[q], qp[q + 1]
        want = np.diag(po.hessian_query(z[s:e], y_rank[s:e], lam, mu[q], 0.5))
        np.testing.assert_allclose(d[s:e], want, rtol=1e-12, atol=1e-12)


def test_eta_to_zero_tends_to_the_squared_hinge():
    rng = np.random.default_rng(5)
    z, y_rank, qp, mu = make_block(rng, [200, 100], 3, grid=False, zrange=2.0)
    lam = np.ones((3, 3))
    sq, gsq, _ = pk.loss_grad(z, y_rank, qp, lam, mu)
    gaps = []
    for eta in (0.1, 0.01, 0.001):
        sm, gsm, _ = pk.loss_grad(z, y_rank, qp, pk.pair_cost(lam, eta=eta), mu)
        # p^2 - max(0, m)^2 lies in [0, 0.0515 eta^2] for every pair (paper 001, theorem 2's constant)
        n_pairs = sum(po.pair_matrices(z[a:b], y_rank[a:b], lam, 1.0)[1].size for a, b in zip(qp[:-1], qp[1:]))
        assert 0.0 <= sm - sq <= 0.0515 * eta ** 2 * mu.max() * n_pairs
        gaps.append(np.abs(gsm - gsq).max())
    assert gaps[0] > gaps[1] > gaps[2]


def test_the_constant_of_theorem_2():
    """max over m of p(m)^2 - max(0, m)^2 is 0.0515 eta^2 (to the paper's digits)."""
    m = np.linspace(-1, 1, 2_000_001)
    p, _, _ = po.smooth_hinge(m, 1.0)
    gap = (p * p - np.maximum(m, 0) ** 2).max()
    assert gap == pytest.approx(0.0515, abs=5e-5)
    assert np.all(p * p - np.maximum(m, 0) ** 2 >= -1e-15)


def test_a_squared_hinge_state_is_refused_for_the_smooth_hinge():
    rng = np.random.default_rng(1)
    z, y_rank, qp, mu = make_block(rng, [20], 3)
    _, _, st = pk.loss_grad(z, y_rank, qp, np.ones((3, 3)), mu)
    with pytest.raises(ParameterError, match="band"):
        pk.hess_prod(z, y_rank, qp, pk.pair_cost(np.ones((3, 3)), eta=0.3), mu, st)
    for bad in (-0.1, 1.0, 2.0, float("nan")):
        with pytest.raises(ParameterError, match="eta"):
            pk.pair_cost(np.ones((3, 3)), eta=bad)
