"""Fused per-query passes: scores, pair sweep and X^T product while the query's rows are in cache.

For each query q of a range q0:q1 of a block's queries (the caller runs ranges side by side,
:mod:`streamrank._native.parallel`) with rows X_q stored as float32:

- ``fused_loss_grad``: z_q = Phi_q w, the pair sweep (loss, dz_q, active set; paper 004
  (B.1)-(B.2)), and P[q] = Phi_q^T dz_q;
- ``fused_hess``: u_q = Phi_q s, t_q = (A^T D A)_q u_q with the stored active set ((B.3)), and
  P[q] = Phi_q^T t_q;
- ``fused_scores``: z_q only.

Each pass reads every row once (a separate X@w and X^T v read them twice) and allocates nothing
of the block's size. Phi = (X - shift) * scale elementwise: ``affine`` 0 = identity, 1 = one
(shift, scale) row for all rows (zscore), 2 = one row per query (query_minmax). float32 ->
float64 is exact, so the values equal a float64 copy's up to the summation below.

The normalisation is folded into the vectors, not applied to every element:

    Phi w    = X (scale * w) - shift . (scale * w)
    Phi^T t  = scale * (X^T t - shift * sum(t))

so the inner loops are the identity's (convert, multiply, add: three operations an element
instead of five). The terms are those of the unfolded sums regrouped: the rounding error of a
score is at most about eps64 sum_k |x_k scale_k w_k| where the unfolded one's is
eps64 sum_k |x_k - shift_k| |scale_k w_k|, larger by about |shift_k| / spread_k for a feature far
from zero. That is still eps64 / eps32 = 2e-9 of the error the float32 storage of x_k itself
puts into the score (eps32 |x_k| |scale_k w_k|): the fold adds nothing a model can resolve.
Measured: docs/benchmarks.md (the pass section).

Summation orders are fixed by the data (as in ``_linalg``): sixteen interleaved partial sums per
row dot product (``_raw_dot``), rows in order within a query; the caller adds P[q] in query
order. Sixteen lanes keep each add chain short (8.5 adds on 136 columns), so the adds do not wait
on each other and a scores pass takes little more than one read of X (with the rows prefetched,
:func:`_scores`). The lane count fixes the sums' order and so a model's last bits: another count
moves the linear, Nystroem and RFF models' w and scores by about 1e-14 relative. The plain NumPy
twin is in ``tests/native/test_fused.py``: Phi w and Phi^T t in NumPy around pairkernels'
per-query sweeps.
"""

import numba
import numpy as np

from streamrank._native import column_sweeps as cs
from streamrank._native import numba_cache
from streamrank._native.memory import ALIGN
from streamrank._native.pairkernels import MODE_LEVELS, _query_hess, _query_loss_grad, _single_level
from streamrank._native.prefetch import prefetch


@numba.njit(cache=True, nogil=True, inline="always")
def _raw_dot(X, i, w):
    """X_i . w in sixteen partial sums (lane k mod 16; the columns past the last full sixteen go
    to lane 0 in order), reduced pairwise: the independent chains are 8.5 adds long on 136
    columns (four lanes would make them 34), so the adds do not wait on each other."""
    d = X.shape[1]
    d16 = d - d % 16
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
    b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = 0.0
    for k in range(0, d16, 16):
        a0 += np.float64(X[i, k + 0]) * w[k + 0]
        a1 += np.float64(X[i, k + 1]) * w[k + 1]
        a2 += np.float64(X[i, k + 2]) * w[k + 2]
        a3 += np.float64(X[i, k + 3]) * w[k + 3]
        a4 += np.float64(X[i, k + 4]) * w[k + 4]
        a5 += np.float64(X[i, k + 5]) * w[k + 5]
        a6 += np.float64(X[i, k + 6]) * w[k + 6]
        a7 += np.float64(X[i, k + 7]) * w[k + 7]
        b0 += np.float64(X[i, k + 8]) * w[k + 8]
        b1 += np.float64(X[i, k + 9]) * w[k + 9]
        b2 += np.float64(X[i, k + 10]) * w[k + 10]
        b3 += np.float64(X[i, k + 11]) * w[k + 11]
        b4 += np.float64(X[i, k + 12]) * w[k + 12]
        b5 += np.float64(X[i, k + 13]) * w[k + 13]
        b6 += np.float64(X[i, k + 14]) * w[k + 14]
        b7 += np.float64(X[i, k + 15]) * w[k + 15]
    for k in range(d16, d):
        a0 += np.float64(X[i, k]) * w[k]
    return (((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))) + (((b0 + b1) + (b2 + b3)) + ((b4 + b5) + (b6 + b7)))


@numba.njit(cache=True, nogil=True)
def _fold(w, shift, scale, affine, q, wf):
    """wf = scale_r * w for the (shift, scale) row r of query q (affine 1: row 0, 2: row q);
    returns c = shift_r . wf, so that Phi_i . w = X_i . wf - c (module docstring). affine 0:
    wf = w, c = 0."""
    r = q if affine == 2 else 0
    acc = 0.0
    for k in range(w.shape[0]):
        if affine == 0:
            wf[k] = w[k]
        else:
            wf[k] = scale[r, k] * w[k]
            acc += shift[r, k] * wf[k]
    return acc


@numba.njit(cache=True, nogil=True, inline="always")
def _start_fold(w, shift, scale, affine, q0):
    """(wf, c) for a call's queries from q0: made here once, or per query by :func:`_refold`
    (affine 2)."""
    wf = np.empty(w.shape[0])
    return wf, (_fold(w, shift, scale, affine, q0, wf) if affine != 2 else 0.0)


@numba.njit(cache=True, nogil=True, inline="always")
def _refold(w, shift, scale, affine, q, wf, c):
    """The folded constant for query q: per query with affine 2 (query_minmax), else ``c``, made
    once per call (``wf`` is rewritten with it)."""
    return _fold(w, shift, scale, affine, q, wf) if affine == 2 else c


# How far ahead of the row being scored its successors are asked for (bytes; prefetch.py): far
# enough that a row arrives before it is read, with the pair sweep of a query in between
PREFETCH_BYTES = 16384


@numba.njit(cache=True, nogil=True)
def _scores(X, s, e, wf, c, out):
    """out[i - s] = Phi_i . w for the rows s:e, ``w`` folded into ``wf`` and ``c``; the rows
    PREFETCH_BYTES ahead (the next query's, near the end) are asked for meanwhile.

    Compiled on its own, not inlined: LLVM's SLP vectoriser then packs the sixteen sums into two
    8-lane registers, where inside the fused kernels it pairs them two by two."""
    n, d = X.shape
    row_bytes = d * X.itemsize
    ahead = max(1, PREFETCH_BYTES // max(row_bytes, 1))
    base = X.ctypes.data
    for i in range(s, e):
        j = i + ahead
        if j < n:
            a = base + j * row_bytes
            for off in range(0, row_bytes, 64):  # the row's cache lines
                prefetch(a + off)
        out[i - s] = _raw_dot(X, i, wf) - c


# The X^T product's running sums live in a scratch aligned to memory.ALIGN, not in the caller's
# output row: they are loaded and stored again for every row, and numpy's rows of partials start
# 16 bytes past a cache line


@numba.njit(cache=True, nogil=True, inline="always")
def _aligned_acc(d):
    """Scratch of ``d`` float64 starting on an ``ALIGN`` boundary (made once per call)."""
    buf = np.empty(d + ALIGN // 8)
    off = ((-buf.ctypes.data) % ALIGN) // 8
    return buf[off:off + d]


@numba.njit(cache=True, nogil=True)
def _query_rmatvec(X, s, e, v, shift, scale, affine, q, acc, out):
    """out[k] = sum_{i in s:e} Phi_ik v_{i-s}: rows in order, summed in ``acc`` (scratch of d,
    :func:`_aligned_acc`), the normalisation folded (scale_k (sum_i X_ik v_i - shift_k sum_i v_i))."""
    d = X.shape[1]
    for k in range(d):
        acc[k] = 0.0
    vsum = 0.0
    for i in range(s, e):
        vi = v[i - s]
        if vi == 0.0:
            continue  # inactive documents add exact zeros; skipping them changes no value
        vsum += vi
        for k in range(d):
            acc[k] += np.float64(X[i, k]) * vi
    if affine != 0:
        r = q if affine == 2 else 0
        for k in range(d):
            out[k] = scale[r, k] * (acc[k] - shift[r, k] * vsum)
    else:
        for k in range(d):
            out[k] = acc[k]


@numba.njit(cache=True, nogil=True)
def _longest_query(q0, q1, qptr):
    n = 0
    for q in range(q0, q1):
        n = max(n, qptr[q + 1] - qptr[q])
    return n


def fused_loss_grad(q0, q1, X, w, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
                    order, cut_pref, cut_less, cut_band, zsort, loss_q, partials, zout, warm):
    """... and zout = Phi w (the scores, kept by the objective for line searches).

    ``warm``: ``order`` holds the previous pass's sort of these rows (a start for this one's,
    :func:`query_sort.sort_query`); no value depends on it.

    The common case (per-level accumulators, squared hinge) runs the one-column sweeps of
    :mod:`column_sweeps`, the others the generic ones, each in a kernel of its own chosen here:
    one body holding both compiles the row and X^T loops slower, and a run compiles only the
    case it uses (numba compiles every callee of a kernel on its first call).
    """
    k = _loss_grad_levels if mode == MODE_LEVELS and eta == 0.0 else _loss_grad_generic
    k(q0, q1, X, w, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu, order, cut_pref,
      cut_less, cut_band, zsort, loss_q, partials, zout, warm)


@numba.njit(cache=True, nogil=True, inline="always")
def _no_pairs(X, wf, c, q, s, e, order, cut_pref, cut_less, loss_q, partials, zout):
    """A query of one label level: scores, no loss, no gradient, the identity state."""
    _scores(X, s, e, wf, c, zout[s:e])
    loss_q[q] = 0.0
    for p in range(e - s):
        order[s + p] = p
        cut_pref[s + p] = 0
        cut_less[s + p] = 0
    for k in range(partials.shape[1]):
        partials[q, k] = 0.0


@numba.njit(cache=True, nogil=True)
def _loss_grad_levels(q0, q1, X, w, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
                      order, cut_pref, cut_less, cut_band, zsort, loss_q, partials, zout, warm):
    wf, c = _start_fold(w, shift, scale, affine, q0)  # w with the normalisation folded in
    xacc = _aligned_acc(X.shape[1])  # the X^T product's sums
    lmax = _longest_query(q0, q1, qptr)
    sa = np.empty(lmax, np.int64)  # the sweeps' scratch, made once per call
    sb = np.empty(lmax, np.int64)
    szs = np.empty(lmax)
    srs = np.empty(lmax, np.int32)
    slin = np.empty(lmax)
    sless = np.empty(lmax)
    scnt = np.empty(lmax + 1, np.int64)
    sdz = np.empty(lmax)  # dz in scratch: an allocation per query cost 4% of the pass
    smom = np.empty((lam.shape[0], 3))
    for q in range(q0, q1):
        s, e, c, _, _ = _query_rows(qptr, q, w, shift, scale, affine, wf, c, False)
        l = e - s
        if _single_level(rank[s:e]):
            _no_pairs(X, wf, c, q, s, e, order, cut_pref, cut_less, loss_q, partials, zout)
            continue
        z = zout[s:e]
        _scores(X, s, e, wf, c, z)
        dz = sdz[:l]
        loss_q[q] = cs.query_loss_grad(z, rank[s:e], lam, lam_r, mu[q], dz, order[s:e], cut_pref[s:e],
                                       cut_less[s:e], warm, sa, sb, szs, srs, slin, sless, scnt, smom)
        _query_rmatvec(X, s, e, dz, shift, scale, affine, q, xacc, partials[q])


@numba.njit(cache=True, nogil=True, inline="always")
def _query_rows(qptr, q, w, shift, scale, affine, wf, c, band):
    """(s, e, c, bs, be) for query q: its rows s:e, the folded constant (:func:`_refold`) and its
    rows bs:be in the smooth hinge's state arrays (empty without a band: the levels kernels)."""
    s = qptr[q]
    e = qptr[q + 1]
    c = _refold(w, shift, scale, affine, q, wf, c)
    bs, be = (s, e) if band else (0, 0)
    return s, e, c, bs, be


@numba.njit(cache=True, nogil=True)
def _loss_grad_generic(q0, q1, X, w, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
                       order, cut_pref, cut_less, cut_band, zsort, loss_q, partials, zout, warm):
    wf, c = _start_fold(w, shift, scale, affine, q0)  # w with the normalisation folded in
    xacc = _aligned_acc(X.shape[1])  # the X^T product's sums
    band = eta > 0.0  # the smooth hinge's state arrays exist (else they are empty)
    for q in range(q0, q1):
        s, e, c, bs, be = _query_rows(qptr, q, w, shift, scale, affine, wf, c, band)
        l = e - s
        if _single_level(rank[s:e]):
            _no_pairs(X, wf, c, q, s, e, order, cut_pref, cut_less, loss_q, partials, zout)
            for p in range(be - bs):
                cut_band[s + p] = 0
                zsort[s + p] = 0.0
            continue
        z = zout[s:e]
        _scores(X, s, e, wf, c, z)
        dz = np.empty(l)
        loss_q[q] = _query_loss_grad(z, rank[s:e], lam, g, c0, lam_r, g_r, mode, eta, mu[q], dz,
                                     order[s:e], cut_pref[s:e], cut_less[s:e], cut_band[bs:be], zsort[bs:be])
        _query_rmatvec(X, s, e, dz, shift, scale, affine, q, xacc, partials[q])


def fused_hess(q0, q1, X, v, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
               order, cut_pref, cut_less, cut_band, zsort, partials):
    """As fused_loss_grad: the common case's kernel or the generic one."""
    k = _hess_levels if mode == MODE_LEVELS and eta == 0.0 else _hess_generic
    k(q0, q1, X, v, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu, order, cut_pref,
      cut_less, cut_band, zsort, partials)


@numba.njit(cache=True, nogil=True)
def _hess_levels(q0, q1, X, v, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
                 order, cut_pref, cut_less, cut_band, zsort, partials):
    wf, c = _start_fold(v, shift, scale, affine, q0)  # v with the normalisation folded in
    xacc = _aligned_acc(X.shape[1])  # the X^T product's sums
    lmax = _longest_query(q0, q1, qptr)
    sus = np.empty(lmax)  # the sweep's scratch, made once per call
    srs = np.empty(lmax, np.int32)
    sts = np.empty(lmax)
    stm = np.empty(lmax)
    pre = np.empty((cs.HESS_WINDOW + 1, lam.shape[0], 2))
    su = np.empty(lmax)  # u and t in scratch too: an allocation per query cost 4% of the pass (the
    stt = np.empty(lmax)  # X^T loop, compiled on its own, vectorises over slices as well)
    for q in range(q0, q1):
        s, e, c, _, _ = _query_rows(qptr, q, v, shift, scale, affine, wf, c, False)
        l = e - s
        if _single_level(rank[s:e]):  # a query of one label level: no pairs, no product
            partials[q, :] = 0.0
            continue
        u = su[:l]
        _scores(X, s, e, wf, c, u)
        t = stt[:l]
        cs.query_hess(u, rank[s:e], lam, lam_r, mu[q], order[s:e], cut_pref[s:e], cut_less[s:e], t,
                      sus, srs, sts, stm, pre)
        _query_rmatvec(X, s, e, t, shift, scale, affine, q, xacc, partials[q])


@numba.njit(cache=True, nogil=True)
def _hess_generic(q0, q1, X, v, shift, scale, affine, qptr, rank, lam, g, c0, lam_r, g_r, mode, eta, mu,
                  order, cut_pref, cut_less, cut_band, zsort, partials):
    wf, c = _start_fold(v, shift, scale, affine, q0)  # v with the normalisation folded in
    xacc = _aligned_acc(X.shape[1])  # the X^T product's sums
    band = eta > 0.0
    for q in range(q0, q1):
        s, e, c, bs, be = _query_rows(qptr, q, v, shift, scale, affine, wf, c, band)
        l = e - s
        if _single_level(rank[s:e]):  # a query of one label level: no pairs, no product
            partials[q, :] = 0.0
            continue
        u = np.empty(l)
        _scores(X, s, e, wf, c, u)
        t1 = np.empty(l)
        _query_hess(u.reshape((l, 1)), rank[s:e], lam, g, c0, lam_r, g_r, mode, eta, mu[q], order[s:e], cut_pref[s:e],
                    cut_less[s:e], cut_band[bs:be], zsort[bs:be], t1.reshape((l, 1)))
        _query_rmatvec(X, s, e, t1, shift, scale, affine, q, xacc, partials[q])


@numba.njit(cache=True, nogil=True)
def fused_scores(q0, q1, X, w, shift, scale, affine, qptr, out):
    wf, c = _start_fold(w, shift, scale, affine, q0)  # w with the normalisation folded in
    for q in range(q0, q1):
        c = _refold(w, shift, scale, affine, q, wf, c)
        _scores(X, qptr[q], qptr[q + 1], wf, c, out[qptr[q]:qptr[q + 1]])


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
