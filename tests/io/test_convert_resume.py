"""A conversion killed or interrupted after a commit continues from it when run again, and writes
exactly the file an uninterrupted conversion writes (issue 12: "conversion of large inputs
resumes rather than restarts"); a partial file that does not check out, other inputs or other
settings start again; two conversions of one output exclude each other."""

import gzip
import logging
import os
import signal
import subprocess
import sys

import h5py
import numpy as np
import pytest

import streamrank
from streamrank.errors import InputError
from streamrank.io import convert_progress as progress
from streamrank.io.convert import convert

KW = dict(quiet=True, text_chunk_bytes=4096, commit_seconds=0.0)


def lines(n, seed=0, scattered=False, widen_at=None, scales=False):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        q = int(rng.integers(0, n // 20)) if scattered else i // 20
        d = 12 if widen_at is not None and i >= widen_at else 8
        v = rng.standard_normal(d) * (10.0 ** rng.integers(-6, 7, d) if scales else 1)
        feats = " ".join(f"{j + 1}:{x:.7g}" for j, x in enumerate(v))
        out.append(f"{rng.integers(0, 5)} qid:{q} {feats} # doc {i} \u00e9")
    return "\n".join(out) + "\n"


def content(path):
    with h5py.File(path, "r") as f:
        arrays = {n: f[n][()] for n in ("X", "y", "row", "query_ptr", "qid", "comment/data", "comment/ptr") if n in f}
        attrs = {k: f.attrs[k] for k in ("content_sha256", "index_sha256", "n_rows", "n_features", "source")}
    return arrays, attrs


def same(a, b):
    (xa, aa), (xb, ab) = content(a), content(b)
    assert aa == ab
    assert xa.keys() == xb.keys()
    for k in xa:
        np.testing.assert_array_equal(xa[k], xb[k])


def killed(inputs, out, point, query_files=None):
    """Run convert in a child that is SIGKILLed at the given fault point."""
    code = ("import sys; from streamrank.io.convert import convert; "
            f"convert({[str(p) for p in inputs]!r}, {str(out)!r}, quiet=True, text_chunk_bytes=4096, "
            f"commit_seconds=0.0, query_files={None if query_files is None else [str(q) for q in query_files]!r})")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "STREAMRANK_TEST_KILL": point},
                       capture_output=True, text=True)
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]


def leftovers(d):
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("case", ["plain", "gzip-two-inputs", "scattered", "widening", "query-files"])
def test_a_killed_conversion_continues_to_the_same_file(tmp_path, case, caplog):
    if case == "gzip-two-inputs":
        a, b = tmp_path / "a.txt.gz", tmp_path / "b.txt"
        with gzip.open(a, "wt") as f:
            f.write(lines(600, seed=1, scales=True))
        b.write_text(lines(500, seed=2))
        inputs, qf = [a, b], None
    elif case == "query-files":
        a = tmp_path / "a.txt"
        a.write_text("".join(ln.split(" ", 2)[0] + " " + ln.split(" ", 2)[2] + "\n"
                             for ln in lines(900, seed=3).splitlines()))
        qf = [tmp_path / "a.query"]
        qf[0].write_text("\n".join(["30"] * 30) + "\n")
        inputs = [a]
    else:
        a = tmp_path / "a.txt"
        a.write_text(lines(1200, seed=4, scattered=case == "scattered", widen_at=700 if case == "widening" else None))
        inputs, qf = [a], None
    ref = tmp_path / "ref.h5"
    convert(inputs, ref, query_files=qf, **KW)
    out = tmp_path / "out.h5"
    # widening: also killed on the append that widens X, after the last commit (line 700 is in chunk 26)
    points = ("convert-commit:3", "dataset-append:9", "convert-commit:7") + \
        (("dataset-append:26", "convert-commit:30") if case == "widening" else ())
    for point in points:
        killed(inputs, out, point, qf)
        assert not out.exists() and progress.work_paths(out)[0].exists()
        with caplog.at_level(logging.INFO, logger="streamrank"):
            stats = convert(inputs, out, query_files=qf, **KW)
        assert stats["resumed_rows"] > 0 and "continuing the conversion committed earlier" in caplog.text
        same(out, ref)
        assert leftovers(tmp_path) == []
        out.unlink()
        caplog.clear()


def test_a_damaged_partial_file_or_other_inputs_start_again(tmp_path, caplog):
    a = tmp_path / "a.txt"
    a.write_text(lines(1200, seed=5))
    ref = tmp_path / "ref.h5"
    convert([a], ref, **KW)
    out = tmp_path / "out.h5"
    work = progress.work_paths(out)[0]
    killed([a], out, "convert-commit:8")
    with h5py.File(work, "r") as f:
        info = f["X"].id.get_chunk_info(1)
    with open(work, "r+b") as f:  # one flipped bit in a committed chunk of X
        f.seek(info.byte_offset + 5)
        b = f.read(1)[0]
        f.seek(info.byte_offset + 5)
        f.write(bytes([b ^ 4]))
    with caplog.at_level(logging.INFO, logger="streamrank"):
        stats = convert([a], out, **KW)
    assert stats["resumed_rows"] == 0 and "cannot be continued" in caplog.text
    same(out, ref)
    out.unlink()
    caplog.clear()
    killed([a], out, "convert-commit:4")
    a.write_text(lines(1200, seed=6))  # the input changed since
    with caplog.at_level(logging.INFO, logger="streamrank"):
        stats = convert([a], out, **KW)
    assert stats["resumed_rows"] == 0 and "other inputs or settings" in caplog.text
    assert leftovers(tmp_path) == []
    with streamrank.open_dataset(out) as ds:
        assert ds.n_rows == 1200


def test_bad_input_discards_the_partial_file_and_an_interrupt_keeps_it(tmp_path, monkeypatch):
    a = tmp_path / "a.txt"
    a.write_text(lines(1000, seed=7) + "1 qid:9 1:abc\n")
    with pytest.raises(InputError, match=r"a.txt:1001: the feature value is not a number"):
        convert([a], tmp_path / "out.h5", **KW)
    assert leftovers(tmp_path) == []
    a.write_text(lines(1000, seed=7))
    from streamrank.io import convert as conv
    calls = {"n": 0}
    real = conv._Parser.parse

    def interrupted(self, *args):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(self, *args)
    monkeypatch.setattr(conv._Parser, "parse", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert([a], tmp_path / "out.h5", **KW)
    assert progress.work_paths(tmp_path / "out.h5")[0].exists() and not (tmp_path / "out.h5").exists()
    monkeypatch.undo()
    assert convert([a], tmp_path / "out.h5", **KW)["resumed_rows"] > 0
    assert leftovers(tmp_path) == []


def test_two_conversions_of_one_output_exclude_each_other(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text(lines(100))
    lock = progress.Lock(progress.work_paths(tmp_path / "out.h5")[2], tmp_path / "out.h5")
    try:
        with pytest.raises(InputError, match="another conversion is writing it now"):
            convert([a], tmp_path / "out.h5", **KW)
    finally:
        lock.release(remove=True)
    convert([a], tmp_path / "out.h5", **KW)


def test_an_interrupted_close_keeps_the_partial_and_the_record_stays_small(tmp_path, monkeypatch, caplog):
    """Ctrl-C while a scattered file is regrouped at the end keeps what was committed; the run
    again continues from it. The progress record holds counts, not the queries (those go into
    the partial file, appended per commit)."""
    from streamrank.io import hdf5_format
    a = tmp_path / "a.txt"
    a.write_text(lines(1500, seed=8, scattered=True))
    ref = tmp_path / "ref.h5"
    convert([a], ref, **KW)
    real = hdf5_format.DatasetWriter._regroup

    def interrupted(self, *args):
        raise KeyboardInterrupt
    monkeypatch.setattr(hdf5_format.DatasetWriter, "_regroup", interrupted)
    with caplog.at_level(logging.INFO, logger="streamrank"), pytest.raises(KeyboardInterrupt):
        convert([a], tmp_path / "out.h5", **KW)
    assert "the rows committed so far are kept" in caplog.text
    work, record, _ = progress.work_paths(tmp_path / "out.h5")
    assert work.exists() and record.stat().st_size < 4096
    monkeypatch.setattr(hdf5_format.DatasetWriter, "_regroup", real)
    assert convert([a], tmp_path / "out.h5", **KW)["resumed_rows"] == 1500
    same(tmp_path / "out.h5", ref)
    assert leftovers(tmp_path) == []


def test_a_widened_partial_with_chunks_mixed_up_starts_again(tmp_path, caplog):
    a = tmp_path / "a.txt"
    a.write_text(lines(1200, seed=9, widen_at=300))
    ref = tmp_path / "ref.h5"
    convert([a], ref, **KW)
    out = tmp_path / "out.h5"
    killed([a], out, "convert-commit:25")
    work = progress.work_paths(out)[0]
    with h5py.File(work, "r") as f:
        one, two = f["X"].id.get_chunk_info(1), f["X"].id.get_chunk_info(2)
    assert one.size == two.size
    with open(work, "r+b") as f:  # chunk 1's bytes (with its own valid checksum) over chunk 2
        f.seek(one.byte_offset)
        data = f.read(one.size)
        f.seek(two.byte_offset)
        f.write(data)
    with caplog.at_level(logging.INFO, logger="streamrank"):
        assert convert([a], out, **KW)["resumed_rows"] == 0
    assert "cannot be continued" in caplog.text
    same(out, ref)


def test_api_edges_numpy_widths_missing_directories_and_bad_settings(tmp_path):
    from streamrank.errors import ParameterError, StorageError
    a = tmp_path / "a.txt"
    a.write_text(lines(300))
    convert([a], tmp_path / "n.h5", n_features=np.int64(8), **KW)  # committed with a numpy width
    with pytest.raises(StorageError, match="nodir"):
        convert([a], tmp_path / "nodir" / "o.h5", **KW)
    with pytest.raises(ValueError, match="compression"):
        convert([a], tmp_path / "z.h5", compression="zstd", **KW)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ParameterError, match="commit_seconds must be a finite number >= 0"):
            convert([a], tmp_path / "c.h5", quiet=True, commit_seconds=bad)
    assert leftovers(tmp_path) == []


def test_two_commands_on_one_text_file_share_its_conversion(tmp_path):
    """Text DATA is converted into the cache once; a second command that asks meanwhile waits for it."""
    a = tmp_path / "a.txt"
    a.write_text(lines(20000, seed=10))
    (tmp_path / "s.txt").write_text("\n".join(["0.5"] * 20000) + "\n")
    argv = [sys.executable, "-m", "streamrank", "eval", str(a), str(tmp_path / "s.txt"), "--cache-dir",
            str(tmp_path / "cache")]
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    second = subprocess.run(argv, capture_output=True, text=True)
    assert first.wait() == 0 and second.returncode == 0, (first.stderr.read(), second.stderr)
    assert len(list((tmp_path / "cache").glob("*.h5"))) == 1
    assert [p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith(".")] == []


def _interrupted_after(monkeypatch, conv, chunks):
    """convert raises KeyboardInterrupt when it is handed its chunk number ``chunks + 1`` (kept partial)."""
    calls = {"n": 0}
    real = conv._Parser.parse

    def interrupted(self, *args):
        calls["n"] += 1
        if calls["n"] > chunks:
            raise KeyboardInterrupt
        return real(self, *args)
    monkeypatch.setattr(conv._Parser, "parse", interrupted)


def _edit_in_place(path, old, new):
    """Replace the first ``old`` with ``new`` (same length), keeping size and modification time, as
    ``cp -p`` or ``rsync -t`` of an edited file leave them."""
    st = path.stat()
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    path.write_bytes(data.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


@pytest.mark.parametrize("where", ["being-read", "done", "query-file"])
def test_an_input_edited_in_place_with_the_same_size_and_mtime_is_converted_again(tmp_path, monkeypatch, caplog,
                                                                                    where):
    """A commit proves the text it continues from by its bytes: the old rows are never kept with
    the new file's sha256 recorded (a mutant that trusts size and mtime keeps row 0's old label)."""
    from streamrank.io import convert as conv
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("0" + lines(300, seed=8)[1:])
    b.write_text(lines(300, seed=9))
    inputs, qf = ([a, b], None) if where == "done" else ([a], None)
    if where == "query-file":
        a.write_text("".join(ln.split(" ", 2)[0] + " " + ln.split(" ", 2)[2] + "\n"
                             for ln in ("0" + lines(300, seed=8)[1:]).splitlines()))
        qf = [tmp_path / "a.query"]
        qf[0].write_text("\n".join(["30"] * 10) + "\n")
    out = tmp_path / "out.h5"
    # a.txt and b.txt are 9 chunks of 4 KB each: "done" stops inside b.txt, the others inside a.txt
    _interrupted_after(monkeypatch, conv, 13 if where == "done" else 5)
    with pytest.raises(KeyboardInterrupt):
        convert(inputs, out, query_files=qf, **KW)
    monkeypatch.undo()
    assert progress.work_paths(out)[0].exists()
    if where == "query-file":
        _edit_in_place(qf[0], b"30\n30\n", b"20\n40\n")
    else:
        _edit_in_place(a, b"0 qid:0", b"2 qid:0")
    with caplog.at_level(logging.INFO, logger="streamrank"):
        stats = convert(inputs, out, query_files=qf, **KW)
    assert stats["resumed_rows"] == 0
    assert ("is not the text converted before" if where != "query-file" else "other inputs or settings") in caplog.text
    ref = tmp_path / "ref.h5"
    convert(inputs, ref, query_files=qf, **KW)
    same(out, ref)
    with streamrank.open_dataset(out) as ds:
        if where == "query-file":
            assert np.diff(ds.query_ptr)[:2].tolist() == [20, 40]
        else:
            assert ds.read(0, 1)[1][0] == 2  # row 0's label as the text now says
    assert leftovers(tmp_path) == []


def test_an_unchanged_input_resumes_after_its_digest_is_checked(tmp_path, monkeypatch):
    """The same bytes (a copy with a new mtime keeps the identity out; here only the digest is read
    again) resume: the check does not refuse what it should keep."""
    from streamrank.io import convert as conv
    a = tmp_path / "a.txt"
    a.write_bytes(lines(300, seed=10).replace("\n", "\r").encode())  # CR-only line ends resume too
    out = tmp_path / "out.h5"
    _interrupted_after(monkeypatch, conv, 5)
    with pytest.raises(KeyboardInterrupt):
        convert([a], out, **KW)
    monkeypatch.undo()
    assert convert([a], out, **KW)["resumed_rows"] > 0
    ref = tmp_path / "ref.h5"
    convert([a], ref, **KW)
    same(out, ref)
    with streamrank.open_dataset(out) as ds:
        assert ds.n_rows == 300
