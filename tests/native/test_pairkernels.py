"""Pair kernels (streamrank._native.pairkernels) against the brute-force twins in pair_oracle.py."""

import numpy as np
import pytest

import pair_oracle as po
from streamrank._native import pairkernels as pk
from streamrank._native import query_sort as qs
from streamrank._native import parallel
from streamrank.errors import ParameterError

RTOL = 1e-10


def make_block(rng, sizes, n_levels, grid=True, zrange=8.0):
    """Queries of the given sizes; z on a half-integer grid (many exact ties, exact margin-0
    pairs) or continuous; label ranks uniform over 0..n_levels-1; random query weights."""
    qp = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(qp[-1])
    if grid:
        z = rng.integers(-int(2 * zrange), int(2 * zrange) + 1, n) / 2.0
    else:
        z = rng.uniform(-zrange, zrange, n)
    y_rank = rng.integers(0, n_levels, n).astype(np.int32)
    mu = rng.uniform(0.2, 3.0, len(sizes))
    return z, y_rank, qp, mu


def cost_tables(rng, n_levels):
    """(name, lam, modes to run) for constant, separable and arbitrary costs."""
    g = np.concatenate([[0.0], np.cumsum(rng.uniform(0.25, 2.0, n_levels - 1))])
    const = np.full((n_levels, n_levels), 1.5)
    sep = g[:, None] - g[None, :]
    arb = rng.uniform(0.0, 3.0, (n_levels, n_levels))
    return [
        ("constant", const, [None, "levels", "constant"]),
        ("separable", sep, [None, "levels", "separable"]),
        ("arbitrary", arb, [None]),
    ]


def assert_matches_oracle(z, y_rank, qp, lam, mu, cost, rng):
    loss_ref, grad_ref, grad_scale = po.loss_grad_block(z, y_rank, qp, lam, mu)
    loss, dz, state = pk.loss_grad(z, y_rank, qp, cost, mu)
    assert loss == pytest.approx(loss_ref, rel=RTOL, abs=1e-300)
    # per component, relative to the sum of |terms| (a component may cancel to ~0)
    assert np.all(np.abs(dz - grad_ref) <= RTOL * grad_scale), cost.mode_name
    u = rng.normal(size=len(z))
    hu_ref, hu_scale = po.hess_prod_block(z, y_rank, qp, lam, mu, u)
    hu = pk.hess_prod(u, y_rank, qp, cost, mu, state)
    assert np.all(np.abs(hu - hu_ref) <= RTOL * hu_scale), cost.mode_name
    return state


# ------------------------------------------------------------------------------------------
# against brute force
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n_levels", [2, 3, 5, 9, 32])
def test_kernels_equal_brute_force(n_levels):
    rng = np.random.default_rng(100 + n_levels)
    # single-document, empty, tiny and large queries in one block
    sizes = [1, 0, 2, 17, 300, 1, 64]
    z, y_rank, qp, mu = make_block(rng, sizes, n_levels)
    y_rank[qp[3]:qp[4]] = min(1, n_levels - 1)  # a single-label query (17 docs)
    for _, lam, modes in cost_tables(rng, n_levels):
        for mode in modes:
            assert_matches_oracle(z, y_rank, qp, lam, mu, pk.pair_cost(lam, mode), rng)


def test_large_query_brute_force():
    rng = np.random.default_rng(7)
    z, y_rank, qp, mu = make_block(rng, [2000], 4, zrange=20.0)
    for _, lam, modes in cost_tables(rng, 4):
        assert_matches_oracle(z, y_rank, qp, lam, mu, pk.pair_cost(lam, modes[-1]), rng)


@pytest.mark.parametrize("seed", range(6))
def test_random_blocks_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_levels = int(rng.integers(2, 33))
    sizes = rng.integers(0, 400, int(rng.integers(1, 8)))
    z, y_rank, qp, mu = make_block(rng, sizes, n_levels, grid=seed % 2 == 0,
                                   zrange=float(rng.choice([0.5, 2.0, 30.0])))
    for _, lam, modes in cost_tables(rng, n_levels):
        for mode in modes:
            assert_matches_oracle(z, y_rank, qp, lam, mu, pk.pair_cost(lam, mode), rng)


def test_all_ties_and_margin_one_ties():
    """Every score equal (all pairs active, margin exactly 1) and scores one apart (margin
    exactly 0: inactive) -- the boundary cases of the active test."""
    rng = np.random.default_rng(3)
    y_rank = rng.integers(0, 3, 200).astype(np.int32)
    qp = np.array([0, 100, 200])
    lam = rng.uniform(0.5, 2.0, (3, 3))
    for z in (np.zeros(200), np.where(y_rank == 2, 1.0, 0.0), rng.integers(0, 3, 200) * 1.0):
        for mode in (None, "levels"):
            assert_matches_oracle(z, y_rank, qp, lam, 1.0, pk.pair_cost(lam, mode), rng)
    # all higher-label documents exactly one above: every pair has margin 0 -> loss 0
    z = y_rank.astype(np.float64)
    loss, dz, _ = pk.loss_grad(z, y_rank, qp, np.ones((3, 3)), 1.0)
    assert loss == 0.0 and not dz.any()


def test_oracle_loop_equals_matrix_form():
    rng = np.random.default_rng(11)
    z, y_rank, _, _ = make_block(rng, [40], 4)
    lam = rng.uniform(0, 2, (4, 4))
    assert po.loss_loop_query(z, y_rank, lam, 1.3) == pytest.approx(
        po.loss_grad_query(z, y_rank, lam, 1.3)[0], rel=1e-13)


def test_no_cancellation_with_large_scores():
    """Scores offset by 1e3 with margins of 0.5: the moment form keeps full relative accuracy
    (the expansion W(1-z)^2 + 2(1-z)S1 + S2 would lose ~7 digits here)."""
    rng = np.random.default_rng(5)
    z, y_rank, qp, mu = make_block(rng, [500, 300], 5, zrange=3.0)
    z = z + 1000.0  # exact on the half-integer grid; differences stay exact
    for _, lam, modes in cost_tables(rng, 5):
        for mode in modes:
            assert_matches_oracle(z, y_rank, qp, lam, mu, pk.pair_cost(lam, mode), rng)


# ------------------------------------------------------------------------------------------
# calculus: gradient and Hessian against differences
# ------------------------------------------------------------------------------------------


def smooth_step(z, y_rank, qp, dirs):
    """A step h such that no pair margin changes sign within z +- h * d for every d in dirs."""
    min_margin = np.inf
    for q in range(len(qp) - 1):
        s, e = qp[q], qp[q + 1]
        m, _, _ = po.pair_matrices(z[s:e], y_rank[s:e], np.ones((32, 32)), 1.0)
        pref = y_rank[s:e, None] > y_rank[None, s:e]
        if pref.any():
            min_margin = min(min_margin, np.abs(m[pref]).min())
    spread = max(2 * np.abs(d).max() for d in dirs)
    return 0.25 * min_margin / spread


@pytest.mark.parametrize("mode_kind", ["constant", "separable", "arbitrary"])
def test_gradient_matches_central_differences(mode_kind):
    rng = np.random.default_rng(21)
    z, y_rank, qp, mu = make_block(rng, [30, 1, 50], 6, grid=False, zrange=2.0)
    lam = {name: t for name, t, _ in cost_tables(rng, 6)}[mode_kind]
    cost = pk.pair_cost(lam, {"constant": "constant", "separable": "separable"}.get(mode_kind))
    f0, g0, _ = pk.loss_grad(z, y_rank, qp, cost, mu)
    dirs = [rng.normal(size=len(z)) for _ in range(3)] + [np.eye(len(z))[k] for k in (0, 5, 40)]
    h = smooth_step(z, y_rank, qp, dirs)
    assert h > 1e-9
    for d in dirs:
        fp = pk.loss_grad(z + h * d, y_rank, qp, cost, mu)[0]
        fm = pk.loss_grad(z - h * d, y_rank, qp, cost, mu)[0]
        # f is quadratic on the segment: the central difference is exact up to rounding
        fd = (fp - fm) / (2 * h)
        assert fd == pytest.approx(g0 @ d, rel=1e-6, abs=1e-9 * f0 / h)


@pytest.mark.parametrize("mode", [None, "constant", "separable"])
def test_hessian_matches_gradient_differences_and_is_symmetric(mode):
    rng = np.random.default_rng(31)
    z, y_rank, qp, mu = make_block(rng, [80, 3, 120], 12, grid=False, zrange=3.0)
    g = np.concatenate([[0.0], np.cumsum(rng.uniform(0.5, 1.5, 11))])
    lam = np.ones((12, 12)) if mode == "constant" else g[:, None] - g[None, :]
    cost = pk.pair_cost(lam, mode)
    _, g0, state = pk.loss_grad(z, y_rank, qp, cost, mu)
    u = rng.normal(size=len(z))
    v = rng.normal(size=len(z))
    hu = pk.hess_prod(u, y_rank, qp, cost, mu, state)
    hv = pk.hess_prod(v, y_rank, qp, cost, mu, state)
    h = smooth_step(z, y_rank, qp, [u])
    g1 = pk.loss_grad(z + h * u, y_rank, qp, cost, mu)[1]
    # the gradient is linear in z while the active set holds: (g1 - g0) / h == H u
    tol = 1e-12 * np.abs(g0).max() / h + 1e-9 * np.abs(hu).max()
    assert np.all(np.abs((g1 - g0) / h - hu) <= tol)
    assert v @ hu == pytest.approx(u @ hv, rel=1e-12)
    # and the dense generalised Hessian of the oracle
    s, e = qp[2], qp[3]
    hmat = po.hessian_query(z[s:e], y_rank[s:e], lam, mu[2])
    np.testing.assert_allclose(hu[s:e], hmat @ u[s:e], rtol=1e-10, atol=1e-10 * np.abs(hmat).sum())


@pytest.mark.parametrize("n_levels", [2, 3, 5])
def test_hess_diag_is_the_diagonal_of_the_brute_force_hessian(n_levels):
    """The diagonal that kernel_precond's M ~ H takes, against the oracle's dense per-query
    generalised Hessian, for every cost mode, with ties and exact margin-one pairs (grid scores)."""
    rng = np.random.default_rng(40 + n_levels)
    z, y_rank, qp, mu = make_block(rng, [1, 60, 7, 140, 2], n_levels, grid=True, zrange=3.0)
    for name, lam, modes in cost_tables(rng, n_levels):
        for mode in modes:
            cost = pk.pair_cost(lam, mode)
            _, _, state = pk.loss_grad(z, y_rank, qp, cost, mu)
            d = pk.hess_diag(y_rank, qp, cost, mu, state)
            for q in range(len(qp) - 1):
                s, e = qp[q], qp[q + 1]
                want = np.diag(po.hessian_query(z[s:e], y_rank[s:e], lam, mu[q]))
                np.testing.assert_allclose(d[s:e], want, rtol=1e-12, atol=1e-12, err_msg=f"{name} {mode} q{q}")
            assert np.any(d > 0)


def test_hessian_needs_no_scores_and_keeps_active_set():
    """hess_prod uses the active set of the last loss_grad that filled the state: a second state
    at another point does not disturb the first (TRON keeps both, commits on accept)."""
    rng = np.random.default_rng(41)
    z, y_rank, qp, mu = make_block(rng, [60, 90], 4)
    lam = np.ones((4, 4))
    _, _, st0 = pk.loss_grad(z, y_rank, qp, lam, mu)
    z1 = z + rng.integers(-3, 4, len(z)) / 2.0
    _, _, st1 = pk.loss_grad(z1, y_rank, qp, lam, mu)
    u = rng.normal(size=len(z))
    for st, zz in ((st0, z), (st1, z1)):
        ref, scale = po.hess_prod_block(zz, y_rank, qp, lam, mu, u)
        assert np.all(np.abs(pk.hess_prod(u, y_rank, qp, lam, mu, st) - ref) <= RTOL * scale)
    # reusing a state's arrays overwrites them with the new point
    _, _, st2 = pk.loss_grad(z1, y_rank, qp, lam, mu, state=st0)
    assert st2 is st0
    np.testing.assert_array_equal(st0.cut_pref, st1.cut_pref)


def test_hess_prod_many_directions_at_once():
    rng = np.random.default_rng(51)
    z, y_rank, qp, mu = make_block(rng, [70, 1, 40], 5)
    for _, lam, modes in cost_tables(rng, 5):
        for mode in modes:
            cost = pk.pair_cost(lam, mode)
            _, _, st = pk.loss_grad(z, y_rank, qp, cost, mu)
            u = rng.normal(size=(len(z), 3))
            hu = pk.hess_prod(u, y_rank, qp, cost, mu, st)
            assert hu.shape == u.shape
            for k in range(3):
                hk = pk.hess_prod(u[:, k], y_rank, qp, cost, mu, st)
                np.testing.assert_allclose(hu[:, k], hk, rtol=1e-12, atol=1e-12 * np.abs(hu).max())


# ------------------------------------------------------------------------------------------
# determinism, plain-Python path, validation
# ------------------------------------------------------------------------------------------


def test_same_bits_for_any_thread_count(monkeypatch):
    rng = np.random.default_rng(61)
    z, y_rank, qp, mu = make_block(rng, rng.integers(1, 200, 40), 5, grid=False)
    lam = rng.uniform(0, 2, (5, 5))
    u = rng.normal(size=len(z))
    monkeypatch.setattr(parallel, "SERIAL_WORK", 0)  # every call below is cut into chunks
    results = []
    for threads in (1, 2, 3, 7):
        with parallel.limit(threads):
            loss, dz, st = pk.loss_grad(z, y_rank, qp, lam, mu)
            results.append((loss, dz, pk.hess_prod(u, y_rank, qp, lam, mu, st)))
    for loss, dz, hu in results[1:]:
        assert loss == results[0][0]
        np.testing.assert_array_equal(dz, results[0][1])
        np.testing.assert_array_equal(hu, results[0][2])


@pytest.mark.parametrize("eta", [0.0, 0.3])
def test_kernels_run_as_plain_python(eta):
    rng = np.random.default_rng(71)
    z, y_rank, qp, mu = make_block(rng, [9, 1, 12], 3)
    cost = pk.pair_cost(rng.uniform(0, 2, (3, 3)), eta=eta)
    loss, dz, st = pk.loss_grad(z, y_rank, qp, cost, mu)
    n = len(z)
    dz2 = np.empty(n)
    st2 = pk.PairState.empty(n, eta)
    args = (cost.lam, cost.g, cost.c0, cost.lam_r, cost.g_r, cost.mode, cost.eta, mu)
    loss_q = np.empty(len(qp) - 1)
    pk._loss_grad_kernel.py_func(0, len(qp) - 1, z, y_rank, qp, *args, dz2, *st2.arrays, loss_q)
    assert sum(loss_q) == loss
    np.testing.assert_array_equal(dz2, dz)
    u = rng.normal(size=(n, 1))
    out = np.empty((n, 1))
    pk._hess_prod_kernel.py_func(0, len(qp) - 1, u, y_rank, qp, *args, *st2.arrays, out)
    np.testing.assert_array_equal(out[:, 0], pk.hess_prod(u[:, 0], y_rank, qp, cost, mu, st))


def test_pair_cost_classification():
    assert pk.pair_cost(np.ones((3, 3))).mode == pk.MODE_LEVELS  # few levels: per-level slots
    assert pk.pair_cost(np.ones((32, 32))).mode == pk.MODE_CONSTANT
    gains = 2.0 ** np.arange(32) - 1
    lam = gains[:, None] - gains[None, :]
    lam[0, 0] = 99.0  # unused entries (a <= b) do not matter
    cost = pk.pair_cost(lam)
    assert cost.mode == pk.MODE_SEPARABLE and cost.g[0] == 0.0
    assert pk.pair_cost(np.random.default_rng(0).uniform(1, 2, (32, 32))).mode == pk.MODE_LEVELS
    with pytest.raises(ParameterError):
        pk.pair_cost(np.tril(-np.ones((3, 3)), -1))
    with pytest.raises(ParameterError):
        pk.pair_cost(np.arange(9.0).reshape(3, 3) + np.eye(3), mode="constant")
    with pytest.raises(ParameterError):
        pk.pair_cost(np.ones((2, 3)))


def test_label_ranks():
    r, levels = pk.label_ranks(np.array([2.0, 0.0, 4.0, 2.0], np.float32))
    np.testing.assert_array_equal(r, [1, 0, 2, 1])
    np.testing.assert_array_equal(levels, [0.0, 2.0, 4.0])
    with pytest.raises(ParameterError):
        pk.label_ranks([1.0, 3.0], levels=[0.0, 1.0, 2.0])


def test_bad_input_is_refused():
    z = np.zeros(4)
    y_rank = np.array([0, 1, 0, 1], np.int32)
    lam = np.ones((2, 2))
    with pytest.raises(ParameterError, match="label ranks"):
        pk.loss_grad(z, np.array([0, 2, 0, 1]), [0, 4], lam)
    with pytest.raises(ParameterError, match="query_ptr"):
        pk.loss_grad(z, y_rank, [0, 3], lam)
    with pytest.raises(ParameterError, match="finite"):
        pk.loss_grad(np.array([0.0, np.nan, 0.0, 1.0]), y_rank, [0, 4], lam)
    _, _, st = pk.loss_grad(z, y_rank, [0, 2, 4], lam)
    with pytest.raises(ParameterError, match="state"):
        pk.hess_prod(np.zeros(3), y_rank[:3], [0, 3], lam, 1.0, st)
    with pytest.raises(ParameterError, match="state"):
        pk.hess_prod(np.zeros(4), y_rank, [0, 1, 4], lam, 1.0, st)
    with pytest.raises(ParameterError, match="state"):
        pk.hess_prod(np.zeros(4), y_rank, [0, 2, 4], lam, 1.0, pk.PairState.empty(4))


@pytest.mark.parametrize("n", [0, 1, 2, 15, 16, 17, 33, 1000, 4099])
def test_argsort_decreasing_is_numpys_stable_order(n):
    rng = np.random.default_rng(n)
    for z in (rng.normal(size=n), rng.integers(0, 4, n).astype(float), np.zeros(n), -np.arange(n, dtype=float),
              np.arange(n, dtype=float)):
        want = np.argsort(-z, kind="stable")
        np.testing.assert_array_equal(qs.argsort_decreasing(z), want)
        np.testing.assert_array_equal(qs.argsort_decreasing.py_func(z), want)


@pytest.mark.parametrize("eta", [0.0, 0.3])
@pytest.mark.parametrize("mode", ["levels", "constant", "separable"])
@pytest.mark.parametrize("damage", ["order", "cut_pref", "cut_less", "cut_band"])
def test_hess_prod_refuses_a_damaged_state(mode, eta, damage):
    """hess_prod indexes with the stored order and prefix lengths unchecked inside its sweeps:
    values no loss pass writes (a row outside the query, a prefix past it) raise ValueError, in
    every accumulator mode and with the smooth hinge's band, not a read outside the query."""
    if damage == "cut_band" and eta == 0.0:
        pytest.skip("the band's state exists only with eta > 0")
    rng = np.random.default_rng(7)
    qptr = np.array([0, 9, 20], np.int64)
    rank = rng.integers(0, 3, 20).astype(np.int32)
    rank[[0, 1, 9, 10]] = [0, 2, 0, 2]
    lam = {"levels": rng.uniform(0.5, 2, (3, 3)), "constant": np.ones((3, 3)),
           "separable": np.subtract.outer([0.0, 1.0, 3.0], [0.0, 1.0, 3.0])}[mode]
    cost = pk.pair_cost(lam, mode=mode, eta=eta)
    assert cost.mode == {"levels": pk.MODE_LEVELS, "constant": pk.MODE_CONSTANT, "separable": pk.MODE_SEPARABLE}[mode]
    z = rng.standard_normal(20)
    _, _, state = pk.loss_grad(z, rank, qptr, cost, np.ones(2))
    u = rng.standard_normal(20)
    pk.hess_prod(u, rank, qptr, cost, np.ones(2), state)  # the state as written: fine
    arr = getattr(state, damage)
    arr[12] = 11 if damage == "order" else 12  # query 1 has 11 rows: a row past it, a prefix past it
    with pytest.raises(ValueError, match="stored active set"):
        pk.hess_prod(u, rank, qptr, cost, np.ones(2), state)
