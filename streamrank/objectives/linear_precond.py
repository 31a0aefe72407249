"""A dense preconditioner for TRON's CG: the generalised Hessian estimated on a sample of queries.

    M = I + C (n / n_S) sum_{q in S} Phi_q^T L_q Phi_q

is H = I + C Phi^T L Phi (paper 004 (B.3); L = A^T D A at the accepted point, block diagonal by
query) with the sum over all queries replaced by the first queries of the data, up to
``sample_rows`` rows, scaled to all n rows. Preconditioned CG then works on M^-1/2 H M^-1/2,
whose eigenvalues cluster near 1 when the sample represents the data: CG needs a few steps per
Newton iteration where plain CG needs tens (``tools/bench_linear.py --precond`` compares them).

The sample is fixed by the query index alone and each query's product Phi_q^T (L_q Phi_q) is its
own BLAS call, summed in query order: M is bit-identical for any block size or memory budget, so
the solver's trajectory is too. Rebuilt at every accepted point (one partial pass over the first
blocks plus sample_rows x d^2 flops); worth it when d is small against n (linear RankSVM).
"""

import numpy as np

from streamrank._native.blas import one_thread

# Rows of the first queries sampled for M (at least one whole query): enough that M's
# eigenvalues track H's on LETOR-like data, small enough that building M costs well under a pass;
# fewer for wide Phi, so the sample (Phi_S and L Phi_S in float64) stays within SAMPLE_BYTES
SAMPLE_ROWS = 1 << 14
SAMPLE_BYTES = 64 << 20
# rows of whole queries per BLAS product: M's temporaries (two group buffers, Phi and L Phi of a
# group's part in a block, all float64) stay near 4 x 8 x GROUP_ROWS x m bytes
GROUP_ROWS = 2048
GROUP_BYTES = 8 << 20
# widest Phi preconditioned by this M: at most LETOR's 46 to 220 features, where building M
# costs about a pass and saves most CG steps; wider (mapped features) sketch_precond's
# Nystrom preconditioner costs less (tools/bench_linear.py --precond and tools/bench_grid.py
# compare them)
AUTO_WIDTH = 256


class DensePreconditioner:
    """``solve(r)`` = M^-1 r = L^-T (L^-1 r) with M = L L^T; ``mdot(u, v)`` = u^T M v.

    L^-1 is formed once (m <= AUTO_WIDTH, a few milliseconds) so that each CG step costs two
    m x m products and nothing here needs scipy.linalg, whose import costs more than a small
    linear solve (docs/design.md, "Measurements behind the code"). The applied operator L^-T L^-1
    is symmetric positive definite by construction, which is all preconditioned CG asks of it;
    its rounding (about cond(L) eps, against eps for triangular solves) only perturbs the
    preconditioner, never the Hessian.
    """

    def __init__(self, M):
        with one_thread():
            self.M, L = _cholesky(M)  # M itself, or shifted where float64 rounds it indefinite
            self._Linv = np.linalg.inv(L)

    def solve(self, r):
        with one_thread():
            return self._Linv.T @ (self._Linv @ r)

    def mdot(self, u, v):
        with one_thread():
            return float(u @ (self.M @ v))


# M = I + C Phi_S^T L_S Phi_S is positive definite in exact arithmetic, but on features of very
# different scales (1e30 beside 1e-20) float64 rounds the identity away and Cholesky fails. M only
# preconditions, so a shifted M + tau I serves as well: tau starts at JITTER_EPS d max(diag M)
# (the rounding of a Cholesky in float64: Higham, "Accuracy and Stability of Numerical Algorithms",
# thm. 10.7, d eps |M|) and grows by JITTER_GROWTH at most JITTER_TRIES times
JITTER_EPS = float(np.finfo(np.float64).eps)
JITTER_GROWTH = 100.0
JITTER_TRIES = 8


def _cholesky(M):
    """(M', L) with M' = L L^T: ``M`` itself, or ``M + tau I`` with the smallest tau of the
    schedule above that Cholesky takes, or the identity when no shift helps (a non-finite M: the
    solver reports its Hessian itself)."""
    d = M.shape[0]
    if np.isfinite(M).all():
        tau = 0.0
        for _ in range(JITTER_TRIES + 1):
            shifted = M if tau == 0 else M + tau * np.eye(d)
            try:
                return shifted, np.linalg.cholesky(shifted)
            except np.linalg.LinAlgError:
                tau = JITTER_GROWTH * tau or JITTER_EPS * d * max(float(np.max(np.abs(np.diag(M)))), 1.0)
    return np.eye(d), np.eye(d)


def sample_rows(m):
    """Rows sampled for an m-wide Phi: SAMPLE_ROWS, fewer when m is wide (a function of m only)."""
    return max(1, min(SAMPLE_ROWS, SAMPLE_BYTES // (16 * m)))


def group_rows(m):
    """Rows per group product for an m-wide Phi (a function of m only)."""
    return max(1, min(GROUP_ROWS, GROUP_BYTES // (8 * m)))


def query_groups(query_ptr, rows, per_group, max_queries=None):
    """Bounds (query indices into ``query_ptr``, which starts at 0) of the groups of the sample:
    the leading queries up to ``rows`` rows (at least one), cut into groups of whole queries of
    at most ``per_group`` rows (at least one query each) and at most ``max_queries`` queries."""
    n_q = len(query_ptr) - 1
    end = max(1, min(int(np.searchsorted(query_ptr, rows, side="right")) - 1, n_q))
    most = end if max_queries is None else max(1, int(max_queries))
    bounds = [0]
    while bounds[-1] < end:
        q = bounds[-1]
        k = int(np.searchsorted(query_ptr, query_ptr[q] + per_group, side="right")) - 1
        bounds.append(min(max(k, q + 1), q + most, end))
    return np.asarray(bounds, np.int64)


def temp_bytes(m):
    """Peak bytes of M's temporaries for an m-wide Phi (M, its factor, the group buffers)."""
    return 2 * 8 * m * m + 4 * 8 * group_rows(m) * m
