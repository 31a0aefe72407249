"""Numba pair kernels: squared-hinge pair loss, gradient and Hessian products in score space.

For one query with scores ``z``, label ranks ``r`` (0..L-1 over the distinct labels of the whole
dataset), a label-pair cost table ``lam`` and a query weight ``mu``, the preference pairs are
``P = {(i, j): r_i > r_j}`` (``i`` preferred) and the loss is (paper 004 eq. 3.13, with the
cost-sensitive weights of paper 001)::

    loss(z) = mu * sum_{(i, j) in P, active} lam[r_i, r_j] * m_ij^2,   m_ij = (z_j - z_i) + 1.0

where ``(i, j)`` is *active* (in SV(beta) of paper 004 sec. 3.2) when the floating-point test
``(z_j - z_i) + 1.0 > 0.0`` holds.  That one expression, written exactly so, decides activity in
both sweeps below and in the brute-force twin (``tests/pair_oracle.py``): two different ways of
writing it could disagree on ties, and then the gradient would not be the gradient of the loss
and the Hessian would not be symmetric.

Pairs are never built.  Per query the documents are sorted by decreasing ``z`` once; because
``fl(z_j - z_i)`` is monotone in each argument, the active partners of ``i`` (as the preferred
document) are a *prefix* of that order, and the prefix only grows as ``z_i`` decreases.  One
pointer therefore inserts every partner into an accumulator keyed by label rank before ``i`` is
handled, and a query over the ranks below ``r_i`` gives the per-document partner sums of paper
004 appendix B: the weighted counts ``l_i^-`` (3.18), the partner sums of ``z`` that expand the
loss (B.1) and the gradient (B.2), and the partner sums ``gamma_i^-`` of a direction ``u`` for the
generalised Hessian product (B.3).  The terms for ``i`` as the *less* preferred document
(``l_i^+``, ``gamma_i^+``) come from the same sweep run in the *mirrored frame*
``z -> -z, r -> L-1-r`` (negation is exact, so the mirrored sweep evaluates the very same
``(z_j - z_i) + 1.0`` for every pair, with the roles swapped).

Accumulators, chosen per cost table by :func:`pair_cost`:

* ``levels``: one slot per label rank, the query loops over ranks ``b < r_i`` weighting slot ``b``
  by ``lam[r_i, b]``: any cost table, O(L) per document (LETOR has L = 2..5).
* ``constant`` (``lam[a, b] == c`` for all a > b): one Fenwick tree over label ranks,
  O(log L) per document.
* ``separable`` (``lam[a, b] == g[a] - g[b]``): two Fenwick trees, weights 1 and ``g``,
  O(log L) per document.

Numerics: a slot holds the weighted moments (W, mean, M2) of the inserted scores, updated by
Welford's/West's recurrence and merged by Chan's formula, so a partner sum of squared margins is
``sum_j w_j (d + (z_j - mean))^2 = W d^2 + M2`` with ``d = (mean - z_i) + 1.0``: a sum of two
non-negative terms, no cancellation.  The textbook expansion ``W (1-z_i)^2 + 2 (1-z_i) S1 + S2``
loses about ``log10((1+|z|)^2 / m^2)`` digits when the scores are large and the margins small.

The state kept between :func:`loss_grad` and :func:`hess_prod` (:class:`PairState`) is the sort
order and, per sorted position, the length of the active prefix in each frame: O(l) int32 per
query; :func:`hess_prod` replays the two sweeps from it without ``z``.

Paper 001's smooth hinge (``PairCost.eta > 0``) replaces ``max(0, m)`` by a C2 quartic inside the
band ``-eta < m <= eta``: the sweeps above then take the pairs with ``m > eta`` (threshold ``eta``
instead of 0, constant Hessian weight), and the band's pairs, whose weight varies, are visited
one by one (:func:`_band_loss_grad`); the state adds the band's prefix lengths and the sorted
scores.
"""

from dataclasses import dataclass

import numpy as np
from numba import njit

from streamrank._native import numba_cache, parallel
from streamrank._native.linalg import sum_in_order as _sum_in_order
from streamrank._native.query_sort import argsort_decreasing
from streamrank.errors import ParameterError

MODE_LEVELS = 0
MODE_CONSTANT = 1
MODE_SEPARABLE = 2
_MODE_NAMES = {"levels": MODE_LEVELS, "constant": MODE_CONSTANT, "separable": MODE_SEPARABLE}

# Up to this many label levels the per-level slots (O(L) per document, no merges) are used even
# for constant / separable costs; above it the Fenwick trees (O(log L)): the crossover of the
# two on one large query (docs/design.md, Measurements).
LEVELS_MAX = 16

# Relative tolerance (to max cost) for recognising lam[a, b] == g[a] - g[b]: a table computed as
# fl(G_a - G_b) from gains G is separable to within rounding; the kernels then use
# g[a] = lam[a, 0], which changes no cost by more than this.
SEPARABLE_RTOL = 1e-12


# --------------------------------------------------------------------------------------------
# Cost table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairCost:
    """A label-pair cost table prepared for the kernels (see :func:`pair_cost`).

    Attributes
    ----------
    lam : ndarray, float64 (L, L)
        ``lam[a, b]`` (a > b) is the cost of the pair (rank-a document preferred to rank-b).
    mode : int
        ``MODE_LEVELS``, ``MODE_CONSTANT`` or ``MODE_SEPARABLE``.
    g : ndarray, float64 (L,)
        ``g[a] = lam[a, 0]`` (so ``lam[a, b] = g[a] - g[b]`` when separable); ``g >= 0``.
    c0 : float
        The constant cost (``lam[1, 0]``) when ``mode == MODE_CONSTANT``.
    lam_r, g_r : ndarray
        The same for the mirrored frame ``r -> L-1-r``: ``lam_r = lam[::-1, ::-1].T``.
    eta : float
        The loss: 0 for the squared hinge, ``0 < eta < 1`` for paper 001's smooth hinge with
        band half-width ``eta`` (it travels with the costs: every kernel that weighs a pair needs
        both).
    """

    lam: np.ndarray
    mode: int
    g: np.ndarray
    c0: float
    lam_r: np.ndarray
    g_r: np.ndarray
    eta: float = 0.0

    @property
    def n_levels(self):
        return self.lam.shape[0]

    @property
    def mode_name(self):
        return {v: k for k, v in _MODE_NAMES.items()}[self.mode]


def _first_column(lam):
    """``g[a] = lam[a, 0]`` for a >= 1 and ``g[0] = 0`` (lam[0, 0] is not a pair cost)."""
    g = lam[:, 0].copy()
    if g.size:
        g[0] = 0.0
    return g


def pair_cost(lam, mode=None, levels_max=LEVELS_MAX, eta=None):
    """Validate a label-pair cost table and choose the accumulator for the kernels.

    Parameters
    ----------
    lam : array_like (L, L) or PairCost
        ``lam[a, b]`` for label ranks ``a > b``: cost of the pair (rank a preferred over rank b),
        finite and ``>= 0`` (a negative cost makes the objective non-convex).  Entries with
        ``a <= b`` are never used.  ``L`` is the number of distinct labels in the dataset.
    mode : {None, 'levels', 'constant', 'separable'}
        Force an accumulator (tests); None chooses: ``levels`` when ``L <= levels_max`` or the
        table is neither constant nor separable, else ``constant`` or ``separable``.
    levels_max : int
        See :data:`LEVELS_MAX`.
    eta : float, optional
        0 (the squared hinge, the default) or the smooth hinge's band half-width in (0, 1);
        None keeps a given PairCost's.

    Returns
    -------
    PairCost
    """
    if isinstance(lam, PairCost):
        if mode is None and (eta is None or float(eta) == lam.eta):
            return lam
        return pair_cost(lam.lam, mode, levels_max, lam.eta if eta is None else eta)
    eta = 0.0 if eta is None else float(eta)
    if not 0.0 <= eta < 1.0:
        raise ParameterError(f"eta must be 0 (squared hinge) or in (0, 1) (smooth hinge); got {eta}")
    lam = np.array(lam, dtype=np.float64, order="C")  # own copy: the caller may change theirs
    if lam.ndim != 2 or lam.shape[0] != lam.shape[1]:
        raise ParameterError(f"pair cost table must be square (L x L), got shape {lam.shape}")
    n_lev = lam.shape[0]
    low = lam[np.tril_indices(n_lev, -1)]  # the used entries, a > b
    if not np.all(np.isfinite(low)) or np.any(low < 0):
        raise ParameterError("pair costs lam[a, b] (a > b) must be finite and >= 0")
    g = _first_column(lam)
    constant = low.size == 0 or bool(np.all(low == low[0]))
    sep_err = np.abs(g[:, None] - g[None, :] - lam)[np.tril_indices(n_lev, -1)]
    separable = low.size == 0 or bool(np.all(sep_err <= SEPARABLE_RTOL * low.max()))
    if mode is None:
        if n_lev <= levels_max or not (constant or separable):
            code = MODE_LEVELS
        else:
            code = MODE_CONSTANT if constant else MODE_SEPARABLE
    else:
        if mode not in _MODE_NAMES:
            raise ParameterError(
                f"pair cost mode must be one of {sorted(_MODE_NAMES)}, got {mode!r}")
        code = _MODE_NAMES[mode]
        if code == MODE_CONSTANT and not constant:
            raise ParameterError("pair cost mode 'constant' needs lam[a, b] equal for all a > b")
        if code == MODE_SEPARABLE and not separable:
            raise ParameterError("pair cost mode 'separable' needs lam[a, b] == g[a] - g[b]")
    c0 = float(low[0]) if low.size else 0.0
    lam_r = np.ascontiguousarray(lam[::-1, ::-1].T)
    g_r = _first_column(lam_r)
    return PairCost(lam=lam, mode=code, g=g, c0=c0, lam_r=lam_r, g_r=g_r, eta=eta)


def label_ranks(y, levels=None):
    """Label ranks 0..L-1 of ``y`` over the sorted distinct ``levels`` (default: those of ``y``).

    Returns ``(y_rank int32, levels float64)``.
    """
    y = np.asarray(y, dtype=np.float64)
    if levels is None:
        levels, rank = np.unique(y, return_inverse=True)
    else:
        levels = np.asarray(levels, dtype=np.float64)
        rank = np.searchsorted(levels, y)
        if np.any(rank >= levels.size) or np.any(levels[np.minimum(rank, levels.size - 1)] != y):
            raise ParameterError("a label is not among the given label levels")
    return rank.astype(np.int32).reshape(y.shape), levels


# --------------------------------------------------------------------------------------------
# Generic Fenwick tree over label ranks (rows of payload), and weighted moments
# --------------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _fenwick_add(tree, rank, vals):
    """Add the row ``vals`` at label rank ``rank`` (0-based) of a Fenwick tree.

    ``tree`` has shape ``(L + 1, k)``; node ``n`` (1-based) holds the sum of ranks
    ``n - lowbit(n) .. n - 1``.
    """
    n = rank + 1
    while 0 < n < tree.shape[0]:  # n grows by lowbit(n) >= 1; a rank < 0 (n <= 0, lowbit 0) adds nothing
        for c in range(vals.shape[0]):
            tree[n, c] += vals[c]
        n += n & (-n)


@njit(cache=True, nogil=True)
def _fenwick_prefix(tree, rank, out):
    """``out[:] = `` sum of the rows at label ranks ``< rank``."""
    out[:] = 0.0
    n = rank
    while n > 0:
        for c in range(out.shape[0]):
            out[c] += tree[n, c]
        n -= n & (-n)


@njit(cache=True, nogil=True)
def _mom_push(mom, k, w, x):
    """Insert value ``x`` with weight ``w > 0`` into the moments ``mom[k] = (W, mean, M2)``.

    West's weighted form of Welford's recurrence: ``mean`` moves by ``(x - mean) w / W`` and
    ``M2 = sum w (x - mean)^2`` grows by ``w (x - mean_old)(x - mean_new) >= 0``; no sum of
    squares of raw values is ever formed, so nothing cancels.
    """
    wn = mom[k, 0] + w
    d = x - mom[k, 1]
    mean = mom[k, 1] + d * (w / wn)
    mom[k, 2] += w * d * (x - mean)
    mom[k, 1] = mean
    mom[k, 0] = wn


@njit(cache=True, nogil=True)
def _mom_merge(wa, ma, sa, wb, mb, sb):
    """Moments of the union of two weighted sets (Chan, Golub & LeVeque): all terms >= 0."""
    if wb == 0.0:
        return wa, ma, sa
    if wa == 0.0:
        return wb, mb, sb
    wt = wa + wb
    d = mb - ma
    return wt, ma + d * (wb / wt), sa + sb + d * d * (wa * (wb / wt))


@njit(cache=True, nogil=True)
def _mom_fenwick_push(tree, rank, w, x):
    """Insert ``(w, x)`` at label rank ``rank`` of a Fenwick tree of moments ``(L + 1, 3)``."""
    n = rank + 1
    while 0 < n < tree.shape[0]:  # as _fenwick_add: n = 0 would never move
        _mom_push(tree, n, w, x)
        n += n & (-n)


@njit(cache=True, nogil=True)
def _mom_fenwick_prefix(tree, rank):
    """Moments ``(W, mean, M2)`` of everything inserted at label ranks ``< rank``."""
    w, m, s = 0.0, 0.0, 0.0
    n = rank
    while n > 0:
        w, m, s = _mom_merge(w, m, s, tree[n, 0], tree[n, 1], tree[n, 2])
        n -= n & (-n)
    return w, m, s


# --------------------------------------------------------------------------------------------
# Loss and gradient: one sweep (preferred frame), run twice per query
# --------------------------------------------------------------------------------------------
# The sweeps dispatch on the accumulator mode once, outside the per-document loop: a mode branch
# inside the loop (with the unused accumulators in scope) makes them several times slower.


@njit(cache=True, nogil=True, inline="always")
def _active(zj, zi, thr):
    """THE active test (module docstring): the pair (i, j), ``i`` preferred, has margin
    ``m_ij = (z_j - z_i) + 1.0`` and is in the quadratic region iff ``m_ij > eta`` (``thr = eta``;
    0 for the squared hinge), in the smooth hinge's band or beyond iff ``m_ij > -eta``.  Written
    here once for both sweep directions; the mirrored frame passes negated scores, for which the
    same expression is the same floating-point number.
    """
    return (zj - zi) + 1.0 > thr


@njit(cache=True, nogil=True)
def _active_end(zs, ptr, zi, thr):
    """Advance ``ptr`` over the sorted scores ``zs`` while the pair (i, ptr) is :func:`_active`."""
    n = zs.shape[0]
    while ptr < n and _active(zs[ptr], zi, thr):
        ptr += 1
    return ptr


@njit(cache=True, nogil=True, inline="always")
def _push_active(tree, zs, rs, ptr, zi, thr):
    """Push (weight 1) into the moment tree every position from ``ptr`` on whose pair with the
    document of score ``zi`` is :func:`_active`; return the end of the active prefix."""
    end = _active_end(zs, ptr, zi, thr)
    for k in range(ptr, end):
        _mom_fenwick_push(tree, rs[k], 1.0, zs[k])
    return end


@njit(cache=True, nogil=True)
def _pair_terms(w, mean, m2, zi):
    """Partner sums for document ``i`` from the moments of its partners' scores.

    Returns ``(sum_j w_j m_ij^2, sum_j w_j m_ij)`` with ``m_ij = 1 - z_i + z_j``:
    with ``d = (mean - z_i) + 1.0`` (the weighted mean margin), ``sum w m^2 = W d^2 + M2``
    (the cross term ``2 d sum w (z_j - mean)`` is zero by definition of the mean) and
    ``sum w m = W d``.  These are the loss (B.1) and gradient (B.2) sums of paper 004 appendix B.
    """
    if w == 0.0:
        return 0.0, 0.0
    d = (mean - zi) + 1.0
    return w * d * d + m2, w * d


@njit(cache=True, nogil=True)
def _levels_terms(mom, lam, a, zi):
    """Cost-weighted partner sums over the per-level slots ``b < a``: ``sum_b lam[a, b] * (.)``."""
    sq, lin = 0.0, 0.0
    for b in range(a):
        s2, s1 = _pair_terms(mom[b, 0], mom[b, 1], mom[b, 2], zi)
        sq += lam[a, b] * s2
        lin += lam[a, b] * s1
    return sq, lin


@njit(cache=True, nogil=True)
def _sweep_loss_grad_levels(zs, rs, lam, thr, cut, lin):
    """Sweep with one moment slot per label level; any cost table, O(L) per document."""
    return _sweep_levels_into(zs, rs, lam, thr, cut, lin, np.empty((lam.shape[0], 3)))


@njit(cache=True, nogil=True, inline="always")
def _sweep_levels_into(zs, rs, lam, thr, cut, lin, mom):
    """:func:`_sweep_loss_grad_levels` with its moments in ``mom`` (``(L, 3)`` scratch the caller
    makes once: an allocation per query would cost about 6% of a sweep)."""
    for r in range(mom.shape[0]):
        mom[r, 0] = 0.0
        mom[r, 1] = 0.0
        mom[r, 2] = 0.0
    total = 0.0
    ptr = 0
    n = zs.shape[0]
    for p in range(n):
        zi = zs[p]
        # the pushes inside the search (the same pushes, in the same order): one loop exit per
        # document to mispredict, not two (the search's and the push loop's)
        while ptr < n and _active(zs[ptr], zi, thr):
            _mom_push(mom, rs[ptr], 1.0, zs[ptr])
            ptr += 1
        cut[p] = ptr
        sq, lin[p] = _levels_terms(mom, lam, rs[p], zi)
        total += sq
    return total


@njit(cache=True, nogil=True)
def _sweep_loss_grad_trees(zs, rs, n_lev, c0, g, separable, thr, cut, lin):
    """Sweep with Fenwick trees of moments; O(log L) per document. Constant cost ``c0``: one
    tree of weights 1. ``separable`` cost g[a] - g[b]: a second tree of weights ``g[r_j]``, and

    ``sum_j (g_a - g_j) f_j = g_a sum_j f_j - sum_j g_j f_j``: both sums are >= 0, every term
    of the difference is >= 0, and its relative error is about ``eps g_a / (g_a - g_b)`` for the
    nearest level ``b`` below with ``g_b < g_a`` (levels of equal ``g`` add zero cost exactly).
    """
    tree = np.zeros((n_lev + 1, 3))
    treeh = np.zeros((n_lev + 1 if separable else 0, 3))
    total = 0.0
    ptr = 0
    for p in range(zs.shape[0]):
        zi = zs[p]
        end = _push_active(tree, zs, rs, ptr, zi, thr)
        if separable:
            for k in range(ptr, end):  # the same positions into the second tree (trees are independent)
                if g[rs[k]] > 0.0:
                    _mom_fenwick_push(treeh, rs[k], g[rs[k]], zs[k])
        ptr = end
        cut[p] = ptr
        a = rs[p]
        w, m, s = _mom_fenwick_prefix(tree, a)
        s2, s1 = _pair_terms(w, m, s, zi)
        if separable:
            w, m, s = _mom_fenwick_prefix(treeh, a)
            h2, h1 = _pair_terms(w, m, s, zi)
            lin[p] = g[a] * s1 - h1
            total += g[a] * s2 - h2
        else:
            lin[p] = c0 * s1
            total += c0 * s2
    return total


@njit(cache=True, nogil=True)
def _sweep_loss_grad(zs, rs, lam, g, c0, mode, thr, cut, lin):
    """One sweep over a query sorted by decreasing score: each document as the preferred one.

    ``zs``, ``rs`` are the scores and label ranks in sorted order (gathered, so the sweep reads
    memory sequentially).  Before the document at position ``p`` is handled, every position
    ``k`` with ``(zs[k] - zs[p]) + 1.0 > 0.0`` has been inserted (a prefix; one pointer), so the
    ranks below ``rs[p]`` hold exactly its active pairs.  Writes ``lin[p] = sum_j lam m_pj``
    and the prefix length ``cut[p]``; returns ``sum_p sum_j lam m_pj^2`` (paper 004 (B.1)).
    """
    if mode == MODE_LEVELS:
        return _sweep_loss_grad_levels(zs, rs, lam, thr, cut, lin)
    if mode == MODE_CONSTANT:
        return _sweep_loss_grad_trees(zs, rs, lam.shape[0], c0, g, False, thr, cut, lin)
    return _sweep_loss_grad_trees(zs, rs, g.shape[0], c0, g, True, thr, cut, lin)


@njit(cache=True, nogil=True)
def _single_level(rq):
    """True when the query has fewer than two label levels (no pairs)."""
    for k in range(1, rq.shape[0]):
        if rq[k] != rq[0]:
            return False
    return True


@njit(cache=True, nogil=True)
def _gather_ranks(rq, order, n_lev):
    """Label ranks in sorted order (preferred frame) and in the mirrored frame.

    The mirrored frame visits the reversed order with ranks ``L-1-r``.
    """
    l = rq.shape[0]
    rs = np.empty(l, np.int32)
    rm = np.empty(l, np.int32)
    for p in range(l):
        rs[p] = rq[order[p]]
        rm[l - 1 - p] = n_lev - 1 - rs[p]
    return rs, rm


# --------------------------------------------------------------------------------------------
# Paper 001's smooth hinge: the band -eta < m <= eta, pairs enumerated explicitly
# --------------------------------------------------------------------------------------------
# With the smooth hinge the pair loss is lam mu p(m)^2 (paper 001, problem 4), m = 1 - x the
# margin: p = m above the band (m > eta, the squared hinge's region, handled by the sweeps above
# with threshold eta), 0 below it (m <= -eta), and inside it the quartic
# p = (3 eta - m)(m + eta)^3 / (16 eta^3) (paper 001's -(x + 3 eta - 1)(x - 1 - eta)^3 / (16 eta^3)
# with x = 1 - m).  The Hessian weight 2 (p'^2 + p p'') varies with m there, so counts and sums per
# label level cannot give it: the band's pairs are visited one by one (two pointers on the sorted
# scores, each band pair once, from its preferred document), O(band window) per document.


@njit(cache=True, nogil=True)
def _smooth_terms(m, eta):
    """``(p, dp/dm, d2p/dm2)`` of the smooth hinge in the band ``-eta < m <= eta``.

    With ``s = m / eta`` in (-1, 1] and ``a = 1 + s`` in (0, 2]: ``p = eta (3 - s) a^3 / 16``,
    ``p' = a^2 (2 - s) / 4``, ``p'' = 3 a (1 - s) / (4 eta)``; at ``s = 1`` these are
    ``(eta, 1, 0)``, the values of ``p = m`` there, and at ``s = -1`` all three vanish: p is C2.
    Every factor is >= 0 inside the band: nothing cancels.
    """
    s = m / eta
    a = 1.0 + s
    return eta * (3.0 - s) * a * a * a / 16.0, a * a * (2.0 - s) / 4.0, 3.0 * a * (1.0 - s) / (4.0 * eta)


@njit(cache=True, nogil=True)
def _band_loss_grad(zs, rs, lam, eta, cut_pref, cut_band, bg):
    """Loss and score gradient of the band pairs of one query (preferred frame, sorted order).

    The band partners of position ``p`` are the positions ``cut_pref[p] <= k < cut_band[p]`` of
    lower label rank: ``cut_pref[p]`` ends the prefix with ``m > eta``, ``cut_band[p]`` (found here,
    one more monotone pointer) the prefix with ``m > -eta``.  Returns ``sum lam p(m)^2``; adds
    ``d/dz`` of each pair's ``lam p^2`` to ``bg`` at both ends (``dm/dz_p = -1``, ``dm/dz_k = +1``).
    """
    total = 0.0
    ptr = 0
    for p in range(zs.shape[0]):
        zi = zs[p]
        ptr = _active_end(zs, max(ptr, cut_pref[p]), zi, -eta)
        cut_band[p] = ptr
        a = rs[p]
        for k in range(cut_pref[p], ptr):
            b = rs[k]
            if b < a:
                c = lam[a, b]
                pv, p1, _ = _smooth_terms((zs[k] - zi) + 1.0, eta)
                total += c * pv * pv
                d = 2.0 * c * pv * p1
                bg[p] -= d
                bg[k] += d
    return total


@njit(cache=True, nogil=True)
def _band_hess(us, rs, zs, lam, eta, two_mu, cut_pref, cut_band, ts):
    """``ts[p] += sum h (u_p - u_k)`` and ``ts[k] += h (u_k - u_p)`` over the band pairs, with
    ``h = 2 mu lam (p'^2 + p p'')`` at the margin of the stored sorted scores ``zs``."""
    m = us.shape[1]
    for p in range(us.shape[0]):
        a = rs[p]
        for k in range(cut_pref[p], cut_band[p]):
            b = rs[k]
            if b < a:
                pv, p1, p2 = _smooth_terms((zs[k] - zs[p]) + 1.0, eta)
                h = two_mu * lam[a, b] * (p1 * p1 + pv * p2)
                for c in range(m):
                    d = h * (us[p, c] - us[k, c])
                    ts[p, c] += d
                    ts[k, c] -= d


@njit(cache=True, nogil=True)
def _query_loss_grad(zq, rq, lam, g, c0, lam_r, g_r, mode, eta, muq, dzq, order, cut_pref, cut_less,
                     cut_band, zsort):
    """Loss and gradient of one query (paper 004 (B.1), (B.2)); fills its :class:`PairState`.

    The preferred-frame sweep gives the loss and ``-2 mu sum_j lam m_ij`` (i preferred); the
    mirrored sweep on ``(-z, L-1-r)`` in reversed order gives ``+2 mu sum_k lam m_ki`` (i less
    preferred): there the pair (k, i) is tested as ``(-z_i - -z_k) + 1.0 = (z_i - z_k) + 1.0``,
    bit for bit the preferred frame's test (negation is exact), and ``d/dz = -d/d(-z)``.
    With ``eta > 0`` (paper 001's smooth hinge) both sweeps take the pairs with ``m > eta`` and
    :func:`_band_loss_grad` the band's; ``cut_band`` and ``zsort`` (the sorted scores) are then
    filled for the Hessian (with ``eta == 0`` they may be empty and are not touched).
    """
    l = zq.shape[0]
    if _single_level(rq):
        for k in range(l):
            dzq[k] = 0.0
            order[k] = k
            cut_pref[k] = 0
            cut_less[k] = 0
            if eta > 0.0:
                cut_band[k] = 0
                zsort[k] = 0.0
        return 0.0
    o = argsort_decreasing(zq)
    zs = np.empty(l)
    zm = np.empty(l)
    for p in range(l):
        order[p] = o[p]
        zs[p] = zq[o[p]]
        zm[l - 1 - p] = -zs[p]  # mirrored frame: exact negation, reversed order
    rs, rm = _gather_ranks(rq, order, lam.shape[0])
    lin = np.empty(l)
    loss = _sweep_loss_grad(zs, rs, lam, g, c0, mode, eta, cut_pref, lin)
    for p in range(l):
        dzq[o[p]] = -2.0 * muq * lin[p]
    _sweep_loss_grad(zm, rm, lam_r, g_r, c0, mode, eta, cut_less, lin)
    for p in range(l):
        dzq[o[l - 1 - p]] += 2.0 * muq * lin[p]
    if eta > 0.0:
        bg = np.zeros(l)
        loss += _band_loss_grad(zs, rs, lam, eta, cut_pref, cut_band, bg)
        for p in range(l):
            dzq[o[p]] += muq * bg[p]
            zsort[p] = zs[p]
    return muq * loss


@njit(cache=True, nogil=True)
def _loss_grad_kernel(q0, q1, z, y_rank, query_ptr, lam, g, c0, lam_r, g_r, mode, eta, mu,
                      dz, order, cut_pref, cut_less, cut_band, zsort, loss_q):
    """Queries q0:q1 of a block (the caller runs ranges side by side, ``_native.parallel``)."""
    band = eta > 0.0
    for q in range(q0, q1):
        s = query_ptr[q]
        e = query_ptr[q + 1]
        bs, be = (s, e) if band else (0, 0)
        loss_q[q] = _query_loss_grad(z[s:e], y_rank[s:e], lam, g, c0, lam_r, g_r, mode, eta, mu[q],
                                     dz[s:e], order[s:e], cut_pref[s:e], cut_less[s:e],
                                     cut_band[bs:be], zsort[bs:be])


# --------------------------------------------------------------------------------------------
# Generalised Hessian product: the same sweeps replayed from the stored prefix lengths
# --------------------------------------------------------------------------------------------
# Partner set of the document at sorted position p: the positions < cut[p] of lower label rank.
# Each accumulator row holds (sum of weights, sum of weighted u_j) for the m directions; row p of
# the result gets 2 mu sum_j lam (u_p - u_j) = 2 mu (W u_p - U)  (l_i^-, gamma_i^- of (B.3)).


@njit(cache=True, nogil=True)
def _apply_partner_sums(ts, us, p, two_mu, wsum, usum):
    """``ts[p] += 2 mu (W u_p - U)`` for partner weight ``W`` and weighted direction sums ``U``."""
    if wsum != 0.0:
        for k in range(us.shape[1]):
            ts[p, k] += two_mu * (wsum * us[p, k] - usum[k])


@njit(cache=True, nogil=True)
def _sweep_hess_levels(us, rs, cut, lam, two_mu, ts):
    """Per-level slots ``acc[b] = (count, sum u)``, weighted by ``lam[a, b]`` at query time."""
    m = us.shape[1]
    acc = np.zeros((lam.shape[0], 1 + m))
    usum = np.empty(m)
    ptr = 0
    for p in range(us.shape[0]):
        for j in range(ptr, cut[p]):
            r = rs[j]
            acc[r, 0] += 1.0
            for k in range(m):
                acc[r, 1 + k] += us[j, k]
        ptr = max(ptr, cut[p])
        a = rs[p]
        wsum = 0.0
        usum[:] = 0.0
        for b in range(a):
            c = lam[a, b]
            wsum += c * acc[b, 0]
            for k in range(m):
                usum[k] += c * acc[b, 1 + k]
        _apply_partner_sums(ts, us, p, two_mu, wsum, usum)


@njit(cache=True, nogil=True)
def _sweep_hess_constant(us, rs, cut, n_lev, c0, two_mu, ts):
    """One Fenwick tree of rows ``(1, u_j)``; cost ``c0``."""
    m = us.shape[1]
    tree = np.zeros((n_lev + 1, 1 + m))
    vals = np.empty(1 + m)
    ptr = 0
    for p in range(us.shape[0]):
        for j in range(ptr, cut[p]):
            vals[0] = 1.0
            for k in range(m):
                vals[1 + k] = us[j, k]
            _fenwick_add(tree, rs[j], vals)
        ptr = max(ptr, cut[p])
        _fenwick_prefix(tree, rs[p], vals)
        _apply_partner_sums(ts, us, p, two_mu * c0, vals[0], vals[1:])


@njit(cache=True, nogil=True)
def _sweep_hess_separable(us, rs, cut, g, two_mu, ts):
    """One Fenwick tree of rows ``(1, g_j, u_j, g_j u_j)``: ``sum_j (g_a - g_j) x_j``."""
    m = us.shape[1]
    tree = np.zeros((g.shape[0] + 1, 2 + 2 * m))
    vals = np.empty(2 + 2 * m)
    usum = np.empty(m)
    ptr = 0
    for p in range(us.shape[0]):
        for j in range(ptr, cut[p]):
            h = g[rs[j]]
            vals[0] = 1.0
            vals[1] = h
            for k in range(m):
                vals[2 + k] = us[j, k]
                vals[2 + m + k] = h * us[j, k]
            _fenwick_add(tree, rs[j], vals)
        ptr = max(ptr, cut[p])
        ga = g[rs[p]]
        _fenwick_prefix(tree, rs[p], vals)
        for k in range(m):
            usum[k] = ga * vals[2 + k] - vals[2 + m + k]
        _apply_partner_sums(ts, us, p, two_mu, ga * vals[0] - vals[1], usum)


@njit(cache=True, nogil=True)
def _sweep_hess(us, rs, cut, lam, g, c0, mode, two_mu, ts):
    """Replay a sweep: ``ts[p] += 2 mu sum_j lam (u_p - u_j)`` over the active partners ``j``.

    ``us``, ``rs`` are in the frame's sorted order; the partners of position ``p`` are the
    positions ``< cut[p]`` of lower rank (the prefix found by :func:`_sweep_loss_grad`).
    """
    if mode == MODE_LEVELS:
        _sweep_hess_levels(us, rs, cut, lam, two_mu, ts)
    elif mode == MODE_CONSTANT:
        _sweep_hess_constant(us, rs, cut, lam.shape[0], c0, two_mu, ts)
    else:
        _sweep_hess_separable(us, rs, cut, g, two_mu, ts)


@njit(cache=True, nogil=True, inline="always")
def _hess_frames(uq, rq, order, n_lev):
    """Both frames' ranks and payloads in sorted order, and their zeroed results: ``(rs, rm, us,
    um, ts, tm)`` (the mirrored frame reversed, ranks ``L-1-r``)."""
    l = uq.shape[0]
    m = uq.shape[1]
    rs, rm = _gather_ranks(rq, order, n_lev)
    us = np.empty((l, m))
    um = np.empty((l, m))
    for p in range(l):
        for k in range(m):
            us[p, k] = uq[order[p], k]
            um[l - 1 - p, k] = us[p, k]
    return rs, rm, us, um, np.zeros((l, m)), np.zeros((l, m))


@njit(cache=True, nogil=True)
def _check_state(l, order, cut_pref, cut_less, cut_band):
    """A stored active set (:class:`PairState`) that this query's loss pass could have written:
    an order of rows in 0..l-1 and prefix lengths in 0..l. The Hessian sweeps index with them
    unchecked, so anything else (a damaged or mismatched state) raises here rather than read
    outside the query."""
    for p in range(l):
        k = order[p]
        if k < 0 or k >= l:
            raise ValueError("a stored active set's order names a row outside its query")
        if cut_pref[p] < 0 or cut_pref[p] > l or cut_less[p] < 0 or cut_less[p] > l:
            raise ValueError("a stored active set's prefix length is past its query")
    for p in range(cut_band.shape[0]):
        if cut_band[p] < 0 or cut_band[p] > l:
            raise ValueError("a stored active set's prefix length is past its query")


@njit(cache=True, nogil=True, inline="always")
def _combine_frames(tq, order, ts, tm):
    """Row ``order[p]`` of ``tq`` gets the preferred frame's ``ts[p]`` plus the mirrored frame's
    ``tm[l-1-p]`` (the same document)."""
    l = ts.shape[0]
    for p in range(l):
        for k in range(ts.shape[1]):
            tq[order[p], k] = ts[p, k] + tm[l - 1 - p, k]


@njit(cache=True, nogil=True)
def _query_hess(uq, rq, lam, g, c0, lam_r, g_r, mode, eta, muq, order, cut_pref, cut_less, cut_band, zsort,
                tq):
    """``(A^T D A u)`` for one query, ``D = 2 mu lam`` on the active pairs (paper 004 (B.3)).

    Row ``i``: ``sum_{j: (i,j) act} 2 mu lam (u_i - u_j)``
    ``+ sum_{k: (k,i) act} 2 mu lam (u_i - u_k)``;
    the first sum from the preferred frame, the second from the mirrored frame (the Hessian is
    invariant under ``z -> -z``, so ``u`` is used as is, in reversed order).  With ``eta > 0`` the
    band pairs add their own weights ``2 mu lam (p'^2 + p p'')`` (:func:`_band_hess`).
    """
    tq[:, :] = 0.0
    if _single_level(rq):
        return
    _check_state(uq.shape[0], order, cut_pref, cut_less, cut_band)
    rs, rm, us, um, ts, tm = _hess_frames(uq, rq, order, lam.shape[0])
    _sweep_hess(us, rs, cut_pref, lam, g, c0, mode, 2.0 * muq, ts)
    _sweep_hess(um, rm, cut_less, lam_r, g_r, c0, mode, 2.0 * muq, tm)
    if eta > 0.0:
        _band_hess(us, rs, zsort, lam, eta, 2.0 * muq, cut_pref, cut_band, ts)
    _combine_frames(tq, order, ts, tm)


@njit(cache=True, nogil=True)
def _hess_prod_kernel(q0, q1, u, y_rank, query_ptr, lam, g, c0, lam_r, g_r, mode, eta, mu,
                      order, cut_pref, cut_less, cut_band, zsort, out):
    """Queries q0:q1 of a block; ``u`` and ``out`` are ``(n, m)``."""
    band = eta > 0.0
    for q in range(q0, q1):
        s = query_ptr[q]
        e = query_ptr[q + 1]
        bs, be = (s, e) if band else (0, 0)
        _query_hess(u[s:e], y_rank[s:e], lam, g, c0, lam_r, g_r, mode, eta, mu[q],
                    order[s:e], cut_pref[s:e], cut_less[s:e], cut_band[bs:be], zsort[bs:be], out[s:e])


@njit(cache=True, nogil=True)
def _query_hess_levels(uq, rq, lam, lam_r, muq, order, tq, cut_pref, cut_less):
    """:func:`_query_hess` for ``MODE_LEVELS`` and the squared hinge: the same operations in the
    same order (so the same bits), without the other modes' and the band's code, which numba
    would compile on a first run that never uses them."""
    tq[:, :] = 0.0
    if _single_level(rq):
        return
    _check_state(uq.shape[0], order, cut_pref, cut_less, cut_pref[:0])
    rs, rm, us, um, ts, tm = _hess_frames(uq, rq, order, lam.shape[0])
    _sweep_hess_levels(us, rs, cut_pref, lam, 2.0 * muq, ts)
    _sweep_hess_levels(um, rm, cut_less, lam_r, 2.0 * muq, tm)
    _combine_frames(tq, order, ts, tm)


@njit(cache=True, nogil=True)
def _hess_prod_levels_kernel(q0, q1, u, y_rank, query_ptr, lam, g, c0, lam_r, g_r, mode, eta, mu,
                             order, cut_pref, cut_less, cut_band, zsort, out):
    """:func:`_hess_prod_kernel` for ``MODE_LEVELS`` and ``eta == 0`` (same arguments)."""
    for q in range(q0, q1):
        s = query_ptr[q]
        e = query_ptr[q + 1]
        _query_hess_levels(u[s:e], y_rank[s:e], lam, lam_r, mu[q], order[s:e], out[s:e], cut_pref[s:e],
                           cut_less[s:e])


# --------------------------------------------------------------------------------------------
# Python API
# --------------------------------------------------------------------------------------------


@dataclass
class PairState:
    """Active set of a block at the point of the last :func:`loss_grad` call (O(l) per row).

    For query ``q`` (rows ``s:e`` of the block), with ``p`` a position ``0..l_q-1``:

    order : int32 (n,)
        ``order[s + p]``: local index (0-based within the query) of the document at position
        ``p`` in decreasing score.
    cut_pref : int32 (n,)
        ``cut_pref[s + p]``: the length of the prefix of ``order`` holding every ``j`` with
        ``(z_j - z_i) + 1.0 > eta`` for ``i`` the document at position ``p``; its partners as the
        preferred document (in the quadratic region) are those of lower label in that prefix.
    cut_less : int32 (n,)
        The same in the mirrored frame: position ``p`` of the *increasing* order
        (``order[s + l_q - 1 - p]``), prefix of the increasing order holding every ``k`` with
        ``(z_i - z_k) + 1.0 > eta``; partners as the less preferred document: higher labels.
    cut_band : int32 (n,) or (0,)
        Smooth hinge only (``eta > 0``; empty otherwise): the prefix with ``m > -eta``; positions
        ``cut_pref <= k < cut_band`` of lower label are the band partners.
    zsort : float64 (n,) or (0,)
        Smooth hinge only: the scores in sorted order, for the band's Hessian weights.

    A query with fewer than two label levels stores the identity order and zero cuts.
    ``query_ptr`` (a copy, n_queries + 1 int64) lets :func:`hess_prod` refuse a state made for
    another block, whose indices would point outside the queries.
    """

    order: np.ndarray
    cut_pref: np.ndarray
    cut_less: np.ndarray
    query_ptr: np.ndarray = None
    cut_band: np.ndarray = None
    zsort: np.ndarray = None

    def __post_init__(self):
        if self.cut_band is None:
            self.cut_band = np.zeros(0, np.int32)
        if self.zsort is None:
            self.zsort = np.zeros(0)

    @classmethod
    def empty(cls, n, eta=0.0):
        return cls.of(state_arrays(n, eta))

    @classmethod
    def of(cls, arrays, r0=None, r1=None, query_ptr=None):
        """A state from the arrays of :func:`state_arrays` or another state (copies of rows r0:r1
        when given)."""
        if isinstance(arrays, PairState):
            arrays = arrays.arrays
        if r0 is not None:
            arrays = tuple(a[r0:r1].copy() if a.shape[0] else a for a in arrays)
        order, cut_pref, cut_less, cut_band, zsort = arrays
        return cls(order, cut_pref, cut_less, query_ptr=query_ptr, cut_band=cut_band, zsort=zsort)

    @property
    def arrays(self):
        """``(order, cut_pref, cut_less, cut_band, zsort)``, the kernels' argument order."""
        return self.order, self.cut_pref, self.cut_less, self.cut_band, self.zsort

    @property
    def n_docs(self):
        return self.order.shape[0]

    @property
    def nbytes(self):
        return sum(a.nbytes for a in self.arrays)


def _state_layout(n, eta):
    """(length, dtype) of each state array for ``n`` rows: ``order, cut_pref, cut_less, cut_band,
    zsort``, the last two empty for the squared hinge (``eta == 0``)."""
    nb = n if eta > 0.0 else 0
    return ((n, np.int32), (n, np.int32), (n, np.int32), (nb, np.int32), (nb, np.float64))


def state_arrays(n, eta=0.0):
    """Fresh state arrays for ``n`` rows: ``(order, cut_pref, cut_less, cut_band, zsort)``;
    the last two are empty for the squared hinge (``eta == 0``)."""
    return tuple(np.empty(m, t) for m, t in _state_layout(n, eta))


def is_state(st, n, eta=0.0):
    """True when ``st`` has the shapes and types :func:`state_arrays` gives ``n`` rows."""
    want = _state_layout(n, eta)
    return len(st) == len(want) and all(a.shape == (m,) and a.dtype == t for a, (m, t) in zip(st, want))


def state_bytes_per_row(eta=0.0):
    """Bytes per row of one state (:func:`state_arrays`)."""
    return 12 + (12 if eta > 0.0 else 0)


def _c_array(x, dtype):
    """``x`` as a C-contiguous, writeable array of ``dtype`` (copied only when it is not one).

    Numba compiles a separate specialisation for read-only arrays (several seconds); a copy of
    the rare read-only input is cheaper.
    """
    x = np.ascontiguousarray(x, dtype=dtype)
    return x if x.flags.writeable else x.copy()


def _check_block(n, y_rank, query_ptr, cost, mu):
    """Validate and convert the block description shared by both kernels."""
    y_rank = _c_array(y_rank, np.int32)
    query_ptr = _c_array(query_ptr, np.int64)
    if y_rank.shape != (n,):
        raise ParameterError(f"y_rank has shape {y_rank.shape}, expected ({n},)")
    if query_ptr.ndim != 1 or query_ptr.size < 1 or query_ptr[0] != 0 or query_ptr[-1] != n:
        raise ParameterError(f"query_ptr must run from 0 to the number of rows ({n})")
    lengths = np.diff(query_ptr)
    if np.any(lengths < 0):
        raise ParameterError("query_ptr must be non-decreasing")
    if lengths.size and lengths.max() >= 2**31:
        raise ParameterError("a query of 2**31 or more rows is not supported")
    if n and (y_rank.min() < 0 or y_rank.max() >= cost.n_levels):
        raise ParameterError(
            f"label ranks must lie in 0..{cost.n_levels - 1} (the cost table's size)")
    nq = query_ptr.size - 1
    mu = np.array(np.broadcast_to(np.asarray(mu, dtype=np.float64), (nq,)))  # own copy
    if not np.all(np.isfinite(mu)) or np.any(mu < 0):
        raise ParameterError("query weights mu must be finite and >= 0")
    return y_rank, query_ptr, mu


def loss_grad(z, y_rank, query_ptr, lam, mu=1.0, *, state=None, out=None, loss_q=None):
    """Pair loss and its gradient in score space for all queries of a block.

    ``loss = sum_q mu_q sum_{(i,j) in P_q active} lam[r_i, r_j] max(0, 1 - (z_i - z_j))^2``
    (paper 004 eq. 3.13 / (B.1) without the regulariser and C), gradient as (B.2); with a
    PairCost of ``eta > 0``, ``p(1 - (z_i - z_j), eta)^2`` in place of the squared hinge (paper
    001, problem 4; the band's pairs add O(band window) per document).  O(l log l)
    per query for ``levels`` with few levels, ``constant`` and ``separable`` costs; O(l L) for an
    arbitrary table.

    Parameters
    ----------
    z : array_like float64 (n,)
        Scores, finite.
    y_rank : array_like int32 (n,)
        Label ranks ``0..L-1`` (see :func:`label_ranks`).
    query_ptr : array_like int64 (n_queries + 1,)
        Local offsets: query ``q`` is rows ``query_ptr[q]:query_ptr[q+1]``.
    lam : array_like (L, L) or PairCost
        Label-pair costs (:func:`pair_cost`); prepare a :class:`PairCost` once to skip the check.
    mu : float or array_like (n_queries,)
        Query weights.
    state : PairState, optional
        Arrays to reuse (overwritten).
    out : ndarray float64 (n,), optional
        Where to write the gradient.
    loss_q : ndarray float64 (n_queries,), optional
        Receives each query's loss (a caller summing over blocks adds these in query order, so
        its total does not depend on the block layout).

    Returns
    -------
    loss : float
    dz : ndarray float64 (n,)
        ``d loss / d z``.
    state : PairState
        The active set at ``z``, for :func:`hess_prod`.
    """
    cost = pair_cost(lam)
    z = _c_array(z, np.float64)
    if z.ndim != 1:
        raise ParameterError(f"scores z must be one-dimensional, got shape {z.shape}")
    n = z.shape[0]
    y_rank, query_ptr, mu = _check_block(n, y_rank, query_ptr, cost, mu)
    if not np.all(np.isfinite(z)):
        raise ParameterError("scores z must be finite (a NaN or inf score has no rank)")
    if state is None or state.n_docs != n or (cost.eta > 0.0 and state.zsort.shape[0] != n):
        state = PairState.empty(n, cost.eta)
    dz = np.empty(n) if out is None else out
    if dz.shape != (n,) or dz.dtype != np.float64 or not dz.flags.c_contiguous:
        raise ParameterError("out must be a C-contiguous float64 array of the scores' shape")
    state.query_ptr = None  # invalid while being filled
    if loss_q is None:
        loss_q = np.empty(query_ptr.size - 1)
    elif loss_q.shape != (query_ptr.size - 1,) or loss_q.dtype != np.float64:
        raise ParameterError("loss_q must be a float64 array with one entry per query")
    nq = query_ptr.size - 1
    parallel.run(_loss_grad_kernel, nq, z, y_rank, query_ptr, cost.lam, cost.g, cost.c0, cost.lam_r,
                 cost.g_r, cost.mode, cost.eta, mu, dz, *state.arrays, loss_q, weights=query_ptr)
    total = _sum_in_order(0.0, loss_q)  # query order: the same bits for any number of threads
    state.query_ptr = query_ptr.copy()
    return float(total), dz, state


def hess_prod(u, y_rank, query_ptr, lam, mu, state, *, out=None):
    """Generalised Hessian product ``(A^T D A) u`` at the point of the last :func:`loss_grad`.

    ``D = 2 mu_q lam[r_i, r_j]`` on the pairs active there (paper 004 (B.3) in score space:
    ``Q A^T A Q v`` with ``Q v`` -> ``u``).  The active set is read from ``state``; ``z`` is not
    needed.  Row ``i`` is ``sum_j D_ij (u_i - u_j)`` over the active partners of ``i`` in either
    role, i.e. ``(l_i^+ + l_i^-) u_i - (gamma_i^+ + gamma_i^-)`` of appendix B with the costs.
    No sort: O(l L) (per-level slots) or O(l log L) (Fenwick trees) per query.

    Parameters
    ----------
    u : array_like float64 (n,) or (n, m)
        Direction(s) in score space; ``(n, m)`` gives ``m`` products in one sweep (the wide
        payload of the Newton-Cholesky ``L Phi_b``).
    y_rank, query_ptr, lam, mu
        As given to :func:`loss_grad` for this block.
    state : PairState
        From :func:`loss_grad` at the point whose active set is wanted.
    out : ndarray float64, the shape of ``u``, optional

    Returns
    -------
    ndarray float64, the shape of ``u``
    """
    cost = pair_cost(lam)
    u = np.asarray(u, dtype=np.float64)
    if u.ndim not in (1, 2):
        raise ParameterError(f"u must be (n,) or (n, m), got shape {u.shape}")
    n = u.shape[0]
    if state.n_docs != n:
        raise ParameterError(f"state is for {state.n_docs} rows, u has {n}")
    y_rank, query_ptr, mu = _check_block(n, y_rank, query_ptr, cost, mu)
    if state.query_ptr is None or not np.array_equal(state.query_ptr, query_ptr):
        raise ParameterError("state was not made by loss_grad for this block's query_ptr")
    if cost.eta > 0.0 and (state.cut_band.shape[0] != n or state.zsort.shape[0] != n):
        raise ParameterError("state was made for the squared hinge; the smooth hinge's needs its band (eta > 0)")
    u2 = _c_array(u.reshape(n, -1), np.float64)
    if out is None:
        out = np.empty(u.shape)
    if out.shape != u.shape or out.dtype != np.float64 or not out.flags.c_contiguous:
        raise ParameterError("out must be a C-contiguous float64 array of u's shape")
    # the common case's kernel, or the generic one: a run compiles only the one it uses
    kernel = _hess_prod_levels_kernel if cost.mode == MODE_LEVELS and cost.eta == 0.0 else _hess_prod_kernel
    parallel.run(kernel, query_ptr.size - 1, u2, y_rank, query_ptr, cost.lam, cost.g, cost.c0,
                 cost.lam_r, cost.g_r, cost.mode, cost.eta, mu, *state.arrays, out.reshape(n, -1),
                 weights=query_ptr)
    return out


def hess_diag(y_rank, query_ptr, lam, mu, state):
    """The diagonal of the generalised Hessian ``A^T D A`` at ``state``'s active set:
    ``2 mu_q sum_j lam`` over the active partners of each row, in either role.

    One :func:`hess_prod` sweep with ``L + 1`` indicator columns ``T[:, t] = [rank >= t]``: for a
    row of rank ``a``, every partner it is preferred to has rank ``< a`` and every partner
    preferred to it has rank ``> a``, so ``(A^T D A T)[i, a]`` is the weight of the first kind
    (those partners are 0 in column ``a``, row ``i`` is 1) and ``-(A^T D A T)[i, a + 1]`` that of
    the second (row ``i`` is 0, its partners 1); both kinds sum to the diagonal entry.
    """
    cost = pair_cost(lam)
    r = np.asarray(y_rank, np.int64)
    T = (r[:, None] >= np.arange(cost.n_levels + 1)[None, :]).astype(np.float64)
    LT = hess_prod(T, y_rank, query_ptr, cost, mu, state)
    rows = np.arange(r.shape[0])
    return LT[rows, r] - LT[rows, r + 1]


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
