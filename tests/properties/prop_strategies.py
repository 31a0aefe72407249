"""Hypothesis strategies of hostile inputs (issue 30, build item 8): numbers over the whole float
range as a user would type them, datasets written directly with h5py in the documented format
(docs/formats.md, versions 1 and 2) by "another tool", and LETOR text.

Everything drawn is small (a few queries of a few documents, d <= 5), so that one example runs in
milliseconds once numba's kernels are compiled. Each drawn thing carries ``kinds``: the labels the
reliability table counts examples by.
"""

import hashlib
import json
import math
from dataclasses import dataclass, field

import h5py
import numpy as np
from hypothesis import strategies as st

# -- numbers ------------------------------------------------------------------------------------------
# as typed on a command line (the Python API gets the same values parsed: float, int or str)
SPECIAL = ["0", "-0", "0.0", "-1", "-0.5", "5e-324", "2.2250738585072014e-308", "1e-300", "1e-45", "1e-38",
           "1e-12", "1e300", "-1e300", "1.7976931348623157e308", "1e308", "3.4e38", "1e38", "1e400", "inf",
           "-inf", "Infinity", "nan", "NaN", "-nan", "abc", "", " ", "1,", ",", "0x10", "1_0", " 2", "2^3",
           "2^-1100", "2^1100", "1e", "+", "1.5.2", "\u0661", "true", "None", "1/2"]
# values inside most ranges, so that a good share of examples trains instead of being refused
TAME = ["1", "2", "3", "0.5", "0.25", "0.1", "0.01", "1e-3", "1e-6", "10", "4", "5", "2^-3"]
INTEGERS = st.one_of(st.integers(-3, 12), st.integers(-2 ** 70, 2 ** 70), st.sampled_from([2 ** 31, 2 ** 63, 10 ** 9]))
FLOATS = st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)


def value_class(text):
    """The kind of a typed number, for the tables: zero, negative, subnormal, tiny, huge, inf, nan,
    integer, fraction or string."""
    t = str(text).strip()
    try:
        v = float(t)
    except ValueError:
        return "string"
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf"
    if v == 0:
        return "zero"
    if v < 0:
        return "negative"
    if v < 2.2250738585072014e-308:
        return "subnormal"
    if v < 1e-30:
        return "tiny"
    if v > 1e30:
        return "huge"
    return "integer" if v == int(v) and "." not in t and "e" not in t.lower() else "fraction"


def numbers():
    """Any number as text: specials, tame values, floats of the whole range, integers of any size."""
    return st.one_of(st.sampled_from(SPECIAL), st.sampled_from(TAME), st.sampled_from(TAME),
                     FLOATS.map(repr), INTEGERS.map(str))


def python_values():
    """The same for the Python API: floats, ints, strings and None."""
    return st.one_of(FLOATS, INTEGERS, st.sampled_from([float(t) for t in TAME if "^" not in t]),
                     st.sampled_from(["abc", "", "1", "inf", "nan", None, True]))


def python_class(v):
    if v is None or isinstance(v, bool):
        return "string"
    if isinstance(v, str):
        return "string"
    return value_class(repr(v) if isinstance(v, float) else str(v))


# -- datasets -----------------------------------------------------------------------------------------
F32_MAX = float(np.finfo(np.float32).max)


@dataclass
class Data:
    """Rows in stored order: grouped by query, ``query_ptr`` the groups."""
    X: np.ndarray  # float32 (n, d); float64 for the Python API's arrays
    y: np.ndarray  # float32 (n,)
    query_ptr: np.ndarray  # int64 (n_queries + 1,)
    qid: list  # ints, or str
    version: int = 2
    kinds: list = field(default_factory=list)

    @property
    def n(self):
        return len(self.y)

    @property
    def d(self):
        return self.X.shape[1]

    def qid_per_row(self):
        return np.repeat(np.asarray(self.qid, dtype=object), np.diff(self.query_ptr))

    def finite(self):
        return bool(np.isfinite(np.asarray(self.X, np.float64)).all() and np.isfinite(np.asarray(self.y, np.float64)).all())

    def describe(self):
        np.set_printoptions(precision=9, threshold=200)
        return (f"Data(version={self.version}, kinds={self.kinds}, query_ptr={self.query_ptr.tolist()}, "
                f"qid={list(self.qid)}, y={self.y.tolist()}, X={self.X.tolist()})")


def _digest(query_ptr, qid, X=None, y=None):
    qp = np.ascontiguousarray(query_ptr, np.int64).tobytes()
    if all(isinstance(q, (int, np.integer)) for q in qid):
        Q = np.asarray(qid, np.int64).tobytes()
    else:
        Q = "\0".join(str(q) for q in qid).encode()
    if X is None:
        return hashlib.sha256(qp + Q).hexdigest()
    hx = hashlib.sha256(np.ascontiguousarray(X, np.float32).tobytes()).digest()
    hy = hashlib.sha256(np.ascontiguousarray(y, np.float32).tobytes()).digest()
    return hashlib.sha256(hx + hy + qp + Q).hexdigest()


def write_h5(data, path):
    """``data`` as another tool would write it from docs/formats.md section 1 (h5py only, no
    streamrank code): version 2 with Fletcher-32 and index_sha256, or version 1 without checksums."""
    n, d = data.X.shape
    v2 = data.version == 2
    X = np.asarray(data.X, np.float32)
    y = np.asarray(data.y, np.float32)
    str_ids = not all(isinstance(q, (int, np.integer)) for q in data.qid)
    with h5py.File(path, "w") as f:
        rows_chunk = max(1, n)
        kw = {"fletcher32": True} if v2 else {}
        f.create_dataset("X", data=X, chunks=(rows_chunk, max(d, 1)), maxshape=(None, d), **kw)
        f.create_dataset("y", data=y, chunks=(rows_chunk,), maxshape=(None,), **kw)
        f.create_dataset("row", data=np.arange(n, dtype=np.int64), chunks=(rows_chunk,), maxshape=(None,), **kw)
        f.create_dataset("query_ptr", data=np.asarray(data.query_ptr, np.int64), **({"chunks": True, **kw} if v2 else {}))
        if str_ids:
            f.create_dataset("qid", data=[str(q) for q in data.qid], dtype=h5py.string_dtype())
        else:
            f.create_dataset("qid", data=np.asarray(data.qid, np.int64), **({"chunks": True, **kw} if v2 else {}))
        a = f.attrs
        a["format"] = "streamrank-dataset"
        a["version"] = np.int64(data.version)
        a["n_rows"], a["n_features"], a["n_queries"] = np.int64(n), np.int64(d), np.int64(len(data.qid))
        a["index_base"] = np.int64(1)
        a["qid_kind"] = "str" if str_ids else "int"
        a["source"] = json.dumps([{"name": "another-tool", "sha256": ""}])
        a["created_by"] = "another tool 1.0"
        a["compression"] = "none"
        a["chunk_rows"] = np.int64(rows_chunk)
        a["extra"] = "{}"
        a["content_sha256"] = _digest(data.query_ptr, data.qid, X, y)
        if v2:
            a["index_sha256"] = _digest(data.query_ptr, data.qid)
    return path


def _fmt(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(float(np.float32(v)))


def write_text(data, path):
    """LETOR text of ``data`` (every feature written, 1-based)."""
    lines = []
    for q in range(len(data.qid)):
        for i in range(data.query_ptr[q], data.query_ptr[q + 1]):
            feats = " ".join(f"{j + 1}:{_fmt(data.X[i, j])}" for j in range(data.d))
            lines.append(f"{_fmt(data.y[i])} qid:{data.qid[q]} {feats} #doc{i}")
    path.write_text("\n".join(lines) + ("\n" if lines else ""))
    return path


SCALES = ["normal", "normal", "normal", "huge", "tiny", "subnormal", "mixed", "integers"]
LABELS = ["levels", "levels", "levels", "all equal", "fractional", "negative", "large", "huge"]
BREAKS = ["none", "none", "none", "none", "nan in X", "inf in X", "-inf in X", "nan in y", "inf in y"]


@st.composite
def datasets(draw, max_queries=4, max_docs=5, max_d=5, allow_breaks=True, min_rows=0, versions=(1, 2),
             for_arrays=False):
    """A small dataset of hostile shape and values. ``for_arrays``: float64 values (the Python API's
    arrays), which may exceed float32."""
    d = draw(st.integers(1, max_d))
    sizes = draw(st.lists(st.integers(0, max_docs), min_size=1, max_size=max_queries))
    if sum(sizes) < min_rows:
        sizes[0] += min_rows - sum(sizes)
    n = sum(sizes)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    scale = draw(st.sampled_from(SCALES))
    labels = draw(st.sampled_from(LABELS))
    kinds = [f"values {scale}", f"labels {labels}"]
    X = rng.standard_normal((n, d))
    if scale == "huge":
        X = np.clip(X * 1e38, -3e38, 3e38)
        if for_arrays and draw(st.booleans()):
            X = X * 1e200  # beyond float32: the API writes float32 rows
            kinds.append("beyond float32")
    elif scale == "tiny":
        X = X * 1e-38
    elif scale == "subnormal":
        X = X * 1e-44
    elif scale == "mixed":
        X = X * 10.0 ** rng.integers(-30, 31, d)
    elif scale == "integers":
        X = np.round(np.abs(X) * 30)
    if draw(st.integers(0, 4)) == 0:  # features constant within every query
        kinds.append("constant within every query")
        start = 0
        for s in sizes:
            X[start:start + s] = X[start] if s else X[start:start]
            start += s
    if labels == "levels":
        y = rng.integers(0, draw(st.integers(1, 5)), n).astype(float)
    elif labels == "all equal":
        y = np.full(n, float(draw(st.integers(0, 4))))
    elif labels == "fractional":
        y = rng.integers(0, 8, n) / 2.0
    elif labels == "negative":
        y = rng.integers(-3, 2, n).astype(float)
    elif labels == "large":
        y = rng.choice([0.0, 1.0, 30.0, 1100.0, 2000.0], n)
    else:
        y = rng.choice([0.0, 1.0, 1e20, 3e38], n)
    brk = draw(st.sampled_from(BREAKS)) if allow_breaks and n else "none"
    if brk != "none":
        kinds.append(brk)
        i = draw(st.integers(0, n - 1))
        bad = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}[brk.split(" ")[0]]
        if brk.endswith("X"):
            X[i, draw(st.integers(0, d - 1))] = bad
        else:
            y[i] = bad
    if 0 in sizes:
        kinds.append("empty query")
    if 1 in sizes:
        kinds.append("one-document query")
    if n == 0:
        kinds.append("no rows")
    qid_kind = draw(st.sampled_from(["int", "int", "int", "str"]))
    if qid_kind == "str":
        qid = [f"q{k}" for k in range(len(sizes))]
        kinds.append("string query ids")
    else:
        qid = list(range(100, 100 + len(sizes))) if draw(st.booleans()) else \
            [int(v) for v in rng.choice(np.arange(-10 ** 6, 10 ** 6), len(sizes), replace=False)]
    version = draw(st.sampled_from(list(versions)))
    kinds.append(f"format v{version}")
    qp = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    dtype = np.float64 if for_arrays else np.float32
    with np.errstate(over="ignore"):
        return Data(X.astype(dtype), y.astype(dtype), qp, qid, version, kinds)


# -- an ordinary small dataset, the one most parameter examples train on -------------------------------
def plain_data(seed=0, n_queries=4, docs=5, d=3):
    rng = np.random.default_rng(seed)
    n = n_queries * docs
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = rng.integers(0, 3, n).astype(np.float32)
    qp = np.arange(0, n + 1, docs, dtype=np.int64)
    return Data(X, y, qp, list(range(1, n_queries + 1)), 2, ["plain"])


# -- LETOR text of hostile tokens (the converter's grammar has its own fuzz test: this one draws files
#    as a whole, for the invariants) -----------------------------------------------------------------
TOKENS = ["0", "1", "2", "-1", "0.5", "1e38", "3.4028235e38", "3.5e38", "1e-45", "1e-50", "1e400", "-1e400",
          "nan", "inf", "-inf", "NaN", "1e-300", "7", "-0", "abc", "1,5", ""]


@st.composite
def letor_text(draw):
    """(text, kinds): LETOR lines with numbers drawn from TOKENS, qids, comments and blank lines."""
    lines, kinds = [], set()
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["row", "row", "row", "row", "blank", "comment"]))
        if kind != "row":
            lines.append("" if kind == "blank" else "# a comment")
            continue
        label = draw(st.sampled_from(["0", "1", "2", "0", "1", "3", "-1", "0.5"] + TOKENS))
        feats = draw(st.lists(st.tuples(st.integers(1, 5), st.sampled_from(TOKENS[:7] * 3 + TOKENS)), max_size=5,
                              unique_by=lambda t: t[0]))
        feats.sort()
        for _, v in feats + [(0, label)]:
            c = value_class(v)
            if c in ("nan", "inf", "string"):
                kinds.add(f"text {c}")
            elif v in ("3.5e38", "1e400", "-1e400"):
                kinds.add("text overflows float32")
            elif c in ("tiny", "subnormal") or v == "1e-300":
                kinds.add("text tiny")
        q = draw(st.sampled_from(["1", "2", "3", "abc"]))
        lines.append(f"{label} qid:{q} " + " ".join(f"{i}:{v}" for i, v in feats))
    return "\n".join(lines) + "\n", sorted(kinds) or ["text plain"]
