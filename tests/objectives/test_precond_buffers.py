"""Buffers kept between preconditioner updates change no bit (oracle: fresh objects, plain products)."""

import numpy as np
import pytest

from streamrank._native import pairkernels as pk
from streamrank._native.blas import add_atb_upper, one_thread
from streamrank.objectives.kernel_precond import RKHSPreconditioner, _active_rows, rpcholesky

GAMMA = 0.05


@pytest.mark.parametrize("n, r", [(300, 40), (513, 700)])
def test_add_atb_upper_is_the_blocks_of_plain_products(n, r):
    rng = np.random.default_rng(n)
    A, B = rng.standard_normal((r, n)), rng.standard_normal((r, n))
    M0 = rng.standard_normal((n, n))
    M = add_atb_upper(M0.copy(), A, B)
    with one_thread():  # each block is one product on one BLAS thread
        for i0 in range(0, n, 256):
            for j0 in range(i0, n, 256):
                want = M0[i0:i0 + 256, j0:j0 + 256] + A[:, i0:i0 + 256].T @ B[:, j0:j0 + 256]
                assert np.array_equal(M[i0:i0 + 256, j0:j0 + 256], want)


def _problem(X, y, qp):
    """40 rpcholesky landmarks, the rows' ranks, unit pair costs and query weights."""
    S, _ = rpcholesky(X, 40, kernel="rbf", gamma=GAMMA, seed=0)
    levels = np.unique(y)
    cost, mu = pk.pair_cost(np.ones((len(levels),) * 2)), np.ones(len(qp) - 1)
    return S, np.searchsorted(levels, y).astype(np.int32), cost, mu


def test_rkhs_at_point_with_kept_buffers_gives_a_fresh_objects_bits(rows):
    X, y, qp = rows
    S, rank, cost, mu = _problem(X, y, qp)
    kept = RKHSPreconditioner(X, S, kernel="rbf", gamma=GAMMA, shift=0.5, jitter=1e-6)
    rng = np.random.default_rng(5)
    for C in (0.5, 4.0, 4.0):
        _, _, st = pk.loss_grad(rng.standard_normal(len(y)), rank, qp, cost, mu)
        fresh = RKHSPreconditioner(X, S, kernel="rbf", gamma=GAMMA, shift=0.5, jitter=1e-6)
        kept.at_point(C, rank, qp, cost, mu, st.arrays)
        fresh.at_point(C, rank, qp, cost, mu, st.arrays)
        assert np.array_equal(kept._ca[0], fresh._ca[0])
        r = rng.standard_normal(len(y))
        assert np.array_equal(kept.apply(r, r), fresh.apply(r, r))


def test_active_rows_moves_the_kept_rows_up_in_place():
    rng = np.random.default_rng(0)
    for _ in range(200):
        r, k = int(rng.integers(1, 60)), int(rng.integers(1, 5))
        U, L = rng.standard_normal((r, k)), rng.standard_normal((r, k))
        zero = rng.random(r) < rng.random()
        L[zero] = 0.0
        Uk, Lk = _active_rows(U.copy(), L.copy())
        assert np.array_equal(Uk, U[~zero]) and np.array_equal(Lk, L[~zero])


def test_u_l_u_over_the_active_rows_is_the_sum_over_every_row(rows):
    """Oracle: U^T L U summed over every row of each chunk (the rows in no active pair add zeros)."""
    X, y, qp = rows
    S, rank, cost, mu = _problem(X, y, qp)
    P = RKHSPreconditioner(X, S, kernel="rbf", gamma=GAMMA, shift=0.5, jitter=1e-6)
    z = 3.0 * np.random.default_rng(2).standard_normal(len(y))  # spread scores: many rows in no active pair
    _, _, st = pk.loss_grad(z, rank, qp, cost, mu)
    U = P.U.astype(np.float64)
    LU = pk.hess_prod(U, rank, qp, cost, mu, st)
    assert 0 < np.mean(~LU.any(axis=1)) < 1
    C = 2.0
    want = np.eye(P.rank) + C * (U.T @ LU)
    P.at_point(C, rank, qp, cost, mu, st.arrays)
    L = np.tril(P._ca[0])
    np.testing.assert_allclose(L @ L.T, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())
