"""Products with float32 row blocks of the kernel matrix Q, accumulated in float64 (numba).

The exact kernel objective (paper 004 eq. 3.13, appendix B) needs, for every row block Q_b of the
symmetric l x l matrix Q, the two products u_b = Q_b v (B.2, B.3: scores and directions in score
space) and Q_b^T t_b (the gradient and Hessian product). Both read float32 entries and accumulate
in float64. The pass over Q is memory-bandwidth bound, so the caller feeds sub-blocks small enough
to stay in cache between the two products (RAM is read once per pass).

Summation orders are fixed by the data alone, never by blocks or threads:

- :func:`rows_dot`: out[i] = sum_j Q[i, j] v[j] over eight lanes, lane k taking the columns
  j = k (mod 8) in increasing j, the lanes then combined as ((s0 + s1) + (s2 + s3)) + ((s4 + s5)
  + (s6 + s7)). Eight independent chains; the order depends on the row length only. For short
  rows (predictions: a row of features against w).
- the passes over Q (:func:`fun_block`, :func:`hess_block`) use :data:`LANES` = 64 lanes the same
  way (:func:`_row_dot_wide`): lane k takes the columns j = k (mod 64) below the last multiple of
  64 in increasing j, the tail continues lanes 0.. in column order, and the lanes are combined by
  halving, s[k] += s[k + h] for h = 32, 16, ..., 1. Sixty-four lanes held in one small array are
  a loop over lanes without a reduction in it, so LLVM vectorises it as it stands (no
  reassociation, the order above exactly), where it would not vectorise eight lanes' scalar
  chains.
- :func:`add_cols`: acc[j] += Q[i, j] t[i] for i in increasing row order, one add per row. The
  threads split the columns, so each acc[j] sees the same sequence whatever the thread count;
  a caller that passes the row blocks in row order gets the same bits for any block size.

No fastmath (LLVM must neither reassociate nor contract into FMAs). The NumPy twins in
``tests/qprod_oracle.py`` reproduce both orders bit for bit.
"""

import numba
import numpy as np
from numba import prange

from streamrank._native import numba_cache, parallel
from streamrank._native import pairkernels as pk

# columns per thread task of add_cols: 2048 float64 accumulators (16 KB) stay in L1 while the
# task's rows stream past
COL_CHUNK = 2048


@numba.njit(cache=True, nogil=True)
def _row_dot8(q, v):
    """sum_j float64(q[j]) * v[j] in the eight-lane order of the module docstring."""
    m = q.shape[0]
    m8 = m - m % 8
    s = np.zeros(8)
    for j in range(0, m8, 8):
        for k in range(8):
            s[k] += np.float64(q[j + k]) * v[j + k]
    for j in range(m8, m):  # the tail continues lanes 0.. in column order
        s[j - m8] += np.float64(q[j]) * v[j]
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))


LANES = 64


@numba.njit(cache=True, nogil=True)
def _row_dot_wide(q, v):
    """sum_j float64(q[j]) * v[j] in the 64-lane order of the module docstring."""
    m = q.shape[0]
    mw = m - m % LANES
    s = np.zeros(LANES)
    for j in range(0, mw, LANES):
        for k in range(LANES):  # independent lanes: vectorised
            s[k] += np.float64(q[j + k]) * v[j + k]
    for j in range(mw, m):
        s[j - mw] += np.float64(q[j]) * v[j]
    h = LANES // 2
    while h >= 1:
        for k in range(h):
            s[k] = s[k] + s[k + h]
        h //= 2
    return s[0]


@numba.njit(inline="always")
def _rows_dot(Q, a, b, v, out):
    """out[i - a] = sum_j float64(Q[i, j]) * v[j] for rows a:b in 64 lanes (inlined: its prange
    becomes the caller's parallel loop, one thread launch per call site and no nested parallel call)."""
    for i in prange(a, b):
        out[i - a] = _row_dot_wide(Q[i], v)


@numba.njit(cache=True, nogil=True)
def _rows_dot_range(i0, i1, Q, v, out):
    for i in range(i0, i1):
        out[i] = _row_dot8(Q[i], v)


@numba.njit(inline="always")
def _add_cols(Q, a, b, t, acc):
    """acc[j] += sum_{i in a:b} float64(Q[i, j]) * t[i - a], rows one at a time in increasing i."""
    m = Q.shape[1]
    n_chunks = (m + COL_CHUNK - 1) // COL_CHUNK
    for c in prange(n_chunks):
        j0 = c * COL_CHUNK
        j1 = min(m, j0 + COL_CHUNK)
        acc_c = acc[j0:j1]
        for i in range(a, b):
            ti = t[i - a]
            q = Q[i, j0:j1]
            for j in range(j1 - j0):  # independent columns: vectorised
                acc_c[j] += np.float64(q[j]) * ti


def rows_dot(Q, v, out):
    """out[i] = sum_j float64(Q[i, j]) * v[j] (eight-lane fixed order, see the module docstring);
    rows in chunks on :func:`streamrank._native.parallel.threads` threads."""
    parallel.run(_rows_dot_range, Q.shape[0], Q, v, out, item_cost=max(1, Q.shape[1]))


def rows_dot_here(Q, v, out):
    """:func:`rows_dot` on the calling thread (the same bits: a row's sum does not depend on the
    chunks), for callers that run their own threads (a map's tiles)."""
    _rows_dot_range(0, Q.shape[0], Q, v, out)


@numba.njit(cache=True, nogil=True)
def _rows_dot_wide_range(i0, i1, Q, v, out):
    for i in range(i0, i1):
        out[i] = _row_dot_wide(Q[i], v)


def rows_dot_wide(Q, v, out):
    """:func:`rows_dot` in the passes' 64-lane order (:func:`_row_dot_wide`), for long rows."""
    parallel.run(_rows_dot_wide_range, Q.shape[0], Q, v, out, item_cost=max(1, Q.shape[1]))


@numba.njit(cache=True, nogil=True, parallel=True)
def add_cols(Q, t, acc):
    """acc[j] += sum_i float64(Q[i, j]) * t[i], rows added one at a time in increasing i."""
    _add_cols(Q, 0, Q.shape[0], t, acc)


# -- one row block of a pass: both products per cache-sized sub-block ---------------------------


@numba.njit(cache=True, nogil=True)
def _sub_end(qp, q, sub_rows):
    """End (exclusive) of the group of whole queries from q holding at most sub_rows rows
    (at least one query)."""
    nq = qp.shape[0] - 1
    e = q + 1
    while e < nq and qp[e + 1] - qp[q] <= sub_rows:
        e += 1
    return e


@numba.njit(cache=True, nogil=True, parallel=True)
def fun_block(Qb, beta, r0, qp, rank, lam, g, c0, lam_r, g_r, mode, eta, mu, C, delta, sub_rows,
              z, dz, t, order, cut_pref, cut_less, cut_band, zsort, loss_q, acc):
    """Rows r0:r0+n of a fun+grad pass (paper 004 (B.1), (B.2)) for Q' = Q + delta I.

    Per group of whole queries (sub-block S, small enough to stay in cache): z_S = Q_S beta +
    delta beta_S, the pair sweep on z_S (loss per query, dz_S = d loss / d z, the active sets),
    t_S = beta_S + C dz_S, acc += Q_S^T t_S (the caller adds delta t after the pass, so each
    acc[j] sums its rows in row order whatever the sub-blocks). ``qp``: local query offsets of
    the block; z, dz, t and the state arrays are the block's slices; ``loss_q`` and ``mu`` its
    queries'.
    """
    nq = qp.shape[0] - 1
    band = eta > 0.0  # the smooth hinge's state arrays exist (else they are empty)
    q = 0
    while q < nq:
        e = _sub_end(qp, q, sub_rows)
        a, b = qp[q], qp[e]
        _rows_dot(Qb, a, b, beta, z[a:b])
        for i in range(a, b):
            z[i] += delta * beta[r0 + i]
        for k in range(q, e):
            s, u = qp[k], qp[k + 1]
            bs, be = (s, u) if band else (0, 0)
            loss_q[k] = pk._query_loss_grad(z[s:u], rank[s:u], lam, g, c0, lam_r, g_r, mode, eta, mu[k],
                                            dz[s:u], order[s:u], cut_pref[s:u], cut_less[s:u],
                                            cut_band[bs:be], zsort[bs:be])
        for i in range(a, b):
            t[i] = beta[r0 + i] + C * dz[i]
        _add_cols(Qb, a, b, t[a:b], acc)
        q = e


@numba.njit(cache=True, nogil=True, parallel=True)
def hess_block(Qb, v, r0, qp, rank, lam, g, c0, lam_r, g_r, mode, eta, mu, C, delta, sub_rows,
               order, cut_pref, cut_less, cut_band, zsort, t, acc):
    """Rows r0:r0+n of a Hessian-product pass (paper 004 (B.3)) for Q' = Q + delta I: per
    sub-block S, u_S = Q_S v + delta v_S, t_S = v_S + C (2 A^T D A)_S u_S (active set from the
    state arrays), acc += Q_S^T t_S (delta t added by the caller after the pass)."""
    nq = qp.shape[0] - 1
    band = eta > 0.0
    q = 0
    while q < nq:
        e = _sub_end(qp, q, sub_rows)
        a, b = qp[q], qp[e]
        u1 = np.empty(b - a)
        _rows_dot(Qb, a, b, v, u1)
        for i in range(b - a):
            u1[i] += delta * v[r0 + a + i]
        u = u1.reshape((b - a, 1))
        lu = np.empty((b - a, 1))
        for k in range(q, e):
            s, w = qp[k] - a, qp[k + 1] - a
            bs, be = (a + s, a + w) if band else (0, 0)
            pk._query_hess(u[s:w], rank[a + s:a + w], lam, g, c0, lam_r, g_r, mode, eta, mu[k],
                           order[a + s:a + w], cut_pref[a + s:a + w], cut_less[a + s:a + w], cut_band[bs:be],
                           zsort[bs:be], lu[s:w])
        for i in range(b - a):
            t[a + i] = v[r0 + a + i] + C * lu[i, 0]
        _add_cols(Qb, a, b, t[a:b], acc)
        q = e


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
