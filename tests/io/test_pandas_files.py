"""A file pandas wrote (``DataFrame.to_hdf``, fixed or table format) given where a dataset goes:
one line that says what it is and how to convert it, and the conversion it names works."""

import hashlib

import numpy as np
import pytest

from streamrank.cli import main

pd = pytest.importorskip("pandas")
pytest.importorskip("tables")


def frame():
    rng = np.random.default_rng(0)
    return pd.DataFrame({"qid": np.repeat([3, 7, 9], 4), "label": rng.integers(0, 3, 12),
                         "f1": rng.random(12), "f2": rng.random(12)})


@pytest.mark.parametrize("fmt", ["fixed", "table"])
def test_info_train_and_predict_say_it_is_a_pandas_frame(tmp_path, capsys, fmt):
    from locations import DATA
    p = tmp_path / "frame.h5"
    frame().to_hdf(p, key="ranking", mode="w", format=fmt)
    before = hashlib.sha256(p.read_bytes()).hexdigest()
    for argv in (["info", str(p)], ["train", str(p), "-o", str(tmp_path / "m.h5")],
                 ["predict", str(DATA / "model_v2.h5"), str(p), "-o", str(tmp_path / "s.txt")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"{p}: a pandas DataFrame (DataFrame.to_hdf, key 'ranking'), not a streamrank dataset" in err
        assert "then streamrank convert data.txt -o data.h5" in err
    assert hashlib.sha256(p.read_bytes()).hexdigest() == before
    assert not (tmp_path / "m.h5").exists() and not (tmp_path / "s.txt").exists()


def test_the_conversion_the_message_names_gives_the_frames_rows(tmp_path, monkeypatch):
    from sklearn.datasets import dump_svmlight_file
    import streamrank
    df = frame()
    monkeypatch.chdir(tmp_path)
    # query_id copied: pandas' copy-on-write hands out read-only arrays, which scikit-learn refuses
    dump_svmlight_file(df[["f1", "f2"]], df["label"], "data.txt", query_id=df["qid"].to_numpy().copy(),
                       zero_based=False)
    assert main(["convert", "data.txt", "-o", "data.h5", "--quiet"]) == 0
    X, y, qid = streamrank.load_ranking("data.h5")
    np.testing.assert_array_equal(qid, df["qid"])
    np.testing.assert_array_equal(y, df["label"])
    np.testing.assert_allclose(X, df[["f1", "f2"]], rtol=1e-7)
