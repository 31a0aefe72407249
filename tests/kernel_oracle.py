"""Plain NumPy twins of ``streamrank.features.kernels`` (tests only).

``l1_distances`` adds |a_k - b_k| one feature at a time in increasing k, the order of the numba
kernel ``streamrank.features.kernels._l1_distances``, so the two agree bit for bit. The other kernels are
the textbook formulas, with the squared distance summed directly (not expanded as the library
does), so they agree to rounding only.
"""

import numpy as np


def l1_distances(A, B):
    A = np.asarray(A, np.float64)
    B = np.asarray(B, np.float64)
    out = np.zeros((A.shape[0], B.shape[0]))
    for k in range(A.shape[1]):
        out += np.abs(A[:, k, None] - B[None, :, k])
    return out


def sq_distances(A, B):
    A = np.asarray(A, np.float64)
    B = np.asarray(B, np.float64)
    return ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=-1)


def rbf(A, B, gamma):
    return np.exp(-gamma * sq_distances(A, B))


def laplacian(A, B, gamma):
    return np.exp(l1_distances(A, B) * -gamma)


def dots(A, B):
    A = np.asarray(A, np.float64)
    B = np.asarray(B, np.float64)
    return (A[:, None, :] * B[None, :, :]).sum(axis=-1)


def poly(A, B, gamma, degree, coef0):
    return (gamma * dots(A, B) + coef0) ** degree


def sigmoid(A, B, gamma, coef0):
    return np.tanh(gamma * dots(A, B) + coef0)


def linear(A, B):
    return dots(A, B)


def kernel(name, A, B, gamma=0.5, degree=3, coef0=1.0):
    if name == "rbf":
        return rbf(A, B, gamma)
    if name == "laplacian":
        return laplacian(A, B, gamma)
    if name == "poly":
        return poly(A, B, gamma, degree, coef0)
    if name == "sigmoid":
        return sigmoid(A, B, gamma, coef0)
    return linear(A, B)


def fake_blas(monkeypatch):
    """Replace np.matmul by one that rounds a row differently by the call's row count and the
    row's position in the call (as OpenBLAS's shape-dependent code paths may, in the last bits):
    rows stay independent of the block they arrive in only by the fixed tiles of
    ``streamrank.features.kernels``, not by luck of the BLAS."""
    real = np.matmul

    def matmul(A, B, out=None):
        C = real(A, B, out=out)
        k = (C.shape[0] + np.arange(C.shape[0])) % 7
        C *= (1.0 + 2.0 ** -40 * k)[:, None]
        return C

    monkeypatch.setattr(np, "matmul", matmul)


def rounding_bounds(Q32):
    """Twin of streamrank.cache.kernel_cache.rounding_bounds: per-row sum_j (spacing_ij / 2)^2 (added in
    increasing j) and max_ij spacing_ij / 2, with np.spacing of |Q32|."""
    h = np.spacing(np.abs(Q32)).astype(np.float64) / 2
    rows = np.zeros(Q32.shape[0])
    for j in range(Q32.shape[1]):
        rows += h[:, j] * h[:, j]
    return rows, float(h.max()) if h.size else 0.0
