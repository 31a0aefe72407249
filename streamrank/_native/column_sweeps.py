"""The fused passes' pair sweeps for one column, in scratch the caller allocates once per call.

The generic sweeps of :mod:`streamrank._native.pairkernels` take an ``(l, m)`` payload and
allocate their work arrays per query (ranks and scores in sorted order, both frames' copies,
the accumulators): about a dozen small allocations a query, and loops over ``m`` that LLVM
cannot drop for ``m = 1``. A linear RankSVM pass has one column (the scores ``z = Phi w`` or
the direction ``u = Phi s``) and LETOR's queries are short (about 120 rows in MSLR), so those
allocations and loops were half of a Hessian pass (issue 34's profile: the sweep 0.0285 s of a
0.064 s pass on 1.1M rows).

These are the same sweeps for the common case, the per-level accumulator (``MODE_LEVELS``,
any cost table of at most ``LEVELS_MAX`` label levels) and the squared hinge (``eta == 0``):
the same floating-point operations in the same order, so every value equals the generic
kernels' bit for bit (``tests/native/test_column_sweeps.py`` holds them equal). The mirrored
frame (paper 004 appendix B: ``(-z, L-1-r)`` in reversed order) is read through index
arithmetic instead of a reversed copy; negation is exact, so the tests are the same numbers.

The sort starts from the previous pass's order (:func:`query_sort.sort_query`).
"""

import numpy as np
from numba import njit

from streamrank._native import numba_cache
from streamrank._native.pairkernels import _levels_terms, _mom_push
from streamrank._native.query_sort import sort_query

numba_cache.install()  # cached kernels load without numba's compiler registries

# --------------------------------------------------------------------------------------------
# Loss and gradient (paper 004 (B.1), (B.2)), per-level moments, squared hinge
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _sweep_pref(zs, rs, lam, cut, lin, mom):
    """``pairkernels._sweep_loss_grad_levels`` with ``thr = 0`` in the preferred frame."""
    for r in range(mom.shape[0]):
        mom[r, 0] = 0.0
        mom[r, 1] = 0.0
        mom[r, 2] = 0.0
    total = 0.0
    ptr = 0
    n = zs.shape[0]
    for p in range(n):
        zi = zs[p]
        end = ptr
        while end < n and (zs[end] - zi) + 1.0 > 0.0:
            end += 1
        for k in range(ptr, end):
            _mom_push(mom, rs[k], 1.0, zs[k])
        ptr = end
        cut[p] = ptr
        sq, lin[p] = _levels_terms(mom, lam, rs[p], zi)
        total += sq
    return total


@njit(cache=True, nogil=True, inline="always")
def _sweep_mirror(zs, rs, lam_r, cut, lin, mom):
    """The same sweep in the mirrored frame, read from the preferred one: position ``p`` of the
    mirror is ``l-1-p`` of ``zs`` with score ``-zs[l-1-p]`` and rank ``L-1-rs[l-1-p]``."""
    for r in range(mom.shape[0]):
        mom[r, 0] = 0.0
        mom[r, 1] = 0.0
        mom[r, 2] = 0.0
    n_lev = lam_r.shape[0]
    total = 0.0
    ptr = 0
    n = zs.shape[0]
    last = n - 1
    for p in range(n):
        zi = -zs[last - p]
        end = ptr
        while end < n and (-zs[last - end] - zi) + 1.0 > 0.0:
            end += 1
        for k in range(ptr, end):
            _mom_push(mom, n_lev - 1 - rs[last - k], 1.0, -zs[last - k])
        ptr = end
        cut[p] = ptr
        sq, lin[p] = _levels_terms(mom, lam_r, n_lev - 1 - rs[last - p], zi)
        total += sq
    return total


@njit(cache=True, nogil=True)
def query_loss_grad(zq, rq, lam, lam_r, muq, dzq, order, cut_pref, cut_less, warm, a, b, zs, rs, lin, mom):
    """``pairkernels._query_loss_grad`` for ``MODE_LEVELS`` and ``eta == 0``, bit for bit.

    ``order`` holds the previous pass's order when ``warm`` (read, then overwritten with this
    one); ``a``, ``b`` (int64), ``zs``, ``lin`` (float64), ``rs`` (int32) are scratch of at
    least ``l``, ``mom`` a ``(L, 3)`` scratch. The caller has excluded single-level queries.
    """
    l = zq.shape[0]
    o = sort_query(zq, order, warm, a, b)
    zs = zs[:l]
    rs = rs[:l]
    lin = lin[:l]
    for p in range(l):
        k = o[p]
        order[p] = k
        zs[p] = zq[k]
        rs[p] = rq[k]
    loss = _sweep_pref(zs, rs, lam, cut_pref, lin, mom)
    for p in range(l):
        dzq[o[p]] = -2.0 * muq * lin[p]
    _sweep_mirror(zs, rs, lam_r, cut_less, lin, mom)
    for p in range(l):
        dzq[o[l - 1 - p]] += 2.0 * muq * lin[p]
    return muq * loss


# --------------------------------------------------------------------------------------------
# Generalised Hessian product (paper 004 (B.3)) from the stored prefix lengths
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def query_hess(uq, rq, lam, lam_r, muq, order, cut_pref, cut_less, tq, us, rs, ts, tm, acc):
    """``pairkernels._query_hess`` for one column, ``MODE_LEVELS`` and ``eta == 0``, bit for bit.

    ``us``, ``ts``, ``tm`` (float64) and ``rs`` (int32) are scratch of at least ``l``, ``acc`` a
    ``(L, 2)`` scratch (per level: partner count, sum of u). Row ``i`` of ``tq`` gets
    ``sum_{j: (i,j) act} 2 mu lam (u_i - u_j) + sum_{k: (k,i) act} 2 mu lam (u_i - u_k)``.
    The caller has excluded single-level queries.
    """
    l = uq.shape[0]
    n_lev = lam.shape[0]
    two_mu = 2.0 * muq
    for p in range(l):
        k = order[p]
        us[p] = uq[k]
        rs[p] = rq[k]
        ts[p] = 0.0
        tm[p] = 0.0
    # preferred frame: partners of position p are the positions < cut_pref[p] of lower rank
    for r in range(n_lev):
        acc[r, 0] = 0.0
        acc[r, 1] = 0.0
    ptr = 0
    for p in range(l):
        c = cut_pref[p]
        for j in range(ptr, c):
            r = rs[j]
            acc[r, 0] += 1.0
            acc[r, 1] += us[j]
        ptr = max(ptr, c)
        a = rs[p]
        wsum = 0.0
        usum = 0.0
        for bb in range(a):
            cc = lam[a, bb]
            wsum += cc * acc[bb, 0]
            usum += cc * acc[bb, 1]
        if wsum != 0.0:
            ts[p] += two_mu * (wsum * us[p] - usum)
    # mirrored frame, position p = l-1-p of the preferred one, rank L-1-r, costs lam_r
    for r in range(n_lev):
        acc[r, 0] = 0.0
        acc[r, 1] = 0.0
    last = l - 1
    ptr = 0
    for p in range(l):
        c = cut_less[p]
        for j in range(ptr, c):
            r = n_lev - 1 - rs[last - j]
            acc[r, 0] += 1.0
            acc[r, 1] += us[last - j]
        ptr = max(ptr, c)
        a = n_lev - 1 - rs[last - p]
        wsum = 0.0
        usum = 0.0
        for bb in range(a):
            cc = lam_r[a, bb]
            wsum += cc * acc[bb, 0]
            usum += cc * acc[bb, 1]
        if wsum != 0.0:
            tm[p] += two_mu * (wsum * us[last - p] - usum)
    for p in range(l):
        tq[order[p]] = ts[p] + tm[last - p]
