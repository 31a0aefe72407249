"""Ranking metrics per query: P@k, MAP, NDCG@k, MeanNDCG, AvgNDCG, AvgPrec and pairwise accuracy.

Two conventions (DESIGN.md, "Evaluation"):

``letor4``
    Reproduces LETOR 4.0's official ``Eval-Score-4.0.pl`` (per-query mode) digit for digit:

    * gain table {0: 0, 1: 1, 2: 3}. That is 2^y - 1 on {0, 1, 2}, so labels above 2 are given
      2^y - 1 here and the report carries a note (the official script has no table entry for them:
      gain 0 and "not relevant");
    * positions 1 and 2 undiscounted, position i >= 3 weighted 1/log2(i), computed as the script
      does, ``gain * log(2) / log(i)`` with libm's ``log``, summed left to right;
    * ties keep input order: the script sorts a query's documents by line number, then by
      descending prediction with Perl's (stable, merge) sort;
    * the script calls ``NDCG(n_q, ...)``, so NDCG exists only at positions 1..n_q: NDCG@k for
      k > n_q is undefined in Perl and printed and averaged as 0;
    * MeanNDCG = mean of NDCG@1..n_q; P@k divides by k, missing positions count as irrelevant;
      relevant means label >= 1; AP = mean over relevant documents of the precision at their
      positions (0 when there is none; unrounded: the script's ``sprintf("%.4f")`` on MAP is
      commented out);
    * a query without relevant documents scores 0 everywhere and stays in every average;
    * averages are plain sums over queries in ascending numeric qid order divided by the number
      of queries (the script's order, reproduced so that even the last bit agrees).

``standard``
    Gain 2^y - 1, discount 1/log2(i + 1) at every position i >= 1, k cut at n_q (NDCG@k = NDCG@n_q
    and P@k = relevant in the top n_q / n_q when k > n_q, as in RankLib), ties broken
    pessimistically (within equal scores the lowest labels come first, which is the worst order for
    every metric here at once), relevant means label > 0, and queries without relevant documents
    are skipped (NaN per query, left out of the averages) and counted.

AvgNDCG and AvgPrec (paper 001's measures) are the means of NDCG@k and P@k over k = 1..20 in the
convention chosen; paper 001's own gains and relevance rules differ from both conventions, so its
printed figures are context, not digit targets.

Pairwise accuracy is the same in both conventions: the fraction of preference pairs
(y_i > y_j, same query) with s_i > s_j, a tied score pair counting one half. It is computed in
O(l log l) per query from counts (never from explicit pairs); queries without pairs are NaN and
left out of the average.

Inputs are arrays ``y`` (labels), ``scores`` and ``query_ptr`` (rows of query q are
``query_ptr[q]:query_ptr[q+1]``); rows keep input order within each query, which decides ties.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from streamrank.errors import InputError, ParameterError

__all__ = ["CONVENTIONS", "Report", "evaluate", "pairwise_accuracy_counts"]

CONVENTIONS = ("letor4", "standard")
# the cut-offs averaged by AvgNDCG and AvgPrec (paper 001, sec. 3)
AVG_KS = tuple(range(1, 21))

_DESCRIPTION = {
    "letor4": ("LETOR 4.0 Eval-Score-4.0.pl: gains 0/1/3 for labels 0/1/2, positions 1-2 undiscounted "
               "then 1/log2(i), ties in input order, NDCG@k = 0 for k beyond a query's length, "
               "P@k over k, queries without relevant documents score 0 and stay in the averages"),
    "standard": ("gain 2^y-1, discount 1/log2(i+1), k cut at the query's length, ties broken "
                 "pessimistically, queries without relevant documents skipped"),
}

# ln 2 as Perl's log(2.0) gives it (libm); math.log is libm's log as well. numpy's vectorised log
# may differ from libm in the last bit, which could flip a 4-decimal rounding, so the letor4
# discounts are built with math.log only.
_LN2 = math.log(2.0)


def _log_table(n):
    """``log(i)`` for i = 0..n (entry 0 unused), with libm's log (see ``_LN2``)."""
    t = np.empty(n + 1)
    t[0] = np.nan
    t[1:] = [math.log(float(i)) for i in range(1, n + 1)]
    return t


# --------------------------------------------------------------------------------------------
# pairwise accuracy
# --------------------------------------------------------------------------------------------

def _inversions_by_group(r, first, group_of, n_groups=None):
    """Inverted pairs within groups of consecutive positions, counted per group.

    Parameters
    ----------
    r : ndarray of int64, non-negative
        Values in their order.
    first : ndarray of bool
        True where a group (a query) starts; groups are runs of consecutive positions.
    group_of : ndarray of int64
        Group index of each position (non-decreasing), for the per-group totals.
    n_groups : int, optional
        Number of groups, empty ones included (default: the last position's group + 1, which
        misses empty groups at the end: a query list ending in an empty query).

    Returns
    -------
    ndarray of int64
        For each group, the number of positions p < q in it with r[p] > r[q].

    Notes
    -----
    O(n log(max r)), vectorised over all groups at once. An inverted pair is counted at the
    highest bit where r[p] and r[q] differ. Going from the top bit down, the values are kept
    arranged by (group, bits above the current one), stably, so original order holds within a
    subgroup; there every value with a 0 bit is inverted with the values before it with a 1 bit.
    Each subgroup is then stably partitioned by the current bit (0s first): one radix-sort step
    done with cumulative sums. Values never leave their group's block of positions, so a
    position's group is fixed and the counts are summed per position, then per group.
    """
    n = r.size
    if n_groups is None:
        n_groups = int(group_of[-1]) + 1 if n else 0
    if n < 2:
        return np.zeros(n_groups, dtype=np.int64)
    idx = np.arange(n, dtype=np.int64)
    cur = r.astype(np.int64, copy=True)
    per_position = np.zeros(n, dtype=np.int64)
    for b in range(int(cur.max()).bit_length() - 1, -1, -1):
        prefix = cur >> (b + 1)
        bit = (cur >> b) & 1
        new_group = first.copy()
        new_group[1:] |= prefix[1:] != prefix[:-1]
        start = np.maximum.accumulate(np.where(new_group, idx, 0))
        ones_before = np.cumsum(bit) - bit                      # exclusive, whole array
        ones_before_in_group = ones_before - ones_before[start]
        zero = bit == 0
        per_position += np.where(zero, ones_before_in_group, 0)
        zeros_before_in_group = (idx - start) - ones_before_in_group
        group_id = np.cumsum(new_group) - 1
        zeros_in_group = np.add.reduceat(zero.astype(np.int64), np.flatnonzero(new_group))
        new_pos = np.where(zero, start + zeros_before_in_group,
                           start + zeros_in_group[group_id] + ones_before_in_group)
        nxt = np.empty_like(cur)
        nxt[new_pos] = cur
        cur = nxt
    return _sum_by_group(per_position, group_of, n_groups)


def _sum_by_group(values, group_of, n_groups):
    """Integer sums of ``values`` per group index (exact: int64 throughout)."""
    out = np.zeros(n_groups, dtype=np.int64)
    np.add.at(out, group_of, values)
    return out


def _count_inversions(r):
    """Number of index pairs p < q with r[p] > r[q] (non-negative integers r), O(n log max r)."""
    r = np.asarray(r, dtype=np.int64)
    if r.size < 2:
        return 0
    first = np.zeros(r.size, dtype=bool)
    first[0] = True
    return int(_inversions_by_group(r, first, np.zeros(r.size, dtype=np.int64))[0])


def _tied_pairs_by_group(run_start, group_of, n_groups):
    """Sum of c(c-1)/2 over runs of equal values (runs start where ``run_start``), per group."""
    starts = np.flatnonzero(run_start)
    c = np.diff(np.append(starts, run_start.size))
    return _sum_by_group(c * (c - 1) // 2, group_of[starts], n_groups)


# the largest label whose gain 2^y - 1 and a DCG's sum of such gains over a query of up to 2^23
# documents stay finite in float64 (2^(1000 + 23) < 2^1024)
MAX_GAIN_LABEL = 1000


def first_bad_label(y):
    """None when every label of ``y`` has a gain 2^y - 1 these metrics can take (finite, 0 to
    MAX_GAIN_LABEL), else (the first other row, why)."""
    y = np.asarray(y)
    bad = ~np.isfinite(y) | (y < 0)
    if bad.any():
        return int(np.flatnonzero(bad)[0]), "labels must be finite and >= 0 (their gain is 2^y - 1)"
    big = y > MAX_GAIN_LABEL
    if big.any():
        return (int(np.flatnonzero(big)[0]), f"its gain 2^y - 1 overflows float64 (labels up to {MAX_GAIN_LABEL} "
                                             f"can be evaluated); relevance labels are small grades such as 0 to 4")
    return None


def _pairwise_by_query(y, s, ptr):
    """Preference pairs and correctly ordered pairs of every query, vectorised over queries.

    Returns (n_pairs int64[n_queries], correct float64[n_queries]); see
    :func:`pairwise_accuracy_counts`. Every query must have at least one row.
    """
    n = y.size
    n_q = ptr.size - 1
    if n == 0:  # no rows, no pairs (a query list of empty queries)
        return np.zeros(n_q, np.int64), np.zeros(n_q)
    sizes = np.diff(ptr)
    qidx = np.repeat(np.arange(n_q, dtype=np.int64), sizes)
    first = np.zeros(n, dtype=bool)
    first[ptr[:-1][sizes > 0]] = True  # an empty query has no first row
    _, y_code = np.unique(y, return_inverse=True)
    y_code = y_code.ravel().astype(np.int64)
    # dense score ranks within each query (ties share a rank), keeping the bit count of the
    # inversion count at log2(query length)
    o = np.lexsort((s, qidx))                  # by query, then score; query blocks keep place
    s_sorted = s[o]
    s_new = first.copy()
    s_new[1:] |= s_sorted[1:] != s_sorted[:-1]
    run = np.cumsum(s_new) - 1
    s_rank = np.empty(n, dtype=np.int64)
    s_rank[o] = run - run[np.minimum(ptr[:-1], n - 1)][qidx]  # (an empty query's start is never looked up)
    tied_s = _tied_pairs_by_group(s_new, qidx, n_q)              # pairs with equal scores
    # by query, label, score
    o = np.lexsort((s_rank, y_code, qidx))
    ys, ss = y_code[o], s_rank[o]
    y_new = first.copy()
    y_new[1:] |= ys[1:] != ys[:-1]
    ys_new = y_new.copy()
    ys_new[1:] |= ss[1:] != ss[:-1]
    n_pairs = sizes * (sizes - 1) // 2 - _tied_pairs_by_group(y_new, qidx, n_q)
    tied = tied_s - _tied_pairs_by_group(ys_new, qidx, n_q)     # equal scores, different labels
    discordant = _inversions_by_group(ss, first, qidx, n_q)
    return n_pairs, n_pairs - discordant - 0.5 * tied


# rows per part of the vectorised pair counts: they keep about 15 int64 arrays per row, so parts
# bound that memory whatever the data's size (a longer query is one part of its own)
PAIRWISE_PART_ROWS = 1 << 16


def _pairwise_in_parts(y, s, ptr):
    """:func:`_pairwise_by_query` over runs of whole queries of at most ``PAIRWISE_PART_ROWS``
    rows each; every query's counts are its own, so the parts change nothing."""
    n_q = ptr.size - 1
    n_pairs = np.empty(n_q, np.int64)
    correct = np.empty(n_q)
    q0 = 0
    while q0 < n_q:
        q1 = max(q0 + 1, int(np.searchsorted(ptr, ptr[q0] + PAIRWISE_PART_ROWS, side="right")) - 1)
        a, b = ptr[q0], ptr[q1]
        n_pairs[q0:q1], correct[q0:q1] = _pairwise_by_query(y[a:b], s[a:b], ptr[q0:q1 + 1] - a)
        q0 = q1
    return n_pairs, correct


def pairwise_accuracy_counts(y, scores):
    """Preference pairs of one query and how many are ordered correctly.

    Parameters
    ----------
    y : array_like of float, shape (l,)
        Labels of the query's documents.
    scores : array_like of float, shape (l,)
        Their scores.

    Returns
    -------
    n_pairs : int
        Number of pairs (i, j) with y_i > y_j.
    correct : float
        Pairs with s_i > s_j, plus one half per pair with s_i == s_j.

    Notes
    -----
    O(l log l), no pairs are formed. With P the pairs of different labels, D the discordant ones
    (y_i > y_j, s_i < s_j) and T those tied in score, ``correct = P - D - T/2``. D is the number of
    strict inversions of the score ranks once the documents are sorted by (label, score); T is the
    pairs tied in score minus the pairs tied in both score and label.
    """
    y = np.asarray(y, dtype=np.float64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    if y.size < 2:
        return 0, 0.0
    n_pairs, correct = _pairwise_by_query(y, s, np.array([0, y.size], dtype=np.int64))
    return int(n_pairs[0]), float(correct[0])


# --------------------------------------------------------------------------------------------
# per-query metrics
# --------------------------------------------------------------------------------------------

def _query_letor4(y, s, ks, log_table):
    """One query under ``letor4``; returns (ndcg[k], prec[k], ap, mean_ndcg, has_relevant)."""
    n = y.size
    # Stable sort by descending score: ties keep input order, as Perl's merge sort does on the
    # script's line-number-ordered list. (-s is exact; -0.0 == 0.0 ties as "<=>" does.)
    order = np.argsort(-s, kind="stable")
    rates = y[order]
    # gains: the script's table {0:0, 1:1, 2:3} is 2^y - 1 on {0, 1, 2}; 2^y - 1 beyond (noted).
    g = np.exp2(rates) - 1.0
    g_best = np.sort(g)[::-1]

    def dcg(gain):
        # Positions 1 and 2 (iPos 0, 1) undiscounted; iPos >= 2 adds gain*log(2)/log(iPos+1),
        # evaluated left to right like the Perl expression; cumsum adds sequentially like its loop.
        terms = gain.copy()
        if n > 2:
            terms[2:] = gain[2:] * _LN2 / log_table[3:n + 1]
        return np.cumsum(terms)

    d, best = dcg(g), dcg(g_best)
    nd = np.zeros(n)
    np.divide(d, best, out=nd, where=best != 0)    # script: 0 when the ideal DCG is 0
    mean_ndcg = float(np.cumsum(nd)[-1]) / n          # sequential sum, then divide (as the loop)

    rel = rates >= 1                                  # relevant: label >= 1
    cum_rel = np.cumsum(rel)
    n_rel = int(cum_rel[-1])
    if n_rel:
        pos = np.flatnonzero(rel) + 1
        ap = float(np.cumsum(cum_rel[pos - 1] / pos)[-1]) / n_rel
    else:
        ap = 0.0
    ks_arr = np.asarray(ks)
    # NDCG@k: defined for k <= n only (the script computes NDCG(n_q)); 0 beyond, as printed.
    ndcg_k = np.where(ks_arr <= n, nd[np.minimum(ks_arr, n) - 1], 0.0)
    # P@k: relevant among the top min(k, n), divided by k (missing positions irrelevant).
    prec_k = cum_rel[np.minimum(ks_arr, n) - 1] / ks_arr
    return ndcg_k, prec_k, ap, mean_ndcg, n_rel > 0


def _query_standard(y, s, ks):
    """One query under ``standard``; returns (ndcg[k], prec[k], ap, mean_ndcg, has_relevant)."""
    n = y.size
    nk = len(ks)
    rel_all = y > 0
    if not rel_all.any():
        nan = np.full(nk, np.nan)
        return nan, nan.copy(), np.nan, np.nan, False
    # Pessimistic ties: descending score, then ascending label within equal scores.
    order = np.lexsort((y, -s))
    rates = y[order]
    disc = 1.0 / np.log2(np.arange(2, n + 2, dtype=np.float64))
    d = np.cumsum((np.exp2(rates) - 1.0) * disc)
    best = np.cumsum((np.exp2(np.sort(y)[::-1]) - 1.0) * disc)
    nd = d / best                                      # best > 0 from position 1 on
    rel = rates > 0
    cum_rel = np.cumsum(rel)
    pos = np.flatnonzero(rel) + 1
    ap = float(np.sum(cum_rel[pos - 1] / pos)) / pos.size
    kk = np.minimum(np.asarray(ks), n)                 # k cut at the query's length
    return nd[kk - 1], cum_rel[kk - 1] / kk, ap, float(nd.mean()), True


# --------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------

def _fmt(v):
    """'%.4f' like the Perl script's sprintf; '-' for a skipped (NaN) value."""
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.4f}"


def _json_float(v):
    v = float(v)
    return None if math.isnan(v) else v


def _json_qid(q):
    if isinstance(q, np.generic):
        q = q.item()
    if isinstance(q, bytes):
        q = q.decode("utf-8", "replace")
    return q


@dataclass(frozen=True)
class Report:
    """Metrics of one evaluation, per query and averaged.

    Per-query arrays are in query order (as ``query_ptr``); ``order`` is the display and
    summation order (ascending numeric qid, as the official script prints, or query order when
    the qids are not all integers). Skipped values are NaN.

    Attributes
    ----------
    convention : str
        ``"letor4"`` or ``"standard"``.
    ks : tuple of int
        Cut-offs of ``ndcg`` and ``precision`` columns.
    qid : ndarray, shape (n_queries,)
        Query ids (0..n_queries-1 when none were given).
    n_docs : ndarray of int64, shape (n_queries,)
    ndcg, precision : ndarray, shape (n_queries, len(ks))
        NDCG@k and P@k.
    average_precision, mean_ndcg : ndarray, shape (n_queries,)
        AP (MAP once averaged) and MeanNDCG (mean of NDCG@1..n_q).
    avg_ndcg, avg_precision : ndarray, shape (n_queries,)
        Paper 001's AvgNDCG and AvgPrec: the mean of the convention's NDCG@k and P@k over
        k = 1..20 (:data:`AVG_KS`), whatever ``ks``.
    pairwise_accuracy : ndarray, shape (n_queries,)
        NaN for queries without preference pairs.
    n_pairs : ndarray of int64, shape (n_queries,)
    has_relevant : ndarray of bool, shape (n_queries,)
    order : ndarray of int64
        Display / summation order of the queries.
    means : dict
        ``"P@k"``, ``"MAP"``, ``"NDCG@k"``, ``"MeanNDCG"``, ``"AvgNDCG"``, ``"AvgPrec"``,
        ``"pairwise_accuracy"`` (mean over
        queries with pairs) and ``"pairwise_accuracy_micro"`` (all pairs pooled).
    notes : tuple of str
        Deviations from the official script, e.g. labels above 2 under ``letor4``.
    """

    convention: str
    ks: tuple
    qid: np.ndarray
    n_docs: np.ndarray
    ndcg: np.ndarray
    precision: np.ndarray
    average_precision: np.ndarray
    mean_ndcg: np.ndarray
    pairwise_accuracy: np.ndarray
    n_pairs: np.ndarray
    has_relevant: np.ndarray
    order: np.ndarray
    means: dict = field(default_factory=dict)
    notes: tuple = ()
    avg_ndcg: np.ndarray = None
    avg_precision: np.ndarray = None

    @property
    def n_queries(self):
        """Number of queries evaluated (all of them, whatever the convention)."""
        return int(self.n_docs.size)

    @property
    def n_queries_without_relevant(self):
        """Queries without a relevant document (scored 0 under letor4, skipped under standard)."""
        return int((~self.has_relevant).sum())

    @property
    def n_queries_averaged(self):
        """Queries in the P/MAP/NDCG averages."""
        return self.n_queries if self.convention == "letor4" else int(self.has_relevant.sum())

    @property
    def query_ids(self):
        """One id per query (``qid``, by the name the rest of the API uses)."""
        return self.qid

    def to_dict(self, per_query=False):
        """JSON-ready dict (NaN becomes None).

        Parameters
        ----------
        per_query : bool
            Add a ``"per_query"`` list (in ``order``) with every query's values.
        """
        d = {
            "convention": self.convention,
            "convention_description": _DESCRIPTION[self.convention],
            "ks": list(self.ks),
            "n_queries": self.n_queries,
            "n_queries_without_relevant": self.n_queries_without_relevant,
            "n_queries_averaged": self.n_queries_averaged,
            "n_queries_with_pairs": int((self.n_pairs > 0).sum()),
            "n_documents": int(self.n_docs.sum()),
            "n_pairs": int(self.n_pairs.sum()),
            "means": {k: _json_float(v) for k, v in self.means.items()},
            "notes": list(self.notes),
        }
        if per_query:
            rows = []
            for q in self.order:
                row = {"qid": _json_qid(self.qid[q]), "n_docs": int(self.n_docs[q])}
                for j, k in enumerate(self.ks):
                    row[f"P@{k}"] = _json_float(self.precision[q, j])
                row["AP"] = _json_float(self.average_precision[q])
                for j, k in enumerate(self.ks):
                    row[f"NDCG@{k}"] = _json_float(self.ndcg[q, j])
                row["MeanNDCG"] = _json_float(self.mean_ndcg[q])
                row["AvgNDCG"] = _json_float(self.avg_ndcg[q])
                row["AvgPrec"] = _json_float(self.avg_precision[q])
                row["n_pairs"] = int(self.n_pairs[q])
                row["pairwise_accuracy"] = _json_float(self.pairwise_accuracy[q])
                rows.append(row)
            d["per_query"] = rows
        return d

    def _header_lines(self):
        nw = self.n_queries_without_relevant
        if self.convention == "letor4":
            fate = "scored 0 and kept in the averages"
        else:
            fate = "skipped"
        lines = [convention_line(self.convention),
                 f"queries: {self.n_queries}, documents: {int(self.n_docs.sum())}, "
                 f"without relevant documents: {nw} ({fate})"]
        lines += [f"note: {n}" for n in self.notes]
        return lines

    def _pair_summary(self):
        m = self.means
        return (f"pairwise accuracy: {_fmt(m['pairwise_accuracy'])} (mean over "
                f"{int((self.n_pairs > 0).sum())} queries with pairs; all "
                f"{int(self.n_pairs.sum())} pairs pooled: {_fmt(m['pairwise_accuracy_micro'])})")

    def format(self, per_query=False):
        """Human-readable text naming the convention.

        Parameters
        ----------
        per_query : bool
            Per-query tables in the official script's layout (qid, P@k..., MAP, an ``Average``
            row and a blank line; then NDCG@k..., MeanNDCG the same way; tab-separated, four
            decimals), preceded by ``#`` comment lines naming the convention and followed by a
            pairwise-accuracy table. With ``letor4`` and ks 1..10 the two tables are byte for byte
            the script's output.

        Returns
        -------
        str
        """
        m = self.means
        if not per_query:
            width = max(8, max(len(f"NDCG@{k}") for k in self.ks) + 1)
            lines = self._header_lines()
            lines.append("".join(["metric".ljust(10)] + [f"@{k}".rjust(width) for k in self.ks]))
            for name in ("P", "NDCG"):
                lines.append("".join([name.ljust(10)]
                                     + [_fmt(m[f"{name}@{k}"]).rjust(width) for k in self.ks]))
            lines.append(f"MAP: {_fmt(m['MAP'])}   MeanNDCG: {_fmt(m['MeanNDCG'])}   "
                         f"AvgNDCG: {_fmt(m['AvgNDCG'])}   AvgPrec: {_fmt(m['AvgPrec'])} (means over k = 1..20)")
            lines.append(self._pair_summary())
            return "\n".join(lines) + "\n"

        out = ["# " + line for line in self._header_lines()]
        out_text = "\n".join(out) + "\n"
        blocks = (("P", self.precision, "MAP", self.average_precision),
                  ("NDCG", self.ndcg, "MeanNDCG", self.mean_ndcg))
        for name, table, last_name, last in blocks:
            rows = ["qid\t" + "\t".join(f"{name}@{k}" for k in self.ks) + f"\t{last_name}"]
            for q in self.order:
                rows.append(f"{_json_qid(self.qid[q])}\t"
                            + "".join(_fmt(v) + "\t" for v in table[q]) + _fmt(last[q]))
            rows.append("Average\t" + "".join(_fmt(m[f"{name}@{k}"]) + "\t" for k in self.ks)
                        + _fmt(m[last_name]))
            out_text += "\n".join(rows) + "\n\n"
        rows = ["qid\tdocs\tpairs\tPairAcc"]
        for q in self.order:
            rows.append(f"{_json_qid(self.qid[q])}\t{int(self.n_docs[q])}\t{int(self.n_pairs[q])}\t"
                        + _fmt(self.pairwise_accuracy[q]))
        rows.append(f"Average\t{int(self.n_docs.sum())}\t{int(self.n_pairs.sum())}\t"
                    + _fmt(m["pairwise_accuracy"]))
        out_text += "\n".join(rows) + "\n"
        out_text += "# " + self._pair_summary() + "\n"
        return out_text

    def __str__(self):
        return self.format()


# --------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------

def _display_order(qid):
    """Ascending numeric qid (the official script's ``sort {$a <=> $b}``), stable; query order
    when some qid is not an integer."""
    try:
        keys = [int(_json_qid(q)) for q in qid]
    except (TypeError, ValueError):
        return np.arange(len(qid), dtype=np.int64)
    return np.asarray(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)


def _ordered_mean(values, order, mask=None):
    """Sum in ``order`` left to right (as the Perl loop), then divide; NaN if nothing to average."""
    total, count = 0.0, 0
    for q in order:
        if mask is None or mask[q]:
            total += float(values[q])
            count += 1
    return total / count if count else float("nan")


def evaluate(y, scores, query_ptr, *, convention="letor4", ks=range(1, 11), query_ids=None, qid=None):
    """Evaluate scores against labels, per query and averaged.

    Parameters
    ----------
    y : array_like of float, shape (n_rows,)
        Relevance labels (finite, >= 0).
    scores : array_like of float, shape (n_rows,)
        Predicted scores (no NaN). Higher ranks first.
    query_ptr : array_like of int, shape (n_queries + 1,)
        Rows of query q are ``query_ptr[q]:query_ptr[q+1]``, in input order (which decides ties
        under ``letor4``). Every query must have at least one row.
    convention : {"letor4", "standard"}
        See the module docstring.
    ks : iterable of int
        Cut-offs for P@k and NDCG@k (positive).
    query_ids : array_like, shape (n_queries,), optional
        One id per query (``Dataset.query_ids``), used for display order and labelling (integers,
        strings or bytes). Not one per row: the rows of a query are given by ``query_ptr``.
    qid : array_like, shape (n_queries,), optional
        The former name of ``query_ids``.

    Returns
    -------
    Report

    Raises
    ------
    ParameterError
        Unknown convention, bad ``ks``, or arrays of inconsistent shapes.
    InputError
        NaN scores, non-finite or negative labels, or an empty query.
    """
    ks, y, s, ptr, qid = _checked_inputs(y, scores, query_ptr, convention, ks, query_ids, qid)
    sizes = np.diff(ptr)
    notes = _label_notes(y) if convention == "letor4" else []
    # the columns asked for, and k = 1..20 for paper 001's AvgNDCG / AvgPrec, in one computation
    ks_all = tuple(sorted(set(ks) | set(AVG_KS)))
    cols = [ks_all.index(k) for k in ks]
    avg_cols = [ks_all.index(k) for k in AVG_KS]
    ndcg, prec, ap, mean_ndcg, has_rel = _per_query(y, s, ptr, convention, ks_all)
    avg_ndcg = ndcg[:, avg_cols].mean(axis=1)
    avg_prec = prec[:, avg_cols].mean(axis=1)
    ndcg, prec = ndcg[:, cols], prec[:, cols]
    n_pairs, correct = _pairwise_in_parts(y, s, ptr)
    with np.errstate(invalid="ignore", divide="ignore"):
        pair_acc = np.where(n_pairs > 0, correct / np.maximum(n_pairs, 1), np.nan)

    order = _display_order(qid)
    mask = None if convention == "letor4" else has_rel
    means = {}
    for j, k in enumerate(ks):
        means[f"P@{k}"] = _ordered_mean(prec[:, j], order, mask)
    means["MAP"] = _ordered_mean(ap, order, mask)
    for j, k in enumerate(ks):
        means[f"NDCG@{k}"] = _ordered_mean(ndcg[:, j], order, mask)
    means["MeanNDCG"] = _ordered_mean(mean_ndcg, order, mask)
    means["AvgNDCG"] = _ordered_mean(avg_ndcg, order, mask)
    means["AvgPrec"] = _ordered_mean(avg_prec, order, mask)
    means["pairwise_accuracy"] = _ordered_mean(pair_acc, order, n_pairs > 0)
    tot = int(n_pairs.sum())
    means["pairwise_accuracy_micro"] = float(correct.sum()) / tot if tot else float("nan")

    return Report(convention=convention, ks=ks, qid=qid, n_docs=sizes, ndcg=ndcg,
                  precision=prec, average_precision=ap, mean_ndcg=mean_ndcg,
                  pairwise_accuracy=pair_acc, n_pairs=n_pairs, has_relevant=has_rel,
                  order=order, means=means, notes=tuple(notes), avg_ndcg=avg_ndcg, avg_precision=avg_prec)


def _checked_inputs(y, scores, query_ptr, convention, ks, query_ids, qid):
    """(ks, y, scores, query_ptr, query ids) of :func:`evaluate` as tuples and float64 / int64
    arrays, or the ParameterError or InputError it documents."""
    if convention not in CONVENTIONS:
        raise ParameterError(f"convention {convention!r} is unknown; use one of {', '.join(CONVENTIONS)}")
    ks = tuple(int(k) for k in ks)
    if not ks or min(ks) < 1:
        raise ParameterError(f"ks {ks!r}: cut-offs must be positive integers (e.g. 1..10)")
    y = np.asarray(y, dtype=np.float64).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    ptr = np.asarray(query_ptr)
    if ptr.ndim != 1 or ptr.size < 1 or not np.issubdtype(ptr.dtype, np.integer):
        raise ParameterError("query_ptr must be a 1-D integer array of n_queries + 1 offsets")
    ptr = ptr.astype(np.int64)
    if y.size != s.size:
        raise ParameterError(f"{y.size} labels but {s.size} scores: give one score per row")
    if ptr[0] != 0 or ptr[-1] != y.size:
        raise ParameterError(f"query_ptr must run from 0 to the number of rows ({y.size}); "
                             f"got {ptr[0]} .. {ptr[-1]}")
    n_q = ptr.size - 1
    sizes = np.diff(ptr)
    if (sizes <= 0).any():
        q = int(np.flatnonzero(sizes <= 0)[0])
        raise InputError(f"query {q} (query_ptr[{q}] = {ptr[q]}) has no rows; "
                         "query_ptr must be strictly increasing")
    if qid is not None and query_ids is not None:
        raise ParameterError("give query_ids (one id per query) or its former name qid, not both")
    qid = query_ids if query_ids is not None else qid
    if qid is None:
        qid = np.arange(n_q, dtype=np.int64)
    else:
        qid = np.asarray(qid)
        if qid.shape != (n_q,):
            per_row = qid.shape == (y.size,) and y.size != n_q
            raise ParameterError(f"query_ids has shape {qid.shape}, expected ({n_q},): one id per query"
                                 + (" (this looks like one id per row: use its value at each query's first "
                                    "row, ids[query_ptr[:-1]])" if per_row else ""))
    if np.isnan(s).any():
        r = int(np.flatnonzero(np.isnan(s))[0])
        raise InputError(f"score of row {r} is NaN: a NaN score cannot be ranked")
    bad = first_bad_label(y)
    if bad is not None:
        r, why = bad
        raise InputError(f"label of row {r} is {float(y[r]):g}: {why}")
    return ks, y, s, ptr, qid


def convention_line(convention):
    """The line every output that shows metrics gives its convention in (``eval``, ``grid``, ``cv``,
    the report)."""
    return f"convention: {convention} ({_DESCRIPTION[convention]})"


def _label_notes(y):
    """The letor4 convention's note on labels outside {0, 1, 2}, or none."""
    odd = np.unique(y[~np.isin(y, (0.0, 1.0, 2.0))])
    if not odd.size:
        return []
    shown = ", ".join(f"{v:g}" for v in odd[:5]) + (", ..." if odd.size > 5 else "")
    return [f"labels outside {{0, 1, 2}} present ({shown}): given gain 2^y - 1 and "
            "counted relevant when >= 1; the official Eval-Score-4.0.pl has no gain "
            "for them (it would score them 0 and not relevant)"]


def _per_query(y, s, ptr, convention, ks_all):
    """Per query q: NDCG@k and P@k at every k of ``ks_all`` (rows of two (n_q, len(ks_all))
    arrays), average precision, mean NDCG and whether it has a relevant document."""
    n_q, nk = ptr.size - 1, len(ks_all)
    if convention == "letor4":
        log_table = _log_table(int(np.diff(ptr).max()) + 1)
    ndcg = np.empty((n_q, nk))
    prec = np.empty((n_q, nk))
    ap = np.empty(n_q)
    mean_ndcg = np.empty(n_q)
    has_rel = np.empty(n_q, dtype=bool)
    for q in range(n_q):
        a, b = ptr[q], ptr[q + 1]
        yq, sq = y[a:b], s[a:b]
        if convention == "letor4":
            res = _query_letor4(yq, sq, ks_all, log_table)
        else:
            res = _query_standard(yq, sq, ks_all)
        ndcg[q], prec[q], ap[q], mean_ndcg[q], has_rel[q] = res
    return ndcg, prec, ap, mean_ndcg, has_rel
