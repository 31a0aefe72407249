"""The streamed objective and TRON against the dense explicit-pair oracle."""

import warnings

import numpy as np
import pytest

import streamrank
from dense_oracle import DenseRankSVM
from streamrank._native import pairkernels as pk
from streamrank.io.convert import convert
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.objectives.rank_objective import BlockSource, RankObjective
from streamrank.training.linear import train_linear
from streamrank.training.problem import pair_cost_table, query_weights
from streamrank.solvers.tron import tron


def random_dataset(path, n_queries=30, d=6, levels=(0, 1, 2, 3), seed=0):
    rng = np.random.default_rng(seed)
    with DatasetWriter(path, n_features=d) as w:
        for q in range(n_queries):
            n = int(rng.integers(1, 25))
            w.append(rng.standard_normal((n, d)).astype(np.float32),
                     rng.choice(levels, n).astype(np.float32), np.full(n, q, np.int64))
    return streamrank.open_dataset(path)


def make_objective(ds, C=1.0, block_bytes=10**9, lam=None, mu=None, memory=1 << 30):
    y = ds.y[:]
    levels = np.unique(y)
    src = BlockSource(ds, None, block_bytes=block_bytes, memory_bytes=memory, levels=levels)
    lam = np.ones((len(levels),) * 2) if lam is None else lam
    mu = np.ones(ds.n_queries) if mu is None else mu
    return RankObjective(src, ds.n_features, C=C, cost=pk.pair_cost(lam), mu=mu)


@pytest.mark.parametrize("costs", ["none", "gain_difference", "table"])
def test_fun_grad_hessp_equal_the_dense_oracle(tmp_path, costs):
    ds = random_dataset(tmp_path / "d.h5")
    X, y = ds.read(0, ds.n_rows)
    levels = np.unique(y)
    rng = np.random.default_rng(1)
    lam = rng.uniform(0.5, 2, (4, 4)) if costs == "table" else pair_cost_table(costs, levels)
    mu = query_weights("log_ratio", y, ds.query_ptr)
    obj = make_objective(ds, C=0.7, block_bytes=2000, lam=lam, mu=mu)
    dense = DenseRankSVM(X, y, ds.query_ptr, 0.7, lam=lam, mu=mu)
    for _ in range(3):
        w = rng.standard_normal(ds.n_features) * 0.5
        assert obj.fun(w) == pytest.approx(dense.fun(w), rel=1e-12)
        np.testing.assert_allclose(obj.grad(w), dense.grad(w), rtol=1e-11, atol=1e-9)
        s = rng.standard_normal(ds.n_features)
        np.testing.assert_allclose(obj.hessp(s), dense.hess(w) @ s, rtol=1e-11, atol=1e-9)


def test_rejected_trial_point_keeps_the_accepted_active_set(tmp_path):
    ds = random_dataset(tmp_path / "d.h5")
    X, y = ds.read(0, ds.n_rows)
    obj = make_objective(ds, block_bytes=3000)
    dense = DenseRankSVM(X, y, ds.query_ptr, 1.0)
    w, trial, s = np.full(ds.n_features, 0.1), np.full(ds.n_features, -3.0), np.arange(ds.n_features) / 3
    obj.fun(w)
    obj.grad(w)
    before = obj.hessp(s)
    obj.fun(trial)  # rejected: grad(trial) is never called
    passes = obj.passes
    after = obj.hessp(s)  # the accepted point's active sets, made again by one more pass
    np.testing.assert_allclose(after, dense.hess(w) @ s, rtol=1e-12)
    np.testing.assert_array_equal(after, before)
    assert obj.passes == passes + 2
    assert np.array_equal(obj.hessp(s), before) and obj.passes == passes + 3  # made once
    with pytest.raises(RuntimeError, match="must follow fun"):
        obj.grad(w)


@pytest.mark.parametrize("normalize,eta", [("none", 0.0), ("query_minmax", 0.0), ("zscore", 0.3)])
def test_query_groups_inside_a_block_change_no_bit(tmp_path, monkeypatch, normalize, eta):
    """A block's fun and hessp run over groups of whole queries (GROUP_ROWS rows): groups of a
    query or two give the very bits of one group a block, for every affine mode and the smooth
    hinge's band state."""
    from streamrank.features.normalize import Normalizer
    from streamrank.objectives import rank_objective as ro
    ds = random_dataset(tmp_path / "d.h5", n_queries=40)
    rng = np.random.default_rng(3)
    levels = np.unique(ds.y[:])

    def run():
        norm = Normalizer(normalize)
        if normalize == "zscore":
            norm.fit(ds.stream(block_bytes=10**9), ds.n_features)
        src = BlockSource(ds, norm, block_bytes=10**9, memory_bytes=1 << 30, levels=levels)
        obj = RankObjective(src, ds.n_features, C=0.8, cost=pk.pair_cost(np.ones((4, 4)), eta=eta),
                            mu=np.ones(ds.n_queries), keep_scores=True)
        out = []
        for k in range(3):
            w = rng.standard_normal(ds.n_features) * (k + 1)
            out += [obj.fun(w), obj.grad(w), obj.hessp(rng.standard_normal(ds.n_features)),
                    np.concatenate([o[1] for o in obj._states])]
        return out

    whole = run()
    rng = np.random.default_rng(3)
    monkeypatch.setattr(ro, "GROUP_ROWS", 20)  # a query or two per group
    grouped = run()
    for a, b in zip(whole, grouped):
        np.testing.assert_array_equal(a, b)


def test_pipelined_passes_over_kept_blocks_give_the_streamed_bits(tmp_path, monkeypatch):
    """Over blocks kept in memory a fun or hessp pass leaves each block's last chunks running
    while the next block's groups are queued (parallel.Pipeline, merged after one finish); over
    streamed blocks every step finishes its own. Small blocks, partitions, groups of a query or two
    and chunks of a query: the two give the same bits, as does one thread."""
    from streamrank._native import parallel
    from streamrank.execution.executor import LocalExecutor
    from streamrank.objectives import rank_objective as ro
    ds = random_dataset(tmp_path / "d.h5", n_queries=60)
    levels = np.unique(ds.y[:])
    monkeypatch.setattr(ro, "GROUP_ROWS", 30)
    monkeypatch.setattr(parallel, "SERIAL_WORK", 0)

    def run(memory, threads):
        src = BlockSource(ds, None, block_bytes=3000, memory_bytes=memory, levels=levels, partition_rows=150)
        obj = RankObjective(src, ds.n_features, C=0.8, cost=pk.pair_cost(np.ones((4, 4))),
                            mu=np.ones(ds.n_queries), executor=LocalExecutor(partition_rows=150))
        assert src.in_memory == bool(memory) and len(src.stream.partitions) > 3
        rng = np.random.default_rng(4)
        out = []
        with parallel.limit(threads):
            for k in range(3):
                w = rng.standard_normal(ds.n_features) * (k + 1)
                out += [obj.fun(w), obj.grad(w), obj.hessp(rng.standard_normal(ds.n_features))]
        return out

    kept, streamed, serial = run(1 << 30, 2), run(0, 2), run(1 << 30, 1)
    for a, b, c in zip(kept, streamed, serial):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)


@pytest.fixture
def fold1_subset(mq2008, tmp_path):
    convert([mq2008 / "Fold1" / "train.txt.gz"], tmp_path / "t.h5", quiet=True)
    return streamrank.open_dataset(tmp_path / "t.h5")


def test_tron_reaches_the_dense_optimum_on_mq2008(fold1_subset):
    ds = fold1_subset
    nq = 150  # a subset keeps the explicit-pair oracle fast; the benchmark does all of Fold1
    model, summary = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq))
    X, y = ds.read(0, int(ds.query_ptr[nq]))
    dense = DenseRankSVM(X, y, ds.query_ptr[:nq + 1], 1.0)
    f_star = dense.fun(dense.solve())
    assert summary["objective"] == pytest.approx(f_star, rel=1e-6)
    assert abs(summary["objective"] - f_star) / f_star < 1e-10  # in practice far better than asked


def test_block_size_does_not_change_the_model(fold1_subset):
    ds = fold1_subset
    nq = 150
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 1 byte: every query is its own block
        one, s1 = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), block_bytes=1, solver="tron")
    mid, s2 = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), block_bytes=50_000, solver="tron")
    whole, s3 = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), solver="tron")
    # every sum runs in an order fixed by the data (streamrank/_linalg.py): not 1e-6 but identical
    assert np.array_equal(one.w, whole.w) and np.array_equal(mid.w, whole.w)
    assert s1["objective"] == s2["objective"] == s3["objective"]
    assert s1["passes"] == s3["passes"]
    again, _ = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), block_bytes=50_000, solver="tron")
    assert np.array_equal(again.w, mid.w)  # same settings, same bits
    # Newton-Cholesky's Hessian is a BLAS product: block layouts agree to the solver's tolerance
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        n1, t1 = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), block_bytes=1, solver="newton_cholesky")
    n3, t3 = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), solver="newton_cholesky")
    assert t1["objective"] == pytest.approx(t3["objective"], rel=1e-12)
    # f is 1-strongly convex: ||w - w*|| <= ||g||, so two solutions lie within the sum of their gradients
    assert np.linalg.norm(n1.w - n3.w) <= t1["grad_norm"] + t3["grad_norm"] + 1e-12


def test_streaming_from_disk_equals_memory_tier(tmp_path):
    ds = random_dataset(tmp_path / "d.h5", n_queries=60)
    a = tron(make_objective(ds, block_bytes=2000, memory=1 << 30), np.zeros(ds.n_features), eps=1e-10)
    b = tron(make_objective(ds, block_bytes=2000, memory=0), np.zeros(ds.n_features), eps=1e-10)
    assert np.array_equal(a.w, b.w)


class Quadratic:
    """f(w) = 1/2 w'Aw - b'w: TRON must find A^-1 b."""

    def __init__(self, A, b):
        self.A, self.b, self.n_features = A, b, len(b)

    def fun(self, w):
        return 0.5 * w @ self.A @ w - self.b @ w

    def grad(self, w):
        return self.A @ w - self.b

    def hessp(self, s):
        return self.A @ s


def test_tron_on_a_quadratic_and_its_stopping_rule():
    rng = np.random.default_rng(0)
    M = rng.standard_normal((20, 20))
    A = M @ M.T + np.eye(20)
    b = rng.standard_normal(20)
    st = tron(Quadratic(A, b), np.zeros(20), eps=1e-6)
    w_star = np.linalg.solve(A, b)
    assert st.converged and st.gnorm <= 1e-6 * np.linalg.norm(b)
    # ||w - w*|| <= ||g|| / lambda_min(A), and lambda_min >= 1 here
    assert np.linalg.norm(st.w - w_star) <= st.gnorm
    # warm start: the reference is min(||g(0)||, ||g(w0)||), so a start near the optimum is refined
    # by eps as well, with at least one step (issue 10: the C path stopped at its warm starts)
    w0 = st.w + 1e-3
    g0 = np.linalg.norm(A @ w0 - b)
    assert g0 < np.linalg.norm(b)
    st2 = tron(Quadratic(A, b), w0, eps=1e-6)
    assert st2.gnorm0 == pytest.approx(g0) and st2.iteration >= 1 and st2.gnorm <= 1e-6 * g0
    far = np.full(20, 100.0)  # a start worse than 0 keeps LIBLINEAR's reference ||g(0)||
    assert tron(Quadratic(A, b), far, eps=1e-6).gnorm0 == pytest.approx(np.linalg.norm(b))
    limited = tron(Quadratic(A, b), np.zeros(20), eps=1e-14, max_iter=1)
    assert limited.iteration == 1 and not limited.converged and "max_iter" in limited.message


def test_newton_cholesky_reaches_the_tron_and_dense_optimum(fold1_subset, tmp_path):
    ds = fold1_subset
    nq = 150
    newton, sn = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), solver="newton_cholesky")
    tr, st = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), solver="tron", precondition="off")
    assert sn["objective"] == pytest.approx(st["objective"], rel=1e-12)
    assert sn["passes"] < st["passes"] / 5  # a few passes per iteration instead of one per CG step
    assert sn["solver"] == "newton_cholesky"
    # resumed from a checkpoint half-way, the same model
    ck = tmp_path / "ck"
    train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), solver="newton_cholesky", checkpoint=ck, max_iter=2)
    again, _ = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), solver="newton_cholesky", checkpoint=ck,
                            resume=True)
    assert np.array_equal(again.w, newton.w)


def test_line_search_finds_the_minimiser_of_a_piecewise_quadratic():
    from streamrank.solvers.newton import line_search
    # phi(t) = (t - 2)^2 for t < 2, 3 (t - 2)^2 above: kinked second derivative, minimum at 2
    def line(t):
        a = 1.0 if t < 2 else 3.0
        return a * (t - 2) ** 2, 2 * a * (t - 2), 2 * a
    t, evals = line_search(line, -4.0)
    assert t == pytest.approx(2.0, abs=1e-12) and evals <= 5


class Preconditioned(Quadratic):
    def __init__(self, A, b, M):
        super().__init__(A, b)
        self.M = M

    def preconditioner(self):
        from streamrank.objectives.linear_precond import DensePreconditioner
        return DensePreconditioner(self.M)


def test_preconditioned_tron_on_a_quadratic():
    rng = np.random.default_rng(1)
    R = rng.standard_normal((30, 30))
    A = R @ R.T + np.eye(30)
    b = rng.standard_normal(30)
    w_star = np.linalg.solve(A, b)
    exact = tron(Preconditioned(A, b, A), np.zeros(30), eps=1e-7, precondition=True)
    # M = H: the transformed Hessian is I, CG stops after one step every iteration
    assert exact.converged and exact.n_cg == exact.n_steps
    assert np.linalg.norm(exact.w - w_star) <= exact.gnorm
    plain = tron(Quadratic(A, b), np.zeros(30), eps=1e-7)
    diag = tron(Preconditioned(A, b, np.diag(np.diag(A))), np.zeros(30), eps=1e-7, precondition=True)
    assert diag.converged and np.linalg.norm(diag.w - w_star) <= diag.gnorm
    assert exact.n_cg < plain.n_cg


def test_query_groups_cover_the_sample_with_whole_queries():
    from streamrank.objectives.linear_precond import query_groups
    qp = np.array([0, 5, 9, 30, 31, 40, 46])
    assert query_groups(qp, 31, 10).tolist() == [0, 2, 3, 4]   # a 21-row query is a group alone
    assert query_groups(qp, 3, 10).tolist() == [0, 1]          # at least one query
    assert query_groups(qp, 1000, 1000).tolist() == [0, 6]


def test_preconditioner_is_the_sample_hessian_and_independent_of_blocks(fold1_subset, monkeypatch):
    import streamrank.objectives.linear_precond as pc
    ds = fold1_subset
    nq = 150
    y = ds.y[:]
    levels = np.unique(y)
    src = BlockSource(ds, None, block_bytes=50_000, memory_bytes=1 << 30, levels=levels, queries=(0, nq))
    obj = RankObjective(src, ds.n_features, C=0.7, cost=pk.pair_cost(np.ones((len(levels),) * 2)),
                        mu=np.ones(ds.n_queries))
    w = np.random.default_rng(0).standard_normal(ds.n_features) * 0.1
    obj.fun(w)
    obj.grad(w)
    passes = src.passes
    # a sample of every row: M is the generalised Hessian itself (paper 004 (B.3))
    M = obj.preconditioner(sample_rows=src.n_rows).M
    H = obj.hessian()
    assert np.allclose(M, H, rtol=1e-12, atol=1e-9 * np.abs(H).max())
    assert src.passes == passes + 1  # hessian() is a pass; preconditioner() reads a head only
    # a sample of the first queries spanning several blocks: the same bits for any layout, and
    # preconditioned TRON reaches the unpreconditioned optimum with fewer CG steps
    monkeypatch.setattr(pc, "SAMPLE_ROWS", 700)
    monkeypatch.setattr(pc, "GROUP_ROWS", 150)  # several group products, some spanning blocks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        one, s1 = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), block_bytes=1, precondition="on")
    whole, s2 = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), precondition="on")
    off, s3 = train_linear(ds, C=1.0, tol=1e-8, queries=(0, nq), precondition="off")
    assert np.array_equal(one.w, whole.w) and s1["objective"] == s2["objective"]
    assert s2["objective"] == pytest.approx(s3["objective"], rel=1e-10)
    cg = [s["candidates"][0]["cg_steps"] for s in (s2, s3)]
    assert cg[0] < cg[1] / 2, cg
    with pytest.raises(streamrank.errors.ParameterError, match="precondition must be one of"):
        train_linear(ds, C=1.0, queries=(0, nq), precondition="yes")


@pytest.mark.parametrize("block_bytes", [700, 10**9])
def test_sort_from_the_last_pass_changes_no_bit(tmp_path, monkeypatch, block_bytes):
    """fun starts each query's sort from the order the last pass left in its state arrays (and
    overwrites them): along a solver-like path with a rejected trial, every f, gradient, Hessian
    product and active set equals a fresh objective's (a cold sort) bit for bit."""
    from streamrank._native import fused as fz
    kernel, starts = fz.fused_loss_grad, []

    def spy(*args):
        starts.append(args[-1])
        return kernel(*args)
    monkeypatch.setattr(fz, "fused_loss_grad", spy)
    ds = random_dataset(tmp_path / "d.h5", n_queries=40, levels=(0, 1, 2, 3, 4))
    rng = np.random.default_rng(5)
    obj = make_objective(ds, block_bytes=block_bytes)
    w = rng.standard_normal(ds.n_features)
    s = rng.standard_normal(ds.n_features)
    for step in range(6):
        trial = step == 3  # a trial point that is rejected: the next hessp remakes the accepted sets
        w_next = w + (2.0 if trial else 0.05) * rng.standard_normal(ds.n_features)
        cold = make_objective(ds, block_bytes=block_bytes)
        assert obj.fun(w_next) == cold.fun(w_next)
        if trial:
            h_warm = obj.hessp(s)  # after the rejected trial: the accepted point's sets, warm
            cold_w = make_objective(ds, block_bytes=block_bytes)
            cold_w.fun(w)
            cold_w.grad(w)
            assert np.array_equal(h_warm, cold_w.hessp(s))
            continue
        assert np.array_equal(obj.grad(w_next), cold.grad(w_next))
        assert np.array_equal(obj.hessp(s), cold.hessp(s))
        for (st_w, _), (st_c, _) in zip(obj._states, cold._states):
            for a, b in zip(st_w, st_c):
                assert np.array_equal(a, b)
        w = w_next
    assert True in starts and False in starts  # warm starts were taken (and cold ones)


def test_the_last_passs_scores_are_freed_before_the_next_pass(tmp_path, monkeypatch):
    """fun hands the last pass's active sets to the next pass (its sort's start) but not its kept
    scores: with keep_scores (Newton's line search) they are 8 bytes a row, and the memory plan
    counts one set of them alive. A pass that still held them would see the weak reference alive."""
    import weakref
    from streamrank._native import fused as fz
    ds = random_dataset(tmp_path / "d.h5")
    obj = make_objective(ds, block_bytes=3000)
    assert obj.keep_scores
    w = np.full(ds.n_features, 0.1)
    obj.fun(w)
    obj.grad(w)
    old = [weakref.ref(z) for _, z in obj._states]
    orders = [st[0] for st, _ in obj._states]
    kernel, alive = fz.fused_loss_grad, []

    def spy(*args):
        alive.append(sum(r() is not None for r in old))
        return kernel(*args)
    monkeypatch.setattr(fz, "fused_loss_grad", spy)
    obj.fun(w + 0.05)
    assert alive and max(alive) == 0
    # the active sets themselves were taken over: the new pass wrote into the old arrays
    assert all(st[0] is order for (st, _), order in zip(obj._trial[3], orders))
