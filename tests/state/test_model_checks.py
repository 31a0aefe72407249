"""The model loader refuses, in every model file version (version 1 carries no digest, and a
digest proves only what some writer wrote), a model that cannot score every finite row: arrays
that are not finite, divisors that are not positive, shapes that disagree, weights whose scores
overflow. predict and every export format then exit 2 with one line naming the file."""

import numpy as np
import pytest

from locations import DATA, edited_copy
from streamrank.cli import main
from streamrank.errors import FormatError
from streamrank.features.maps import Nystroem, RandomFourier
from streamrank.features.normalize import Normalizer
from streamrank.state.model import LinearModel, load
from streamrank.state.model_checks import FLT_MAX, SCORE_LIMIT, score_bound

FORMATS = ("onnx", "json", "solr", "elasticsearch", "svmrank", "liblinear")


def _set(name, index, value):
    return lambda f: f[name].__setitem__(index, value)


def _replace(name, data):
    def edit(f):
        del f[name]
        f[name] = data
    return edit


# edits of the released v1 model (4 features, zscore) and the words that must name each
V1_EDITS = {
    "nan mean": (_set("normalize/mean", 0, np.nan), r"/normalize/mean holds nan at index 0"),
    "inf mean": (_set("normalize/mean", 2, -np.inf), r"/normalize/mean holds -inf at index 2"),
    "nan scale": (_set("normalize/scale", 1, np.nan), r"/normalize/scale holds nan at index 1"),
    "zero scale": (_set("normalize/scale", 0, 0.0), r"/normalize/scale of feature 1 is 0\.0 .*must be positive"),
    "negative scale": (_set("normalize/scale", 3, -0.5), r"/normalize/scale of feature 4 is -0\.5"),
    "subnormal scale": (_set("normalize/scale", 3, 1e-310), r"/normalize/scale of feature 4 is 1e-310 .*finite recip"),
    "1e308 weight": (_set("w", 0, 1e308), r"scores are not finite for every finite input: .*score up to inf"),
    "tiny scale": (_set("normalize/scale", 1, 1e-290), r"scores are not finite for every finite input"),
    "short mean": (_replace("normalize/mean", np.zeros(3)), r"/normalize/mean has shape \(3,\), .* need \(4,\)"),
    "2-d scale": (_replace("normalize/scale", np.ones((4, 1))), r"/normalize/scale has shape \(4, 1\)"),
}


def edited_v1(tmp_path, edit):
    return edited_copy(tmp_path, edit, "edited_v1.h5")


# the three edits first found (predict scored NaN or inf, onnx, json and solr exported them)
FOUND = ("nan mean", "zero scale", "1e308 weight")


@pytest.mark.parametrize("case", sorted(V1_EDITS))
def test_an_edited_v1_model_is_refused_by_the_loader(tmp_path, case):
    edit, words = V1_EDITS[case]
    p = edited_v1(tmp_path, edit)
    with pytest.raises(FormatError, match=f"^{p}: .*{words}.*; the model cannot score. Train the model again$"):
        load(p)


@pytest.mark.parametrize("case", FOUND)
def test_an_edited_v1_model_is_refused_by_predict_and_every_export(tmp_path, capsys, case):
    p = edited_v1(tmp_path, V1_EDITS[case][0])
    out = tmp_path / "out"
    runs = [["predict", str(p), str(DATA / "dataset_v2.h5"), "-o", str(out)]] + \
        [["export", str(p), "--format", fmt, "-o", str(out)] for fmt in FORMATS]
    for argv in runs:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(p) in err and "Traceback" not in err, argv
        assert not out.exists()


def test_the_bound_holds_at_the_extremes_of_float32(tmp_path):
    """The released model's bound covers every corner of [-FLT_MAX, FLT_MAX]^4 (the extremes of a
    linear score), and a weight scaled to just inside the limit still scores them finitely."""
    m = load(DATA / "model_v1.h5")
    corners = np.array(np.meshgrid(*[[-FLT_MAX, FLT_MAX, 0.0]] * 4)).reshape(4, -1).T.astype(np.float32)
    bound, _ = score_bound(m)
    assert np.abs(m.decision_function(corners)).max() <= bound
    big = edited_v1(tmp_path, lambda f: f["w"].__setitem__(slice(None), f["w"][:] * (SCORE_LIMIT / bound) * 0.999))
    s = load(big).decision_function(corners)
    assert np.isfinite(s).all() and np.abs(s).max() > 1e300
    over = edited_v1(tmp_path, lambda f: f["w"].__setitem__(slice(None), f["w"][:] * (SCORE_LIMIT / bound) * 1.01))
    with pytest.raises(FormatError, match="scores are not finite"):
        load(over)


def _map_model(fmap, X, normalize="none"):
    norm = Normalizer(normalize)
    if normalize == "zscore":
        norm.mean_, norm.scale_ = X.mean(axis=0), X.std(axis=0) + 1.0
    fmap.fit(X)
    return LinearModel(np.linspace(-1, 1, fmap.n_components_), norm, n_features=X.shape[1], fmap=fmap)


@pytest.mark.parametrize("case", ["eigenvalue 0", "eigenvalue nan", "landmarks inf", "rff omega 1e300",
                                  "zscore mean nan"])
def test_a_version_2_model_with_a_valid_digest_is_refused_too(tmp_path, case):
    X = np.random.default_rng(0).standard_normal((30, 3))
    if case.startswith("rff"):
        m = _map_model(RandomFourier(n_components=8), X)
        m.fmap.omega_[0, 0] = 1e300
    else:
        m = _map_model(Nystroem(n_components=6), X, "zscore")
        if case == "eigenvalue 0":
            m.fmap.eigenvalues_[0] = 0.0
        elif case == "eigenvalue nan":
            m.fmap.eigenvalues_[1] = np.nan
        elif case == "landmarks inf":
            m.fmap.landmarks_[2, 1] = np.inf
        else:
            m.normalizer.mean_[0] = np.nan
    p = m.save(tmp_path / "m.h5")
    with pytest.raises(FormatError, match=f"^{p}: .*the model cannot score"):
        load(p)


@pytest.mark.parametrize("kind", ["nystroem", "rff"])
def test_sound_map_models_load_and_score_extreme_rows_finitely(tmp_path, kind):
    X = np.random.default_rng(1).standard_normal((30, 3))
    fmap = Nystroem(n_components=6) if kind == "nystroem" else RandomFourier(n_components=8)
    p = _map_model(fmap, X, "zscore").save(tmp_path / "m.h5")
    m = load(p)
    corners = np.array(np.meshgrid(*[[-FLT_MAX, FLT_MAX, 0.0]] * 3)).reshape(3, -1).T.astype(np.float32)
    s = m.decision_function(corners)
    assert np.isfinite(s).all() and np.abs(s).max() <= score_bound(m)[0]
