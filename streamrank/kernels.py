"""Kernel functions K(A, B) -> float64 ``(len(A), len(B))`` and their parameter checks.

- ``rbf``       exp(-gamma ||x - y||^2)
- ``laplacian`` exp(-gamma ||x - y||_1)
- ``poly``      (gamma x.y + coef0)^degree
- ``sigmoid``   tanh(gamma x.y + coef0)   (not positive semi-definite)
- ``linear``    x.y

Everything is computed in float64 whatever the input dtype (float32 -> float64 is exact).
Inner products go through BLAS; the squared distance of ``rbf`` is ||x||^2 + ||y||^2 - 2 x.y,
clipped at 0 (rounding can make it slightly negative for near-identical rows). The L1 distances
of ``laplacian`` come from a numba kernel (plain NumPy twin in ``tests/kernel_oracle.py``).

Row independence. Every entry point computes a row of K(A, B) from that row of A alone, to the
last bit: BLAS (OpenBLAS here) computes a row of a product with a kernel that depends on how many
rows the call has (an odd remainder goes through a different micro-kernel with a different
summation order), so products are always called with a row count that is a multiple of
:data:`ROW_ALIGN` (A is padded with zero rows when needed). The tests check that the rows of
K(A, B) equal the rows of K(A[i:j], B) bit for bit, so a feature map gives a row the same
features whichever block it arrives in.
"""

import math
import numbers

import numba
import numpy as np
from numba import prange

from .errors import ParameterError

KERNELS = ("rbf", "laplacian", "poly", "sigmoid", "linear")
# Kernels whose Gram matrices are positive semi-definite for every valid parameter (poly only
# with coef0 >= 0, see is_psd). sigmoid is not PSD for any useful gamma/coef0: a method that
# needs PSD (exact kernel RankSVM) refuses it.
PSD = frozenset({"rbf", "laplacian", "poly", "linear"})
# k(x, y) = k(x - y): random Fourier features exist for these (Bochner's theorem).
SHIFT_INVARIANT = frozenset({"rbf", "laplacian"})
# Kernels with a gamma / degree / coef0 parameter.
USES_GAMMA = frozenset({"rbf", "laplacian", "poly", "sigmoid"})
USES_DEGREE = frozenset({"poly"})
USES_COEF0 = frozenset({"poly", "sigmoid"})

# BLAS calls always get a row count that is a multiple of this (see the module docstring).
ROW_ALIGN = 16


def default_gamma(n_features):
    """The DESIGN default gamma = 1 / n_features."""
    return 1.0 / max(int(n_features), 1)


def is_psd(kernel, coef0=1.0):
    """Whether ``kernel`` with these parameters always gives PSD Gram matrices."""
    if kernel == "poly":
        return coef0 >= 0
    return kernel in PSD


def check_kernel(kernel, gamma=None, degree=3, coef0=1.0, n_features=None):
    """Validate kernel parameters; returns ``(kernel, gamma, degree, coef0)`` with gamma resolved
    (None -> 1 / n_features) as a float and degree as an int. Raises ParameterError naming the
    parameter, the value and the fix."""
    if kernel not in KERNELS:
        raise ParameterError(f"kernel must be one of {', '.join(KERNELS)}; got {kernel!r}. Pass --kernel rbf")
    if gamma is None:
        if n_features is None:
            raise ParameterError("gamma=None (1 / n_features) needs the number of features; pass --gamma 0.03125")
        gamma = default_gamma(n_features)
    fix_gamma = default_gamma(n_features) if n_features else 0.03125
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise ParameterError(f"gamma must be a number > 0; got {gamma!r}. Pass --gamma {fix_gamma:g}")
    gamma = float(gamma)
    if not (math.isfinite(gamma) and gamma > 0):
        raise ParameterError(f"gamma must be > 0; got {gamma:g}. Pass --gamma {fix_gamma:g}")
    if isinstance(degree, bool) or not isinstance(degree, numbers.Real) or degree != int(degree) or degree < 1:
        raise ParameterError(f"degree must be an integer >= 1; got {degree!r}. Pass --degree 3")
    degree = int(degree)
    if isinstance(coef0, bool) or not isinstance(coef0, numbers.Real) or not math.isfinite(coef0):
        raise ParameterError(f"coef0 must be a finite number; got {coef0!r}. Pass --coef0 1")
    return kernel, gamma, degree, float(coef0)


# -- numba: L1 distances ------------------------------------------------------------------------
@numba.njit(cache=True, nogil=True, parallel=True)
def _l1_distances(A, BT, out):
    """out[i, j] = sum_k |A[i, k] - BT[k, j]|, k in increasing order (one add per k, no
    reassociation: the twin in tests/kernel_oracle.py gives the same bits). The j loop is the
    inner one, so it vectorises with independent accumulators per j."""
    na, d = A.shape
    nb = BT.shape[1]
    for i in prange(na):
        for j in range(nb):
            out[i, j] = 0.0
        for k in range(d):
            a = A[i, k]
            for j in range(nb):
                out[i, j] += abs(a - BT[k, j])


# -- the prepared right-hand side ---------------------------------------------------------------
def _as_rows(A, name):
    A = np.asarray(A)
    if A.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of rows; got shape {A.shape}")
    if A.dtype.kind not in "fiub":
        raise ValueError(f"{name} must be numeric; got dtype {A.dtype}")
    return A


def _row_norms(A):
    """||a_i||^2 per row, each from its own row only (einsum sums a row in a fixed order)."""
    return np.einsum("ij,ij->i", A, A)


class PreparedKernel:
    """K(., B) for a fixed B (landmarks), with what depends on B computed once.

    :meth:`into` writes K(A, B) for an aligned float64 A; :meth:`__call__` takes any A.
    Parameters are taken as given (validate with :func:`check_kernel` first).
    """

    def __init__(self, B, kernel, gamma, degree=3, coef0=1.0):
        B = _as_rows(B, "B")
        self.kernel, self.gamma, self.degree, self.coef0 = kernel, float(gamma), int(degree), float(coef0)
        self.n_features = B.shape[1]
        self.n_cols = B.shape[0]
        B = np.asarray(B, np.float64)
        if kernel == "rbf":
            # -2 B^T: scaling by a power of two is exact, so the product is exactly -2 A B^T
            self._BT = np.ascontiguousarray(-2.0 * B.T)
            self._bn = _row_norms(B)
        else:
            self._BT = np.ascontiguousarray(B.T)

    def into(self, A, out):
        """K(A, B) into ``out`` (float64 C-contiguous ``(len(A), n_cols)``); A float64
        C-contiguous with a multiple of ROW_ALIGN rows."""
        assert A.shape[0] % ROW_ALIGN == 0 and A.dtype == np.float64 and A.flags.c_contiguous
        if self.kernel == "laplacian":
            _l1_distances(A, self._BT, out)
            out *= -self.gamma
            np.exp(out, out=out)
            return out
        np.matmul(A, self._BT, out=out)
        if self.kernel == "rbf":
            out += _row_norms(A)[:, None]
            out += self._bn[None, :]
            np.maximum(out, 0.0, out=out)
            out *= -self.gamma
            np.exp(out, out=out)
        elif self.kernel == "poly":
            out *= self.gamma
            out += self.coef0
            if self.degree != 1:
                np.power(out, self.degree, out=out)
        elif self.kernel == "sigmoid":
            out *= self.gamma
            out += self.coef0
            np.tanh(out, out=out)
        return out

    def __call__(self, A, out=None):
        """K(A, B) as float64 ``(len(A), n_cols)`` for any A (padded to aligned rows inside)."""
        A = _as_rows(A, "A")
        if A.shape[1] != self.n_features:
            raise ValueError(f"A has {A.shape[1]} features, B has {self.n_features}")
        n = A.shape[0]
        n_pad = -(-n // ROW_ALIGN) * ROW_ALIGN
        if n_pad == n and A.dtype == np.float64 and A.flags.c_contiguous:
            Ap = A
        else:
            Ap = np.zeros((n_pad, A.shape[1]))
            Ap[:n] = A
        if out is not None and n_pad == n and out.dtype == np.float64 and out.flags.c_contiguous:
            return self.into(Ap, out)
        full = self.into(Ap, np.empty((n_pad, self.n_cols)))
        if out is None:
            return full[:n] if n_pad != n else full
        out[...] = full[:n]
        return out


# -- direct kernels (no validation) -------------------------------------------------------------
def rbf(A, B, gamma):
    """exp(-gamma ||a_i - b_j||^2)."""
    return PreparedKernel(B, "rbf", gamma)(A)


def laplacian(A, B, gamma):
    """exp(-gamma ||a_i - b_j||_1)."""
    return PreparedKernel(B, "laplacian", gamma)(A)


def poly(A, B, gamma, degree=3, coef0=1.0):
    """(gamma a_i.b_j + coef0)^degree."""
    return PreparedKernel(B, "poly", gamma, degree, coef0)(A)


def sigmoid(A, B, gamma, coef0=1.0):
    """tanh(gamma a_i.b_j + coef0); not PSD."""
    return PreparedKernel(B, "sigmoid", gamma, 3, coef0)(A)


def linear(A, B):
    """a_i.b_j."""
    return PreparedKernel(B, "linear", 1.0)(A)


def kernel_matrix(A, B=None, kernel="rbf", gamma=None, degree=3, coef0=1.0):
    """K(A, B) as float64 ``(len(A), len(B))`` (B defaults to A), parameters validated.

    ``gamma=None`` means 1 / n_features. ``degree`` is used by poly, ``coef0`` by poly and
    sigmoid; the others ignore them (they are still checked).
    """
    A = _as_rows(A, "A")
    B = A if B is None else _as_rows(B, "B")
    if A.shape[1] != B.shape[1]:
        raise ValueError(f"A and B must have the same number of features; got {A.shape[1]} and {B.shape[1]}")
    kernel, gamma, degree, coef0 = check_kernel(kernel, gamma, degree, coef0, n_features=A.shape[1])
    return PreparedKernel(B, kernel, gamma, degree, coef0)(A)
