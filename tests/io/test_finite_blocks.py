"""Every block is finite, whoever wrote the file (issue 30, Build 3).

Datasets here are written directly with h5py in the documented format (docs/formats.md), versions
1 and 2, or are copies of the released fixtures; a NaN, +inf or -inf is put in X or y at the first
row, the last row or a block boundary, and every way rows are read (streams of several block sizes,
with and without prefetch, kept in memory, direct reads of ``X`` / ``y``, a feature subset, the CLI)
must refuse it with the same row: the first row holding one (the label named when it is one).
The oracle is tests/io/finite_oracle.py (NumPy).
"""

import gc
import hashlib
import shutil

import h5py
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import finite_oracle as oracle
import streamrank
from locations import DATA, MQ2008
from streamrank._native import finite
from streamrank.errors import InputError
from streamrank.io import dataset as dsmod
from streamrank.io.feature_subset import FeatureSubset

BAD = [np.nan, np.inf, -np.inf]


# -- the kernel against its twin ---------------------------------------------------------------------
SPECIAL = np.array([0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF],
                   np.uint32)  # +inf, -inf, quiet NaN, negative NaN, signalling NaN, NaN payloads
FINITE_EDGES = np.array([0x7F7FFFFF, 0xFF7FFFFF, 0x00000001, 0x80000000, 0x00000000, 0x3F800000, 0x007FFFFF],
                        np.uint32)  # +-max, smallest subnormal, -0, 0, 1, largest subnormal


@settings(max_examples=150, deadline=None, derandomize=True)
@given(n=st.integers(0, 3 * finite._RUN + 5), spots=st.lists(st.tuples(st.floats(0, 1, exclude_max=True),
                                                                         st.integers(0, len(SPECIAL) - 1)), max_size=4),
       seed=st.integers(0, 2 ** 16))
def test_kernels_match_numpy(n, spots, seed):
    rng = np.random.default_rng(seed)
    bits = rng.choice(FINITE_EDGES, n) if seed % 2 else rng.standard_normal(n).astype(np.float32).view(np.uint32)
    bits = np.ascontiguousarray(bits, np.uint32)
    for where, k in spots:
        if n:
            bits[int(where * n)] = SPECIAL[k]
    assert finite.first_non_finite(bits) == oracle.first_non_finite(bits)
    assert finite.count_non_finite(bits) == oracle.count_non_finite(bits)


def test_kernel_at_run_edges():
    for n in (1, finite._RUN - 1, finite._RUN, finite._RUN + 1, 2 * finite._RUN):
        for at in {0, n - 1, min(n - 1, finite._RUN - 1), min(n - 1, finite._RUN)}:
            for v in SPECIAL:
                bits = np.zeros(n, np.uint32)
                bits[at] = v
                assert finite.first_non_finite(bits) == at
                assert finite.count_non_finite(bits) == 1
            bits = FINITE_EDGES[np.arange(n) % len(FINITE_EDGES)].copy()
            assert finite.first_non_finite(bits) == -1 and finite.count_non_finite(bits) == 0


# -- files in the documented format, written by "another tool" ---------------------------------------
def write_documented(path, X, y, query_ptr, qid, *, version=2, chunk_rows=7, row=None):
    """A dataset as docs/formats.md describes it, written with h5py alone (no streamrank writer)."""
    X, y = np.asarray(X, np.float32), np.asarray(y, np.float32)
    qp, qid = np.asarray(query_ptr, np.int64), np.asarray(qid, np.int64)
    ck = dict(fletcher32=True) if version == 2 else {}
    with h5py.File(path, "w") as f:
        f.attrs.update(format="streamrank-dataset", version=version, n_rows=len(y), n_features=X.shape[1],
                       n_queries=len(qid), index_base=1)
        f.create_dataset("X", data=X, chunks=(min(chunk_rows, len(y)), X.shape[1]), **ck)
        f.create_dataset("y", data=y, chunks=(min(chunk_rows, len(y)),), **ck)
        f.create_dataset("query_ptr", data=qp, **({"chunks": True, **ck} if version == 2 else {}))
        f.create_dataset("qid", data=qid, **({"chunks": True, **ck} if version == 2 else {}))
        f.create_dataset("row", data=np.arange(len(y)) if row is None else np.asarray(row, np.int64))
        if version == 2:
            f.attrs["index_sha256"] = hashlib.sha256(qp.tobytes() + qid.tobytes()).hexdigest()
    return path


def clean_data(seed=0, n_queries=30, d=5):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 10, n_queries)
    qp = np.concatenate([[0], np.cumsum(sizes)])
    n = int(qp[-1])
    return (rng.standard_normal((n, d)).astype(np.float32), rng.integers(0, 3, n).astype(np.float32), qp,
            np.arange(500, 500 + n_queries))


def stream_rows(ds, **kw):
    """Read every block of a stream; the InputError's message or None."""
    try:
        for _ in ds.stream(**kw):
            pass
    except InputError as e:
        return str(e)
    return None


def named_row(message):
    assert message is not None, "a non-finite value was read without an error"
    return int(message.split("stored row ")[1].split(",")[0])


STREAMS = [dict(block_bytes=b, prefetch=p, reuse_buffers=r) for b in (1, 100, 700, 4000, 10 ** 6)
           for p, r in ((True, True), (False, True), (True, False))]


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("column", ["X", "y"])
@pytest.mark.parametrize("scan_group", [10 ** 9, 150])
def test_every_stream_names_the_same_row_and_feature(tmp_path, monkeypatch, version, column, scan_group):
    monkeypatch.setattr(dsmod, "PIECE_BYTES", 150)  # pieces of 7 rows (one chunk): several per block
    monkeypatch.setattr(dsmod, "SCAN_GROUP_BYTES", scan_group)  # 150: the scanning thread, a group a piece
    X, y, qp, qid = clean_data()
    n = len(y)
    bounds_row = int(qp[np.searchsorted(qp, n // 2)])  # a query start: a block boundary for some sizes
    for k, value in enumerate(BAD):
        for at in (0, n - 1, bounds_row, bounds_row - 1, 7, 6):
            Xb, yb = X.copy(), y.copy()
            if column == "X":
                Xb[at, (at + k) % X.shape[1]] = value
            else:
                yb[at] = value
            expect = oracle.first_bad_row(Xb, yb)
            p = write_documented(tmp_path / f"v{version}.h5", Xb, yb, qp, qid, version=version)
            for kw in STREAMS:
                with streamrank.open_dataset(p) as ds:
                    msg = stream_rows(ds, **kw)
                assert named_row(msg) == expect[0], (kw, msg)
                if expect[1] is None:
                    assert f"label: {yb[at]}" in msg
                else:
                    assert f"feature {expect[1] + 1}: {Xb[at, expect[1]]}" in msg
                assert msg.startswith(str(p)) and f"input data row {at + 1}" in msg
                assert f"qid {qid[np.searchsorted(qp, at, side='right') - 1]}" in msg


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("scan_group", [10 ** 9, 40, 300])
def test_the_first_of_several_is_named_whatever_the_block_size(tmp_path, monkeypatch, version, scan_group):
    """Several bad values, in X and y: the first row holding one, label first at a tie, for every
    block size and piece size (the reading order of pieces and labels must not matter), scanned in
    the reading thread (scan_group 10^9) or by the scanning thread alongside the reads, in groups
    of one piece and of several."""
    monkeypatch.setattr(dsmod, "SCAN_GROUP_BYTES", scan_group)
    X, y, qp, qid = clean_data(seed=3, n_queries=60)
    rng = np.random.default_rng(7)
    for trial in range(12):
        Xb, yb = X.copy(), y.copy()
        for _ in range(int(rng.integers(1, 5))):
            r = int(rng.integers(0, len(y)))
            if rng.random() < 0.4:
                yb[r] = BAD[int(rng.integers(0, 3))]
            else:
                Xb[r, int(rng.integers(0, X.shape[1]))] = BAD[int(rng.integers(0, 3))]
        expect = oracle.first_bad_row(Xb, yb)
        p = write_documented(tmp_path / f"t{trial}.h5", Xb, yb, qp, qid, version=version,
                             chunk_rows=int(rng.integers(1, 40)))
        for piece in (1, 100, 10 ** 7):
            monkeypatch.setattr(dsmod, "PIECE_BYTES", piece)
            for b in (1, 300, 2000, 10 ** 7):
                with streamrank.open_dataset(p) as ds:
                    msg = stream_rows(ds, block_bytes=b)
                assert named_row(msg) == expect[0]
                assert ("label:" in msg) == (expect[1] is None)


@pytest.mark.parametrize("fixture", ["dataset_v1.h5", "dataset_v2.h5"])
@pytest.mark.parametrize("column", ["X", "y"])
def test_released_fixtures_with_a_value_set(tmp_path, fixture, column):
    for value in BAD:
        p = tmp_path / fixture
        shutil.copy(DATA / fixture, p)
        with h5py.File(p, "r+") as f:
            if column == "X":
                f["X"][5, 3] = value  # the last row, the last feature
            else:
                f["y"][0] = value
        with streamrank.open_dataset(p) as ds:
            assert ds.verified == (fixture == "dataset_v2.h5")
            msg = stream_rows(ds, block_bytes=1)
            what = "stored row 5, feature 4" if column == "X" else "stored row 0, label"
            assert what in msg
            # /row maps stored rows to the input's: [0, 2, 5, 1, 3, 4]
            assert f"input data row {5 if column == 'X' else 1}" in msg
            with pytest.raises(InputError, match=what):
                ds.read(0, ds.n_rows)
        with streamrank.open_dataset(p) as ds:  # the released writer's content_sha256: no pass needed
            nf = ds.non_finite()
            assert nf["count"] == 1 and nf["first"]["row"] == (5 if column == "X" else 0)


def test_clean_files_read_as_before_and_each_range_is_scanned_once(tmp_path, monkeypatch):
    X, y, qp, qid = clean_data()
    p = write_documented(tmp_path / "c.h5", X, y, qp, qid)
    calls = []
    real = finite.first_non_finite
    monkeypatch.setattr(finite, "first_non_finite", lambda bits: calls.append(bits.size) or real(bits))
    with streamrank.open_dataset(p) as ds:
        for _ in range(3):
            got = [(b.X.copy(), b.y.copy()) for b, _, _ in ds.stream(block_bytes=500)]
            np.testing.assert_array_equal(np.concatenate([g[0] for g in got]), X)
            np.testing.assert_array_equal(np.concatenate([g[1] for g in got]), y)
        first = len(calls)
        assert first > 0
        ds.stream(block_bytes=500)
        for _ in ds.stream(block_bytes=500):
            pass
        assert len(calls) == first  # rows read before in this process are not scanned again
        assert sum(calls) == X.size + y.size  # and each value was scanned exactly once
    with streamrank.open_dataset(p) as ds:  # another open (a dask worker's) scans its own reads
        for _ in ds.stream(block_bytes=500):
            pass
        assert len(calls) == 2 * first


def test_a_file_changed_between_opens_is_caught_on_the_next_open(tmp_path):
    X, y, qp, qid = clean_data()
    p = write_documented(tmp_path / "c.h5", X, y, qp, qid)
    with streamrank.open_dataset(p) as ds:
        assert stream_rows(ds, block_bytes=500) is None
    with h5py.File(p, "r+") as f:
        f["X"][10, 1] = np.inf
    with streamrank.open_dataset(p) as ds:
        assert named_row(stream_rows(ds, block_bytes=500)) == 10


def test_direct_reads_of_X_and_y_are_checked(tmp_path):
    from streamrank.training.problem import read_labels
    X, y, qp, qid = clean_data()
    y[20] = np.nan
    X[12, 3] = -np.inf
    p = write_documented(tmp_path / "d.h5", X, y, qp, qid, version=1)
    with streamrank.open_dataset(p) as ds:
        for read in (lambda: ds.y[:], lambda: ds.y[15:30], lambda: np.asarray(ds.y), lambda: read_labels(ds),
                     lambda: ds.labels(), lambda: ds.y[20]):
            with pytest.raises(InputError, match="stored row 20, label: nan"):
                read()
        buf = np.empty(len(y), np.float32)
        with pytest.raises(InputError, match="stored row 20, label: nan"):
            ds.y.read_direct(buf)
        for read in (lambda: ds.X[:], lambda: ds.X[10:14], lambda: ds.X[:, 3], lambda: ds.X[12],
                     lambda: ds.read(12, 13)):
            with pytest.raises(InputError, match="stored row 12, feature 4: -inf"):
                read()
        assert np.isfinite(ds.X[:12]).all() and np.isfinite(ds.y[:20]).all() and ds.X.shape == X.shape
        assert np.isnan(ds.labels(check=False)[20])
        with pytest.raises(InputError, match="stored row 12, feature 4"):
            ds.X[[1, 12]]  # a fancy selection: the file's first is named
        with pytest.raises(InputError, match="stored row 12, feature 4"):
            FeatureSubset(ds, [0, 1]).read(0, ds.n_rows)  # the whole row is checked, not only its columns
        with pytest.raises(InputError, match="stored row 12, feature 4"):
            for _ in FeatureSubset(ds, [4, 0]).stream(block_bytes=100):
                pass


def test_a_buffer_hdf5_cannot_fill_in_place_is_read_then_checked(tmp_path):
    X, y, qp, qid = clean_data()
    X[30, 0] = np.nan
    p = write_documented(tmp_path / "d.h5", X, y, qp, qid)
    with streamrank.open_dataset(p) as ds:
        strided = np.empty((len(y), 2 * X.shape[1]), np.float32)[:, ::2]
        with pytest.raises(InputError, match="stored row 30, feature 1: nan"):
            ds.read(0, len(y), out=(strided, np.empty(len(y), np.float32)))
        Xg, yg = ds.read(0, 30, out=(strided, np.empty(len(y), np.float32)))
        np.testing.assert_array_equal(Xg, X[:30])


def test_info_counts_and_names_the_first(tmp_path, capsys):
    from streamrank.cli.main import main
    X, y, qp, qid = clean_data()
    X[40, 2] = np.nan
    X[41, 0] = np.inf
    y[3] = -np.inf
    p = write_documented(tmp_path / "d.h5", X, y, qp, qid)
    assert main(["info", str(p)]) == 0
    out = capsys.readouterr().out
    assert "values      NOT FINITE: 3 values (2 of features, 1 of labels); the first: row 3, the label = -inf" in out
    assert main(["info", "--json", str(p)]) == 0
    import json
    nf = json.loads(capsys.readouterr().out)["non_finite"]
    assert (nf["count"], nf["count_features"], nf["count_labels"]) == (3, 2, 1)
    assert nf["first"]["row"] == 3 and nf["first"]["feature"] is None
    q = write_documented(tmp_path / "c.h5", *clean_data())
    assert main(["info", str(q)]) == 0
    assert "values      all finite" in capsys.readouterr().out


@pytest.mark.parametrize("version", [1, 2])
def test_commands_exit_2_naming_row_and_feature_and_write_nothing(tmp_path, capsys, version):
    from streamrank.cli.main import main
    X, y, qp, qid = clean_data(seed=5, n_queries=40)
    clean = write_documented(tmp_path / "clean.h5", X, y, qp, qid, version=version)
    model = tmp_path / "model.h5"
    assert main(["train", str(clean), "--C", "0.25", "-o", str(model), "--quiet"]) == 0
    n = len(y)
    cases = []
    for k, value in enumerate(BAD):
        for at in (0, n - 1, int(qp[20])):
            Xb = X.copy()
            Xb[at, k + 1] = value
            cases.append((Xb, y, f"stored row {at}, feature {k + 2}: {value}", True))
            yb = y.copy()
            yb[at] = value
            cases.append((X, yb, f"stored row {at}, label: {value}", False))
    for i, (Xb, yb, what, in_x) in enumerate(cases[::2] + cases[1::6]):
        bad = write_documented(tmp_path / f"bad{i}.h5", Xb, yb, qp, qid, version=version)
        out = tmp_path / f"out{i}"
        commands = [["train", str(bad), "--C", "0.25", "-o", f"{out}.model.h5"],
                    ["train", str(bad), "--C", "0.25", "--memory-budget", "300KB", "-o", f"{out}.model.h5"],
                    ["predict", str(model), str(bad), "-o", f"{out}.scores.txt"],
                    ["select-features", str(bad), "-o", f"{out}.gas.h5"]]
        if not in_x:  # eval reads the labels only (a score file against them)
            scores = tmp_path / "scores.txt"
            scores.write_text("\n".join("0.5" for _ in range(n)) + "\n")
            commands.append(["eval", str(bad), str(scores)])
        for argv in commands:
            capsys.readouterr()
            assert main(argv) == 2, argv
            err = capsys.readouterr().err
            lines = [ln for ln in err.splitlines() if "error:" in ln]  # beside the log's lines
            assert len(lines) == 1 and what in lines[0] and str(bad) in lines[0], (argv, err)
            assert "Traceback" not in err
        assert not list(tmp_path.glob(f"out{i}*")) and not list(tmp_path.glob(f".out{i}*"))


@pytest.mark.skipif(not (MQ2008 / "Fold1" / "train.txt.gz").exists(), reason="MQ2008 not present (../shared/data)")
def test_issue_repro_on_mq2008_exits_2_instead_of_looping(tmp_path, capsys):
    """Issue 30's repro: X[500, 2] = nan in a converted MQ2008 Fold1 looped `iter 0 ... (rejected)`."""
    from streamrank.cli.main import main
    d = tmp_path / "d.h5"
    assert main(["convert", str(MQ2008 / "Fold1" / "train.txt.gz"), "-o", str(d), "--quiet"]) == 0
    for value in (np.nan, np.inf):
        gc.collect()  # the failed run's dataset sits in a cycle with its exception's frames
        with h5py.File(d, "r+") as f:
            f["X"][500, 2] = value
        capsys.readouterr()
        assert main(["train", str(d), "--C", "0.25", "-o", str(tmp_path / "m.h5")]) == 2
        assert f"stored row 500, feature 3: {value}" in capsys.readouterr().err
        assert not (tmp_path / "m.h5").exists()


@pytest.mark.filterwarnings("ignore:.*larger than the block budget")
def test_a_dask_worker_checks_the_rows_it_reads(tmp_path):
    """Workers reopen the file by its path and read their partitions themselves: each open checks
    its own reads, and the worker's InputError reaches the caller. With two bad rows in different
    partitions on two workers, the first in data order is named every time, whichever worker
    fails first (the executor raises the earliest partition's error, as a local pass does)."""
    pytest.importorskip("distributed")
    from streamrank.execution.dask_executor import DaskExecutor, start_cluster
    from streamrank.training.linear import train_linear
    X, y, qp, qid = clean_data(seed=9, n_queries=60)
    X[len(y) - 1, 4] = np.inf  # in the last partition
    X[len(y) // 3, 2] = np.nan  # in an earlier one, usually on the other worker
    p = write_documented(tmp_path / "d.h5", X, y, qp, qid)
    client, cluster = start_cluster(workers=2)
    try:
        ex = DaskExecutor(client, partition_rows=50)
        for _ in range(3):
            with streamrank.open_dataset(p) as ds, \
                    pytest.raises(InputError, match=rf"stored row {len(y) // 3}, feature 3: nan"):
                train_linear(ds, C=(1.0,), block_bytes=2000, executor=ex)
        ex.close()
    finally:
        client.close()
        cluster.close()


def test_two_threads_reading_one_dataset_get_their_own_rows(tmp_path):
    """The row readers keep a selection per thread: two streams of one open file, read at once
    from two threads (first reads, in pieces), each get the file's rows."""
    import threading
    X, y, qp, qid = clean_data(seed=11, n_queries=400)
    p = write_documented(tmp_path / "d.h5", X, y, qp, qid, chunk_rows=3)
    got, errors = {}, []
    with streamrank.open_dataset(p) as ds:
        def run(k, block_bytes):
            try:
                for _ in range(3):
                    blocks = [(a, b, blk.X.copy(), blk.y.copy()) for blk, a, b in ds.stream(block_bytes=block_bytes)]
                got[k] = blocks
            except Exception as e:  # noqa: BLE001 -- reported below
                errors.append(e)
        threads = [threading.Thread(target=run, args=(k, b)) for k, b in enumerate((240, 330))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    for blocks in got.values():
        for a, b, Xb, yb in blocks:
            np.testing.assert_array_equal(Xb, X[a:b])
            np.testing.assert_array_equal(yb, y[a:b])
