"""A plain-Python LETOR/SVMlight parser: the independent twin of the numba parser, for tests only."""

import bz2
import gzip
import lzma
import re

import numpy as np


def _open(path):
    with open(path, "rb") as f:
        head = f.read(3)
    if head[:2] == b"\x1f\x8b":
        return gzip.open(path, "rb")
    if head == b"BZh":
        return bz2.open(path, "rb")
    if head == b"\xfd7z":
        return lzma.open(path, "rb")
    return open(path, "rb")


def parse_letor(paths, base=1, n_features=None):
    """Parse with str.split and float(); group queries by first appearance (stable).

    Returns dict with X (float32), y, qid (per query), query_ptr, row (input position per row),
    comment (per row).
    """
    rows = []
    for path in paths if isinstance(paths, (list, tuple)) else [paths]:
        with _open(path) as f:
            data = f.read()
        data = data[3:] if data.startswith(b"\xef\xbb\xbf") else data  # a UTF-8 byte-order mark
        # every line end is one: LF, CRLF, or a CR alone
        for raw in re.split(rb"\r\n|\r|\n", data):
            text, _, comment = raw.decode().partition("#")
            tokens = text.split()
            if not tokens:
                continue
            label = np.float32(float(tokens[0]))
            q = tokens[1].split(":", 1)[1]
            try:
                q = int(q)
            except ValueError:
                pass
            feats = {}
            for tok in tokens[2:]:
                i, v = tok.split(":", 1)
                feats[int(i) - base] = np.float32(float(v))
            rows.append((q, label, feats, comment.strip()))
    return assemble(rows, n_features)


def assemble(rows, n_features=None):
    """The dataset of parsed rows [(qid, label, {column: value}, comment)] in input order: queries
    grouped by first appearance (stable), as streamrank's converter stores them."""
    width = n_features or max((max(f) + 1 for _, _, f, _ in rows if f), default=0)
    order = {}
    for r, (q, *_rest) in enumerate(rows):
        order.setdefault(q, []).append(r)
    perm = [r for q in order for r in order[q]]
    X = np.zeros((len(rows), width), np.float32)
    y = np.empty(len(rows), np.float32)
    for out, r in enumerate(perm):
        q, label, feats, _ = rows[r]
        y[out] = label
        for c, v in feats.items():
            X[out, c] = v
    sizes = [len(order[q]) for q in order]
    return {
        "X": X, "y": y, "qid": list(order), "query_ptr": np.concatenate(([0], np.cumsum(sizes))),
        "row": np.asarray(perm, np.int64), "comment": [rows[r][3] for r in perm],
    }
