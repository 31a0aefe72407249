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
kernels' bit for bit (``tests/native/test_column_sweeps.py`` holds them equal). The loss sweep
is pairkernels' own, on arrays in scratch; the Hessian's reads the mirrored frame (paper 004
appendix B: ``(-z, L-1-r)`` in reversed order) through index arithmetic, not a reversed copy.

The sort starts from the previous pass's order (:func:`query_sort.sort_query`).
"""

from numba import njit

from streamrank._native import numba_cache
from streamrank._native.pairkernels import _sweep_loss_grad_levels
from streamrank._native.query_sort import sort_query

numba_cache.install()  # cached kernels load without numba's compiler registries

# --------------------------------------------------------------------------------------------
# Loss and gradient (paper 004 (B.1), (B.2)), per-level moments, squared hinge
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def query_loss_grad(zq, rq, lam, lam_r, muq, dzq, order, cut_pref, cut_less, warm, a, b, zs, rs, lin, zm, rm):
    """``pairkernels._query_loss_grad`` for ``MODE_LEVELS`` and ``eta == 0``, bit for bit: its
    sweeps, with the sort from the previous order and the arrays in scratch.

    ``order`` holds the previous pass's order when ``warm`` (read, then overwritten with this
    one); ``a``, ``b`` (int64), ``zs``, ``zm``, ``lin`` (float64), ``rs``, ``rm`` (int32) are
    scratch of at least ``l``. The caller has excluded single-level queries.
    """
    l = zq.shape[0]
    n_lev = lam.shape[0]
    o = sort_query(zq, order, warm, a, b)
    zs = zs[:l]
    rs = rs[:l]
    zm = zm[:l]
    rm = rm[:l]
    lin = lin[:l]
    for p in range(l):
        k = o[p]
        order[p] = k
        zs[p] = zq[k]
        rs[p] = rq[k]
        zm[l - 1 - p] = -zs[p]  # mirrored frame: exact negation, reversed order
        rm[l - 1 - p] = n_lev - 1 - rs[p]
    loss = _sweep_loss_grad_levels(zs, rs, lam, 0.0, cut_pref, lin)
    for p in range(l):
        dzq[o[p]] = -2.0 * muq * lin[p]
    _sweep_loss_grad_levels(zm, rm, lam_r, 0.0, cut_less, lin)
    for p in range(l):
        dzq[o[l - 1 - p]] += 2.0 * muq * lin[p]
    return muq * loss


# --------------------------------------------------------------------------------------------
# Generalised Hessian product (paper 004 (B.3)) from the stored prefix lengths
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _hess_frame(us, rs, cut, lam, two_mu, acc, out, mirror):
    """One frame of :func:`query_hess`: ``out[p] += 2 mu (W u_p - U)`` over the partners of
    position ``p`` (the positions ``< cut[p]`` of lower rank, per-level sums in ``acc``). With
    ``mirror`` (a constant at each call) position ``p`` is ``l-1-p`` of ``us``, ``rs`` with
    rank ``L-1-r``: the mirrored frame read from the preferred one's arrays.

    ``pairkernels._sweep_hess_levels`` on (l, 1) views of scratch gives the same bits but its
    m-wide loops and per-call accumulators made the Hessian pass 1.37x slower (400k MSLR-like
    rows, one thread: 28.3 against 20.6 ms)."""
    l = us.shape[0]
    n_lev = lam.shape[0]
    last = l - 1
    for r in range(n_lev):
        acc[r, 0] = 0.0
        acc[r, 1] = 0.0
    ptr = 0
    for p in range(l):
        c = cut[p]
        for j in range(ptr, c):
            jj = last - j if mirror else j
            r = n_lev - 1 - rs[jj] if mirror else rs[jj]
            acc[r, 0] += 1.0
            acc[r, 1] += us[jj]
        ptr = max(ptr, c)
        pp = last - p if mirror else p
        a = n_lev - 1 - rs[pp] if mirror else rs[pp]
        wsum = 0.0
        usum = 0.0
        for bb in range(a):
            cc = lam[a, bb]
            wsum += cc * acc[bb, 0]
            usum += cc * acc[bb, 1]
        if wsum != 0.0:
            out[p] += two_mu * (wsum * us[pp] - usum)


@njit(cache=True, nogil=True)
def query_hess(uq, rq, lam, lam_r, muq, order, cut_pref, cut_less, tq, us, rs, ts, tm, acc):
    """``pairkernels._query_hess`` for one column, ``MODE_LEVELS`` and ``eta == 0``, bit for bit.

    ``us``, ``ts``, ``tm`` (float64) and ``rs`` (int32) are scratch of at least ``l``, ``acc`` a
    ``(L, 2)`` scratch (per level: partner count, sum of u). Row ``i`` of ``tq`` gets
    ``sum_{j: (i,j) act} 2 mu lam (u_i - u_j) + sum_{k: (k,i) act} 2 mu lam (u_i - u_k)``.
    The caller has excluded single-level queries.
    """
    l = uq.shape[0]
    for p in range(l):
        k = order[p]
        us[p] = uq[k]
        rs[p] = rq[k]
        ts[p] = 0.0
        tm[p] = 0.0
    _hess_frame(us[:l], rs[:l], cut_pref, lam, 2.0 * muq, acc, ts, False)
    _hess_frame(us[:l], rs[:l], cut_less, lam_r, 2.0 * muq, acc, tm, True)
    for p in range(l):
        tq[order[p]] = ts[p] + tm[l - 1 - p]
