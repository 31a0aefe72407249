"""Numba kernel: the expected AP, NDCG@k or P@k of ordering each query by each feature alone (GAS-E),
under a uniformly random order of the documents a feature ties.

A feature orders a query's documents into tie groups (equal values), by decreasing value. Within a
group every order is equally likely, and each measure is taken at its expectation over those orders
(McSherry and Najork, "Computing information retrieval performance measures efficiently in the
presence of tied scores", ECIR 2008), so the importance depends neither on the file's row order nor
on how a sort breaks ties. For a group of m documents at 0-based positions s..s+m-1, holding r
relevant documents (label >= 1), gains summing to G, and R_b relevant documents in the groups above:

- NDCG@k: every position p of the group has the expected gain G / m (each document is equally likely
  at p), so E[DCG@k] = sum over positions p < k of (G_g(p) / m_g(p)) disc(p), exactly (linearity);
- P@k: the group adds r / m for each of its positions inside the top k: r when it lies whole inside,
  r (k - s) / m when it straddles k;
- AP = (1 / R) sum over relevant documents of the precision at their rank. A relevant document of
  the group is at position j = 1..m of the group with probability 1 / m, and then the expected
  number of the group's other r - 1 relevant documents before it is (j - 1)(r - 1)/(m - 1)
  (hypergeometric). So the group adds, exactly,

      (r / m) sum_{j=1..m} (R_b + 1 + (j - 1)(r - 1)/(m - 1)) / (s + j)      ((r - 1)/(m - 1) := 0 at m = 1).

The letor4 conventions of :mod:`streamrank.evaluation.metrics` (``_query_letor4``) otherwise: gains
2^y - 1, positions 1 and 2 undiscounted and position i >= 3 weighted log(2) / log(i) (libm's log,
``log_table``), summed left to right; NDCG 0 where the ideal DCG is 0 and for k beyond the query's
length; P@k over k (missing positions irrelevant); AP 0 without a relevant document. Without ties
(every m = 1) each value is letor4's own, to the last bit.

Within a query the documents are first put in increasing label order (stable), then each feature's
order is a stable sort of that: a tie group's documents are summed in label order whatever the
rows' order in the file, so the sums (and the result) are the same for any row order, bit for bit.
The stable sorts are ``query_sort.argsort_decreasing`` of the negated values (a stable order is
unique, and negation exact): the training kernels' merge sort, which a first run compiles in a
fraction of the time numba's ``np.argsort(kind="mergesort")`` takes (0.3 of select-features' 4.2
first-run CPU seconds on MQ2008 Fold1), and which train compiles too.
With ``negate`` each feature is also read as -x (the groups in the reverse order).

Sums over the queries are added in query order, so the result does not depend on the blocks.
The NumPy twin is ``tests/selection/tie_oracle.py``.
"""

import math

import numba
import numpy as np

from streamrank._native import numba_cache
from streamrank._native.query_sort import argsort_decreasing

_LN2 = math.log(2.0)

# the measures' codes (``kind``)
AP, NDCG, PRECISION = 0, 1, 2


@numba.njit(cache=True, nogil=True, inline="always")  # typed in its callers: no compile of its own
def _disc_term(g, p, log_table):
    """letor4's DCG term of gain ``g`` at 0-based position p (see ``metrics._query_letor4``)."""
    return g if p < 2 else g * _LN2 / log_table[p + 1]


@numba.njit(cache=True, nogil=True)
def _tied_measure(xs, ys, order, kind, k, log_table, best_k):
    """The expected measure (module docstring) of the order ``order`` of ``xs`` (decreasing
    value, ties adjacent), labels ``ys``; ``best_k`` the ideal DCG@k (NDCG only)."""
    n = xs.shape[0]
    if kind == NDCG and (k > n or best_k == 0.0):
        return 0.0
    acc = 0.0     # DCG@k, relevant documents in the top k, or the sum of precisions (AP)
    rel_above = 0
    s = 0
    while s < n:
        e = s + 1
        v = xs[order[s]]
        while e < n and xs[order[e]] == v:
            e += 1
        m = e - s
        if kind == AP:
            r = 0
            for p in range(s, e):
                if ys[order[p]] >= 1.0:
                    r += 1
            if r > 0:
                share = 0.0 if m == 1 else (r - 1.0) / (m - 1.0)
                t = 0.0
                for j in range(1, m + 1):
                    t += (rel_above + 1.0 + (j - 1.0) * share) / (s + j)
                acc += r / m * t if m > 1 else t
            rel_above += r
        elif kind == PRECISION:
            if s >= k:
                break
            r = 0
            for p in range(s, e):
                if ys[order[p]] >= 1.0:
                    r += 1
            acc += r if e <= k else r * (k - s) / m
        else:
            if s >= k:
                break
            g = 0.0
            for p in range(s, e):
                g += 2.0 ** ys[order[p]] - 1.0
            g = g / m if m > 1 else g
            for p in range(s, min(e, k)):
                acc += _disc_term(g, p, log_table)
        s = e
    if kind == AP:
        return acc / rel_above if rel_above else 0.0
    if kind == PRECISION:
        return acc / k
    return acc / best_k


@numba.njit(cache=True, nogil=True)
def block_measures(X, y, qp, k, kind, negate, log_table, out):
    """out[o, f] += the expected measure ``kind`` (AP, NDCG@k or P@k) of feature f (o = 0) and of -f
    (o = 1, when ``negate``) summed over the queries of the block (rows qp[q]:qp[q + 1] of X), in
    query order (module docstring). Serial: the tau-b pairs, d / 2 times this work, dominate a pass."""
    d = X.shape[1]
    nq = qp.shape[0] - 1
    for q in range(nq):
        a = qp[q]
        n = qp[q + 1] - a
        if n == 0:
            continue
        ys = np.empty(n)
        ws = np.empty(n)  # values whose decreasing order is the increasing one sought (module docstring)
        for p in range(n):
            ws[p] = -y[a + p]
        by_label = argsort_decreasing(ws)  # the documents in increasing label order, ties in row order
        for p in range(n):
            ys[p] = y[a + by_label[p]]
        best_k = 0.0
        if kind == NDCG and k <= n:  # the ideal DCG@k: the labels decreasing
            for p in range(k):
                best_k += _disc_term(2.0 ** ys[n - 1 - p] - 1.0, p, log_table)
        xs = np.empty(n)
        for f in range(d):
            for p in range(n):
                ws[p] = X[a + by_label[p], f]
                xs[p] = -ws[p]  # decreasing x: increasing -x, stable
            out[0, f] += _tied_measure(xs, ys, argsort_decreasing(ws), kind, k, log_table, best_k)
            if negate:
                for p in range(n):
                    xs[p] = -xs[p]
                    ws[p] = -ws[p]
                out[1, f] += _tied_measure(xs, ys, argsort_decreasing(ws), kind, k, log_table, best_k)


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
