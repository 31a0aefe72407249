"""Damaged and hostile dataset files are refused with a message naming the file and the fault, never
read as other numbers (issue 12: a flipped bit in /X used to train other weights with exit 0)."""

import shutil

import h5py
import numpy as np
import pytest

import streamrank
from locations import DATA
from streamrank.errors import FormatError, InputError
from streamrank.io import dataset as dsmod
from streamrank.io.hdf5_format import DatasetWriter


def make(path, n_queries=40, d=6, seed=0, qid_str=False):
    rng = np.random.default_rng(seed)
    with DatasetWriter(path, n_features=d, chunk_bytes=2000) as w:
        for q in range(n_queries):
            s = int(rng.integers(1, 30))
            qid = np.full(s, f"q{q}".encode(), "S8") if qid_str else np.full(s, 100 + q, np.int64)
            w.append(rng.standard_normal((s, d)).astype(np.float32), rng.integers(0, 3, s).astype(np.float32), qid)
    return path


def read_all(path):
    with streamrank.open_dataset(path) as ds:
        for _ in ds.stream(block_bytes=4000):
            pass
        return ds.read(0, ds.n_rows)


def flip(path, offset, bit=0):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ (1 << bit)]))


def chunk_extents(path, name):
    with h5py.File(path, "r") as f:
        d = f[name]
        return [(d.id.get_chunk_info(k).byte_offset, d.id.get_chunk_info(k).size) for k in range(d.id.get_num_chunks())]


def test_the_writer_makes_verified_version_2_files(tmp_path):
    p = make(tmp_path / "d.h5")
    with h5py.File(p, "r") as f:
        assert f.attrs["version"] == 2
        assert all(f[n].fletcher32 for n in ("X", "y", "row", "query_ptr", "qid"))
    with streamrank.open_dataset(p) as ds:
        assert ds.verified


@pytest.mark.parametrize("name", ["X", "y"])
def test_every_flipped_bit_in_the_rows_is_refused(tmp_path, name):
    ref = make(tmp_path / "ref.h5")
    rng = np.random.default_rng(7)
    extents = chunk_extents(ref, name)
    assert len(extents) >= 3
    for trial in range(10):
        p = tmp_path / f"flip{trial}.h5"
        shutil.copy(ref, p)
        off, size = extents[int(rng.integers(len(extents)))]
        flip(p, off + int(rng.integers(size)), int(rng.integers(8)))
        with pytest.raises(FormatError, match=r"flip\d\.h5: rows \d+ to \d+ cannot be read .*checksum mismatch"):
            read_all(p)


def test_a_flipped_index_is_refused_when_the_file_opens(tmp_path):
    for qid_str in (False, True):
        ref = make(tmp_path / f"ref{qid_str}.h5", qid_str=qid_str)
        for name in ("query_ptr",) + (() if qid_str else ("qid",)):
            p = tmp_path / f"idx_{name}_{qid_str}.h5"
            shutil.copy(ref, p)
            off, size = chunk_extents(p, name)[0]
            flip(p, off + 3)
            with pytest.raises(FormatError, match=r"cannot read its index|does not match index_sha256"):
                streamrank.open_dataset(p)
    # string query ids carry no filter: the index digest finds a changed id
    p = tmp_path / "qid_text.h5"
    shutil.copy(tmp_path / "refTrue.h5", p)
    with h5py.File(p, "r+") as f:
        f["qid"][3] = "zz"
    with pytest.raises(FormatError, match="does not match index_sha256"):
        streamrank.open_dataset(p)


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, 0.99])
def test_a_truncated_file_is_refused(tmp_path, keep):
    ref = make(tmp_path / "ref.h5")
    p = tmp_path / "cut.h5"
    data = ref.read_bytes()
    p.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises((FormatError, InputError), match="cut.h5"):
        read_all(p)


@pytest.mark.parametrize("change, message", [
    (lambda f: f.attrs.__setitem__("n_rows", "abc"), r"attribute 'n_rows' is 'abc', not an integer"),
    (lambda f: f.attrs.__setitem__("n_rows", 10 ** 15), r"does not have the shape its attributes declare"),
    (lambda f: f.attrs.__setitem__("n_features", -3), r"negative sizes"),
    (lambda f: f.attrs.__setitem__("n_queries", 10 ** 12), r"does not have the 1000000000000 queries"),
    (lambda f: f.attrs.__delitem__("n_rows"), r"attribute 'n_rows' is missing"),
    (lambda f: f.__delitem__("y"), r"incomplete: /y is missing"),
])
def test_attributes_that_lie_are_refused_before_any_allocation(tmp_path, change, message):
    p = make(tmp_path / "d.h5")
    with h5py.File(p, "r+") as f:
        change(f)
    with pytest.raises(FormatError, match=message):
        streamrank.open_dataset(p)


def v1_copy(tmp_path, name="v1.h5"):
    """The released version 1 file (no checksums), copied so that a test may damage it."""
    p = tmp_path / name
    shutil.copy(DATA / "dataset_v1.h5", p)
    return p


def test_version_1_files_are_checked_for_order_and_finite_values(tmp_path):
    p = v1_copy(tmp_path)
    with h5py.File(p, "r+") as f:
        f["query_ptr"][1] = 10 ** 9  # non-monotone: segfaulted train before
    with pytest.raises(FormatError, match=r"/query_ptr is not a non-decreasing list from 0 to 6 rows"):
        streamrank.open_dataset(p)
    for value, where in ((np.nan, "X"), (np.inf, "X"), (np.nan, "y")):
        p = v1_copy(tmp_path, f"v1_{where}_{value}.h5")
        with h5py.File(p, "r+") as f:
            if where == "X":
                f["X"][4, 2] = value
            else:
                f["y"][3] = value
        with streamrank.open_dataset(p) as ds:
            what = r"row 4, feature 3: (nan|inf)" if where == "X" else r"row 3, label: nan"
            with pytest.raises(InputError, match=rf"stored {what} is not a finite number"):
                ds.read(0, ds.n_rows)


def test_a_foreign_file_claiming_version_2_without_checksums_is_refused(tmp_path):
    p = v1_copy(tmp_path)
    with h5py.File(p, "r+") as f:
        f.attrs["version"] = 2
    with pytest.raises(FormatError, match="claims format version 2 but /X or /y carries no checksums"):
        streamrank.open_dataset(p)


def test_the_writer_refuses_non_finite_values_naming_row_and_feature(tmp_path):
    X = np.ones((5, 3), np.float32)
    X[2, 1] = np.inf
    with pytest.raises(InputError, match=r"d.h5: input row 7, feature 2: inf is not a finite number"):
        with DatasetWriter(tmp_path / "d.h5", n_features=3) as w:
            w.append(np.ones((5, 3), np.float32), np.zeros(5, np.float32), np.zeros(5, np.int64))
            w.append(X, np.zeros(5, np.float32), np.ones(5, np.int64))
    assert not (tmp_path / "d.h5").exists() and not list(tmp_path.glob(".*tmp*"))
    with pytest.raises(InputError, match=r"input row 0, label: nan"):
        with DatasetWriter(tmp_path / "e.h5", n_features=3) as w:
            w.append(np.ones((2, 3), np.float32), np.array([np.nan, 1], np.float32), np.zeros(2, np.int64))


def test_a_directory_is_not_a_dataset(tmp_path):
    with pytest.raises(InputError, match="is a directory"):
        dsmod.Dataset(tmp_path)


def test_rows_verified_once_are_read_again_without_the_checksum(tmp_path):
    """The first read of a block checks its chunks; the same rows read again in this process skip
    HDF5's checksum (io.h5_edc) and hold the same bytes; a damaged file is refused on the first read
    of every new open."""
    from streamrank.io.h5_edc import no_check_dxpl
    assert no_check_dxpl() is not None  # h5py's HDF5 found: the fast path is the one tested here
    p = make(tmp_path / "d.h5")
    with streamrank.open_dataset(p) as ds:
        first = [(a, b, blk.X.copy(), blk.y.copy()) for blk, a, b in ds.stream(block_bytes=4000)]
        assert all((a, b) in ds._verified for a, b, _, _ in first)
        for (blk, a, b), (a0, b0, X0, y0) in zip(ds.stream(block_bytes=4000), first):
            assert (a, b) == (a0, b0)
            np.testing.assert_array_equal(blk.X, X0)
            np.testing.assert_array_equal(blk.y, y0)
    off, size = chunk_extents(p, "X")[1]
    flip(p, off + size // 2)
    for _ in range(2):  # every open verifies afresh
        with pytest.raises(FormatError, match="checksum mismatch"):
            read_all(p)
