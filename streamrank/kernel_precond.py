"""A Nystroem preconditioner for TRON's conjugate gradients on the kernel problem in beta.

The Hessian of (3.13) in beta is H = Q + C Q L Q = Q (I + C L Q) (paper 004 (B.3)): Q's spectrum
spreads from hundreds down to rounding noise, so plain CG on H needs hundreds to thousands of
steps where the same problem in w (Hessian I + C Phi^T L Phi) needs tens. With M ~ Q, M^-1 H ~
I + C L Q has the spectrum of the w-space Hessian on the directions M captures.

M = U U^T + sigma I, where U U^T is the Nystroem approximation of Q from m landmark rows S
(uniform without replacement, seeded): C_S = K(X, X_S), W = K(X_S, X_S) = V diag(s) V^T,
U = C_S V_k diag(s_k)^-1/2 over the eigenvalues above the floor max(s) m eps64 (as in
:class:`~streamrank.featuremap.Nystroem`), and sigma = the mean of diag(Q - U U^T) (the part of Q
the landmarks miss, spread evenly; at least 1e-12 max(s) so M is positive definite). By Woodbury

    M^-1 r = (r - U (sigma I + U^T U)^-1 U^T r) / sigma,     u^T M v = (U^T u).(U^T v) + sigma u.v,

each O(l k) with a k x k Cholesky factor made once: M does not depend on beta, so it is built
once per Q and serves every TRON iteration and every C. Its products are BLAS calls on arrays
whose shapes do not depend on the blocks of Q, so the run stays bit-identical for any block
layout.
"""

import numpy as np
import scipy.linalg

from .kernels import PreparedKernel

# landmarks (columns of Q) by default; measured on MQ2008 Fold1 (benchmark)
DEFAULT_LANDMARKS = 1000


def kernel_diagonal(Xn, kernel, gamma, degree=3, coef0=1.0):
    """K(x_i, x_i) for every row: 1 for rbf and laplacian, (gamma ||x||^2 + coef0)^degree for poly."""
    if kernel in ("rbf", "laplacian"):
        return np.ones(Xn.shape[0])
    sq = np.einsum("ij,ij->i", Xn, Xn)
    return sq if kernel == "linear" else (gamma * sq + coef0) ** degree


class NystroemPreconditioner:
    """M = U U^T + sigma I ~ Q for TRON's ``precondition`` hook (``solve``, ``mdot``)."""

    def __init__(self, Xn, *, kernel, gamma, degree=3, coef0=1.0, landmarks=DEFAULT_LANDMARKS, seed=0):
        Xn = np.asarray(Xn, np.float64)
        l = Xn.shape[0]
        m = min(int(landmarks), l)
        rng = np.random.default_rng([int(seed), 4])
        S = np.sort(rng.choice(l, size=m, replace=False))
        CS = PreparedKernel(Xn[S], kernel, gamma, degree, coef0)(Xn)  # (l, m) = K(X, X_S)
        s, V = np.linalg.eigh(CS[S])
        keep = s > s.max() * m * np.finfo(np.float64).eps
        U = CS @ (V[:, keep] / np.sqrt(s[keep]))
        diag = kernel_diagonal(Xn, kernel, gamma, degree, coef0)
        resid = diag - np.einsum("ij,ij->i", U, U)
        self.sigma = max(float(resid.mean()), 1e-12 * float(s.max()))
        self.U = np.ascontiguousarray(U)
        self.rank = int(keep.sum())
        self.landmarks = S
        G = self.U.T @ self.U
        G[np.diag_indices_from(G)] += self.sigma
        self._chol = scipy.linalg.cho_factor(G, lower=True)

    @property
    def nbytes(self):
        return self.U.nbytes + self._chol[0].nbytes

    def solve(self, r):
        """M^-1 r."""
        y = scipy.linalg.cho_solve(self._chol, self.U.T @ r)
        return (r - self.U @ y) / self.sigma

    def mdot(self, u, v):
        """u^T M v."""
        return float((self.U.T @ u) @ (self.U.T @ v)) + self.sigma * float(u @ v)
