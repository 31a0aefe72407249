"""Brute-force NumPy twins of ``streamrank._native.pairkernels`` (tests only).

Explicit O(l^2) pair matrices for one query: the pair (i, j) (i preferred) exists when
``r_i > r_j`` and is active when ``(z_j - z_i) + 1.0 > 0.0`` -- the very expression the kernels
use (see the module docstring of ``streamrank._native.pairkernels``).  Paper 004 eq. 3.13, (B.1)-(B.3).
"""

import numpy as np


def pair_matrices(z, y_rank, lam, mu):
    """Margins, active mask and pair costs of one query.

    Returns
    -------
    margin : (l, l) ``margin[i, j] = (z[j] - z[i]) + 1.0`` = 1 - (z_i - z_j)
    active : (l, l) bool, ``r_i > r_j`` and ``margin[i, j] > 0.0``
    cost : (l, l) ``mu * lam[r_i, r_j]`` on active pairs, 0 elsewhere
    """
    z = np.asarray(z, dtype=np.float64)
    r = np.asarray(y_rank)
    lam = np.asarray(lam, dtype=np.float64)
    margin = (z[None, :] - z[:, None]) + 1.0  # [i, j] -> (z_j - z_i) + 1.0
    active = (r[:, None] > r[None, :]) & (margin > 0.0)
    cost = np.where(active, mu * lam[r[:, None], r[None, :]], 0.0)
    return margin, active, cost


def loss_grad_query(z, y_rank, lam, mu=1.0):
    """Loss ``sum cost * margin^2`` over active pairs, its gradient, and a gradient scale.

    ``grad_i = -2 sum_j c_ij m_ij + 2 sum_k c_ki m_ki``; ``scale_i`` is the same with absolute
    values of the terms (what a rounding error is relative to).
    """
    margin, active, cost = pair_matrices(z, y_rank, lam, mu)
    gm = np.where(active, cost * margin, 0.0)
    loss = float(np.sum(np.where(active, cost * margin * margin, 0.0)))
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


def hessian_query(z, y_rank, lam, mu=1.0):
    """Dense generalised Hessian ``A^T D A`` (D = 2 mu lam on active pairs) of one query."""
    _, _, cost = pair_matrices(z, y_rank, lam, mu)
    d = 2.0 * cost
    return np.diag(d.sum(axis=1) + d.sum(axis=0)) - d - d.T


def hess_prod_query(z, y_rank, lam, mu, u):
    """``(A^T D A u)_i = sum_{(i,j) act} D_ij (u_i - u_j) + sum_{(k,i) act} D_ki (u_i - u_k)``.

    Returns the product and a scale ``sum |D| (|u_i| + |u_j|)`` per row.
    """
    _, _, cost = pair_matrices(z, y_rank, lam, mu)
    d = 2.0 * cost
    u = np.asarray(u, dtype=np.float64)
    diff = u[:, None] - u[None, :]  # [i, j] -> u_i - u_j
    prod = (d * diff).sum(axis=1) + (d.T * diff).sum(axis=1)
    au = np.abs(u)
    summ = au[:, None] + au[None, :]
    scale = (d * summ).sum(axis=1) + (d.T * summ).sum(axis=1)
    return prod, scale


def loss_grad_block(z, y_rank, query_ptr, lam, mu):
    """Block version: ``(loss, grad, grad_scale)`` summed over queries."""
    mu = np.broadcast_to(np.asarray(mu, dtype=np.float64), (len(query_ptr) - 1,))
    n = len(z)
    grad = np.zeros(n)
    scale = np.zeros(n)
    loss = 0.0
    for q in range(len(query_ptr) - 1):
        s, e = query_ptr[q], query_ptr[q + 1]
        lq, gq, sq = loss_grad_query(z[s:e], y_rank[s:e], lam, mu[q])
        loss += lq
        grad[s:e] = gq
        scale[s:e] = sq
    return loss, grad, scale


def hess_prod_block(z, y_rank, query_ptr, lam, mu, u):
    """Block version of :func:`hess_prod_query`: ``(prod, scale)``."""
    mu = np.broadcast_to(np.asarray(mu, dtype=np.float64), (len(query_ptr) - 1,))
    prod = np.zeros(len(z))
    scale = np.zeros(len(z))
    for q in range(len(query_ptr) - 1):
        s, e = query_ptr[q], query_ptr[q + 1]
        prod[s:e], scale[s:e] = hess_prod_query(z[s:e], y_rank[s:e], lam, mu[q], u[s:e])
    return prod, scale
