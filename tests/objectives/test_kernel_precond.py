"""The exact kernel path's preconditioner: randomly pivoted Cholesky and M ~ H (kernel_precond)."""

import numpy as np
import pytest

from dense_oracle import explicit_pairs, nystroem_precond_dense
from streamrank._native import pairkernels as pk
from streamrank.objectives.kernel_precond import NystroemPreconditioner, auto_landmarks, rpcholesky
from streamrank.features.kernels import kernel_matrix

GAMMA = 0.05


@pytest.mark.parametrize("k", [1, 17, 60])
def test_rpcholesky_is_the_nystroem_approximation_of_its_pivots(rows, k):
    X = rows[0]
    S, F = rpcholesky(X, k, kernel="rbf", gamma=GAMMA, seed=5)
    assert F.shape == (len(X), k) and len(set(S.tolist())) == k
    K = kernel_matrix(X, kernel="rbf", gamma=GAMMA)
    nys = K[:, S] @ np.linalg.solve(K[np.ix_(S, S)], K[S, :])
    np.testing.assert_allclose(F @ F.T, nys, atol=1e-8)
    S2, F2 = rpcholesky(X, k, kernel="rbf", gamma=GAMMA, seed=5)
    assert np.array_equal(S, S2) and np.array_equal(F, F2)  # the seed fixes every draw


def test_rpcholesky_of_every_row_reproduces_the_kernel_and_leaves_no_residual(rows):
    X = rows[0][:40]
    K = kernel_matrix(X, kernel="poly", gamma=GAMMA, degree=2, coef0=1.0)
    S, F = rpcholesky(X, 200, kernel="poly", gamma=GAMMA, degree=2, coef0=1.0)
    # rank of a degree-2 polynomial kernel in d features is at most (d+1)(d+2)/2, here above 40
    assert len(S) <= 40
    np.testing.assert_allclose(F @ F.T, K, atol=1e-7 * np.abs(K).max())


def test_rpcholesky_residual_falls_with_more_pivots(rows):
    X = rows[0]
    traces = [len(X) - np.einsum("ij,ij->", F, F)
              for F in (rpcholesky(X, k, kernel="rbf", gamma=GAMMA)[1] for k in (5, 20, 80))]
    assert traces[0] > traces[1] > traces[2] >= 0


def dense_hessian(K, y, qp, z, C):
    """H = K + C K L K at scores z, L = 2 A_act^T diag(c) A_act (paper 004 (B.3)), explicit pairs."""
    A, c = explicit_pairs(y, qp)
    A = A.toarray()
    act = (1.0 - A @ z) > 0
    L = 2.0 * A[act].T @ (c[act, None] * A[act])
    return K + C * K @ L @ K


@pytest.mark.parametrize("select", ["rpcholesky", "uniform"])
def test_at_point_with_every_row_as_landmark_is_the_hessian(rows, select):
    X, y, qp = rows
    X, y, qp = X[:qp[2]], y[:qp[2]], qp[:3]
    l, C = len(y), 0.8
    K = kernel_matrix(X, kernel="rbf", gamma=GAMMA)
    P = NystroemPreconditioner(X, kernel="rbf", gamma=GAMMA, landmarks=l, select=select)
    levels = np.unique(y)
    rank = np.searchsorted(levels, y).astype(np.int32)
    cost, mu = pk.pair_cost(np.ones((len(levels),) * 2)), np.ones(len(qp) - 1)
    z = np.random.default_rng(0).standard_normal(l)
    _, _, st = pk.loss_grad(z, rank, qp, cost, mu)
    M = P.at_point(C, rank, qp, cost, mu, st.arrays)
    eye = np.eye(l)
    Mdense = np.array([[M.mdot(eye[i], eye[j]) for j in range(l)] for i in range(l)])
    H = dense_hessian(K, y, qp, z, C)
    # M = D + U A U^T with U U^T = K up to U's float32 rounding, and D ~ that rounding
    assert P.diag.max() < 1e-5
    np.testing.assert_allclose(Mdense, H, atol=1e-4 * np.abs(H).max())
    # without the loss term, M ~ K
    B = np.array([[P.mdot(eye[i], eye[j]) for j in range(l)] for i in range(l)])
    np.testing.assert_allclose(B, K, atol=1e-5)


@pytest.mark.parametrize("ridge", [0.0, 1e-6])
def test_at_point_with_few_landmarks_is_its_formula(rows, ridge):
    """M = D + U A U^T with D = diag(R) + ridge + C diag(L) diag(R)^2 and A = I + C U^T L U,
    R = K - U U^T, built densely from explicit pairs; and M ~ Q = diag(R) + ridge + U U^T."""
    X, y, qp = rows
    X, y, qp = X[:qp[3]], y[:qp[3]], qp[:4]
    l, C = len(y), 2.5
    K = kernel_matrix(X, kernel="rbf", gamma=GAMMA)
    P = NystroemPreconditioner(X, kernel="rbf", gamma=GAMMA, landmarks=12, ridge=ridge)
    U = P.U.astype(np.float64)
    r = np.diag(K - U @ U.T)
    levels = np.unique(y)
    rank = np.searchsorted(levels, y).astype(np.int32)
    cost, mu = pk.pair_cost(np.ones((len(levels),) * 2)), np.ones(len(qp) - 1)
    z = np.random.default_rng(4).standard_normal(l)
    _, _, st = pk.loss_grad(z, rank, qp, cost, mu)
    eye = np.eye(l)
    want = nystroem_precond_dense(K, U, P.diag.min(), y, qp, z, C, ridge)
    M = P.at_point(C, rank, qp, cost, mu, st.arrays)
    Mdense = np.array([[M.mdot(eye[i], eye[j]) for j in range(l)] for i in range(l)])
    np.testing.assert_allclose(Mdense, want, rtol=1e-7, atol=1e-9 * np.abs(want).max())
    B = np.array([[P.mdot(eye[i], eye[j]) for j in range(l)] for i in range(l)])
    np.testing.assert_allclose(B, np.diag(np.maximum(r + ridge, P.diag.min())) + U @ U.T, rtol=1e-7, atol=1e-12)
    assert np.mean(r > 1e-3) > 0.8  # few landmarks: the diagonal matters here


@pytest.mark.parametrize("loss", [False, True])
def test_solve_inverts_mdot(rows, loss):
    """To 1e-6 relative with D >= 1e-6 (a kernel cache's jitter is of that size). Woodbury's
    cancellation costs digits as max(A) / min(D) grows (kernel_precond's docstring); CG needs a
    fixed operator close to M^-1, not an exact one."""
    X, y, qp = rows
    l = len(y)
    P = NystroemPreconditioner(X, kernel="rbf", gamma=GAMMA, landmarks=25, ridge=1e-6)
    if loss:
        levels = np.unique(y)
        rank = np.searchsorted(levels, y).astype(np.int32)
        cost, mu = pk.pair_cost(np.ones((len(levels),) * 2)), np.ones(len(qp) - 1)
        _, _, st = pk.loss_grad(np.random.default_rng(1).standard_normal(l), rank, qp, cost, mu)
        P = P.at_point(3.0, rank, qp, cost, mu, st.arrays)
    rng = np.random.default_rng(2)
    r = rng.standard_normal(l)
    x = P.solve(r)
    eye = np.eye(l)
    Mx = np.array([P.mdot(x, eye[i]) for i in range(l)])
    np.testing.assert_allclose(Mx, r, rtol=1e-6, atol=1e-6 * np.abs(r).max())
    u, v = rng.standard_normal(l), rng.standard_normal(l)
    assert P.mdot(u, v) == pytest.approx(P.mdot(v, u), rel=1e-12)  # symmetric
    assert P.mdot(u, u) > 0                                        # positive definite


def test_auto_landmarks_scale_with_the_root_of_the_rows():
    assert auto_landmarks(9630) == 1000       # MQ2008 Fold1
    assert auto_landmarks(42158) == 2000      # generated mq2007
    assert auto_landmarks(300) == 300         # never more than the rows
    assert auto_landmarks(1000) == 500        # at least 500
    assert auto_landmarks(10 ** 6) == 4000    # at most 4,000


def test_memory_plan_names_the_preconditioner_when_it_does_not_fit():
    from streamrank.errors import ParameterError
    from streamrank.training.memory_plan import exact_kernel_plan as memory_plan
    with pytest.raises(ParameterError, match=r"memory_budget 2.0 GB is too small.*4000 landmarks.*precondition=off"):
        memory_plan(200000, 46, 2e9, landmarks=4000, resident=2e8)
    with pytest.raises(ParameterError) as err:  # the rows themselves: no hint about landmarks
        memory_plan(200000, 46, 2e7, landmarks=0, resident=0)
    assert "landmarks" not in str(err.value)
    qblock, tier = memory_plan(200000, 46, 2e9, landmarks=1000, resident=2e8)
    assert tier > 0 and qblock >= 4 * 200000


def test_rpcholesky_stops_when_every_row_is_explained(rows):
    """Five rows repeated with 1e-6 perturbations: after one pivot per cluster every residual is
    below the floor (at most ~8e-12) while their sum over 400 rows is above it (~1.4e-9); the
    draws must stop rather than land on explained rows forever (an alarm fails a hang)."""
    import signal

    def hang(*_):
        raise TimeoutError("rpcholesky kept drawing explained rows")

    X = np.repeat(rows[0][:5], 80, axis=0)
    X = X + 1e-6 * np.random.default_rng(0).standard_normal(X.shape)
    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(30)
    try:
        S, F = rpcholesky(X, 50, kernel="rbf", gamma=GAMMA)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert 5 <= len(S) < 50
    K = kernel_matrix(X, kernel="rbf", gamma=GAMMA)
    np.testing.assert_allclose(F @ F.T, K, atol=1e-9)
