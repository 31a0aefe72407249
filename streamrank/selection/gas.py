"""GAS: greedy feature selection for ranking (paper 003), from one streamed pass over the queries.

Importance of feature f (paper 003 sec. 2.2), from ordering every training query by f alone:

- GAS-E: a ranking measure of that order, MAP, NDCG@k or P@k in LETOR's letor4 conventions, averaged
  over the queries. A feature ties documents (equal values, most often 0), and the file's row order
  must not decide its score: each measure is taken at its expected value over a uniformly random
  order of every tie group (McSherry and Najork, ECIR 2008; the formulas are in
  :mod:`streamrank._native.feature_measures`). So the importance is the same for any row order
  within the queries, bit for bit;
- GAS-L: the inverse of the pairwise error rate, 1 / (1 - correct / pairs) over all preference pairs
  pooled (a pair tied in f counts one half, its expected value under a random order; an error rate
  of 0 is floored at 1 / (2 pairs)).

With ``signed`` each feature is also read negated (-f orders the other way) and keeps the better
orientation (its sign is recorded). The orders are those of the raw feature values: normalisation
by a positive scale per feature or query does not change them.

A feature constant within every query (all the rows of each query share one value: a feature that
is 0 everywhere, or a query-level one such as the query's IDF) cannot change any ranking: its
"importance" would be that of a random order, and its tau-b with any feature is undefined on every
query. It is never selected, and is listed apart (:attr:`GasResult.constant`), found in the same pass
from each query's smallest and largest value.

Similarity of features i and j (sec. 2.3): the mean over queries of Kendall's tau-b between the
orders they induce (:mod:`streamrank._native.kendall`). A query on which tau-b is undefined for the
pair (a constant feature there, or one document) is left out of that pair's mean. A pair no query
defines has no similarity (NaN in the matrix): it lowers no weight in the selection, and the output
names such pairs among the chosen. With ``signed``: tau-b of the oriented features, s_i s_j tau_ij.

Selection (sec. 2.4-2.5): max sum_i w_i x_i - c sum_{i != j} e_ij x_i x_j subject to sum_i x_i = t,
by the paper's greedy algorithm over the features that vary within some query. Take the feature of
largest weight, lower every other weight by 2 c e_ij, remove it, repeat. The weights after k steps
are each candidate's marginal gain, so the first t of the greedy order are the greedy set of size t
for every t. Theorem 1: this is the optimum when the optimal set of size t + 1 contains the one of
size t.

Cost of the pass: O(d l log l) to rank the features per query, O(l log l) per pair of features per
query for tau-b (d^2 / 2 pairs, in one range of pairs per thread: :meth:`_GasPass.tau_b`), and
the measure per feature and query. Memory: two d x d accumulators and the similarity matrix,
24 d^2 bytes (0.4 GB at d = 4,000), and per thread the ranks of a chunk of queries
(:func:`query_work_bytes`).
When that does not fit the budget, the matrix is summed in blocks of rows, one pass each
(:func:`pair_rows`), and kept on disk (:class:`StoredSimilarity`; the greedy selection reads one row
per chosen feature): passes = d / rows, and each pass ranks every feature again.
"""

import hashlib
import logging
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from streamrank._native import feature_measures as fm
from streamrank._native import linalg as la
from streamrank._native.kendall import block_tau_b_pairs, pair_ranges
from streamrank.errors import FormatError, InputError, ParameterError
from streamrank.evaluation.metrics import MAX_GAIN_LABEL, _log_table, _pairwise_in_parts
from streamrank.execution.executor import Pass, executor_or_local, partitioned_stream
from streamrank.io.atomic import written
from streamrank.io.h5digest import DIGEST_ATTR, file_digest

log = logging.getLogger("streamrank.selection.gas")

# a log line at most this often while the pass runs
PROGRESS_SECONDS = 10.0

FORMAT_NAME = "streamrank-gas"
# 2: the features constant within every query (constant_within_queries, feature_min, feature_max),
# importance at the expected value over tie orders; version 1 files load (their constant features
# are those whose similarity with themselves is undefined: the same features)
FORMAT_VERSION = 2
READS_VERSIONS = (1, 2)


def parse_importance(kind):
    """('map' | 'ndcg' | 'p' | 'pairwise', k) from 'map', 'ndcg@10', 'p@10' or 'pairwise'."""
    k = str(kind).strip().lower()
    if k in ("map", "pairwise"):
        return k, None
    for name in ("ndcg", "p"):
        if k.startswith(name + "@"):
            try:
                cut = int(k[len(name) + 1:])
            except ValueError:
                cut = 0
            if 1 <= cut <= MAX_CUT:
                return name, cut
    raise ParameterError(f"importance must be map, ndcg@K, p@K (1 <= K <= {MAX_CUT}) or pairwise; got {kind!r}. "
                         f"Use importance=map")


# the kernel's code of each GAS-E measure
_KERNEL_KIND = {"map": fm.AP, "ndcg": fm.NDCG, "p": fm.PRECISION}


# NDCG@K's and P@K's largest cut: a query's positions are int32 in the kernels (ndcg@2^63 overflowed them)
MAX_CUT = 2**31 - 1


@dataclass
class GasResult:
    """What one GAS pass found and the greedy order it gives (see the module docstring)."""

    importance: np.ndarray      # (d,) of the better orientation when signed
    sign: np.ndarray            # (d,) +1 or -1
    similarity: np.ndarray      # (d, d) mean tau-b of the oriented features; NaN where undefined
    kind: str
    tradeoff: float
    signed: bool
    n_queries: int
    fingerprint: str = ""
    source: str = ""
    constant: np.ndarray = None     # (d,) True: constant within every query (never selected)
    feature_min: np.ndarray = None  # (d,) each feature's smallest and largest value (NaN: not known)
    feature_max: np.ndarray = None

    def __post_init__(self):
        d = self.importance.shape[0]
        if self.constant is None:  # a feature varies within a query iff tau-b with itself is defined there
            self.constant = np.array([np.isnan(self.similarity[i, i]) for i in range(d)], bool)
        self.constant = np.asarray(self.constant, bool)
        for name in ("feature_min", "feature_max"):
            if getattr(self, name) is None:
                setattr(self, name, np.full(d, np.nan))

    @property
    def n_features(self):
        return self.importance.shape[0]

    @property
    def n_selectable(self):
        """The features that vary within some query: the ones the selection can take."""
        return int(np.count_nonzero(~self.constant))

    def greedy(self, t=None, tradeoff=None):
        """The greedy selection of ``t`` features (all that vary within a query by default): 0-based
        feature indices in the order chosen, and each one's largest similarity to those chosen
        before it (NaN where none is defined)."""
        return gas_greedy(self.importance, self.similarity, self.tradeoff if tradeoff is None else tradeoff,
                          self.n_selectable if t is None else t, candidates=~self.constant)

    def constant_reason(self, f):
        """Why feature f (0-based) cannot change any ranking, in words."""
        lo, hi = self.feature_min[f], self.feature_max[f]
        if np.isnan(lo):
            return "constant within every query (a GAS file of version 1: its values are not recorded)"
        if lo == hi:
            return f"the same value ({lo:g}) on every row"
        return (f"constant within every query; varies only across queries ({lo:g} to {hi:g}), like a query-level "
                f"feature")

    def undefined_pairs(self, order):
        """For each feature of ``order`` (0-based), the ones before it whose similarity to it is
        undefined on every query (no query where both vary)."""
        out = []
        for r, f in enumerate(order):
            row = np.asarray(self.similarity[int(f)], np.float64)
            out.append([int(g) for g in order[:r] if np.isnan(row[int(g)])])
        return out

    def save(self, path):
        """Write ``path`` atomically, with a sha256 of the whole content."""
        order, maxsim = self.greedy()
        with written(path) as tmp, h5py.File(tmp, "w") as f:
            a = f.attrs
            a["format"], a["version"] = FORMAT_NAME, FORMAT_VERSION
            a["importance_kind"], a["tradeoff"], a["signed"] = self.kind, float(self.tradeoff), bool(self.signed)
            a["n_queries"], a["fingerprint"], a["source"] = int(self.n_queries), self.fingerprint, self.source
            a["feature_ids"] = "1-based, the data's own numbering"
            f.create_dataset("importance", data=self.importance)
            f.create_dataset("sign", data=self.sign)
            if isinstance(self.similarity, StoredSimilarity):  # copied in blocks of rows
                ds_ = f.create_dataset("similarity", shape=self.similarity.shape, dtype="f8")
                for i0, rows in self.similarity.rows():
                    ds_[i0:i0 + rows.shape[0]] = rows
            else:
                f.create_dataset("similarity", data=self.similarity)
            # feature ids, 1-based: the greedy order, then the features constant within every query (never selected)
            last = np.flatnonzero(self.constant)
            f.create_dataset("order", data=np.concatenate([order, last]) + 1)
            f.create_dataset("max_similarity", data=np.concatenate([maxsim, np.full(last.size, np.nan)]))
            # the features never selected (1-based ids), and every feature's range (their reasons)
            f.create_dataset("constant_within_queries", data=np.flatnonzero(self.constant).astype(np.int64) + 1)
            f.create_dataset("feature_min", data=np.asarray(self.feature_min, np.float64))
            f.create_dataset("feature_max", data=np.asarray(self.feature_max, np.float64))
            a[DIGEST_ATTR] = file_digest(f)

    @classmethod
    def load(cls, path):
        try:
            with h5py.File(path, "r") as f:
                if f.attrs.get("format") != FORMAT_NAME:
                    raise FormatError(f"{path}: not a GAS file (format {f.attrs.get('format')!r}); make one with "
                                      f"streamrank select-features DATA -o {path}")
                version = int(f.attrs.get("version", -1))
                if version not in READS_VERSIONS:
                    raise FormatError(f"{path}: GAS file version {f.attrs.get('version')} is not one this streamrank "
                                      f"reads ({', '.join(map(str, READS_VERSIONS))}); upgrade streamrank or select "
                                      f"again")
                if f.attrs.get(DIGEST_ATTR) != file_digest(f):
                    raise FormatError(f"{path}: the GAS file's content does not match its sha256 (damaged); select "
                                      f"again")
                a = f.attrs
                d = f["importance"].shape[0]
                extra = {}
                if version >= 2:
                    constant = np.zeros(d, bool)
                    constant[f["constant_within_queries"][()] - 1] = True
                    extra = {"constant": constant, "feature_min": f["feature_min"][()],
                             "feature_max": f["feature_max"][()]}
                return cls(importance=f["importance"][()], sign=f["sign"][()], similarity=f["similarity"][()],
                           kind=str(a["importance_kind"]), tradeoff=float(a["tradeoff"]), signed=bool(a["signed"]),
                           n_queries=int(a["n_queries"]), fingerprint=str(a["fingerprint"]), source=str(a["source"]),
                           **extra)
        except OSError as e:
            raise FormatError(f"{path}: cannot be read as a GAS file ({e})") from None

    def to_dict(self, k=None):
        order, maxsim = self.greedy(k)
        undefined = self.undefined_pairs(order)
        return {"importance_kind": self.kind, "tradeoff": self.tradeoff, "signed": self.signed,
                "n_queries": self.n_queries, "selected": [
                    {"rank": r + 1, "feature": int(f) + 1, "importance": float(self.importance[f]),
                     "sign": int(self.sign[f]), "max_similarity_to_chosen": (None if np.isnan(s) else float(s)),
                     # chosen before it, with no query where both vary: no similarity, no weight lowered
                     "similarity_undefined_with": [g + 1 for g in u]}
                    for r, (f, s, u) in enumerate(zip(order, maxsim, undefined))],
                "constant_within_queries": [{"feature": int(f) + 1, "reason": self.constant_reason(f)}
                                            for f in np.flatnonzero(self.constant)]}


def gas_greedy(w, E, c, t, candidates=None):
    """Paper 003's greedy algorithm over ``candidates`` (a boolean mask; all by default): (order of
    0-based indices, largest similarity of each to the ones chosen before it, NaN for the first and
    where none of those is defined). Undefined similarities (NaN) lower no weight; ties in weight go
    to the lower index. ``E`` is read one row per chosen feature (an array or rows on disk)."""
    w = np.array(w, np.float64)
    d = w.shape[0]
    avail = np.ones(d, bool) if candidates is None else np.array(candidates, bool)
    n = int(np.count_nonzero(avail))
    t = int(t)
    if not 0 <= t <= n:
        raise ParameterError(f"the number of features to select must be in 0..{n}" +
                             ("" if n == d else f" (the {n} of {d} features that vary within a query)") + f"; got {t}")
    if not c >= 0:
        raise ParameterError(f"tradeoff must be >= 0; got {c}. Use tradeoff=0.5")
    order, maxsim = [], []
    for _ in range(t):
        i = int(np.flatnonzero(avail)[np.argmax(w[avail])])
        raw = np.asarray(E[i], np.float64)
        before = raw[order]
        before = before[~np.isnan(before)]
        maxsim.append(float(np.max(before)) if before.size else float("nan"))
        order.append(i)
        avail[i] = False
        w -= 2.0 * c * np.nan_to_num(raw, nan=0.0)  # the punishment of every other node by its similarity to i
    return np.array(order, np.int64), np.array(maxsim)


# the work file of a similarity matrix summed in blocks of rows (its finished rows are checked
# against the sha256 the checkpoint recorded for each block before a resume trusts them)
SIMILARITY_FORMAT = "streamrank-gas-similarity"


def rows_digest(rows):
    """sha256 of a block of similarity rows (float64, C order)."""
    return hashlib.sha256(np.ascontiguousarray(rows, np.float64).tobytes()).hexdigest()


class StoredSimilarity:
    """The d x d similarity matrix in an HDF5 file (dataset ``similarity``, chunked by rows), for a
    d too large to keep it in memory: rows are read as the greedy selection asks for them."""

    def __init__(self, path, d=None, mode="r+"):
        self.path = Path(path)
        if d is not None:  # a new store (never over an input of this process: io.atomic)
            from streamrank.io.atomic import check_not_input
            check_not_input(self.path, "similarity file")
            with h5py.File(self.path, "w") as f:
                f.attrs["format"], f.attrs["version"] = SIMILARITY_FORMAT, 1
                f.create_dataset("similarity", shape=(d, d), dtype="f8", chunks=(min(d, 64), d))
        self._f = h5py.File(self.path, mode)
        self._ds = self._f["similarity"]
        self.shape = self._ds.shape

    def rows(self, block=256):
        """(i0, rows) blocks of the whole matrix, in order."""
        for i0 in range(0, self.shape[0], block):
            yield i0, self._ds[i0:i0 + block]

    def __getitem__(self, key):
        return self._ds[key]

    def write_rows(self, i0, rows):
        self._ds[i0:i0 + rows.shape[0]] = rows
        self._f.flush()

    def close(self):
        if self._f:
            self._f.close()
            self._f = None


def fresh_range(d):
    """The carry's per-feature record of constancy: whether it varies within some query so far,
    and its smallest and largest value."""
    return {"varies": np.zeros(d, bool), "lo": np.full(d, np.inf), "hi": np.full(d, -np.inf)}


def add_range(c, X, qp):
    """Fold a block's queries (rows qp[q]:qp[q + 1] of X) into ``c``'s varies, lo and hi: a feature
    varies within a query where its smallest and largest values there differ."""
    sizes = np.diff(qp)
    starts = qp[:-1][sizes > 0]
    if starts.size == 0:
        return
    lo = np.minimum.reduceat(X, starts, axis=0)  # (queries, d): the segments end at the next non-empty query
    hi = np.maximum.reduceat(X, starts, axis=0)
    c["varies"] |= np.any(lo != hi, axis=0)
    c["lo"] = np.minimum(c["lo"], lo.min(axis=0))
    c["hi"] = np.maximum(c["hi"], hi.max(axis=0))


class _GasPass(Pass):
    """Per query, in query order: the importance measure of each feature (and of its negation),
    whether it varies within the query, and tau-b of every pair; sums kept in query order (one
    partition), so the result is the same for any block layout, and for a pass resumed from a
    checkpoint. ``commit``: called after each block with the carry and the next query (it writes a
    checkpoint when one is due)."""

    one_partition = True
    local_only = ("commit",)  # checkpoints are the caller's files: on a cluster, written after each partition

    def __init__(self, d, kind, cut, signed, log_table, carry=None, commit=None, n_queries=0, rows=None,
                 importance=True, qmax=1):
        self.d, self.kind, self.cut, self.signed, self.log_table = d, kind, cut, signed, log_table
        self.chunk_rows = tau_chunk_rows(d, qmax)  # as the memory plan counted it
        self.carry, self.commit, self.n_queries = carry, commit, n_queries
        self.i0, self.i1 = (0, d) if rows is None else rows  # the rows of the similarity matrix this pass sums
        self.importance = importance                         # the first pass also measures each feature
        self.t0 = self.shown = time.perf_counter()

    def start(self):
        if self.carry is not None:
            return self.carry
        d, r = self.d, self.i1 - self.i0
        return {"imp": np.zeros((2, d)), "pairs": 0, "tau": np.zeros((r, d)), "count": np.zeros((r, d), np.int64),
                "queries": 0, "rows": 0, **fresh_range(d)}

    def step(self, c, item):
        block, start, stop = item
        qp = np.ascontiguousarray(block.query_ptr, np.int64)
        X = np.ascontiguousarray(block.X)
        y = np.asarray(block.y, np.float64)
        add_range(c, X, qp)  # every pass: a few vectorised min/max, and the last pass's covers every query
        if not self.importance:
            pass
        elif self.kind == "pairwise":
            for f in range(self.d):
                n_pairs, correct = _pairwise_in_parts(y, X[:, f].astype(np.float64), qp)
                c["imp"][0, f] = la.sum_in_order(c["imp"][0, f], np.asarray(correct, np.float64))
                if f == 0:
                    c["pairs"] += int(np.sum(n_pairs))
        else:  # correct(-f) = pairs - correct(f) needs no second sweep for pairwise; these do
            if self.kind == "ndcg" and y.size and y.max() > MAX_GAIN_LABEL:
                r = int(np.argmax(y > MAX_GAIN_LABEL))
                raise InputError(f"row {start + r}: label {y[r]:g}: its gain 2^y - 1 overflows float64 (NDCG "
                                 f"evaluates labels up to {MAX_GAIN_LABEL}); use importance=map or pairwise, which "
                                 f"read only the labels' order")
            fm.block_measures(X, y, qp, self.cut or 1, _KERNEL_KIND[self.kind], self.signed, self.log_table, c["imp"])
        self.tau_b(X, qp, c["tau"], c["count"])  # into each cell in query order
        sizes = np.diff(qp)
        c["queries"] += int(np.count_nonzero(sizes))
        c["rows"] += int(sizes.sum())
        self.reached(c, block.q_stop)
        now = time.perf_counter()
        if now - self.shown >= PROGRESS_SECONDS:  # long passes say how far they are
            self.shown = now
            log.info("GAS: %d of %d queries, %.0f queries/s", c["queries"], self.n_queries,
                     c["queries"] / max(now - self.t0, 1e-9))


    def tau_b(self, X, qp, tau_sum, count):
        """Tau-b of the pass's pairs over a block's queries, added to the sums: the pairs in one
        range per thread (numba's thread count), each run by the nogil kernel in a thread of its
        own (kendall.block_tau_b_pairs; every cell has one writer), over steps of whole queries of
        about TAU_STEP_PAIR_ROWS pair-rows of work, so that Ctrl-C waits for one step at most."""
        r = self.i1 - self.i0
        ranges = pair_ranges(r, self.d, _threads())
        pool = None
        if len(ranges) > 1:
            from concurrent.futures import ThreadPoolExecutor
            pool = ThreadPoolExecutor(len(ranges), thread_name_prefix="streamrank-gas")
        try:
            step = max(1, int(TAU_STEP_PAIR_ROWS // max(r * self.d, 1)))
            q0, nq = 0, len(qp) - 1
            while q0 < nq:
                q1 = max(q0 + 1, int(np.searchsorted(qp, qp[q0] + step, side="right")) - 1)
                a, b = int(qp[q0]), int(qp[q1])
                sx, sq = X[a:b], qp[q0:q1 + 1] - a
                if pool is None:
                    for k0, k1 in ranges:
                        block_tau_b_pairs(sx, sq, self.i0, self.i1, k0, k1, self.chunk_rows, tau_sum, count)
                else:
                    jobs = [pool.submit(block_tau_b_pairs, sx, sq, self.i0, self.i1, k0, k1, self.chunk_rows,
                                        tau_sum, count) for k0, k1 in ranges]
                    for job in jobs:
                        job.result()
                q0 = q1
        finally:
            if pool is not None:
                pool.shutdown(wait=True)  # the threads write the sums: none may outlive the pass's step

    def reached(self, c, q_stop):
        if self.commit is not None:
            self.commit(c, q_stop)


def _threads():
    """The threads GAS's tau-b runs in: numba's thread count (NUMBA_NUM_THREADS; streamrank's
    settings configure it)."""
    import numba
    return max(1, int(numba.get_num_threads()))


def _importance(c, kind, signed, d):
    """(importance, sign) from the first pass's sums (module docstring)."""
    nq = c["queries"]
    if kind == "pairwise":
        pairs = max(c["pairs"], 1)
        acc = np.stack([c["imp"][0] / pairs, 1.0 - c["imp"][0] / pairs])
        scores = 1.0 / np.maximum(1.0 - acc, 1.0 / (2 * pairs))
    else:
        scores = c["imp"] / nq
    if signed:
        sign = np.where(scores[1] > scores[0], -1, 1).astype(np.int8)
        return np.where(sign > 0, scores[0], scores[1]), sign
    return scores[0].copy(), np.ones(d, np.int8)


def pair_rows(d, budget, resident):
    """Rows of the similarity matrix one pass sums: all d when the d x d sums and the matrix fit
    the budget (24 d^2 bytes), else the rows whose sums (and the query's tau-b rows, 24 bytes an
    entry) fit half of what it leaves (each further block is one more pass; the matrix then lives on
    disk, :class:`StoredSimilarity`)."""
    room = budget - resident
    if 24 * d * d <= room:
        return d
    return max(1, int(room / 2 / (24 * d)))


# bytes per raw block byte while a pass uses it: the block and the one read ahead, its labels and
# one feature's float64 column (the pairwise measure), about a tenth of a 4 d + 4 byte row
GAS_BYTES_PER_BLOCK_BYTE = 2.25


# the tau-b kernel ranks the features of a chunk of queries at once (int32 ranks and orders, 8 bytes a
# row and feature, in each thread): about 2 of the largest queries, at most 1,024 rows and about
# this many bytes a thread, at least the largest query
TAU_CHUNK_BYTES = 4 << 20
# the tau-b of a block goes in steps of whole queries of about this many (pairs x rows): a second
# or so of work, the longest a Ctrl-C waits for the threads
TAU_STEP_PAIR_ROWS = 5e7


def tau_chunk_rows(d, qmax):
    """Rows of the chunks of queries the tau-b kernel ranks at once (``qmax``: the largest query)."""
    return int(max(qmax, 1, min(2 * qmax, 1024, TAU_CHUNK_BYTES // (8 * max(d, 1)))))


def query_work_bytes(rows, d):
    """Bytes of the tau-b kernel's work when the largest query has ``rows`` rows, in each of its
    threads: int32 dense ranks and orders of every feature over a chunk of tau_chunk_rows(d, rows)
    rows (8 bytes a row and feature), a float64 column and its sort order (16 a row), three int32
    scratch arrays of the largest query (12 a row)."""
    w = tau_chunk_rows(d, rows)
    return _threads() * (8 * w * d + 16 * w + 12 * rows)


def gas_plan(ds, budget, resident, queries=None):
    """(rows of the similarity matrix a pass sums, bytes of a raw block) inside ``budget`` (which
    bounds the whole process, ``resident`` included), or ParameterError with the smallest budget
    that works, before any pass: a block holds at least the largest query whole, and one pass
    needs at least one row of sums (24 d bytes). All d rows in one pass when their sums and the
    matrix (24 d^2) fit beside the smallest blocks; else blocks of rows, one pass each
    (:func:`pair_rows` of what is left)."""
    from streamrank.io.budget import HEADROOM, STREAM_SLACK, remote_copies
    from streamrank.io.query_stream import BLOCK_SHARE_OF_BUDGET
    from streamrank.units import format_size
    d = ds.n_features
    q0, q1 = (0, ds.n_queries) if queries is None else queries
    sizes = np.diff(ds.query_ptr[q0:q1 + 1])
    qmax = int(sizes.max()) if sizes.size else 0
    qbytes = qmax * (4 * d + 4)
    fixed = query_work_bytes(qmax, d) + 16 * d + 8 * (qmax + 2)  # a query's work, the measures, the log table
    per_byte = GAS_BYTES_PER_BLOCK_BYTE + remote_copies(ds)  # a store's known-parts cache: one more copy
    smallest = per_byte * qbytes
    avail = (budget - resident - STREAM_SLACK) / HEADROOM - fixed
    if avail < smallest + 24 * d:
        need = resident + STREAM_SLACK + HEADROOM * (fixed + smallest + 24 * d)
        need = -(-int(need) // 10**6)
        if budget < resident + STREAM_SLACK:
            # below what the process holds before any work no plan can keep the budget: the
            # smallest blocks (tests use such budgets for many blocks), and the budget that works
            log.warning("memory budget %s is below the %s this process holds before any work: peak RSS will "
                        "exceed it; use memory_budget=%dMB", format_size(budget), format_size(resident + STREAM_SLACK),
                        need)
            return pair_rows(d, budget, resident), max(1, int(budget * BLOCK_SHARE_OF_BUDGET))
        raise ParameterError(f"memory_budget {format_size(budget)} is too small for GAS on {ds.name}: with "
                             f"{format_size(resident)} resident, a block holding its largest query ({qmax:,} rows of "
                             f"{d} features) and that query's ranks need {need} MB; use memory_budget={need}MB")
    # the sums' share: all of the matrix when it fits beside blocks of a quarter of what is left
    r = d if 24 * d * d <= avail - max(smallest, avail / 4) else pair_rows(d, avail - smallest, 0)
    block = min(budget * BLOCK_SHARE_OF_BUDGET, (avail - 24 * r * d) / per_byte)
    log.info("GAS memory plan (budget %s): resident %s; %d of %d rows of the similarity matrix a pass (%s); "
             "blocks of %s", format_size(budget), format_size(resident), r, d, format_size(24 * r * d),
             format_size(block))
    return r, max(int(block), 1)


def gas_scores(ds, *, importance="map", signed=False, tradeoff=0.0, queries=None, block_bytes=None,
               memory_budget="2GB", executor=None, checkpoint=None, resume=False, commit_seconds=60.0,
               similarity_file=None, rows_per_pass=None):
    """GAS over ``ds`` (or queries [q0, q1)): a :class:`GasResult`, in one streamed pass when the
    d x d sums fit the budget, else in passes over blocks of rows of the similarity matrix
    (:func:`pair_rows`, or ``rows_per_pass``), the matrix kept in ``similarity_file`` (default: in
    the checkpoint directory, else a temporary file removed with the result).

    ``checkpoint``: a directory where the pass's sums and its next query are written at most every
    ``commit_seconds``, and after each block of rows (atomically; :mod:`streamrank.state.checkpoint`);
    ``resume`` continues from there with the result of an uninterrupted run, bit for bit (the sums
    run in query order).
    """
    kind, cut = parse_importance(importance)
    from streamrank import params
    commit_seconds = params.check("commit_seconds", commit_seconds)
    tradeoff = params.check("tradeoff", tradeoff)
    d = ds.n_features
    if d == 0:
        raise ParameterError(f"{ds.name} has no features to select from")
    from streamrank.io.budget import resident_bytes
    from streamrank.state.model import settled_resident
    from streamrank.units import budget_bytes
    q0, q1 = (0, ds.n_queries) if queries is None else (int(queries[0]), int(queries[1]))
    if block_bytes:  # the caller's blocks: the sums take what the budget leaves beside the resident set
        r = pair_rows(d, budget_bytes(memory_budget), resident_bytes())
    else:
        r, block_bytes = gas_plan(ds, budget_bytes(memory_budget), settled_resident(), (q0, q1))
    r = int(rows_per_pass) if rows_per_pass else r
    # the rows a pass sums are not part of the settings: each pair's sum is the same whatever the
    # blocks of rows, so a resumed run keeps the blocks its checkpoint was written with
    config = {"gas": FORMAT_VERSION, "importance": str(importance), "signed": bool(signed), "queries": [q0, q1]}
    carry, start_q, first_block, done, stored_at, digests = None, q0, 0, None, None, []
    if checkpoint is not None and resume:
        resumed = _resume(checkpoint, config, ds, r, q0, q1)
        if resumed is not None:
            carry, start_q, first_block, done, stored_at, digests, r = resumed
    blocks = [(i0, min(d, i0 + r)) for i0 in range(0, d, r)]
    store = None
    if len(blocks) > 1:
        store = _similarity_store(d, r, blocks, first_block, checkpoint, similarity_file, stored_at, digests)
    save = _GasCheckpoint(checkpoint, config, ds.fingerprint, commit_seconds, q1, r, store, digests, done)
    sizes = np.diff(ds.query_ptr)
    log_table = _log_table(int(sizes.max(initial=0)) + 2)
    t = time.perf_counter()
    E, sign = None, None
    for bi in range(first_block, len(blocks)):
        i0, i1 = blocks[bi]
        save.bi, save.last = bi, time.perf_counter()
        stream = partitioned_stream(ds, executor, block_bytes=block_bytes, queries=(start_q, q1))
        c, _ = executor_or_local(executor).run(
            _GasPass(d, kind, cut, signed, log_table, carry, save, q1 - q0, rows=(i0, i1), importance=done is None,
                     qmax=int(sizes.max(initial=1))),
            stream)
        if done is None:
            done = save.done = {"imp": c["imp"], "pairs": c["pairs"], "queries": c["queries"], "rows": c["rows"]}
        if done["queries"] == 0:
            raise ParameterError(f"{ds.name} has no query with documents; there is nothing to select from")
        imp, sign = _importance(done, kind, signed, d)
        with np.errstate(invalid="ignore", divide="ignore"):
            rows = np.where(c["count"] > 0, c["tau"] / np.maximum(c["count"], 1), np.nan)
        rows *= np.outer(sign[i0:i1], sign)  # tau-b of the oriented features
        if store is None:
            E = rows
        else:
            store.write_rows(i0, rows)
            del digests[bi:]
            digests.append(rows_digest(rows))
            if bi + 1 < len(blocks):  # the next block starts from the top of the data
                r1 = blocks[bi + 1][1] - blocks[bi + 1][0]
                save.bi = bi + 1
                save({"imp": c["imp"], "pairs": 0, "queries": 0, "rows": 0, "tau": np.zeros((r1, d)),
                      "count": np.zeros((r1, d), np.int64), **fresh_range(d)}, q0, force=True)
        carry, start_q = None, q0
    return _gas_result(ds, c, done, kind, signed, d, importance, tradeoff, E if store is None else store,
                       time.perf_counter() - t, len(blocks), first_block)


def _resume(checkpoint, config, ds, r, q0, q1):
    """What a GAS checkpoint in ``checkpoint`` holds, or None when there is none to resume:
    (carry, next query, block, the first block's importance sums or None, similarity file,
    digests of the finished blocks' rows, rows a pass sums). FormatError when it is inconsistent."""
    from streamrank.state.checkpoint import read_checkpoint
    d = ds.n_features
    ck = read_checkpoint(checkpoint, config=config, fingerprint=ds.fingerprint, warn=log.warning)
    if ck is None:
        return None
    sc = ck["scalars"]
    first_block, start_q = int(sc["block"]), int(sc["next_query"])
    r, stored_at = int(sc["rows_per_pass"]), sc.get("similarity_file")
    digests = list(sc.get("similarity_sha256", []))
    carry = {"imp": np.asarray(ck["w"], np.float64).reshape(2, d), "pairs": int(sc["pairs"]),
             "tau": np.asarray(ck["extra"]["tau"], np.float64), "queries": int(sc["queries"]),
             "count": np.asarray(ck["extra"]["count"], np.int64), "rows": int(sc["rows"]),
             "varies": np.asarray(ck["extra"]["varies"], bool), "lo": np.asarray(ck["extra"]["lo"], np.float64),
             "hi": np.asarray(ck["extra"]["hi"], np.float64)}
    done = None
    if sc.get("first_done"):
        done = {k: np.asarray(ck["extra"][k]) if k in ("imp",) else sc["first_done"][k]
                for k in ("imp", "pairs", "queries", "rows")}
    blocks = [(i0, min(d, i0 + r)) for i0 in range(0, d, r)]
    shape = (blocks[first_block][1] - blocks[first_block][0], d) if first_block < len(blocks) else None
    if not q0 <= start_q <= q1 or shape is None or carry["tau"].shape != shape or carry["count"].shape != shape:
        raise FormatError(f"{checkpoint}: the GAS checkpoint is inconsistent (block {first_block}, next query "
                          f"{start_q}); start again with resume=False")
    log.info("GAS: resuming from %s at rows %d.. of the similarity matrix, query %d of %d", checkpoint,
             blocks[first_block][0], start_q - q0, q1 - q0)
    return carry, start_q, first_block, done, stored_at, digests, r


def _similarity_store(d, r, blocks, first_block, checkpoint, similarity_file, stored_at, digests):
    """The :class:`StoredSimilarity` that keeps the matrix's rows when a pass sums only ``r`` of
    them: ``similarity_file``, else the checkpoint's, else one in the checkpoint directory, else a
    temporary file removed with the store. A resumed run's finished rows must be there as the
    checkpoint saw them (their ``digests``), else ParameterError or FormatError."""
    if checkpoint is not None:
        Path(checkpoint).mkdir(parents=True, exist_ok=True)
    path = similarity_file or stored_at or (Path(checkpoint) / "similarity.h5" if checkpoint is not None else None)
    if path is None:
        fd, path = tempfile.mkstemp(prefix="streamrank-gas-", suffix=".h5")
        import os
        os.close(fd)
    if first_block > 0:  # the rows of the finished blocks must be there
        if stored_at is not None and Path(path).resolve() != Path(stored_at).resolve():
            raise ParameterError(f"the checkpoint in {checkpoint} keeps the similarity rows it has summed in "
                                 f"{stored_at}, not {path}; resume with similarity_file={stored_at}")
        if not Path(path).exists():
            raise FormatError(f"{path}: the similarity rows of the {first_block} finished blocks of the "
                              f"checkpoint in {checkpoint} are gone; start again with resume=False")
    store = StoredSimilarity(path, None if first_block > 0 else d)
    for k, want in enumerate(digests[:first_block]):  # the finished rows, as the checkpoint saw them
        a, b = k * r, min(d, (k + 1) * r)
        if rows_digest(store[a:b]) != want:
            raise FormatError(f"{path}: the similarity rows {a}..{b - 1} differ from those the checkpoint in "
                              f"{checkpoint} recorded (damaged or changed since); start again with resume=False")
    if similarity_file is None and checkpoint is None:
        weakref.finalize(store, Path(path).unlink, missing_ok=True)
    log.info("GAS: %d features need %d passes of %d rows of the similarity matrix (kept in %s)", d, len(blocks),
             r, path)
    return store


class _GasCheckpoint:
    """The GAS pass's ``commit``: a checkpoint of block ``bi`` at the next query, written when
    ``commit_seconds`` have passed since ``last`` (never at the range's end, ``q1``), or when
    forced; nothing without a checkpoint directory. ``done``: the first block's importance sums,
    once known; ``digests``: the finished blocks' rows (the caller's list, read at each write)."""

    def __init__(self, path, config, fingerprint, commit_seconds, q1, r, store, digests, done):
        self.path, self.config, self.fingerprint = path, config, fingerprint
        self.commit_seconds, self.q1, self.r, self.store = commit_seconds, q1, r, store
        self.digests, self.done = digests, done
        self.bi, self.last = 0, time.perf_counter()

    def __call__(self, c, next_query, force=False):
        if self.path is None or (not force and (time.perf_counter() - self.last < self.commit_seconds
                                                or next_query >= self.q1)):
            return
        from streamrank.state.checkpoint import write_checkpoint
        done, bi = self.done, self.bi
        first = done or {"imp": c["imp"], "pairs": c["pairs"], "queries": c["queries"], "rows": c["rows"]}
        write_checkpoint(self.path, config=self.config, fingerprint=self.fingerprint,
                         scalars={"block": bi, "next_query": int(next_query), "pairs": int(c["pairs"]),
                                  "rows_per_pass": self.r,
                                  "similarity_file": None if self.store is None else str(self.store.path),
                                  "similarity_sha256": self.digests[:bi],
                                  "queries": int(c["queries"]), "rows": int(c["rows"]),
                                  "first_done": None if done is None else {
                                      k: int(first[k]) for k in ("pairs", "queries", "rows")}},
                         w=c["imp"].ravel(), g=np.zeros(0),
                         extra={"tau": c["tau"], "count": c["count"], "imp": np.asarray(first["imp"]),
                                "varies": c["varies"].astype(np.uint8), "lo": c["lo"], "hi": c["hi"]})
        self.last = time.perf_counter()


def _gas_result(ds, c, done, kind, signed, d, importance, tradeoff, similarity, secs, n_blocks, first_block):
    """The :class:`GasResult` of the last pass's carry ``c`` and the first's sums ``done``, with
    its log lines."""
    imp, sign = _importance(done, kind, signed, d)
    nq = done["queries"]
    log.info("GAS: %d features over %d queries (%d rows) in %.2f s (%.0f queries/s a pass, %d pass%s)", d, nq,
             done["rows"], secs, nq * n_blocks / max(secs, 1e-9), n_blocks - first_block,
             "" if n_blocks - first_block == 1 else "es")
    constant = ~c["varies"]  # the last pass saw every query
    if constant.any():
        log.info("GAS: %d of %d features are constant within every query and cannot be selected: %s",
                 int(constant.sum()), d, ", ".join(str(f + 1) for f in np.flatnonzero(constant)))
    return GasResult(importance=imp, sign=sign, similarity=similarity, kind=importance,
                     tradeoff=float(tradeoff), signed=bool(signed), n_queries=nq, fingerprint=ds.fingerprint,
                     source=ds.name, constant=constant, feature_min=np.asarray(c["lo"], np.float64),
                     feature_max=np.asarray(c["hi"], np.float64))


def parse_features(spec, n_features=None):
    """0-based column indices from ``'3,7,12'`` (1-based ids), ``'@FILE'`` (ids, one per line or
    separated by commas or spaces) or ``'gas.h5:K'`` (the first K of a GAS file's greedy order)."""
    spec = str(spec).strip()
    if ":" in spec and spec.rsplit(":", 1)[0].endswith((".h5", ".hdf5")):
        path, k = spec.rsplit(":", 1)
        try:
            k = int(k)
        except ValueError:
            raise ParameterError(f"features {spec!r}: after the GAS file comes the number of features to take, "
                                 f"as in gas.h5:20") from None
        res = GasResult.load(path)
        if n_features is not None and res.n_features != n_features:
            raise ParameterError(f"features {spec!r}: {path} ranks {res.n_features} features, the data have "
                                 f"{n_features}; select on the same data")
        if not 1 <= k <= res.n_selectable:
            raise ParameterError(f"features {spec!r}: {path} ranks {res.n_selectable} features (those that vary "
                                 f"within a query, of {res.n_features}); use "
                                 f"features={path}:{min(max(k, 1), max(res.n_selectable, 1))}")
        ids = res.greedy(k)[0] + 1
    else:
        text = spec
        if spec.startswith("@"):
            from streamrank.io.urls import read_bytes
            try:
                text = read_bytes(spec[1:]).decode("utf-8-sig", "replace")
            except OSError as e:
                raise ParameterError(f"features {spec!r}: cannot read {spec[1:]} ({e.strerror})") from None
        try:
            ids = [int(tok) for tok in text.replace(",", " ").split()]
        except ValueError:
            raise ParameterError(f"features {spec!r}: feature ids are integers (1-based, as in the data); use "
                                 f"features=3,7,12, features=@FILE or features=gas.h5:20") from None
    ids = np.asarray(ids, np.int64)
    if ids.size == 0:
        raise ParameterError(f"features {spec!r} names no feature; use features=1,2,3")
    if np.any(ids < 1) or (n_features is not None and np.any(ids > n_features)):
        raise ParameterError(f"features {spec!r}: ids must be in 1..{n_features or 'n_features'} (1-based, the data's "
                             f"numbering); got {ids.min()}..{ids.max()}. Use features=1,2,3")
    if len(set(ids.tolist())) != ids.size:
        raise ParameterError(f"features {spec!r} names a feature twice; use features=1,2,3 (each id once)")
    return ids - 1
