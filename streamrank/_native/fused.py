"""Fused per-query passes: scores, pair sweep and X^T product while the query's rows are in cache.

For each query q of a range q0:q1 of a block's queries (the caller runs ranges side by side,
:mod:`streamrank._native.parallel`) with rows X_q stored as float32:

- ``fused_loss_grad``: z_q = Phi_q w, the pair sweep (loss, dz_q, active set; paper 004
  (B.1)-(B.2)), and P[q] = Phi_q^T dz_q;
- ``fused_hess``: u_q = Phi_q s, t_q = (A^T D A)_q u_q with the stored active set ((B.3)), and
  P[q] = Phi_q^T t_q;
- ``fused_scores``: z_q only.

Each pass reads every row once (a separate X@w and X^T v read them twice) and allocates nothing
of the block's size. Phi = (X - shift) * scale elementwise, the normalisation applied on the
fly: ``affine`` 0 = identity, 1 = one (shift, scale) row for all rows (zscore), 2 = one row per
query (query_minmax). float32 -> float64 is exact, so the values equal a float64 copy's.

Summation orders are fixed by the data (as in ``_linalg``): four interleaved partial sums per
row dot product, rows in order within a query; the caller adds P[q] in query order. The plain
NumPy twin is ``tests/linalg_oracle.py`` via the unfused objective in the tests.
"""

import numba
import numpy as np

from streamrank._native import column_sweeps as cs
from streamrank._native.pairkernels import MODE_LEVELS, _query_hess, _query_loss_grad, _single_level
from streamrank._native import numba_cache

numba_cache.install()  # cached kernels load without numba's compiler registries


@numba.njit(cache=True, nogil=True, inline="always")
def _phi(X, i, k, shift, scale, scaled, r):
    """Phi_ik: X_ik, or with ``scaled`` (a literal after inlining) (X_ik - shift_rk) scale_rk."""
    x = np.float64(X[i, k])
    if not scaled:
        return x
    return (x - shift[r, k]) * scale[r, k]


@numba.njit(cache=True, nogil=True)
def _row_dot(X, i, w, shift, scale, affine, q):
    # the mode is tested once per row, not in the inner loop; two inlined copies (affine 1 reads
    # row 0 of shift and scale, affine 2 row q), each of which LLVM optimises on its own
    if affine == 0:
        return _row_dot_mode(X, i, w, shift, scale, False, 0)
    return _row_dot_mode(X, i, w, shift, scale, True, q if affine == 2 else 0)


@numba.njit(cache=True, nogil=True, inline="always")
def _row_dot_mode(X, i, w, shift, scale, scaled, r):
    d = X.shape[1]
    d4 = d - d % 4
    a0 = 0.0
    a1 = 0.0
    a2 = 0.0
    a3 = 0.0
    for k in range(0, d4, 4):
        a0 += _phi(X, i, k, shift, scale, scaled, r) * w[k]
        a1 += _phi(X, i, k + 1, shift, scale, scaled, r) * w[k + 1]
        a2 += _phi(X, i, k + 2, shift, scale, scaled, r) * w[k + 2]
        a3 += _phi(X, i, k + 3, shift, scale, scaled, r) * w[k + 3]
    for k in range(d4, d):
        a0 += _phi(X, i, k, shift, scale, scaled, r) * w[k]
    return (a0 + a1) + (a2 + a3)


@numba.njit(cache=True, nogil=True)
def _query_rmatvec(X, s, e, v, shift, scale, affine, q, out):
    """out[k] = sum_{i in s:e} Phi_ik v_{i-s}, rows in order."""
    for k in range(X.shape[1]):
        out[k] = 0.0
    if affine == 0:
        _rmatvec_mode(X, s, e, v, shift, scale, False, 0, out)
    else:
        _rmatvec_mode(X, s, e, v, shift, scale, True, q if affine == 2 else 0, out)


@numba.njit(cache=True, nogil=True, inline="always")
def _rmatvec_mode(X, s, e, v, shift, scale, scaled, r, out):
    d = X.shape[1]
    for i in range(s, e):
        vi = v[i - s]
        if vi == 0.0:
            continue  # inactive documents add exact zeros; skipping them changes no value
        for k in range(d):
            out[k] += _phi(X, i, k, shift, scale, scaled, r) * vi


@numba.njit(cache=True, nogil=True)
def _longest_query(q0, q1, qptr):
    n = 0
    for q in range(q0, q1):
        n = max(n, qptr[q + 1] - qptr[q])
    return n


@numba.njit(cache=True, nogil=True)
def fused_loss_grad(q0, q1, X, w, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
                    order, cut_pref, cut_less, cut_band, zsort, loss_q, partials, zout, warm):
    """... and zout = Phi w (the scores, kept by the objective for line searches).

    ``warm``: ``order`` holds the previous pass's sort of these rows (a start for this one's,
    :func:`column_sweeps.sort_query`); no value depends on it.

    The common case (per-level accumulators, squared hinge) runs the one-column sweeps of
    :mod:`column_sweeps`; the others the generic ones. Each case is a function of its own: one
    body holding both compiled the row and X^T loops 1.5x slower (measured on MSLR's rows).
    """
    if mode == MODE_LEVELS and eta == 0.0:
        _loss_grad_levels(q0, q1, X, w, shift, scale, affine, qptr, rank, lam, lam_r, mu, order, cut_pref,
                          cut_less, loss_q, partials, zout, warm)
    else:
        _loss_grad_generic(q0, q1, X, w, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
                           order, cut_pref, cut_less, cut_band, zsort, loss_q, partials, zout)


@numba.njit(cache=True, nogil=True)
def _no_pairs(X, w, shift, scale, affine, q, s, e, order, cut_pref, cut_less, loss_q, partials, zout):
    """A query of one label level: scores, no loss, no gradient, the identity state."""
    for i in range(s, e):
        zout[i] = _row_dot(X, i, w, shift, scale, affine, q)
    loss_q[q] = 0.0
    for p in range(e - s):
        order[s + p] = p
        cut_pref[s + p] = 0
        cut_less[s + p] = 0
    for k in range(partials.shape[1]):
        partials[q, k] = 0.0


@numba.njit(cache=True, nogil=True)
def _loss_grad_levels(q0, q1, X, w, shift, scale, affine, qptr, rank, lam, lam_r, mu, order, cut_pref, cut_less,
                      loss_q, partials, zout, warm):
    lmax = _longest_query(q0, q1, qptr)
    sa = np.empty(lmax, np.int64)  # the sweeps' scratch, made once per call
    sb = np.empty(lmax, np.int64)
    szs = np.empty(lmax)
    srs = np.empty(lmax, np.int32)
    slin = np.empty(lmax)
    mom = np.empty((lam.shape[0], 3))
    for q in range(q0, q1):
        s = qptr[q]
        e = qptr[q + 1]
        l = e - s
        if _single_level(rank[s:e]):
            _no_pairs(X, w, shift, scale, affine, q, s, e, order, cut_pref, cut_less, loss_q, partials, zout)
            continue
        z = zout[s:e]
        for i in range(l):
            z[i] = _row_dot(X, s + i, w, shift, scale, affine, q)
        dz = np.empty(l)  # fresh, not a slice of scratch: the X^T loop then vectorises (1.3x)
        loss_q[q] = cs.query_loss_grad(z, rank[s:e], lam, lam_r, mu[q], dz, order[s:e], cut_pref[s:e],
                                       cut_less[s:e], warm, sa, sb, szs, srs, slin, mom)
        _query_rmatvec(X, s, e, dz, shift, scale, affine, q, partials[q])


@numba.njit(cache=True, nogil=True)
def _loss_grad_generic(q0, q1, X, w, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
                       order, cut_pref, cut_less, cut_band, zsort, loss_q, partials, zout):
    band = eta > 0.0  # the smooth hinge's state arrays exist (else they are empty)
    for q in range(q0, q1):
        s = qptr[q]
        e = qptr[q + 1]
        l = e - s
        bs, be = (s, e) if band else (0, 0)
        if _single_level(rank[s:e]):
            _no_pairs(X, w, shift, scale, affine, q, s, e, order, cut_pref, cut_less, loss_q, partials, zout)
            for p in range(be - bs):
                cut_band[s + p] = 0
                zsort[s + p] = 0.0
            continue
        z = zout[s:e]
        for i in range(l):
            z[i] = _row_dot(X, s + i, w, shift, scale, affine, q)
        dz = np.empty(l)
        loss_q[q] = _query_loss_grad(z, rank[s:e], lam, g, c0, lam_r, g_r, mode, eta, mu[q], dz,
                                     order[s:e], cut_pref[s:e], cut_less[s:e], cut_band[bs:be], zsort[bs:be])
        _query_rmatvec(X, s, e, dz, shift, scale, affine, q, partials[q])


@numba.njit(cache=True, nogil=True)
def fused_hess(q0, q1, X, v, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
               order, cut_pref, cut_less, cut_band, zsort, partials):
    """As fused_loss_grad, the common case and the others in functions of their own."""
    if mode == MODE_LEVELS and eta == 0.0:
        _hess_levels(q0, q1, X, v, shift, scale, affine, qptr, rank, lam, lam_r, mu, order, cut_pref, cut_less,
                     partials)
    else:
        _hess_generic(q0, q1, X, v, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
                      order, cut_pref, cut_less, cut_band, zsort, partials)


@numba.njit(cache=True, nogil=True)
def _hess_levels(q0, q1, X, v, shift, scale, affine, qptr, rank, lam, lam_r, mu, order, cut_pref, cut_less,
                 partials):
    lmax = _longest_query(q0, q1, qptr)
    sus = np.empty(lmax)  # the sweep's scratch, made once per call
    srs = np.empty(lmax, np.int32)
    sts = np.empty(lmax)
    stm = np.empty(lmax)
    acc = np.empty((lam.shape[0], 2))
    for q in range(q0, q1):
        s = qptr[q]
        e = qptr[q + 1]
        l = e - s
        if _single_level(rank[s:e]):
            for k in range(partials.shape[1]):
                partials[q, k] = 0.0
            continue
        u = np.empty(l)  # u and t fresh, not slices of scratch: the X^T loop then vectorises (1.3x)
        for i in range(l):
            u[i] = _row_dot(X, s + i, v, shift, scale, affine, q)
        t = np.empty(l)
        cs.query_hess(u, rank[s:e], lam, lam_r, mu[q], order[s:e], cut_pref[s:e], cut_less[s:e], t,
                      sus, srs, sts, stm, acc)
        _query_rmatvec(X, s, e, t, shift, scale, affine, q, partials[q])


@numba.njit(cache=True, nogil=True)
def _hess_generic(q0, q1, X, v, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
                  order, cut_pref, cut_less, cut_band, zsort, partials):
    band = eta > 0.0
    for q in range(q0, q1):
        s = qptr[q]
        e = qptr[q + 1]
        l = e - s
        bs, be = (s, e) if band else (0, 0)
        if _single_level(rank[s:e]):
            for k in range(partials.shape[1]):
                partials[q, k] = 0.0
            continue
        u = np.empty((l, 1))
        for i in range(l):
            u[i, 0] = _row_dot(X, s + i, v, shift, scale, affine, q)
        t1 = np.empty(l)
        _query_hess(u, rank[s:e], lam, g, c0, lam_r, g_r, mode, eta, mu[q], order[s:e], cut_pref[s:e],
                    cut_less[s:e], cut_band[bs:be], zsort[bs:be], t1.reshape((l, 1)))
        _query_rmatvec(X, s, e, t1, shift, scale, affine, q, partials[q])


@numba.njit(cache=True, nogil=True)
def fused_scores(q0, q1, X, w, shift, scale, affine, qptr, out):
    for q in range(q0, q1):
        for i in range(qptr[q], qptr[q + 1]):
            out[i] = _row_dot(X, i, w, shift, scale, affine, q)
