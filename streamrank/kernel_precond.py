"""A Nystroem preconditioner for TRON's conjugate gradients on the kernel problem in beta.

The Hessian of (3.13) in beta is H = Q + C Q L Q = Q (I + C L Q) (paper 004 (B.3)): Q's spectrum
spreads from hundreds down to rounding noise, so plain CG on H needs hundreds to thousands of
steps where the same problem in w (Hessian I + C Phi^T L Phi) needs tens. With M ~ Q, M^-1 H ~
I + C L Q has the spectrum of the w-space Hessian on the directions M captures.

M = U U^T + sigma I, where U U^T is the Nystroem approximation of Q from k landmark rows S,
K(X, X_S) K(X_S, X_S)^-1 K(X_S, X). By default S and U come from randomly pivoted Cholesky
(:func:`rpcholesky`: U = F, the partial Cholesky factor, with Q ~ F F^T exactly that Nystroem
approximation); ``select="uniform"`` draws S uniformly (seeded) and forms U = C_S V_k
diag(s_k)^-1/2 from W = K(X_S, X_S) = V diag(s) V^T over the eigenvalues above max(s) k eps64 (as
in :class:`~streamrank.featuremap.Nystroem`). sigma = the mean of diag(Q - U U^T) (the part of Q
the landmarks miss, spread evenly) plus ``ridge``, the jitter Q' carries. By Woodbury

    M^-1 r = (r - U (sigma I + U^T U)^-1 U^T r) / sigma,     u^T M v = (U^T u).(U^T v) + sigma u.v,

each O(l k) with a k x k Cholesky factor made once per Q. U is kept in float32 (M is then
exactly U32 U32^T + sigma I, still symmetric positive definite, with U32^T U32 formed from the
same numbers) and its products go through ``_qprod``'s fixed-order float64 kernels on one
thread (half the bytes of float64, no thread a busy core can stall, and the same bits for any
block layout of Q).

That M ~ Q leaves M^-1 H ~ I + C L Q, whose spread is the one plain CG faces in w-space.
:meth:`NystroemPreconditioner.at_point` takes the loss's part in as well, as the linear path's
M = I + C Phi_S^T L Phi_S does (:mod:`streamrank.precondition`): with Q ~ U U^T,

    H = Q + C Q L Q ~ U (I + C U^T L U) U^T,   so   M = sigma I + U A U^T,   A = I + C U^T L U,

L (block diagonal by query) at the accepted point's active set. A is k x k and needs L applied to
U's k columns (one wide pair sweep, :func:`streamrank._pairkernels.hess_prod`) and one k x l x k
product per accepted TRON iteration. By Woodbury with B = sigma A^-1 + U^T U,

    M^-1 r = (r - U B^-1 U^T r) / sigma,     u^T M v = (U^T u)^T A (U^T v) + sigma u.v,

the same cost per CG step as before. M stays symmetric positive definite (A >= I).
"""

import numba
import numpy as np
import scipy.linalg

from . import _qprod
from ._blas import one_thread
from .kernels import PreparedKernel

# landmarks (columns of Q): "auto" = LANDMARKS_PER_ROOT sqrt(l) rounded to a multiple of
# LANDMARKS_STEP, within [LANDMARKS_MIN, LANDMARKS_MAX] and at most l. More landmarks cut CG steps
# (each one pass over Q, l^2 floats) and cost 2 l k^2 flops per TRON iteration (A) plus 4 l k
# bytes; sqrt(l) scaling keeps A's cost a few passes' worth. A function of l alone, so the model
# does not depend on the memory budget. Measured (rbf 2^-5, C=1, eps=1e-3; benchmark --precond):
# MQ2008 Fold1 (l = 9,630) 108 CG steps with 1,000, 50 with 2,000 (but A then costs more than
# the passes it saves there); generated mq2007 (l = 42,158) 107 CG steps with 2,000.
DEFAULT_LANDMARKS = "auto"
LANDMARKS_PER_ROOT = 10
LANDMARKS_STEP = 1000
LANDMARKS_MIN = 500
LANDMARKS_MAX = 4000
# rows of U per chunk of the A = I + C U^T L U product (whole queries; float64 U and L U rows of
# the chunk are the temporaries): at most this many bytes for both
A_CHUNK_BYTES = 32 << 20
# randomly pivoted Cholesky: candidates drawn per block, and the residual (relative to the largest
# diagonal entry) below which a pivot is rounding noise
RPC_BLOCK = 128
RPC_FLOOR = 1e-10


def auto_landmarks(l):
    """The "auto" landmark count for l rows (see LANDMARKS_PER_ROOT)."""
    k = LANDMARKS_STEP * int(round(LANDMARKS_PER_ROOT * np.sqrt(l) / LANDMARKS_STEP))
    return int(min(l, max(LANDMARKS_MIN, min(k, LANDMARKS_MAX))))


def kernel_diagonal(Xn, kernel, gamma, degree=3, coef0=1.0):
    """K(x_i, x_i) for every row: 1 for rbf and laplacian, (gamma ||x||^2 + coef0)^degree for poly."""
    if kernel in ("rbf", "laplacian"):
        return np.ones(Xn.shape[0])
    sq = np.einsum("ij,ij->i", Xn, Xn)
    return sq if kernel == "linear" else (gamma * sq + coef0) ** degree


def rpcholesky(Xn, k, *, kernel, gamma, degree=3, coef0=1.0, seed=0, block=RPC_BLOCK):
    """(pivots S, F) with Q ~ F F^T = K(X, X_S) K(X_S, X_S)^-1 K(X_S, X): k pivots chosen by
    randomly pivoted Cholesky (Chen, Epperly, Tropp, Webber 2023), block-accelerated with rejection
    sampling (Epperly, Tropp, Webber 2024, "Embrace rejection", Alg. 2).

    Each pivot is drawn with probability proportional to the diagonal of the residual Q - F F^T,
    so the rows the landmarks explain worst come next: the residual's trace falls faster than
    with uniform landmarks (MQ2008 Fold1, k = 1000: mean residual diagonal 3.7e-4 against 8.6e-4).
    A block draws ``block`` candidates i.i.d. from the residual diagonal d at its start, then
    walks them in order, accepting candidate t with probability H_tt / d_t, H the residual on the
    candidates after the pivots already accepted in the block (a b x b Schur complement): the
    accepted pivots have the sequential algorithm's distribution, and their columns cost one
    l x j x b product per block instead of one l x j pass per pivot. Pivots whose residual is
    below :data:`RPC_FLOOR` of the largest diagonal (rounding, duplicates) are rejected.
    """
    Xn = np.asarray(Xn, np.float64)
    l = Xn.shape[0]
    k = min(int(k), l)
    rng = np.random.default_rng([int(seed), 4])
    d = kernel_diagonal(Xn, kernel, gamma, degree, coef0).astype(np.float64)
    floor = RPC_FLOOR * float(d.max())
    F = np.zeros((l, k))
    S = []
    while len(S) < k:
        d[d <= floor] = 0.0  # explained: never drawn again
        total = d.sum()
        if total <= 0.0:
            break
        cand = rng.choice(l, size=block, p=d / total)
        j = len(S)
        H = PreparedKernel(Xn[cand], kernel, gamma, degree, coef0)(Xn[cand]) - F[cand, :j] @ F[cand, :j].T
        # a candidate whose recomputed residual is already below the floor (d, kept by
        # subtraction, rounds differently) is explained too: without this, draws could land
        # on such rows forever
        d[cand[np.diag(H) <= floor]] = 0.0
        u = rng.random(block)
        acc = []
        for t in range(block):
            if len(S) + len(acc) == k:
                break
            if H[t, t] > floor and u[t] * d[cand[t]] < H[t, t]:
                acc.append(t)
                # eliminate pivot t from the rest of the block (Schur complement)
                H[t + 1:, t + 1:] -= np.outer(H[t + 1:, t], H[t, t + 1:]) / H[t, t]
        if not acc:
            continue
        P = cand[acc]
        G = PreparedKernel(Xn[P], kernel, gamma, degree, coef0)(Xn) - F[:, :j] @ F[P, :j].T  # residual columns
        L = np.linalg.cholesky(0.5 * (G[P] + G[P].T))
        F[:, j:j + len(P)] = scipy.linalg.solve_triangular(L, G.T, lower=True).T
        S.extend(int(p) for p in P)
        d -= np.einsum("ij,ij->i", F[:, j:j + len(P)], F[:, j:j + len(P)])
        d[P] = 0.0
        np.maximum(d, 0.0, out=d)  # rounding may leave -eps where Q is explained
    return np.asarray(S, np.int64), F[:, :len(S)]


class NystroemPreconditioner:
    """M = U U^T + sigma I ~ Q for TRON's ``precondition`` hook (``solve``, ``mdot``); ``at_point``
    gives M ~ H with the loss's part."""

    def __init__(self, Xn, *, kernel, gamma, degree=3, coef0=1.0, landmarks=DEFAULT_LANDMARKS, seed=0,
                 loss_term=True, select="rpcholesky", ridge=0.0):
        self.loss_term = bool(loss_term)  # at_point: M ~ H rather than M ~ Q
        Xn = np.asarray(Xn, np.float64)
        l = Xn.shape[0]
        m = min(int(landmarks), l)
        if select == "rpcholesky":
            S, U = rpcholesky(Xn, m, kernel=kernel, gamma=gamma, degree=degree, coef0=coef0, seed=seed)
            top = 1.0 if U.size == 0 else float(np.max(np.einsum("ij,ij->i", U, U)))
        elif select == "uniform":
            rng = np.random.default_rng([int(seed), 4])
            S = np.sort(rng.choice(l, size=m, replace=False))
            CS = PreparedKernel(Xn[S], kernel, gamma, degree, coef0)(Xn)  # (l, m) = K(X, X_S)
            s, V = np.linalg.eigh(CS[S])
            keep = s > s.max() * m * np.finfo(np.float64).eps
            U = CS @ (V[:, keep] / np.sqrt(s[keep]))
            top = float(s.max())
            del CS
        else:
            raise ValueError(f"select must be rpcholesky or uniform; got {select!r}")
        diag = kernel_diagonal(Xn, kernel, gamma, degree, coef0)
        U32 = U.astype(np.float32)
        del U
        # U^T U and the residual diagonal from U32's own numbers, in row chunks (no float64 copy)
        G = np.zeros((U32.shape[1], U32.shape[1]))
        resid = diag.astype(np.float64)
        step = max(1, A_CHUNK_BYTES // (8 * max(U32.shape[1], 1)))
        for a in range(0, l, step):
            Uc = U32[a:a + step].astype(np.float64)
            G += Uc.T @ Uc
            resid[a:a + step] -= np.einsum("ij,ij->i", Uc, Uc)
        self._resid, self._top = max(float(resid.mean()), 0.0), top
        self._utu = G  # U^T U, for the Woodbury factors
        U32.flags.writeable = False  # the read-only specialisation the objective uses
        self.U = U32
        self.rank = U32.shape[1]
        self.landmarks = np.asarray(S)
        self.set_ridge(ridge)

    def set_ridge(self, ridge):
        """sigma = the residual's mean plus ``ridge``, the jitter Q' carries (known once Q is built),
        which also keeps 1/sigma in M^-1 r's Woodbury form from amplifying rounding when the
        landmarks explain Q; refactors sigma I + U^T U (k^3 / 3 flops). Returns self."""
        self.sigma = self._resid + float(ridge)
        if self.sigma <= 0.0:
            self.sigma = 1e-12 * self._top
        G = self._utu.copy()
        G[np.diag_indices_from(G)] += self.sigma
        self._chol = scipy.linalg.cho_factor(G, lower=True)
        return self

    @property
    def nbytes(self):
        return self.U.nbytes + self._chol[0].nbytes + self._utu.nbytes

    def _ut(self, r):
        """U^T r."""
        out = np.zeros(self.U.shape[1])
        _qprod.add_cols(self.U, np.ascontiguousarray(r, np.float64), out)
        return out

    def _woodbury_solve(self, chol, r):
        """(r - U G^-1 U^T r) / sigma for G's Cholesky factor ``chol``: M^-1 r for M = sigma I +
        U A U^T with G = sigma A^-1 + U^T U (A = I here, at_point's A there)."""
        before = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            with one_thread():
                y = scipy.linalg.cho_solve(chol, self._ut(r))
                Uy = np.empty(self.U.shape[0])
                _qprod.rows_dot(self.U, y, Uy)
        finally:
            numba.set_num_threads(before)
        return (r - Uy) / self.sigma

    def _mdot(self, u, v, A=None):
        """u^T M v = (U^T u)^T A (U^T v) + sigma u.v (A = I when None)."""
        before = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            with one_thread():
                x = self._ut(u)
                y = x if v is u else self._ut(v)
                xay = float(x @ (y if A is None else A @ y))
        finally:
            numba.set_num_threads(before)
        return xay + self.sigma * float(u @ v)

    def solve(self, r):
        """M^-1 r."""
        return self._woodbury_solve(self._chol, r)

    def mdot(self, u, v):
        """u^T M v."""
        return self._mdot(u, v)

    def at_point(self, C, rank, query_ptr, cost, mu, states):
        """M = sigma I + U A U^T, A = I + C U^T L U with L at the active set ``states`` (the
        accepted point's (order, cut_pref, cut_less) over all rows): the module docstring. Without
        ``loss_term``, M ~ Q itself (self), whatever the point.

        U^T L U sums over chunks of whole queries fixed by ``query_ptr`` alone, so M is the same
        for any block layout of Q."""
        if not self.loss_term:
            return self
        from . import _pairkernels as pk
        from .precondition import query_groups
        U, k = self.U, self.U.shape[1]
        l = U.shape[0]
        A = np.zeros((k, k))
        order, cut_pref, cut_less = states
        bounds = query_groups(query_ptr, l, max(1, A_CHUNK_BYTES // (16 * max(k, 1))))
        for qa, qb in zip(bounds[:-1], bounds[1:]):
            r0, r1 = int(query_ptr[qa]), int(query_ptr[qb])
            local = np.ascontiguousarray(query_ptr[qa:qb + 1] - r0)
            st = pk.PairState(order[r0:r1].copy(), cut_pref[r0:r1].copy(), cut_less[r0:r1].copy(), query_ptr=local)
            Uc = U[r0:r1].astype(np.float64)
            A += Uc.T @ pk.hess_prod(Uc, rank[r0:r1], local, cost, mu[qa:qb], st)
        A = 0.5 * (A + A.T)  # exactly symmetric: the product's rounding is not
        A *= C
        A[np.diag_indices_from(A)] += 1.0
        return _LossPreconditioner(self, A)


class _LossPreconditioner:
    """M = sigma I + U A U^T at one TRON point (:meth:`NystroemPreconditioner.at_point`)."""

    def __init__(self, base, A):
        self.base, self.A = base, A
        chol_a = scipy.linalg.cho_factor(A, lower=True)
        B = base.sigma * scipy.linalg.cho_solve(chol_a, np.eye(A.shape[0]))
        B = 0.5 * (B + B.T)
        B += base._utu
        self._chol = scipy.linalg.cho_factor(B, lower=True)

    def solve(self, r):
        """M^-1 r = (r - U B^-1 U^T r) / sigma."""
        return self.base._woodbury_solve(self._chol, r)

    def mdot(self, u, v):
        """u^T M v = (U^T u)^T A (U^T v) + sigma u.v."""
        return self.base._mdot(u, v, self.A)
