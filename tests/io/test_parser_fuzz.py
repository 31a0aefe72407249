"""Property-based fuzzing of the LETOR/SVMlight converter against the grammar's independent parser
(number_grammar): every input either converts to exactly what the grammar says, or fails with an
InputError naming the file and the first line the grammar refuses; never a crash, a hang or a
silent misparse (issue 12)."""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import number_grammar as grammar
import streamrank
from streamrank.errors import InputError
from streamrank.io.convert import convert

DIGITS = st.text("0123456789", min_size=1, max_size=22)
SIGN = st.sampled_from(["", "", "+", "-"])
WS = st.text(" \t\r\x0b\x0c", min_size=1, max_size=3)


@st.composite
def valid_number(draw, in_range=False):
    """A number of the grammar; ``in_range``: one that also fits float32 (at most 12 integer
    digits, exponents within +-20)."""
    digits = st.text("0123456789", min_size=1, max_size=12) if in_range else DIGITS
    mant = draw(st.one_of(
        digits,
        st.builds(lambda a, b: f"{a}.{b}", digits, st.text("0123456789", max_size=22)),
        st.builds(lambda b: f".{b}", DIGITS)))
    if in_range:
        exp = draw(st.one_of(st.just(""), st.builds(lambda e, v: f"{e}{v:+d}" if v < 0 or e == "E" else f"{e}{v}",
                                                    st.sampled_from("eE"), st.integers(-20, 20))))
    else:
        exp = draw(st.one_of(st.just(""), st.builds(lambda e, s, d: f"{e}{s}{d}", st.sampled_from("eE"),
                                                    st.sampled_from(["", "+", "-"]),
                                                    st.text("0123456789", min_size=1, max_size=3))))
    return draw(SIGN) + mant + exp


HOSTILE = st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400", "3.5e38", "1e-400", "-0",
                           "1_0", "\uff11", "\u0661", "1e", "1e+", "+", "-", ".", "1.2.3", "0x10", "1,5", "",
                           "1\x00", "\x00", "99999999999999999999999", "4e-46", "1.4e-45", "3.4028235e38",
                           "3.4028236e38", "0.000000000000000000000000000000000000000000001"])
NUMBER = st.one_of(valid_number(), valid_number(), valid_number(), HOSTILE)
QID = st.one_of(st.integers(-10**6, 10**6).map(str), st.sampled_from(["a", "q1", "x-y", "\u00e9", "7x"]),
                st.just(""))
INDEX = st.one_of(st.integers(1, 40).map(str), st.sampled_from(["0", "-1", "01", "1e1", "x", "99999999999999999999"]))


@st.composite
def line(draw, clean=False):
    """A line of text; ``clean``: one the grammar accepts (data, blank or comment, valid numbers,
    distinct feature ids), so that half the documents exercise the values, not only the refusals."""
    kind = draw(st.sampled_from(["data"] * 8 + ["blank", "comment"] + ([] if clean else ["no-qid", "junk"])))
    if kind == "blank":
        return draw(st.text(" \t\r", max_size=3))
    if kind == "comment":
        return "#" + draw(st.text(max_size=20).filter(lambda t: "\n" not in t))
    if kind == "junk":
        return draw(st.text(max_size=30).filter(lambda t: "\n" not in t))
    number = valid_number(in_range=True) if clean else NUMBER
    toks = [draw(number)]
    if kind == "data":
        toks.append("qid:" + draw(QID.filter(bool) if clean else QID))
    if clean:
        ids = draw(st.lists(st.integers(1, 40), max_size=8, unique=True))
        feats = [(str(i), draw(number)) for i in ids]
    else:
        feats = draw(st.lists(st.tuples(INDEX, NUMBER), max_size=8))
    toks += [f"{i}:{v}" for i, v in feats]
    sep = [draw(WS) for _ in toks]
    text = "".join(s + t for s, t in zip(sep, toks)) if draw(st.booleans()) else " ".join(toks)
    if draw(st.booleans()):
        text += " # " + draw(st.text(max_size=15).filter(lambda t: "\n" not in t))
    return text


@st.composite
def document(draw):
    lines = draw(st.lists(line(clean=draw(st.booleans())), min_size=1, max_size=25))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    return (end.join(lines) + draw(st.sampled_from(["", end]))).encode("utf-8")


def _ids(qids):
    return [q.decode("utf-8", "replace") if isinstance(q, bytes) else str(q) for q in qids]


# examples per run: 60 in the suite; tools/bench_reliability.py and long runs set more
EXAMPLES = int(os.environ.get("STREAMRANK_FUZZ_EXAMPLES", "60"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=document())
def test_converter_agrees_with_the_grammar(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("fuzz")
    src, out = d / "in.txt", d / "out.h5"
    src.write_bytes(data)
    try:
        want = grammar.parse(data)
    except grammar.Bad as bad:
        with pytest.raises(InputError) as e:
            convert([src], out, quiet=True)
        assert str(e.value).startswith(f"{src}:{bad.line}: "), (str(e.value)[:300], str(bad))
        assert not out.exists()
        return
    if len(want["y"]) == 0:
        with pytest.raises(InputError, match="no data rows"):
            convert([src], out, quiet=True)
        return
    convert([src], out, quiet=True)
    with streamrank.open_dataset(out) as ds:
        X, y = ds.read(0, ds.n_rows)
        np.testing.assert_array_equal(y.view(np.uint32), want["y"].view(np.uint32))  # bits: -0.0 stays
        W = np.zeros((len(y), max(X.shape[1], want["X"].shape[1])), np.float32)
        Wx = W.copy()
        W[:, :want["X"].shape[1]] = want["X"]
        Wx[:, :X.shape[1]] = X
        np.testing.assert_array_equal(Wx.view(np.uint32), W.view(np.uint32))
        np.testing.assert_array_equal(ds.query_ptr, want["query_ptr"])
        assert _ids(ds.query_ids) == _ids(want["qid"])
        np.testing.assert_array_equal(ds.row, want["row"])
        assert ds.comments() == [c.decode("utf-8", "replace") for c in want["comment"]]


def test_rows_without_features_in_scattered_queries(tmp_path):
    """Found by the fuzzer: regrouping a file whose rows have no features divided by its width (0)."""
    src = tmp_path / "in.txt"
    src.write_bytes(b"0 qid:1\n0 qid:0\n0 qid:1")
    convert([src], tmp_path / "d.h5", quiet=True)
    with streamrank.open_dataset(tmp_path / "d.h5") as ds:
        assert ds.n_features == 0 and ds.query_ptr.tolist() == [0, 2, 3] and ds.row.tolist() == [0, 2, 1]
