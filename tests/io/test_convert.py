"""streamrank convert: exact values, real-file quirks, every bad-input case, atomic output."""

import bz2
import gzip
import json

import numpy as np
import pytest

import streamrank
from letor_oracle import parse_letor
from streamrank.cli import main
from streamrank.io.convert import convert
from streamrank.errors import InputError


def write(path, text, mode="plain"):
    data = text.encode()
    if mode == "gzip":
        data = gzip.compress(data)
    elif mode == "bzip2":
        data = bz2.compress(data)
    path.write_bytes(data)
    return path


def load(path):
    with streamrank.open_dataset(path) as ds:
        X, y = ds.read(0, ds.n_rows)
        return {"X": X, "y": y, "qid": list(ds.query_ids), "query_ptr": ds.query_ptr, "row": ds.row,
                "comment": ds.comments(), "fingerprint": ds.fingerprint, "n_features": ds.n_features}


def assert_same(got, want):
    assert got["X"].shape == want["X"].shape
    assert np.array_equal(got["X"].view(np.uint32), want["X"].view(np.uint32))  # bit for bit, -0.0 too
    assert np.array_equal(got["y"], want["y"])
    assert got["qid"] == want["qid"]
    assert np.array_equal(got["query_ptr"], want["query_ptr"])
    assert np.array_equal(got["row"], want["row"])
    assert got["comment"] == want["comment"]


def no_leftovers(directory):
    return [p.name for p in directory.iterdir() if ".tmp" in p.name]


# -- real data -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fold", [1, 2, 3, 4, 5])
def test_mq2008_files_match_plain_python_parse(mq2008, tmp_path, fold):
    for part in ("train", "vali", "test"):
        src = mq2008 / f"Fold{fold}" / f"{part}.txt.gz"
        convert([src], tmp_path / "x.h5", quiet=True)
        assert_same(load(tmp_path / "x.h5"), parse_letor(src))


def test_info_reports_mq2008_fold1_train(mq2008, tmp_path, capsys):
    out = tmp_path / "train.h5"
    assert main(["convert", str(mq2008 / "Fold1" / "train.txt.gz"), "-o", str(out), "--quiet"]) == 0
    assert main(["info", str(out), "--json"]) == 0
    info = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (info["rows"], info["queries"], info["preference_pairs"]) == (9630, 471, 52325)
    assert info["features"] == 46
    assert info["source"][0]["sha256"] and info["labels"] == {"0": 7820, "1": 1223, "2": 587}


# -- what real files contain ---------------------------------------------------------------------
MESSY = (
    "# a header comment\r\n"
    "2 qid:7 3:0.5 1:0.25   # docid = a\r\n"       # unsorted indices, CRLF, comment
    "\r\n"                                         # blank line
    "0.5\tqid:3\t2:1e-3 \t \r\n"                   # tabs, float label, trailing spaces
    "1 qid:7 4:-0.0 # docid = b # second hash\n"   # sparse, -0.0, '#' inside the comment
    "   \n"
    "0 qid:3 1:1.5E+2 3:.5 4:7.\n"
    "1 qid:9\n"                                    # a row without features
    "0 qid:7 2:0.1\n"                              # qid 7 comes back: regrouped
)


def test_messy_text_and_scattered_queries(tmp_path):
    src = write(tmp_path / "messy.txt", MESSY)
    convert([src], tmp_path / "m.h5", quiet=True)
    got = load(tmp_path / "m.h5")
    assert_same(got, parse_letor(src))
    assert got["qid"] == [7, 3, 9]
    assert got["row"].tolist() == [0, 2, 5, 1, 3, 4]   # input positions of the grouped rows
    assert got["comment"][:3] == ["docid = a", "docid = b # second hash", ""]
    assert np.signbit(got["X"][1, 3]) and got["X"][1, 3] == 0  # -0.0 kept
    assert got["X"][4, 0] == np.float32(150.0) and got["y"][3] == np.float32(0.5)


@pytest.mark.parametrize("mode", ["gzip", "bzip2"])
def test_compressed_inputs(tmp_path, mode):
    plain = write(tmp_path / "a.txt", MESSY)
    packed = write(tmp_path / f"a.{mode}", MESSY, mode)
    convert([plain], tmp_path / "p.h5", quiet=True)
    convert([packed], tmp_path / "c.h5", quiet=True)
    assert_same(load(tmp_path / "c.h5"), load(tmp_path / "p.h5"))


def test_multi_member_gzip_and_several_inputs(tmp_path):
    a = "1 qid:1 1:1\n0 qid:2 1:2\n"
    b = "2 qid:1 2:3\n0 qid:3 1:4\n"
    both = tmp_path / "ab.gz"
    both.write_bytes(gzip.compress(a.encode()) + gzip.compress(b.encode()))
    convert([both], tmp_path / "one.h5", quiet=True)
    convert([write(tmp_path / "a.txt", a), write(tmp_path / "b.txt", b)], tmp_path / "two.h5", quiet=True)
    one, two = load(tmp_path / "one.h5"), load(tmp_path / "two.h5")
    assert one["qid"] == [1, 2, 3] and one["row"].tolist() == [0, 2, 1, 3]  # qid 1 in both parts is one query
    assert_same(one, two)


def test_string_qids_and_zero_based(tmp_path):
    src = write(tmp_path / "s.txt", "1 qid:q-b 0:1 2:2\n0 qid:q-a 1:3\n2 qid:q-b 0:5\n")
    convert([src], tmp_path / "s.h5", zero_based=True, quiet=True)
    got = load(tmp_path / "s.h5")
    assert got["qid"] == ["q-b", "q-a"] and got["X"].shape == (3, 3)
    assert got["X"][:, 0].tolist() == [1, 5, 0]
    with streamrank.open_dataset(tmp_path / "s.h5") as ds:
        assert ds.index_base == 0


def test_values_are_float32_of_python_float(tmp_path):
    vals = ["0.1", "1e-30", "123456789012345678901234567890", "1.00000005960464477539062500001",
            "3.4028235e38", "-2.5e-45", "0.000000000000000000000000000000000000000000001",
            "9007199254740993", "1.7976931348623157e308", "7e22", "5e-324", "+.5e+1"]
    with np.errstate(over="ignore"):
        finite = [v for v in vals if np.isfinite(np.float32(float(v)))]
    assert len(finite) == len(vals) - 1  # only 1.79e308 overflows float32 (tested among the bad inputs)
    line = "0 qid:1 " + " ".join(f"{i + 1}:{v}" for i, v in enumerate(finite)) + "\n"
    src = write(tmp_path / "v.txt", line)
    convert([src], tmp_path / "v.h5", quiet=True)
    X = load(tmp_path / "v.h5")["X"][0]
    want = np.array([np.float32(float(v)) for v in finite], np.float32)
    assert np.array_equal(X.view(np.uint32), want.view(np.uint32))


def test_query_file(tmp_path):
    a = write(tmp_path / "a.txt", "1 1:1\n0 2:1\n2 1:3\n0 1:4 # c\n")
    qa = write(tmp_path / "a.query", "3\n1\n")
    b = write(tmp_path / "b.txt", "1 1:5\n0 1:6\n")
    qb = write(tmp_path / "b.query", "2\n")
    convert([a, b], tmp_path / "q.h5", query_files=[qa, qb], quiet=True)
    got = load(tmp_path / "q.h5")
    assert got["query_ptr"].tolist() == [0, 3, 4, 6] and got["qid"] == [0, 1, 2]
    assert got["y"].tolist() == [1, 0, 2, 0, 1, 0]


def test_query_file_errors(tmp_path):
    with_qid = write(tmp_path / "w.txt", "1 qid:1 1:1\n")
    plain = write(tmp_path / "p.txt", "1 1:1\n0 1:2\n")
    q1 = write(tmp_path / "one.query", "1\n")
    with pytest.raises(InputError, match=r"w.txt:1: the line has 'qid:' but query_files"):
        convert([with_qid], tmp_path / "o.h5", query_files=[q1], quiet=True)
    with pytest.raises(InputError, match=r"one.query: the group sizes add up to 1 rows but .*p.txt has more"):
        convert([plain], tmp_path / "o.h5", query_files=[q1], quiet=True)
    q3 = write(tmp_path / "three.query", "3\n")
    with pytest.raises(InputError, match=r"three.query: the group sizes add up to 3 rows but .*p.txt has 2"):
        convert([plain], tmp_path / "o.h5", query_files=[q3], quiet=True)
    bad = write(tmp_path / "bad.query", "2\nx\n")
    with pytest.raises(InputError, match=r"bad.query:2: group size 'x' is not an integer"):
        convert([plain], tmp_path / "o.h5", query_files=[bad], quiet=True)
    assert not (tmp_path / "o.h5").exists() and not no_leftovers(tmp_path)


# -- bad input: file:line, the text, what is wrong, no output ------------------------------------
BAD = [
    ("0 qid:1 1:0.5\n1 1:0.5 2:0.1\n", {}, r"bad.txt:2: missing 'qid:'.*'1:0.5'"),
    ("0 qid:1 1:0.5\n0 qid:1 1:abc\n", {}, r"bad.txt:2: the feature value is not a number: '1:abc'"),
    ("0 qid:1 1:0.5 2:nan\n", {}, r"bad.txt:1: NaN or infinity is not allowed: '2:nan'"),
    ("0 qid:1 1:-inf\n", {}, r"bad.txt:1: NaN or infinity is not allowed: '1:-inf'"),
    ("0 qid:1 1:1e39\n", {}, r"bad.txt:1: the value is out of float32 range: '1e39'"),
    ("x qid:1 1:0.5\n", {}, r"bad.txt:1: the label is not a number: 'x'"),
    ("0 qid:1 0:0.5\n", {}, r"bad.txt:1: feature index 0 in one-based mode; use zero_based=True.*'0:0.5'"),
    ("# c\n0 qid:1 1:0.5 3:1 1:0.2\n", {}, r"bad.txt:2: the feature index appears twice on this line: '1:0.2'"),
    ("0 qid:1 1:0.5\n0 qid:1 47:1\n", {"n_features": 46}, r"bad.txt:2: the feature index is beyond n_features=46: '47:1'"),
    ("0 qid:1 1:0.5 junk\n", {}, r"bad.txt:1: expected index:value: 'junk'"),
    ("0 qid:1 -1:0.5\n", {}, r"bad.txt:1: the feature index is not a non-negative integer: '-1:0.5'"),
    ("0 qid: 1:0.5\n", {}, r"bad.txt:1: empty query id after 'qid:'"),
    ("", {}, r"bad.txt: no data rows"),
    ("# only a comment\n\n", {}, r"bad.txt: no data rows"),
]


@pytest.mark.parametrize("text,kwargs,message", BAD)
def test_bad_input_names_file_line_and_problem(tmp_path, text, kwargs, message):
    src = write(tmp_path / "bad.txt", text)
    out = tmp_path / "out.h5"
    with pytest.raises(InputError, match=message):
        convert([src], out, quiet=True, **kwargs)
    assert not out.exists() and not no_leftovers(tmp_path)


def test_bad_input_cli_exit_status(tmp_path, capsys):
    src = write(tmp_path / "bad.txt", "0 qid:1 1:0.5\n0 qid:1 1:abc\n")
    out = tmp_path / "out.h5"
    assert main(["convert", str(src), "-o", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "bad.txt:2" in err and "not a number" in err and "line: 0 qid:1 1:abc" in err
    assert not out.exists()


def test_error_late_in_a_large_file_names_the_right_line(tmp_path):
    lines = [f"{i % 3} qid:{i // 10} 1:{i / 7:.6f} 2:0.5" for i in range(50000)]
    lines[43210] = "1 qid:1 1:0.5 2:oops"
    src = write(tmp_path / "bad.txt", "\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"bad.txt:43211: the feature value is not a number"):
        convert([src], tmp_path / "o.h5", quiet=True, text_chunk_bytes=100_000)
    assert not no_leftovers(tmp_path)


def test_mostly_empty_wide_file_is_refused(tmp_path):
    lines = [f"0 qid:{i // 10} {1 + (i * 37) % 5000}:1" for i in range(20000)]
    src = write(tmp_path / "wide.txt", "\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"wide.txt:\d+: feature index \d+ makes 5,000 features with only "
                                         r"0.02% of the values"):
        convert([src], tmp_path / "o.h5", quiet=True)


# -- streaming invariance: chunking, widening, regrouping in passes --------------------------------
def _shuffled_text(rng, n=3000, d=30):
    lines = []
    for i in range(n):
        q = int(rng.integers(0, 40))
        cols = rng.choice(np.arange(1, d + 1), size=int(rng.integers(0, 8)), replace=False)
        if i < n // 2:
            cols = cols[cols <= d // 2]  # the width grows half way through
        feats = " ".join(f"{c}:{rng.random():.5f}" for c in cols)
        lines.append(f"{int(rng.integers(0, 3))} qid:{q} {feats} # doc{i}")
    return "\n".join(lines) + "\n"


def test_chunk_size_and_regroup_passes_do_not_change_the_file(tmp_path):
    src = write(tmp_path / "s.txt", _shuffled_text(np.random.default_rng(1)))
    convert([src], tmp_path / "big.h5", quiet=True)
    convert([src], tmp_path / "small.h5", quiet=True, text_chunk_bytes=4096, memory_budget="64MB")
    from streamrank.io.hdf5_format import DatasetWriter
    big, small = load(tmp_path / "big.h5"), load(tmp_path / "small.h5")
    assert_same(small, big)
    assert small["fingerprint"] == big["fingerprint"]
    assert_same(big, parse_letor(src))
    # several regroup passes: a tiny in-memory range forces one pass per 100 rows
    orig = DatasetWriter.__init__.__defaults__
    try:
        DatasetWriter.__init__.__kwdefaults__["regroup_bytes"] = 100 * (4 * 30 + 16)
        convert([src], tmp_path / "passes.h5", quiet=True, text_chunk_bytes=4096, memory_budget="1MB")
    finally:
        DatasetWriter.__init__.__kwdefaults__["regroup_bytes"] = 256 << 20
    assert orig is DatasetWriter.__init__.__defaults__
    assert_same(load(tmp_path / "passes.h5"), big)


def regroup_dest_twin(run_start, run_query, run_len, query_ptr):
    """NumPy twin of hdf5_format._regroup_dest (the vectorised form it replaced)."""
    dest = np.empty(int(run_len.sum()), np.int64)
    order = np.argsort(run_query, kind="stable")
    offset = query_ptr[run_query[order]].copy()
    lens = run_len[order]
    csum = np.cumsum(lens) - lens
    first_of_query = np.searchsorted(run_query[order], run_query[order], side="left")
    offset += csum - csum[first_of_query]
    for k, rk in enumerate(order.tolist()):
        s = int(run_start[rk])
        dest[s:s + int(lens[k])] = np.arange(offset[k], offset[k] + lens[k])
    return dest


def test_regroup_destinations_match_their_numpy_twin():
    from streamrank.io.hdf5_format import _regroup_dest
    rng = np.random.default_rng(11)
    for n_runs, n_q in ((1, 1), (50, 7), (2000, 300)):
        run_query = rng.integers(0, n_q, n_runs)
        run_query[:n_q] = np.arange(n_q)[:n_runs]  # every query appears (first appearances in order)
        run_len = rng.integers(1, 6, n_runs)
        run_start = np.concatenate(([0], np.cumsum(run_len)[:-1]))
        counts = np.bincount(run_query, weights=run_len, minlength=n_q).astype(np.int64)
        query_ptr = np.concatenate(([0], np.cumsum(counts)))
        dest = np.empty(int(run_len.sum()), np.uint32)
        _regroup_dest(run_start, run_query, run_len, query_ptr, dest)
        np.testing.assert_array_equal(dest, regroup_dest_twin(run_start, run_query, run_len, query_ptr))


@pytest.mark.parametrize("chunk", [512, 4096, 1 << 20])
def test_query_ids_do_not_depend_on_the_chunk_size(tmp_path, chunk):
    """'007' is one query whether or not the chunk that holds it also holds a non-integer id: ids
    are integers only when their text is the integer's own form (found by docs/formats.md's review)."""
    lines = [f"{i % 3} qid:007 1:{i}" for i in range(300)] + [f"{i % 3} qid:abc 1:{i}" for i in range(300)]
    lines += ["1 qid:007 1:5", "0 qid:12 1:1", "2 qid:+12 1:2"]
    (tmp_path / "a.txt").write_text("\n".join(lines) + "\n")
    convert([tmp_path / "a.txt"], tmp_path / "o.h5", quiet=True, text_chunk_bytes=chunk)
    with streamrank.open_dataset(tmp_path / "o.h5") as ds:
        assert list(ds.query_ids) == ["007", "abc", "12", "+12"]
        assert np.diff(ds.query_ptr).tolist() == [301, 300, 1, 1]
