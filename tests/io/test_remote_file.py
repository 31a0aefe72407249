"""RemoteFile (io.remote_file) against the bytes themselves: whatever was prefetched, whatever the
reads, a read gives the object's bytes at its position (fsspec's memory:// file system as the
store: no server needed)."""

import io

import fsspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrank.io import remote_file
from streamrank.io.remote_file import RemoteFile


def _object(n, seed=0):
    data = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()
    fs = fsspec.filesystem("memory")
    fs.pipe(f"/rf/{n}-{seed}", data)
    return fs, f"/rf/{n}-{seed}", data


_range = st.tuples(st.integers(0, 5000), st.integers(0, 5000)).map(sorted)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 4000), prefetches=st.lists(st.lists(_range, max_size=6), max_size=4),
       reads=st.lists(st.tuples(st.integers(0, 4200), st.integers(0, 3000)), min_size=1, max_size=12),
       block=st.sampled_from([7, 64, 1000]))
def test_every_read_gives_the_objects_bytes(n, prefetches, reads, block):
    fs, path, data = _object(n)
    old = remote_file.BLOCK, remote_file.MERGE_GAP, remote_file.PART
    # small blocks and parts: many edges, ranges fetched in several pieces
    remote_file.BLOCK, remote_file.MERGE_GAP, remote_file.PART = block, block // 2, max(1, block // 3)
    try:
        f = RemoteFile(fs, path, n)
        for k, (pos, size) in enumerate(reads):
            if k < len(prefetches):
                f.prefetch([(a, min(b, n)) for a, b in prefetches[k] if min(b, n) > a])
            f.seek(pos)
            got = f.read(size)
            assert got == data[pos:pos + size]
            assert f.tell() == min(pos + size, max(pos, n)) or pos >= n
    finally:
        remote_file.BLOCK, remote_file.MERGE_GAP, remote_file.PART = old


def test_h5py_reads_a_file_through_it():
    import h5py
    buf = io.BytesIO()
    with h5py.File(buf, "w") as h:
        h.create_dataset("x", data=np.arange(10000.0), chunks=(100,))
    fs = fsspec.filesystem("memory")
    fs.pipe("/rf/h.h5", buf.getvalue())
    f = RemoteFile(fs, "/rf/h.h5", len(buf.getvalue()))
    with h5py.File(f, "r") as h:
        assert np.array_equal(h["x"][:], np.arange(10000.0))
    assert f.requests >= 1 and f.fetched >= len(buf.getvalue()) * 0.5
