"""The export package's core (issue 32): a model as one linear function of its raw inputs, the
plain JSON format read back by a scorer written from its documentation, feature names, the digest,
and the ``streamrank export`` command."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import streamrank
from streamrank.errors import InputError, ParameterError
from streamrank.export import export_model, render
from streamrank.export.common import feature_names, linear_weights, model_digest
from streamrank.state.model import load as load_model


def ranking_data(seed=0, n_queries=8, per=9, d=5, scales=None):
    """Rows of ``n_queries`` queries with graded labels that depend on the features; column j
    multiplied by ``scales[j]`` (raw features of very different scales)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_queries * per, d))
    y = np.clip(np.round(X[:, 0] - 0.5 * X[:, 1] + 0.3 * rng.standard_normal(len(X))) + 1, 0, 2)
    if scales is not None:
        X = X * np.asarray(scales)
    return X.astype(np.float32), y, np.repeat(np.arange(n_queries), per)


SCALES = [1e-2, 1.0, 1e4, 3.0, 1e2]
KINDS = {
    "primal-none": lambda: streamrank.RankSVM(),
    "primal-zscore": lambda: streamrank.RankSVM(normalize="zscore"),
    "primal-qminmax": lambda: streamrank.RankSVM(normalize="query_minmax"),
    "primal-subset": lambda: streamrank.RankSVM(normalize="zscore", features=[4, 1, 2]),
    "nystroem-rbf": lambda: streamrank.RankSVM(method="nystroem", n_components=12, normalize="zscore"),
    "nystroem-laplacian": lambda: streamrank.RankSVM(method="nystroem", kernel="laplacian", n_components=12),
    "nystroem-poly": lambda: streamrank.RankSVM(method="nystroem", kernel="poly", n_components=12,
                                                normalize="zscore"),
    "nystroem-sigmoid": lambda: streamrank.RankSVM(method="nystroem", kernel="sigmoid", n_components=12,
                                                   normalize="zscore", gamma=0.05),
    "nystroem-linear": lambda: streamrank.RankSVM(method="nystroem", kernel="linear", n_components=12,
                                                  normalize="zscore"),
    "rff-rbf": lambda: streamrank.RankSVM(method="rff", n_components=16, normalize="zscore"),
    "rff-laplacian": lambda: streamrank.RankSVM(method="rff", kernel="laplacian", n_components=16,
                                                normalize="query_minmax"),
    "exact-rbf": lambda: streamrank.RankSVM(method="exact", normalize="zscore"),
    "exact-linear": lambda: streamrank.RankSVM(method="exact", kernel="linear", normalize="zscore"),
    "clsr-rbf": lambda: streamrank.CLSRRank(n_components=15, normalize="zscore"),
    "clsr-sigmoid": lambda: streamrank.CLSRRank(kernel="sigmoid", gamma=0.05, n_components=15, normalize="zscore"),
    "clsr-linear": lambda: streamrank.CLSRRank(kernel="linear", n_components=15, normalize="zscore"),
}


@pytest.fixture(scope="module")
def data():
    return ranking_data(scales=SCALES)


@pytest.fixture(scope="module")
def models(data):
    X, y, q = data
    return {k: make().fit(X, y, q)._model() for k, make in KINDS.items()}


# -- the linear form: s(x) = x . v + c -------------------------------------------------------------
LINEAR = ["primal-none", "primal-zscore", "primal-subset", "nystroem-linear", "exact-linear", "clsr-linear"]


@pytest.mark.parametrize("key", LINEAR)
def test_linear_weights_reproduce_the_model_on_raw_rows(models, data, key):
    X = data[0]
    model = models[key]
    v, c = linear_weights(model, "solr")
    assert v.shape == (X.shape[1],)
    s = model.decision_function(X)
    # exact arithmetic gives equality; the float32 rounding of phi (nystroem, exact) is the gap
    tol = 1e-12 if key.startswith(("primal", "clsr")) else 1e-6
    assert np.abs(X.astype(np.float64) @ v + c - s).max() <= tol * np.abs(s).max()


def test_a_subset_model_weighs_only_its_columns(models):
    v, _ = linear_weights(models["primal-subset"], "svmrank")
    assert v[2] == 0 and v[4] == 0 and np.all(v[[0, 1, 3]] != 0)  # features 4, 1, 2 (1-based)


@pytest.mark.parametrize("key", ["primal-qminmax", "nystroem-rbf", "rff-rbf", "exact-rbf", "clsr-rbf",
                                 "nystroem-poly"])
def test_linear_formats_refuse_what_a_weight_per_feature_cannot_hold(models, key):
    with pytest.raises(ParameterError, match="format=solr .*use format=onnx"):
        linear_weights(models[key], "solr")


# -- json: read back by a scorer written from the format's documentation --------------------------
def kernel(name, A, B, gamma, degree, coef0):
    """The documented kernels, computed directly (differences, not the expansion streamrank uses)."""
    if name == "rbf":
        return np.exp(-gamma * ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1))
    if name == "laplacian":
        return np.exp(-gamma * np.abs(A[:, None, :] - B[None, :, :]).sum(-1))
    if name == "poly":
        return (gamma * A @ B.T + coef0) ** degree
    if name == "sigmoid":
        return np.tanh(gamma * A @ B.T + coef0)
    return A @ B.T


def json_scores(doc, X, qid):
    """Scores of raw rows by the steps of streamrank.export.plain_json's documentation."""
    X = np.asarray(X, np.float64)
    if doc["input_features"] is not None:
        X = X[:, np.asarray(doc["input_features"]) - 1]
    norm = doc["normalize"]
    if norm["kind"] == "zscore":
        X = (X - np.asarray(norm["mean"])) * (1 / np.asarray(norm["scale"]))
    elif norm["kind"] == "query_minmax":
        out = np.empty_like(X)
        for q in np.unique(qid):
            r = qid == q
            lo, hi = X[r].min(0), X[r].max(0)
            span = hi - lo
            out[r] = np.where(span > 0, (X[r] - lo) * (1 / np.where(span > 0, span, 1)), 0.0)
        X = out
    m = doc["map"]
    if m["kind"] == "identity":
        phi = X
    elif m["kind"] == "rff":
        phi = m["scale"] * np.cos(X @ np.asarray(m["omega"]) + np.asarray(m["offset"]))
    else:
        rows = np.asarray(m[{"nystroem": "landmarks", "exact": "support", "basis": "basis"}[m["kind"]]])
        phi = kernel(m["kernel"], X, rows, m["gamma"], m.get("degree", 3), m.get("coef0", 1.0))
        if m["kind"] == "nystroem":  # version 2: scored without phi, K(x, landmarks) . landmark_weights
            return phi @ np.asarray(m["landmark_weights"])
    if m.get("round_to_float32"):
        phi = phi.astype(np.float32).astype(np.float64)
    return phi @ np.asarray(doc["weights"])


@pytest.mark.parametrize("key", list(KINDS))
def test_json_scored_from_its_documentation_equals_predict(models, data, key):
    X, _, q = data
    model = models[key]
    doc = json.loads(render(model, "json"))
    assert doc["format"] == "streamrank-model-json" and doc["version"] == 2
    assert doc["n_features"] == X.shape[1] and doc["feature_names"] == [f"f{j}" for j in range(1, 6)]
    assert doc["source_sha256"] == model.content_digest()
    qp = np.r_[0, np.flatnonzero(np.diff(q)) + 1, len(q)]
    s = model.decision_function(X, qp)
    got = json_scores(doc, X, q)
    # float64 throughout; phi rounded to float32 may land one float32 ulp apart (2^-24 relative)
    assert np.abs(got - s).max() <= 1e-6 * np.abs(s).max(), key


def test_json_numbers_read_back_to_the_same_bits(models):
    model = models["nystroem-rbf"]
    doc = json.loads(render(model, "json"))
    assert np.array_equal(np.asarray(doc["weights"]), model.w)
    assert np.array_equal(np.asarray(doc["map"]["projection"]), model.fmap.projection_)


# -- names and digest ---------------------------------------------------------------------------------
def test_feature_names_from_a_file_and_their_errors(models, tmp_path):
    model = models["primal-none"]
    f = tmp_path / "names.txt"
    f.write_text("bm25\ntitle\nurl\npagerank\nlength\n\n")
    assert feature_names(model, f) == ["bm25", "title", "url", "pagerank", "length"]
    f.write_text("a\nb\n")
    with pytest.raises(InputError, match="names.txt: 2 feature names for a model that reads 5 features"):
        feature_names(model, f)
    with pytest.raises(InputError, match="name 'a' is given to features 1 and 3"):
        feature_names(model, ["a", "b", "a", "c", "d"])
    with pytest.raises(InputError, match="name 2 is ' b'"):
        feature_names(model, ["a", " b", "c", "d", "e"])
    f.write_text("a\x1eb\nc\r\nd\ne\nf\n")  # lines end at \\n only (found by tests/properties/test_prop_export.py)
    with pytest.raises(InputError, match="name 1 is 'a\\\\x1eb', which holds a control character"):
        feature_names(model, f)
    with pytest.raises(InputError, match="cannot read the feature names"):
        feature_names(model, tmp_path / "missing.txt")


def test_the_digest_is_the_model_files(models, tmp_path):
    model = models["exact-rbf"]
    path = model.save(tmp_path / "m.h5")
    loaded = load_model(path)
    assert model_digest(loaded) == loaded.content_sha256 == model.content_digest()


def test_an_unknown_format_names_the_choices(models):
    with pytest.raises(ParameterError, match="format must be one of onnx, solr, elasticsearch, svmrank, liblinear, json"):
        render(models["primal-none"], "pmml")


def test_export_writes_atomically_and_never_over_its_input(models, tmp_path):
    from streamrank.io.atomic import forget_input, register_input
    model = models["primal-zscore"]
    out = export_model(model, "json", tmp_path / "m.json")
    assert json.loads(out.read_text())["method"] == "primal"
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]  # no temporary left
    src = model.save(tmp_path / "m.h5")
    register_input(src, "MODEL")
    try:
        with pytest.raises(InputError):
            export_model(model, "json", src)
    finally:
        forget_input(src)
    assert load_model(src).content_sha256  # the model file is intact


def test_the_estimator_exports(data, tmp_path):
    X, y, q = data
    est = streamrank.RankSVM(normalize="zscore").fit(X, y, q)
    text = est.export(format="json")  # no path: the content
    assert json.loads(text)["method"] == "primal"
    p = est.export(tmp_path / "m.json", format="json")
    assert json.loads(p.read_text())["normalize"]["kind"] == "zscore"


# -- the command -----------------------------------------------------------------------------------------
def run(*args):
    return subprocess.run([sys.executable, "-m", "streamrank", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def model_file(models, tmp_path_factory):
    return models["primal-zscore"].save(tmp_path_factory.mktemp("export") / "model.h5")


def test_the_command_writes_json_and_names_the_model_after_the_file(model_file, tmp_path):
    p = run("export", model_file, "--format", "json", "-o", tmp_path / "ranker.json", "--json")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["format"] == "json" and summary["bytes"] == (tmp_path / "ranker.json").stat().st_size
    doc = json.loads((tmp_path / "ranker.json").read_text())
    assert doc["name"] == "ranker" and doc["source_sha256"] == load_model(model_file).content_sha256


def test_the_command_to_standard_output(model_file):
    p = run("export", model_file, "--format", "json", "-o", "-")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["method"] == "primal"


@pytest.mark.parametrize("args, words", [
    (["--format", "json", "-o", "{model}"], "is the input MODEL: writing it would destroy the input"),
    (["--format", "pmml", "-o", "{tmp}/x"], "invalid choice: 'pmml'"),
    (["--format", "json", "-o", "{tmp}/x.json", "--feature-names", "{tmp}/names.txt"], "2 feature names"),
])
def test_the_command_refuses_in_one_line(model_file, tmp_path, args, words):
    (tmp_path / "names.txt").write_text("a\nb\n")
    args = [a.format(model=model_file, tmp=tmp_path) for a in args]
    p = run("export", model_file, *args)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], p.stderr
    assert not (tmp_path / "x.json").exists()
