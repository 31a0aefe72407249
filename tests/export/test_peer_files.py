"""The svmrank and liblinear export formats (issue 32): the files' layouts line by line, weights
that read back as the same doubles, the models they refuse, and, when the peers' programs are
built (tools/peers/build.sh into ../peers/, or STREAMRANK_SVMRANK_CLASSIFY /
STREAMRANK_LIBLINEAR_PREDICT), their own scores of an exported file against
``model.decision_function``.

Agreement rule: peer = streamrank - c for one constant c, checked as
max_i |s_i - p_i - c_hat| <= tol with c_hat the midrange of s - p (the c that minimises that
maximum; it must also equal the constant linear_weights drops) and
- LIBLINEAR: tol = 1e-5 * max|p|. ``predict`` prints ``%g``, six significant digits, an error of at
  most 5e-6 |p_i| per printed value, so the rule has a factor of 2 of room and nothing else.
- SVMrank: tol = 1e-5 * max|p| + 1e-8. ``svm_rank_classify`` prints ``%.8f`` (5e-9 absolute) and
  reads weights and features as float32 (2^-24 relative per product).
The bound is on the peer's largest printed |score| (the only scale its digits have): when zscore
folding gives a dropped constant larger than the scores' spread, LIBLINEAR's six digits resolve
less of the spread (see docs/formats.md)."""

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import streamrank
from locations import MQ2008, ROOT
from streamrank.errors import ParameterError
from streamrank.export import render
from streamrank.export.common import linear_weights

PEERS = ROOT.parent / "peers"
SVMRANK = Path(os.environ.get("STREAMRANK_SVMRANK_CLASSIFY") or PEERS / "svm_rank" / "svm_rank_classify")
LIBLINEAR = Path(os.environ.get("STREAMRANK_LIBLINEAR_PREDICT") or PEERS / "liblinear-ranksvm" / "predict")


def ranking_data(seed=0, n_queries=10, per=8, d=6, scales=None, offset=0.0):
    """Graded rows whose labels depend on the features; column j times ``scales[j]`` plus
    ``offset`` times the same scale (raw features of very different scales, off-centre)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_queries * per, d))
    y = np.clip(np.round(X[:, 0] - 0.5 * X[:, 1] + 0.4 * X[:, 2] + 0.3 * rng.standard_normal(len(X))) + 1, 0, 2)
    if scales is not None:
        X = (X + offset) * np.asarray(scales)
    return X.astype(np.float32), y.astype(np.float32), np.repeat(np.arange(n_queries), per)


SCALES = [1e-2, 1.0, 1e4, 3.0, 1e2, 1e3]
KINDS = {
    "none": lambda: streamrank.RankSVM(),
    "zscore": lambda: streamrank.RankSVM(normalize="zscore"),
    "subset": lambda: streamrank.RankSVM(normalize="zscore", features=[5, 1, 3]),
    "nystroem-linear": lambda: streamrank.RankSVM(method="nystroem", kernel="linear", n_components=8,
                                                  normalize="zscore"),
}


@pytest.fixture(scope="module")
def data():
    return ranking_data(scales=SCALES, offset=0.5)


@pytest.fixture(scope="module")
def models(data):
    X, y, q = data
    return {k: make().fit(X, y, q)._model() for k, make in KINDS.items()}


# -- layouts -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", list(KINDS))
def test_liblinear_layout_and_weights_read_back_exactly(models, key):
    model = models[key]
    v, _ = linear_weights(model, "liblinear")
    text = render(model, "liblinear")
    lines = text.split("\n")
    assert lines[:5] == ["solver_type L2R_L2LOSS_RANKSVM", "nr_class 2", f"nr_feature {len(v)}", "bias -1", "w"]
    assert lines[-1] == "" and len(lines) == 5 + len(v) + 1  # one weight a line, then the final newline
    body = lines[5:-1]
    assert all(line.endswith(" ") and " " not in line[:-1] for line in body)  # save_model's "%g " lines
    w = np.array([float(line) for line in body])
    assert np.array_equal(w, v)  # the same doubles (%.17g), zeros of the unselected features included
    assert "label" not in text  # a ranksvm model has no label line


@pytest.mark.parametrize("key", list(KINDS))
def test_svmrank_layout_and_weights_read_back_exactly(models, key):
    model = models[key]
    v, _ = linear_weights(model, "svmrank")
    lines = render(model, "svmrank").split("\n")
    assert lines[0] == "SVM-light Version V6.20"
    assert lines[1] == "0 # kernel type"
    assert [ln.split("#")[1] for ln in lines[2:7]] == [" kernel parameter -d ", " kernel parameter -g ",
                                                       " kernel parameter -s ", " kernel parameter -r ",
                                                       " kernel parameter -u "]
    assert lines[7] == f"{len(v)} # highest feature index "
    assert lines[8].endswith(" # number of training documents ")
    assert lines[9] == "2 # number of support vectors plus 1 "
    assert lines[10].startswith("0 # threshold b")
    assert lines[12:] == [""] and lines[11].endswith(" #")
    tokens = lines[11][:-2].split(" ")
    assert tokens[0] == "1"  # alpha * y of the single support vector
    ids = [int(t.split(":")[0]) for t in tokens[1:]]
    assert ids == sorted(ids) and ids == [j + 1 for j in np.flatnonzero(v)]  # nonzero weights, increasing ids
    w = np.zeros_like(v)
    w[np.array(ids) - 1] = [float(t.split(":")[1]) for t in tokens[1:]]
    assert np.array_equal(w, v)
    if key == "subset":
        assert ids == [1, 3, 5]


def test_signs_and_dropped_constant_on_a_hand_model():
    """x . v is streamrank's score minus c: the files hold v (not -v) and no constant."""
    X, y, q = ranking_data(scales=SCALES, offset=0.5)
    model = streamrank.RankSVM(normalize="zscore").fit(X, y, q)._model()
    v, c = linear_weights(model, "liblinear")
    w = np.array([float(x) for x in render(model, "liblinear").split("\n")[5:-1]])
    s = model.decision_function(X)
    X64 = X.astype(np.float64)
    assert np.abs(X64 @ w + c - s).max() <= 1e-9 * np.abs(s).max()
    assert c != 0.0  # off-centre zscore rows: a real constant was dropped


@pytest.mark.parametrize("fmt", ["svmrank", "liblinear"])
@pytest.mark.parametrize("make, words", [
    (lambda: streamrank.RankSVM(normalize="query_minmax"), "query_minmax"),
    (lambda: streamrank.RankSVM(method="nystroem", n_components=6), "rbf"),
    (lambda: streamrank.RankSVM(method="rff", n_components=6), "random Fourier"),
])
def test_models_the_files_cannot_hold_are_refused(fmt, make, words):
    X, y, q = ranking_data()
    model = make().fit(X, y, q)._model()
    with pytest.raises(ParameterError) as err:
        render(model, fmt)
    assert words in str(err.value) and f"format={fmt}" in str(err.value) and "format=onnx" in str(err.value)


def test_svmrank_refuses_weights_beyond_float32():
    X, y, q = ranking_data()
    model = streamrank.RankSVM().fit(X, y, q)._model()
    model.w = model.w.copy()
    model.w[2] = 1e39
    with pytest.raises(ParameterError, match="feature 3's weight 1e\\+39 is beyond float32"):
        render(model, "svmrank")
    assert float(render(model, "liblinear").split("\n")[7]) == 1e39  # a double holds it


# -- the peers' own programs ---------------------------------------------------------------------------
def write_svmlight(path, X, y, qid):
    """SVMlight rows ``label qid:Q j:x_j ...`` with query ids renumbered 1, 2, ... by runs
    (svm_rank_classify wants increasing ids), every value as the double of its float32."""
    starts = np.r_[True, qid[1:] != qid[:-1]]
    qnum = np.cumsum(starts)
    with open(path, "w") as f:
        for i in range(len(X)):
            cells = " ".join(f"{j}:{float(x)!r}" for j, x in enumerate(X[i].tolist(), 1))
            f.write(f"{float(y[i]):g} qid:{qnum[i]} {cells}\n")


def peer_scores(prog, fmt, model, X, y, qid, tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    model_file, test_file, out = tmp_path / f"{fmt}.model", tmp_path / "test.txt", tmp_path / f"{fmt}.out"
    model_file.write_text(render(model, fmt))
    write_svmlight(test_file, X, y, qid)
    args = [str(prog), str(test_file), str(model_file), str(out)]
    run = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return np.loadtxt(out, ndmin=1)


def assert_agree(fmt, s, p, c):
    d = s - p
    c_hat = (d.max() + d.min()) / 2
    top = np.abs(p).max()
    tol = 1e-5 * top + (1e-8 if fmt == "svmrank" else 0.0)
    assert np.abs(d - c_hat).max() <= tol, (np.abs(d - c_hat).max(), tol)
    assert abs(c_hat - c) <= tol  # the one constant is the one the file dropped


def peer(fmt):
    prog = SVMRANK if fmt == "svmrank" else LIBLINEAR
    if not (prog.is_file() and os.access(prog, os.X_OK)):
        pytest.skip(f"{prog} is not built (tools/peers/build.sh; see docs/benchmarks.md)")
    return prog


@pytest.mark.parametrize("fmt", ["svmrank", "liblinear"])
@pytest.mark.parametrize("key", list(KINDS))
def test_peer_programs_score_the_exported_file(models, data, fmt, key, tmp_path):
    prog = peer(fmt)
    X, y, q = data
    model = models[key]
    p = peer_scores(prog, fmt, model, X, y, q, tmp_path)
    assert_agree(fmt, model.decision_function(X), p, linear_weights(model, fmt)[1])


@pytest.mark.parametrize("fmt", ["svmrank", "liblinear"])
@pytest.mark.parametrize("scale", [1e-2, 1.0, 1e2, 1e4])
@pytest.mark.parametrize("normalize", ["none", "zscore"])
def test_peer_programs_on_raw_scales(fmt, scale, normalize, tmp_path):
    prog = peer(fmt)
    X, y, q = ranking_data(seed=1, scales=[scale] * 6, offset=0.3)
    model = streamrank.RankSVM(normalize=normalize).fit(X, y, q)._model()
    p = peer_scores(prog, fmt, model, X, y, q, tmp_path)
    assert_agree(fmt, model.decision_function(X), p, linear_weights(model, fmt)[1])


@pytest.mark.parametrize("fmt", ["svmrank", "liblinear"])
@pytest.mark.parametrize("normalize", ["none", "zscore"])
def test_peer_programs_on_mq2008_fold1_test(fmt, normalize, tmp_path):
    prog = peer(fmt)
    fold = MQ2008 / "Fold1"
    if not (fold / "train.txt.gz").exists():
        pytest.skip("MQ2008 not present (../shared/data)")
    X, y, q = streamrank.load_ranking(fold / "train.txt.gz")
    model = streamrank.RankSVM(C=0.25, normalize=normalize).fit(X, y, q)._model()
    Xt, yt, qt = streamrank.load_ranking(fold / "test.txt.gz", n_features=X.shape[1])
    p = peer_scores(prog, fmt, model, Xt, yt, qt, tmp_path)
    assert_agree(fmt, model.decision_function(Xt), p, linear_weights(model, fmt)[1])
