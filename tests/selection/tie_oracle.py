"""Oracles of GAS-E's importance with ties (``streamrank._native.feature_measures``):

- :func:`expected_measure`, the NumPy twin of the kernel: the same closed forms, written per tie
  group with NumPy (the tests check it against the brute force, and the kernel against both);
- :func:`brute_force`, the definition: the project's letor4 evaluator averaged over EVERY order of
  the tied documents (itertools.permutations of each tie group), each order a query of its own.
"""

import functools
import itertools
import math

import numpy as np

from streamrank.evaluation.metrics import evaluate

_LN2 = math.log(2.0)


def _groups(x):
    """(start, stop) of each tie group of x in decreasing order, and the rows of each group."""
    keys = np.unique(x)[::-1]
    out, s = [], 0
    for v in keys:
        rows = np.flatnonzero(x == v)
        out.append((s, s + rows.size, rows))
        s += rows.size
    return out


def expected_measure(x, y, kind, k=None):
    """E[measure] of ordering one query by decreasing x, ties in a uniformly random order; kind
    'map' (AP), 'ndcg' (NDCG@k) or 'p' (P@k), letor4 conventions."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    n = x.size
    groups = _groups(x)
    rel = y >= 1
    if kind == "map":
        total, above = 0.0, 0
        for s, e, rows in groups:
            m, r = e - s, int(rel[rows].sum())
            if r:
                j = np.arange(1, m + 1, dtype=np.float64)
                share = (r - 1) / (m - 1) if m > 1 else 0.0
                total += r / m * np.sum((above + 1 + (j - 1) * share) / (s + j))
            above += r
        return total / above if above else 0.0
    if kind == "p":
        hits = sum(rel[rows].sum() * max(0, min(e, k) - s) / (e - s) for s, e, rows in groups)
        return hits / k
    if k > n:
        return 0.0
    disc = np.array([1.0 if p < 2 else _LN2 / math.log(p + 1.0) for p in range(n)])
    mean_gain = np.empty(n)
    for s, e, rows in groups:
        mean_gain[s:e] = np.mean(np.exp2(y[rows]) - 1.0)
    best = np.sum((np.exp2(np.sort(y)[::-1]) - 1.0)[:k] * disc[:k])
    return float(np.sum(mean_gain[:k] * disc[:k]) / best) if best > 0 else 0.0


def orders(x):
    """Every order of the rows that sorts x decreasingly (each tie group permuted every way)."""
    parts = [list(itertools.permutations(rows.tolist())) for _, _, rows in _groups(np.asarray(x, np.float64))]
    for combo in itertools.product(*parts):
        yield [r for part in combo for r in part]


def brute_force(x, y, kind, k=None):
    """The mean of the letor4 evaluator's measure over every order of the tied documents."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    means = _means_over_orders(x.tobytes(), y.tobytes())
    return {"map": means["MAP"], "ndcg": means[f"NDCG@{k}"] if k else None, "p": means[f"P@{k}"] if k else None}[kind]


@functools.lru_cache(maxsize=64)
def _means_over_orders(xb, yb):
    """The evaluator's means over every order of the tied documents, at every k from 1 to n + 1
    (one evaluation a query, not one a k)."""
    x, y = np.frombuffer(xb), np.frombuffer(yb)
    all_orders = list(orders(x))
    n = y.size
    Y = np.concatenate([y[o] for o in all_orders])
    S = np.tile(np.arange(n, 0, -1, dtype=np.float64), len(all_orders))  # the order itself, no ties left
    ptr = np.arange(len(all_orders) + 1) * n
    return evaluate(Y, S, ptr, convention="letor4", ks=range(1, n + 2)).means
