"""Conversion in pieces (issue 34, target 2): LETOR text drawn whole (hostile tokens, tokens the
parser's fast path leaves to its general one, comments, CRLF, blank lines, queries that come back,
bad lines anywhere) converts on several threads, every chunk of text cut into pieces, to exactly the
one-thread outcome: the same file byte for byte, or the same InputError naming the same line."""

import contextlib
from unittest import mock

from hypothesis import given, note
from hypothesis import strategies as st

import prop_kit as kit
import prop_strategies as ps

VALUES = ["0.5", "1", "-2.25", "0.000000", "0.123456", "7", "1e-3", "1.5E+2", ".5", "7.", "-0", "+3.25",
          "123456789012345678901", "3.4028234e38", "4e-46", "9007199254740993", "00000000000000000000.5"]
BAD_TOKENS = ["1e", "1.2.3", "", "-", "nan", "1e400", "0:1", "x:1", "01:1:1", "-1:2", "1"]
BAD_LINES = ["x qid:1 1:1", "1 1:1", "1 qid: 1:1", "1 qid:1 2:1 2:1", "\x00"]


@st.composite
def rows(draw):
    """One valid line: a row (distinct indices, values of both parser paths), a comment line or a
    blank line."""
    kind = draw(st.sampled_from(["row"] * 8 + ["comment", "blank"]))
    if kind == "comment":
        return draw(st.sampled_from(["# c", "  # x:1 qid:2", "#"]))
    if kind == "blank":
        return draw(st.sampled_from(["", " ", "\t \x0b"]))
    label = draw(st.sampled_from(["0", "1", "2", "0.5", "-1"]))
    qid = draw(st.sampled_from(["1", "2", "3", "1", "007", "abc"]))
    cols = draw(st.lists(st.integers(1, 30), max_size=8, unique=True))
    feats = [f"{c}:{draw(st.sampled_from(VALUES[:6] * 3 + VALUES))}" for c in cols]
    sep = draw(st.sampled_from([" ", "\t", "  "]))
    line = sep.join([label, f"qid:{qid}"] + feats)
    if draw(st.booleans()):
        line += draw(st.sampled_from([" # doc", "#", " #a#b ", "# \u00e9"]))
    return line


@st.composite
def texts(draw):
    """Whole files: hostile tokens (prop_strategies.letor_text), or valid lines of which at most
    two are made bad (a bad token in a row, or a bad line)."""
    if draw(st.integers(0, 4)) == 0:
        text, _ = draw(ps.letor_text())
        return text.encode()
    lines = draw(st.lists(rows(), min_size=1, max_size=60))
    for _ in range(draw(st.sampled_from([0, 0, 1, 2]))):
        k = draw(st.integers(0, len(lines) - 1))
        if draw(st.booleans()):
            lines[k] = draw(st.sampled_from(BAD_LINES))
        else:
            lines[k] = f"1 qid:1 5:1 {draw(st.sampled_from(BAD_TOKENS))}"
    end = draw(st.sampled_from(["\n", "\r\n"]))
    return (end.join(lines) + draw(st.sampled_from(["", end]))).encode()


@contextlib.contextmanager
def threads(n):
    from streamrank._native import parallel
    with mock.patch.object(parallel, "threads", lambda: n), \
            mock.patch.object(parallel, "SERIAL_WORK", 0 if n > 1 else parallel.SERIAL_WORK):
        yield


def outcome(src, out, n, **kw):
    from streamrank.errors import InputError
    from streamrank.io.convert import convert
    out.unlink(missing_ok=True)
    with threads(n):
        try:
            convert([src], out, quiet=True, **kw)
        except InputError as e:
            return None, str(e)
    return out.read_bytes(), None


@kit.examples(25)
@given(data=st.data())
def test_pieces_convert_like_one_thread(tmp_path_factory, data):
    draw = data.draw
    text = draw(texts())
    kw = {"text_chunk_bytes": draw(st.sampled_from([1, 24, 64, 256, 4096]))}
    if draw(st.booleans()):
        kw["zero_based"] = True
    if draw(st.integers(0, 3)) == 0:
        kw["n_features"] = draw(st.sampled_from([3, 40]))
    n = draw(st.integers(2, 4))
    note(f"text: {text!r}; {kw}; threads {n}")
    d = tmp_path_factory.mktemp("pieces")
    src = d / "in.txt"
    src.write_bytes(text)
    want = outcome(src, d / "one.h5", 1, **kw)
    got = outcome(src, d / "many.h5", n, **kw)
    assert got == want
