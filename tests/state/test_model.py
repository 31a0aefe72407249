"""The model file (format ``streamrank-model`` v1): round trips, padding, refusals, the released v1
file, and ``streamrank predict`` writing scores in the input text's row order."""


import h5py
import numpy as np
import pytest

import streamrank
from streamrank.cli import main
from streamrank.errors import FormatError, InputError
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.state.model import load as load_model

from locations import DATA, edited_copy  # noqa: E402
NORMALIZE = ["none", "zscore", "query_minmax"]


def make_arrays(n_queries=6, d=5, seed=0, scattered=False):
    """Rows, graded labels and query ids; ``scattered``: a query's rows are not contiguous."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(3, 12, n_queries)
    qid = np.repeat(np.arange(10, 10 + n_queries), sizes)
    if scattered:
        qid = qid[rng.permutation(qid.size)]
    X = rng.standard_normal((qid.size, d)).round(3).astype(np.float32)
    y = rng.integers(0, 3, qid.size).astype(np.float32)
    return X, y, qid


def query_ptr_of(qid):
    change = np.flatnonzero(qid[1:] != qid[:-1]) + 1
    return np.concatenate(([0], change, [len(qid)]))


@pytest.fixture(scope="module")
def fitted():
    """One fitted RankSVM per normalisation (5 features)."""
    X, y, qid = make_arrays()
    return {kind: streamrank.RankSVM(C=0.5, normalize=kind).fit(X, y, qid) for kind in NORMALIZE}


# -- save / load ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", NORMALIZE)
def test_save_load_round_trip_predicts_identically(fitted, tmp_path, kind):
    est = fitted[kind]
    X, _, qid = make_arrays(n_queries=4, seed=7)
    before = est.predict(X, qid)
    path = tmp_path / "m.h5"
    assert est.save(path) == path
    assert [p.name for p in tmp_path.iterdir()] == ["m.h5"]  # no temporary file left behind

    again = streamrank.load(path)
    assert isinstance(again, streamrank.RankSVM)
    assert np.array_equal(again.predict(X, qid), before)
    assert np.array_equal(again.coef_, est.coef_)
    assert again.normalize == kind and again.C == 0.5 and again.n_features_in_ == 5
    assert again.objective_ == est.objective_ and again.C_ == est.C_

    m, m0 = load_model(path), est.model_
    assert m.w.dtype == np.float64 and np.array_equal(m.w, m0.w)
    assert m.config == m0.config and m.training == m0.training
    assert m.fingerprint == m0.fingerprint and m.levels == m0.levels == [0.0, 1.0, 2.0]
    assert m.normalizer.kind == kind
    if kind == "zscore":
        assert np.array_equal(m.normalizer.mean_, m0.normalizer.mean_)
        assert np.array_equal(m.normalizer.scale_, m0.normalizer.scale_)
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == "streamrank-model" and f.attrs["version"] == 2
        assert f.attrs["method"] == "primal" and f.attrs["n_features"] == 5
        assert f.attrs["created_by"] == f"streamrank {streamrank.__version__}"
        assert f["feature_map"].attrs["kind"] == "identity"


def test_save_replaces_an_existing_file(fitted, tmp_path):
    path = tmp_path / "m.h5"
    fitted["none"].save(path)
    fitted["zscore"].save(path)
    assert load_model(path).normalizer.kind == "zscore"
    assert [p.name for p in tmp_path.iterdir()] == ["m.h5"]


def test_load_then_predict_a_dataset_in_input_order(fitted, tmp_path):
    X, y, qid = make_arrays(n_queries=5, seed=3, scattered=True)
    with DatasetWriter(tmp_path / "d.h5", n_features=5) as w:
        w.append(X, y, qid)
    fitted["zscore"].save(tmp_path / "m.h5")
    est = streamrank.load(tmp_path / "m.h5")
    got = est.predict(tmp_path / "d.h5")
    # zscore needs no query ids, so the rows in input order can be scored directly
    assert np.array_equal(got, est.predict(X))


# -- feature count --------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", NORMALIZE)
def test_fewer_features_are_padded_with_zeros(fitted, tmp_path, kind):
    est = fitted[kind]
    X, y, qid = make_arrays(n_queries=4, d=3, seed=5)
    Xpad = np.zeros((X.shape[0], 5), np.float32)
    Xpad[:, :3] = X
    with pytest.raises(InputError, match="X has 3 features, but LinearModel is expecting 5 features as input"):
        est.predict(X, qid)  # arrays: refused, as scikit-learn refuses them (issue 31)
    assert np.array_equal(est.model_.decision_function(X, query_ptr_of(qid), extra="ignore"),
                          est.model_.decision_function(Xpad, query_ptr_of(qid)))
    # a dataset with fewer features too (streamed, input order)
    with DatasetWriter(tmp_path / "narrow.h5", n_features=3) as w:
        w.append(X, y, qid)
    assert np.array_equal(est.predict(tmp_path / "narrow.h5"), est.predict(Xpad, qid))


def test_integer_rows_are_padded_as_float(fitted):
    est = fitted["none"]
    X = np.array([[1, 2], [3, 4]])
    assert np.array_equal(est.model_.decision_function(X, extra="ignore"),
                          est.predict(np.array([[1., 2, 0, 0, 0], [3, 4, 0, 0, 0]])))


def test_more_features_than_the_model_knows(fitted, tmp_path, capsys):
    """Arrays: an error, as scikit-learn's (say what to pass). Datasets and the CLI: the extra
    features are ignored with one warning line, as SVMrank's classifier does."""
    est = fitted["none"]
    X, y, qid = make_arrays(n_queries=3, d=6, seed=2)
    with pytest.raises(InputError, match=r"X has 6 features, but LinearModel is expecting 5 features as input; pass "
                                         r"X\[:, :5\] if the others are not the model's, or retrain on all 6"):
        est.predict(X)
    with DatasetWriter(tmp_path / "wide.h5", n_features=6) as w:
        w.append(X, y, qid)
    want = est.predict(X[:, :5], qid)
    np.testing.assert_array_equal(est.predict(tmp_path / "wide.h5"), want)
    est.save(tmp_path / "m.h5")
    out = tmp_path / "scores.txt"
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "m.h5"), str(tmp_path / "wide.h5"), "-o", str(out)]) == 2
    assert "pass --ignore-extra-features" in capsys.readouterr().err  # HDF5 of another width: asked for (issue 31)
    assert main(["predict", str(tmp_path / "m.h5"), str(tmp_path / "wide.h5"), "-o", str(out),
                 "--ignore-extra-features"]) == 0
    err = capsys.readouterr().err
    assert err.count("wide.h5 has 6 features, the model 5: features 6 to 6 are not in the model and are ignored") == 1
    np.testing.assert_array_equal(np.loadtxt(out), want)
    with DatasetWriter(tmp_path / "narrow.h5", n_features=4) as w:
        w.append(X[:, :4], y, qid)
    assert main(["predict", str(tmp_path / "m.h5"), str(tmp_path / "narrow.h5"), "-o", str(out)]) == 2
    assert "pass --pad-features" in capsys.readouterr().err
    assert main(["predict", str(tmp_path / "m.h5"), str(tmp_path / "narrow.h5"), "-o", str(out), "--pad-features"]) == 0
    assert "narrow.h5 has 4 features, the model 5: features 5 to 5 are read as 0" in capsys.readouterr().err


def test_query_minmax_needs_query_ids(fitted):
    X, _, _ = make_arrays(n_queries=2, seed=1)
    with pytest.raises(streamrank.errors.ParameterError, match="query_minmax needs query ids"):
        fitted["query_minmax"].predict(X)


# -- refusals -------------------------------------------------------------------------------------
def _copy_with(tmp_path, edit):
    return edited_copy(tmp_path, edit)


@pytest.mark.parametrize("edit,message", [
    (lambda f: f.attrs.__setitem__("version", 4),
     "model format version 4 is not supported .this streamrank reads 1, 2, 3.; it was written by a newer streamrank; "
     "upgrade with: pip install -U streamrank"),
    (lambda f: f.attrs.__setitem__("version", 0),
     "model format version 0 is not supported .this streamrank reads 1, 2, 3.; train the model again"),
    (lambda f: f.attrs.__delitem__("version"), "model format version -1 is not supported"),
    (lambda f: f.attrs.__setitem__("format", "something-else"),
     "not a streamrank model .format 'something-else'.; train one with streamrank train"),
    (lambda f: f.attrs.__delitem__("format"), "not a streamrank model .format None.; train one with streamrank train"),
    (lambda f: f["feature_map"].attrs.__setitem__("kind", "warp-drive"),
     "unknown feature map kind 'warp-drive' .*upgrade streamrank"),
    (lambda f: f.__delitem__("w"), "the model file is incomplete or damaged .*; train the model again"),
    (lambda f: f.attrs.__setitem__("n_features", 7), "inconsistent .w has shape .4,., n_features is 7"),
    (lambda f: f.attrs.__setitem__("n_features", "abc"), "the model's n_features is 'abc'"),
    (lambda f: (f.__delitem__("w"), f.create_dataset("w", shape=(10 ** 12,), dtype="f8")),
     "declare 8,000,000,0..,... bytes, more than the file's"),
    (lambda f: f["w"].__setitem__(1, float("nan")), "weights are not all finite"),
])
def test_unknown_or_broken_model_file_is_refused_naming_the_fix(tmp_path, capsys, edit, message):
    path = _copy_with(tmp_path, edit)
    with pytest.raises(FormatError, match=message):
        load_model(path)
    with pytest.raises(FormatError, match=message):
        streamrank.load(path)
    X = tmp_path / "x.txt"
    X.write_text("1 qid:1 1:0.5\n")
    assert main(["predict", str(path), str(X), "-o", str(tmp_path / "s.txt"), "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("streamrank predict: error: ") and "Traceback" not in err


def test_other_files_are_refused(tmp_path):
    text = tmp_path / "model.txt"
    text.write_text("not a model\n")
    with pytest.raises(FormatError, match="model.txt: not an HDF5 file, so not a streamrank model"):
        load_model(text)
    X, y, qid = make_arrays(n_queries=2)
    with DatasetWriter(tmp_path / "d.h5", n_features=5) as w:
        w.append(X, y, qid)
    with pytest.raises(FormatError, match="d.h5: not a streamrank model .a streamrank dataset, not a model.; "
                                          "train one with streamrank train"):
        load_model(tmp_path / "d.h5")
    with pytest.raises(InputError, match="missing.h5: no such file"):
        load_model(tmp_path / "missing.h5")
    damaged = tmp_path / "damaged.h5"
    damaged.write_bytes((DATA / "model_v1.h5").read_bytes()[:3000])
    with pytest.raises(FormatError, match="damaged.h5: .*damaged.*train the model again"):
        load_model(damaged)


# -- the released v1 file -------------------------------------------------------------------------
# tests/data/model_v1.h5 was written once by streamrank 0.1.0 and must keep loading:
#   X = the 12 x 4 matrix below as float32, y = [2,1,0,1, 2,0,0,1, 2,0,1,0], qid = [1]*4 + [2]*4 + [3]*4
#   streamrank.RankSVM(C=1.0, normalize="zscore").fit(X, y, qid).save("model_v1.h5")
# Its arrays, as stored (float64 reprs):
V1_W = [0.03592660368370207, 0.48773705581729565, -0.22804701274692715, -0.13225665952446153]
V1_MEAN = [0.48333333618938923, 0.45833333519597846, 1.7083333333333333, 0.5]
V1_SCALE = [0.30776975189513206, 0.3328120900833392, 1.0889278621143317, 0.5]
V1_X = np.array([[0.1, 1.0, 3.0, 0.0], [0.4, 0.5, 2.0, 1.0], [0.9, 0.0, 1.0, 0.0], [0.3, 0.2, 2.5, 1.0],
                 [0.5, 0.7, 0.5, 0.0], [0.2, 0.9, 1.5, 1.0], [0.8, 0.1, 3.5, 0.0], [0.6, 0.3, 0.0, 1.0],
                 [0.7, 0.6, 2.0, 0.0], [0.0, 0.4, 1.0, 1.0], [1.0, 0.8, 3.0, 0.0], [0.3, 0.0, 0.5, 1.0]],
                np.float32)


def test_released_v1_model_file_keeps_loading():
    path = DATA / "model_v1.h5"
    with h5py.File(path, "r") as f:
        assert f.attrs["format"] == "streamrank-model" and int(f.attrs["version"]) == 1
        assert f.attrs["method"] == "primal" and int(f.attrs["n_features"]) == 4
        assert f["normalize"].attrs["kind"] == "zscore" and f["feature_map"].attrs["kind"] == "identity"
        # the file is the released one: its arrays are exactly these
        assert f["w"].dtype == np.float64 and f["w"][:].tolist() == V1_W
        assert f["normalize/mean"][:].tolist() == V1_MEAN and f["normalize/scale"][:].tolist() == V1_SCALE

    m = load_model(path)
    assert m.method == "primal" and m.n_features == 4 and m.normalizer.kind == "zscore"
    assert m.levels == [0.0, 1.0, 2.0] and m.config["C_path"] == [1.0] and m.config["normalize"] == "zscore"
    assert m.training["C"] == 1.0 and m.training["candidates"][0]["message"] == "converged"

    # a fixed matrix: the training rows, one row of another scale and a row with 3 features (padded)
    X = np.vstack([V1_X, [[2.0, -1.0, 0.25, 3.0]]]).astype(np.float32)
    # by hand from the stored arrays: sum_j (x_j - mean_j) / scale_j * w_j
    want = np.array([sum((float(x[j]) - V1_MEAN[j]) / V1_SCALE[j] * V1_W[j] for j in range(4)) for x in X])
    np.testing.assert_allclose(m.decision_function(X), want, rtol=1e-13, atol=1e-15)
    est = streamrank.load(path)
    np.testing.assert_allclose(est.predict(X), want, rtol=1e-13, atol=1e-15)
    # a row with 3 features is padded with 0 for feature 4 (raw 0, then normalised)
    x3 = np.array([[0.5, 0.25, 2.0]], np.float32)
    want3 = sum((float(v) - V1_MEAN[j]) / V1_SCALE[j] * V1_W[j] for j, v in enumerate([*x3[0], 0.0]))
    np.testing.assert_allclose(m.decision_function(x3, extra="ignore"), [want3], rtol=1e-13)
    with pytest.raises(InputError, match="X has 3 features, but LinearModel is expecting 4"):
        est.predict(x3)  # arrays of another width: refused, as scikit-learn refuses them


# -- streamrank predict: input text order ---------------------------------------------------------
def _write_text(path, X, y, qid):
    with open(path, "w") as fh:
        for xi, yi, qi in zip(X, y, qid):
            feats = " ".join(f"{j + 1}:{v:.3f}" for j, v in enumerate(xi))
            fh.write(f"{int(yi)} qid:{qi} {feats}\n")


@pytest.mark.parametrize("kind", NORMALIZE)
def test_cli_predict_writes_scores_in_input_text_order(fitted, tmp_path, capsys, kind):
    X, y, qid = make_arrays(n_queries=5, d=4, seed=11, scattered=True)  # 4 < 5 features: padded
    assert len(query_ptr_of(qid)) - 1 > 5  # more runs of rows than queries: non-contiguous in the text
    src = tmp_path / "data.txt"
    _write_text(src, X, y, qid)
    fitted[kind].save(tmp_path / "m.h5")
    out = tmp_path / "scores.txt"
    assert main(["predict", str(tmp_path / "m.h5"), str(src), "-o", str(out), "--cache-dir", str(tmp_path / "c"),
                 "--json"]) == 0
    assert '"rows": %d' % len(y) in capsys.readouterr().out
    got = np.loadtxt(out)
    assert got.shape == (len(y),) and len(out.read_text().splitlines()) == len(y)
    # expected: decision_function on the rows in text order; for query_minmax each query's rows
    # (gathered from wherever they are in the text) form one group
    model = load_model(tmp_path / "m.h5")
    Xt = np.array([[float(t.split(":")[1]) for t in ln.split()[2:]] for ln in src.read_text().splitlines()],
                  np.float32)
    assert np.array_equal(Xt, X)
    want = np.empty(len(y))
    if kind == "query_minmax":
        for q in np.unique(qid):
            rows = np.flatnonzero(qid == q)
            want[rows] = model.decision_function(Xt[rows], np.array([0, rows.size]), extra="ignore")
    else:
        want[:] = model.decision_function(Xt, extra="ignore")  # text: SVMlight's rule, as predict reads it
    # %.17g round-trips float64 exactly
    assert np.array_equal(got, want)
    # and the dataset itself was regrouped (so the /row mapping was needed)
    ds = streamrank.open_dataset(next((tmp_path / "c").glob("data.txt.*.h5")))
    try:
        assert not np.array_equal(ds.row, np.arange(len(y)))
    finally:
        ds.close()


# tests/data/model_v2.h5: model_v1.h5 loaded and saved again by format version 2 (content_sha256):
#   streamrank.state.model.load("model_v1.h5").save("model_v2.h5")


def test_released_v2_model_file_loads_with_the_v1_arrays():
    path = DATA / "model_v2.h5"
    with h5py.File(path, "r") as f:
        assert int(f.attrs["version"]) == 2 and len(f.attrs["content_sha256"]) == 64
    m = load_model(path)
    assert m.w.tolist() == V1_W
    assert m.normalizer.mean_.tolist() == V1_MEAN and m.normalizer.scale_.tolist() == V1_SCALE


def test_every_flipped_byte_of_a_model_is_refused(tmp_path):
    """A flip in w, the normaliser or an attribute changes the content digest (or breaks HDF5's
    own structures): never a model that scores differently."""
    ref = (DATA / "model_v2.h5").read_bytes()
    with h5py.File(DATA / "model_v2.h5", "r") as f:
        spots = [f["w"].id.get_offset() + 3, f["normalize/mean"].id.get_offset() + 9,
                 f["normalize/scale"].id.get_offset() + 17]
    rng = np.random.default_rng(5)
    spots += [int(x) for x in rng.integers(0, len(ref), 40)]
    refused = 0
    for k, at in enumerate(spots):
        p = tmp_path / f"flip{k}.h5"
        data = bytearray(ref)
        data[at] ^= 0x10
        p.write_bytes(bytes(data))
        try:
            m = load_model(p)
        except FormatError:
            refused += 1
            continue
        # a flip in bytes the model does not consist of (free space, padding) may load: the same model
        assert m.w.tolist() == V1_W and m.normalizer.mean_.tolist() == V1_MEAN
    assert refused >= 3  # at least the three aimed at the arrays


def test_a_model_file_cannot_point_the_program_elsewhere(tmp_path):
    """Paths recorded in a model's settings (cache, checkpoint, output) are never opened when it
    loads or predicts: only the files the caller names are."""
    from streamrank.state.model import LinearModel
    from streamrank.features.normalize import Normalizer
    elsewhere = tmp_path / "elsewhere"
    cfg = {"cache_dir": str(elsewhere / "cache"), "checkpoint": str(elsewhere / "ck"), "output": str(elsewhere / "o"),
           "C_path": [1.0], "normalize": "none"}
    LinearModel(np.ones(3), Normalizer("none"), n_features=3, config=cfg).save(tmp_path / "m.h5")
    m = load_model(tmp_path / "m.h5")
    assert m.config["cache_dir"] == cfg["cache_dir"]
    est = streamrank.load(tmp_path / "m.h5")
    est.predict(np.ones((4, 3), np.float32))
    assert not elsewhere.exists()


def test_raw_rows_are_scored_with_the_bits_of_their_float64_copy(fitted, tmp_path):
    """An unnormalised linear model scores float32 rows as read (no float64 copy): the same bits
    as the copy, for rows of very different scales, and the same in any block size the budget gives."""
    model = fitted["none"].model_
    rng = np.random.default_rng(5)
    X = (rng.standard_normal((500, 5)) * np.array([1e-6, 1.0, 1e3, 1e6, 3e8])).astype(np.float32)
    assert model._scores_raw_rows(X)
    from streamrank._native import qprod
    want = np.empty(500)
    qprod.rows_dot(X.astype(np.float64), model.w, want)
    np.testing.assert_array_equal(model.decision_function(X), want)
    qid = np.repeat(np.arange(50), 10)
    with DatasetWriter(tmp_path / "d.h5", n_features=5) as w:
        w.append(X, np.zeros(500, np.float32), qid)
    with streamrank.open_dataset(tmp_path / "d.h5") as ds:
        whole = model.predict_dataset(ds)
        for block in (2000, 20000, 10**6):
            np.testing.assert_array_equal(model.score_stream(ds, block_bytes=block)[ds.row.argsort()], whole)
    np.testing.assert_array_equal(whole, want)


# tests/data/model_v3.h5: a linear model trained on features 4, 1, 2 of 5 (train --features): 4 queries
# of random rows (seed 3), C=1, tol=1e-10; version 3 because it reads a subset of its inputs.
def test_model_v3_fixture_loads_and_reads_its_input_features():
    from streamrank._native import qprod as _qprod
    model = load_model(DATA / "model_v3.h5")
    assert model.input_features.tolist() == [3, 0, 1] and model.input_width == 5
    assert model.config["features"] == [4, 1, 2]
    X = np.random.default_rng(0).standard_normal((7, 5)).astype(np.float32)
    want = np.empty(7)
    _qprod.rows_dot(np.ascontiguousarray(X[:, [3, 0, 1]]), model.w, want)
    assert np.array_equal(model.decision_function(X), want)
    with pytest.raises(InputError, match="X has 6 features, but LinearModel is expecting 5 features as input"):
        model.decision_function(np.zeros((2, 6), np.float32))
