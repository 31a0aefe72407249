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
once per Q and serves every TRON iteration and every C. U is kept in float32 (M is then exactly
U32 U32^T + sigma I, still symmetric positive definite, with G = sigma I + U32^T U32 formed from
the same numbers) and its products go through ``_qprod``'s fixed-order float64 kernels on one
thread (half the bytes of float64, no thread a busy core can stall, and the same bits for any
block layout of Q).
"""

import numba
import numpy as np
import scipy.linalg

from . import _qprod
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
        del CS
        U32 = U.astype(np.float32)
        del U
        U64 = U32.astype(np.float64)
        resid = diag - np.einsum("ij,ij->i", U64, U64)
        self.sigma = max(float(resid.mean()), 1e-12 * float(s.max()))
        G = U64.T @ U64
        del U64
        G[np.diag_indices_from(G)] += self.sigma
        self._chol = scipy.linalg.cho_factor(G, lower=True)
        U32.flags.writeable = False  # the read-only specialisation the objective uses
        self.U = U32
        self.rank = int(keep.sum())
        self.landmarks = S

    @property
    def nbytes(self):
        return self.U.nbytes + self._chol[0].nbytes

    def _ut(self, r):
        """U^T r."""
        out = np.zeros(self.U.shape[1])
        _qprod.add_cols(self.U, np.ascontiguousarray(r, np.float64), out)
        return out

    def solve(self, r):
        """M^-1 r."""
        before = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            y = scipy.linalg.cho_solve(self._chol, self._ut(r))
            Uy = np.empty(self.U.shape[0])
            _qprod.rows_dot(self.U, y, Uy)
        finally:
            numba.set_num_threads(before)
        return (r - Uy) / self.sigma

    def mdot(self, u, v):
        """u^T M v."""
        before = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            a = self._ut(u)
            b = a if v is u else self._ut(v)
        finally:
            numba.set_num_threads(before)
        return float(a @ b) + self.sigma * float(u @ v)
