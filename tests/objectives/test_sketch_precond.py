"""The Nystrom sketch preconditioner of wide maps against dense oracles: the sketch is the dense
G(0) Omega of the explicit pairs, the Nystrom factors are the closed form, P and P^-1 are
inverses, and TRON with it reaches the unpreconditioned optimum in fewer CG steps with the same
bits for any block size or sampled layout."""

import warnings

import numpy as np
import pytest

import streamrank
from dense_oracle import DenseRankSVM
from streamrank._native import pairkernels as pk
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.objectives import sketch_precond as sp
from streamrank.objectives.linear_precond import AUTO_WIDTH
from streamrank.objectives.rank_objective import BlockSource, RankObjective
from streamrank.training.linear import train_linear

WIDE = AUTO_WIDTH + 44


def wide_dataset(path, n_queries=40, d=WIDE, seed=0, big_query=0):
    """Raw features of very different scales (column j scaled by 10^(j mod 5 - 2)); one query of
    ``big_query`` documents when given."""
    rng = np.random.default_rng(seed)
    scales = 10.0 ** (np.arange(d) % 5 - 2)
    with DatasetWriter(path, n_features=d) as w:
        for q in range(n_queries):
            n = big_query if (big_query and q == n_queries // 2) else int(rng.integers(1, 30))
            X = rng.standard_normal((n, d)) * scales
            w.append(X.astype(np.float32), rng.choice([0, 1, 2, 3], n).astype(np.float32), np.full(n, q, np.int64))
    return streamrank.open_dataset(path)


def omega(m, k, seed):
    rng = np.random.default_rng([seed, sp.SEED_STREAM])
    return np.linalg.qr(rng.standard_normal((m, k)))[0]


def objective(ds, block_bytes=10**9, lam=None, partition_rows=None):
    from streamrank.execution.executor import LocalExecutor
    levels = np.unique(ds.y[:])
    src = BlockSource(ds, None, block_bytes=block_bytes, memory_bytes=0, levels=levels,
                      partition_rows=partition_rows)
    lam = np.ones((len(levels),) * 2) if lam is None else lam
    return RankObjective(src, ds.n_features, C=1.0, cost=pk.pair_cost(lam), mu=np.ones(ds.n_queries),
                         executor=LocalExecutor(partition_rows=partition_rows))


def test_nystrom_factors_are_the_closed_form():
    rng = np.random.default_rng(0)
    m, k = 60, 20
    A = rng.standard_normal((m, 45))
    G = A @ np.diag(np.logspace(3, -3, 45)) @ A.T
    Om = omega(m, k, 3)
    U, lam = sp.nystrom(G @ Om, Om)
    Y = G @ Om
    closed = Y @ np.linalg.solve(Om.T @ Y, Y.T)     # G<Omega> = G Om (Om^T G Om)^-1 Om^T G
    np.testing.assert_allclose(U @ np.diag(lam) @ U.T, closed, atol=1e-8 * np.abs(G).max())
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-12)
    assert np.all(np.diff(lam) <= 0) and lam[-1] >= 0
    # rank(G) <= k: the approximation is G itself
    low = A[:, :10] @ A[:, :10].T
    U, lam = sp.nystrom(low @ Om, Om)
    np.testing.assert_allclose(U @ np.diag(lam) @ U.T, low, atol=1e-8 * np.abs(low).max())
    # G = 0 (no pairs): no preconditioning
    U, lam = sp.nystrom(np.zeros((m, k)), Om)
    assert lam.size == 0 and np.array_equal(sp.NystromPreconditioner(U, lam).solve(np.ones(m)), np.ones(m))


def test_the_preconditioner_and_its_inverse_are_eq_5_3():
    rng = np.random.default_rng(1)
    m, k, C = 30, 8, 3.0
    U = np.linalg.qr(rng.standard_normal((m, k)))[0]
    lam = np.sort(rng.uniform(0.1, 50, k))[::-1]
    P = sp.HessianSketch(U, lam).preconditioner(C)
    # eq. (5.3) with mu = 1 and the eigenvalues of C G
    lc = C * lam
    dense = U @ np.diag((lc + 1) / (lc[-1] + 1)) @ U.T + (np.eye(m) - U @ U.T)
    E = np.eye(m)
    Pm = np.array([[P.mdot(E[i], E[j]) for j in range(m)] for i in range(m)])
    Pinv = np.column_stack([P.solve(E[:, j]) for j in range(m)])
    np.testing.assert_allclose(Pm, dense, atol=1e-12)
    np.testing.assert_allclose(Pm @ Pinv, E, atol=1e-12)


def test_the_sketch_is_the_explicit_pairs_hessian_at_zero(tmp_path):
    ds = wide_dataset(tmp_path / "w.h5", n_queries=20, big_query=1000)
    X, y = ds.read(0, ds.n_rows)
    rng = np.random.default_rng(2)
    lam = np.triu(rng.uniform(0.5, 2, (4, 4)), 1).T + np.triu(rng.uniform(0.5, 2, (4, 4)), 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        obj = objective(ds, block_bytes=20_000, lam=lam)  # many blocks, groups spanning them
        sk = sp.sketch_hessian(obj.source, ds.n_features, obj.cost, obj.mu, obj.executor, seed=5)
    # the dense oracle's Hessian at w = 0 over the explicit pairs: I + C G(0)
    dense = DenseRankSVM(X.astype(np.float64), y, ds.query_ptr, 1.0, lam=lam)
    G0 = dense.hess(np.zeros(ds.n_features)) - np.eye(ds.n_features)
    Om = omega(ds.n_features, sp.rank_for(ds.n_features, ds.n_rows), 5)
    U, lam_ref = sp.nystrom(G0 @ Om, Om)
    ref = U @ np.diag(lam_ref) @ U.T
    np.testing.assert_allclose(sk.U @ np.diag(sk.lam) @ sk.U.T, ref, rtol=0, atol=1e-9 * np.abs(ref).max())
    # the same bits from one block, and from blocks of single queries
    for bb in (10**9, 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            o = objective(ds, block_bytes=bb, lam=lam)
            other = sp.sketch_hessian(o.source, ds.n_features, o.cost, o.mu, o.executor, seed=5)
        assert np.array_equal(other.U, sk.U) and np.array_equal(other.lam, sk.lam)
    # another seed, another Omega
    o = objective(ds, lam=lam)
    assert not np.array_equal(sp.sketch_hessian(o.source, ds.n_features, o.cost, o.mu, o.executor, seed=6).U, sk.U)


def test_groups_hold_whole_sampled_queries_inside_partitions(monkeypatch):
    qp = np.concatenate([[0], np.cumsum(np.random.default_rng(3).integers(1, 40, 300))])
    parts = np.array([0, 90, 200, 300])
    monkeypatch.setattr(sp, "SKETCH_ROWS", int(qp[-1]) // 3)
    gid, last, n_s = sp._groups(qp, parts, int(qp[-1]), 100)
    sampled = gid >= 0
    assert sampled.sum() == pytest.approx(100, abs=1)             # a third of the queries, evenly
    assert abs(np.diff(np.flatnonzero(sampled)) - 3).max() <= 1
    assert n_s == int(np.diff(qp)[sampled].sum())
    sizes = np.diff(qp)
    for g in range(last.size):
        qs = np.flatnonzero(gid == g)
        assert qs.size and qs[-1] == last[g]
        assert np.searchsorted(parts, qs[0], "right") == np.searchsorted(parts, qs[-1], "right")  # one partition
        assert qs.size == 1 or sizes[qs].sum() <= 100
    assert np.all(np.diff(gid[sampled]) >= 0)


def test_a_sample_of_queries_is_scaled_to_all_rows(tmp_path, monkeypatch):
    ds = wide_dataset(tmp_path / "w.h5", n_queries=60)
    obj = objective(ds)
    monkeypatch.setattr(sp, "SKETCH_ROWS", ds.n_rows // 2)
    sk = sp.sketch_hessian(obj.source, ds.n_features, obj.cost, obj.mu, obj.executor, seed=0)
    X, y = ds.read(0, ds.n_rows)
    qp = ds.query_ptr
    sampled = sp.sampled_queries(ds.n_queries, ds.n_rows)
    G = np.zeros((ds.n_features,) * 2)
    for q in np.flatnonzero(sampled):
        d = DenseRankSVM(X[qp[q]:qp[q + 1]].astype(np.float64), y[qp[q]:qp[q + 1]], np.array([0, qp[q + 1] - qp[q]]),
                         1.0, lam=np.ones((4, 4)))
        G += d.hess(np.zeros(ds.n_features)) - np.eye(ds.n_features)
    n_s = int(np.diff(qp)[sampled].sum())
    G *= ds.n_rows / n_s
    Om = omega(ds.n_features, sp.rank_for(ds.n_features, ds.n_rows), 0)
    U, lam = sp.nystrom(G @ Om, Om)
    ref = U @ np.diag(lam) @ U.T
    np.testing.assert_allclose(sk.U @ np.diag(sk.lam) @ sk.U.T, ref, atol=1e-9 * np.abs(ref).max())


def test_tron_with_the_sketch_reaches_the_optimum_in_fewer_steps_for_any_block_size(tmp_path):
    """A wide path (two C, one sketch): the dense oracle's optimum at each C, the same bits from
    one block or many, and far fewer CG steps than plain CG, which stops higher (raw features of
    very different scales make G ill-conditioned)."""
    ds = wide_dataset(tmp_path / "w.h5", n_queries=30, big_query=300)
    va = wide_dataset(tmp_path / "v.h5", n_queries=10, seed=1)
    kw = dict(C=[0.1, 1.0], tol=1e-5, seed=4, valid=va)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        many, s1 = train_linear(ds, block_bytes=30_000, precondition="on", **kw)
    one, s2 = train_linear(ds, precondition="auto", **kw)
    assert np.array_equal(many.w, one.w)
    same = ("objective", "grad_norm", "iterations", "cg_steps", "passes")
    assert [[c[k] for k in same] for c in s1["candidates"]] == [[c[k] for k in same] for c in s2["candidates"]]
    X, y = ds.read(0, ds.n_rows)
    for c in s2["candidates"]:
        dense = DenseRankSVM(X.astype(np.float64), y, ds.query_ptr, c["C"])
        assert c["objective"] == pytest.approx(dense.fun(dense.solve()), rel=1e-7)
    on = train_linear(ds, C=0.1, tol=1e-3, precondition="on")[1]["candidates"][0]
    off = train_linear(ds, C=0.1, tol=1e-3, precondition="off")[1]["candidates"][0]
    assert on["cg_steps"] < off["cg_steps"] / 4 and on["objective"] < off["objective"], (on, off)
