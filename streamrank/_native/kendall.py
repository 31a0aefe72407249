"""Numba kernel: Kendall's tau-b between the orders every pair of features induces on each query.

For features i and j over a query's l documents (Knight's O(l log l) algorithm, per pair):

    tau_b = (n_c - n_d) / sqrt((n0 - n1) (n0 - n2)),
    n0 = l (l - 1) / 2,  n1 = sum over tie groups of i of t (t - 1) / 2,  n2 the same for j,
    n_c - n_d = n0 - n1 - n2 + n3 - 2 n_swaps,

with n3 the pairs tied in both and n_swaps the strict inversions of j's ranks once the documents
are sorted by (rank in i, rank in j). tau-b is undefined (NaN) when either feature is constant on
the query (or l < 2). This is ``scipy.stats.kendalltau``'s default variant, the twin the tests use.
Every count is an integer, so a pair's tau-b does not depend on the rows' order.

Cost: O(d l log l) per query to rank the features (once per query), then O(l log l) per pair of
features: a counting sort by the first feature's ranks of the rows already in the second's order,
and a merge sort's inversion count. The kernel takes a block of queries, in chunks of about
``chunk_rows`` rows, and a range of pairs, each pair summing its tau-b over the queries in query
order; the caller runs ranges in threads (:func:`pair_ranges`), so the sums do not depend on the
chunks, the blocks or the thread count. (A numba parallel loop per query would wake the threads
once a query, which costs more than the work on a busy machine, and compile through numba's
parfor pipeline.)

Compile time (a first run compiles on an empty numba cache): the helpers are inlined into
:func:`block_tau_b_pairs` by numba (``inline="always"``), so one function is typed and optimised
once. As functions of their own, LLVM would optimise each again inside every caller (numba links a
callee's module into its caller's and optimises the whole), four levels deep. The arithmetic is the
same operations in the same order (no fastmath: LLVM may not reorder them), so every tau-b is the
same to the last bit.
"""

import numba
import numpy as np

from streamrank._native import numba_cache
from streamrank._native.query_sort import argsort_decreasing, merge_runs


@numba.njit(cache=True, nogil=True, inline="always")  # compile time: module docstring
def _chunk_ranks(X, qp, q0, q1, ranks, order, ties):
    """For the queries q0:q1 (rows qp[q]:qp[q + 1] of X, stored from column 0 on): each feature's
    dense ranks in ``ranks[f]``, the rows in increasing rank in ``order[f]`` (both int32, query by
    query at the query's offset in the chunk), and its tied pairs per query in ``ties[q - q0, f]``."""
    d = X.shape[1]
    base = qp[q0]
    col = np.empty(qp[q1] - base)
    for q in range(q0, q1):
        a = qp[q] - base
        l = qp[q + 1] - qp[q]
        if l == 0:
            continue
        for f in range(d):
            c = col[:l]
            for p in range(l):
                c[p] = -X[base + a + p, f]  # increasing x, stably: decreasing -x (as feature_measures sorts)
            o = argsort_decreasing(c)
            r = 0
            run = 1
            t = 0
            ranks[f, a + o[0]] = 0
            order[f, a] = o[0]
            for p in range(1, l):
                if c[o[p]] != c[o[p - 1]]:
                    r += 1
                    t += run * (run - 1) // 2
                    run = 1
                else:
                    run += 1
                ranks[f, a + o[p]] = r
                order[f, a + p] = o[p]
            ties[q - q0, f] = t + run * (run - 1) // 2


@numba.njit(cache=True, nogil=True, inline="always")  # compile time: module docstring
def _pair_tau_sorted(ri, rj, oj, ti, tj, l, count, seq, tmp):
    """tau-b of two features on one query (NaN when undefined; Knight's algorithm, module
    docstring) from their dense ranks ``ri``, ``rj``, the rows in increasing ``rj`` (``oj``) and
    their tied pairs: a stable counting sort of ``oj`` by ``ri`` orders the rows by (ri, rj), so
    no comparison sort runs per pair. ``count``, ``seq``, ``tmp``: scratch of at least l + 1, l, l."""
    n0 = l * (l - 1) // 2
    if l < 2 or ti == n0 or tj == n0:
        return np.nan
    for v in range(l + 1):
        count[v] = 0
    for p in range(l):
        count[ri[p] + 1] += 1
    for v in range(l):
        count[v + 1] += count[v]
    for p in range(l):  # rows in increasing rj; placed by ri, stably
        row = oj[p]
        seq[count[ri[row]]] = row
        count[ri[row]] += 1
    n3 = 0
    run = 1
    for p in range(1, l):
        if ri[seq[p]] == ri[seq[p - 1]] and rj[seq[p]] == rj[seq[p - 1]]:
            run += 1
        else:
            n3 += run * (run - 1) // 2
            run = 1
    n3 += run * (run - 1) // 2
    for p in range(l):
        seq[p] = rj[seq[p]]
    swaps = merge_runs(None, seq[:l], tmp[:l], 1)[1]  # strict inversions of the sequence
    num = float(n0 - ti - tj + n3 - 2 * swaps)
    return num / np.sqrt(float(n0 - ti) * float(n0 - tj))


@numba.njit(cache=True, nogil=True, inline="always")  # compile time: module docstring
def _pair_over_chunk(k, d, i0, i1, qp, q0, q1, ranks, order, ties, biggest, tau_sum, count):
    """Pair k = (i0 + k // d, k % d) of :func:`block_tau_b_rows` over the chunk's queries q0:q1, in
    query order (a function of its own: the parallel loop's body stays small, and so does its
    compile)."""
    a = k // d
    j = k % d
    i = i0 + a
    if i0 <= j < i1 and j < i:
        return  # added from (j, i)
    cnt = np.empty(biggest + 1, np.int32)
    seq = np.empty(biggest, np.int32)
    tmp = np.empty(biggest, np.int32)
    base = qp[q0]
    for q in range(q0, q1):
        s = qp[q] - base
        l = qp[q + 1] - qp[q]
        if l < 2:
            continue
        if i == j:  # 1 wherever defined (not constant on the query)
            t = 1.0 if ties[q - q0, i] != l * (l - 1) // 2 else np.nan
        else:
            t = _pair_tau_sorted(ranks[i, s:s + l], ranks[j, s:s + l], order[j, s:s + l], ties[q - q0, i],
                                 ties[q - q0, j], l, cnt, seq, tmp)
        if t == t:  # defined
            tau_sum[a, j] += t
            count[a, j] += 1
            if i0 <= j < i1 and j != i:
                tau_sum[j - i0, i] += t
                count[j - i0, i] += 1


@numba.njit(cache=True, nogil=True)
def block_tau_b_pairs(X, qp, i0, i1, k0, k1, chunk_rows, tau_sum, count):
    """Add, query by query in query order, tau-b of the pairs k0 <= k < k1, pair k = (i0 + k // d,
    k % d), over the block's queries (rows qp[q]:qp[q + 1] of X) into ``tau_sum[k // d, k % d]`` and
    1 into ``count[k // d, k % d]`` where it is defined. Within the block's own square (i0 <= j <
    i1) each pair is computed once, by k with j >= i, and added to both of its cells, so every cell
    has one writer: callers run disjoint ranges of k in threads at once (the kernel holds no GIL),
    and every cell's sum takes its terms in query order whatever the ranges, the chunks or the
    blocks. The queries go in chunks of about ``chunk_rows`` rows (a longer query is a chunk of its
    own), the features ranked once per chunk."""
    d = X.shape[1]
    nq = qp.shape[0] - 1
    biggest = 0
    for q in range(nq):
        biggest = max(biggest, qp[q + 1] - qp[q])
    width = max(chunk_rows, biggest)
    ranks = np.empty((d, width), np.int32)
    order = np.empty((d, width), np.int32)
    q0 = 0
    while q0 < nq:
        q1 = q0 + 1
        while q1 < nq and qp[q1 + 1] - qp[q0] <= width:
            q1 += 1
        ties = np.empty((q1 - q0, d), np.int64)
        _chunk_ranks(X, qp, q0, q1, ranks, order, ties)
        for k in range(k0, k1):
            _pair_over_chunk(k, d, i0, i1, qp, q0, q1, ranks, order, ties, biggest, tau_sum, count)
        q0 = q1


def pair_ranges(r, d, parts):
    """``parts`` ranges [k0, k1) of the pairs k < r d of :func:`block_tau_b_pairs` holding about as
    many computed pairs each: row a of the block has d - a of them (a of its cells inside the
    block's square come from their mirrors)."""
    work = np.cumsum(d - np.arange(r, dtype=np.float64))  # computed pairs up to the end of each row
    total = work[-1] if r else 0.0
    bounds = [0]
    for t in range(1, parts):
        target = total * t / parts
        a = int(np.searchsorted(work, target))  # the row where the share ends
        before = work[a - 1] if a else 0.0
        k = a * d + int(d * (target - before) / (d - a))  # within the row: its share of the row's length
        bounds.append(min(max(k, bounds[-1]), r * d))
    bounds.append(r * d)
    return [(bounds[t], bounds[t + 1]) for t in range(parts) if bounds[t + 1] > bounds[t]]


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
