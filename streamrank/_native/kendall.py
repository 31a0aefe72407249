"""Numba kernel: Kendall's tau-b between the orders every pair of features induces on one query.

For features i and j over a query's l documents (Knight's O(l log l) algorithm, per pair):

    tau_b = (n_c - n_d) / sqrt((n0 - n1) (n0 - n2)),
    n0 = l (l - 1) / 2,  n1 = sum over tie groups of i of t (t - 1) / 2,  n2 the same for j,
    n_c - n_d = n0 - n1 - n2 + n3 - 2 n_swaps,

with n3 the pairs tied in both and n_swaps the strict inversions of j's ranks once the documents
are sorted by (rank in i, rank in j). tau-b is undefined (NaN) when either feature is constant on
the query (or l < 2). This is ``scipy.stats.kendalltau``'s default variant, the twin the tests use.

Cost per query: O(d l log l) to rank the features, then O(l log l) per pair of features; the pairs
run in parallel, each writing its own cell, so the result does not depend on the thread count.
"""

import numba
import numpy as np
from numba import prange
from streamrank._native import numba_cache

numba_cache.install()  # cached kernels load without numba's compiler registries


@numba.njit(cache=True, nogil=True)
def _dense_ranks(x, order, out):
    """Dense ranks 0.. of x (equal values share one) given ``order`` = argsort(x); returns the
    number of pairs tied in x, sum t (t - 1) / 2."""
    l = x.shape[0]
    r = 0
    ties = 0
    run = 1
    out[order[0]] = 0
    for p in range(1, l):
        if x[order[p]] != x[order[p - 1]]:
            r += 1
            ties += run * (run - 1) // 2
            run = 1
        else:
            run += 1
        out[order[p]] = r
    ties += run * (run - 1) // 2
    return ties


@numba.njit(cache=True, nogil=True)
def _inversions(a, tmp):
    """Strict inversions (a[p] > a[q], p < q) of ``a`` by bottom-up merge sort; sorts ``a``."""
    n = a.shape[0]
    count = 0
    width = 1
    while width < n:
        lo = 0
        while lo < n - width:
            mid = lo + width
            hi = min(lo + 2 * width, n)
            p, q, k = lo, mid, lo
            while p < mid and q < hi:
                if a[q] < a[p]:  # strictly smaller from the right: it passes every element left in [p, mid)
                    count += mid - p
                    tmp[k] = a[q]
                    q += 1
                else:
                    tmp[k] = a[p]
                    p += 1
                k += 1
            while p < mid:
                tmp[k] = a[p]
                p += 1
                k += 1
            while q < hi:
                tmp[k] = a[q]
                q += 1
                k += 1
            for t in range(lo, hi):
                a[t] = tmp[t]
            lo += 2 * width
        width *= 2
    return count


@numba.njit(cache=True, nogil=True)
def _ranks(X):
    """(dense ranks (d, l), tied pairs per feature (d,)) of the columns of X. Serial: O(d l log l)
    beside the pairs' O(d^2 l log l / 2), and a parallel loop here doubled this kernel's compile
    (1.4 s of a first run's 4 s for query_tau_b_rows)."""
    l, d = X.shape
    ranks = np.empty((d, l), np.int64)
    ties = np.zeros(d, np.int64)
    for f in range(d):
        if l == 0:
            continue
        col = np.empty(l)
        for p in range(l):
            col[p] = X[p, f]
        order = np.argsort(col, kind="mergesort")
        ties[f] = _dense_ranks(col, order, ranks[f])
    return ranks, ties


@numba.njit(cache=True, nogil=True)
def _pair_tau(ranks, ties, i, j, l):
    """tau-b of features i and j (NaN when undefined): Knight's algorithm (module docstring)."""
    n0 = l * (l - 1) // 2
    if l < 2 or ties[i] == n0 or ties[j] == n0:
        return np.nan
    if i == j:
        return 1.0
    keys = np.empty(l, np.int64)
    for p in range(l):
        keys[p] = ranks[i, p] * l + ranks[j, p]
    perm = np.argsort(keys, kind="mergesort")
    seq = np.empty(l, np.int64)
    n3 = 0
    run = 1
    for p in range(l):
        seq[p] = ranks[j, perm[p]]
        if p > 0:
            if keys[perm[p]] == keys[perm[p - 1]]:
                run += 1
            else:
                n3 += run * (run - 1) // 2
                run = 1
    n3 += run * (run - 1) // 2
    swaps = _inversions(seq, np.empty(l, np.int64))
    num = float(n0 - ties[i] - ties[j] + n3 - 2 * swaps)
    return num / np.sqrt(float(n0 - ties[i]) * float(n0 - ties[j]))


@numba.njit(cache=True, nogil=True, parallel=True)
def query_tau_b_rows(X, i0, i1, out):
    """Rows i0:i1 of the tau-b matrix of X's columns into ``out`` (i1 - i0 x d): the pairs (i, j)
    with i0 <= i < i1 and every j, each computed once (the block's own square from its upper
    triangle, mirrored)."""
    l, d = X.shape
    ranks, ties = _ranks(X)
    r = i1 - i0
    n_pairs = r * d
    for k in prange(n_pairs):
        a = k // d
        j = k % d
        i = i0 + a
        if i0 <= j < i1 and j < i:
            continue  # mirrored below from (j, i)
        out[a, j] = _pair_tau(ranks, ties, i, j, l)
    for a in range(r):
        i = i0 + a
        for j in range(i0, i):
            out[a, j] = out[j - i0, i]
