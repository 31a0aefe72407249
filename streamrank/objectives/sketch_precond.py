"""A randomized Nystrom preconditioner for TRON's CG on wide feature maps (Nystroem, RFF).

TRON's Hessian at any point of a path is

    H(C) = I + C G(w),    G(w) = Phi^T L(w) Phi

(paper 004 (B.3): L = A^T D A, block diagonal by query, D on the pairs active at w). On a map of
m ~ 10^3 columns G has a few hundred eigenvalues above 1/C, and plain CG needs about that many
steps per Newton iteration, more as C grows (MQ2008 Fold1, Nystroem m = 2000: 38 CG steps in
the first iteration at C = 1, 164 at C = 32). The dense sampled M of :mod:`linear_precond`
costs m^3/3 per build and a triangular solve per step, too much at this width. Here G is
replaced by a rank-k Nystrom approximation G ~ U diag(lam) U^T from one sketch Y = G Omega
(Frangella, Tropp and Udell, "Randomized Nystrom preconditioning", SIAM J. Matrix Anal. Appl.
44 (2023), Alg. 2.1), and CG runs with their preconditioner (eq. (5.3) with mu = 1 and
A = C G, whose Nystrom eigenvalues are C lam):

    P    = U diag((C lam + 1) / (C lam_k + 1)) U^T + (I - U U^T)
    P^-1 = U diag((C lam_k + 1) / (C lam + 1)) U^T + (I - U U^T)

Applying either costs 4 m k flops, nothing beside a pass. The eigenvalues of P^-1/2 H P^-1/2
that the sketch captures move to about C lam_k + 1; the rest are unchanged.

**One sketch per map, at w = 0.** G is sketched where every pair of different labels is active
(z = 0, margin 1: the quadratic region of both losses), not at the current point:

- L(w) <= L(0) for the squared hinge (a pair's term is either kept or dropped as w moves), so
  G(0) bounds every G(w) of the path from above and the preconditioned spectrum stays >= ~1;
- it depends on the data, the costs, the query weights and the seed alone, not on C, w or
  eta: one sketch serves every C of a warm-started path and every iteration, and a resumed
  run rebuilds the same bits (the checkpoint needs nothing more).

**The sketch pass** (one pass over the blocks): Y = (n / n_S) sum_g Phi_g^T L_g(0) (Phi_g Omega)
over groups g of whole sampled queries, each two BLAS-3 products (4 n_S m k flops in all).
Queries are sampled evenly by query index up to SKETCH_ROWS rows (all of them below), and the
groups are fixed by the query index inside each partition, so a group spanning two blocks is
gathered first: the products, and so the bits, are the same for any block size, memory budget,
thread count or executor.
"""

import logging
import time

import numpy as np

from streamrank._native import pairkernels as pk
from streamrank._native.blas import add_atb, matmul_fixed, one_thread
from streamrank.execution.executor import Pass
from streamrank.objectives.block_rows import block_phi as _phi
from streamrank.objectives.linear_precond import group_rows  # rows of whole queries per group product

log = logging.getLogger("streamrank.objectives.sketch_precond")

# k, the sketch's rank: CG then converges in about as many steps as G has eigenvalues above
# lam_k beyond the first k; the sketch's flops grow as k (docs/design.md, "Measurements behind
# the code")
SKETCH_RANK = 192
# columns of Omega per BLAS product: the products' bits depend on this width alone (see
# _native.blas.ATB_COLUMNS), and four blocks keep up to four threads busy
SKETCH_COLUMNS = 48
# rows of whole queries the sketch samples: 4 n_S m k flops (2.5e10 at m = 1000) bound its
# cost on large data, and 2^15 rows of LETOR queries are enough to find G's top eigenvectors
SKETCH_ROWS = 1 << 15
# independent stream of the run's seed for Omega (the map's landmarks use the seed itself)
SEED_STREAM = 0x5E7C


# a source of more rows than the sketch samples sketches at rank m / LARGE_RANK_SHARE when that is
# more: a CG step costs a pass over all n rows (2 n m flops and the rows' read), the sketch 4 n_S m k
# flops once, n_S <= SKETCH_ROWS (docs/design.md, "Measurements behind the code"). A function of
# the data's size, not of the budget: the same bits for any memory budget.
LARGE_RANK_SHARE = 4


def rank_for(m, n_rows=None):
    """The sketch's rank k for an m-wide Phi over ``n_rows`` rows (None: the largest, for the
    memory plan)."""
    large = n_rows is None or int(n_rows) > SKETCH_ROWS
    return min(max(SKETCH_RANK, int(m) // LARGE_RANK_SHARE) if large else SKETCH_RANK, int(m))


def temp_bytes(m):
    """Peak bytes of the sketch and its pass for an m-wide Phi: Omega, Y, U and the Nystrom
    temporaries (6 m k float64) and a group's rows with their products."""
    k, g = rank_for(m), group_rows(m)
    return 6 * 8 * m * k + 2 * 8 * g * m + 3 * 8 * g * k


def sampled_queries(n_queries, n_rows):
    """Which of a source's queries the sketch samples: query j when floor((j+1) f) > floor(j f)
    with f = min(1, SKETCH_ROWS / n_rows), evenly spread and fixed by the query index alone
    (every query when n_rows <= SKETCH_ROWS)."""
    j = np.arange(n_queries, dtype=np.float64)
    f = min(1.0, SKETCH_ROWS / max(int(n_rows), 1))
    return np.floor((j + 1) * f) > np.floor(j * f)


class HessianSketch:
    """U (m x k, orthonormal columns) and lam (k, decreasing): G ~ U diag(lam) U^T."""

    def __init__(self, U, lam):
        self.U, self.lam = U, lam

    def preconditioner(self, C):
        return NystromPreconditioner(self.U, C * self.lam)


class NystromPreconditioner:
    """TRON's ``solve(r)`` = P^-1 r and ``mdot(u, v)`` = u^T P v for P of eq. (5.3) with the
    Nystrom eigenvalues ``lam`` of C G (module docstring). Empty or zero lam: P = I."""

    def __init__(self, U, lam):
        self.U = U
        lam_k = float(lam[-1]) if lam.size else 0.0
        self._inv = (lam_k + 1.0) / (lam + 1.0) - 1.0   # P^-1 = I + U diag(_inv) U^T
        self._fwd = (lam + 1.0) / (lam_k + 1.0) - 1.0   # P = I + U diag(_fwd) U^T

    def _apply(self, d, v):
        with one_thread():  # 2 m k flops: one thread, so the bits do not depend on the thread count
            return v + self.U @ (d * (self.U.T @ v))

    def solve(self, r):
        return self._apply(self._inv, r)

    def mdot(self, u, v):
        return float(u @ self._apply(self._fwd, v))


def nystrom(Y, Omega):
    """(U, lam) of the Nystrom approximation Y (Omega^T Y)^+ Y^T of the psd G with Y = G Omega
    (Frangella et al., Alg. 2.1: a shift nu keeps Omega^T Y_nu positive definite in floating
    point and is taken off the eigenvalues again)."""
    if not np.any(Y):  # no pairs sampled: no preconditioning
        return Y[:, :0].copy(), np.zeros(0)
    # here, not at import: a linear run needs no scipy; before one_thread(), which then limits
    # scipy's own OpenBLAS too
    import scipy.linalg
    with one_thread():
        nu = np.sqrt(Y.shape[0]) * np.spacing(np.linalg.norm(Y))
        Yn = Y + nu * Omega
        core = Omega.T @ Yn
        core = 0.5 * (core + core.T)
        try:
            Lc = np.linalg.cholesky(core)
        except np.linalg.LinAlgError:
            # G's sketch lost definiteness to rounding (G ~ 0): no preconditioning
            return Y[:, :0].copy(), np.zeros(0)
        B = scipy.linalg.solve_triangular(Lc, Yn.T, lower=True, check_finite=False).T
        U, s, _ = np.linalg.svd(B, full_matrices=False)
        return U, np.maximum(0.0, s * s - nu)


def sketch_hessian(source, m, cost, mu, executor, *, seed, projection=None):
    """The :class:`HessianSketch` of G(0) = Phi^T L(0) Phi over ``source`` (one pass). With
    ``projection`` P the source's rows are K with Phi = K P: the pass sketches K^T L K with P Omega
    and Y = P^T (K^T L K P Omega), the same G Omega."""
    t = time.perf_counter()
    k = rank_for(m, source.n_rows)
    with one_thread():
        rng = np.random.default_rng([int(seed), SEED_STREAM])
        Omega = np.linalg.qr(rng.standard_normal((m, k)))[0]
        Omega_rows = Omega if projection is None else np.ascontiguousarray(projection @ Omega)
    qptr = source.dataset.query_ptr
    parts = np.asarray(source.stream.partitions, np.int64)
    gid, last, n_s = _groups(qptr, parts, source.n_rows, group_rows(m))
    carry, _ = executor.run(_SketchPass(Omega_rows, pk.pair_cost(cost, eta=0.0), mu, gid, last, int(parts[0])),
                            source)
    Y = carry["Y"]
    if projection is not None:
        with one_thread():
            Y = projection.T @ Y
    if n_s:
        Y *= source.n_rows / n_s
    U, lam = nystrom(Y, Omega)
    log.info("preconditioner: Nystrom sketch of the Hessian, rank %d of %d, from %d of %d rows; eigenvalues %.3g "
             "to %.3g; %.2fs", lam.size, m, n_s, source.n_rows, lam[0] if lam.size else 0.0,
             lam[-1] if lam.size else 0.0, time.perf_counter() - t)
    return HessianSketch(U, lam)


def _groups(query_ptr, partitions, n_rows, per_group):
    """Group of each query of the source (index from ``partitions[0]``; -1: not sampled), the
    last query of each group, and the sampled rows. Groups collect sampled queries up to
    ``per_group`` rows (at least one query) and end at partition boundaries, so no group spans
    two partitions (:func:`sampled_queries` chooses the queries)."""
    qp = np.asarray(query_ptr, np.int64)
    q0 = int(partitions[0])
    sizes = np.diff(qp[q0:int(partitions[-1]) + 1])
    sampled = sampled_queries(sizes.size, n_rows)
    gid = np.full(sampled.size, -1, np.int64)
    last = []
    for a, b in zip(partitions[:-1].tolist(), partitions[1:].tolist()):
        rows = 0
        for j in np.flatnonzero(sampled[a - q0:b - q0]) + (a - q0):
            if rows and rows + sizes[j] > per_group:  # a full group ends before this query
                rows = 0
            if rows == 0:
                last.append(j)
            gid[j] = len(last) - 1
            last[-1] = j
            rows += sizes[j]
    return gid, np.asarray(last, np.int64), int(sizes[sampled].sum())


class _SketchPass(Pass):
    """Y = sum_g Phi_g^T L_g(0) Phi_g Omega (module docstring): a group's rows are gathered
    (across blocks when it spans two) and multiplied once it is complete. Groups end inside
    partitions, so a partition's carry holds no partial group when it is merged."""

    def __init__(self, Omega, cost, mu, gid, last, q_first):
        self.Omega, self.cost, self.mu, self.gid, self.last, self.q_first = Omega, cost, mu, gid, last, q_first

    def start(self):
        return {"Y": np.zeros(self.Omega.shape), "parts": []}

    def step(self, c, b):
        gid = self.gid[b.q0 - self.q_first:b.q1 - self.q_first]
        q = 0
        nq = b.q1 - b.q0
        while q < nq:
            g = gid[q]
            e = q + 1
            while e < nq and gid[e] == g:
                e += 1
            if g >= 0:
                r0, r1 = int(b.qptr[q]), int(b.qptr[e])
                c["parts"].append((_phi(b, r0, r1, (q, e)), b.rank[r0:r1].copy(), np.diff(b.qptr[q:e + 1]),
                                   self.mu[b.q0 + q:b.q0 + e]))
                if self.last[g] == b.q0 + e - 1 - self.q_first:  # the group is complete
                    self._flush(c)
            q = e

    def _flush(self, c):
        parts, c["parts"] = c["parts"], []
        Phi = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
        rank = np.concatenate([p[1] for p in parts])
        qptr = np.concatenate([[0], np.cumsum(np.concatenate([p[2] for p in parts]))]).astype(np.int64)
        mu = np.concatenate([p[3] for p in parts])
        P = matmul_fixed(Phi, self.Omega, SKETCH_COLUMNS)
        # L(0): the active sets at z = 0, where every pair of different labels is active
        _, _, st = pk.loss_grad(np.zeros(rank.size), rank, qptr, self.cost, mu)
        T = pk.hess_prod(P, rank, qptr, self.cost, mu, st)
        add_atb(c["Y"], Phi, T, SKETCH_COLUMNS)

    def merge(self, total, c):
        total["Y"] += c["Y"]
        return total


class SharedSketch:
    """The sketch of one map's source, built by the first objective that asks (one pass) and then
    shared by the others (every C of a path); ``seed`` fixes Omega."""

    def __init__(self, seed):
        self.seed, self.value = seed, None

    def get(self, obj):
        if self.value is None:
            self.value = sketch_hessian(obj.source, obj.n_features, obj.cost, obj.mu, obj.executor, seed=self.seed,
                                        projection=obj.projection)
        return self.value
