"""Brute-force NumPy twins of ``streamrank._native.pairkernels`` (tests only), for the squared
hinge and paper 001's smooth hinge (``eta > 0``).

Explicit O(l^2) pair matrices for one query: the pair (i, j) (i preferred) exists when
``r_i > r_j`` and is active when ``(z_j - z_i) + 1.0 > 0.0`` -- the very expression the kernels
use (see the module docstring of ``streamrank._native.pairkernels``).  Paper 004 eq. 3.13, (B.1)-(B.3).
"""

import numpy as np


def pair_matrices(z, y_rank, lam, mu, eta=0.0):
    """Margins, active mask and pair costs of one query.

    Returns
    -------
    margin : (l, l) ``margin[i, j] = (z[j] - z[i]) + 1.0`` = 1 - (z_i - z_j)
    active : (l, l) bool, ``r_i > r_j`` and ``margin[i, j] > -eta`` (``> 0.0`` for the squared hinge)
    cost : (l, l) ``mu * lam[r_i, r_j]`` on active pairs, 0 elsewhere
    """
    z = np.asarray(z, dtype=np.float64)
    r = np.asarray(y_rank)
    lam = np.asarray(lam, dtype=np.float64)
    margin = (z[None, :] - z[:, None]) + 1.0  # [i, j] -> (z_j - z_i) + 1.0
    active = (r[:, None] > r[None, :]) & (margin > -eta)
    cost = np.where(active, mu * lam[r[:, None], r[None, :]], 0.0)
    return margin, active, cost


def smooth_hinge(margin, eta):
    """Paper 001's p and its first two derivatives in the margin m = 1 - x, written in x as the
    paper does (an independent form of the kernels' expressions): 1 - x below 1 - eta (m > eta),
    -(x + 3 eta - 1)(x - 1 - eta)^3 / (16 eta^3) inside the band, 0 above 1 + eta (m <= -eta)."""
    m = np.asarray(margin, np.float64)
    if eta == 0.0:
        act = m > 0.0
        return np.where(act, m, 0.0), np.where(act, 1.0, 0.0), np.zeros_like(m)
    x = 1.0 - m
    t = x - 1.0 - eta
    band = (m > -eta) & (m <= eta)
    e3 = 16.0 * eta ** 3
    pb = -(x + 3 * eta - 1) * t ** 3 / e3
    dpx = -(t ** 3 + 3 * (x + 3 * eta - 1) * t ** 2) / e3   # dp/dx; dp/dm = -dp/dx
    d2px = -6 * t * (2 * x + 2 * eta - 2) / e3                # d2p/dx2 = d2p/dm2
    p = np.where(m > eta, m, np.where(band, pb, 0.0))
    p1 = np.where(m > eta, 1.0, np.where(band, -dpx, 0.0))
    p2 = np.where(band, d2px, 0.0)
    return p, p1, p2


def loss_grad_query(z, y_rank, lam, mu=1.0, eta=0.0):
    """Loss ``sum cost * p(margin)^2`` over active pairs, its gradient, and a gradient scale.

    ``grad_i = -2 sum_j c_ij p_ij p'_ij + 2 sum_k c_ki p_ki p'_ki`` (p = m, p' = 1 for the squared
    hinge); ``scale_i`` is the same with absolute values of the terms (what a rounding error is
    relative to).
    """
    margin, active, cost = pair_matrices(z, y_rank, lam, mu, eta)
    p, p1, _ = smooth_hinge(margin, eta)
    gm = np.where(active, cost * p * p1, 0.0)
    loss = float(np.sum(np.where(active, cost * p * p, 0.0)))
    grad = -2.0 * gm.sum(axis=1) + 2.0 * gm.sum(axis=0)
    scale = 2.0 * (np.abs(gm).sum(axis=1) + np.abs(gm).sum(axis=0))
    return loss, grad, scale


def loss_loop_query(z, y_rank, lam, mu=1.0):
    """The loss by an explicit double loop over pairs (slow; a check on the matrix form)."""
    total = 0.0
    for i in range(len(z)):
        for j in range(len(z)):
            if y_rank[i] > y_rank[j]:
                m = (z[j] - z[i]) + 1.0
                if m > 0.0:
                    total += mu * lam[y_rank[i], y_rank[j]] * m * m
    return total


def _pair_weights(z, y_rank, lam, mu, eta):
    """``D_ij = 2 mu lam (p'^2 + p p'')`` on the active pairs (2 mu lam for the squared hinge)."""
    margin, _, cost = pair_matrices(z, y_rank, lam, mu, eta)
    p, p1, p2 = smooth_hinge(margin, eta)
    return 2.0 * cost * (p1 * p1 + p * p2)


def hessian_query(z, y_rank, lam, mu=1.0, eta=0.0):
    """Dense generalised Hessian ``A^T D A`` of one query (:func:`_pair_weights`)."""
    d = _pair_weights(z, y_rank, lam, mu, eta)
    return np.diag(d.sum(axis=1) + d.sum(axis=0)) - d - d.T


def hess_prod_query(z, y_rank, lam, mu, u, eta=0.0):
    """``(A^T D A u)_i = sum_{(i,j) act} D_ij (u_i - u_j) + sum_{(k,i) act} D_ki (u_i - u_k)``.

    Returns the product and a scale ``sum |D| (|u_i| + |u_j|)`` per row.
    """
    d = _pair_weights(z, y_rank, lam, mu, eta)
    u = np.asarray(u, dtype=np.float64)
    diff = u[:, None] - u[None, :]  # [i, j] -> u_i - u_j
    prod = (d * diff).sum(axis=1) + (d.T * diff).sum(axis=1)
    au = np.abs(u)
    summ = au[:, None] + au[None, :]
    scale = (d * summ).sum(axis=1) + (d.T * summ).sum(axis=1)
    return prod, scale


def loss_grad_block(z, y_rank, query_ptr, lam, mu, eta=0.0):
    """Block version: ``(loss, grad, grad_scale)`` summed over queries."""
    mu = np.broadcast_to(np.asarray(mu, dtype=np.float64), (len(query_ptr) - 1,))
    n = len(z)
    grad = np.zeros(n)
    scale = np.zeros(n)
    loss = 0.0
    for q in range(len(query_ptr) - 1):
        s, e = query_ptr[q], query_ptr[q + 1]
        lq, gq, sq = loss_grad_query(z[s:e], y_rank[s:e], lam, mu[q], eta)
        loss += lq
        grad[s:e] = gq
        scale[s:e] = sq
    return loss, grad, scale


def hess_prod_block(z, y_rank, query_ptr, lam, mu, u, eta=0.0):
    """Block version of :func:`hess_prod_query`: ``(prod, scale)``."""
    mu = np.broadcast_to(np.asarray(mu, dtype=np.float64), (len(query_ptr) - 1,))
    prod = np.zeros(len(z))
    scale = np.zeros(len(z))
    for q in range(len(query_ptr) - 1):
        s, e = query_ptr[q], query_ptr[q + 1]
        prod[s:e], scale[s:e] = hess_prod_query(z[s:e], y_rank[s:e], lam, mu[q], u[s:e], eta)
    return prod, scale
