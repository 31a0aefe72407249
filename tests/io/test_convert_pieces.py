"""streamrank convert parses each chunk of text in pieces side by side (io.convert, _native.parallel):
the file it writes is byte for byte the one-thread file, and bad input fails with the same message
naming the same file and line, whatever the pieces, the chunk size and the input's quirks
(issue 34, target 2). The one-thread file is checked against the grammar's own parser too."""

import contextlib
from unittest import mock

import h5py
import numpy as np
import pytest

import number_grammar as grammar
from streamrank._native import parallel
from streamrank.errors import InputError
from streamrank.io import _textparse as tp
from streamrank.io import convert as conv
from streamrank.io.convert import convert


@contextlib.contextmanager
def parsing(threads):
    """Conversions on ``threads`` threads; with more than one, every chunk is cut into pieces however
    small it is. Yields the (first, end) line ranges the text kernel was called on."""
    calls = []
    real = tp.parse_lines

    def spy(k0, k1, *args):
        calls.append((k0, k1))
        real(k0, k1, *args)
    with mock.patch.object(parallel, "threads", lambda: threads), \
            mock.patch.object(parallel, "SERIAL_WORK", 0 if threads > 1 else parallel.SERIAL_WORK), \
            mock.patch.object(tp, "parse_lines", spy):
        yield calls


def outcome(src, out, threads, **kw):
    """(file bytes, None) of a conversion, or (None, message) of its InputError; and the kernel's calls."""
    out.unlink(missing_ok=True)
    with parsing(threads) as calls:
        try:
            convert(src if isinstance(src, list) else [src], out, quiet=True, **kw)
        except InputError as e:
            assert not out.exists()
            return (None, str(e)), calls
    return (out.read_bytes(), None), calls


def assert_pieces_write_the_same(tmp_path, src, threads=(2, 3), **kw):
    """Every thread count gives the one-thread outcome, byte for byte; the pieces were really cut."""
    want, calls = outcome(src, tmp_path / "one.h5", 1, **kw)
    assert all(k0 == 0 for k0, _ in calls)
    for t in threads:
        got, calls = outcome(src, tmp_path / f"t{t}.h5", t, **kw)
        assert got == want, (t, kw)
        assert any(k0 > 0 for k0, _ in calls), "no chunk was parsed in pieces"
    return want


VALUES = ["0.5", "1", "-2.25", "0.000000", "1e-3", "1.5E+2", ".5", "7.", "-0", "+3.25", "0.123456",
          "123456789012345678901",      # more digits than the fast path takes: Python's float
          "3.4028234e38", "4e-46", "1.00000000000000000001", "00000000000000000000.5", "9007199254740993"]


def hostile_lines(rng, n, qids=("1", "2", "3", "7", "12"), query_file=False, widen_at=None):
    """Rows with a mix of every quirk: long queries that cross chunk edges and queries that come back
    (regrouped), comment and blank lines, '#' after rows, tabs, unsorted indices, rows without
    features, values the fast path leaves to the general path; a wider index from ``widen_at``."""
    lines, q = ["# a header", ""], qids[0]
    for i in range(n):
        r = rng.random()
        if r < 0.04:
            lines.append("   # a comment line")
            continue
        if r < 0.07:
            lines.append(" \t")
            continue
        if rng.random() < 0.08:
            q = qids[int(rng.integers(len(qids)))]
        width = 45 if widen_at is not None and i >= widen_at else 30
        cols = rng.choice(np.arange(1, width + 1), int(rng.integers(0, 12)), replace=False)
        if rng.random() < 0.8:
            cols.sort()
        feats = [f"{c}:{VALUES[int(rng.integers(len(VALUES)))]}" for c in cols]
        sep = "\t" if rng.random() < 0.1 else " "
        head = [str(int(rng.integers(0, 3)))] + ([] if query_file else [f"qid:{q}"])
        line = sep.join(head + feats)
        if rng.random() < 0.5:
            line += f"  # doc {i} \u00e9#x "
        lines.append(line)
    return lines


def write_text(path, lines, crlf=False):
    path.write_bytes(("\r\n" if crlf else "\n").join(lines).encode() + (b"\r\n" if crlf else b"\n"))
    return path


def grouped_sizes(lines):
    """Group sizes of the data lines of ``lines`` in runs of 1 to 9 (a query file's)."""
    n = sum(1 for ln in lines if ln.split("#", 1)[0].strip())
    rng = np.random.default_rng(n)
    sizes = []
    while n:
        sizes.append(min(n, int(rng.integers(1, 10))))
        n -= sizes[-1]
    return sizes


@pytest.mark.parametrize("chunk", [64, 700, 5000, 1 << 20])
@pytest.mark.parametrize("variant", ["integer ids", "text ids", "crlf", "zero based", "n_features", "no comments",
                                     "widening"])
def test_pieces_write_the_one_thread_file(tmp_path, chunk, variant):
    rng = np.random.default_rng(len(variant) * 7919 + chunk)
    lines = hostile_lines(rng, 400, qids=("1", "abc", "007", "12", "x-y") if variant == "text ids" else
                          ("1", "2", "3", "7", "12"), widen_at=250 if variant == "widening" else None)
    kw = dict(text_chunk_bytes=chunk)
    if variant == "zero based":
        kw["zero_based"] = True
    if variant == "n_features":
        kw["n_features"] = 40
    if variant == "no comments":
        kw["keep_comments"] = False
    src = write_text(tmp_path / "in.txt", lines, crlf=variant == "crlf")
    got, err = assert_pieces_write_the_same(tmp_path, src, **kw)
    assert err is None
    if variant in ("zero based", "n_features", "no comments"):
        return
    # the oracle: the grammar's parser (plain Python) on the same bytes
    want = grammar.parse(src.read_bytes())
    with h5py.File(tmp_path / "one.h5", "r") as f:
        X = f["X"][()]
        assert np.array_equal(f["y"][()].view(np.uint32), want["y"].view(np.uint32))
        W = np.zeros((X.shape[0], max(X.shape[1], want["X"].shape[1])), np.float32)
        W[:, :want["X"].shape[1]] = want["X"]
        assert np.array_equal(X.view(np.uint32), W[:, :X.shape[1]].view(np.uint32))
        assert np.array_equal(f["query_ptr"][()], want["query_ptr"])


@pytest.mark.parametrize("chunk", [64, 3000, 1 << 20])
def test_query_files_and_several_inputs(tmp_path, chunk):
    rng = np.random.default_rng(chunk)
    a, b = hostile_lines(rng, 200, query_file=True), hostile_lines(rng, 150, query_file=True)
    srcs = [write_text(tmp_path / "a.txt", a), write_text(tmp_path / "b.txt", b, crlf=True)]
    qfs = []
    for s, ls in zip(srcs, (a, b)):
        qfs.append(s.with_suffix(".query"))
        qfs[-1].write_text("\n".join(map(str, grouped_sizes(ls))) + "\n")
    got, err = assert_pieces_write_the_same(tmp_path, srcs, query_files=qfs, text_chunk_bytes=chunk)
    assert err is None


BAD = [("1 qid:3 4:abc", "the feature value is not a number"),
       ("1 qid:3 0:1", "feature index 0"),
       ("1 qid:3 4:1 4:2", "appears twice"),
       ("x qid:3 4:1", "the label is not a number"),
       ("1 4:1", "missing 'qid:'"),
       ("1 qid:3 4:nan", "NaN or infinity"),
       ("1 qid:3 4:1e400", "out of float32 range"),
       ("1 qid:3 4:1e4000000000000000000000", "out of float32 range"),
       ("1 qid:3 4", "expected index:value"),
       ("1 qid:3 4:", "the feature value is not a number"),
       ("1 qid:3 -4:1", "not a non-negative integer"),
       ("1 qid:3 4:1.5.2", "the feature value is not a number"),
       ("1 qid:3 4:1e", "the feature value is not a number")]


@pytest.mark.parametrize("chunk", [64, 2000, 1 << 20])
@pytest.mark.parametrize("bad, message", BAD)
def test_bad_input_is_reported_alike(tmp_path, chunk, bad, message):
    """The first bad line is named, whichever piece holds it; a later bad line of another kind, in an
    earlier-finishing piece, and slow values before it change nothing."""
    rng = np.random.default_rng(chunk)
    lines = hostile_lines(rng, 300)
    at = 40 + int(rng.integers(0, 200))
    lines[at] = bad
    lines[at + 37] = "1 qid:3 0:1"
    src = write_text(tmp_path / "in.txt", lines, crlf=chunk == 2000)
    _, err = assert_pieces_write_the_same(tmp_path, src, text_chunk_bytes=chunk)
    assert err is not None and err.startswith(f"{src}:{at + 1}: ") and message in err, err


def test_an_interrupted_parallel_conversion_resumes_to_the_same_file(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    src = write_text(tmp_path / "in.txt", hostile_lines(rng, 600))
    kw = dict(quiet=True, text_chunk_bytes=1024, commit_seconds=0.0)
    with parsing(1):
        convert([src], tmp_path / "ref.h5", **kw)
    real, calls = conv._Parser.parse, {"n": 0}

    def interrupted(self, *args):
        calls["n"] += 1
        if calls["n"] == 9:
            raise KeyboardInterrupt
        return real(self, *args)
    with parsing(2):
        monkeypatch.setattr(conv._Parser, "parse", interrupted)
        with pytest.raises(KeyboardInterrupt):
            convert([src], tmp_path / "out.h5", **kw)
        monkeypatch.undo()
        assert convert([src], tmp_path / "out.h5", **kw)["resumed_rows"] > 0
    with h5py.File(tmp_path / "ref.h5", "r") as a, h5py.File(tmp_path / "out.h5", "r") as b:
        assert dict(a.attrs).keys() == dict(b.attrs).keys()
        for k in ("content_sha256", "index_sha256", "n_rows", "n_features"):
            assert a.attrs[k] == b.attrs[k]
        for k in ("X", "y", "row", "query_ptr", "qid", "comment/data", "comment/ptr"):
            assert np.array_equal(a[k][()], b[k][()]), k


def test_pieces_are_cut_by_bytes_and_only_above_a_size(tmp_path):
    """Lines of very different lengths: the pieces hold about equal text (equal line counts would
    leave one piece most of it), and a chunk below PIECE_BYTES is parsed in one call (a hand-off
    costs more than it saves)."""
    long = "1 qid:1 " + " ".join(f"{j}:0.5" for j in range(1, 400))
    lines = ["0 qid:1 1:1"] * 3000 + [long] * 100
    src = write_text(tmp_path / "in.txt", lines)
    real, seen = tp.parse_lines, []

    def spy(k0, k1, *args):
        seen.append((k0, k1))
        real(k0, k1, *args)
    with mock.patch.object(parallel, "threads", lambda: 2), mock.patch.object(tp, "parse_lines", spy):
        convert([src], tmp_path / "o.h5", quiet=True, n_features=400)
        text = src.read_bytes()
        assert len(text) > conv.PIECE_BYTES
        ends = np.flatnonzero(np.frombuffer(text, np.uint8) == 10)
        starts = np.concatenate(([0], ends[:-1] + 1))
        sizes = [int(ends[k1 - 1] + 1 - starts[k0]) for k0, k1 in seen]
        assert len(seen) > 2 and sum(sizes) == len(text)
        assert max(sizes) < 2 * len(text) / len(seen)
        small = write_text(tmp_path / "small.txt", lines[:2000])
        assert small.stat().st_size < conv.PIECE_BYTES
        seen.clear()
        convert([small], tmp_path / "s.h5", quiet=True, n_features=400)
    assert seen == [(0, 2000)]
