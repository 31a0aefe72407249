"""The NumPy twins of streamrank._native.finite (used by tests only)."""

import numpy as np


def first_non_finite(bits):
    """Index of the first of the float32 ``bits`` that is NaN or +-inf, or -1."""
    bad = np.flatnonzero(~np.isfinite(np.asarray(bits, np.uint32).view(np.float32)))
    return int(bad[0]) if bad.size else -1


def count_non_finite(bits):
    return int((~np.isfinite(np.asarray(bits, np.uint32).view(np.float32))).sum())


def first_bad_row(X, y):
    """(row, feature or None for the label) of the first row holding a non-finite value, the label
    named when it is one of them (the reader's rule); None when all are finite."""
    rows_x = np.flatnonzero(~np.isfinite(X).all(axis=1)) if X.shape[1] else np.zeros(0, np.int64)
    rows_y = np.flatnonzero(~np.isfinite(y))
    cands = [int(a[0]) for a in (rows_x, rows_y) if a.size]
    if not cands:
        return None
    r = min(cands)
    if rows_y.size and rows_y[0] == r:
        return r, None
    return r, int(np.flatnonzero(~np.isfinite(X[r]))[0])
