"""Block-independent products: equal their twins, and the same bits for any block split."""

import numpy as np

import linalg_oracle as oracle
from streamrank import _linalg as la


def test_kernels_equal_numpy_twins():
    rng = np.random.default_rng(0)
    for d in (1, 3, 4, 7, 46):
        Phi = rng.standard_normal((50, d))
        w, v = rng.standard_normal(d), rng.standard_normal(50)
        qp = np.array([0, 1, 10, 10, 30, 50])
        np.testing.assert_allclose(la.matvec(Phi, w), oracle.rows_dot(Phi, w), rtol=1e-13)
        acc = np.zeros(d)
        la.rmatvec_add(acc, Phi, v, qp)
        np.testing.assert_allclose(acc, oracle.query_sums(Phi, v, qp).sum(axis=0), rtol=1e-12, atol=1e-14)


def test_same_bits_for_any_block_split():
    rng = np.random.default_rng(1)
    Phi = rng.standard_normal((300, 13)) * 10 ** rng.uniform(-8, 8, (300, 13))
    w, v = rng.standard_normal(13), rng.standard_normal(300)
    qp = np.unique(np.concatenate(([0, 300], rng.integers(0, 300, 40))))
    whole = np.zeros(13)
    la.rmatvec_add(whole, Phi, v, qp)
    z_whole = la.matvec(Phi, w)
    for cut in (1, 5, len(qp) - 2):
        a = qp[cut]
        parts = np.zeros(13)
        la.rmatvec_add(parts, Phi[:a], v[:a], qp[:cut + 1])
        la.rmatvec_add(parts, Phi[a:], v[a:], qp[cut:] - a)
        assert np.array_equal(parts, whole)
        assert np.array_equal(np.concatenate([la.matvec(Phi[:a], w), la.matvec(Phi[a:], w)]), z_whole)
