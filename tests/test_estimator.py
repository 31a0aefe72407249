"""Normalisation, the RankSVM estimator and the train -> predict -> eval command line."""

import json
import warnings

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
    with pytest.raises(ParameterError, match=r"C must be a finite number > 0; got -1. Use C=1$"):
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
    from streamrank.synthetic import write_text
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


# -- the scikit-learn protocol, without scikit-learn ------------------------------------------------
def test_import_does_not_load_scikit_learn():
    import subprocess
    import sys
    code = "import sys, streamrank; print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("cls", [streamrank.RankSVM, streamrank.CLSRRank])
def test_parameters_are_the_signature(cls):
    import inspect
    names = sorted(p.name for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self")
    est = cls()
    assert list(est.get_params()) == names
    assert all(v == inspect.signature(cls.__init__).parameters[k].default for k, v in est.get_params().items())
    with pytest.raises(ParameterError, match=rf"{cls.__name__} has no parameter 'c'; its parameters are "):
        est.set_params(c=1)


def test_fit_without_qid_ranks_all_rows_as_one_query():
    X, y, qid = arrays()
    with pytest.warns(UserWarning, match=rf"RankSVM.fit got no qid: its {len(y)} rows are ranked as one query"):
        a = streamrank.RankSVM(tol=1e-8).fit(X, y)
    b = streamrank.RankSVM(tol=1e-8).fit(X, y, np.zeros(len(y), int))
    assert np.array_equal(a.coef_, b.coef_)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the model was fitted on one query
        assert a.score(X, y) == b.score(X, y, qid=np.zeros(len(y), int))
    c = streamrank.RankSVM().fit(X, y, qid)
    with pytest.warns(UserWarning, match=r"RankSVM.score got no qid: .* the model was fitted on 25 queries"):
        c.score(X, y)


def test_score_is_the_mean_letor4_ndcg10_of_the_queries(tmp_path):
    from streamrank.evaluation.metrics import evaluate
    X, y, qid = arrays()
    est = streamrank.RankSVM(normalize="query_minmax").fit(X, y, qid=qid)
    qp = np.concatenate(([0], np.flatnonzero(qid[1:] != qid[:-1]) + 1, [len(qid)]))
    want = evaluate(y, est.predict(X, qid), qp, convention="letor4").means["NDCG@10"]
    assert est.score(X, y, qid=qid) == want and 0 < want < 1
    # a query's rows need not be adjacent: grouped as a dataset groups them (input order within)
    perm = np.random.default_rng(1).permutation(len(y))
    assert est.score(X[perm], y[perm], qid[perm]) == pytest.approx(want, rel=1e-12)
    np.testing.assert_array_equal(est.predict(X[perm], qid[perm]), est.predict(X, qid)[perm])
    with DatasetWriter(tmp_path / "scattered.h5", n_features=X.shape[1]) as w:
        w.append(X[perm], y[perm], qid[perm])
    assert est.score(str(tmp_path / "scattered.h5")) == est.score(X[perm], y[perm], qid[perm])


def test_predict_reads_rows_as_float32_and_scores_in_float64():
    X, y, qid = arrays()
    est = streamrank.RankSVM(C=0.5).fit(X, y, qid)
    s32 = est.predict(X)
    assert s32.dtype == np.float64
    X64 = X.astype(np.float64) + 1e-9  # not a float32 value: read as the float32 that fit would store
    s64 = est.predict(X64)
    assert s64.dtype == np.float64 and np.array_equal(s64, est.predict(X64.astype(np.float32)))
    assert np.array_equal(est.predict(X.tolist()), s32)


@pytest.mark.parametrize("args,message", [
    ((np.ones(5), np.ones(5)), r"X must be a 2-D array \(n_rows, n_features\); got shape \(5,\)\. Reshape your data"),
    ((np.array([[1.0, np.nan]]), [1.0]), r"X must be finite \(no NaN or inf\); row 0, feature 2 is nan"),
    ((np.ones((3, 2)), None), r"fit requires y to be passed, but the target y is None"),
    ((np.ones((3, 2)), [1.0, np.inf, 0]), r"y must be finite \(no NaN or inf\); row 1 is inf"),
    ((np.ones((3, 2)), [1.0, 0.0]), r"y should be a 1d array of one label per row of X \(3\); got shape \(2,\)"),
    ((np.ones((3, 2)), [1.0, 0, 0], [1, 2]), r"qid must give one query id per row of X \(3\); got shape \(2,\)"),
    ((np.ones((3, 0)), [1.0, 0, 0]), r"X has 0 feature\(s\) \(shape=\(3, 0\)\) while a minimum of 1 is required"),
    ((np.ones((2, 2)) + 1j, [1.0, 0]), r"Complex data not supported"),
])
def test_array_inputs_are_checked_in_fit(args, message):
    with pytest.raises(ParameterError, match=message):
        streamrank.RankSVM().fit(*args)


def test_sparse_rows_are_refused_with_the_fix():
    import scipy.sparse
    with pytest.raises(ParameterError, match=r"X is a sparse csr_matrix; streamrank reads dense rows: pass X.toarray"):
        streamrank.RankSVM().fit(scipy.sparse.csr_matrix(np.eye(3)), [1.0, 0, 0], [1, 1, 1])


@pytest.mark.parametrize("random_state", [None, 5, np.random.RandomState(2), np.random.default_rng(3)])
def test_random_state_seeds_the_feature_map(random_state):
    X, y, qid = arrays()
    est = streamrank.RankSVM(method="nystroem", n_components=8, random_state=random_state).fit(X, y, qid)
    seed = est.model_.config["seed"]
    again = streamrank.RankSVM(method="nystroem", n_components=8, random_state=seed).fit(X, y, qid)
    assert np.array_equal(est.coef_, again.coef_)  # the seed recorded is the one drawn from
    assert est.random_state is random_state  # fit stores nothing in the parameters


def test_random_state_must_be_a_seed():
    X, y, qid = arrays()
    with pytest.raises(ParameterError, match=r"random_state must be an int >= 0, None, or a numpy RandomState or "
                                             r"Generator; got -1. Use random_state=0"):
        streamrank.CLSRRank(random_state=-1).fit(X, y, qid)


def test_everything_but_metadata_routing_works_without_scikit_learn(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn now raises ImportError
    X, y, qid = arrays()
    est = streamrank.CLSRRank(n_components=8, lam=0.01)
    assert repr(est) == "CLSRRank(lam=0.01, n_components=8)"
    with pytest.raises(ParameterError, match="this CLSRRank is not fitted yet; call fit first"):
        est.predict(X)
    assert 0 < est.set_params(lam=0.1).fit(X, y, qid=qid).score(X, y, qid=qid) < 1
    with pytest.raises(ImportError, match=r"set_fit_request is scikit-learn's metadata routing; install scikit-learn: "
                                          r"pip install 'streamrank\[sklearn\]'"):
        est.set_fit_request(qid=True)


def test_verbose_prints_the_iterations_and_silent_does_not(tmp_path, capsys):
    from streamrank.synthetic import write_hdf5
    write_hdf5(tmp_path / "t.h5", "small", seed=1, scale=0.1)
    streamrank.RankSVM(C=0.5).fit(tmp_path / "t.h5")
    assert capsys.readouterr().err == ""
    streamrank.RankSVM(C=0.5, verbose=True).fit(tmp_path / "t.h5")
    err = capsys.readouterr().err
    assert "iter   1 f" in err and "C=0.5 done" in err


# -- DataFrames as other tools leave them: missing values, text, nullable and categorical columns ---
def frame_cases():
    pd = pytest.importorskip("pandas")
    X, y, qid = arrays(n_queries=3)
    base = pd.DataFrame(X, columns=["bm25", "tfidf", "len", "pr", "const"])

    def with_(col, values):
        d = base.copy()
        d[col] = values
        return d
    n = len(y)
    return pd, base, y, qid, {
        "pd.NA in Float64": (with_("tfidf", pd.array([0.5] * 4 + [None] + [0.5] * (n - 5), dtype="Float64")),
                             r"X must be finite \(no NaN, inf or missing value\); row 4, feature 2 \(column 'tfidf'\) "
                             r"is missing \(<NA>\)\. Drop or impute it"),
        "pd.NA in Int64": (with_("len", pd.array([3] * (n - 1) + [None], dtype="Int64")),
                           rf"row {n - 1}, feature 3 \(column 'len'\) is missing \(<NA>\)"),
        "pd.NA in boolean": (with_("pr", pd.array([True, None] + [False] * (n - 2), dtype="boolean")),
                             r"row 1, feature 4 \(column 'pr'\) is missing"),
        "a text column": (with_("tfidf", ["high", "low"] * (n // 2) + ["low"] * (n % 2)),
                          r"X must hold numbers; row 0, feature 2 \(column 'tfidf'\) is the text 'high'\. Encode it "
                          r"as numbers \(e\.g\. sklearn's OneHotEncoder, or pd\.get_dummies\) or drop the column"),
        "a categorical of text": (with_("const", pd.Categorical(["a", "b"] * (n // 2) + ["a"] * (n % 2))),
                                  r"row 0, feature 5 \(column 'const'\) is the text 'a'"),
        "a date column": (with_("pr", pd.to_datetime(["2024-01-01"] * n)),
                          r"X must hold numbers; row 0, feature 4 \(column 'pr'\) is Timestamp\("),
        "an object cell": (with_("bm25", [0.5, 0.5, {"k": 1}] + [0.5] * (n - 3)),
                           r"X must hold numbers; row 2, feature 1 \(column 'bm25'\) is \{'k': 1\} \(a dict\)"),
    }


@pytest.mark.parametrize("case", ["pd.NA in Float64", "pd.NA in Int64", "pd.NA in boolean", "a text column",
                                  "a categorical of text", "a date column", "an object cell"])
def test_a_hostile_dataframe_is_refused_naming_the_row_and_column(case):
    pd, base, y, qid, cases = frame_cases()
    X, message = cases[case]
    est = streamrank.RankSVM()
    with pytest.raises(ParameterError, match=message) as err:
        est.fit(X, y, qid)
    # a cell that numpy could not convert at all stays a TypeError to its callers (scikit-learn's checks)
    assert isinstance(err.value, TypeError) == (case not in ("a text column", "a categorical of text"))
    fitted = streamrank.RankSVM().fit(base, y, qid)
    for call in (lambda: fitted.predict(X, qid), lambda: fitted.score(X, y, qid)):
        with pytest.raises(ParameterError, match=message):
            call()


def test_dataframes_of_numbers_in_any_dtype_fit_as_their_float_values():
    """Nullable dtypes without a missing value, numeric text, categoricals of numbers, bool and object
    columns of numbers are the numbers they hold: the same model as the float array."""
    pd, base, y, qid, _ = frame_cases()
    X = base.to_numpy(np.float32)
    n = len(y)
    frame = base.astype({"bm25": "Float64", "pr": object})
    frame["len"] = pd.array(np.round(X[:, 2]).astype(int), dtype="Int64")
    frame["tfidf"] = [repr(float(v)) for v in X[:, 1]]
    frame["const"] = pd.Categorical([0.0] * n)
    want = X.copy()
    want[:, 2] = np.round(X[:, 2])
    a = streamrank.RankSVM(tol=1e-8).fit(frame, pd.Series(y, dtype="Int64"), pd.Series(qid, dtype="Int64"))
    b = streamrank.RankSVM(tol=1e-8).fit(want, y, qid)
    assert np.array_equal(a.coef_, b.coef_)
    np.testing.assert_array_equal(a.predict(frame, qid), b.predict(want, qid))


@pytest.mark.parametrize("dtype", ["datetime64[s]", "timedelta64[s]"])
def test_dates_and_durations_are_not_read_as_their_counts(dtype):
    X = np.arange(6).astype(dtype).reshape(3, 2)
    with pytest.raises(ParameterError, match=r"X holds (dates|durations) \(dtype .*\), not numbers\. Convert them"):
        streamrank.RankSVM().fit(X, [0.0, 1, 2], [1, 1, 1])


@pytest.mark.parametrize("y,message", [
    (["a", "b", "c"], r"y must hold numbers; row 0 is the text 'a'\. Pass numeric relevance labels"),
    (np.array([1, {}, 0], dtype=object), r"y must hold numbers; row 1 is \{\} \(a dict\)"),
    ("NA", r"y must be finite \(no NaN, inf or missing value\); row 2 is missing \(<NA>\)"),
])
def test_labels_that_are_no_numbers_are_refused_by_row(y, message):
    if isinstance(y, str):
        pd = pytest.importorskip("pandas")
        y = pd.Series([1, 0, None], dtype="object").astype(object).where([True, True, False], pd.NA)
    with pytest.raises(ParameterError, match=message):
        streamrank.RankSVM().fit(np.eye(3), y, [1, 1, 1])


@pytest.mark.parametrize("qid,message", [
    (np.array([1.0, 1, np.nan, 2]), r"qid must give every row a query id; row 2 has none \(np\.float64\(nan\)\)"),
    (np.array(["a", None, "b", "b"], dtype=object), r"row 1 has none \(None\)\. Drop the row or give it"),
    (np.array([1, "1", 2, 2], dtype=object), r"qid mixes ids of kinds number, text; give every query an id of one "
                                             r"kind, e.g\. qid\.astype\(str\)"),
    (np.array(["2024-01-01", "NaT", "NaT", "2024-01-02"], dtype="datetime64[D]"), r"row 1 has none"),
])
def test_query_ids_missing_or_of_mixed_kinds_are_refused(qid, message):
    with pytest.raises(ParameterError, match=message):
        streamrank.RankSVM().fit(np.eye(4), [0.0, 1, 1, 0], qid)


def test_text_query_ids_beyond_ascii_are_their_own_queries():
    X, y, qid = arrays(n_queries=4)
    names = np.array(["café", "naïve", "日本", "cafe"])[qid - 100]
    a = streamrank.RankSVM(tol=1e-8).fit(X, y, names)
    b = streamrank.RankSVM(tol=1e-8).fit(X, y, qid)
    assert a._n_fit_queries == 4 and np.array_equal(a.coef_, b.coef_)
    assert a.score(X, y, names) == b.score(X, y, qid)
