"""Dense, explicit-pair RankSVM: the oracle for the streamed objective and TRON (tests only).

Builds every preference pair as a row of a sparse matrix A (+1 at the preferred document, -1 at
the other), then f(w) = 1/2 w.w + C sum_p c_p max(0, 1 - (A X w)_p)^2 with c_p = mu_q lambda(y_i, y_j),
solved by Newton's method with the exact generalised Hessian and backtracking (the objective is
piecewise quadratic and strongly convex, so this converges to machine precision).
"""

import numpy as np
import scipy.sparse as sp


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
    def __init__(self, X, y, query_ptr, C, lam=None, mu=None):
        A, self.c = explicit_pairs(y, query_ptr, lam, mu)
        self.D = np.asarray((A @ sp.csr_matrix(X.astype(np.float64))).todense())  # pair differences
        self.C = C

    def fun(self, w):
        m = np.maximum(0.0, 1.0 - self.D @ w)
        return 0.5 * w @ w + self.C * np.sum(self.c * m * m)

    def grad(self, w):
        m = np.maximum(0.0, 1.0 - self.D @ w)
        return w - 2 * self.C * self.D.T @ (self.c * m)

    def hess(self, w):
        act = (1.0 - self.D @ w) > 0
        Da = self.D[act]
        return np.eye(len(w)) + 2 * self.C * Da.T @ (self.c[act, None] * Da)

    def solve(self, tol=1e-13, max_iter=200):
        w = np.zeros(self.D.shape[1])
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
