"""Numba kernel: LETOR's AP and NDCG@k of ordering each query by each feature alone (GAS-E).

The letor4 conventions of :mod:`streamrank.evaluation.metrics` (``_query_letor4``, which the tests
use as the twin): a stable sort by decreasing value (ties keep the input order), gains 2^y - 1,
positions 1 and 2 undiscounted and position i >= 3 weighted log(2) / log(i), NDCG 0 where the ideal
DCG is 0 and for k beyond the query's length, relevant means label >= 1, AP 0 without a relevant
document. With ``negate`` each feature is also read as -x.

Sums over the queries of a block are added in query order; the features run in parallel, each
writing its own entries, so the result does not depend on the thread count or the blocks.
"""

import math

import numba
import numpy as np
from numba import prange
from streamrank._native import numba_cache

numba_cache.install()  # cached kernels load without numba's compiler registries

_LN2 = math.log(2.0)


@numba.njit(cache=True, nogil=True)
def _dcg(gain, log_table, out):
    """Cumulative DCG of ``gain`` in the letor4 way (left to right, as the official script)."""
    acc = 0.0
    for p in range(gain.shape[0]):
        acc += gain[p] if p < 2 else gain[p] * _LN2 / log_table[p + 1]
        out[p] = acc


@numba.njit(cache=True, nogil=True)
def _measure(x, y, k, want_ap, log_table, best):
    """AP (``want_ap``) or NDCG@k of the order of decreasing ``x`` (stable); ``best`` the ideal
    cumulative DCG of the query."""
    n = x.shape[0]
    order = np.argsort(-x, kind="mergesort")
    if want_ap:
        n_rel = 0
        s = 0.0
        for p in range(n):
            if y[order[p]] >= 1.0:
                n_rel += 1
                s += n_rel / (p + 1.0)
        return s / n_rel if n_rel else 0.0
    if k > n:
        return 0.0
    gain = np.empty(n)
    for p in range(n):
        gain[p] = 2.0 ** y[order[p]] - 1.0
    d = np.empty(n)
    _dcg(gain, log_table, d)
    return d[k - 1] / best[k - 1] if best[k - 1] != 0.0 else 0.0


@numba.njit(cache=True, nogil=True, parallel=True)
def block_measures(X, y, qp, k, want_ap, negate, log_table, out):
    """out[o, f] += the measure of feature f (o = 0) and of -f (o = 1, when ``negate``) summed over
    the queries of the block (rows qp[q]:qp[q + 1] of X), in query order."""
    d = X.shape[1]
    nq = qp.shape[0] - 1
    for f in prange(d):
        for q in range(nq):
            a = qp[q]
            b = qp[q + 1]
            n = b - a
            if n == 0:
                continue
            yq = y[a:b]
            best = np.empty(n)
            if not want_ap:
                g = np.empty(n)
                for p in range(n):
                    g[p] = 2.0 ** yq[p] - 1.0
                g = -np.sort(-g)
                _dcg(g, log_table, best)
            x = np.empty(n)
            for p in range(n):
                x[p] = X[a + p, f]
            out[0, f] += _measure(x, yq, k, want_ap, log_table, best)
            if negate:
                for p in range(n):
                    x[p] = -x[p]
                out[1, f] += _measure(x, yq, k, want_ap, log_table, best)
