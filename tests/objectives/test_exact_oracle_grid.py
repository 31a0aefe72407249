"""Exact kernel RankSVM solves the problem it states over the whole default range (issue 30, item 5).

The stated problem is (3.13) on Q' = float32(K - c) + c 1 1^T + jitter I (streamrank.cache.kernel_cache,
the comment above JITTER_FACTOR). The oracle: Q' formed densely in float64 from the stored blocks,
its smallest eigenvalue (Q' must be positive semi-definite: the jitter is a bound that holds for
every matrix), and the dense optimum (tests/dense_oracle.py), which TRON must reach to 1e-6
relative for gamma 2^-11 .. 2^-1 and C 2^-8 .. 2^4, on rows in [0, 1] with many exact duplicates
(query-level-normalised LETOR features: the coherent rounding errors that made d.Hd < 0) and on raw
rows of scales 10^-2 .. 10^4.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dense_oracle import dense_optimum
from streamrank._native import pairkernels as pk
from streamrank.cache.kernel_cache import KernelCache
from streamrank.objectives.kernel_objective import KernelObjective
from streamrank.objectives.kernel_precond import NystroemPreconditioner, auto_landmarks
from streamrank.solvers.tron import tron


def rows(kind, seed=0, n_queries=8, d=12):
    """(X, y, query_ptr): queries of 10 to 40 documents; ``unit``: query-level min-max normalised
    features in [0, 1] from a few levels each, so that many documents are exact duplicates; ``raw``:
    continuous features of scales 10^-2 .. 10^4."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(10, 41, n_queries)
    qp = np.concatenate([[0], np.cumsum(sizes)])
    l = int(qp[-1])
    if kind == "unit":
        X = rng.integers(0, 3, (l, d)).astype(np.float64)
        X[rng.random(l) < 0.4] = 0.0  # documents without any of the features: one shared row
        for a, b in zip(qp[:-1], qp[1:]):
            lo, hi = X[a:b].min(0), X[a:b].max(0)
            X[a:b] = (X[a:b] - lo) / np.where(hi > lo, hi - lo, 1.0)
    else:
        X = rng.standard_normal((l, d)) * 10.0 ** rng.uniform(-2, 4, d)
    y = np.minimum(2, (X[:, 0] + X[:, 1] > np.median(X[:, 0] + X[:, 1])) + (rng.random(l) < 0.3)).astype(np.float32)
    return X, y, qp


_MADE = {}


def stated_problem(kind, gamma):
    """(KernelCache, Q' float64 as the objective uses it, y, qp), made once per (kind, gamma)."""
    if (kind, gamma) not in _MADE:
        X, y, qp = rows(kind)
        kc = KernelCache(X, qp, kernel="rbf", gamma=gamma, key_material={"test": kind}, block_bytes=4 * len(y) * 60,
                         memory_bytes=1 << 30)
        kc.build()
        Q = np.vstack([Qk for _, _, _, Qk in kc]).astype(np.float64) + kc.shift
        Q[np.diag_indices_from(Q)] += kc.jitter
        _MADE[kind, gamma] = X, kc, Q, y, qp
    return _MADE[kind, gamma]


def solve(kind, gamma, C):
    """TRON with the preconditioner a training run makes ("auto" landmarks: every row here; with 60
    landmarks for 88 distinct rows, TRON at gamma 2^-1, C = 16 on ``unit`` rows ended at max_iter
    500, 6e-5 above the optimum, with 217 rejected steps)."""
    X, kc, Q, y, qp = stated_problem(kind, gamma)
    levels = np.unique(y)
    obj = KernelObjective(kc, np.searchsorted(levels, y), C=C, cost=pk.pair_cost(np.ones((len(levels),) * 2)),
                          mu=np.ones(len(qp) - 1))
    obj.set_preconditioner(NystroemPreconditioner(X, kernel="rbf", gamma=gamma, landmarks=auto_landmarks(len(y))).set_ridge(kc.jitter))
    curvatures = []
    hessp = obj.hessp

    def watched(v):
        hv = hessp(v)
        curvatures.append(float(v @ hv))
        return hv

    obj.hessp = watched
    state = tron(obj, np.zeros(len(y)), eps=1e-9, max_iter=500, precondition=True)
    return state, curvatures, Q, y, qp


@pytest.mark.parametrize("kind", ["unit", "raw"])
@pytest.mark.parametrize("gamma", [2.0 ** -11, 2.0 ** -9, 2.0 ** -5, 2.0 ** -1])
def test_the_stated_kernel_matrix_is_positive_semidefinite(kind, gamma):
    _, kc, Q, _, _ = stated_problem(kind, gamma)
    lam = np.linalg.eigvalsh(0.5 * (Q + Q.T))
    # what eigvalsh itself may get wrong: a few eps64 of the largest eigenvalue
    assert lam[0] >= -1e-13 * lam[-1], (lam[0], kc.jitter, kc.shift)


@settings(max_examples=10, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(["unit", "raw"]), gamma_exp=st.sampled_from([-11, -9, -7, -5, -3, -1]),
       c_exp=st.integers(-8, 4))
def test_tron_reaches_the_dense_optimum_of_the_stated_problem(kind, gamma_exp, c_exp):
    C = 2.0 ** c_exp
    state, curvatures, Q, y, qp = solve(kind, 2.0 ** gamma_exp, C)
    assert min(curvatures) > 0  # Q' is PSD: CG never meets d.Hd <= 0
    f_star = dense_optimum(Q, y, qp, C)
    assert abs(state.f - f_star) <= 1e-6 * f_star, (state.f, f_star, state.iteration, state.message)


@pytest.mark.parametrize("kind,gamma_exp,c_exp", [("unit", -11, 4), ("unit", -9, -8), ("unit", -1, 4),
                                                  ("raw", -11, 4), ("raw", -1, -8)])
def test_the_corners_of_the_range(kind, gamma_exp, c_exp):
    test_tron_reaches_the_dense_optimum_of_the_stated_problem.hypothesis.inner_test(kind, gamma_exp, c_exp)
