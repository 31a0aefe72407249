"""The text format's grammar, written down once and implemented here in plain Python as the
fuzzer's independent parser (tests/io/test_parser_fuzz.py). It is not Python's float(), which also
takes "1_0", "inf", non-ASCII digits and surrounding white space.

    text     := [BOM] line (EOL line)* [EOL]                  (EOL: LF, CRLF or a CR alone)
    line     := [token (WS token)*] [WS] ["#" comment]        (WS: space, tab, VT, FF)
    data     := label WS "qid:" id (WS index ":" number)*     (a line with a token before any '#')
    label    := number
    id       := ["-"] digit{1,18}  (an integer id)  |  any other non-empty run of non-WS bytes
    index    := digit{1,18}, >= 1 (one-based; 0 is an error), at most once per line
    number   := [sign] (digit+ ["." digit*] | "." digit+) [("e" | "E") [sign] digit+]
    digit    := "0" .. "9" (ASCII)
    value    := float32(the decimal's correctly rounded double); refused when not finite
              (1e400, 3.5e38); underflow to 0 or a subnormal is kept; "-0" stays -0.0

Blank lines and comment-only lines are not rows. Queries are grouped by first appearance (stable).
"""

import re

import numpy as np

from letor_oracle import assemble

WS = b" \t\r\x0b\x0c"
NUMBER = re.compile(rb"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
INDEX = re.compile(rb"[0-9]{1,18}")
INT_ID = re.compile(rb"-?[0-9]{1,18}")


class Bad(Exception):
    """A line the grammar refuses: ``line`` is its 1-based number."""

    def __init__(self, line, why):
        super().__init__(f"line {line}: {why}")
        self.line = line


def _value(tok, line):
    if not NUMBER.fullmatch(tok):
        raise Bad(line, f"not a number: {tok!r}")
    with np.errstate(over="ignore"):
        v = np.float32(float(tok))
    if not np.isfinite(v):
        raise Bad(line, f"out of float32 range: {tok!r}")
    return v


def _split(text):
    return [t for t in re.split(rb"[ \t\r\x0b\x0c]+", text) if t]


def parse(data):
    """The rows of ``data`` (bytes): dict of X, y, qid (per query, int or bytes), query_ptr, row,
    comment; raises :class:`Bad` at the first line the grammar refuses."""
    rows = []
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark is not text
        data = data[3:]
    lines = re.split(rb"\r\n|\r|\n", data)
    for k, raw in enumerate(lines, 1):
        if k == len(lines) and raw == b"":
            break
        text, hash_, comment = raw.partition(b"#")
        tokens = _split(text)
        if not tokens:
            continue
        y = _value(tokens[0], k)
        if len(tokens) < 2 or not tokens[1].startswith(b"qid:"):
            raise Bad(k, "missing qid")
        q = tokens[1][4:]
        if not q:
            raise Bad(k, "empty qid")
        q = int(q) if INT_ID.fullmatch(q) else q
        feats = {}
        for tok in tokens[2:]:
            idx, colon, val = tok.partition(b":")
            if not colon:
                raise Bad(k, f"expected index:value: {tok!r}")
            if not INDEX.fullmatch(idx):
                raise Bad(k, f"bad index: {tok!r}")
            col = int(idx) - 1
            if col < 0:
                raise Bad(k, "index 0")
            if not val:
                raise Bad(k, f"empty value: {tok!r}")
            v = _value(val, k)
            if col in feats:
                raise Bad(k, f"index twice: {tok!r}")
            feats[col] = v
        rows.append((q, y, feats, comment.strip(WS) if hash_ else b""))
    return assemble(rows)
