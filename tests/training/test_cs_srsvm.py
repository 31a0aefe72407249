"""cs-sRSVM (paper 001): the smooth hinge trained by every method, against dense explicit-pair
optima, theorem 2's bound, block layouts and budgets, and from the command line."""

import json

import numpy as np
import pytest

import streamrank
from dense_oracle import DenseRankSVM, explicit_pairs
from streamrank.cli import main
from streamrank.errors import ParameterError
from streamrank.features.kernels import kernel_matrix
from streamrank.io.convert import convert
from streamrank.training.exact import train_exact
from streamrank.training.linear import train_linear
from streamrank.training.problem import (ETA_AUTO_EPS1, THEOREM2_CONSTANT, pair_cost_table, pair_weight_sum,
                                         query_weights)
from test_cpath import ranking_data

COSTS = "0-1:1,1-2:1.3,0-2:2"



def _qp(q):
    return np.concatenate([[0], np.flatnonzero(np.diff(q)) + 1, [len(q)]])


@pytest.fixture(scope="module")
def data():
    """Raw features of scales 10^-2 .. 10^3 (not normalised) and labels 0-2."""
    return ranking_data(12, 5, d=10)


@pytest.mark.parametrize("eta", [0.5, 0.05])
@pytest.mark.parametrize("costs", [(None, None), (COSTS, "log_ratio")])
def test_primal_smooth_hinge_equals_the_dense_explicit_pair_optimum(data, eta, costs):
    X, y, q = data
    pc, qw = costs
    qp = _qp(q)
    m = streamrank.RankSVM(C=0.01, loss="smooth_hinge", eta=eta, tol=1e-10, pair_cost=pc, query_weight=qw,
                           normalize="none").fit(X, y, q)
    dense = DenseRankSVM(X, y, qp, 0.01, lam=pair_cost_table(pc, np.unique(y)), mu=query_weights(qw, y, qp), eta=eta)
    w = dense.solve()
    assert m.objective_ == pytest.approx(dense.fun(w), rel=1e-10)
    np.testing.assert_allclose(m.coef_, w, rtol=1e-6, atol=1e-9 * np.abs(w).max())
    assert m.training_["eta"] == eta and m.model_.config["loss"] == "smooth_hinge"


def test_eta_auto_is_the_papers_rule_per_C(data):
    X, y, q = data
    Cs = [0.01, 0.1, 1.0]
    m = streamrank.RankSVM(C=Cs, loss="smooth_hinge", pair_cost=COSTS, query_weight="log_ratio").fit(
        X, y, q, valid=ranking_data(30, 6, d=10))
    qp = _qp(q)
    levels = np.unique(y)
    s = pair_weight_sum(np.searchsorted(levels, y), qp, pair_cost_table(COSTS, levels), query_weights("log_ratio", y, qp))
    _, wts = explicit_pairs(y, qp, pair_cost_table(COSTS, levels), query_weights("log_ratio", y, qp))
    assert s == pytest.approx(wts.sum(), rel=1e-12)  # the counted sum is the explicit pairs' sum
    etas = [c["eta"] for c in m.training_["candidates"]]
    assert etas == pytest.approx([min(0.5, np.sqrt(ETA_AUTO_EPS1 / (THEOREM2_CONSTANT * C * s))) for C in Cs], rel=1e-12)
    assert etas[0] > etas[1] > etas[2]


def test_theorem_2_bound(data):
    """||w_eta - w*||^2 <= C sum lambda mu 0.0515 eta^2, both optima solved far below the bound,
    and the distance shrinks with eta."""
    X, y, q = data
    qp = _qp(q)
    C = 0.01
    lam = pair_cost_table(COSTS, np.unique(y))
    mu = query_weights("log_ratio", y, qp)
    s = pair_weight_sum(np.searchsorted(np.unique(y), y), qp, lam, mu)
    common = dict(C=C, pair_cost=COSTS, query_weight="log_ratio", tol=1e-12, max_iter=5000)
    wstar = streamrank.RankSVM(**common).fit(X, y, q).coef_
    dist = []
    for eta in (0.8, 0.4, 0.1, 0.02):
        w = streamrank.RankSVM(loss="smooth_hinge", eta=eta, **common).fit(X, y, q).coef_
        d2 = float(np.sum((w - wstar) ** 2))
        bound = C * s * THEOREM2_CONSTANT * eta ** 2
        assert d2 <= bound
        dist.append(d2)
    assert dist == sorted(dist, reverse=True) and dist[-1] < dist[0]


def test_theorem_2_bound_on_mq2008(mq2008, tmp_path):
    convert([mq2008 / "Fold1" / "train.txt.gz"], tmp_path / "t.h5", quiet=True)
    with streamrank.open_dataset(tmp_path / "t.h5") as ds:
        qs = (0, 60)
        common = dict(C=1e-3, pair_cost=COSTS, query_weight="log_ratio", tol=1e-12, max_iter=5000, queries=qs)
        wstar, _ = train_linear(ds, **common)
        y = ds.y[:int(ds.query_ptr[qs[1]])]
        qp = ds.query_ptr[:qs[1] + 1]
        levels = np.unique(y)
        s = pair_weight_sum(np.searchsorted(levels, y), qp, pair_cost_table(COSTS, levels),
                            query_weights("log_ratio", y, qp))
        for eta in (0.5, 0.1, 0.01):
            w, summ = train_linear(ds, loss="smooth_hinge", eta=eta, **common)
            d2 = float(np.sum((w.w - wstar.w) ** 2))
            assert summ["grad_norm"] < 1e-6 and d2 <= 1e-3 * s * THEOREM2_CONSTANT * eta ** 2


def test_exact_kernel_smooth_hinge(small):
    """Exact kernel cs-sRSVM: the linear kernel gives the primal optimum; with rbf, beta's optimum
    is the dense one in w-space through Q = Phi Phi^T (Q as stored: float32 with its jitter)."""
    with streamrank.open_dataset(small / "train.h5") as ds:
        qs = (0, ds.n_queries)
        common = dict(C=0.3, loss="smooth_hinge", eta=0.3, tol=1e-10, gap_tol=None, queries=qs, pair_cost=COSTS)
        lin, sl = train_linear(ds, **common)
        ker, sk = train_exact(ds, kernel="linear", **common)
        assert sk["objective"] == pytest.approx(sl["objective"], rel=1e-8)
        rbf, sr = train_exact(ds, kernel="rbf", gamma=0.05, **common)
        X, y = ds.read(0, int(ds.query_ptr[qs[1]]))
        qp = ds.query_ptr[:qs[1] + 1]
        # the problem streamrank solves: Q stored as float32(K - c), plus c and its jitter
        c = sr["kernel_shift"]
        Q = (kernel_matrix(X, kernel="rbf", gamma=0.05) - c).astype(np.float32).astype(np.float64) + c
        Q += sr["jitter"] * np.eye(len(y))
        ev, V = np.linalg.eigh(Q)
        Phi = V * np.sqrt(np.maximum(ev, 0.0))
        dense = DenseRankSVM(Phi, y, qp, 0.3, lam=pair_cost_table(COSTS, np.unique(y)), eta=0.3)
        assert sr["objective"] == pytest.approx(dense.fun(dense.solve()), rel=1e-8)
        assert sr["candidates"][0]["eta"] == 0.3


@pytest.mark.parametrize("method", ["primal", "nystroem"])
def test_block_size_and_budget_do_not_change_the_model(small, tmp_path, method):
    with streamrank.open_dataset(small / "train.h5") as ds:
        kw = dict(C=0.5, loss="smooth_hinge", eta=0.2, tol=1e-8, method=method, pair_cost=COSTS,
                  query_weight="log_ratio", normalize="zscore")
        if method == "nystroem":
            kw.update(gamma=0.05, components=40)
        mem, s_mem = train_linear(ds, **kw)
        assert s_mem["in_memory"]
        small_blocks, s_sb = train_linear(ds, memory_budget="512KB", block_bytes=20_000, cache_dir=tmp_path,
                                          **({"map_cache": "cache"} if method != "primal" else {}), **kw)
        assert not s_sb["in_memory"]
        assert np.array_equal(mem.w, small_blocks.w) and s_mem["objective"] == s_sb["objective"]


def test_newton_cholesky_takes_the_smooth_hinge(small):
    with streamrank.open_dataset(small / "train.h5") as ds:
        kw = dict(C=0.5, loss="smooth_hinge", eta=0.2, tol=1e-10, pair_cost=COSTS)
        _, st = train_linear(ds, **kw)
        _, sn = train_linear(ds, solver="newton_cholesky", **kw)
        assert sn["objective"] == pytest.approx(st["objective"], rel=1e-10)


def test_cli(small, tmp_path, capsys):
    out = tmp_path / "m.h5"
    rc = main(["train", str(small / "train.h5"), "-o", str(out), "--loss", "smooth_hinge", "--eta", "auto",
               "--C", "two-stage", "--select-metric", "avgndcg", "--valid", str(small / "valid.h5"), "--pair-cost",
               COSTS, "--query-weight", "log_ratio", "--json", "--quiet"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    cands = summary["candidates"]
    assert [c["C"] for c in cands[:5]] == [1e-5, 1e-4, 1e-3, 1e-2, 1e-1] and len(cands) == 9
    best1 = max(cands[:5], key=lambda c: c["valid_avgndcg"])["C"]
    assert [c["C"] for c in cands[5:]] == [f * best1 for f in (0.6, 0.8, 1.2, 1.4)]
    assert summary["C"] == max(cands, key=lambda c: c["valid_avgndcg"])["C"]
    assert len({c["eta"] for c in cands}) == 9 and "eta" in summary
    model = streamrank.load(out)
    assert model.model_.config["loss"] == "smooth_hinge" and model.model_.config["eta"] == "auto"
    # argparse's own refusal
    assert main(["train", str(small / "train.h5"), "-o", str(tmp_path / "n.h5"), "--C", "two"]) == 2
    assert "'two' is not a number" in capsys.readouterr().err
    for argv, words in ((["--eta", "0.3"], "--loss smooth_hinge"), (["--C", "two-stage"], "--valid"),
                        (["--loss", "smooth_hinge", "--eta", "1.5"], "--eta auto"),
                        (["--loss", "smooth_hinge", "--eta", "x"], "--eta auto")):
        rc = main(["train", str(small / "train.h5"), "-o", str(tmp_path / "n.h5"), *argv])
        assert rc == 2 and words in capsys.readouterr().err
    with pytest.raises(ParameterError, match="eta"):
        streamrank.RankSVM(loss="smooth_hinge", eta=0.0).fit(small / "train.h5")


@pytest.mark.parametrize("method", ["primal", "nystroem", "exact"])
def test_two_stage_choice_in_the_second_stage_is_the_model(small, monkeypatch, method):
    """With a validation score that grows with ||w|| (monotone in C), the best point is the last of
    the second stage (1.4 x 0.1): its solution, gamma and map are the saved model's."""
    import streamrank.training.exact as ex
    import streamrank.training.linear as lin
    score = lambda model, *a, **k: float(np.linalg.norm(model.w))  # noqa: E731
    monkeypatch.setattr(lin, "validation_score", score)
    monkeypatch.setattr(lin, "mapped_validation_bytes", lambda *a: 0)  # every score through validation_score
    monkeypatch.setattr(ex, "validation_score", score)
    with streamrank.open_dataset(small / "train.h5") as ds, streamrank.open_dataset(small / "valid.h5") as v:
        kw = dict(valid=v, C="two-stage", tol=1e-6, loss="smooth_hinge", gamma=0.05)
        if method == "exact":
            model, s = train_exact(ds, **kw)
        else:
            model, s = train_linear(ds, method=method, **({"components": 30} if method == "nystroem" else {}),
                                    **{k: v_ for k, v_ in kw.items() if method != "primal" or k != "gamma"})
        assert len(s["candidates"]) == 9 and s["C"] == pytest.approx(0.14)
        assert s["eta"] == s["candidates"][-1]["eta"] and model.config["C_rule"] == "two-stage"


def test_theorem_2_bound_for_exact_kernel_in_its_own_norm(small):
    """Exact kernel RankSVM: (beta_eta - beta*)^T Q' (beta_eta - beta*) <= C sum lambda mu 0.0515 eta^2
    (the norm of the model's own space, Q' as stored), both optima solved far below the bound."""
    from streamrank._native import pairkernels as pk
    from streamrank.objectives.kernel_objective import KernelObjective
    from streamrank.solvers.tron import tron
    from test_exact_kernel import problem
    C = 0.3
    with streamrank.open_dataset(small / "train.h5") as ds:
        obj, Q, y, qp = problem(ds, C=C)
        n_pairs = explicit_pairs(y, qp)[1].sum()  # lambda = mu = 1
        beta = {}
        for eta in (0.0, 0.6, 0.2, 0.05):
            o = KernelObjective(obj.source, obj.rank, C=C, cost=pk.pair_cost(obj.cost, eta=eta), mu=obj.mu)
            st = tron(o, np.zeros(len(y)), eps=1e-11, max_iter=500)
            assert st.converged or "float64 resolution" in st.message  # solved as far as float64 goes
            beta[eta] = st.w
        dist = []
        for eta in (0.6, 0.2, 0.05):
            d = beta[eta] - beta[0.0]
            d2 = float(d @ Q @ d)
            assert d2 <= C * n_pairs * THEOREM2_CONSTANT * eta ** 2
            dist.append(d2)
        assert dist[0] > dist[1] > dist[2] > 0


def test_theorem_2_bound_in_the_mapped_space(small):
    """Nystroem features (one seeded map for both losses): ||w_eta - w*||^2 within the bound."""
    with streamrank.open_dataset(small / "train.h5") as ds:
        kw = dict(C=0.3, tol=1e-12, max_iter=2000, method="nystroem", gamma=0.05, components=40, seed=2,
                  pair_cost=COSTS, query_weight="log_ratio", normalize="zscore")
        wstar, _ = train_linear(ds, **kw)
        y, qp = ds.y[:], ds.query_ptr
        levels = np.unique(y)
        s = pair_weight_sum(np.searchsorted(levels, y), qp, pair_cost_table(COSTS, levels),
                            query_weights("log_ratio", y, qp))
        for eta in (0.5, 0.1):
            w, _ = train_linear(ds, loss="smooth_hinge", eta=eta, **kw)
            assert np.array_equal(w.fmap.landmarks_, wstar.fmap.landmarks_)
            assert 0 < float(np.sum((w.w - wstar.w) ** 2)) <= 0.3 * s * THEOREM2_CONSTANT * eta ** 2


def test_estimator_round_trip_keeps_the_papers_settings(small, tmp_path):
    est = streamrank.RankSVM(C="two-stage", loss="smooth_hinge", pair_cost=COSTS, query_weight="log_ratio",
                             select_metric="avgprec", solver="newton_yuan").fit(small / "train.h5",
                                                                                  valid=small / "valid.h5")
    est.save(tmp_path / "m.h5")
    back = streamrank.load(tmp_path / "m.h5")
    p = back.get_params()
    assert (p["C"], p["loss"], p["eta"], p["select_metric"]) == ("two-stage", "smooth_hinge", "auto", "avgprec")
    assert len(back.training_["candidates"]) == 9 and back.C_ == est.C_
