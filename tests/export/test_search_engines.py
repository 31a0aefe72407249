"""The ``solr`` and ``elasticsearch`` export formats (issue 32), proved on the consumer's side
without a server: each file checked against its plugin's documented schema, and scored by a scorer
written here from the plugins' documentation alone, which must rank every query's documents as
streamrank does (same order, same ties) and give streamrank's scores up to one constant.

The documentation the scorers follow:

- Solr: https://solr.apache.org/guide/solr/latest/query-guide/learning-to-rank.html ("Uploading a
  Model") and the LinearModel javadoc (score = sum over ``features`` of weight * feature value;
  a feature without ``norm`` is not normalised, IdentityNormalizer);
- Elasticsearch / OpenSearch LTR: https://elasticsearch-learning-to-rank.readthedocs.io/en/latest/
  training-models.html ("Uploading a model", "Creating a model with Feature Normalization") and
  https://opensearch.org/docs/latest/search-plugins/ltr/training-models/: the body of
  ``POST _ltr/_featureset/<set>/_createmodel`` is {"model": {"name", "model": {"type":
  "model/linear", "definition": "<JSON object feature -> weight>", "feature_normalizers": {feature:
  {"standard": {"mean", "standard_deviation"}} or {"min_max": {"minimum", "maximum"}}}}}};
  ``standard`` maps the mean to 0 and one standard deviation above it to 1, (x - mean) /
  standard_deviation; ``min_max`` maps minimum to 0 and maximum to 1.
"""

import json

import numpy as np
import pytest

import streamrank
from streamrank.errors import InputError, ParameterError
from streamrank.export import render
from streamrank.features.normalize import Normalizer
from streamrank.state.model import LinearModel

SCALES = [1e-2, 1.0, 1e4, 3.0, 1e2, 1e3]


def ranking_data(seed=0, n_queries=12, per=10, scales=SCALES):
    """Queries of graded rows with raw features of very different scales (and offsets), and exact
    ties: in every query row 1 repeats row 0, and row 3 differs from row 2 only in feature 6,
    which the subset model does not read."""
    rng = np.random.default_rng(seed)
    d = len(scales)
    Z = rng.standard_normal((n_queries * per, d))
    y = np.clip(np.round(Z[:, 0] - 0.5 * Z[:, 1] + 0.4 * Z[:, 3] + 0.3 * rng.standard_normal(len(Z))) + 1, 0, 3)
    X = (Z + 2.0) * np.asarray(scales)
    for q in range(n_queries):
        a = q * per
        X[a + 1], y[a + 1] = X[a], y[a]
        X[a + 3] = X[a + 2]
        X[a + 3, 5] += 7.0 * scales[5]
    return X.astype(np.float32), y, np.repeat(np.arange(n_queries), per)


# the kinds a weight per feature can hold (linear in the raw features)
KINDS = {
    "primal-none": lambda: streamrank.RankSVM(),
    "primal-zscore": lambda: streamrank.RankSVM(normalize="zscore"),
    "primal-subset": lambda: streamrank.RankSVM(normalize="zscore", features=[4, 1, 2, 3]),
    "primal-subset-none": lambda: streamrank.RankSVM(features=[5, 2]),
    "nystroem-linear": lambda: streamrank.RankSVM(method="nystroem", kernel="linear", n_components=5,
                                                  normalize="zscore"),
    "exact-linear": lambda: streamrank.RankSVM(method="exact", kernel="linear", normalize="zscore"),
    "clsr-linear": lambda: streamrank.CLSRRank(kernel="linear", n_components=20, normalize="zscore"),
    "clsr-linear-none": lambda: streamrank.CLSRRank(kernel="linear", n_components=20, lam=1e3),  # raw 1e4s
}
REFUSED = {
    "primal-qminmax": lambda: streamrank.RankSVM(normalize="query_minmax"),
    "nystroem-rbf": lambda: streamrank.RankSVM(method="nystroem", n_components=8, normalize="zscore"),
    "rff-rbf": lambda: streamrank.RankSVM(method="rff", n_components=8, normalize="zscore"),
    "exact-rbf": lambda: streamrank.RankSVM(method="exact", normalize="zscore"),
}
FORMATS = ("solr", "elasticsearch")


@pytest.fixture(scope="module")
def data():
    return ranking_data()


@pytest.fixture(scope="module")
def held_out():
    return ranking_data(seed=1, n_queries=15)


@pytest.fixture(scope="module")
def models(data):
    X, y, q = data
    return {k: make().fit(X, y, q)._model() for k, make in {**KINDS, **REFUSED}.items()}


# -- the scorers, written from the plugins' documentation (module docstring) ----------------------
def columns(X, names):
    """The feature values a search engine hands the model: feature ``names[j]`` is column j."""
    return {n: np.asarray(X[:, j], np.float64) for j, n in enumerate(names)}


def solr_scores(text, values):
    """Solr's LinearModel: sum over the listed features of weight * value (no ``norm``: identity)."""
    doc = json.loads(text)
    assert doc["class"] == "org.apache.solr.ltr.model.LinearModel"
    weights = doc["params"]["weights"]
    s = 0.0
    for f in doc["features"]:
        assert "norm" not in f
        s = s + weights[f["name"]] * values[f["name"]]
    return s


def es_scores(text, values):
    """The ES / OpenSearch LTR plugin's model/linear: each feature normalised as its
    ``feature_normalizers`` entry says, then sum of weight * normalised value."""
    body = json.loads(text)
    model = body["model"]["model"]
    assert model["type"] == "model/linear"
    weights = json.loads(model["definition"])
    norms = model.get("feature_normalizers", {})
    s = 0.0
    for name, w in weights.items():
        x = values[name]
        if name in norms:
            (kind, p), = norms[name].items()
            if kind == "standard":
                x = (x - p["mean"]) / p["standard_deviation"]
            else:
                assert kind == "min_max"
                x = (x - p["minimum"]) / (p["maximum"] - p["minimum"])
        s = s + w * x
    return s


SCORERS = {"solr": solr_scores, "elasticsearch": es_scores}


def exported_scores(model, fmt, X, names=None):
    names = names or [f"f{j}" for j in range(1, X.shape[1] + 1)]
    return SCORERS[fmt](render(model, fmt, feature_names=names), columns(X, names))


# -- what the scores must agree with --------------------------------------------------------------
def exact_scores(model, X):
    """The model's own steps in float64 (streamrank's predict rounds a map's output to float32:
    nystroem and the exact kernel; its linear and CLSRRank scores are float64 already)."""
    if model.input_features is not None:
        X = X[:, model.input_features]
    Xn = model.normalizer.transform(X)
    if model.method == "nystroem":
        return model.fmap.transform(Xn, dtype=np.float64) @ model.w
    if model.method == "exact":
        return model.fmap.chunked_scores(Xn, model.w, 0, np.float64, 1 << 20)
    if model.method == "basis":
        return model.fmap.scores(Xn, model.w)
    return Xn @ model.w


def dense_ranks(s):
    """0 for a query's best score, 1 for the next distinct one...: equal scores share a rank."""
    return np.unique(-s, return_inverse=True)[1]


def assert_same_ranking(got, want, qid):
    """Every query's documents in the same order, with the same ties."""
    for q in np.unique(qid):
        r = qid == q
        assert np.array_equal(dense_ranks(got[r]), dense_ranks(want[r])), f"query {q}: {got[r]} vs {want[r]}"


def assert_equal_up_to_a_constant(got, want, rel=1e-9):
    diff = got - want
    spread = np.abs(diff - np.median(diff)).max()
    assert spread <= rel * np.abs(want).max(), (spread, np.abs(want).max())


# -- (1) the documented schemas --------------------------------------------------------------------
@pytest.mark.parametrize("key", ["primal-zscore", "primal-subset", "nystroem-linear", "clsr-linear-none"])
def test_solr_file_is_a_linear_model_listing_every_feature(models, key):
    model = models[key]
    names = ["title match", "bm25", "pagerank", "recency", "clicks", "é-length"]
    doc = json.loads(render(model, "solr", feature_names=names, name="myModel"))
    assert set(doc) == {"class", "name", "features", "params"}  # no "store": the _DEFAULT_ store
    assert doc["class"] == "org.apache.solr.ltr.model.LinearModel"
    assert isinstance(doc["name"], str)
    assert doc["features"] == [{"name": n} for n in names]  # all d, in order, no "norm"
    assert set(doc["params"]) == {"weights"}
    weights = doc["params"]["weights"]
    assert list(weights) == names and all(type(w) is float for w in weights.values())
    if model.input_features is not None:  # the columns it does not read are listed with weight 0
        unread = set(range(6)) - set(model.input_features.tolist())
        assert unread and all(weights[names[j]] == 0.0 for j in unread)


def test_solr_name_says_when_zscore_was_folded_and_the_bias_dropped(models):
    named = lambda key: json.loads(render(models[key], "solr", name="myModel"))["name"]  # noqa: E731
    assert named("primal-none") == "myModel"  # nothing folded, nothing dropped
    assert named("clsr-linear-none") == "myModel"
    assert named("primal-zscore") == "myModel_zscore_folded_bias_dropped"
    assert named("nystroem-linear") == "myModel_zscore_folded_bias_dropped"
    assert json.loads(render(models["primal-none"], "solr"))["name"] == "streamrank"


@pytest.mark.parametrize("key", ["primal-none", "primal-zscore", "primal-subset", "exact-linear"])
def test_elasticsearch_file_is_a_createmodel_body_with_standard_normalisers(models, key):
    model = models[key]
    names = [f"feat_{j}" for j in range(6)]
    body = json.loads(render(model, "elasticsearch", feature_names=names, name="my_linear_model"))
    assert set(body) == {"model"} and set(body["model"]) == {"name", "model"}
    assert body["model"]["name"] == "my_linear_model"  # the standard normaliser: nothing dropped
    inner = body["model"]["model"]
    assert inner["type"] == "model/linear"
    assert isinstance(inner["definition"], str)  # a string holding a JSON object, as documented
    weights = json.loads(inner["definition"])
    assert list(weights) == names and all(type(w) is float for w in weights.values())
    if model.normalizer.kind == "none":
        assert set(inner) == {"type", "definition"}
        return
    assert set(inner) == {"type", "definition", "feature_normalizers"}
    norms = inner["feature_normalizers"]
    read = range(6) if model.input_features is None else model.input_features.tolist()
    assert set(norms) == {names[j] for j in read}  # the columns the model reads, and only them
    for i, j in enumerate(read):
        assert norms[names[j]] == {"standard": {"mean": model.normalizer.mean_[i],
                                                "standard_deviation": model.normalizer.scale_[i]}}
        assert norms[names[j]]["standard"]["standard_deviation"] > 0


def test_elasticsearch_weights_are_the_models_own_on_normalised_features(models):
    """The standard normaliser holds zscore, so the weights are w itself, to the bit."""
    model = models["primal-zscore"]
    weights = json.loads(json.loads(render(model, "elasticsearch"))["model"]["model"]["definition"])
    assert np.array_equal(np.array(list(weights.values())), model.w)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("key", list(KINDS))
def test_numbers_read_back_to_the_same_bits(models, fmt, key):
    """The weights are float64 written as repr: a scorer that reads the file gets the bits the
    export computed (Solr: the folded weights of common.linear_weights)."""
    from streamrank.export.common import linear_weights
    model = models[key]
    doc = json.loads(render(model, fmt))
    if fmt == "solr":
        got = np.array(list(doc["params"]["weights"].values()))
        assert np.array_equal(got, linear_weights(model, "solr")[0])
    else:
        got = np.array(list(json.loads(doc["model"]["model"]["definition"]).values()))
        assert np.all(np.isfinite(got)) and got.shape == (6,)


# -- (2) the documented scorers rank as streamrank does --------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("key", list(KINDS))
def test_documented_scorer_ranks_every_query_as_streamrank(models, held_out, fmt, key):
    X, _, q = held_out
    model = models[key]
    got = exported_scores(model, fmt, X)
    # ranks: exactly predict's, ties included (rows 0 and 1 of each query are one row twice;
    # rows 2 and 3 differ only in a feature the subset models do not read)
    assert_same_ranking(got, model.decision_function(X), q)
    # scores: the model's own in float64, up to the constant Solr drops (ES with the standard
    # normaliser drops none)
    want = exact_scores(model, X)
    assert_equal_up_to_a_constant(got, want, 1e-9)
    if fmt == "elasticsearch":
        assert np.abs(got - want).max() <= 1e-9 * np.abs(want).max()
    assert_equal_up_to_a_constant(got, model.decision_function(X), 1e-6)  # predict's float32 phi


def test_the_ties_the_data_holds_are_ties_in_predict(models, held_out):
    """The ranking test's ties are real: in every query rows 0 and 1 tie, and rows 2 and 3 tie for
    the subset models."""
    X, _, q = held_out
    for key in KINDS:
        s = models[key].decision_function(X)
        starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
        assert np.all(s[starts] == s[starts + 1])
        if key.startswith("primal-subset"):
            assert np.all(s[starts + 2] == s[starts + 3])


def test_dropping_the_constant_is_what_differs(models, held_out):
    """Solr's scores of a zscore model are the model's minus mu . (w / sigma), one constant."""
    from streamrank.export.common import linear_weights
    X, _, _ = held_out
    model = models["primal-zscore"]
    _, c = linear_weights(model, "solr")
    assert c != 0
    got = exported_scores(model, "solr", X)
    assert np.abs(got + c - model.decision_function(X)).max() <= 1e-9 * np.abs(model.decision_function(X)).max()


def test_the_oracle_can_fail(models, held_out):
    """A file with one weight changed, or two names swapped, no longer ranks as streamrank."""
    X, _, q = held_out
    model = models["primal-zscore"]
    doc = json.loads(render(model, "solr"))
    doc["params"]["weights"]["f1"] *= -1
    with pytest.raises(AssertionError):
        assert_same_ranking(solr_scores(json.dumps(doc), columns(X, [f"f{j}" for j in range(1, 7)])),
                            model.decision_function(X), q)
    body = json.loads(render(model, "elasticsearch"))
    norms = body["model"]["model"]["feature_normalizers"]
    norms["f1"], norms["f2"] = norms["f2"], norms["f1"]
    with pytest.raises(AssertionError):
        assert_same_ranking(es_scores(json.dumps(body), columns(X, [f"f{j}" for j in range(1, 7)])),
                            model.decision_function(X), q)


def mq2008_subset(root, part, n_queries):
    X, y, qid = streamrank.load_ranking(root / "Fold1" / f"{part}.txt.gz")
    first = np.unique(qid, return_index=True)[1]
    keep = np.isin(qid, qid[np.sort(first)[:n_queries]])
    return X[keep], y[keep], qid[keep]


@pytest.mark.parametrize("key", ["primal-none", "primal-zscore", "primal-subset-none", "nystroem-linear",
                                 "clsr-linear"])
def test_mq2008_ranked_as_streamrank_ranks_it(mq2008, key):
    """MQ2008 Fold1: trained on 60 training queries, the test file's first 80 queries (its features
    are in [0, 1] with many equal rows, so many exact ties)."""
    X, y, q = mq2008_subset(mq2008, "train", 60)
    make = {**KINDS, "primal-subset-none": lambda: streamrank.RankSVM(features=[1, 5, 12, 40])}[key]
    model = make().fit(X, y, q)._model()
    Xt, _, qt = mq2008_subset(mq2008, "test", 80)
    names = [f"mq{j}" for j in range(1, X.shape[1] + 1)]
    pred = model.decision_function(Xt)
    assert len(np.unique(pred)) < len(pred)  # ties to reproduce
    for fmt in FORMATS:
        got = exported_scores(model, fmt, Xt, names)
        assert_same_ranking(got, pred, qt)
        assert_equal_up_to_a_constant(got, exact_scores(model, Xt), 1e-9)


# -- (3) refusals ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_query_minmax_refused_with_what_to_use(models, fmt):
    with pytest.raises(ParameterError, match=rf"format={fmt} cannot express normalize=query_minmax: it scales "
                                             r"each feature by its range within the query.*use format=onnx .*"
                                             r"or retrain with normalize=zscore"):
        render(models["primal-qminmax"], fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("key, what", [("nystroem-rbf", r"an rbf kernel \(nystroem\)"),
                                       ("rff-rbf", "random Fourier features"),
                                       ("exact-rbf", r"an rbf kernel \(exact\)")])
def test_nonlinear_models_refused_with_what_to_use(models, fmt, key, what):
    with pytest.raises(ParameterError, match=rf"format={fmt} holds one weight per feature, and this model is not "
                                             rf"linear in its features \({what}\); use format=onnx"):
        render(models[key], fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_feature_names_must_name_each_feature_once(models, fmt, tmp_path):
    model = models["primal-zscore"]
    with pytest.raises(InputError, match=r"5 feature names for a model that reads 6 features"):
        render(model, fmt, feature_names=["a", "b", "c", "d", "e"])
    with pytest.raises(InputError, match=r"name 'b' is given to features 2 and 5; names must be unique"):
        render(model, fmt, feature_names=["a", "b", "c", "d", "b", "f"])
    path = tmp_path / "names.txt"
    path.write_text("a\nb\nc\nd\ne\nf\ng\n")
    with pytest.raises(InputError, match=rf"{path}: 7 feature names for a model that reads 6 features"):
        render(model, fmt, feature_names=path)
    path.write_text("a\nb\nc\nd\ne\nf\n")
    assert "\"f\"" in render(model, fmt, feature_names=path).replace('\\"', '"')


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_name_solr_cannot_read_unquoted_is_refused_with_a_fix(models, fmt):
    with pytest.raises(ParameterError, match=rf"format={fmt}: name must be letters, digits.*got 'my model}}'\. "
                                             r"Use name=my_model"):
        render(models["primal-none"], fmt, name="my model}")


@pytest.mark.parametrize("fmt", FORMATS)
def test_command_line_names_the_model_after_its_output(models, fmt, tmp_path):
    from streamrank.cli.main import main
    models["primal-zscore"].save(tmp_path / "m.h5")
    out = tmp_path / "movies.json"
    assert main(["export", str(tmp_path / "m.h5"), "--format", fmt, "-o", str(out), "--quiet"]) == 0
    doc = json.loads(out.read_text())
    name = doc["name"] if fmt == "solr" else doc["model"]["name"]
    assert name == ("movies_zscore_folded_bias_dropped" if fmt == "solr" else "movies")
    assert main(["export", str(tmp_path / "m.h5"), "--format", fmt, "-o", str(tmp_path / "my movies.json")]) == 2


@pytest.mark.parametrize("fmt", FORMATS)
def test_weights_beyond_float32_refused(fmt):
    """Both plugins parse numbers into Java floats: 1e39 would be infinite there."""
    model = LinearModel(np.array([1.0, 1e39]), Normalizer("none"), n_features=2)
    with pytest.raises(ParameterError, match=rf"format={fmt}: the weight of feature 'f2' is 1e\+39, beyond the "
                                             r"32-bit floats the plugin reads"):
        render(model, fmt)


def zscore_model(w, mean, scale, input_features=None, width=None):
    norm = Normalizer("zscore")
    norm.mean_, norm.scale_ = np.asarray(mean, float), np.asarray(scale, float)
    return LinearModel(np.asarray(w, float), norm, n_features=len(w), input_features=input_features,
                       input_width=width)


def test_elasticsearch_a_column_read_twice(held_out):
    """A model file whose subset names a column twice (training refuses that; a file could hold it):
    one normaliser per column when both copies have the same statistics (their weights add up),
    the folded form when they differ."""
    X = np.random.default_rng(5).standard_normal((30, 3)) * [1.0, 10.0, 100.0] + 3.0
    same = zscore_model([0.5, -2.0, 1.5], [3.0, 3.0, 2.0], [1.0, 1.0, 10.0], [0, 0, 2], 3)
    other = zscore_model([0.5, -2.0, 1.5], [3.0, 2.5, 2.0], [1.0, 2.0, 10.0], [0, 0, 2], 3)
    for model in (same, other):
        names = ["a", "b", "c"]
        body = json.loads(render(model, "elasticsearch", feature_names=names, name="m"))
        got = es_scores(json.dumps(body), columns(X, names))
        assert_equal_up_to_a_constant(got, model.decision_function(X), 1e-12)
        norms = body["model"]["model"].get("feature_normalizers")
        if model is same:
            assert set(norms) == {"a", "c"} and body["model"]["name"] == "m"
        else:
            assert norms is None and body["model"]["name"] == "m_zscore_folded_bias_dropped"


def test_elasticsearch_standard_deviation_zero_as_float32_refused():
    model = zscore_model([1.0, 1.0], [0.0, 0.0], [1.0, 1e-50])
    with pytest.raises(ParameterError, match=r"format=elasticsearch: the standard deviation of feature 'f2' is "
                                             r"1e-50, 0 as the 32-bit float the plugin reads; use format=onnx"):
        render(model, "elasticsearch")


# -- the plugins' 32-bit arithmetic ----------------------------------------------------------------
def float32_scores(text, fmt, X, names):
    """Scores as both plugins compute them (their source: weights, means and standard deviations
    parsed into Java floats, the sum accumulated in a float): the documented formulas in float32."""
    f32 = np.float32
    if fmt == "solr":
        doc = json.loads(text)
        weights, norms = doc["params"]["weights"], {}
    else:
        model = json.loads(text)["model"]["model"]
        weights, norms = json.loads(model["definition"]), model.get("feature_normalizers", {})
    s = np.zeros(len(X), f32)
    for j, n in enumerate(names):
        x = X[:, j].astype(f32)
        if n in norms:
            p = norms[n]["standard"]
            x = (x - f32(p["mean"])) / f32(p["standard_deviation"])
        s = s + x * f32(weights[n])
    return s


def offset_data(n_queries, seed, offset):
    """Features whose mean is ``offset`` standard deviations from 0 (a year, a price, a timestamp)."""
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n_queries * 20, 4))
    y = np.clip(np.round(Z[:, 0] - 0.5 * Z[:, 1] + 0.3 * rng.standard_normal(len(Z))) + 1, 0, 3)
    X = Z.copy()
    X[:, 0] += offset
    X[:, 1] = 10 * X[:, 1] + 10 * offset
    return X.astype(np.float32), y, np.repeat(np.arange(n_queries), 20)


@pytest.mark.parametrize("offset, least", [(1e3, 0), (1e4, 1), (1e5, 10)])
def test_float32_standard_normaliser_keeps_the_ranking_where_folding_loses_it(offset, least):
    """Why elasticsearch keeps zscore as the plugin's standard normaliser: with feature means far
    from 0 in standard deviations, a folded model evaluated in float32 (Solr's) reorders queries
    (the constant it dropped cancels digits float32 does not have), while (x - mean) / sd in float32
    keeps every query's order. docs/formats.md quotes the counts (``-s`` prints them): 0, 11 and 64
    of 300 queries when measured."""
    X, y, q = offset_data(30, 1, offset)
    Xt, _, qt = offset_data(300, 2, offset)
    model = streamrank.RankSVM(normalize="zscore").fit(X, y, q)._model()
    pred = model.decision_function(Xt)
    names = ["f1", "f2", "f3", "f4"]
    es = float32_scores(render(model, "elasticsearch"), "elasticsearch", Xt, names)
    assert_same_ranking(es, pred, qt)
    solr = float32_scores(render(model, "solr"), "solr", Xt, names)
    changed = sum(not np.array_equal(dense_ranks(solr[qt == k]), dense_ranks(pred[qt == k])) for k in range(300))
    print(f"mean / sd {offset:g}: solr's folded float32 scores reorder {changed} of 300 queries, es's 0")
    assert changed >= least


def test_layout_is_strict_json_that_reads_back():
    from streamrank.export.common import layout
    obj = {"a": [1.5, -0.0, 1e-300, {"b": "é\"x"}], "c": {f"k{j}": j / 7 for j in range(30)}, "d": [], "e": {}}
    text = layout(obj)
    assert json.loads(text) == obj and max(map(len, text.splitlines())) <= 100
    with pytest.raises(ValueError):
        layout({"w": [float("nan")]})
