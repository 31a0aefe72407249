"""format=onnx (streamrank/export/onnx_graph.py): onnxruntime's scores of the exported graph are the
model's own (``LinearModel.decision_function``, what ``streamrank predict`` prints).

Tolerance rule (issue 32: 1e-5 relative), on every batch: |ort - ref| <= 1e-5 max|ref| for every
row, and |ort - ref| <= 1e-5 |ref| for every row whose |ref| >= 1e-3 max|ref| (rows with a score near
0 are held to the first bound only: their relative error is that of a difference). The graph's
output is float32, so 6e-8 of each score is the floor (and float32's smallest normal number, 1.2e-38,
for scores below it: an rbf model's scores of rows far from every landmark); the graph computes in float64 as streamrank
does and rounds the map's features to float32 where streamrank does, so the rest is float64
rounding.

The data: raw features whose columns span 1e-2..1e4 in one matrix (rbf distances in float32 would
miss the tolerance there), queries of different sizes, batches of many rows, one row and none, and
a row chunk of 37 rows (``MAX_CHUNK_ROWS``) so that every batch of the map runs through several
Scan steps with a padded last one.
"""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import streamrank  # noqa: E402
from streamrank.errors import ParameterError  # noqa: E402
from streamrank.export import common, render  # noqa: E402
from streamrank.export import onnx_graph  # noqa: E402
from streamrank.features.basis_map import KernelBasisMap  # noqa: E402
from streamrank.features.exact_map import ExactKernelMap  # noqa: E402
from streamrank.features.kernels import default_gamma  # noqa: E402
from streamrank.features.maps import Nystroem, RandomFourier  # noqa: E402
from streamrank.features.normalize import Normalizer  # noqa: E402
from streamrank.state.model import LinearModel  # noqa: E402

REL = 1e-5
WIDTH = 7
SIZES = (40, 70, 1, 9, 80)  # rows per query of the test batch (a one-row query among them)
KERNELS = {"primal": ("linear",), "nystroem": ("rbf", "laplacian", "poly", "sigmoid", "linear"),
           "rff": ("rbf", "laplacian"), "exact": ("rbf", "laplacian", "poly", "linear"),
           "clsr": ("rbf", "laplacian", "poly", "sigmoid", "linear")}
NORMS = ("none", "zscore", "query_minmax")
CASES = [(m, k, n) for m, ks in KERNELS.items() for k in ks for n in NORMS]


@pytest.fixture(autouse=True)
def _small_chunks(monkeypatch):
    monkeypatch.setattr(onnx_graph, "MAX_CHUNK_ROWS", 37)


def raw_rows(n, d=WIDTH, seed=0):
    """Rows whose column j lies in [0, 10^(-2 + 6 j / (d - 1))): scales 1e-2..1e4 in one matrix."""
    rng = np.random.default_rng(seed)
    return (rng.random((n, d)) * np.logspace(-2, 4, d)).astype(np.float32)


def query_ptr(sizes=SIZES):
    return np.r_[0, np.cumsum(sizes)].astype(np.int64)


def build(method, kernel, normalize, *, cols=None, width=WIDTH, m=25, seed=0):
    """A model of each kind, fitted on raw rows as training would (maps on normalised rows; random
    weights: the graph must hold any)."""
    rng = np.random.default_rng(seed + 1)
    X = raw_rows(sum(SIZES), width, seed)
    if cols is not None:
        X = X[:, cols]
    ptr = query_ptr()
    d = X.shape[1]
    norm = Normalizer(normalize)
    if normalize == "zscore":
        norm.fit([X], d)
    Xn = norm.transform(X, ptr)
    gamma = default_gamma(d, Xn.var())
    coef0 = 0.5 if kernel == "sigmoid" else 1.0
    fmap = {"primal": lambda: None,
            "nystroem": lambda: Nystroem(kernel, gamma, 3, coef0, n_components=m, seed=seed).fit(Xn),
            "rff": lambda: RandomFourier(kernel, gamma, m, seed=seed).fit(d),
            "exact": lambda: ExactKernelMap(Xn[rng.choice(len(Xn), m, replace=False)], kernel, gamma, 2, coef0),
            "clsr": lambda: KernelBasisMap(Xn[rng.choice(len(Xn), m, replace=False)], kernel, gamma, 3, coef0)}[method]()
    k = d if fmap is None else fmap.n_components_
    return LinearModel(rng.standard_normal(k), norm, n_features=d, fmap=fmap, config={"method": method},
                       input_features=cols, input_width=None if cols is None else width)


def session(model, **kw):
    return ort.InferenceSession(render(model, "onnx", **kw), providers=["CPUExecutionProvider"])


def ort_scores(sess, X, qid=None):
    feeds = {"X": np.asarray(X, np.float32)}
    if qid is not None:
        feeds["query_id"] = np.asarray(qid, np.int64)
    (s,) = sess.run(None, feeds)
    assert s.dtype == np.float32 and s.shape == (len(X),)
    return s.astype(np.float64)


def assert_scores(got, ref):
    """The module docstring's tolerance rule."""
    assert got.shape == ref.shape
    if ref.size == 0:
        return
    top = np.abs(ref).max()
    err = np.abs(got - ref)
    # the output is float32: a score below its smallest normal number has no float32 digits
    floor = float(np.finfo(np.float32).tiny)
    assert err.max() <= max(REL * top, floor), f"max error {err.max():.3g} against max |score| {top:.3g}"
    big = (np.abs(ref) >= max(1e-3 * top, floor)) & (ref != 0)  # (a one-row query_minmax query scores 0)
    rel = err[big] / np.abs(ref[big])
    assert rel.size == 0 or rel.max() <= REL, f"row error {rel.max():.3g} relative to its score"


def check_batches(model, sess, X, ptr):
    """All rows (several queries), one row, and no row; query_minmax rows shuffled with their ids."""
    qm = model.normalizer.kind == "query_minmax"
    ref = model.decision_function(X, ptr)
    if qm:
        # ids far apart, negative among them, rows in a random order: the graph groups them itself
        ids = np.array([7, -3, 10 ** 12, 0, 5])[np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))]
        order = np.random.default_rng(3).permutation(len(X))
        got = np.empty(len(X))
        got[order] = ort_scores(sess, X[order], ids[order])
    else:
        got = ort_scores(sess, X)
    assert_scores(got, ref)
    one = X[12:13]
    assert_scores(ort_scores(sess, one, [4] if qm else None), model.decision_function(one, np.array([0, 1])))
    assert ort_scores(sess, X[:0], np.zeros(0) if qm else None).shape == (0,)


@pytest.mark.parametrize("method,kernel,normalize", CASES, ids=["-".join(c) for c in CASES])
def test_every_kind_kernel_and_normalisation_scores_as_predict(method, kernel, normalize):
    model = build(method, kernel, normalize)
    X, ptr = raw_rows(sum(SIZES), seed=11), query_ptr()
    check_batches(model, session(model), X, ptr)


SUBSETS = [("primal", "linear", "zscore"), ("nystroem", "rbf", "query_minmax"), ("rff", "laplacian", "none"),
           ("exact", "laplacian", "zscore"), ("clsr", "poly", "query_minmax"), ("clsr", "sigmoid", "none")]


@pytest.mark.parametrize("method,kernel,normalize", SUBSETS, ids=["-".join(c) for c in SUBSETS])
def test_a_model_on_selected_features_gathers_them_from_full_rows(method, kernel, normalize):
    cols = np.array([5, 0, 3, 8])  # out of order, of 10-feature rows
    model = build(method, kernel, normalize, cols=cols, width=10)
    sess = session(model)
    assert sess.get_inputs()[0].shape[1] == 10
    check_batches(model, sess, raw_rows(sum(SIZES), 10, seed=5), query_ptr())


def test_inputs_outputs_and_metadata():
    model = build("nystroem", "rbf", "zscore", cols=np.array([2, 0, 1]), width=4)
    names = ["bm25", "tf", "idf", "pagerank"]
    data = render(model, "onnx", feature_names=names, name="my-ranker")
    proto = onnx.load_from_string(data)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.producer_name == "streamrank" and proto.producer_version == streamrank.__version__
    assert proto.graph.name == "my-ranker"
    assert any(o.domain in ("", "ai.onnx") and o.version == onnx_graph.OPSET for o in proto.opset_import)
    assert {n.domain for n in proto.graph.node} <= {""}
    meta = {p.key: p.value for p in proto.metadata_props}
    assert meta["method"] == "nystroem" and meta["normalize"] == "zscore"
    assert json.loads(meta["settings"]) == json.loads(json.dumps(common.settings(model)))
    assert meta["content_sha256"] == common.model_digest(model) and len(meta["content_sha256"]) == 64
    assert meta["input_width"] == "4" and json.loads(meta["feature_names"]) == names
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    (x,) = sess.get_inputs()
    assert (x.name, x.type, x.shape[1]) == ("X", "tensor(float)", 4) and isinstance(x.shape[0], str)
    (out,) = sess.get_outputs()
    assert (out.name, out.type) == ("score", "tensor(float)")
    # default names f1..fd
    meta = {p.key: p.value for p in onnx.load_from_string(render(model, "onnx")).metadata_props}
    assert json.loads(meta["feature_names"]) == ["f1", "f2", "f3", "f4"]


def test_only_query_minmax_takes_the_query_ids():
    for normalize in NORMS:
        ins = session(build("primal", "linear", normalize)).get_inputs()
        want = [("X", "tensor(float)")] + ([("query_id", "tensor(int64)")] if normalize == "query_minmax" else [])
        assert [(i.name, i.type) for i in ins] == want


def test_query_minmax_queries_with_constant_features_and_one_row():
    """A feature constant within a query maps to 0 (not 0/0), a one-row query to all zeros."""
    model = build("nystroem", "rbf", "query_minmax")
    X = raw_rows(20, seed=2)
    X[:10, 3] = 42.0  # constant within query 0
    ptr = np.array([0, 10, 11, 20])
    ids = np.repeat([1, 2, 3], np.diff(ptr))
    assert_scores(ort_scores(session(model), X, ids), model.decision_function(X, ptr))


def test_laplacian_chunk_bounds_its_difference(monkeypatch):
    """laplacian's (rows, m, d) difference within LAPLACIAN_CHUNK_BYTES whatever the batch; a batch
    of many chunks (the last one partial) scores as predict."""
    monkeypatch.setattr(onnx_graph, "MAX_CHUNK_ROWS", 4096)
    monkeypatch.setattr(onnx_graph, "LAPLACIAN_CHUNK_BYTES", 8 * 40 * WIDTH * 10)  # 10 rows against 40 landmarks
    model = build("nystroem", "laplacian", "zscore", m=40)
    assert onnx_graph.chunk_rows(model) == 10
    X = raw_rows(123, seed=4)
    assert_scores(ort_scores(session(model), X), model.decision_function(X))


def test_a_callable_kernel_is_refused():
    model = build("clsr", "rbf", "none")
    model.fmap.kernel = lambda A, B: A @ B.T
    with pytest.raises(ParameterError, match="callable kernel"):
        render(model, "onnx")


TRAINED = [dict(method="primal", normalize="zscore"), dict(method="nystroem", n_components=20),
           dict(method="rff", kernel="laplacian", n_components=20, normalize="zscore"),
           dict(method="exact", kernel="poly", normalize="zscore"),
           dict(method="primal", features="5,1,3", normalize="query_minmax"),
           dict(method="nystroem", kernel="sigmoid", features="6,2", n_components=15, normalize="zscore")]


@pytest.mark.parametrize("params", TRAINED, ids=[",".join(f"{k}={v}" for k, v in p.items()) for p in TRAINED])
def test_trained_and_saved_models_score_as_predict(params, tmp_path):
    rng = np.random.default_rng(0)
    X = raw_rows(240, 6, seed=1)
    y = rng.integers(0, 3, len(X)).astype(np.float32)
    qid = np.repeat(np.arange(8), 30)
    est = streamrank.RankSVM(**params).fit(X, y, qid)
    est.save(tmp_path / "m.h5")
    model = streamrank.load(tmp_path / "m.h5")._model()
    Xt = raw_rows(90, 6, seed=9)
    ptr = np.array([0, 30, 60, 90])
    check_batches(model, session(model), Xt, ptr)
    meta = {p.key: p.value for p in onnx.load_from_string(render(model, "onnx")).metadata_props}
    assert meta["content_sha256"] == model.content_sha256  # the file's own digest
    assert np.array_equal(est.predict(Xt, qid=np.repeat([0, 1, 2], 30)), model.decision_function(Xt, ptr))


def test_trained_clsr_model_scores_as_predict():
    X = raw_rows(240, 6, seed=1)
    y = np.random.default_rng(0).integers(0, 3, len(X)).astype(np.float32)
    model = streamrank.CLSRRank(kernel="laplacian", n_components=30, normalize="zscore").fit(
        X, y, np.repeat(np.arange(8), 30))._model()
    assert common.kind(model) == "clsr"
    check_batches(model, session(model), raw_rows(90, 6, seed=9), np.array([0, 30, 60, 90]))


@pytest.mark.slow  # the small-data cases above hold the same equality in the fast tier
def test_mq2008_fold1_test_rows(mq2008):
    """Trained on 30 queries of MQ2008 Fold1 train, scored on all of Fold1 test."""
    X, y, qid = streamrank.load_ranking(mq2008 / "Fold1" / "train.txt.gz")
    keep = np.isin(qid, np.unique(qid)[:30])
    Xt, _, qt = streamrank.load_ranking(mq2008 / "Fold1" / "test.txt.gz", n_features=X.shape[1])
    order = np.argsort(qt, kind="stable")
    ptr = np.r_[0, np.cumsum(np.unique(qt[order], return_counts=True)[1])]
    for params in (dict(method="nystroem", n_components=100, normalize="query_minmax"),
                   dict(method="rff", n_components=100, normalize="zscore")):
        model = streamrank.RankSVM(**params).fit(X[keep], y[keep], qid[keep])._model()
        sess = session(model)
        ref = model.decision_function(Xt[order], ptr)
        q = qt if model.normalizer.kind == "query_minmax" else None
        got = np.empty(len(Xt))
        got[order] = ref
        assert_scores(ort_scores(sess, Xt, q), got)


def test_the_command_and_the_estimator_write_the_graph(tmp_path):
    import subprocess
    import sys
    X = raw_rows(240, 6, seed=1)
    y = np.random.default_rng(0).integers(0, 3, len(X)).astype(np.float32)
    est = streamrank.RankSVM(method="nystroem", n_components=20, normalize="query_minmax").fit(
        X, y, np.repeat(np.arange(8), 30))
    model = est.save(tmp_path / "m.h5")
    p = subprocess.run([sys.executable, "-m", "streamrank", "export", str(model), "--format", "onnx", "-o",
                        str(tmp_path / "ranker.onnx")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    data = (tmp_path / "ranker.onnx").read_bytes()
    assert onnx.load_from_string(data).graph.name == "ranker"
    assert est.export(format="onnx") == render(est._model(), "onnx")  # bytes, the same graph
    Xt, ids = raw_rows(60, 6, seed=9), np.repeat([3, 1], 30)
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    assert_scores(ort_scores(sess, Xt, ids), est.predict(Xt, qid=ids))


def test_a_graph_beyond_protobufs_2_gib_is_refused(monkeypatch):
    monkeypatch.setattr(onnx_graph, "MAX_CONSTANT_BYTES", 10_000)
    model = build("nystroem", "rbf", "none", m=200)  # landmarks: 200 x WIDTH float64
    with pytest.raises(ParameterError, match="more than one ONNX file can hold"):
        render(model, "onnx")
    assert render(build("primal", "linear", "zscore"), "onnx")  # a few hundred bytes of constants
