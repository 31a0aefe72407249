"""GAS: greedy feature selection for ranking (paper 003), from one streamed pass over the queries.

Importance of feature f (paper 003 sec. 2.2), from ordering every training query by f alone:

- GAS-E: a ranking measure of that order, MAP or NDCG@k in LETOR's letor4 conventions (ties keep
  the input order, as the official evaluator does), averaged over the queries;
- GAS-L: the inverse of the pairwise error rate, 1 / (1 - correct / pairs) over all preference pairs
  pooled (a pair tied in f counts one half; an error rate of 0 is floored at 1 / (2 pairs)).

With ``signed`` each feature is also read negated (-f orders the other way) and keeps the better
orientation (its sign is recorded). The orders are those of the raw feature values: normalisation
by a positive scale per feature or query does not change them.

Similarity of features i and j (sec. 2.3): the mean over queries of Kendall's tau-b between the
orders they induce (:mod:`streamrank._native.kendall`). A query on which tau-b is undefined for the
pair (a constant feature there, or one document) is left out of that pair's mean. A pair no query
defines gets NaN in the matrix and counts 0 in the selection. With ``signed``: tau-b of the oriented
features, s_i s_j tau_ij.

Selection (sec. 2.4-2.5): max sum_i w_i x_i - c sum_{i != j} e_ij x_i x_j subject to sum_i x_i = t,
by the paper's greedy algorithm. Take the feature of largest weight, lower every other weight by
2 c e_ij, remove it, repeat. The weights after k steps are each candidate's marginal gain, so the
first t of the greedy order are the greedy set of size t for every t. Theorem 1: this is the
optimum when the optimal set of size t + 1 contains the one of size t.

Cost of the pass: O(d l log l) to rank the features per query, O(l log l) per pair of features per
query for tau-b (d^2 / 2 pairs), and the measure per feature and query. Memory: two d x d
accumulators and the similarity matrix (24 d^2 bytes: 0.4 GB at d = 4,000; refused beyond the
budget, since blocks of feature pairs kept on disk are not implemented) and one query's ranks. 136 features and 120-document queries take about 40 ms a query
on 2 cores.
"""

import json
import logging
import time
from dataclasses import dataclass

import h5py
import numpy as np

from streamrank._native import linalg as la
from streamrank._native.feature_measures import block_measures
from streamrank._native.kendall import query_tau_b
from streamrank.errors import FormatError, ParameterError
from streamrank.evaluation.metrics import _log_table, _pairwise_in_parts
from streamrank.execution.executor import Pass, executor_or_local
from streamrank.io.atomic import written
from streamrank.io.h5digest import DIGEST_ATTR, file_digest

log = logging.getLogger("streamrank.selection.gas")

# a log line at most this often while the pass runs
PROGRESS_SECONDS = 10.0

FORMAT_NAME = "streamrank-gas"
FORMAT_VERSION = 1


def parse_importance(kind):
    """('map' | 'ndcg' | 'pairwise', k) from 'map', 'ndcg@10' or 'pairwise'."""
    k = str(kind).strip().lower()
    if k in ("map", "pairwise"):
        return k, None
    if k.startswith("ndcg@"):
        try:
            cut = int(k[5:])
        except ValueError:
            cut = 0
        if cut >= 1:
            return "ndcg", cut
    raise ParameterError(f"importance must be map, ndcg@K (K >= 1) or pairwise; got {kind!r}. Use importance=map")


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

    @property
    def n_features(self):
        return self.importance.shape[0]

    def greedy(self, t=None, tradeoff=None):
        """The greedy selection of ``t`` features (all by default): 0-based feature indices in the
        order chosen, and each one's largest similarity to those chosen before it."""
        return gas_greedy(self.importance, self.similarity, self.tradeoff if tradeoff is None else tradeoff,
                          self.n_features if t is None else t)

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
            f.create_dataset("similarity", data=self.similarity)
            f.create_dataset("order", data=order + 1)  # feature ids, 1-based
            f.create_dataset("max_similarity", data=maxsim)
            a[DIGEST_ATTR] = file_digest(f)

    @classmethod
    def load(cls, path):
        try:
            with h5py.File(path, "r") as f:
                if f.attrs.get("format") != FORMAT_NAME:
                    raise FormatError(f"{path}: not a GAS file (format {f.attrs.get('format')!r}); make one with "
                                      f"streamrank select-features DATA -o {path}")
                if int(f.attrs.get("version", -1)) != FORMAT_VERSION:
                    raise FormatError(f"{path}: GAS file version {f.attrs.get('version')} is not {FORMAT_VERSION}; "
                                      f"upgrade streamrank or select again")
                if f.attrs.get(DIGEST_ATTR) != file_digest(f):
                    raise FormatError(f"{path}: the GAS file's content does not match its sha256 (damaged); select "
                                      f"again")
                a = f.attrs
                return cls(importance=f["importance"][()], sign=f["sign"][()], similarity=f["similarity"][()],
                           kind=str(a["importance_kind"]), tradeoff=float(a["tradeoff"]), signed=bool(a["signed"]),
                           n_queries=int(a["n_queries"]), fingerprint=str(a["fingerprint"]), source=str(a["source"]))
        except OSError as e:
            raise FormatError(f"{path}: cannot be read as a GAS file ({e})") from None

    def to_dict(self, k=None):
        order, maxsim = self.greedy(k)
        return {"importance_kind": self.kind, "tradeoff": self.tradeoff, "signed": self.signed,
                "n_queries": self.n_queries, "selected": [
                    {"rank": r + 1, "feature": int(f) + 1, "importance": float(self.importance[f]),
                     "sign": int(self.sign[f]), "max_similarity_to_chosen": (None if np.isnan(s) else float(s))}
                    for r, (f, s) in enumerate(zip(order, maxsim))]}


def gas_greedy(w, E, c, t):
    """Paper 003's greedy algorithm: (order of 0-based indices, largest similarity of each to the
    ones chosen before it, NaN for the first). Undefined similarities (NaN) count 0; ties in weight
    go to the lower index."""
    w = np.array(w, np.float64)
    E = np.nan_to_num(np.asarray(E, np.float64), nan=0.0)
    d = w.shape[0]
    t = int(t)
    if not 0 <= t <= d:
        raise ParameterError(f"the number of features to select must be in 0..{d}; got {t}")
    if not c >= 0:
        raise ParameterError(f"tradeoff must be >= 0; got {c}. Use tradeoff=0.5")
    avail = np.ones(d, bool)
    order, maxsim = [], []
    for _ in range(t):
        i = int(np.flatnonzero(avail)[np.argmax(w[avail])])
        maxsim.append(float(np.max(E[i, order])) if order else float("nan"))
        order.append(i)
        avail[i] = False
        w -= 2.0 * c * E[i]  # the punishment of every other node by its similarity to i
    return np.array(order, np.int64), np.array(maxsim)


class _GasPass(Pass):
    """Per query, in query order: the importance measure of each feature (and of its negation) and
    tau-b of every pair; sums kept in query order (one partition), so the result is the same for
    any block layout, and for a pass resumed from a checkpoint. ``commit``: called after each
    block with the carry and the next query (it writes a checkpoint when one is due)."""

    one_partition = True

    def __init__(self, d, kind, cut, signed, log_table, carry=None, commit=None, n_queries=0):
        self.d, self.kind, self.cut, self.signed, self.log_table = d, kind, cut, signed, log_table
        self.carry, self.commit, self.n_queries = carry, commit, n_queries
        self.t0 = self.shown = time.perf_counter()

    def start(self):
        if self.carry is not None:
            return self.carry
        d = self.d
        return {"imp": np.zeros((2, d)), "pairs": 0, "tau": np.zeros((d, d)), "count": np.zeros((d, d), np.int64),
                "queries": 0, "rows": 0}

    def step(self, c, item):
        block, start, stop = item
        qp = np.ascontiguousarray(block.query_ptr, np.int64)
        X = np.ascontiguousarray(block.X)
        y = np.asarray(block.y, np.float64)
        if self.kind == "pairwise":
            for f in range(self.d):
                n_pairs, correct = _pairwise_in_parts(y, X[:, f].astype(np.float64), qp)
                c["imp"][0, f] = la.sum_in_order(c["imp"][0, f], np.asarray(correct, np.float64))
                if f == 0:
                    c["pairs"] += int(np.sum(n_pairs))
        else:  # correct(-f) = pairs - correct(f) needs no second sweep for pairwise; these do
            block_measures(X, y, qp, self.cut or 1, self.kind == "map", self.signed, self.log_table, c["imp"])
        tau = np.empty((self.d, self.d))
        for q in range(len(qp) - 1):
            a, b = int(qp[q]), int(qp[q + 1])
            if b == a:
                continue
            query_tau_b(X[a:b], tau)
            ok = ~np.isnan(tau)
            c["tau"][ok] += tau[ok]
            c["count"] += ok
            c["queries"] += 1
            c["rows"] += b - a
        if self.commit is not None:
            self.commit(c, block.q_stop)
        now = time.perf_counter()
        if now - self.shown >= PROGRESS_SECONDS:  # long passes say how far they are
            self.shown = now
            log.info("GAS: %d of %d queries, %.0f queries/s", c["queries"], self.n_queries,
                     c["queries"] / max(now - self.t0, 1e-9))


def gas_scores(ds, *, importance="map", signed=False, tradeoff=0.0, queries=None, block_bytes=None,
               memory_budget="2GB", executor=None, checkpoint=None, resume=False, commit_seconds=60.0):
    """One streamed pass over ``ds`` (or queries [q0, q1)): a :class:`GasResult`.

    ``checkpoint``: a directory where the pass's sums and its next query are written at most every
    ``commit_seconds`` (atomically; :mod:`streamrank.state.checkpoint`); ``resume`` continues from
    there and gives the result of an uninterrupted pass, bit for bit (the sums run in query order).
    """
    kind, cut = parse_importance(importance)
    if not tradeoff >= 0:
        raise ParameterError(f"tradeoff must be >= 0; got {tradeoff}. Use tradeoff=0.5")
    d = ds.n_features
    if d == 0:
        raise ParameterError(f"{ds.name} has no features to select from")
    from streamrank.io.budget import resident_bytes
    from streamrank.units import format_size, parse_size
    budget = parse_size(memory_budget)
    need = 24 * d * d  # the two d x d accumulators and the similarity matrix
    if need > budget - resident_bytes():
        raise ParameterError(f"GAS over {d:,} features keeps {format_size(need)} of d x d sums and similarities, more "
                             f"than memory_budget {format_size(budget)} leaves; use memory_budget="
                             f"{format_size(need + resident_bytes() + (64 << 20))} (blocks of feature pairs on disk "
                             f"are not implemented)")
    q0, q1 = (0, ds.n_queries) if queries is None else (int(queries[0]), int(queries[1]))
    config = {"gas": FORMAT_VERSION, "importance": str(importance), "signed": bool(signed), "queries": [q0, q1]}
    carry, start_q = None, q0
    if checkpoint is not None and resume:
        from streamrank.state.checkpoint import read_checkpoint
        ck = read_checkpoint(checkpoint, config=config, fingerprint=ds.fingerprint, warn=log.warning)
        if ck is not None:
            sc = ck["scalars"]
            carry = {"imp": np.asarray(ck["w"], np.float64).reshape(2, d), "pairs": int(sc["pairs"]),
                     "tau": np.asarray(ck["extra"]["tau"], np.float64), "queries": int(sc["queries"]),
                     "count": np.asarray(ck["extra"]["count"], np.int64), "rows": int(sc["rows"])}
            start_q = int(sc["next_query"])
            if not q0 <= start_q <= q1 or carry["tau"].shape != (d, d) or carry["count"].shape != (d, d):
                raise FormatError(f"{checkpoint}: the GAS checkpoint is inconsistent (next query {start_q}); start "
                                  f"again with resume=False")
            log.info("GAS: resuming from %s at query %d of %d", checkpoint, start_q - q0, q1 - q0)
    commit = None
    if checkpoint is not None:
        from streamrank.state.checkpoint import write_checkpoint
        last = [time.perf_counter()]

        def write(c, next_query):
            if time.perf_counter() - last[0] < commit_seconds or next_query >= q1:
                return
            write_checkpoint(checkpoint, config=config, fingerprint=ds.fingerprint,
                             scalars={"next_query": int(next_query), "pairs": int(c["pairs"]),
                                      "queries": int(c["queries"]), "rows": int(c["rows"])},
                             w=c["imp"].ravel(), g=np.zeros(0), extra={"tau": c["tau"], "count": c["count"]})
            last[0] = time.perf_counter()
        commit = write
    stream = ds.stream(block_bytes=block_bytes, memory_budget=None if block_bytes else memory_budget,
                       queries=(start_q, q1))
    sizes = np.diff(ds.query_ptr)
    t = time.perf_counter()
    c, _ = executor_or_local(executor).run(
        _GasPass(d, kind, cut, signed, _log_table(int(sizes.max(initial=0)) + 2), carry, commit, q1 - q0), stream)
    secs = time.perf_counter() - t
    nq = c["queries"]
    if nq == 0:
        raise ParameterError(f"{ds.name} has no query with documents; there is nothing to select from")
    if kind == "pairwise":
        pairs = max(c["pairs"], 1)
        acc = np.stack([c["imp"][0] / pairs, 1.0 - c["imp"][0] / pairs])
        err = np.maximum(1.0 - acc, 1.0 / (2 * pairs))
        scores = 1.0 / err
    else:
        scores = c["imp"] / nq
    if signed:
        sign = np.where(scores[1] > scores[0], -1, 1).astype(np.int8)
        imp = np.where(sign > 0, scores[0], scores[1])
    else:
        sign = np.ones(d, np.int8)
        imp = scores[0].copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        E = np.where(c["count"] > 0, c["tau"] / np.maximum(c["count"], 1), np.nan)
    E = E * np.outer(sign, sign)
    log.info("GAS: %d features over %d queries (%d rows) in %.2f s (%.0f queries/s)", d, nq, c["rows"], secs,
             nq / max(secs, 1e-9))
    return GasResult(importance=imp, sign=sign, similarity=E, kind=importance, tradeoff=float(tradeoff),
                     signed=bool(signed), n_queries=nq, fingerprint=ds.fingerprint, source=ds.name)


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
        ids = res.greedy(k)[0] + 1
    else:
        text = spec
        if spec.startswith("@"):
            try:
                text = open(spec[1:]).read()
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


def to_json(result, k):
    return json.dumps(result.to_dict(k))
