"""Synthetic LETOR-like learning-to-rank data, generated as a stream.

The generator writes LETOR text (``label qid:Q 1:v 2:v ... #docid = synth-<row>``) or a streamrank
HDF5 dataset, query by query in row batches, so it can produce tens of gigabytes with memory in the
low hundreds of megabytes. Output is a pure function of ``(preset, scale, seed)``: every query draws
from its own random stream, so batch sizes and threads never change a byte.

Data model
----------
Query sizes
    Lognormal draws (``size_sigma``) clipped to ``[size_min, size_max]``; a common multiplier is
    found by bisection so that the floors add up to just below the preset's row count, and the
    remaining rows go one each to the queries with the largest fractional parts. Presets therefore
    pin the exact numbers of queries and rows (both multiplied by ``scale`` and rounded).
Features (``n_features`` columns, values in [0, 1] written with 6 decimals)
    A latent factor model gives correlated features: per document ``k = 8`` factors
    ``F ~ N(mu_q, 1)`` with a per-query mean ``mu_q``; column ``j`` is
    ``softsign01(a_j * (F @ A[:, j] + e_j * eps + o_qj) + b_j)`` with
    ``softsign01(t) = (1 + t / (1 + |t|)) / 2``, loadings ``A`` (each column loads on one or two
    factors), own noise ``eps`` (uniform with unit variance: cheaper to draw than a normal, and
    smoothed by the factors) and a per-query column offset ``o_qj ~ N(0, 0.5**2)``.
    Column kinds: a few constant-zero columns (like MQ2008's features 6-10 and 43), sparse
    columns (each value is 0 with a column-specific probability of 30-90 %), discrete columns
    (2 to 8 levels, many ties) and dense ones. Presets modelled on LETOR 4.0 also min-max
    normalise every column within each query, as LETOR's "QueryLevelNorm" files do (each
    non-constant column then holds an exact 0 and 1 in every query). The value written is
    ``m / 10**6`` with ``m = rint(x * 10**6)`` (round half to even); the integer ``m`` is the
    truth from which both the text and the float32 array are made.
Relevance (``n_labels`` grades 0 .. L-1)
    A nonlinear function of six dense observed columns ``s0..s5`` (values as written)::

        g = 1.2 * exp(-((s0 - .65)^2 + (s1 - .35)^2) / .08)   # rbf bump
          + 1.0 * s2 * s3                                      # interaction
          + 0.4 * sin(2 pi s4)                                 # periodic
          + 0.5 * s5                                           # linear part

    plus a per-query shift and per-document noise, normal with standard deviations
    ``query_shift`` and ``noise``. Grades are
    the number of thresholds below that value; the thresholds are quantiles, taken on a fixed
    calibration sample, chosen so that graded queries hit the preset's ``label_fractions``
    (skewed towards 0). Kernel models can therefore beat linear ones. A fraction
    ``all_zero_fraction`` of queries (chosen at random, exactly rounded) get grade 0 for every
    document (MQ2008: 28 %); the per-query shift leaves a few more without relevant documents.
Streams
    ``SeedSequence(seed, spawn_key=(tag, ...))`` with one tag per purpose: query sizes (0),
    column parameters (1), calibration (2), one stream per query (3, q), all-zero queries (4).
    Feature arithmetic is IEEE +, *, / in a fixed order (numba kernel), so the bytes do not
    depend on the CPU's SIMD width; the relevance uses numpy's exp/sin.

Text rows are ``<label> qid:<q+1> 1:<v> ... d:<v> #docid = synth-<row>`` with ``\\n`` line ends,
``row`` the 0-based row number; ``sparse=True`` omits zero values.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import time
from pathlib import Path

import numpy as np
from numba import njit

from streamrank._native import numba_cache
from streamrank._native.threads import background
from streamrank.errors import ParameterError
from streamrank.io.atomic import written

__all__ = [
    "Preset", "PRESETS", "resolve", "query_sizes", "all_zero_queries", "generate_batches", "iter_blocks",
    "write_text", "write_hdf5", "format_rows_py",
]

_MICRO = 1_000_000          # values are integers m with value = m / _MICRO
_N_LATENT = 8               # latent factors behind the correlated columns
_N_SIGNAL = 6               # columns the relevance depends on
_TAG_SIZES, _TAG_COLUMNS, _TAG_CALIB, _TAG_QUERY, _TAG_ALL_ZERO = 0, 1, 2, 3, 4
# Parts (train / valid / test) share the relevance model (column parameters, calibration) of a
# seed and draw their own queries: part k > 0 moves the sampling tags to 100 k + tag, and its
# query ids to k * 10^6 + q + 1. Part 0 is the data set as generated before parts existed.
PARTS = {"train": 0, "valid": 1, "test": 2}
_PART_QID_OFFSET = 1_000_000


def _part_index(part):
    k = PARTS.get(part, part)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ParameterError(f"part must be train, valid, test or an integer >= 0; got {part!r}. Use part=test")
    return int(k)


def _sample_tag(tag, part):
    return tag if part == 0 else 100 * part + tag
_TEXT_BUFFER_BYTES = 16 << 20   # text formatted per chunk of rows within this budget
_BATCH_VALUES = 1 << 22         # default rows per writer batch: about 4M values (16 MB of int32)
_CALIB_ROWS = 30_000


@dataclasses.dataclass(frozen=True)
class Preset:
    """Shape and statistics of a synthetic data set (counts are for ``scale=1``).

    Parameters
    ----------
    name : str
    n_queries, n_rows, n_features, n_labels : int
    label_fractions : tuple of float
        Target share of each grade among documents of queries that are not all-zero.
    all_zero_fraction : float
        Share of queries forced to grade 0 for every document.
    size_sigma : float
        Sigma of the lognormal query-size draw (skew of the size distribution).
    size_min, size_max : int
        Clip range of the query sizes.
    zero_columns : tuple of int
        1-based columns that are 0 everywhere.
    sparse_share, discrete_share : float
        Share of the remaining columns that are sparse / discrete.
    query_normalize : bool
        Min-max normalise every column within each query (LETOR 4.0 style).
    query_shift, noise : float
        Standard deviations of the per-query relevance shift and the per-document noise.
    """

    name: str
    n_queries: int
    n_rows: int
    n_features: int
    n_labels: int
    label_fractions: tuple
    all_zero_fraction: float
    size_sigma: float
    size_min: int
    size_max: int
    zero_columns: tuple = ()
    sparse_share: float = 0.3
    discrete_share: float = 0.15
    query_normalize: bool = False
    query_shift: float = 0.3
    noise: float = 0.15


PRESETS = {
    # MQ2007 Fold1 train: 1,017 queries, 42,158 rows, 46 features, grades 0-2, 246,015 pairs
    # (seed 0 gives 238,251; seeds 0-5 average 254,934).
    "mq2007": Preset("mq2007", 1_017, 42_158, 46, 3, (0.745, 0.205, 0.05), 0.17,
                     0.45, 6, 147, zero_columns=(6, 7, 8, 9, 10, 43), query_normalize=True,
                     query_shift=0.5),
    # MSLR-WEB30K: 18,919 queries, 2,270,296 rows, 136 features, grades 0-4.
    "mslr30k": Preset("mslr30k", 18_919, 2_270_296, 136, 5, (0.52, 0.32, 0.13, 0.02, 0.01), 0.03,
                      0.7, 5, 1251, zero_columns=(), sparse_share=0.35),
    # Istella LETOR: 33,018 queries, 10,454,629 rows, 220 features, grades 0-4.
    "istella": Preset("istella", 33_018, 10_454_629, 220, 5, (0.88, 0.05, 0.04, 0.02, 0.01), 0.02,
                      0.8, 5, 2000, zero_columns=(20, 53, 114, 160, 201), sparse_share=0.45),
    # tiny default for demos and tests
    "small": Preset("small", 60, 3_000, 20, 3, (0.65, 0.25, 0.10), 0.2,
                    0.5, 5, 150, zero_columns=(7, 13), query_normalize=True),
}


# ---------------------------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------------------------
def resolve(preset="small", scale=1.0):
    """Return ``(Preset, n_queries, n_rows)`` for a preset name (or Preset) at ``scale``."""
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise ParameterError(
                f"preset must be one of {', '.join(PRESETS)}; got {preset!r}. Use preset=small")
        preset = PRESETS[preset]
    elif not isinstance(preset, Preset):
        raise ParameterError(f"preset must be a name or a Preset; got {type(preset).__name__}")
    try:
        value = float(scale)
    except (TypeError, ValueError):
        value = float("nan")
    if not value > 0 or not np.isfinite(value):
        raise ParameterError(f"scale must be > 0; got {scale!r}. Use scale=0.5")
    scale = value
    n_queries = int(round(preset.n_queries * scale))
    n_rows = int(round(preset.n_rows * scale))
    if n_queries < 1:
        need = 0.5 / preset.n_queries
        raise ParameterError(
            f"scale={scale} leaves preset {preset.name!r} with no query; "
            f"use scale={need:.3g} or more")
    if not preset.size_min * n_queries <= n_rows <= preset.size_max * n_queries:
        raise ParameterError(
            f"preset {preset.name!r} at scale={scale}: {n_rows} rows do not fit {n_queries} queries of "
            f"{preset.size_min} to {preset.size_max} rows; use a larger scale")
    return preset, n_queries, n_rows


def _rng(seed, *key):
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ParameterError(f"seed must be an integer >= 0; got {seed!r}. Use seed=0")
    return int(seed)


def query_sizes(preset="small", *, scale=1.0, seed=0, part=0):
    """Rows per query (int64, length n_queries) summing exactly to the preset's row count."""
    p, nq, n = resolve(preset, scale)
    raw = _rng(_check_seed(seed), _sample_tag(_TAG_SIZES, _part_index(part))).lognormal(0.0, p.size_sigma, nq)
    lo, hi = p.size_min, p.size_max

    def total(c):
        return int(np.clip(np.floor(c * raw), lo, hi).sum())

    # f(c) = total(c) is nondecreasing: bisect for the largest c with f(c) <= n
    a, b = 0.0, 2.0 * hi / raw.min()
    for _ in range(200):
        c = 0.5 * (a + b)
        if total(c) <= n:
            a = c
        else:
            b = c
    sizes = np.clip(np.floor(a * raw), lo, hi).astype(np.int64)
    short = n - int(sizes.sum())
    if short:
        # one more row each for the queries closest to rounding up (stable, so deterministic)
        frac = np.where(sizes < hi, a * raw - np.floor(a * raw), -np.inf)
        order = np.argsort(-frac, kind="stable")[:short]
        sizes[order] += 1
    assert int(sizes.sum()) == n and sizes.min() >= lo and sizes.max() <= hi
    return sizes


# column kinds
_DENSE, _SPARSE, _DISCRETE, _ZERO = 0, 1, 2, 3


@dataclasses.dataclass
class _Model:
    """Column parameters and grade thresholds, fixed by (preset, seed). Arrays are per column."""

    preset: Preset
    loadings: np.ndarray      # (k, d) factor loadings
    noise_scale: np.ndarray   # (d,) weight of the column's own noise
    slope: np.ndarray         # (d,)
    bias: np.ndarray          # (d,)
    kind: np.ndarray          # (d,) int8: _DENSE, _SPARSE, _DISCRETE or _ZERO
    param: np.ndarray         # (d,) zero probability (sparse) or number of levels (discrete)
    slot: np.ndarray          # (d,) int64: column of the sparse uniform draws, -1 if not sparse
    signal: np.ndarray        # (6,) columns the relevance reads
    thresholds: np.ndarray = None

    @property
    def n_sparse(self):
        return int((self.kind == _SPARSE).sum())


def _build_model(p, seed):
    d = p.n_features
    rng = _rng(seed, _TAG_COLUMNS)
    zero = np.array(sorted(set(c - 1 for c in p.zero_columns if 1 <= c <= d)), np.int64)
    free = np.setdiff1d(np.arange(d), zero)
    if len(free) < _N_SIGNAL:
        raise ParameterError(f"n_features must leave >= {_N_SIGNAL} non-zero columns; got {d}")
    perm = rng.permutation(free)
    signal, rest = perm[:_N_SIGNAL], perm[_N_SIGNAL:]
    n_sparse = int(round(p.sparse_share * len(rest)))
    n_disc = int(round(p.discrete_share * len(rest)))
    sparse = np.sort(rest[:n_sparse])
    discrete = np.sort(rest[n_sparse:n_sparse + n_disc])
    kind = np.full(d, _DENSE, np.int8)
    kind[zero], kind[sparse], kind[discrete] = _ZERO, _SPARSE, _DISCRETE
    param = np.zeros(d)
    param[sparse] = rng.uniform(0.3, 0.9, len(sparse))              # P(value is 0)
    param[discrete] = rng.integers(2, 9, len(discrete))             # levels
    slot = np.full(d, -1, np.int64)
    slot[sparse] = np.arange(len(sparse))
    # each column loads on one factor, half of them on a second one too
    k = _N_LATENT
    A = np.zeros((k, d))
    A[rng.integers(0, k, d), np.arange(d)] = rng.normal(0.0, 1.0, d)
    second = rng.random(d) < 0.5
    A[rng.integers(0, k, d)[second], np.arange(d)[second]] += rng.normal(0.0, 0.7, int(second.sum()))
    m = _Model(preset=p, loadings=A, noise_scale=rng.uniform(0.3, 1.0, d),
               slope=rng.uniform(0.6, 1.6, d), bias=rng.normal(0.0, 0.7, d), kind=kind, param=param,
               slot=slot, signal=np.sort(signal))
    m.thresholds = _calibrate(m, seed)
    return m


@njit(cache=True, nogil=True)
def _columns_to_micro(F, A, E, U, noise_scale, offset, slope, bias, kind, param, slot, normalize,
                      work, out):
    """Turn one query's latent factors into written values (micro-units), in one fused pass.

    F (n, k) factors, A (k, d) loadings, E (n, d) and U (n, n_sparse) uniform draws; work is a
    float64 (n, d) scratch array. Column j: t = slope_j * (F_i . A_j + noise_j * sqrt(12) *
    (E - 1/2) + offset_j) + bias_j (the noise has unit variance), squashed into (0, 1) by the
    softsign x = (1 + t / (1 + |t|)) / 2; discrete columns snap to levels k / (L - 1), sparse
    values become 0 with probability param_j, zero columns are 0; with ``normalize`` each column is
    min-max scaled within the query (constant columns become 0). out = rint(x * 10**6).
    Only +, *, / and fixed summation orders: the same bytes on every IEEE platform.
    """
    n, d = E.shape
    k_lat = F.shape[1]
    lo = np.full(d, np.inf)
    hi = np.full(d, -np.inf)
    for i in range(n):
        for j in range(d):
            kd = kind[j]
            if kd == 3:
                x = 0.0
            else:
                z = 0.0
                for f in range(k_lat):
                    z += F[i, f] * A[f, j]
                # uniform noise with unit variance: sqrt(12) * (E - 1/2)
                z += noise_scale[j] * 3.4641016151377544 * (E[i, j] - 0.5) + offset[j]
                t = slope[j] * z + bias[j]
                x = 0.5 + 0.5 * (t / (1.0 + abs(t)))
                if kd == 2:
                    levels = param[j]
                    x = min(np.floor(x * levels), levels - 1.0) / (levels - 1.0)
                elif kd == 1 and U[i, slot[j]] < param[j]:
                    x = 0.0
            work[i, j] = x
            lo[j] = min(lo[j], x)
            hi[j] = max(hi[j], x)
    for i in range(n):
        for j in range(d):
            x = work[i, j]
            if normalize:
                span = hi[j] - lo[j]
                x = (x - lo[j]) / span if span > 0.0 else 0.0
            out[i, j] = np.int32(np.rint(x * 1e6))     # round half to even


def _features(m, rng, n, out):
    """Draw one query's features into out (int32 (n, d), micro-units of the written values)."""
    d = m.preset.n_features
    mu = rng.normal(0.0, 0.5, _N_LATENT)                  # per-query factor means
    F = rng.standard_normal((n, _N_LATENT))
    F += mu
    offset = rng.normal(0.0, 0.5, d)                      # per-query column offsets
    E = rng.random((n, d))
    U = rng.random((n, m.n_sparse))
    # E is consumed element by element before being overwritten, so it doubles as scratch
    _columns_to_micro(F, m.loadings, E, U, m.noise_scale, offset, m.slope, m.bias, m.kind, m.param,
                      m.slot, m.preset.query_normalize, E, out)
    return out


def _relevance(m, rng, M):
    """Continuous relevance of a query's documents from the written values (micro-units M)."""
    s = M[:, m.signal] / _MICRO
    g = (1.2 * np.exp(-((s[:, 0] - 0.65) ** 2 + (s[:, 1] - 0.35) ** 2) / 0.08)
         + 1.0 * s[:, 2] * s[:, 3]
         + 0.4 * np.sin(2.0 * np.pi * s[:, 4])
         + 0.5 * s[:, 5])
    g += rng.normal(0.0, m.preset.query_shift)
    g += rng.normal(0.0, m.preset.noise, len(g))
    return g


def _calibrate(m, seed):
    """Grade thresholds: quantiles of relevance over a fixed sample of queries."""
    p = m.preset
    rng = _rng(seed, _TAG_CALIB)
    mean = p.n_rows / p.n_queries
    n_q = max(20, int(_CALIB_ROWS // mean))
    sizes = np.clip(np.rint(rng.lognormal(np.log(mean) - p.size_sigma ** 2 / 2, p.size_sigma, n_q)),
                    p.size_min, p.size_max).astype(np.int64)
    rel = []
    for i, n in enumerate(sizes.tolist()):
        qrng = _rng(seed, _TAG_CALIB, i)
        rel.append(_relevance(m, qrng, _features(m, qrng, n, np.empty((n, p.n_features), np.int32))))
    cum = np.cumsum(p.label_fractions)[:-1] / np.sum(p.label_fractions)
    return np.quantile(np.concatenate(rel), cum)


def all_zero_queries(preset="small", *, scale=1.0, seed=0, part=0):
    """Boolean mask of the queries whose documents all get grade 0: exactly
    round(all_zero_fraction * n_queries) of them, chosen at random."""
    p, nq, _ = resolve(preset, scale)
    n_zero = int(round(p.all_zero_fraction * nq))
    chosen = _rng(_check_seed(seed), _sample_tag(_TAG_ALL_ZERO, _part_index(part))).permutation(nq)[:n_zero]
    mask = np.zeros(nq, bool)
    mask[chosen] = True
    return mask


def _query(m, seed, q, all_zero, M, grade, part=0):
    """Generate query q into M (int32 (n, d) micro-units) and grade (int8 (n,))."""
    rng = _rng(seed, _sample_tag(_TAG_QUERY, part), q)
    _features(m, rng, M.shape[0], M)
    rel = _relevance(m, rng, M)
    if all_zero:
        grade[:] = 0
    else:
        grade[:] = np.searchsorted(m.thresholds, rel, side="left")


# ---------------------------------------------------------------------------------------------
# batches
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Block:
    """A batch of whole queries in micro-units (the exact written values).

    Attributes
    ----------
    M : int32 (r, d)      feature values times 10**6
    grade : int8 (r,)     labels
    qid : int64 (r,)      query ids (query number + 1)
    row0 : int            row number of the first row
    sizes : int64         rows per query in this block
    """

    M: np.ndarray
    grade: np.ndarray
    qid: np.ndarray
    row0: int
    sizes: np.ndarray

    def X(self):
        """float32 features equal to float32(float(text)) of the written values."""
        out = np.empty(self.M.shape, np.float32)
        _micro_to_float32(self.M, out)
        return out


def _batch_plan(sizes, batch_rows):
    """Query index boundaries of batches: whole queries, at most batch_rows rows unless one
    query alone is larger."""
    bounds = [0]
    acc = 0
    for q, n in enumerate(sizes.tolist()):
        if acc and acc + n > batch_rows:
            bounds.append(q)
            acc = 0
        acc += n
    bounds.append(len(sizes))
    return bounds


def iter_blocks(preset="small", *, scale=1.0, seed=0, batch_rows=None, part=0):
    """Yield :class:`Block` batches of whole queries (exact integer values), in file order."""
    seed = _check_seed(seed)
    part = _part_index(part)
    p, nq, n_rows = resolve(preset, scale)
    if batch_rows is None:
        batch_rows = max(1024, _BATCH_VALUES // p.n_features)
    if isinstance(batch_rows, bool) or int(batch_rows) != batch_rows or batch_rows < 1:
        raise ParameterError(
            f"batch_rows must be an integer >= 1; got {batch_rows!r}. Pass batch_rows=65536")
    sizes = query_sizes(p, scale=scale, seed=seed, part=part)
    all_zero = all_zero_queries(p, scale=scale, seed=seed, part=part)
    m = _build_model(p, seed)
    bounds = _batch_plan(sizes, int(batch_rows))
    ptr = np.concatenate(([0], np.cumsum(sizes)))
    for qa, qb in zip(bounds[:-1], bounds[1:]):
        r0, r1 = int(ptr[qa]), int(ptr[qb])
        M = np.empty((r1 - r0, p.n_features), np.int32)
        grade = np.empty(r1 - r0, np.int8)
        for q in range(qa, qb):
            a, b = int(ptr[q]) - r0, int(ptr[q + 1]) - r0
            _query(m, seed, q, all_zero[q], M[a:b], grade[a:b], part)
        qid = np.repeat(np.arange(qa + 1, qb + 1, dtype=np.int64) + part * _PART_QID_OFFSET, sizes[qa:qb])
        yield Block(M, grade, qid, r0, sizes[qa:qb])


def generate_batches(preset="small", *, scale=1.0, seed=0, batch_rows=65536, part=0):
    """Yield ``(X float32 (r, d), y float32 (r,), qid int64 (r,))`` batches ending on query
    boundaries; together they are the whole data set in file order.

    Parameters
    ----------
    preset : str or Preset
        One of :data:`PRESETS` (``mq2007``, ``mslr30k``, ``istella``, ``small``).
    scale : float
        Multiplies the numbers of queries and rows (rounded).
    seed : int
        Same seed, preset and scale give the same values for any ``batch_rows``. The seed also
        fixes the relevance model (which features matter and how).
    part : "train", "valid", "test" or int
        Other queries drawn from the same relevance model (like the folds of a LETOR set).
    batch_rows : int
        Target rows per batch; a query larger than this is a batch of its own.
    """
    for blk in iter_blocks(preset, scale=scale, seed=seed, batch_rows=batch_rows, part=part):
        yield blk.X(), blk.grade.astype(np.float32), blk.qid


# ---------------------------------------------------------------------------------------------
# numba kernels
# ---------------------------------------------------------------------------------------------
@njit(cache=True, nogil=True)
def _micro_to_float32(M, out):
    # float64 division m / 1e6 is correctly rounded, so it equals float(text); then to float32
    for i in range(M.shape[0]):
        for j in range(M.shape[1]):
            out[i, j] = np.float32(M[i, j] / 1e6)


@njit(cache=True, nogil=True)
def _put_uint(out, pos, v):
    """Write the decimal digits of v >= 0 at out[pos:]; return the new position."""
    if v == 0:
        out[pos] = 48
        return pos + 1
    n = 0
    t = v
    while t > 0:
        t //= 10
        n += 1
    k = pos + n - 1
    while v > 0:
        out[k] = 48 + v % 10
        v //= 10
        k -= 1
    return pos + n


# "00".."99": one table lookup writes two digits
_DIGIT_PAIRS = np.frombuffer("".join(f"{i:02d}" for i in range(100)).encode(), np.uint8).copy()


@njit(cache=True, nogil=True)
def _format_rows(M, grade, qid, row0, index_text, index_ptr, docid_text, sparse, pairs, out):
    """Write LETOR lines for rows of M into the uint8 buffer out; return the bytes written.

    index_text[index_ptr[j]:index_ptr[j+1]] is " <j+1>:"; docid_text is " #docid = synth-";
    pairs is _DIGIT_PAIRS. A value m (micro-units, m >= 0) is written as m // 10**6, '.', then
    the 6 digits of m % 10**6 as three digit pairs.
    """
    pos = 0
    for i in range(M.shape[0]):
        pos = _put_uint(out, pos, grade[i])
        out[pos] = 32       # " qid:"
        out[pos + 1] = 113
        out[pos + 2] = 105
        out[pos + 3] = 100
        out[pos + 4] = 58
        pos = _put_uint(out, pos + 5, qid[i])
        for j in range(M.shape[1]):
            m = np.int64(M[i, j])
            if sparse and m == 0:
                continue
            for t in range(index_ptr[j], index_ptr[j + 1]):
                out[pos] = index_text[t]
                pos += 1
            if m >= 1000000:
                whole = m // 1000000
                frac = m - whole * 1000000
                pos = _put_uint(out, pos, whole)
            else:
                frac = m
                out[pos] = 48
                pos += 1
            out[pos] = 46    # "."
            a = frac // 10000
            r = frac - a * 10000
            b = r // 100
            c = r - b * 100
            out[pos + 1] = pairs[2 * a]
            out[pos + 2] = pairs[2 * a + 1]
            out[pos + 3] = pairs[2 * b]
            out[pos + 4] = pairs[2 * b + 1]
            out[pos + 5] = pairs[2 * c]
            out[pos + 6] = pairs[2 * c + 1]
            pos += 7
        for t in range(docid_text.shape[0]):
            out[pos] = docid_text[t]
            pos += 1
        pos = _put_uint(out, pos, row0 + i)
        out[pos] = 10        # "\n"
        pos += 1
    return pos


def format_rows_py(M, grade, qid, row0, sparse=False):
    """Plain-Python twin of the numba formatter (for tests): LETOR lines as bytes."""
    lines = []
    for i in range(M.shape[0]):
        parts = [f"{int(grade[i])} qid:{int(qid[i])}"]
        for j, m in enumerate(M[i].tolist()):
            if sparse and m == 0:
                continue
            parts.append(f"{j + 1}:{m // _MICRO}.{m % _MICRO:06d}")
        lines.append(" ".join(parts) + f" #docid = synth-{row0 + i}\n")
    return "".join(lines).encode("ascii")


class _TextFormatter:
    """Formats blocks into bytes chunk by chunk within a fixed buffer."""

    def __init__(self, n_features, sparse):
        idx = [f" {j + 1}:".encode() for j in range(n_features)]
        self.index_text = np.frombuffer(b"".join(idx), np.uint8).copy()
        self.index_ptr = np.concatenate(([0], np.cumsum([len(t) for t in idx]))).astype(np.int64)
        self.docid = np.frombuffer(b" #docid = synth-", np.uint8).copy()
        self.sparse = bool(sparse)
        # bytes per row, at most: grade, ' qid:', qid, features (index + 8 chars), docid, row, '\n'
        self.row_bound = (4 + 5 + 20 + int(self.index_ptr[-1]) + 8 * n_features
                          + len(self.docid) + 20 + 1)
        self.chunk_rows = max(1, _TEXT_BUFFER_BYTES // self.row_bound)
        self.buf = np.empty(self.chunk_rows * self.row_bound, np.uint8)

    def chunks(self, blk):
        """Yield memoryviews of formatted text for the rows of blk (valid until the next one)."""
        for a in range(0, blk.M.shape[0], self.chunk_rows):
            b = min(a + self.chunk_rows, blk.M.shape[0])
            n = _format_rows(blk.M[a:b], blk.grade[a:b], blk.qid[a:b], blk.row0 + a,
                             self.index_text, self.index_ptr, self.docid, self.sparse,
                             _DIGIT_PAIRS, self.buf)
            yield memoryview(self.buf)[:n]


# ---------------------------------------------------------------------------------------------
# writers
# ---------------------------------------------------------------------------------------------
def _pairs(blk, n_labels):
    """Preference pairs (i, j) with y_i > y_j within each query of the block."""
    q_local = np.repeat(np.arange(len(blk.sizes)), blk.sizes)
    counts = np.bincount(q_local * n_labels + blk.grade, minlength=len(blk.sizes) * n_labels)
    c = counts.reshape(len(blk.sizes), n_labels).astype(np.int64)
    below = np.cumsum(c, axis=1) - c            # documents with a lower grade
    return int((c * below).sum()), c.sum(axis=0), int((c[:, 1:].sum(axis=1) == 0).sum())


class _Stats:
    def __init__(self, p, nq, n_rows, scale, seed, path, fmt):
        self.d = dict(path=str(path), format=fmt, preset=p.name, scale=float(scale), seed=seed,
                      rows=n_rows, queries=nq, features=p.n_features, n_labels=p.n_labels,
                      pairs=0, all_zero_queries=0, label_counts=[0] * p.n_labels, bytes=0)
        self.n_labels = p.n_labels
        self.t0 = time.perf_counter()

    def add(self, blk):
        pairs, counts, all_zero = _pairs(blk, self.n_labels)
        self.d["pairs"] += pairs
        self.d["all_zero_queries"] += all_zero
        self.d["label_counts"] = [a + int(b) for a, b in zip(self.d["label_counts"], counts)]

    def finish(self, path):
        self.d["bytes"] = os.path.getsize(path)
        self.d["seconds"] = round(time.perf_counter() - self.t0, 3)
        self.d["rows_per_second"] = round(self.d["rows"] / max(self.d["seconds"], 1e-9))
        return self.d


def _progress(total, enabled, desc):
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    return tqdm(total=total, unit="rows", unit_scale=True, desc=desc, smoothing=0.1)


def _counted(p, stats, bar, **kw):
    """The blocks of :func:`iter_blocks` (generated in a background thread), each added to
    ``stats`` and to the progress ``bar`` once the caller has written it."""
    for blk in background(iter_blocks(p, **kw)):
        yield blk
        stats.add(blk)
        if bar is not None:
            bar.update(blk.M.shape[0])


def write_text(path, preset="small", *, scale=1.0, seed=0, part=0, sparse=False, gzip_level=1,
               progress=False, batch_rows=None):
    """Write the data set as LETOR text (gzip-compressed when ``path`` ends in ``.gz``).

    The file appears under ``path`` only when complete (written to a hidden temporary name, then
    renamed). Generation runs in a background thread while this one formats and writes.

    Parameters
    ----------
    path : str or Path
    preset, scale, seed, part : see :func:`generate_batches`
    sparse : bool
        Omit zero values (``j:0.000000``) from the lines.
    gzip_level : int
        zlib level for ``.gz`` output (1 = fastest; the gzip header carries no name or time,
        so the bytes are reproducible).
    progress : bool
        Show a tqdm progress bar on stderr.

    Returns
    -------
    dict
        rows, queries, features, pairs, label_counts, all_zero_queries, bytes, seconds, ...
    """
    seed = _check_seed(seed)
    p, nq, n_rows = resolve(preset, scale)
    path = Path(path)
    fmt = "text.gz" if path.name.endswith(".gz") else "text"
    stats = _Stats(p, nq, n_rows, scale, seed, path, fmt)
    fmtr = _TextFormatter(p.n_features, sparse)
    bar = _progress(n_rows, progress, f"{p.name} -> {path.name}")
    try:
        with written(path) as tmp, open(tmp, "wb") as raw:
            out = (gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=gzip_level, mtime=0)
                   if fmt == "text.gz" else raw)
            try:
                for blk in _counted(p, stats, bar, scale=scale, seed=seed, batch_rows=batch_rows, part=part):
                    for chunk in fmtr.chunks(blk):
                        out.write(chunk)
            finally:
                if out is not raw:
                    out.close()
    finally:
        if bar is not None:
            bar.close()
    return stats.finish(path)


def write_hdf5(path, preset="small", *, scale=1.0, seed=0, part=0, compression=None, comments=False,
               progress=False, batch_rows=None):
    """Write the data set as a streamrank HDF5 dataset through :class:`DatasetWriter`.

    X holds float32(float(text)) of the very values :func:`write_text` writes, so converting the
    text gives the same arrays.

    Parameters
    ----------
    compression : {"none", "lzf", "gzip"} or None
        None takes the writer's default.
    comments : bool
        Store each row's comment ``docid = synth-<row>`` as the converter would.
    """
    from streamrank.io.hdf5_format import DatasetWriter

    seed = _check_seed(seed)
    p, nq, n_rows = resolve(preset, scale)
    path = Path(path)
    stats = _Stats(p, nq, n_rows, scale, seed, path, "hdf5")
    kw = {} if compression is None else {"compression": compression}
    name = f"generated:{p.name} seed={seed} scale={float(scale):g} part={part}"
    extra = {"generator": "streamrank.synthetic", "preset": p.name, "scale": float(scale), "seed": seed, "part": part,
             "preset_params": dataclasses.asdict(p)}
    bar = _progress(n_rows, progress, f"{p.name} -> {path.name}")
    try:
        with DatasetWriter(path, n_features=p.n_features, source=[{"name": name, "sha256": ""}],
                           fixed_width=True, comments=comments, extra=extra, **kw) as w:
            for blk in _counted(p, stats, bar, scale=scale, seed=seed, batch_rows=batch_rows, part=part):
                w.append(blk.X(), blk.grade.astype(np.float32), blk.qid,
                         comments=_comments(blk) if comments else None)
    finally:
        if bar is not None:
            bar.close()
    return stats.finish(path)


def _comments(blk):
    """(data uint8, ptr int64) of 'docid = synth-<row>' for each row of blk."""
    texts = [f"docid = synth-{blk.row0 + i}".encode() for i in range(blk.M.shape[0])]
    ptr = np.zeros(len(texts) + 1, np.int64)
    np.cumsum([len(t) for t in texts], out=ptr[1:])
    return np.frombuffer(b"".join(texts), np.uint8), ptr


def clustered_rows(seed=0, n_cluster=700, n_spread=900, d=25):
    """(X float32, y, query_ptr): one query of n_cluster + 300 documents, n_cluster of them
    near-identical (documents that match no query term differ only in two length-like features),
    then queries of 100; raw features of scales 10^-2 .. 10^4; labels 0-2 (60/30/10%). The shape of
    a public LETOR set that the exact kernel path's preconditioner must handle (a large query of
    near-duplicate documents beside spread ones); its tests and
    ``tools/bench_exact_kernel.py --clustered`` use it."""
    rng = np.random.default_rng(seed)
    scales = 10.0 ** rng.uniform(-2, 4, d)
    cluster = np.tile(rng.standard_normal(d) * 0.3, (n_cluster, 1))
    cluster[:, :2] += 0.05 * rng.standard_normal((n_cluster, 2))
    spread = rng.standard_normal((n_spread, d)) * 3.0
    X = np.vstack([cluster, spread]) * scales
    qp = np.unique(np.r_[np.arange(n_cluster + 300, len(X), 100), 0, len(X)])
    s = X[:, 2] / scales[2] + np.tanh(X[:, 3] / scales[3]) + 0.5 * rng.standard_normal(len(X))
    y = np.digitize(s, np.quantile(s, [0.6, 0.9])).astype(np.float32)
    return X.astype(np.float32), y, qp


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
