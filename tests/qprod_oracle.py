"""NumPy twins of streamrank._native.qprod (tests only): the same summation orders, so the same bits."""

import numpy as np


def rows_dot(Q, v):
    """out[i] = sum_j Q[i, j] v[j] in eight lanes (lane k: columns j = k mod 8, increasing j),
    combined as ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))."""
    Q = np.asarray(Q, np.float64)
    n, m = Q.shape
    m8 = m - m % 8
    s = np.zeros((n, 8))
    for j in range(0, m8, 8):
        s += Q[:, j:j + 8] * v[j:j + 8]
    for j in range(m8, m):
        s[:, j - m8] += Q[:, j] * v[j]
    return ((s[:, 0] + s[:, 1]) + (s[:, 2] + s[:, 3])) + ((s[:, 4] + s[:, 5]) + (s[:, 6] + s[:, 7]))


def rows_dot_wide(Q, v, lanes=64):
    """The passes' order: ``lanes`` lanes (lane k: columns j = k mod lanes below the last multiple
    of lanes, increasing j; the tail continues lanes 0..), combined by halving s[k] += s[k + h]."""
    Q = np.asarray(Q, np.float64)
    n, m = Q.shape
    mw = m - m % lanes
    s = np.zeros((n, lanes))
    for j in range(0, mw, lanes):
        s += Q[:, j:j + lanes] * v[j:j + lanes]
    for j in range(mw, m):
        s[:, j - mw] += Q[:, j] * v[j]
    h = lanes // 2
    while h >= 1:
        s[:, :h] = s[:, :h] + s[:, h:2 * h]
        h //= 2
    return s[:, 0]


def add_cols(Q, t, acc):
    """acc + sum_i Q[i, :] t[i], one row at a time in increasing i."""
    Q = np.asarray(Q, np.float64)
    acc = np.array(acc, np.float64)
    for i in range(Q.shape[0]):
        acc += Q[i] * t[i]
    return acc
