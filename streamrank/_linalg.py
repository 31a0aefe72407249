"""Block products whose rounding does not depend on how rows are split into blocks.

BLAS sums a product like Phi^T v in an order that depends on the matrix shape (and its thread
split), so the same data cut into other blocks gives other last bits; TRON's conjugate
gradients amplify 1e-16 into 1e-10 differences within a few iterations on ill-conditioned
problems (measured on MQ2008: block layouts ended 2.6e-5 apart in w at eps = 1e-8). These
kernels fix every summation order by the data alone:

- ``rows_dot``: z_i = sum_k Phi_ik w_k per row, in four interleaved partial sums (k mod 4)
  combined in a fixed order: the same bits whatever block the row is in;
- ``query_partials``: P[q, k] = sum_{i in query q} Phi_ik v_i, rows in order;
- ``add_rows_in_order``: acc += P[q] for q in order, so sum over blocks of the queries' partials
  is one global sequence in query order.

No fastmath: LLVM may not reassociate the sums. Plain NumPy twins live in
``tests/linalg_oracle.py``.
"""

import numba
import numpy as np
from numba import prange


@numba.njit(cache=True, nogil=True, parallel=True)
def rows_dot(Phi, w, out):
    n, d = Phi.shape
    d4 = d - d % 4
    for i in prange(n):
        a0 = 0.0
        a1 = 0.0
        a2 = 0.0
        a3 = 0.0
        for k in range(0, d4, 4):
            a0 += Phi[i, k] * w[k]
            a1 += Phi[i, k + 1] * w[k + 1]
            a2 += Phi[i, k + 2] * w[k + 2]
            a3 += Phi[i, k + 3] * w[k + 3]
        for k in range(d4, d):
            a0 += Phi[i, k] * w[k]
        out[i] = (a0 + a1) + (a2 + a3)


@numba.njit(cache=True, nogil=True, parallel=True)
def query_partials(Phi, v, query_ptr, out):
    d = Phi.shape[1]
    for q in prange(query_ptr.shape[0] - 1):
        for k in range(d):
            out[q, k] = 0.0
        for i in range(query_ptr[q], query_ptr[q + 1]):
            vi = v[i]
            for k in range(d):
                out[q, k] += Phi[i, k] * vi


@numba.njit(cache=True, nogil=True)
def add_rows_in_order(acc, partials):
    for q in range(partials.shape[0]):
        for k in range(acc.shape[0]):
            acc[k] += partials[q, k]


@numba.njit(cache=True, nogil=True)
def sum_in_order(acc, values):
    for q in range(values.shape[0]):
        acc += values[q]
    return acc


def matvec(Phi, w):
    """Phi @ w with block-independent rounding."""
    out = np.empty(Phi.shape[0])
    rows_dot(Phi, np.ascontiguousarray(w, np.float64), out)
    return out


def rmatvec_add(acc, Phi, v, query_ptr):
    """acc += Phi^T v, summed query by query in query order (block-independent rounding)."""
    partials = np.empty((len(query_ptr) - 1, Phi.shape[1]))
    query_partials(Phi, np.ascontiguousarray(v, np.float64), query_ptr, partials)
    add_rows_in_order(acc, partials)
