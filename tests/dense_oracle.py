"""Dense, explicit-pair RankSVM: the oracle for the streamed objective and TRON (tests only).

Builds every preference pair as a row of a sparse matrix A (+1 at the preferred document, -1 at
the other), then f(w) = 1/2 w.w + C sum_p c_p max(0, 1 - (A X w)_p)^2 with c_p = mu_q lambda(y_i, y_j),
solved by Newton's method with the exact generalised Hessian and backtracking (the objective is
piecewise quadratic and strongly convex, so this converges to machine precision).
"""

import numpy as np
import scipy.sparse as sp

from pair_oracle import smooth_hinge


def explicit_pairs(y, query_ptr, lam=None, mu=None, levels=None):
    """(A sparse (p, n), weights (p,)) over all pairs y_i > y_j within each query."""
    levels = np.unique(y) if levels is None else levels
    rank = np.searchsorted(levels, y)
    rows, cols, vals, wts = [], [], [], []
    p = 0
    for q in range(len(query_ptr) - 1):
        a, b = query_ptr[q], query_ptr[q + 1]
        for i in range(a, b):
            for j in range(a, b):
                if y[i] > y[j]:
                    rows += [p, p]
                    cols += [i, j]
                    vals += [1.0, -1.0]
                    wts.append((1.0 if lam is None else lam[rank[i], rank[j]]) * (1.0 if mu is None else mu[q]))
                    p += 1
    A = sp.csr_matrix((vals, (rows, cols)), shape=(p, len(y)))
    return A, np.asarray(wts)


class DenseRankSVM:
    """The explicit pairs as a sparse p x n matrix A (two entries a row) beside the dense rows X:
    pair margins A (X w), and the generalised Hessian I + 2C X^T (A_act^T diag(c) A_act) X, whose
    middle factor is sparse n x n (dense within each query), so large queries (10^5 pairs and
    more) cost n^2 d per Newton step rather than p d^2."""

    def __init__(self, X, y, query_ptr, C, lam=None, mu=None, eta=0.0):
        self.A, self.c = explicit_pairs(y, query_ptr, lam, mu)
        self.X = np.asarray(X, np.float64)
        self.C = C
        self.eta = eta  # paper 001's smooth hinge p(m)^2 in place of max(0, m)^2 when > 0

    def _p(self, w):
        return smooth_hinge(1.0 - self.A @ (self.X @ w), self.eta)

    def fun(self, w):
        p, _, _ = self._p(w)
        return 0.5 * w @ w + self.C * np.sum(self.c * p * p)

    def grad(self, w):
        p, p1, _ = self._p(w)
        return w - 2 * self.C * self.X.T @ (self.A.T @ (self.c * p * p1))

    def hess(self, w):
        p, p1, p2 = self._p(w)
        h = self.c * (p1 * p1 + p * p2)
        act = h > 0
        Aa = self.A[act]
        S = (Aa.T @ sp.diags(h[act]) @ Aa).tocsr()
        return np.eye(len(w)) + 2 * self.C * self.X.T @ np.asarray(S @ self.X)

    def solve(self, tol=1e-13, max_iter=200):
        w = np.zeros(self.X.shape[1])
        for _ in range(max_iter):
            g = self.grad(w)
            if np.linalg.norm(g) <= tol * max(1.0, np.linalg.norm(self.grad(np.zeros_like(w)))):
                break
            step = -np.linalg.solve(self.hess(w), g)
            t, f0 = 1.0, self.fun(w)
            while self.fun(w + t * step) > f0 + 1e-4 * t * (g @ step) and t > 1e-12:
                t *= 0.5
            w = w + t * step
        return w


def dense_optimum(Q, y, qp, C):
    """min of (3.13) through w-space: Q = Phi Phi^T with Phi = V S^1/2 (PSD part), same optimum."""
    s, V = np.linalg.eigh(Q)
    Phi = V * np.sqrt(np.maximum(s, 0.0))
    dense = DenseRankSVM(Phi, y, qp, C)
    return dense.fun(dense.solve())


def nystroem_precond_dense(K, U, diag_floor, y, qp, z, C, ridge):
    """The exact path's preconditioner at a point, densely from explicit pairs (paper 005's
    M = D + U (I + C U^T L U) U^T): R = diag(K - U U^T), D = max(R + ridge + C diag(L) R^2,
    ``diag_floor``), L = 2 A_act^T diag(c_act) A_act over the pairs active at scores z."""
    r = np.diag(K - U @ U.T)
    A, c = explicit_pairs(y, qp)
    A = A.toarray()
    act = (1.0 - A @ z) > 0
    L = 2.0 * A[act].T @ (c[act, None] * A[act])
    k = U.shape[1]
    return np.diag(np.maximum(r + ridge + C * np.diag(L) * r * r, diag_floor)) + U @ (np.eye(k) + C * U.T @ L @ U) @ U.T
