"""The one-column sweeps of the fused passes (streamrank._native.column_sweeps) against the
generic kernels of pairkernels, bit for bit, and the warm sort against the stable argsort.

The generic kernels are the reference: pairkernels' own tests prove them against brute-force
pair sums. Here the fused passes run once through the generic path (a twin of the fused kernel
written below from pairkernels' per-query functions) and once through the column sweeps, on
queries with ties, many label levels, costs of any shape, and any start for the warm sort.
"""

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from streamrank._native import query_sort as qs
from streamrank._native import fused as fz
from streamrank._native import pairkernels as pk


@numba.njit(cache=True, nogil=True)
def _generic_passes(X, w, v, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
                    loss_q, grad_p, hess_p, z_out, order, cut_pref, cut_less, cut_band, zsort):
    """fused_loss_grad then fused_hess as they were before the column sweeps: every query
    through pairkernels._query_loss_grad / _query_hess with an (l, 1) payload."""
    wf, vf = np.empty(w.shape[0]), np.empty(v.shape[0])
    for q in range(qptr.shape[0] - 1):
        s, e = qptr[q], qptr[q + 1]
        l = e - s
        cw = fz._fold(w, shift, scale, affine, q, wf)
        cv = fz._fold(v, shift, scale, affine, q, vf)
        for i in range(s, e):
            z_out[i] = fz._raw_dot(X, i, wf) - cw
        if pk._single_level(rank[s:e]):
            loss_q[q] = 0.0
            grad_p[q, :] = 0.0
            hess_p[q, :] = 0.0
            for p in range(l):
                order[s + p] = p
                cut_pref[s + p] = 0
                cut_less[s + p] = 0
            continue
        dz = np.empty(l)
        loss_q[q] = pk._query_loss_grad(z_out[s:e], rank[s:e], lam, g, c0, lam_r, g_r, mode, eta, mu[q], dz,
                                        order[s:e], cut_pref[s:e], cut_less[s:e], cut_band, zsort)
        fz._query_rmatvec(X, s, e, dz, shift, scale, affine, q, np.empty(X.shape[1]), grad_p[q])
        u = np.empty((l, 1))
        for i in range(l):
            u[i, 0] = fz._raw_dot(X, s + i, vf) - cv
        t = np.empty((l, 1))
        pk._query_hess(u, rank[s:e], lam, g, c0, lam_r, g_r, mode, eta, mu[q], order[s:e], cut_pref[s:e],
                       cut_less[s:e], cut_band, zsort, t)
        fz._query_rmatvec(X, s, e, t[:, 0], shift, scale, affine, q, np.empty(X.shape[1]), hess_p[q])


def _bits(a):
    return np.ascontiguousarray(a, np.float64).view(np.int64)


def _run_both(X, qptr, rank, lam, mu, w, v, affine=0, shift=None, scale=None, warm_orders=()):
    """Returns (generic outputs, [fast outputs for a cold start and for each warm start])."""
    n, d = X.shape
    nq = qptr.shape[0] - 1
    if shift is None:
        shift, scale = np.zeros((1, d)), np.ones((1, d))
    cost = pk.pair_cost(lam)
    assert cost.mode == pk.MODE_LEVELS and cost.eta == 0.0
    c = (cost.lam, cost.g, cost.c0, cost.lam_r, cost.g_r, cost.mode, cost.eta)
    ref = {"loss": np.empty(nq), "grad": np.empty((nq, d)), "hess": np.empty((nq, d)), "z": np.empty(n)}
    rst = pk.state_arrays(n)
    _generic_passes(X, w, v, shift, scale, affine, qptr, rank, *c, mu, ref["loss"], ref["grad"], ref["hess"],
                    ref["z"], *rst)
    ref["state"] = rst[:3]
    got = []
    for start in (None,) + tuple(warm_orders):
        st_ = pk.state_arrays(n)
        if start is not None:
            st_[0][:] = start
        out = {"loss": np.empty(nq), "grad": np.empty((nq, d)), "hess": np.empty((nq, d)), "z": np.empty(n)}
        fz.fused_loss_grad(0, nq, X, w, shift, scale, affine, qptr, rank, *c, mu, *st_, out["loss"], out["grad"],
                           out["z"], start is not None)
        fz.fused_hess(0, nq, X, v, shift, scale, affine, qptr, rank, *c, mu, *st_, out["hess"])
        out["state"] = st_[:3]
        got.append(out)
    return ref, got


def _assert_same(ref, got):
    for k in ("loss", "grad", "hess", "z"):
        assert np.array_equal(_bits(ref[k]), _bits(got[k])), k
    for a, b in zip(ref["state"], got["state"]):
        assert np.array_equal(a, b)


def _query_perms(qptr, rng):
    """A random permutation of 0..l-1 per query, laid out as the state's order array."""
    out = np.empty(qptr[-1], np.int32)
    for a, b in zip(qptr[:-1], qptr[1:]):
        out[a:b] = rng.permutation(b - a)
    return out


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_lev=st.integers(2, pk.LEVELS_MAX), ties=st.booleans(),
       big=st.booleans(), cost_kind=st.sampled_from(["ones", "random", "gains", "sparse"]))
def test_column_sweeps_equal_generic_kernels(seed, n_lev, ties, big, cost_kind):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 400 if big else 40, rng.integers(1, 8))
    qptr = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    n, d = int(qptr[-1]), int(rng.integers(1, 9))
    X = rng.standard_normal((n, d)) * 10.0 ** rng.uniform(-3, 3, d)
    if ties:  # repeated rows and few distinct values: equal scores, equal margins
        X = np.round(X[rng.integers(0, max(1, n // 3), n)])
    X = X.astype(np.float32)
    rank = rng.integers(0, n_lev, n).astype(np.int32)
    lam = {"ones": np.ones((n_lev, n_lev)),
           "random": rng.uniform(0, 3, (n_lev, n_lev)),
           "gains": np.subtract.outer(2.0 ** np.arange(n_lev), 2.0 ** np.arange(n_lev)).clip(0),
           "sparse": rng.uniform(0, 3, (n_lev, n_lev)) * (rng.random((n_lev, n_lev)) < 0.4)}[cost_kind]
    mu = rng.uniform(0.1, 3.0, len(lens))
    w, v = rng.standard_normal(d), rng.standard_normal(d)
    ref, got = _run_both(X, qptr, rank, lam, mu, w, v, warm_orders=[_query_perms(qptr, rng)])
    for g in got:  # a cold start and any start
        _assert_same(ref, g)
    # the previous pass's order as the start, the scores moved a little (the solver's case)
    w2 = w + 1e-3 * rng.standard_normal(d)
    ref2, got2 = _run_both(X, qptr, rank, lam, mu, w2, v, warm_orders=[ref["state"][0]])
    for g in got2:
        _assert_same(ref2, g)


@pytest.mark.parametrize("kind", ["zscore", "query_minmax"])
def test_column_sweeps_with_normalisation(kind):
    from streamrank.features.normalize import Normalizer
    rng = np.random.default_rng(3)
    lens = rng.integers(1, 200, 12)
    qptr = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    n, d = int(qptr[-1]), 11
    X = (rng.standard_normal((n, d)) * 10.0 ** rng.uniform(-3, 4, d) + 10.0 ** rng.uniform(0, 5, d)).astype(np.float32)
    norm = Normalizer(kind)
    if kind == "zscore":
        norm.fit([X], d)
    shift, scale, affine = norm.affine(X, qptr)
    rank = rng.integers(0, 5, n).astype(np.int32)
    ref, got = _run_both(X, qptr, rank, np.ones((5, 5)), np.ones(len(lens)), rng.standard_normal(d),
                         rng.standard_normal(d), affine, shift, scale, warm_orders=[_query_perms(qptr, rng)])
    for g in got:
        _assert_same(ref, g)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 300), distinct=st.integers(1, 400),
       start=st.sampled_from(["sorted", "reversed", "random", "near", "bad"]))
def test_sort_query_is_the_stable_decreasing_order(seed, n, distinct, start):
    rng = np.random.default_rng(seed)
    z = rng.integers(0, distinct, n).astype(np.float64) * rng.choice([1.0, -1.0, 1e-300, 1e300])
    want = np.argsort(-z, kind="stable")
    if start == "sorted":
        prev = want.copy()
    elif start == "reversed":
        prev = want[::-1].copy()
    elif start == "near":  # a few swaps of neighbours: the solver's case
        prev = want.copy()
        for _ in range(max(1, n // 10)):
            if n > 1:
                i = rng.integers(0, n - 1)
                prev[i], prev[i + 1] = prev[i + 1], prev[i]
    elif start == "bad":  # out of range: must fall back, not read outside z
        prev = rng.integers(-5, n + 5, n)
    else:
        prev = rng.permutation(n)
    a, b = np.empty(n, np.int64), np.empty(n, np.int64)
    for warm in (False, True):
        got = qs.sort_query(z, prev.astype(np.int32), warm, a, b)
        assert np.array_equal(got[:n], want)
        assert np.array_equal(qs.sort_query.py_func(z, prev.astype(np.int32), warm, a.copy(), b.copy())[:n], want)


def test_warm_sort_gives_up_on_a_far_start():
    """A reversed start of distinct scores needs l^2 / 2 moves: past the budget the merge sort
    takes over (same result), so a wholesale reorder costs at most O(l) more than a cold sort."""
    n = 1000
    z = np.arange(n, dtype=np.float64)
    prev = np.arange(n, dtype=np.int32)  # increasing index = increasing score: fully reversed
    a = np.empty(n, np.int64)
    assert not qs._warm_sort_into(z, prev, a)
    assert qs._warm_sort_into(z, prev[::-1].copy(), a)
    assert np.array_equal(a, np.arange(n)[::-1])


def test_nan_scores_fall_back_to_the_merge_sort():
    z = np.array([1.0, np.nan, 3.0, 2.0])
    a, b = np.empty(4, np.int64), np.empty(4, np.int64)
    cold = qs.sort_query(z, np.arange(4, dtype=np.int32), False, a, b)[:4].copy()
    assert not qs._warm_sort_into(z, np.arange(4, dtype=np.int32), np.empty(4, np.int64))
    assert np.array_equal(qs.sort_query(z, np.arange(4, dtype=np.int32), True, a, b)[:4], cold)
    assert np.array_equal(cold, qs.argsort_decreasing(z))


def _runs_sorted(a, w, key):
    """``a`` with each run of w sorted as merge_runs expects (stable; by decreasing key[a], or up)."""
    a = a.copy()
    for lo in range(0, len(a), w):
        run = a[lo:lo + w]
        a[lo:lo + w] = run[np.argsort(run if key is None else -key[run], kind="stable")]
    return a


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 120), distinct=st.integers(1, 40),
       w=st.sampled_from([1, 2, 3, qs.SORT_RUN]), keyed=st.booleans())
def test_merge_runs_sorts_stably_and_counts_the_strict_inversions(seed, n, distinct, w, keyed):
    """The query sort's merges and Kendall's swap count are one kernel: the result is the stable
    sort (NumPy's twin) and the count the pairs p < q that sort swaps (the brute-force twin)."""
    rng = np.random.default_rng(seed)
    if keyed:
        key = rng.integers(0, distinct, n).astype(np.float64)
        start = _runs_sorted(rng.permutation(n).astype(np.int64), w, key)
        v = -key[start]  # swapped: key[later] > key[earlier]
        want = start[np.argsort(v, kind="stable")]
    else:
        key = None
        start = _runs_sorted(rng.integers(0, distinct, n).astype(np.int32), w, None)
        v = start
        want = np.sort(start, kind="stable")
    want_count = int(np.triu(v[:, None] > v[None, :], 1).sum())
    for f in (qs.merge_runs, qs.merge_runs.py_func):
        got, count = f(key, start.copy(), np.empty_like(start), w)
        assert np.array_equal(got, want)
        assert count == want_count


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_lev=st.integers(2, pk.LEVELS_MAX), m=st.integers(1, 5), ties=st.booleans())
def test_levels_hessian_kernel_equals_the_generic_one(seed, n_lev, m, ties):
    """pairkernels.hess_prod's kernel for the common case (MODE_LEVELS, squared hinge) gives the
    generic kernel's bits on payloads of m columns (the preconditioner's L Phi)."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 60, rng.integers(1, 8))
    qptr = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    n = int(qptr[-1])
    z = rng.standard_normal(n)
    if ties:
        z = np.round(z)
    rank = rng.integers(0, n_lev, n).astype(np.int32)
    cost = pk.pair_cost(rng.uniform(0, 3, (n_lev, n_lev)))
    mu = rng.uniform(0.1, 3.0, len(lens))
    _, _, state = pk.loss_grad(z, rank, qptr, cost, mu)
    u = rng.standard_normal((n, m))
    args = (u, rank, qptr, cost.lam, cost.g, cost.c0, cost.lam_r, cost.g_r, cost.mode, cost.eta, mu, *state.arrays)
    generic, levels = np.empty((n, m)), np.empty((n, m))
    pk._hess_prod_kernel(0, len(lens), *args, generic)
    pk._hess_prod_levels_kernel(0, len(lens), *args, levels)
    assert np.array_equal(_bits(generic), _bits(levels))
    assert np.array_equal(_bits(pk.hess_prod(u, rank, qptr, cost, mu, state)), _bits(generic))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_lev=st.integers(2, pk.LEVELS_MAX), l=st.integers(2, 300),
       window=st.integers(1, 40), ties=st.booleans())
def test_hessian_frames_same_bits_for_any_window(seed, n_lev, l, window, ties):
    """The Hessian frames build their per-level prefix sums a window of prefix lengths at a time
    (column_sweeps.HESS_WINDOW in the passes): any window, down to one length, gives the generic
    kernel's bits, whether a query's partners lie inside one window or across many."""
    from streamrank._native import column_sweeps as cs
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(l) * rng.choice([0.1, 1.0, 30.0])
    if ties:
        z = np.round(z)
    rank = rng.integers(0, n_lev, l).astype(np.int32)
    if rank.min() == rank.max():
        rank[0] = (rank[0] + 1) % n_lev  # the callers exclude single-level queries
    cost = pk.pair_cost(rng.uniform(0, 3, (n_lev, n_lev)))
    qptr = np.array([0, l], np.int64)
    _, _, state = pk.loss_grad(z, rank, qptr, cost, 1.7)
    order, cut_pref, cut_less = state.arrays[:3]
    u = rng.standard_normal(l)
    want = np.empty((l, 1))
    pk._query_hess(u.reshape(l, 1), rank, cost.lam, cost.g, cost.c0, cost.lam_r, cost.g_r, cost.mode, cost.eta, 1.7,
                   order, cut_pref, cut_less, state.arrays[3], state.arrays[4], want)
    for w in (window, l):
        got = np.empty(l)
        cs.query_hess(u, rank, cost.lam, cost.lam_r, 1.7, order, cut_pref, cut_less, got, np.empty(l),
                      np.empty(l, np.int32), np.empty(l), np.empty(l), np.empty((w + 1, n_lev, 2)))
        assert np.array_equal(_bits(got), _bits(want[:, 0]))


def test_hessian_frames_refuse_a_scratch_without_a_window():
    """A scratch of one row would leave the frames no prefix length to advance by: refused, not
    a loop that never ends."""
    from streamrank._native import column_sweeps as cs
    l, cost = 5, pk.pair_cost(np.ones((3, 3)))
    cut = np.arange(1, l + 1, dtype=np.int32)
    with pytest.raises(ValueError, match="at least two rows"):
        cs.query_hess(np.ones(l), np.array([0, 1, 2, 1, 0], np.int32), cost.lam, cost.lam_r, 1.0,
                      np.arange(l, dtype=np.int32), cut, cut, np.empty(l), np.empty(l), np.empty(l, np.int32),
                      np.empty(l), np.empty(l), np.empty((1, 3, 2)))


@pytest.mark.parametrize("cut", [[1, 2, 3, 4, 6], [2, 3, 1, 4, 5]], ids=["past the query", "decreasing"])
def test_hessian_frames_refuse_a_state_their_loss_pass_could_not_write(cut):
    """The Hessian frames read the prefix lengths the loss pass stored: one past the query would
    leave the window turning for ever, a decrease would read a row already gone. Both raise."""
    from streamrank._native import column_sweeps as cs
    l, cost = 5, pk.pair_cost(np.ones((3, 3)))
    good = np.arange(1, l + 1, dtype=np.int32)
    bad = np.array(cut, np.int32)
    for cp, cl in ((bad, good), (good, bad)):
        with pytest.raises(ValueError, match="stored active set"):
            cs.query_hess(np.ones(l), np.array([0, 1, 2, 1, 0], np.int32), cost.lam, cost.lam_r, 1.0,
                          np.arange(l, dtype=np.int32), cp, cl, np.empty(l), np.empty(l), np.empty(l, np.int32),
                          np.empty(l), np.empty(l), np.empty((3, 3, 2)))


@pytest.mark.parametrize("order", [[0, 1, 5, 3, 4], [0, -1, 2, 3, 4]], ids=["past the query", "negative"])
def test_hessian_refuses_a_stored_order_outside_its_query(order):
    from streamrank._native import column_sweeps as cs
    l, cost = 5, pk.pair_cost(np.ones((3, 3)))
    cut = np.arange(1, l + 1, dtype=np.int32)
    with pytest.raises(ValueError, match="outside its query"):
        cs.query_hess(np.ones(l), np.array([0, 1, 2, 1, 0], np.int32), cost.lam, cost.lam_r, 1.0,
                      np.array(order, np.int32), cut, cut, np.empty(l), np.empty(l), np.empty(l, np.int32),
                      np.empty(l), np.empty(l), np.empty((3, 3, 2)))
