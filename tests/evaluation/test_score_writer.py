"""The score writer: no score file, and nothing on standard output, holds a score that is not
finite; a model that loads (its bound is float64's) can still meet a row whose float32 kernel
values overflow, and predict then exits 2 with one line naming the data's row."""

import io

import numpy as np
import pytest

from streamrank.cli import main
from streamrank.errors import NumericError
from streamrank.evaluation.score_files import write_scores
from streamrank.features.exact_map import ExactKernelMap
from streamrank.features.normalize import Normalizer
from streamrank.state.model import LinearModel


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_score_is_never_written(tmp_path, bad):
    out = tmp_path / "s.txt"
    out.write_text("old\n")
    scores = np.array([0.5, 1.0, bad, 2.0])
    with pytest.raises(NumericError, match=rf"^DATA: data row 3 scores {bad!r} \(1 of 4 rows are not finite\); "
                                           r"no scores were written"):
        write_scores(out, scores, "DATA")
    assert out.read_text() == "old\n"
    stdout = io.StringIO()
    with pytest.raises(NumericError):
        write_scores("-", scores, "DATA", stdout=stdout)
    assert stdout.getvalue() == ""


def test_finite_scores_round_trip(tmp_path):
    scores = np.array([0.1, -1e300, 5e-324, 3.0])
    write_scores(tmp_path / "s.txt", scores, "DATA")
    np.testing.assert_array_equal(np.loadtxt(tmp_path / "s.txt"), scores)


def test_predict_refuses_a_row_whose_kernel_values_pass_float32(tmp_path, capsys):
    model = LinearModel(np.array([1.0, -0.5]), Normalizer("none"), n_features=3,
                        fmap=ExactKernelMap(np.array([[10.0, 10, 10], [1, 2, 3]]), kernel="linear"))
    mpath = model.save(tmp_path / "m.h5")
    data = tmp_path / "d.txt"
    data.write_text("0 qid:1 1:1 2:2 3:3\n1 qid:1 1:3e38 2:3e38 3:3e38\n")
    out = tmp_path / "s.txt"
    for target in (out, "-"):
        assert main(["predict", str(mpath), str(data), "-o", str(target), "--cache-dir", str(tmp_path / "c")]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1 and f"{data}: data row 2 scores" in captured.err
    assert not out.exists()
    data.write_text("0 qid:1 1:1 2:2 3:3\n1 qid:1 1:3e30 2:3e30 3:3e30\n")  # in range: written
    assert main(["predict", str(mpath), str(data), "-o", str(out), "--cache-dir", str(tmp_path / "c")]) == 0
    assert np.isfinite(np.loadtxt(out)).all()
