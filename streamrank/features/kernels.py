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

Row independence. A data row's kernel values (and the features and scores made from them) are
the same bits whatever block it arrives in, by construction: every BLAS product on data rows is
called with one fixed shape and the row at one fixed position in it. Rows are named by an absolute
index r (their row in the dataset, or in the array); the row r is always computed in the tile of
T rows that starts at floor(r / T) T, at position r mod T, the tile's other positions holding zero
rows or other rows of the same tile (a row of a product is computed from that row alone, the
other rows only share the call). T (:func:`tile_rows`: :data:`ROW_TILE`, fewer only for products
so wide that a tile would pass :data:`TILE_BYTES`) depends on the product's fixed width alone,
never on block sizes or budgets; tiles live in 64-byte aligned buffers, and each tile's products
run on one BLAS thread, tiles side by side (:func:`parallel_tiles`): the bits never depend on the
thread count either, so a dask worker computes this process's values. Padding a call's row count to a multiple of 16
was not enough: OpenBLAS picks its code path (small-matrix kernels, edge kernels, K blocking)
by the call's shape, and 0.3.31 (SkylakeX kernels) gave a row of the Nystroem projection other
bits in a 16-row call than in a 704-row one. A block whose edges fall inside tiles computes those
(at most two) partial tiles in full: one row costs a tile.
"""

import math
import numbers

import numba
import numpy as np
from numba import prange

from streamrank._native import numba_cache
from streamrank.errors import ParameterError

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

# Rows of every BLAS call on data rows (see the module docstring). Fewer rows mean more calls, and
# a two-thread call waits for its second thread when another process holds a core; 512 rows keep
# that wait small against the call (docs/design.md, Measurements). A call on one row costs a tile.
ROW_TILE = 512
# Fewer rows (a multiple of ROW_ALIGN, at least ROW_ALIGN) when a tile's float64 temporaries would
# pass TILE_BYTES: only for products over 8,000 columns wide (exact-kernel rows against all l
# training rows, or against many support rows), where a full tile would hold hundreds of MB.
TILE_BYTES = 32 << 20
ROW_ALIGN = 16



def tile_rows(width):
    """Rows per tile of a product with ``width`` float64 columns of temporaries per row (input
    copy and outputs): ROW_TILE, or fewer when that passes TILE_BYTES. A function of the width
    alone, so fixed for a given map or kernel matrix."""
    fit = TILE_BYTES // (8 * max(int(width), 1)) // ROW_ALIGN * ROW_ALIGN
    return int(min(ROW_TILE, max(ROW_ALIGN, fit)))


def row_tiles(n, row0, tile):
    """(s, e, p) for the tiles met by rows 0..n-1 of an array whose row 0 has absolute index
    ``row0``: its rows s:e sit at positions p:p + e - s of the tile of ``tile`` rows that starts
    at absolute row row0 + s - p. Only the first and the last tile can be partial."""
    tile = int(tile)
    if tile < 1:  # s advances by tile - p >= 1 per tile only for a tile of at least one row
        raise ValueError(f"row_tiles: tile must be >= 1 row; got {tile}")
    s = 0
    while s < n:
        p = (row0 + s) % tile
        e = min(n, s + tile - p)
        yield s, e, p
        s = e


def check_row0(row0):
    """``row0`` (absolute index of an array's first row) as an int >= 0."""
    if isinstance(row0, bool) or not isinstance(row0, (int, np.integer)) or row0 < 0:
        raise ParameterError(f"row0 must be an integer >= 0 (the index of the array's first row in its "
                             f"dataset); got {row0!r}. Pass row0=0 for an array on its own")
    return int(row0)


def aligned_empty(shape, align=64):
    """An uninitialised float64 array whose data starts on an ``align``-byte boundary."""
    n = math.prod(shape)
    raw = np.empty(n + align // 8, np.float64)
    off = (-raw.ctypes.data % align) // 8
    return raw[off:off + n].reshape(shape)


def fill_tile(tile, rows, p):
    """Rows at positions p:p + len(rows) of ``tile``, zeros elsewhere."""
    r = rows.shape[0]
    tile[:p] = 0.0
    tile[p:p + r] = rows
    tile[p + r:] = 0.0


def tile_threads():
    """Threads that compute tiles side by side: the passes' count (all cores; on a dask worker,
    its share of them)."""
    from streamrank._native import parallel
    return parallel.threads()


class ScratchPool:
    """Scratch sets for :func:`parallel_tiles` kept from one call to the next (``take``, ``give``):
    a caller that runs it block after block (the kernel matrix's build) otherwise makes every
    thread's set afresh per block, and a tile's buffer of 32 MB is mapped and faulted in again each
    time (most of a build's time, in the system)."""

    def __init__(self, make):
        import threading
        self._make, self._free, self._lock = make, [], threading.Lock()

    def take(self):
        with self._lock:
            if self._free:
                return self._free.pop()
        return self._make()

    def give(self, buffers):
        with self._lock:
            self._free.append(buffers)


def parallel_tiles(A, row0, T, body, scratch, give_back=None, threads=None):
    """``body(tile, s, e, p, buffers)`` for every tile of A's rows (absolute index of A[0]:
    ``row0``; ``tile`` a 64-byte aligned float64 (T, width) buffer holding A[s:e] at positions
    p:p + e - s and zeros elsewhere; ``buffers`` = ``scratch()``, one set per thread, handed to
    ``give_back`` when the thread is done: :class:`ScratchPool`). The one tile loop of every
    product on data rows. ``threads``: at most this many (None: :func:`tile_threads`).

    Tiles run side by side on :func:`tile_threads` threads, each product on ONE BLAS thread: a
    tile's bits then depend on its rows alone, never on how many threads the process has (OpenBLAS
    splits a product's inner dimension across its threads: 256 x 2000 x 125 gives other bits with 1
    thread than with 2, so a dask worker with fewer threads would not give this process's model).
    ``body`` writes only its own rows of the output."""
    from streamrank._native.blas import one_thread
    spans = list(row_tiles(A.shape[0], row0, T))
    k = min(len(spans), tile_threads() if threads is None else threads)

    def run(part):
        At, bufs = aligned_empty((T, A.shape[1])), scratch()
        try:
            for s, e, p in part:
                fill_tile(At, A[s:e], p)
                body(At, s, e, p, bufs)
        finally:
            if give_back is not None:
                give_back(bufs)

    with one_thread():
        if k <= 1:
            run(spans)
        else:
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(max_workers=k, thread_name_prefix="streamrank-tiles") as pool:
                list(pool.map(run, [spans[i::k] for i in range(k)]))  # numpy's BLAS calls release the GIL


def default_gamma(n_features, value_var=None):
    """The DESIGN default gamma = 1 / n_features; with ``value_var``, Var X of every value of the
    training rows as the kernel sees them (after normalisation), scikit-learn's gamma='scale' =
    1 / (n_features Var X), which keeps gamma ||x - y||^2 of order one whatever the features'
    units (for independent rows of one distribution E ||x - y||^2 = 2 d times the columns' mean
    variance, at most 2 d Var X). Constant data (Var X = 0, or not finite) has no scale:
    1 / n_features then."""
    d = max(int(n_features), 1)
    if value_var is None or not (math.isfinite(value_var) and value_var > 0):
        return 1.0 / d
    g = 1.0 / (d * float(value_var))
    return g if math.isfinite(g) and g > 0 else 1.0 / d


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
        raise ParameterError(f"kernel must be one of {', '.join(KERNELS)}; got {kernel!r}. Use kernel=rbf")
    if gamma is None:
        if n_features is None:
            raise ParameterError("gamma=None (1 / n_features) needs the number of features; use gamma=0.03125")
        gamma = default_gamma(n_features)
    fix_gamma = default_gamma(n_features) if n_features else 0.03125
    if isinstance(gamma, bool) or not isinstance(gamma, numbers.Real):
        raise ParameterError(f"gamma must be a number > 0; got {gamma!r}. Use gamma={fix_gamma:g}")
    gamma = float(gamma)
    if not (math.isfinite(gamma) and gamma > 0):
        raise ParameterError(f"gamma must be > 0; got {gamma:g}. Use gamma={fix_gamma:g}")
    if isinstance(degree, bool) or not isinstance(degree, numbers.Real) or degree != int(degree) or degree < 1:
        raise ParameterError(f"degree must be an integer >= 1; got {degree!r}. Use degree=3")
    degree = int(degree)
    if isinstance(coef0, bool) or not isinstance(coef0, numbers.Real) or not math.isfinite(coef0):
        raise ParameterError(f"coef0 must be a finite number; got {coef0!r}. Use coef0=1")
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

    :meth:`__call__` computes K(A, B) for any A in tiles of :attr:`tile_rows` rows by absolute
    row index (``row0``, see the module docstring); :meth:`into` is one tile's product, for
    callers that run the tiles themselves. Parameters are taken as given (validate with
    :func:`check_kernel` first).
    """

    def __init__(self, B, kernel, gamma, degree=3, coef0=1.0):
        B = _as_rows(B, "B")
        self.kernel, self.gamma, self.degree, self.coef0 = kernel, float(gamma), int(degree), float(coef0)
        self.n_features = B.shape[1]
        self.n_cols = B.shape[0]
        self.tile_rows = tile_rows(self.n_features + self.n_cols)
        B = np.asarray(B, np.float64)
        if kernel == "rbf":
            # -2 B^T: scaling by a power of two is exact, so the product is exactly -2 A B^T
            self._BT = np.ascontiguousarray(-2.0 * B.T)
            self._bn = _row_norms(B)
        else:
            self._BT = np.ascontiguousarray(B.T)

    def into(self, A, out):
        """K(A, B) into ``out`` (float64 C-contiguous ``(len(A), n_cols)``) for a float64
        C-contiguous tile A: each row from its own row of A, in a call whose shape the caller
        keeps fixed (module docstring)."""
        assert A.dtype == np.float64 and A.flags.c_contiguous and out.flags.c_contiguous
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
            # the one kernel whose values can overflow on finite rows and parameters (rbf and
            # laplacian lie in [0, 1], sigmoid in [-1, 1], x.y of float32 rows stays below 1e80)
            if not np.isfinite(out).all():
                self._overflow(A, out)
        elif self.kernel == "sigmoid":
            out *= self.gamma
            out += self.coef0
            np.tanh(out, out=out)
        return out

    def _overflow(self, A, out):
        from streamrank.errors import NumericError
        r, c = (int(v) for v in np.argwhere(~np.isfinite(out))[0])
        xy = float(A[r] @ self._BT[:, c])
        raise NumericError(
            f"the poly kernel (gamma x.y + coef0)^degree is not finite ({out[r, c]!r}) for x.y = {xy:.4g} with "
            f"gamma={self.gamma:g}, coef0={self.coef0:g}, degree={self.degree}: these settings overflow float64 "
            f"on these data; use a smaller gamma, coef0 or degree (or normalize=zscore)")

    def __call__(self, A, out=None, row0=0):
        """K(A, B) ``(len(A), n_cols)``, float64 unless ``out`` (any float dtype: the float64
        values are rounded once into it) is given; ``row0`` is the absolute index of A's first
        row. Temporaries: one tile (``tile_rows`` rows of A and of K)."""
        A = _as_rows(A, "A")
        if A.shape[1] != self.n_features:
            raise ValueError(f"A has {A.shape[1]} features, B has {self.n_features}")
        row0 = check_row0(row0)
        n = A.shape[0]
        if out is None:
            out = np.empty((n, self.n_cols))
        elif out.shape != (n, self.n_cols):
            raise ValueError(f"out has shape {out.shape}, expected {(n, self.n_cols)}")
        if n == 0:
            return out
        def tile(At, s, e, p, bufs):
            self.into(At, bufs[0])
            out[s:e] = bufs[0][p:p + e - s]

        parallel_tiles(A, row0, self.tile_rows, tile, lambda: [aligned_empty((self.tile_rows, self.n_cols))])
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


def check_psd_kernel(kernel, gamma, degree, coef0, n_features):
    """check_kernel, and refuse kernels whose Gram matrix need not be PSD (the objective in beta
    is convex only for PSD Q)."""
    kernel, gamma, degree, coef0 = check_kernel(kernel, gamma, degree, coef0, n_features=n_features)
    if not is_psd(kernel, coef0):
        if kernel == "poly":
            raise ParameterError(f"kernel=poly with coef0={coef0:g} is not positive semi-definite, which exact "
                                 f"kernel RankSVM needs; use coef0=0 or a positive value")
        raise ParameterError(f"kernel={kernel} is not positive semi-definite, which exact kernel RankSVM needs "
                             f"(its objective in beta would not be convex); use kernel=rbf, laplacian, poly or "
                             f"linear, or method=nystroem for {kernel}")
    return kernel, gamma, degree, coef0


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
