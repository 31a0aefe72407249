"""The fused passes' pair sweeps for one column, in scratch the caller allocates once per call.

The generic sweeps of :mod:`streamrank._native.pairkernels` take an ``(l, m)`` payload and
allocate their work arrays per query (ranks and scores in sorted order, both frames' copies,
the accumulators): about a dozen small allocations a query, and loops over ``m`` that LLVM
cannot drop for ``m = 1``. A linear RankSVM pass has one column (the scores ``z = Phi w`` or
the direction ``u = Phi s``) and LETOR's queries are short (about 120 rows in MSLR), so those
allocations and loops would be about half of a Hessian pass.

These are the same sweeps for the common case, the per-level accumulator (``MODE_LEVELS``,
any cost table of at most ``LEVELS_MAX`` label levels) and the squared hinge (``eta == 0``):
the same floating-point operations in the same order, so every value equals the generic
kernels' bit for bit (``tests/native/test_column_sweeps.py`` holds them equal). The preferred
frame's loss sweep is pairkernels' own, on arrays in scratch; the loss pass's mirrored gradient
sweep and both Hessian frames read the mirrored frame (paper 004 appendix B: ``(-z, L-1-r)`` in
reversed order) through index arithmetic, not a reversed copy. The Hessian refuses a stored
state its loss pass could not have written (as pairkernels' ``_check_state`` does for the
generic kernels), inside its own loops: a separate pass over the state would cost the hot path.

The sort starts from the previous pass's order (:func:`query_sort.sort_query`).
"""

from numba import njit

from streamrank._native import numba_cache
from streamrank._native.pairkernels import _sweep_levels_into
from streamrank._native.query_sort import sort_query

# --------------------------------------------------------------------------------------------
# Loss and gradient (paper 004 (B.1), (B.2)), per-level moments, squared hinge
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True, inline="always")
def _mirror_cuts(cut_pref, cut_less, cnt):
    """The mirrored frame's prefix lengths from the preferred frame's, without a comparison.

    Position ``k`` (sorted by decreasing score) has the partners ``p < cut_pref[k]``: those with
    ``(z_p - z_k) + 1.0 > 0``. In the mirrored frame (``-z``, reversed) the partners of ``p``
    are the ``k`` with ``(-z_k - -z_p) + 1.0 > 0``, the same floating-point number, so
    ``cut_less[l-1-p] = #{k: cut_pref[k] > p}``: a count of each ``cut_pref`` value (``cnt``,
    scratch of ``l + 1``) summed from the top. The sweep's own comparisons found the same
    counts, one unpredictable branch a document later.
    """
    l = cut_pref.shape[0]
    for c in range(l + 1):
        cnt[c] = 0
    for k in range(l):
        cnt[cut_pref[k]] += 1
    acc = 0
    for p in range(l - 1, -1, -1):
        acc += cnt[p + 1]
        cut_less[l - 1 - p] = acc


@njit(cache=True, nogil=True, inline="always")
def _mean_push(mom, k, x):
    """``pairkernels._mom_push(mom, k, 1.0, x)`` without M2: the same W and mean, bit for bit
    (``w / wn`` is ``1.0 / wn`` at ``w = 1``), for a sweep that needs no sum of squares."""
    wn = mom[k, 0] + 1.0
    d = x - mom[k, 1]
    mom[k, 1] = mom[k, 1] + d * (1.0 / wn)
    mom[k, 0] = wn


@njit(cache=True, nogil=True, inline="always")
def _lin_terms(mom, lam, a, zi):
    """The ``lin`` of ``pairkernels._levels_terms``, the same operations in the same order:
    ``sum_b lam[a, b] W_b d_b`` over the non-empty slots ``b < a``, ``d_b = (mean_b - z_i) + 1``.

    Every slot below the top level is visited and the others' terms are replaced by 0.0 (a
    select, not a branch): ``lin + 0.0`` is ``lin`` for any ``lin`` but -0.0, which a sum
    starting at +0.0 never is (``x + -x`` is +0.0), so the bits are those of the loop over
    ``b < a``. That loop's trip count is the document's level, and its exit a mispredicted branch
    per document in the mirrored frame, where most documents (level 0 there is the top) run all
    of it. The preferred frame keeps its loop: most of its documents are at level 0 and run none
    of it, and there the select's extra work costs more than the branch."""
    lin = 0.0
    for b in range(lam.shape[0] - 1):  # the top level is never a partner
        w = mom[b, 0]
        t = lam[a, b] * (w * ((mom[b, 1] - zi) + 1.0))
        lin += t if (b < a and w != 0.0) else 0.0
    return lin


@njit(cache=True, nogil=True, inline="always")
def _mirror_grad_sweep(zs, rs, n_lev, lam, cut, lin, mom):
    """``lin`` of ``pairkernels._sweep_loss_grad_levels`` (not its loss) in the mirrored frame
    (``-z``, ``L-1-r``, reversed: position ``p`` is ``l-1-p`` of the preferred frame's ``zs``,
    ``rs``, read through index arithmetic, not a copy) with the prefix lengths ``cut`` known:
    the same W and mean pushes and ``lin`` terms in the same order as the generic sweep on the
    mirrored copies, so the same bits (negation is exact), without the loss's M2; ``mom`` is an
    ``(L, 3)`` scratch."""
    l = zs.shape[0]
    for r in range(mom.shape[0]):
        mom[r, 0] = 0.0
        mom[r, 1] = 0.0
    ptr = 0
    for p in range(l):
        c = cut[p]
        while ptr < c:
            _mean_push(mom, n_lev - 1 - rs[l - 1 - ptr], -zs[l - 1 - ptr])
            ptr += 1
        lin[p] = _lin_terms(mom, lam, n_lev - 1 - rs[l - 1 - p], -zs[l - 1 - p])


@njit(cache=True, nogil=True)
def query_loss_grad(zq, rq, lam, lam_r, muq, dzq, order, cut_pref, cut_less, warm, a, b, zs, rs, lin, lin_less, cnt,
                    mom):
    """``pairkernels._query_loss_grad`` for ``MODE_LEVELS`` and ``eta == 0``, bit for bit: its
    sweeps, with the sort from the previous order, the mirrored frame's prefix lengths from the
    preferred frame's (:func:`_mirror_cuts`) and the arrays in scratch.

    ``order`` holds the previous pass's order when ``warm`` (read, then overwritten with this
    one); ``a``, ``b``, ``cnt`` (int64; ``cnt`` at least ``l + 1``), ``zs``, ``lin``, ``lin_less``
    (float64), ``rs`` (int32) are scratch of at least ``l``, ``mom`` of ``(L, 3)``. The caller
    has excluded single-level queries. dz is written once per document: the preferred frame's
    term, then the mirrored frame's added, as the generic kernel's two scatters add them.
    """
    l = zq.shape[0]
    n_lev = lam.shape[0]
    o = sort_query(zq, order, warm, a, b)
    zs = zs[:l]
    rs = rs[:l]
    lin = lin[:l]
    lin_less = lin_less[:l]
    for p in range(l):
        k = o[p]
        order[p] = k
        zs[p] = zq[k]
        rs[p] = rq[k]
    loss = _sweep_levels_into(zs, rs, lam, 0.0, cut_pref, lin, mom)
    _mirror_cuts(cut_pref, cut_less, cnt)
    _mirror_grad_sweep(zs, rs, n_lev, lam_r, cut_less, lin_less, mom)
    for p in range(l):
        dzq[o[p]] = -2.0 * muq * lin[p] + 2.0 * muq * lin_less[l - 1 - p]
    return muq * loss


# --------------------------------------------------------------------------------------------
# Generalised Hessian product (paper 004 (B.3)) from the stored prefix lengths
# --------------------------------------------------------------------------------------------


# Prefix lengths one window of the Hessian frames' per-level sums spans (rows of their scratch,
# made once per call; 16 KB at 5 levels)
HESS_WINDOW = 200


@njit(cache=True, nogil=True, inline="always")
def _hess_frame(us, rs, cut, lam, two_mu, pre, out, mirror):
    """One frame of :func:`query_hess`: ``out[p] += 2 mu (W u_p - U)`` over the partners of
    position ``p`` (the positions ``< cut[p]`` of lower rank; per level, their count W and sum
    of u U). With ``mirror`` (a constant at each call) position ``p`` is ``l-1-p`` of ``us``,
    ``rs`` with rank ``L-1-r``: the mirrored frame read from the preferred one's arrays.

    The per-level sums of every prefix length in a window are built first (``pre[i]``: the
    first ``base + i`` positions, each row the last plus one position, in position order), then
    each ``p`` whose ``cut[p]`` (non-decreasing, as the sweeps write it) falls in the window
    reads its row. The same additions in the same order as pushing positions up to ``cut[p]``
    before ``p``, so the same bits, without that loop's varying trip count (its exit would be a
    mispredicted branch per position). ``cut`` must be non-decreasing (a row before ``base`` is
    gone).

    ``pairkernels._sweep_hess_levels`` on (l, 1) views of scratch gives the same bits, more slowly
    (its m-wide loops and per-call accumulators)."""
    l = us.shape[0]
    n_lev = lam.shape[0]
    last = l - 1
    win = pre.shape[0] - 1
    if win < 1:
        raise ValueError("the Hessian frames' scratch needs at least two rows (one prefix length a window)")
    for r in range(n_lev):
        pre[0, r, 0] = 0.0
        pre[0, r, 1] = 0.0
    base = 0
    p = 0
    while p < l:  # each turn answers the p whose prefix ends in base..top, then slides
        top = min(l, base + win)
        for j in range(base, top):
            i = j - base
            for r in range(n_lev):
                pre[i + 1, r, 0] = pre[i, r, 0]
                pre[i + 1, r, 1] = pre[i, r, 1]
            jj = last - j if mirror else j
            r = n_lev - 1 - rs[jj] if mirror else rs[jj]
            pre[i + 1, r, 0] += 1.0
            pre[i + 1, r, 1] += us[jj]
        while p < l and cut[p] <= top:
            i = cut[p] - base
            if i < 0:
                raise ValueError("a stored active set's prefix lengths decrease: "
                                 "not a state this query's loss pass wrote")
            pp = last - p if mirror else p
            a = n_lev - 1 - rs[pp] if mirror else rs[pp]
            wsum = 0.0
            usum = 0.0
            for bb in range(n_lev - 1):  # selects, not a loop to level a: _lin_terms
                below = bb < a
                cc = lam[a, bb]
                ww = cc * pre[i, bb, 0]
                uu = cc * pre[i, bb, 1]
                wsum += ww if below else 0.0
                usum += uu if below else 0.0
            add = two_mu * (wsum * us[pp] - usum)
            out[p] += add if wsum != 0.0 else 0.0
            p += 1
        if top == l and p < l:  # cut[p] > l: the window cannot reach it (would turn for ever)
            raise ValueError("a stored active set's prefix length is past its query: not a state this query's loss "
                             "pass wrote")
        for r in range(n_lev):
            pre[0, r, 0] = pre[top - base, r, 0]
            pre[0, r, 1] = pre[top - base, r, 1]
        base = top


@njit(cache=True, nogil=True)
def query_hess(uq, rq, lam, lam_r, muq, order, cut_pref, cut_less, tq, us, rs, ts, tm, pre):
    """``pairkernels._query_hess`` for one column, ``MODE_LEVELS`` and ``eta == 0``, bit for bit.

    ``us``, ``ts``, ``tm`` (float64) and ``rs`` (int32) are scratch of at least ``l``, ``pre`` a
    ``(w + 1, L, 2)`` scratch (per level: partner count, sum of u; ``w >= 1`` prefix lengths a
    window, :data:`HESS_WINDOW` in the passes). Row ``i`` of ``tq`` gets
    ``sum_{j: (i,j) act} 2 mu lam (u_i - u_j) + sum_{k: (k,i) act} 2 mu lam (u_i - u_k)``.
    The caller has excluded single-level queries.
    """
    l = uq.shape[0]
    for p in range(l):
        k = order[p]
        if k < 0 or k >= l:  # not an order this query's loss pass wrote: no read outside the query
            raise ValueError("a stored active set's order names a row outside its query")
        us[p] = uq[k]
        rs[p] = rq[k]
        ts[p] = 0.0
        tm[p] = 0.0
    _hess_frame(us[:l], rs[:l], cut_pref, lam, 2.0 * muq, pre, ts, False)
    _hess_frame(us[:l], rs[:l], cut_less, lam_r, 2.0 * muq, pre, tm, True)
    for p in range(l):
        tq[order[p]] = ts[p] + tm[l - 1 - p]


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
