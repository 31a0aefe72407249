"""Plain NumPy twins of streamrank._linalg's kernels (tests only)."""

import numpy as np


def rows_dot(Phi, w):
    return np.array([sum(float(a) * float(b) for a, b in zip(row, w)) for row in Phi])


def query_sums(Phi, v, query_ptr):
    return np.array([Phi[a:b].T.astype(np.float64) @ v[a:b] for a, b in zip(query_ptr[:-1], query_ptr[1:])])
