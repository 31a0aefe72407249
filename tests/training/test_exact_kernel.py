"""Exact kernel RankSVM (paper 004): products, objective, solution, model file, CLI, resume."""

import json
import os
import subprocess
import sys
import warnings

import h5py
import numpy as np
import pytest

import qprod_oracle
import streamrank
from dense_oracle import dense_optimum, explicit_pairs
from streamrank._native import pairkernels as pk
from streamrank._native import qprod as _qprod
from streamrank.state.checkpoint import ABORT_ENV, ABORT_EXIT_CODE
from streamrank.cli import main
from streamrank.io.convert import convert
from streamrank.training.exact import train_exact
from streamrank.objectives.kernel_objective import KernelObjective
from streamrank.cache.kernel_cache import KernelCache, read_rows
from streamrank.features.kernels import kernel_matrix
from streamrank.features.normalize import Normalizer
from streamrank.training.linear import train_linear

from locations import DATA  # noqa: E402
GAMMA = 0.05


@pytest.fixture(scope="module")
def ds(small):
    with streamrank.open_dataset(small / "train.h5") as d:
        yield d


def problem(ds, block_bytes=10 ** 9, sub_bytes=1 << 20, C=0.7, memory_bytes=1 << 30, cache_dir=None,
            kernel="rbf"):
    """(KernelObjective, its Q' as float64, labels, query_ptr) of the whole dataset."""
    Xn, y, qp = read_rows(ds, Normalizer("none"), (0, ds.n_queries), 1 << 20)
    levels = np.unique(y)
    kc = KernelCache(Xn, qp, kernel=kernel, gamma=GAMMA, key_material={"dataset": ds.fingerprint},
                     block_bytes=block_bytes, memory_bytes=memory_bytes, cache_dir=cache_dir)
    kc.build()
    obj = KernelObjective(kc, np.searchsorted(levels, y), C=C, cost=pk.pair_cost(np.ones((len(levels),) * 2)),
                          mu=np.ones(len(qp) - 1), sub_bytes=sub_bytes)
    Q = (kernel_matrix(Xn, kernel=kernel, gamma=GAMMA) - kc.shift).astype(np.float32).astype(np.float64) + kc.shift
    Q[np.diag_indices_from(Q)] += obj.delta  # the objective's Q' = float32(K - shift) + shift + jitter I
    return obj, Q, y, qp


class DenseBeta:
    """(3.13) written out with explicit pairs and the dense Q (tests only)."""

    def __init__(self, Q, y, qp, C):
        self.Q, self.C = Q, C
        self.A, self.c = explicit_pairs(y, qp)

    def fun(self, b):
        m = np.maximum(0.0, 1.0 - self.A @ (self.Q @ b))
        return 0.5 * b @ self.Q @ b + self.C * np.sum(self.c * m * m)

    def grad(self, b):
        m = np.maximum(0.0, 1.0 - self.A @ (self.Q @ b))
        return self.Q @ b - 2 * self.C * self.Q @ (self.A.T @ (self.c * m))

    def hessp(self, b, v):  # (B.3)
        act = (1.0 - self.A @ (self.Q @ b)) > 0
        Aa = self.A[act]
        return self.Q @ v + 2 * self.C * self.Q @ (Aa.T @ (self.c[act] * (Aa @ (self.Q @ v))))


# -- the numba products ------------------------------------------------------------------------------
@pytest.mark.parametrize("m", [1, 7, 8, 13, 301])
def test_products_equal_their_numpy_twins_bit_for_bit(m):
    rng = np.random.default_rng(m)
    Q = rng.standard_normal((37, m)).astype(np.float32)
    Q.flags.writeable = False
    v, t, acc = rng.standard_normal(m), rng.standard_normal(37), rng.standard_normal(m)
    out = np.empty(37)
    _qprod.rows_dot(Q, v, out)
    assert np.array_equal(out, qprod_oracle.rows_dot(Q, v))
    got = acc.copy()
    _qprod.add_cols(Q, t, got)
    assert np.array_equal(got, qprod_oracle.add_cols(Q, t, acc))
    np.testing.assert_allclose(out, Q.astype(np.float64) @ v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", [1, 13, 63, 64, 65, 128, 301])
def test_the_passes_row_products_equal_their_numpy_twin_bit_for_bit(m):
    rng = np.random.default_rng(100 + m)
    Q = rng.standard_normal((11, m)).astype(np.float32)
    v = rng.standard_normal(m)
    got = np.array([_qprod._row_dot_wide(Q[i], v) for i in range(11)])
    assert np.array_equal(got, qprod_oracle.rows_dot_wide(Q, v))
    # a wrong combining order is seen (the twin is not vacuous)
    if m == 301:
        assert not np.array_equal(qprod_oracle.rows_dot_wide(Q, v, lanes=32), got)
    np.testing.assert_allclose(got, Q.astype(np.float64) @ v, rtol=1e-12, atol=1e-12)


def test_a_pass_computes_its_scores_in_the_twins_order(ds):
    obj, Q, y, qp = problem(ds)
    beta = 0.05 * np.random.default_rng(3).standard_normal(len(y))
    obj.fun(beta)
    obj.grad(beta)
    Q32 = Q.copy()
    Q32[np.diag_indices_from(Q32)] -= obj.delta
    Q32 -= obj.shift  # back to float32(K - shift): what the cache stores
    from streamrank._native.linalg import sum_in_order
    want = qprod_oracle.rows_dot_wide(Q32.astype(np.float32), beta) + obj.delta * beta
    assert np.array_equal(obj.scores(), want + obj.shift * sum_in_order(0.0, beta))


# -- the objective -------------------------------------------------------------------------------------
def test_objective_matches_the_explicit_formulas_and_not_the_block_size(ds):
    obj, Q, y, qp = problem(ds)
    dense = DenseBeta(Q, y, qp, 0.7)
    rng = np.random.default_rng(0)
    beta, v = 0.05 * rng.standard_normal(len(y)), rng.standard_normal(len(y))
    f = obj.fun(beta)
    g = obj.grad(beta)
    hv = obj.hessp(v)
    assert f == pytest.approx(dense.fun(beta), rel=1e-12)
    np.testing.assert_allclose(g, dense.grad(beta), rtol=1e-10, atol=1e-10 * np.abs(g).max())
    np.testing.assert_allclose(hv, dense.hessp(beta, v), rtol=1e-10, atol=1e-10 * np.abs(hv).max())
    assert obj.passes == 2  # fun + grad one pass, hessp one pass
    # a rejected trial point does not change the active set hessp uses
    obj.fun(beta + 5.0)
    assert np.array_equal(obj.hessp(v), hv)
    # one query per block and one query per sub-block, or everything at once: the same bits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for bb, sb in ((1, 1), (20_000, 50_000), (10 ** 9, 1)):
            other, *_ = problem(ds, block_bytes=bb, sub_bytes=sb)
            assert other.fun(beta) == f
            assert np.array_equal(other.grad(beta), g) and np.array_equal(other.hessp(v), hv)


def test_gradient_and_hessian_by_differences(ds):
    obj, Q, y, qp = problem(ds)
    rng = np.random.default_rng(1)
    beta, v = 0.05 * rng.standard_normal(len(y)), rng.standard_normal(len(y))
    obj.fun(beta)
    g = obj.grad(beta)
    hv = obj.hessp(v)
    h = 1e-6
    fd = (obj.fun(beta + h * v) - obj.fun(beta - h * v)) / (2 * h)
    assert fd == pytest.approx(g @ v, rel=1e-6)
    # hessp = the difference of gradients along v (piecewise quadratic: exact while no pair changes side)
    h = 1e-8
    obj.fun(beta + h * v)
    g1 = obj.grad(beta + h * v)
    np.testing.assert_allclose((g1 - g) / h, hv, rtol=1e-4, atol=1e-5 * np.abs(hv).max())


def test_solution_matches_the_dense_optimum(ds):
    _, Q, y, qp = problem(ds)
    model, s = train_exact(ds, C=0.7, kernel="rbf", gamma=GAMMA, tol=1e-9)
    assert s["jitter"] == problem(ds)[0].delta > 0
    f_star = dense_optimum(Q, y, qp, 0.7)
    assert s["objective"] == pytest.approx(f_star, rel=1e-6)
    # a pass per trial point (accepted or not) and per CG step, none for the preconditioner
    assert s["passes"] >= s["iterations"] + s["cg_steps"] + 1


@pytest.fixture
def fold1(mq2008, tmp_path):
    convert([mq2008 / "Fold1" / "train.txt.gz"], tmp_path / "t.h5", quiet=True)
    with streamrank.open_dataset(tmp_path / "t.h5") as d:
        yield d


def test_mq2008_subset_reaches_the_dense_optimum(fold1):
    nq = 25
    model, s = train_exact(fold1, C=1.0, kernel="rbf", gamma=2 ** -5, tol=1e-8, queries=(0, nq))
    X, y = fold1.read(0, int(fold1.query_ptr[nq]))
    K = kernel_matrix(X, kernel="rbf", gamma=2 ** -5)
    Xn, _, _ = read_rows(fold1, Normalizer("none"), (0, nq), 1 << 20)
    shift = KernelCache(Xn, fold1.query_ptr[:nq + 1], kernel="rbf", gamma=2 ** -5, key_material={}, block_bytes=1 << 30,
                        memory_bytes=0).shift
    Q = (K - shift).astype(np.float32).astype(np.float64) + shift + s["jitter"] * np.eye(len(y))
    f_star = dense_optimum(Q, y, fold1.query_ptr[:nq + 1], 1.0)
    assert abs(s["objective"] - f_star) / f_star < 1e-6
    # the problem moved by float32 storage and its jitter: far below what changes a ranking
    assert abs(dense_optimum(K, y, fold1.query_ptr[:nq + 1], 1.0) - f_star) / f_star < 2e-4
    assert model.fmap.kind == "exact" and model.method == "exact"


def test_linear_kernel_gives_the_linear_model(ds):
    lin, sl = train_linear(ds, C=0.7, tol=1e-10)
    ker, sk = train_exact(ds, C=0.7, kernel="linear", tol=1e-10)
    assert sk["objective"] == pytest.approx(sl["objective"], rel=1e-6)
    X, _ = ds.read(0, ds.n_rows)
    a, b = lin.decision_function(X), ker.decision_function(X)
    assert np.linalg.norm(a - b) <= 1e-6 * np.linalg.norm(a)


# -- memory, disk, model file ---------------------------------------------------------------------------
def test_streamed_from_disk_gives_the_same_model_and_predictions(ds, small, tmp_path):
    common = dict(C=0.7, kernel="rbf", gamma=GAMMA, tol=1e-8, landmarks=30)
    mem, sm = train_exact(ds, **common)
    assert sm["in_memory"]
    disk, sd = train_exact(ds, memory_budget="2.1MB", cache_dir=tmp_path, **common)
    assert not sd["in_memory"]
    assert np.array_equal(mem.w, disk.w) and sm["objective"] == sd["objective"] and sm["passes"] == sd["passes"]
    with streamrank.open_dataset(small / "valid.h5") as v:
        assert np.array_equal(mem.predict_dataset(v), disk.predict_dataset(v, memory_budget="2.1MB"))
    # Q stays stored: another C reuses it (no kernel evaluations)
    other, so = train_exact(ds, memory_budget="2.1MB", cache_dir=tmp_path, **{**common, "C": 2.0})
    assert so["objective"] != sd["objective"] and so["kernel_seconds"] < sd["kernel_seconds"] + 1.0


def test_model_file_round_trip_and_fixtures(ds, tmp_path):
    model, s = train_exact(ds, C=0.7, kernel="poly", gamma=GAMMA, degree=2, coef0=0.5, tol=1e-6, normalize="zscore")
    model.save(tmp_path / "m.h5")
    back = streamrank.load(tmp_path / "m.h5")
    X, _ = ds.read(0, ds.n_rows)
    assert np.array_equal(back.predict(X), model.decision_function(X))
    assert back.model_.method == "exact" and back.training_["support"] == len(back.coef_)
    with h5py.File(tmp_path / "m.h5", "r") as f:
        assert f.attrs["method"] == "exact" and f.attrs["version"] == 2
        assert f["feature_map"].attrs["kind"] == "exact" and f["feature_map/support"].shape == (len(model.w), ds.n_features)
    # the fixture of this kind, and the linear one, keep loading and scoring
    fix = streamrank.load(DATA / "model_exact_v1.h5").model_
    S = fix.fmap.support_
    Xf = S[:5] * 0.5
    want = kernel_matrix(fix.normalizer.transform(Xf), S, kernel="rbf", gamma=fix.fmap.gamma_).astype(np.float32)
    np.testing.assert_allclose(fix.decision_function(Xf), want.astype(np.float64) @ fix.w, rtol=1e-12)
    assert streamrank.load(DATA / "model_v1.h5").model_.method == "primal"


def test_ranksvm_estimator_fits_exact(ds):
    X, y = ds.read(0, ds.n_rows)
    qid = np.repeat(np.arange(ds.n_queries), np.diff(ds.query_ptr))
    est = streamrank.RankSVM(method="exact", kernel="laplacian", gamma=GAMMA, C=0.5, tol=1e-6).fit(X, y, qid)
    model, s = train_exact(ds, C=0.5, kernel="laplacian", gamma=GAMMA, tol=1e-6)
    assert est.objective_ == s["objective"]
    assert np.array_equal(est.predict(X), model.decision_function(X))
    with pytest.raises(streamrank.errors.ParameterError, match="tron or newton_yuan"):
        streamrank.RankSVM(method="exact", solver="newton_cholesky").fit(X, y, qid)


def test_cli_trains_predicts_and_refuses_sigmoid(small, tmp_path, capsys):
    args = ["train", str(small / "train.h5"), "-o", str(tmp_path / "m.h5"), "--method", "exact", "--kernel", "rbf",
            "--gamma", str(GAMMA), "--C", "0.7", "--json", "--quiet"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["method"] == "exact" and summary["gamma"] == GAMMA and summary["passes"] > 0
    assert main(["predict", str(tmp_path / "m.h5"), str(small / "valid.h5"), "-o", str(tmp_path / "s.txt")]) == 0
    with streamrank.open_dataset(small / "valid.h5") as v:
        X, _ = v.read(0, v.n_rows)
        assert np.array_equal(np.loadtxt(tmp_path / "s.txt")[v.row], streamrank.load(tmp_path / "m.h5").predict(X))
    capsys.readouterr()
    assert main(args[:-4] + ["--kernel", "sigmoid", "--gamma", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "kernel=sigmoid is not positive semi-definite" in err and "pass --kernel rbf" in err


# -- kill and resume -------------------------------------------------------------------------------------
def run_cli(args, abort=None):
    env = {k: v for k, v in os.environ.items() if k != ABORT_ENV}
    if abort:
        env[ABORT_ENV] = abort
    return subprocess.run([sys.executable, "-m", "streamrank", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_aborted_and_resumed_run_gives_the_uninterrupted_model(small, tmp_path):
    def args(out, *extra):
        return ["train", str(small / "train.h5"), "-o", str(out), "--method", "exact", "--gamma", str(GAMMA),
                "--C", "0.05,0.7", "--valid", str(small / "valid.h5"), "--gap-tol", "1e-12",
                "--cache-dir", str(tmp_path / "cache"), "--checkpoint", str(tmp_path / "ck"), "--json", *extra]

    ref = run_cli(args(tmp_path / "ref.h5")[:-3] + ["--json"])  # no checkpoint
    assert ref.returncode == 0, ref.stderr
    p = run_cli(args(tmp_path / "m.h5"), abort="after-iteration:3")
    assert p.returncode == ABORT_EXIT_CODE, p.stderr
    p = run_cli(args(tmp_path / "m.h5", "--resume"), abort="mid-checkpoint:4")
    assert p.returncode == ABORT_EXIT_CODE, p.stderr
    p = run_cli(args(tmp_path / "m.h5", "--resume", "--memory-budget", "64MB"))  # the budget may change
    assert p.returncode == 0, p.stderr
    assert "resuming from" in p.stderr
    with h5py.File(tmp_path / "ref.h5", "r") as a, h5py.File(tmp_path / "m.h5", "r") as b:
        assert np.array_equal(a["w"][:], b["w"][:])
        assert np.array_equal(a["feature_map/support"][:], b["feature_map/support"][:])
    assert json.loads(ref.stdout.strip().splitlines()[-1])["objective"] == \
        json.loads(p.stdout.strip().splitlines()[-1])["objective"]


def test_the_reported_gap_estimate_tracks_the_true_gap(ds):
    """f(beta) is not strongly convex in beta, so the exact path reports an estimate (the
    preconditioner's Newton decrement), not a bound; at eps 1e-3 it is within a factor of a few of
    the true relative gap to a 1e-6 solve, and it shrinks with the tolerance."""
    from streamrank.training.exact import train_exact
    kw = dict(C=[0.7], kernel="rbf", gamma=GAMMA, memory_budget="2GB", queries=(0, 3))
    _, loose = train_exact(ds, tol=1e-3, gap_tol=None, **kw)
    _, tight = train_exact(ds, tol=1e-6, gap_tol=None, **kw)
    true = (loose["objective"] - tight["objective"]) / loose["objective"]
    assert loose["gap_kind"] == "estimate" and tight["gap_kind"] == "estimate"
    assert true > 0 and 0.2 <= loose["gap"] / true <= 5, (loose["gap"], true)
    assert tight["gap"] < 1e-3 * loose["gap"]


def test_the_default_stops_on_the_estimated_gap_and_off_restores_the_gradient_rule(ds):
    """--method exact stops where its estimated gap is at most EXACT_GAP_TOL (its gradient rule in
    beta is not a sign of a small gap): the true gap to a tight solve is within it, and gap_tol=None
    (the CLI's --gap-tol off) is tol's rule."""
    from streamrank.params import EXACT_GAP_TOL
    from streamrank.training.exact import train_exact
    for C in (0.7, 4.0):
        kw = dict(C=[C], kernel="rbf", gamma=GAMMA, memory_budget="2GB", queries=(0, 3))
        _, d = train_exact(ds, **kw)
        _, g = train_exact(ds, gap_tol=None, **kw)
        _, off = train_exact(ds, gap_tol="off", **kw)  # the CLI's and the estimators' word, as the trainer takes it
        assert (off["objective"], off["iterations"]) == (g["objective"], g["iterations"])
        _, t = train_exact(ds, tol=1e-10, gap_tol=None, **kw)
        assert d["gap_kind"] == "estimate" and d["gap"] <= EXACT_GAP_TOL
        assert 0 <= (d["objective"] - t["objective"]) / d["objective"] <= EXACT_GAP_TOL
        # here tol's rule stops one iteration short, at estimated gaps of 3e-6 and 8e-6: a small ||g||
        # in beta is no sign of a small gap
        assert g["iterations"] < d["iterations"] and g["gap"] > EXACT_GAP_TOL


def test_without_a_gap_estimate_the_gradient_rule_stops(ds):
    """No preconditioner, no estimate: the default gap target cannot be checked, and tol's rule
    stops the run (as it does with gap_tol=None), not max_iter."""
    from streamrank.training.exact import train_exact
    kw = dict(C=[0.7], kernel="rbf", gamma=GAMMA, memory_budget="2GB", queries=(0, 3), precondition="off")
    _, default = train_exact(ds, **kw)
    _, off = train_exact(ds, gap_tol=None, **kw)
    assert default["candidates"][0]["message"] == off["candidates"][0]["message"] == "converged"
    assert default["objective"] == off["objective"] and default["iterations"] == off["iterations"] < 50


@pytest.mark.parametrize("extra,ok", [([], True), (["--tol", "1e-6"], False), (["--tol", "1e-6", "--gap-tol", "off"], True),
                                      (["--tol", "1e-6", "--precondition", "off"], True),
                                      (["--gap-tol", "1e-9"], True), (["--gap-tol", "never"], False)])
def test_the_cli_takes_tol_for_exact_only_where_the_gradient_rule_stops_it(small, tmp_path, capsys, extra, ok):
    from streamrank.cli import main
    args = ["train", str(small / "train.h5"), "-o", str(tmp_path / "m.h5"), "--method", "exact", "--gamma",
            str(GAMMA), "--C", "0.5", "--quiet", *extra]
    assert main(args) == (0 if ok else 2)
    err = capsys.readouterr().err.strip().splitlines()
    if not ok:
        assert len(err) == 1 and ("--tol applies to --method exact only with --gap-tol off" in err[0]
                                  or "--gap-tol" in err[0] and "'off'" in err[0])
        assert not (tmp_path / "m.h5").exists()


def test_the_thread_chooser_does_not_time_the_pass_that_starts_the_threads(monkeypatch):
    from streamrank._native import parallel
    from streamrank.objectives import kernel_objective as ko
    monkeypatch.setattr(parallel, "threads", lambda: 2)
    ch = ko._ThreadChooser()
    seen = []
    # one thread: 60 ms a pass; two: 39 ms, but 500 ms the first time (the threading layer starts)
    cost = {1: [0.060] * 100, 2: [0.500] + [0.039] * 100}
    for _ in range(40):
        k = ch.pick()
        seen.append(k)
        ch.record(k, cost[k].pop(0))
    assert seen[:3] == [1, 2, 2] and seen.count(1) == 1 + 1  # one probe of one thread after PROBE_EVERY
    assert ch.best == 2
    # one slow pass on two threads (BLAS threads still spinning) does not hand the run to one thread,
    # a lasting slowdown does
    ch.record(2, 0.100)
    assert ch.pick() == 2
    for _ in range(3):
        ch.record(2, 0.100)
    assert ch.best == 1


@pytest.mark.parametrize("top", [1, 2])
def test_the_thread_chooser_runs_any_number_of_passes_at_the_count_in_force(monkeypatch, top):
    """With one thread in force (NUMBA_NUM_THREADS=1, taskset -c 0, or set_num_threads(1)) there is
    nothing to probe: every pass runs on one thread, past every probe interval; with two, a pick is
    always one of the two."""
    from streamrank._native import parallel
    from streamrank.objectives import kernel_objective as ko
    monkeypatch.setattr(parallel, "threads", lambda: top)
    ch = ko._ThreadChooser()
    seen = []
    for i in range(5 * ko.PROBE_EVERY):
        k = ch.pick()
        seen.append(k)
        ch.record(k, 0.05 if k == 1 else 0.04)
    assert set(seen) == ({1} if top == 1 else {1, 2})
