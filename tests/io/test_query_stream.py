"""QueryStream: whole queries, byte budgets, prefetch, and sums that do not depend on block size."""

import shutil
import warnings

import h5py
import numpy as np
import pytest

import streamrank
from streamrank.io.convert import convert
from streamrank.errors import FormatError
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.io.query_stream import plan_blocks

from locations import TESTS as HERE  # noqa: E402


def make_dataset(path, n_queries=80, d=7, seed=0):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 60, n_queries)
    with DatasetWriter(path, n_features=d) as w:
        for q, s in enumerate(sizes):
            w.append(rng.standard_normal((s, d)).astype(np.float32),
                     rng.integers(0, 3, s).astype(np.float32), np.full(s, 100 + q, np.int64))
    return path


def per_query_xty(ds, **stream_kwargs):
    out = np.zeros((ds.n_queries, ds.n_features))
    n_blocks = 0
    for block, start, stop in ds.stream(**stream_kwargs):
        assert (block.start, block.stop) == (start, stop)
        assert block.X.dtype == np.float32 and block.X.shape == (stop - start, ds.n_features)
        # never splits a query: block edges are query edges
        assert ds.query_ptr[block.q_start] == start and ds.query_ptr[block.q_stop] == stop
        assert np.array_equal(block.query_ptr + start, ds.query_ptr[block.q_start:block.q_stop + 1])
        for k in range(block.n_queries):
            a, b = block.query_ptr[k], block.query_ptr[k + 1]
            out[block.q_start + k] = block.X[a:b].T.astype(np.float64) @ block.y[a:b]
        n_blocks += 1
    return out, n_blocks


def test_sums_do_not_depend_on_block_size(tmp_path):
    ds = streamrank.open_dataset(make_dataset(tmp_path / "d.h5"))
    row_bytes = 4 * ds.n_features + 4
    biggest = int(np.diff(ds.query_ptr).max()) * row_bytes
    ref, n_whole = per_query_xty(ds, block_bytes=ds.n_rows * row_bytes)
    assert n_whole == 1
    counts = {n_whole}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # 1 byte: every query is "too large"
        one, n_one = per_query_xty(ds, block_bytes=1)
    assert n_one == ds.n_queries and np.array_equal(one, ref)
    counts.add(n_one)
    for budget in (biggest, 3 * biggest, 10 * biggest):
        for prefetch in (True, False):
            got, n = per_query_xty(ds, block_bytes=budget, prefetch=prefetch)
            assert np.array_equal(got, ref)
            counts.add(n)
    assert len(counts) == 5  # the block counts really differ


def test_mq2008_sums_across_budgets(mq2008, tmp_path):
    convert([mq2008 / "Fold1" / "train.txt.gz"], tmp_path / "t.h5", quiet=True)
    with streamrank.open_dataset(tmp_path / "t.h5") as ds:
        ref, n_ref = per_query_xty(ds, memory_budget="1GB")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            one, n_one = per_query_xty(ds, block_bytes=1)
        mid, n_mid = per_query_xty(ds, block_bytes="100KB")
        assert (n_ref, n_one) == (1, 471) and 1 < n_mid < 471
        assert np.array_equal(one, ref) and np.array_equal(mid, ref)


def test_blocks_respect_the_budget_and_warn_on_huge_queries(tmp_path):
    ds = streamrank.open_dataset(make_dataset(tmp_path / "d.h5"))
    row_bytes = 4 * ds.n_features + 4
    budget = 80 * row_bytes
    stream = ds.stream(block_bytes=budget)
    for block, start, stop in stream:
        assert (stop - start) * row_bytes <= budget
    with pytest.warns(RuntimeWarning, match=r"larger than the block budget of 100 B .* read whole"):
        stream = ds.stream(block_bytes=100)
    for block, start, stop in stream:  # over budget only as a lone query
        assert (stop - start) * row_bytes <= 100 or block.n_queries == 1
    assert ds.n_queries / 2 < len(stream) < ds.n_queries  # small queries still share blocks


def test_query_range_and_plan():
    qp = np.array([0, 2, 5, 6, 10, 11])
    assert plan_blocks(qp, 1, 5).tolist() == [0, 2, 4, 5]
    assert plan_blocks(qp, 1, 100, 1, 4).tolist() == [1, 4]
    assert plan_blocks(qp, 1, 1).tolist() == [0, 1, 2, 3, 4, 5]


def test_stream_subset_of_queries(tmp_path):
    ds = streamrank.open_dataset(make_dataset(tmp_path / "d.h5"))
    ref, _ = per_query_xty(ds)
    seen = []
    for block, start, stop in ds.stream(queries=(10, 20), block_bytes=2000):
        seen.extend(range(block.q_start, block.q_stop))
    assert seen == list(range(10, 20))


def test_prefetch_stops_cleanly_when_the_consumer_breaks(tmp_path):
    ds = streamrank.open_dataset(make_dataset(tmp_path / "d.h5"))
    for k, _ in enumerate(ds.stream(block_bytes=5000)):
        if k == 2:
            break
    ds.close()


# -- format: fingerprint, refusal of unknown files, old versions still load --------------------------
def test_fingerprint_is_stable_and_content_based(tmp_path):
    a = make_dataset(tmp_path / "a.h5")
    shutil.copy(a, tmp_path / "copy.h5")
    b = make_dataset(tmp_path / "b.h5", seed=1)
    fa = streamrank.open_dataset(a).fingerprint
    assert fa == streamrank.open_dataset(tmp_path / "copy.h5").fingerprint
    assert fa != streamrank.open_dataset(b).fingerprint
    # a file written without the attribute gets the same hash from one pass
    with h5py.File(tmp_path / "copy.h5", "r+") as f:
        del f.attrs["content_sha256"]
    assert streamrank.open_dataset(tmp_path / "copy.h5").fingerprint == fa


def test_unknown_format_and_version_are_refused(tmp_path):
    p = make_dataset(tmp_path / "d.h5")
    with h5py.File(p, "r+") as f:
        f.attrs["version"] = 3
    with pytest.raises(FormatError, match=r"format version 3 is not supported .* newer streamrank; upgrade"):
        streamrank.open_dataset(p)
    with h5py.File(p, "r+") as f:
        f.attrs["format"] = "something-else"
    with pytest.raises(FormatError, match=r"not a streamrank dataset .*streamrank convert"):
        streamrank.open_dataset(p)
    text = tmp_path / "t.txt"
    text.write_text("0 qid:1 1:1\n")
    with pytest.raises(FormatError, match=r"t.txt: not an HDF5 file.*streamrank convert"):
        streamrank.open_dataset(text)


def test_released_v1_file_still_loads(caplog):
    """tests/data/dataset_v1.h5 was written by streamrank 0.1.0 (format version 1)."""
    from streamrank.io import dataset as dsmod
    dsmod._UNVERIFIED_SAID.clear()
    with caplog.at_level("WARNING"), streamrank.open_dataset(HERE / "data" / "dataset_v1.h5") as ds:
        assert not ds.verified and "carries no checksums" in caplog.text
        assert (ds.n_rows, ds.n_queries, ds.n_features) == (6, 3, 4)
        X, y = ds.read(0, ds.n_rows)
        assert list(ds.query_ids) == [7, 3, 9] and ds.row.tolist() == [0, 2, 5, 1, 3, 4]
        assert y.tolist() == [2, 1, 0, 0.5, 0, 1]
        assert X[4, 0] == 150 and ds.comments()[0] == "docid = a"
        assert ds.fingerprint == "07d05c83141ba027fe3eeecfb09e05ffcbec9cfa4943a56959b5391ca2cb0722"


def test_released_v2_file_loads_verified_with_the_content_of_v1(caplog):
    """tests/data/dataset_v2.h5: the same text as dataset_v1.h5, converted by format version 2
    (Fletcher-32 per chunk, index_sha256): the same rows, the same fingerprint, no warning."""
    with caplog.at_level("WARNING"), streamrank.open_dataset(HERE / "data" / "dataset_v2.h5") as v2, \
            streamrank.open_dataset(HERE / "data" / "dataset_v1.h5") as v1:
        assert v2.verified and v2.version == 2
        assert v2.fingerprint == v1.fingerprint
        for a, b in zip(v2.read(0, v2.n_rows), v1.read(0, v1.n_rows)):
            np.testing.assert_array_equal(a, b)
        assert v2.row.tolist() == v1.row.tolist() and list(v2.query_ids) == list(v1.query_ids)
        assert v2.comments() == v1.comments()
    assert "dataset_v2.h5" not in caplog.text
