"""The text decoder (io.text_source, DESIGN.md "Guarantees": the text decoder) reads the text other
programs write: LF, CRLF and CR-only line ends (a CR-only file is its rows, not one row), a UTF-8
byte-order mark, gzip, bzip2 and xz by their magic bytes; an error's ``line:`` is escaped like its
token, in one message; LightGBM's ``IN.query`` beside an input gives its groups, in convert as in
every reader of text."""

import bz2
import gzip
import lzma
import re

import numpy as np
import pytest

import streamrank
from streamrank.cli import main
from streamrank.errors import InputError
from streamrank.io import text_source as ts
from streamrank.io.convert import convert

ROWS = ("2 qid:10 1:0.5 2:-1.25 # doc a\n"
        "0 qid:10 1:0.25 3:7 # doc b\n"
        "\n"
        "# a comment line\n"
        "1 qid:11 2:3.5 3:0.125 #c\n"
        "0 qid:11 1:1e-3\n")


def fingerprint(path):
    with streamrank.open_dataset(path) as ds:
        return ds.fingerprint, ds.n_rows, ds.comments()


def lines_of(text):
    """The oracle: Python's universal newlines over bytes (LF, CRLF or a CR alone)."""
    parts = re.split(rb"\r\n|\r|\n", text)
    return parts[:-1] if parts and parts[-1] == b"" else parts


def test_cr_only_crlf_bom_and_xz_convert_to_the_rows_of_lf_text(tmp_path):
    want = None
    for name, data in [("lf.txt", ROWS.encode()),
                       ("cr.txt", ROWS.replace("\n", "\r").encode()),
                       ("crlf.txt", ROWS.replace("\n", "\r\n").encode()),
                       ("bom-cr.txt", b"\xef\xbb\xbf" + ROWS.replace("\n", "\r").encode()),
                       ("t.xz", lzma.compress(b"\xef\xbb\xbf" + ROWS.encode())),
                       ("t.bz", bz2.compress(ROWS.replace("\n", "\r\n").encode())),
                       ("two-streams.xz", lzma.compress(ROWS[:40].encode()) + b"\0" * 8 + lzma.compress(ROWS[40:].encode())),
                       ("cr.gz", gzip.compress(ROWS.replace("\n", "\r").encode()))]:
        src = tmp_path / name
        src.write_bytes(data)
        convert([src], tmp_path / (name + ".h5"), quiet=True)
        got = fingerprint(tmp_path / (name + ".h5"))
        assert got[1] == 4, name  # a CR-only file is its rows: a mutant taking CR for white space makes 1
        assert got[2] == ["doc a", "doc b", "c", ""], name  # a comment ends at its line's CR
        want = want or got
        assert got == want, name


@pytest.mark.parametrize("kind", ["plain", "gzip", "xz"])
def test_chunks_cut_crlf_and_cr_at_every_edge_like_universal_newlines(tmp_path, monkeypatch, kind):
    """Random text of LF, CRLF and lone CR ends (a CR that ends a read or a chunk, an LF that
    begins the next) gives the lines and line numbers of universal newlines, resumed or not."""
    rng = np.random.default_rng(7)
    pack = {"plain": bytes, "gzip": gzip.compress, "xz": lzma.compress}[kind]
    for trial in range(40):
        ends = rng.choice([b"\n", b"\r\n", b"\r"], size=int(rng.integers(1, 30)))
        text = b"".join(b"ab"[: int(rng.integers(0, 3))] * int(rng.integers(0, 5)) + e for e in ends)
        if rng.random() < 0.3:
            text = text[:-1]  # no final line end (or a CRLF cut to its CR)
        (tmp_path / "t").write_bytes(pack(text))
        monkeypatch.setattr(ts, "RAW_READ_BYTES", int(rng.integers(1, 9)))
        chunk = int(rng.integers(1, 12))
        want = lines_of(text)
        got = []
        for buf, first in ts.TextChunks(tmp_path / "t", chunk):
            part = bytes(buf)
            assert part.endswith(b"\n") and b"\r" not in part.replace(b"\r\n", b"")
            assert first == len(got)  # the chunk's first line number counts every kind of line end
            got += [ln.rstrip(b"\r") for ln in part.split(b"\n")[:-1]]
        assert got == want, (trial, text)
        # resumed after k whole lines: the rest, numbered from k
        k = int(rng.integers(0, len(want) + 1))
        offsets = np.cumsum([0] + [len(bytes(b)) for b, _ in ts.TextChunks(tmp_path / "t", 1)])
        skip = int(offsets[k])
        rest = [ln.rstrip(b"\r") for b, first in ts.TextChunks(tmp_path / "t", chunk, skip=skip, first_line=k)
                for ln in bytes(b).split(b"\n")[:-1]]
        assert rest == want[k:], (trial, k)


def test_refused_encodings_say_what_to_do(tmp_path):
    utf16 = tmp_path / "u16.txt"
    utf16.write_bytes(ROWS.encode("utf-16"))
    with pytest.raises(InputError, match=r"u16.txt: the text is UTF-16 .*save it as UTF-8"):
        convert([utf16], tmp_path / "o.h5", quiet=True)
    zst = tmp_path / "t.zst"
    zst.write_bytes(b"\x28\xb5\x2f\xfd" + b"\0" * 20)
    with pytest.raises(InputError, match=r"t.zst: the file is zstd-compressed; decompress it first"):
        convert([zst], tmp_path / "o.h5", quiet=True)
    broken = tmp_path / "t.xz"
    broken.write_bytes(lzma.compress(ROWS.encode() * 50)[:-30])
    with pytest.raises(InputError, match=r"t.xz: the xz (data is damaged|stream ends early)"):
        convert([broken], tmp_path / "o.h5", quiet=True)
    assert not (tmp_path / "o.h5").exists()


def test_an_error_line_is_escaped_like_its_token_in_one_message(tmp_path, capsys):
    src = tmp_path / "bad.txt"
    src.write_bytes(b"0 qid:1 1:0.5\n0 qid:1 1:\x1b[2J\x00\xff # \x07bell \xe9\n")
    assert main(["convert", str(src), "-o", str(tmp_path / "o.h5"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert not any(c in err for c in "\x1b\x00\x07\ufffd")  # no raw control byte reaches the terminal
    assert err.count("streamrank convert: error:") == 1 and err.count("\n") == 2  # one message, two lines
    assert r"bad.txt:2: the feature value is not a number: '1:\x1b[2J\x00\xff'" in err
    assert r"line: 0 qid:1 1:\x1b[2J\x00\xff # \x07bell \xe9" in err


def test_lightgbm_layout_query_file_beside_the_input(tmp_path, capsys):
    """``rank.train`` with ``rank.train.query`` beside it: convert takes the groups from it, as the
    readers behind train and eval do (one rule, io.convert.query_file_of)."""
    rows = "1 1:0.5 2:1\r\n0 1:0.25\r\n2 2:3\r\n0 1:4 # d\r\n1 2:5\r\n"  # Windows line ends, groups of 3 and 2
    src = tmp_path / "rank.train"
    src.write_text(rows, newline="")
    (tmp_path / "rank.train.query").write_bytes(b"\xef\xbb\xbf3\r2\r")  # a BOM and CR-only ends: still 3, 2
    assert main(["convert", str(src), "-o", str(tmp_path / "a.h5"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    with streamrank.open_dataset(tmp_path / "a.h5") as ds:
        assert ds.query_ptr.tolist() == [0, 3, 5] and ds.labels().tolist() == [1, 0, 2, 0, 1]
        assert ds.source[0]["query_file"] == "rank.train.query"
    X, y, qid = streamrank.load_ranking(src)  # the loader behind train, the same rule
    assert np.diff(np.flatnonzero(np.r_[True, qid[1:] != qid[:-1], True])).tolist() == [3, 2]
    # a text that has qid: keeps its own groups though a .query lies beside it
    own = tmp_path / "own.txt"
    own.write_text("1 qid:7 1:1\n0 qid:7 1:2\n")
    (tmp_path / "own.txt.query").write_text("1\n1\n")
    convert([own], tmp_path / "b.h5", quiet=True)
    with streamrank.open_dataset(tmp_path / "b.h5") as ds:
        assert ds.query_ptr.tolist() == [0, 2]
    # inputs with and without group sizes cannot be joined
    with pytest.raises(InputError, match=r"rank.train takes its groups from .*rank.train.query but .*plain.txt has "
                                         r"no such file beside it"):
        plain = tmp_path / "plain.txt"
        plain.write_text("1 1:1\n")
        convert([src, plain], tmp_path / "c.h5", quiet=True)


def test_scikit_learn_dump_svmlight_file_zero_based_by_default(tmp_path, capsys):
    """scikit-learn writes zero-based indices by default: exit 2 with the --zero-based hint, or
    the right rows with --zero-based."""
    datasets = pytest.importorskip("sklearn.datasets")
    rng = np.random.default_rng(3)
    X = np.round(rng.standard_normal((12, 4)), 3).astype(np.float32)
    X[X < -0.5] = 0
    X[:, 0] = np.where(X[:, 0] == 0, 1.5, X[:, 0])  # column 0 present on every row: index 0 is written
    y = rng.integers(0, 3, 12)
    qid = np.repeat([4, 9, 11], 4)
    src = tmp_path / "sk.svm"
    datasets.dump_svmlight_file(X, y, str(src), query_id=qid)
    assert main(["convert", str(src), "-o", str(tmp_path / "o.h5"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "feature index 0 in one-based mode" in err and "--zero-based" in err and err.count("\n") == 2
    assert main(["convert", str(src), "-o", str(tmp_path / "o.h5"), "--quiet", "--zero-based"]) == 0
    with streamrank.open_dataset(tmp_path / "o.h5") as ds:
        Xr, yr = ds.read(0, ds.n_rows)
        assert np.array_equal(Xr, X) and np.array_equal(yr, y) and list(ds.query_ids) == [4, 9, 11]


def test_cr_text_cut_into_pieces_on_several_threads_converts_like_lf_text(tmp_path):
    """CR-only text in small chunks, each chunk's lines parsed in pieces on three threads: the
    dataset of the LF text parsed on one (a CR left in a piece would join two rows)."""
    from unittest import mock

    from streamrank._native import parallel
    rng = np.random.default_rng(5)
    rows = "".join(f"{rng.integers(0, 3)} qid:{i // 7} 1:{rng.random():.4f} 3:{rng.random():.3f} # d{i}\n"
                   for i in range(400))
    (tmp_path / "lf.txt").write_text(rows)
    (tmp_path / "cr.txt").write_bytes(rows.replace("\n", "\r").encode())
    convert([tmp_path / "lf.txt"], tmp_path / "lf.h5", quiet=True)
    with mock.patch.object(parallel, "threads", lambda: 3), mock.patch.object(parallel, "SERIAL_WORK", 0):
        convert([tmp_path / "cr.txt"], tmp_path / "cr.h5", quiet=True, text_chunk_bytes=777)
    assert fingerprint(tmp_path / "cr.h5") == fingerprint(tmp_path / "lf.h5")
