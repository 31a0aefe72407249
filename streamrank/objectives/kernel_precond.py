"""A Nystroem preconditioner for TRON's conjugate gradients on the kernel problem in beta.

The Hessian of (3.13) in beta is H = Q + C Q L Q = Q (I + C L Q) (paper 004 (B.3)): Q's spectrum
spreads from hundreds down to rounding noise, so plain CG on H needs hundreds to thousands of
steps where the same problem in w (Hessian I + C Phi^T L Phi) needs tens.

Q = U U^T + R, where U U^T is the Nystroem approximation of Q from k landmark rows S,
K(X, X_S) K(X_S, X_S)^-1 K(X_S, X), and R the part the landmarks miss. By default S and U come
from randomly pivoted Cholesky (:func:`rpcholesky`: U = F, the partial Cholesky factor);
``select="uniform"`` draws S uniformly (seeded) and forms U = C_S V_k diag(s_k)^-1/2 from
W = K(X_S, X_S) = V diag(s) V^T over the eigenvalues above max(s) k eps64 (as in
:class:`~streamrank.features.maps.Nystroem`). R is PSD and is replaced by its diagonal (Jacobi), so

    M ~ Q:  M = D + U U^T,         D = diag(R) + ridge,
    M ~ H:  M = D + U A U^T,       A = I + C U^T L U,   D = diag(R) + ridge + C diag(L) diag(R)^2,

since H = Q + C Q L Q ~ U (I + C U^T L U) U^T + R + C R L R, and R L R's diagonal keeps
R_ii L_ii R_ii of its terms. ``ridge`` is the jitter Q' carries; diag(L) (one sweep,
:func:`streamrank._native.pairkernels.hess_diag`) and U^T L U (one wide sweep and a k x l x k product)
are taken at the accepted point's active set, once per accepted TRON iteration.

Why a diagonal and not one number: rows the landmarks explain (a tight cluster of near-identical
documents, explained by one pivot) have R_ii ~ 0, rows far from every landmark R_ii ~ K_ii. A
single sigma = mean(R_ii) makes M overweight the first kind by orders of magnitude, so the M-norm
trust region all but freezes those directions and TRON crawls; the loss's part of the diagonal
cuts CG steps where a long query makes L large (docs/design.md, "Measurements behind the code").

By Woodbury, with A = R_A R_A^T (Cholesky; R_A = I for M ~ Q), W = D^-1/2 U R_A and
B = I + W^T W = I + R_A^T (U^T D^-1 U) R_A (eigenvalues >= 1, so its Cholesky factor is well
conditioned from below whatever D's spread),

    M^-1 r = x - D^-1 U R_A B^-1 R_A^T U^T x,  x = D^-1 r,     u^T M v = (U^T u)^T A (U^T v) + u.D v,

each O(l k + k^2) per CG step; U^T D^-1 U costs one more k x l x k product per accepted point.
The subtraction cancels where D is small and A large: ``solve`` inverts ``mdot`` to about
eps64 max(A) max(U^T D^-1 U) relative (Q' carries a jitter of that size, and D >= the float32
rounding of diag(R) in any case). CG needs a fixed operator close to M^-1, not an exact one. U
is kept in float32 (M is then exactly D + U32 A U32^T, still symmetric positive definite, with
U32's products formed from the same numbers) and its products go through ``_qprod``'s
fixed-order float64 kernels on one thread (half the bytes of float64, no thread a busy core can
stall, and the same bits for any block layout of Q).
"""

import numpy as np
from scipy.linalg import cho_factor, cho_solve, solve_triangular

from streamrank._native import parallel
from streamrank._native import qprod as _qprod
from streamrank._native.blas import add_atb_upper, matmul_fixed, matmul_rows, mirror_upper, one_thread
from streamrank.errors import NumericError
from streamrank.features.kernels import PreparedKernel

# landmarks (columns of Q): "auto" = LANDMARKS_PER_ROOT sqrt(l) rounded to a multiple of
# LANDMARKS_STEP, within [LANDMARKS_MIN, LANDMARKS_MAX] and at most l. More landmarks cut CG steps
# (each one pass over Q, l^2 floats) and cost 2 l k^2 flops per TRON iteration (A) plus 4 l k
# bytes; sqrt(l) scaling keeps A's cost a few passes' worth. A function of l alone, so the model
# does not depend on the memory budget (docs/design.md, "Measurements behind the code").
DEFAULT_LANDMARKS = "auto"
LANDMARKS_PER_ROOT = 10
LANDMARKS_STEP = 1000
LANDMARKS_MIN = 500
LANDMARKS_MAX = 4000
# rows of U per chunk of the products A = I + C U^T L U and U^T D^-1 U (whole queries; the float64
# rows of U, L U and D^-1 U in the chunk are the temporaries, 24 bytes per row and landmark): about
# 1/A_CHUNKS of the rows, at least A_CHUNK_BYTES and at most A_CHUNK_MAX bytes for the three
# (a_chunk_bytes). Each chunk's product is added to a k x k float64 sum (32 MB at k = 2,000), which
# a chunk of few rows reads and writes for little arithmetic, hence chunks of many rows
# (docs/design.md, "Measurements behind the code"). The chunks are fixed by l, k and these
# constants alone, never by the budget (the model does not depend on it); the memory plan counts
# a_chunk_bytes(l, k).
A_CHUNK_BYTES = 8 << 20
A_CHUNK_MAX = 64 << 20
A_CHUNKS = 32


def a_chunk_bytes(l, k):
    """Bytes of the float64 temporaries of one chunk of :meth:`NystroemPreconditioner.at_point`'s
    products for l rows and k landmarks (the comment above A_CHUNK_BYTES); 0 without landmarks."""
    if not k or not l:
        return 0
    return min(24 * l * k, max(A_CHUNK_BYTES, min(A_CHUNK_MAX, 24 * k * -(-l // A_CHUNKS))))
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


# rounds in a row that may accept no pivot before the pivots found so far are kept: a round
# accepts candidate t with probability H_tt / d_t, about 1 unless d has drifted from the residual
# by rounding, so many idle rounds mean what is left of Q is rounding, not rank
RPC_IDLE_ROUNDS = 100


def rpcholesky(Xn, k, *, kernel, gamma, degree=3, coef0=1.0, seed=0, block=RPC_BLOCK, trace_tol=0.0):
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
    ``trace_tol``: stop (after a whole block) once the residual's trace is at most this fraction
    of Q's: the rest of Q is too small to matter to the preconditioner (0: k pivots).
    """
    Xn = np.asarray(Xn, np.float64)
    l = Xn.shape[0]
    k = min(int(k), l)
    rng = np.random.default_rng([int(seed), 4])
    d = kernel_diagonal(Xn, kernel, gamma, degree, coef0).astype(np.float64)
    floor = RPC_FLOOR * float(d.max())
    F = np.zeros((l, k))
    S = []
    idle = 0  # rounds in a row that accepted no pivot
    trace0 = float(d.sum())
    while len(S) < k and idle < RPC_IDLE_ROUNDS:
        d[d <= floor] = 0.0  # explained: never drawn again
        total = d.sum()
        if total <= 0.0 or total <= trace_tol * trace0:
            break
        cand = rng.choice(l, size=block, p=d / total)
        j = len(S)
        H = PreparedKernel(Xn[cand], kernel, gamma, degree, coef0)(Xn[cand]) - matmul_rows(F[cand, :j], F[cand, :j].T)
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
            idle += 1
            continue
        idle = 0
        P = cand[acc]
        # residual columns
        G = PreparedKernel(Xn[P], kernel, gamma, degree, coef0)(Xn) - matmul_rows(F[:, :j], F[P, :j].T)
        with one_thread():  # b x b and l x b x b: small; one thread keeps their bits
            L = np.linalg.cholesky(0.5 * (G[P] + G[P].T))
            F[:, j:j + len(P)] = solve_triangular(L, G.T, lower=True).T
        S.extend(int(p) for p in P)
        d -= np.einsum("ij,ij->i", F[:, j:j + len(P)], F[:, j:j + len(P)])
        d[P] = 0.0
        np.maximum(d, 0.0, out=d)  # rounding may leave -eps where Q is explained
    return np.asarray(S, np.int64), F[:, :len(S)]


class NystroemPreconditioner:
    """M = D + U U^T ~ Q for TRON's ``precondition`` hook (``solve``, ``mdot``); ``at_point``
    gives M ~ H with the loss's part (module docstring)."""

    def __init__(self, Xn, *, kernel, gamma, degree=3, coef0=1.0, landmarks=DEFAULT_LANDMARKS, seed=0,
                 loss_term=True, select="rpcholesky", ridge=0.0, diagonal="rows"):
        self.loss_term = bool(loss_term)  # at_point: M ~ H rather than M ~ Q
        if diagonal not in ("rows", "mean"):
            raise ValueError(f"diagonal must be rows or mean; got {diagonal!r}")
        # "mean": D = mean(diag(R)) + ridge for every row and no loss term in D (the single sigma
        # of the module's docstring, for the comparison in tools/bench_exact_kernel.py --clustered)
        self.diagonal = diagonal
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
            with one_thread():
                s, V = np.linalg.eigh(CS[S])
            keep = s > s.max() * m * np.finfo(np.float64).eps
            U = matmul_fixed(CS, V[:, keep] / np.sqrt(s[keep]))
            top = float(s.max())
            del CS
        else:
            raise ValueError(f"select must be rpcholesky or uniform; got {select!r}")
        U32 = U.astype(np.float32)
        del U
        # diag(R) = diag(Q) - rowsums(U32^2) from U32's own numbers, in row chunks (no float64
        # copy); R is PSD, so a negative value is rounding
        resid = kernel_diagonal(Xn, kernel, gamma, degree, coef0).astype(np.float64)
        for a, b, Uc in _row_chunks(U32):
            resid[a:b] -= np.einsum("ij,ij->i", Uc, Uc)
        self._resid = np.maximum(resid, 0.0)
        # D's floor: diag(R) is known only to the rounding of U32's row sums (about eps32 of the
        # largest diagonal entry), and D^-1 in the Woodbury form amplifies rounding by 1/min(D)
        self._floor = float(np.finfo(np.float32).eps) * top
        U32.flags.writeable = False  # the read-only specialisation the objective uses
        self.U = U32
        self.rank = U32.shape[1]
        self.landmarks = np.asarray(S)
        self.set_ridge(ridge)

    def set_ridge(self, ridge):
        """D = diag(R) + ``ridge``, the jitter Q' carries (known once Q is built), which also keeps
        D^-1 in the Woodbury form from amplifying rounding where the landmarks explain Q. M ~ Q
        itself (one k x l x k product and a k x k Cholesky) is factored when first used: a
        training with the loss term uses only :meth:`at_point`'s M. Returns self."""
        self.ridge = float(ridge)
        r = self._resid if self.diagonal == "rows" else np.full_like(self._resid, self._resid.mean())
        self._D = np.maximum(r + self.ridge, self._floor)
        self._mq = None
        return self

    @property
    def _m(self):
        if self._mq is None:
            G = np.zeros((self.rank, self.rank))
            for a, b, Uc in _row_chunks(self.U):
                Uc /= np.sqrt(self._D[a:b, None])
                add_atb_upper(G, Uc, Uc)  # W^T W, W = D^-1/2 U
            self._mq = _DiagLowRank(self.U, self._D, None, mirror_upper(G))
        return self._mq

    @property
    def diag(self):
        """D of M ~ Q."""
        return self._D

    @property
    def nbytes(self):
        """Bytes held, M ~ Q's factor counted whether made yet or not."""
        return self.U.nbytes + self._resid.nbytes + self._D.nbytes + 8 * self.rank * self.rank

    def solve(self, r):
        """M^-1 r."""
        return self._m.solve(r)

    def mdot(self, u, v):
        """u^T M v."""
        return self._m.mdot(u, v)

    def at_point(self, C, rank, query_ptr, cost, mu, states):
        """M = D + U A U^T, A = I + C U^T L U, D = diag(R) + ridge + C diag(L) diag(R)^2, with L
        at the active set ``states`` (the accepted point's state arrays (pairkernels.state_arrays) over all
        rows): the module docstring. Without ``loss_term``, M ~ Q itself (self), whatever the point.

        U^T L U, diag(L) and U^T D^-1 U sum over chunks of whole queries fixed by ``query_ptr``
        alone, so M is the same for any block layout of Q."""
        if not self.loss_term:
            return self
        from streamrank._native import pairkernels as pk
        from streamrank.objectives.linear_precond import query_groups
        U, k = self.U, self.U.shape[1]
        l = U.shape[0]
        if getattr(self, "_last", None) is not None:
            # the last point's factors (3 k x k) go before this point's are made: TRON replaces
            # its preconditioner with this one and never uses the old one again
            self._last.release()
            self._last = None
        A, G = np.zeros((k, k)), np.zeros((k, k))
        D = np.empty(l)
        bounds = query_groups(query_ptr, l, max(1, a_chunk_bytes(l, k) // (24 * max(k, 1))))
        # the chunk's temporaries (its rows of U, L U and D^-1/2 U in float64) are made once and
        # reused, so that their pages are not mapped and faulted in again for every chunk
        # (docs/design.md, "Measurements behind the code"). The block products add into A and G
        # through 256 x 256 temporaries (add_atb_upper)
        most = max((int(query_ptr[b] - query_ptr[a]) for a, b in zip(bounds[:-1], bounds[1:])), default=0)
        Ub, LUb, Wb = np.empty((most, k)), np.empty((most, k)), np.empty((most, k))
        for qa, qb in zip(bounds[:-1], bounds[1:]):
            r0, r1 = int(query_ptr[qa]), int(query_ptr[qb])
            local = np.ascontiguousarray(query_ptr[qa:qb + 1] - r0)
            st = pk.PairState.of(states, r0, r1, query_ptr=local)
            Uc = Ub[:r1 - r0]
            Uc[...] = U[r0:r1]  # float32 -> float64, exact
            rc = self._resid[r0:r1]
            # the residual's Jacobi part: R_ii (1 + C L_ii R_ii), plus the ridge
            if self.diagonal == "rows":
                Dc = rc + self.ridge + C * pk.hess_diag(rank[r0:r1], local, cost, mu[qa:qb], st) * rc * rc
            else:
                Dc = np.full(r1 - r0, self._resid.mean() + self.ridge)
            D[r0:r1] = np.maximum(Dc, self._floor)
            LU = pk.hess_prod(Uc, rank[r0:r1], local, cost, mu[qa:qb], st, out=LUb[:r1 - r0])
            # A and G are symmetric: only their block upper triangles are summed (half the flops
            # of whole products), each block one product on one BLAS thread and the blocks on
            # parallel threads, so their bits do not depend on the thread count (OpenBLAS on two
            # threads rounds a k x r x k product otherwise than on one)
            add_atb_upper(A, Uc, LU)
            W = np.divide(Uc, np.sqrt(D[r0:r1, None]), out=Wb[:r1 - r0])  # G += W^T W, W = D^-1/2 U
            add_atb_upper(G, W, W)
        mirror_upper(A)  # exactly symmetric (in place: no k x k temporaries)
        mirror_upper(G)
        A *= C
        A[np.diag_indices_from(A)] += 1.0
        try:
            self._last = _DiagLowRank(U, D, A, G)
        except np.linalg.LinAlgError:
            # I + C U^T L U is positive definite in exact arithmetic; float64 loses it only when
            # C L's scale swamps the identity: a C that overflows the solver's arithmetic
            err = NumericError(f"the preconditioner M = D + U (I + C U^T L U) U^T is not positive definite in "
                               f"float64 at C={C:g}")
            err.quantity, err.where = "preconditioner", "start"
            raise err from None
        return self._last


def _active_rows(Uc, LU):
    """(Uc, LU) without the rows where LU is zero (rows in no active pair, where L's row and
    column are zero), the others moved up in place: U^T L U sums over them alone, and at the
    larger C a fifth to two fifths of the rows are in no active pair. A run of kept rows moves
    up by ``shift`` rows in slices of at most ``shift`` rows, so no slice overlaps its source and
    numpy makes no temporary."""
    keep = np.flatnonzero(LU.any(axis=1))
    n = keep.size
    if n == LU.shape[0]:
        return Uc, LU
    starts = np.flatnonzero(np.diff(keep, prepend=-2) != 1).tolist()  # runs of consecutive kept rows
    for i, j in zip(starts, starts[1:] + [n]):
        shift = int(keep[i]) - i
        for d in range(i, j, max(shift, 1)) if shift else ():
            e = min(j, d + shift)
            Uc[d:e] = Uc[d + shift:e + shift]
            LU[d:e] = LU[d + shift:e + shift]
    return Uc[:n], LU[:n]


def _row_chunks(U32):
    """(a, b, float64 rows a:b of U32) in chunks of at most A_CHUNK_BYTES."""
    step = max(1, A_CHUNK_BYTES // (8 * max(U32.shape[1], 1)))
    for a in range(0, U32.shape[0], step):
        yield a, min(a + step, U32.shape[0]), U32[a:a + step].astype(np.float64)


class _DiagLowRank:
    """M = D + U A U^T (A = I when None) from G = U^T D^-1 U: solve and mdot (module docstring)."""

    def __init__(self, U, D, A, G):
        self.U, self.D, self.A = U, D, A
        # G (symmetric, the caller's own) is used in place. The k x k factorisations run on one
        # BLAS thread and the products in fixed column blocks (_native.blas): the same bits for
        # any thread count
        if A is None:
            self._ra = None
            B = G
        else:
            with one_thread():
                self._ra = np.linalg.cholesky(A)  # A = R_A R_A^T, A >= I
            B = matmul_fixed(self._ra.T, G)
            del G
            B = matmul_fixed(B, self._ra)
            B += B.T
            B *= 0.5
        B[np.diag_indices_from(B)] += 1.0
        with one_thread():
            self._chol = cho_factor(B, lower=True, overwrite_a=True)

    def release(self):
        """Drop the k x k factors (the owner has made the next point's); using this after is an error."""
        self.A = self._ra = self._chol = None
        self.released = True

    @property
    def nbytes(self):
        return self.D.nbytes + self._chol[0].nbytes + (0 if self.A is None else self.A.nbytes + self._ra.nbytes)

    def _ut(self, r):
        """U^T r."""
        if getattr(self, "released", False):
            raise RuntimeError("a preconditioner of an earlier point was used after the next point's was made")
        out = np.zeros(self.U.shape[1])
        _qprod.add_cols(self.U, np.ascontiguousarray(r, np.float64), out)
        return out

    def solve(self, r):
        """M^-1 r = x - D^-1 U R_A B^-1 R_A^T U^T x, x = D^-1 r."""
        with parallel.limit(1), one_thread():
            x = r / self.D
            t = self._ut(x)
            if self._ra is not None:
                t = self._ra.T @ t
            t = cho_solve(self._chol, t)
            if self._ra is not None:
                t = self._ra @ t
            Ut = np.empty(self.U.shape[0])
            _qprod.rows_dot_wide(self.U, t, Ut)
        return x - Ut / self.D

    def mdot(self, u, v):
        """u^T M v = (U^T u)^T A (U^T v) + u.D v."""
        with parallel.limit(1), one_thread():
            x = self._ut(u)
            y = x if v is u else self._ut(v)
            xay = float(x @ (y if self.A is None else self.A @ y))
        return xay + float(u @ (self.D * v))



# the RKHS preconditioner's landmarks stop once the residual's trace is this fraction of Q's
# (rpcholesky's trace_tol): on MQ2008 Fold1 about 30, 60 and 300 landmarks at gamma 2^-11, 2^-9
# and 2^-7 in place of 1,000, with the same CG steps give or take a few and a tenth of the
# per-iteration cost of A = I + C U^T L U
RKHS_TRACE_TOL = 1e-4
# rows of Q'[:, S] per chunk while RKHSPreconditioner builds U (float64 temporaries: two chunks of
# rows x landmarks); fixed, so U's bits depend on l and the landmarks alone
RKHS_BUILD_ROWS = 1024


class RKHSPreconditioner:
    """The Nystroem block of TRON's CG in the RKHS norm (:class:`~streamrank.solvers.tron.RKHSMetric`).

    With Q' = Phi Phi^T (the objective's Q' itself: float32(K - c) + c 1 1^T + jitter I), the
    problem in w = Phi^T beta has the Hessian H_w = I + C Phi^T L Phi, bounded below by I whatever
    Q's spectrum. V = Phi^T E_S Lq^-T, Lq Lq^T = Q'_SS, is an orthonormal basis of the landmark
    rows' span in w, U = Phi V = Q'[:, S] Lq^-T (l x k, kept in float32), and on span(V) H_w is
    exactly A = I + C U^T L U (at the accepted point's active set). The preconditioner is
    M_w = (I - V V^T) + V A V^T: exact on the landmarks' span, the identity (H_w's lower bound)
    on the rest, so

        M_w^-1 r_w = r_w - V (I - A^-1) V^T r_w,   V^T r_w = Lq^-1 r_S   (r = Q' rho, r_w = Phi^T rho),

    whose beta representation is z = rho - E_S Lq^-T (I - A^-1) Lq^-1 r_S: two k x k triangular
    solves and a Cholesky solve per CG step (no product with U), and per accepted point one
    k x l x k product for U^T L U and a k x k Cholesky (at_point). ``landmarks``: the rows S
    (randomly pivoted Cholesky's, :func:`rpcholesky`)."""

    def __init__(self, Xn, landmarks, *, kernel, gamma, degree=3, coef0=1.0, shift=0.0, jitter=0.0):
        Xn = np.asarray(Xn, np.float64)
        S = np.asarray(landmarks, np.int64)
        l, k = Xn.shape[0], len(S)
        self.landmarks, self.rank = S, k
        prep = PreparedKernel(Xn[S], kernel, gamma, degree, coef0)

        def qcols(a, b):
            """Q'[a:b, S] as the blocks of Q' hold it: float32(K - shift) + shift, + jitter at S."""
            Kc = prep(Xn[a:b], row0=a)
            Kc -= shift
            Qc = Kc.astype(np.float32).astype(np.float64)
            Qc += shift
            inside = (S >= a) & (S < b)
            Qc[S[inside] - a, np.flatnonzero(inside)] += jitter
            return Qc

        QSS = np.empty((k, k))
        for a in range(0, l, RKHS_BUILD_ROWS):  # Q'_SS from the same chunks (the same bits as U's rows)
            b = min(a + RKHS_BUILD_ROWS, l)
            inside = np.flatnonzero((S >= a) & (S < b))
            if inside.size:
                QSS[inside] = qcols(a, b)[S[inside] - a]
        QSS = 0.5 * (QSS + QSS.T)
        with one_thread():
            self.Lq = np.linalg.cholesky(QSS)
        U = np.empty((l, k), np.float32)
        for a in range(0, l, RKHS_BUILD_ROWS):
            b = min(a + RKHS_BUILD_ROWS, l)
            with one_thread():
                U[a:b] = solve_triangular(self.Lq, qcols(a, b).T, lower=True).T
        U.flags.writeable = False
        self.U = U
        self._ca = None

    @property
    def nbytes(self):
        return self.U.nbytes + 2 * 8 * self.rank * self.rank

    def at_point(self, C, rank, query_ptr, cost, mu, states):
        """A = I + C U^T L U at the active set ``states`` (summed over chunks of whole queries
        fixed by ``query_ptr``, as :meth:`NystroemPreconditioner.at_point`), factored. Returns self."""
        from streamrank._native import pairkernels as pk
        U, A = self.U, self._work(query_ptr)
        Ub, LUb = self._chunks
        bounds = self._bounds
        for qa, qb in zip(bounds[:-1], bounds[1:]):
            r0, r1 = int(query_ptr[qa]), int(query_ptr[qb])
            local = np.ascontiguousarray(query_ptr[qa:qb + 1] - r0)
            st = pk.PairState.of(states, r0, r1, query_ptr=local)
            Uc = Ub[:r1 - r0]
            Uc[...] = U[r0:r1]
            LU = pk.hess_prod(Uc, rank[r0:r1], local, cost, mu[qa:qb], st, out=LUb[:r1 - r0])
            add_atb_upper(A, *_active_rows(Uc, LU))
        mirror_upper(A)
        A *= C
        A[np.diag_indices_from(A)] += 1.0
        try:
            with one_thread():
                self._ca = cho_factor(A, lower=True, overwrite_a=True)
        except np.linalg.LinAlgError:
            err = NumericError(f"the preconditioner's I + C U^T L U is not positive definite in float64 at C={C:g}")
            err.quantity, err.where = "preconditioner", "start"
            raise err from None
        return self

    def _work(self, query_ptr):
        """A zeroed k x k float64 sum for at_point (``_A``), the chunks' bounds (``_bounds``) and
        their float64 row buffers (``_chunks``), made at the first point and kept: fresh ones are
        mapped and faulted in again at every point (docs/design.md, "Measurements behind the
        code"). The memory plan counts them (memory_plan._precond_bytes: the k x k matrices
        and a_chunk_bytes). The factor of A is scipy's own copy, so A is free for the next point."""
        from streamrank.objectives.linear_precond import query_groups
        U, k = self.U, self.rank
        l = U.shape[0]
        self._ca = None
        if getattr(self, "_bounds", None) is None or not np.array_equal(self._qp, query_ptr):
            self._qp = np.array(query_ptr)
            self._bounds = query_groups(query_ptr, l, max(1, a_chunk_bytes(l, k) // (24 * max(k, 1))))
            b = self._bounds
            most = max((int(query_ptr[j] - query_ptr[i]) for i, j in zip(b[:-1], b[1:])), default=0)
            self._chunks = (np.empty((most, k)), np.empty((most, k)))
            self._A = np.zeros((k, k))
        else:
            self._A.fill(0.0)
        return self._A

    def apply(self, rho, r):
        """z = rho - E_S Lq^-T (I - A^-1) Lq^-1 r_S: the beta representation of M_w^-1 r_w."""
        with one_thread():
            y = solve_triangular(self.Lq, r[self.landmarks], lower=True)
            y -= cho_solve(self._ca, y)
            y = solve_triangular(self.Lq, y, lower=True, trans="T")
        z = np.array(rho, np.float64)
        z[self.landmarks] -= y
        return z
