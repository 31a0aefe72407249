"""Normalisation, the RankSVM estimator and the train -> predict -> eval command line."""

import json

import numpy as np
import pytest

import streamrank
from dense_oracle import DenseRankSVM
from streamrank.cli import main
from streamrank.errors import ParameterError
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.features.normalize import Normalizer
from streamrank.training.problem import pair_cost_table, query_weights


def arrays(n_queries=25, d=5, seed=0):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 30, n_queries)
    X = (rng.standard_normal((sizes.sum(), d)) * [1, 10, 0.1, 1, 0]).astype(np.float32)  # last column constant
    y = rng.integers(0, 3, sizes.sum()).astype(np.float32)
    qid = np.repeat(np.arange(n_queries) + 100, sizes)
    return X, y, qid


def test_zscore_statistics_and_block_independence(tmp_path):
    X, y, qid = arrays()
    whole = Normalizer("zscore").fit([X], X.shape[1])
    parts = Normalizer("zscore").fit([X[:7], X[7:8], X[8:]], X.shape[1])
    assert np.array_equal(whole.mean_, parts.mean_) and np.array_equal(whole.scale_, parts.scale_)
    Xd = X.astype(np.float64)
    np.testing.assert_allclose(whole.mean_, Xd.mean(axis=0), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(whole.scale_[:-1], Xd.std(axis=0)[:-1], rtol=1e-12)
    assert whole.scale_[-1] == 1.0  # a constant feature keeps scale 1
    np.testing.assert_allclose(whole.transform(X), (Xd - whole.mean_) / whole.scale_)


def test_query_minmax_is_letor_querylevelnorm():
    X, y, qid = arrays()
    qp = np.concatenate(([0], np.flatnonzero(qid[1:] != qid[:-1]) + 1, [len(qid)]))
    got = Normalizer("query_minmax").transform(X, qp)
    for a, b in zip(qp[:-1], qp[1:]):
        Q = X[a:b].astype(np.float64)
        lo, hi = Q.min(axis=0), Q.max(axis=0)
        want = np.where(hi > lo, (Q - lo) / np.where(hi > lo, hi - lo, 1), 0.0)
        np.testing.assert_allclose(got[a:b], want, rtol=1e-15, atol=0)
    with pytest.raises(ParameterError, match="needs query ids"):
        Normalizer("query_minmax").transform(X)


@pytest.mark.parametrize("normalize", ["none", "zscore", "query_minmax"])
def test_fit_on_arrays_equals_fit_on_a_dataset(tmp_path, normalize):
    X, y, qid = arrays()
    path = tmp_path / "d.h5"
    with DatasetWriter(path, n_features=X.shape[1]) as w:
        w.append(X, y, qid)
    a = streamrank.RankSVM(C=0.5, normalize=normalize, tol=1e-6).fit(X, y, qid)
    b = streamrank.RankSVM(C=0.5, normalize=normalize, tol=1e-6).fit(str(path))
    assert np.array_equal(a.coef_, b.coef_) and a.objective_ == b.objective_
    np.testing.assert_allclose(a.predict(X, qid), b.predict(str(path)), rtol=1e-12)


@pytest.mark.parametrize("pair_cost,query_weight", [("gain_difference", None), (None, "log_ratio"),
                                                    ("gain_difference", "log_ratio")])
def test_costs_and_weights_reach_the_dense_optimum(pair_cost, query_weight):
    X, y, qid = arrays()
    est = streamrank.RankSVM(C=2.0, pair_cost=pair_cost, query_weight=query_weight, tol=1e-10).fit(X, y, qid)
    qp = np.concatenate(([0], np.flatnonzero(qid[1:] != qid[:-1]) + 1, [len(qid)]))
    lam = pair_cost_table(pair_cost, np.unique(y))
    mu = query_weights(query_weight, y, qp)
    dense = DenseRankSVM(X, y, qp, 2.0, lam=lam, mu=mu)
    assert est.objective_ == pytest.approx(dense.fun(dense.solve()), rel=1e-9)


def test_estimator_conventions():
    est = streamrank.RankSVM(C=-1)  # __init__ stores, fit validates
    assert est.get_params()["C"] == -1
    X, y, qid = arrays()
    with pytest.raises(ParameterError, match=r"C must be > 0; got -1.0. Use C=0.5"):
        est.fit(X, y, qid)
    with pytest.raises(ParameterError, match="not fitted"):
        est.predict(X)
    assert est.set_params(C=0.25).C == 0.25
    with pytest.raises(ParameterError, match=r"several C \(and gamma\) values need validation data \(valid=DATA\)"):
        streamrank.RankSVM(C=[0.1, 1]).fit(X, y, qid)


def test_C_path_keeps_the_best_on_validation():
    X, y, qid = arrays(seed=0)
    Xv, yv, qv = arrays(seed=1)
    est = streamrank.RankSVM(C=[1e-3, 1e-1, 10.0], tol=1e-6).fit(X, y, qid, valid=(Xv, yv, qv))
    cands = est.training_["candidates"]
    assert [c["C"] for c in cands] == [1e-3, 1e-1, 10.0]
    best = max(cands, key=lambda c: c["valid_meanndcg"])
    assert est.C_ == best["C"]
    # the path's model for that C equals a cold fit at that C (to the solver's tolerance)
    cold = streamrank.RankSVM(C=best["C"], tol=1e-6).fit(X, y, qid)
    assert est.objective_ == pytest.approx(cold.objective_, rel=1e-9)


def test_cli_train_predict_eval(tmp_path, capsys):
    from streamrank.io.synthetic import write_text
    write_text(tmp_path / "train.txt", preset="small", seed=0)
    write_text(tmp_path / "valid.txt", preset="small", seed=1)
    common = ["--cache-dir", str(tmp_path / "cache")]
    assert main(["train", str(tmp_path / "train.txt"), "-o", str(tmp_path / "m.h5"), "--valid",
                 str(tmp_path / "valid.txt"), "--C", "0.01,1", "--normalize", "zscore", "--json", "--quiet",
                 *common]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("objective", "grad_norm", "iterations", "passes", "seconds", "method", "solver", "C", "candidates"):
        assert key in summary
    assert len(summary["candidates"]) == 2
    assert main(["predict", str(tmp_path / "m.h5"), str(tmp_path / "valid.txt"), "-o", str(tmp_path / "s.txt"),
                 *common]) == 0
    assert main(["eval", str(tmp_path / "valid.txt"), str(tmp_path / "s.txt"), "--json", *common]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    chosen = [c for c in summary["candidates"] if c["C"] == summary["C"]][0]
    assert report["means"]["MeanNDCG"] == pytest.approx(chosen["valid_meanndcg"], rel=1e-12)


@pytest.mark.parametrize("normalize", ["zscore", "query_minmax"])
def test_normalised_training_reaches_the_dense_optimum_on_normalised_rows(normalize):
    """The fused kernels normalise on the fly; the oracle sees the materialised transform."""
    X, y, qid = arrays()
    est = streamrank.RankSVM(C=1.0, normalize=normalize, tol=1e-10).fit(X, y, qid)
    qp = np.concatenate(([0], np.flatnonzero(qid[1:] != qid[:-1]) + 1, [len(qid)]))
    Phi = est.model_.normalizer.transform(X, qp)
    dense = DenseRankSVM(Phi, y, qp, 1.0)
    assert est.objective_ == pytest.approx(dense.fun(dense.solve()), rel=1e-9)
    np.testing.assert_allclose(est.predict(X, qid), Phi @ est.coef_, rtol=1e-12)
