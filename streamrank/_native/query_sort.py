"""The order of a query's documents by decreasing score, ties in index order
(``np.argsort(-z, kind="stable")``), from scratch or from a previous order.

A merge sort of its own, not ``np.argsort``: numba compiles its generic quicksort for each
process on first use, in several times this sort's compile time, for little speed.

The solver's passes sort each query's scores again at every point, and between two points the
scores move little: an insertion sort from the previous order costs ``O(l + inversions)``
where the merge sort costs ``O(l log l)``. The order is the unique one of (decreasing score, increasing index), so
the result is the merge sort's whatever the start; past ``WARM_SHIFTS`` moves per document the
insertion sort gives up and merge-sorts (a start far from sorted costs at most that much more).
"""

import numpy as np
from numba import njit

from streamrank._native import numba_cache

# runs sorted by insertion before the merges: short queries (most of LETOR's) never merge
SORT_RUN = 16
# an insertion sort from the previous order stops after this many moves per document (plus a
# constant for tiny queries) and merge-sorts instead: a bound on the worst case, where the
# scores of a query have reordered wholesale (the first passes of a solve)
WARM_SHIFTS = 8
WARM_SHIFTS_MIN = 64


@njit(cache=True, nogil=True)
def _merge_sort_into(z, a, b):
    """``a[:l] =`` positions of ``z`` by decreasing value, ties by index; ``b`` is scratch.

    Insertion-sorted runs of ``SORT_RUN``, then bottom-up merges. Returns the array that holds
    the result (a or b).
    """
    n = z.shape[0]
    for i in range(n):
        a[i] = i
    for lo in range(0, n, SORT_RUN):
        hi = min(lo + SORT_RUN, n)
        for i in range(lo + 1, hi):
            v = a[i]
            zv = z[v]
            j = i - 1
            while j >= lo and z[a[j]] < zv:
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = v
    return merge_runs(z, a, b, SORT_RUN)[0]


@njit(cache=True, nogil=True, inline="always")
def merge_runs(key, a, b, w):
    """Bottom-up merge sort of ``a`` from sorted runs of ``w`` (``b``: scratch of a's length):
    by decreasing ``key[a[i]]``, or with ``key`` None by increasing ``a[i]``; ties keep their
    order (stable). Returns (the array that holds the result, a or b; the strict inversions: pairs
    p < q of the runs' order that the sort swapped, each counted as the later one passes the
    earlier).

    The query sort's merges (key the scores, a the positions) and Kendall's swap count
    (:mod:`streamrank._native.kendall`: key None, w = 1) in one function; inlined, so the count
    costs the query sort nothing (it is dead code there).
    """
    n = a.shape[0]
    count = 0
    while w < n:
        for lo in range(0, n, 2 * w):
            mid = min(lo + w, n)
            hi = min(lo + 2 * w, n)
            i = lo
            j = mid
            k = lo
            while i < mid and j < hi:
                if _before(key, a[j], a[i]):  # strictly first: it passes every element left in [i, mid)
                    count += mid - i
                    b[k] = a[j]
                    j += 1
                else:
                    b[k] = a[i]
                    i += 1
                k += 1
            while i < mid:
                b[k] = a[i]
                i += 1
                k += 1
            while j < hi:
                b[k] = a[j]
                j += 1
                k += 1
        a, b = b, a
        w *= 2
    return a, count


@njit(cache=True, nogil=True, inline="always")
def _before(key, u, v):
    """u goes strictly before v: key[u] > key[v], or u < v when ``key`` is None (numba drops the
    other branch when it compiles for a None key)."""
    if key is None:
        return u < v
    return key[u] > key[v]


@njit(cache=True, nogil=True, inline="always")
def _warm_sort_into(z, prev, a):
    """Insertion sort of the permutation ``prev`` into ``a`` by (decreasing z, increasing index).

    Returns False (``a`` then undefined) when ``prev`` is not a permutation of ``0..l-1`` by
    range, when a score is NaN (no total order), or past the move budget.
    """
    n = z.shape[0]
    budget = WARM_SHIFTS * n + WARM_SHIFTS_MIN
    zl, ul = 0.0, -1  # the score and index of a[i - 1], the last placed
    for i in range(n):
        v = prev[i]
        if v < 0 or v >= n:
            return False
        zv = z[v]
        if i > 0 and (zl > zv or (zl == zv and ul < v)):
            # in order behind the last placed (most documents between two solver points): no
            # reads of a, whose load chain would bound the loop.
            # A NaN fails both comparisons, so it is caught below
            a[i] = v
            zl, ul = zv, v
            continue
        if zv != zv:
            return False
        j = i - 1
        while j >= 0:
            u = a[j]
            zu = z[u]
            if zu > zv or (zu == zv and u < v):
                break
            a[j + 1] = u
            j -= 1
            budget -= 1
        if budget < 0:
            return False
        a[j + 1] = v
        ul = a[i]
        zl = z[ul]
    return True


@njit(cache=True, nogil=True)
def sort_query(z, prev, warm, a, b):
    """The decreasing order of ``z`` (ties by index): from ``prev`` when ``warm``, else merged.

    ``prev`` (int32) is the query's previous order; ``a`` and ``b`` are int64 scratch of at
    least ``l``. Returns the array holding the order (its first ``l`` entries). ``prev`` out of
    range falls back to the merge sort; a ``prev`` with a repeated index would sort to a
    sequence with a repeat, so it must be a permutation: the callers' is the order the
    previous pass of the same rows wrote.
    """
    n = z.shape[0]
    if warm and _warm_sort_into(z, prev, a):
        return a
    return _merge_sort_into(z, a[:n], b[:n])


@njit(cache=True, nogil=True)
def argsort_decreasing(z):
    """The order of ``z`` by decreasing value, ties in index order, in fresh arrays."""
    n = z.shape[0]
    return _merge_sort_into(z, np.empty(n, np.int64), np.empty(n, np.int64))


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
