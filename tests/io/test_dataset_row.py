"""``/row`` as other writers leave it (h5py): a permutation of 0..n-1 or refused where it is first
read, in both released format versions; a missing ``/row`` is the stored order. Predict and eval
never score through a ``/row`` that is not a permutation."""

import shutil

import h5py
import numpy as np
import pytest

import streamrank
from locations import DATA
from streamrank.cli import main
from streamrank.errors import FormatError
from streamrank.io.dataset import not_a_permutation

# /row of the released fixtures (6 rows, regrouped): [0 2 5 1 3 4]
EDITS = {
    "duplicate": (lambda r: np.r_[r[:-1], r[0]], r"stored rows 0 and 5 both map to 0, and no row maps to 4"),
    "negative": (lambda r: np.r_[-1, r[1:]], r"stored row 0 maps to -1, outside 0\.\.5"),
    "huge": (lambda r: np.r_[r[:3], 10 ** 12, r[4:]], r"stored row 3 maps to 1000000000000, outside 0\.\.5"),
    "short": (lambda r: r[:-1], r"it is int64 \(5,\), not 6 integers"),
    "float": (lambda r: r.astype(np.float64), r"it is float64 \(6,\), not 6 integers"),
}
FIX = r"\. Convert the original text again, or delete /row \(h5py: del f\['row'\]\) to read the rows in stored order$"


def with_row(tmp_path, version, edit):
    """The released dataset of ``version`` with ``/row`` rewritten by h5py (None: deleted)."""
    p = tmp_path / f"v{version}_{getattr(edit, '__name__', 'none')}.h5"
    shutil.copy(DATA / f"dataset_v{version}.h5", p)
    with h5py.File(p, "r+") as f:
        r = f["row"][:]
        del f["row"]
        if edit is not None:
            f["row"] = edit(r)
    return p


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("kind", sorted(EDITS))
def test_a_row_that_is_not_a_permutation_is_refused_naming_the_file_and_fix(tmp_path, capsys, version, kind):
    edit, what = EDITS[kind]
    p = with_row(tmp_path, version, edit)
    with pytest.raises(FormatError, match=f"^{p}: /row must map each stored row to its input line, a permutation "
                                          f"of 0..5; {what}{FIX}"):
        with streamrank.open_dataset(p) as ds:
            ds.row
    if version == 1:  # the commands read /row through the same property in either version
        return
    scores = tmp_path / "s.txt"
    for argv in (["predict", str(DATA / "model_v2.h5"), str(p), "-o", str(scores)], ["eval", str(p), str(scores)]):
        scores.write_text("0\n" * 6)
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(p) in err and "Traceback" not in err
        assert scores.read_text() == "0\n" * 6  # nothing written over the old scores


@pytest.mark.parametrize("version", [1, 2])
def test_a_missing_row_is_the_stored_order(tmp_path, version):
    p = with_row(tmp_path, version, None)
    from streamrank.state.model import load
    model = load(DATA / "model_v2.h5")
    with streamrank.open_dataset(p) as ds, streamrank.open_dataset(DATA / f"dataset_v{version}.h5") as ref:
        np.testing.assert_array_equal(ds.row, np.arange(6))
        stored = model.score_stream(ref)
        np.testing.assert_array_equal(model.predict_dataset(ds), stored)  # line i: stored row i
        np.testing.assert_array_equal(model.predict_dataset(ref)[ref.row], stored)


def test_any_integer_permutation_reads_as_int64(tmp_path):
    p = with_row(tmp_path, 2, lambda r: r.astype(np.uint16)[::-1])
    with streamrank.open_dataset(p) as ds:
        assert ds.row.dtype == np.int64 and ds.row.tolist() == [4, 3, 1, 5, 2, 0]


def test_not_a_permutation_against_sorting():
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(0, 9))
        r = rng.integers(-2, n + 2, n) if rng.random() < 0.5 else rng.permutation(n)
        expected = np.array_equal(np.sort(r), np.arange(n))
        assert (not_a_permutation(np.asarray(r, np.int64)) is None) == expected, r


def test_grid_refuses_a_valid_row_before_training(tmp_path, capsys):
    p = with_row(tmp_path, 2, EDITS["duplicate"][0])
    run = tmp_path / "run"
    assert main(["grid", str(DATA / "dataset_v2.h5"), "--valid", str(p), "-o", str(run), "--C", "0.5,1",
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/row must map each stored row" in err and not run.exists()
