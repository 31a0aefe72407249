"""Validation labels the metric cannot take (-1, as some sets mark the least relevant; a grade
past 2^y - 1's range; NaN written by h5py) are refused before training starts, with the file,
its row and the fix named, by every training method."""

import shutil

import h5py
import numpy as np
import pytest

from streamrank.cli import main
from streamrank.errors import InputError
from streamrank.io.dataset import open_dataset
from streamrank.training import problem


def relabel_text(src, dst, line_no, label):
    lines = src.read_text().splitlines(keepends=True)
    lines[line_no] = label + lines[line_no][lines[line_no].index(" "):]
    dst.write_text("".join(lines))
    return dst


@pytest.mark.parametrize("method", ["primal", "exact", "clsr"])
def test_minus_one_in_the_valid_text_is_refused_before_training(tiny, tmp_path, capsys, method):
    valid = relabel_text(tiny["valid_txt"], tmp_path / "valid.txt", 4, "-1")
    out = tmp_path / "m.h5"
    argv = ["train", str(tiny["train"]), "--valid", str(valid), "-o", str(out), "--lambda" if method == "clsr" else "--C", "0.1,1",
            "--method", method,
            "--cache-dir", str(tmp_path / "c"), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and not out.exists()
    assert (f"{valid}: stored row 4 (input data row 5, qid " in err and "has label -1, which the validation metric "
            "(meanndcg) cannot take: labels must be finite and >= 0" in err and "Relabel the validation data" in err
            and "(--valid DATA)" in err)


@pytest.mark.parametrize("label,why", [(1001.0, "overflows float64"), (-0.5, "must be finite and >= 0")])
def test_h5py_written_labels_are_checked_in_the_dataset(tiny, tmp_path, label, why):
    p = tmp_path / "valid.h5"
    shutil.copy(tiny["valid"], p)
    with h5py.File(p, "r+") as f:  # version 2: /y has checksums, so a writer's value, not a flipped bit
        y = f["y"][:]
        y[7] = label
        del f["y"]
        f.create_dataset("y", data=y, chunks=True, fletcher32=True)
    with open_dataset(p) as ds:
        with pytest.raises(InputError, match=rf"^{p}: stored row 7 \(input data row \d+, qid \d+\) has label "
                                             rf"{label:g}, .*{why}"):
            problem.check_validation_labels(ds, "map")


def test_labels_the_metric_takes_pass(tiny):
    with open_dataset(tiny["valid"]) as ds:
        assert problem.check_validation_labels(ds, "meanndcg") is None
    assert problem.check_validation_labels(None, "meanndcg") is None
