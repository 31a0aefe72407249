"""A model applied to data of another width (issue 31). Text follows SVMlight's rule (missing
trailing features are 0, features past the model's are ignored), said in one line; an HDF5
dataset of another width is refused in one line unless --pad-features (narrower) or
--ignore-extra-features (wider) asks for that rule; arrays are refused as scikit-learn refuses them."""

import numpy as np
import pytest

import streamrank
from streamrank.cli import main
from streamrank.io.hdf5_format import DatasetWriter

D = 20  # the tiny data's width


def _rows(ds_path):
    with streamrank.open_dataset(ds_path) as ds:
        X, y = ds.read(0, ds.n_rows)
        qid = np.repeat(np.arange(ds.n_queries), np.diff(ds.query_ptr[:]))  # an id per query
        return np.asarray(X), np.asarray(y), qid, ds.row[:]


def _write(path, X, y, qid):
    with DatasetWriter(path, n_features=X.shape[1]) as w:
        w.append(X, y, qid)


def _text(path, X, y, qid):
    with open(path, "w") as fh:
        for xi, yi, qi in zip(X, y, qid):
            fh.write(f"{int(yi)} qid:{qi} " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(map(float, xi))) + "\n")


@pytest.fixture(scope="module", params=["primal", "nystroem"])
def model(request, tiny, tmp_path_factory):
    path = tmp_path_factory.mktemp("width") / f"{request.param}.h5"
    extra = [] if request.param == "primal" else ["--method", "nystroem", "--components", "8", "--gamma", "0.1"]
    assert main(["train", str(tiny["train"]), "-o", str(path), "--quiet", *extra]) == 0
    return path


@pytest.mark.parametrize("d", [D - 3, D + 2])
def test_hdf5_of_another_width_is_refused_in_one_line_unless_asked(model, tiny, tmp_path, capsys, d):
    X, y, qid, _ = _rows(tiny["test"])
    Xd = np.zeros((X.shape[0], d), np.float32)
    Xd[:, :min(d, D)] = X[:, :min(d, D)]
    data = tmp_path / "other.h5"
    _write(data, Xd, y, qid)
    flag = "--pad-features" if d < D else "--ignore-extra-features"
    out = tmp_path / "s.txt"
    assert main(["predict", str(model), str(data), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not out.exists()
    assert f"{data} has {d} features, the model {model} {D}: pass {flag}" in err
    assert main(["predict", str(model), str(data), "-o", str(out), flag]) == 0
    # SVMlight's rule: as the model's width of the same rows, zeros for the missing ones
    Xm = np.zeros((X.shape[0], D), np.float32)
    Xm[:, :min(d, D)] = Xd[:, :D]
    est = streamrank.load(model)
    np.testing.assert_array_equal(np.loadtxt(out), est.predict(Xm))
    assert capsys.readouterr().err.count(" features, the model ") == 1


@pytest.mark.parametrize("d", [D - 3, D + 2])
def test_text_of_another_width_follows_svmlight_and_says_so_once(model, tiny, tmp_path, capsys, d):
    X, y, qid, _ = _rows(tiny["test"])
    Xd = np.zeros((X.shape[0], d), np.float32)
    Xd[:, :min(d, D)] = X[:, :min(d, D)]
    Xd[:, D:] = 1.0  # features the model does not know
    src = tmp_path / "other.txt"
    _text(src, Xd, y, qid)
    out = tmp_path / "s.txt"
    assert main(["predict", str(model), str(src), "-o", str(out), "--cache-dir", str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    want = "are read as 0 (SVMlight's rule" if d < D else "are not in the model and are ignored (SVMlight's rule)"
    assert err.count(f"{src} has {d} features, the model {D}") == 1 and want in err, err
    Xm = np.zeros((X.shape[0], D), np.float32)
    Xm[:, :min(d, D)] = Xd[:, :min(d, D)]
    np.testing.assert_array_equal(np.loadtxt(out), streamrank.load(model).predict(Xm))


@pytest.mark.parametrize("d", [D - 1, D + 1])
def test_arrays_of_another_width_are_refused_as_scikit_learn_does(model, tiny, d):
    est = streamrank.load(model)
    X = np.zeros((4, d), np.float32)
    with pytest.raises(ValueError, match=rf"^X has {d} features, but LinearModel is expecting {D} features as input"):
        est.predict(X)
    est.predict(np.zeros((4, D), np.float32))
