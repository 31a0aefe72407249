"""The kernel matrix Q = K(X, X) of exact kernel RankSVM in row blocks, on disk and in memory.

Paper 004 sec. 3.3: Q does not depend on beta, so it is computed once and stored; for large l it
does not fit in memory, so it is split into row blocks, some kept in memory, the others read
when needed. Here Q is computed once in query-aligned row blocks (rows of whole queries, so the
objective can run the pair sweeps block by block), each block as K(X_b, X) in float64 (BLAS for
the distance part, see :mod:`streamrank.features.kernels`) rounded once to float32, and stored with the
file, manifest and checksum machinery of :class:`~streamrank.cache.feature_cache.FeatureCache` (one
cache directory ``features-<key16>`` under ``--cache-dir``; a block is a ``(rows, l)`` float32
array). The key holds the dataset fingerprint, the query range, the kernel and its parameters and
the normalisation (with a digest of its fitted arrays): nothing about C or the solver, so every
C of a path (and later runs) reuse the same Q. A damaged or foreign cache is discarded and
rebuilt by FeatureCache; a block that fails its check is recomputed and stored again.

Memory: the first blocks that fit in ``memory_bytes`` stay in memory (a fixed set: passes scan
the blocks cyclically, where LRU would never hit); the others are read from disk every pass into
three reused buffers by a background thread one block ahead (explicit reads, no memory maps:
pages of a mapped file count in RSS). Blocks are read with ``verify="once"``: the CRC is checked
on a block's first read in the process, then trusted while the file's inode, size and mtime are
unchanged (a pass re-reads all of Q, and the CRC would cost about 40% of the read).

Row independence: Q's row i is K(Xn[i], Xn) computed by :class:`~streamrank.features.kernels.PreparedKernel`
in the tile of ``tile_rows`` rows that holds row i of Xn, at position i mod tile_rows (a fixed
call shape, a fixed position, a pinned BLAS thread count; see :mod:`streamrank.features.kernels`). The
tile size depends on l and d alone, so a block's rows are the same bits for any block layout
(any ``block_bytes`` or memory budget), and so is everything computed from Q. The temporaries are
one tile: at most ``kernels.TILE_BYTES`` unless l is so large that ROW_ALIGN rows pass it.
"""

import logging
import time

import numba
import numpy as np
from numba import prange

from streamrank._native.threads import background
from streamrank.execution.executor import Pass, executor_or_local, partitioned_stream
from streamrank.execution.partitions import block_partitions, partition_bounds
from streamrank.cache.feature_cache import FeatureCache, array_digest
from streamrank.features.kernels import PreparedKernel, check_psd_kernel
from streamrank.io.query_stream import plan_blocks
from streamrank._native import numba_cache

numba_cache.install()  # cached kernels load without numba's compiler registries

log = logging.getLogger("streamrank.cache.kernel_cache")

# block buffers for reads from disk: the one in use, the one queued, the one being read
READ_BUFFERS = 3
# Q is stored as float32(K). The rounding error E = float32(K) - K makes float32(K) indefinite
# where K's spectrum has decayed to nothing (MQ2008 rbf 2^-5, l = 2189: ||E||_2 = 1.6e-6,
# lambda_min = -6.6e-7): TRON then finds directions with beta^T Q beta < 0, runs to -inf at tight
# tolerances, crawls through hundreds of rejected steps, or meets d.Hd < 0 under a preconditioner,
# whose M^-1 amplifies exactly those directions. The objective therefore uses Q' = float32(K) +
# jitter I with jitter >= ||E||_2. For a symmetric E with independent entries, ||E||_2 is at most
# about 2 max_i ||E_i|| (twice the largest row norm: the semicircle edge, and Bandeira and van
# Handel 2016 for unequal variances) plus max |E_ij| sqrt(2 ln l). The row norms must be the rows'
# own: a global RMS sigma (2 sigma sqrt(l)) misses a tight cluster of near-identical rows, whose
# entries near 1 carry the largest rounding errors while most of K is small (issue 10: a query of
# 700 near-duplicate documents among 1,600 rows gave lambda_min = 1.5 to 2 times 2 sigma sqrt(l),
# and d.Hd < 0 on a public LETOR set). |E_ij| <= spacing(float32(K_ij)) / 2 for round-to-nearest,
# so the bound below comes from the stored numbers alone (the same whether a block was computed
# or read from the cache): jitter = JITTER_FACTOR max_i sqrt(sum_j (spacing_ij / 2)^2)
# + max_ij (spacing_ij / 2) sqrt(2 ln l). The half-spacing is sqrt(3) times the RMS of a uniform
# rounding error, a margin the random model does not promise. It moves the optimum by about
# jitter ||beta||^2 / 2 (about 5e-5 relative on a 25-query MQ2008 subset).
JITTER_FACTOR = 2.0
# (spacing / 2)^2 and spacing / 2 of a float32 number by its biased exponent e (bits 23-30):
# spacing = 2^(e - 150) for normal numbers (e >= 1), 2^-149 for zero and subnormals (e = 0)
_EXP = np.arange(256)
_HALF_SPACING = np.ldexp(0.5, np.maximum(_EXP, 1) - 150)
_HALF_SPACING_SQ = _HALF_SPACING * _HALF_SPACING


@numba.njit(cache=True, nogil=True, parallel=True)
def _rounding_bounds(bits, half_sq, rows, top_exp):
    """rows[i] = sum_j half_sq[e_ij] in increasing j, top_exp[i] = max_j e_ij, e_ij the biased
    exponent of the float32 whose bits are ``bits[i, j]`` (int32 view; the sign bit is masked)."""
    n, m = bits.shape
    for i in prange(n):
        s = 0.0
        t = 0
        for j in range(m):
            e = (bits[i, j] >> 23) & 0xFF
            s += half_sq[e]
            t = max(t, e)
        rows[i] = s
        top_exp[i] = t


def rounding_bounds(Qb):
    """(per-row sum_j (spacing_ij / 2)^2, max_ij spacing_ij / 2) of a float32 block: the bound on
    float32(K)'s rounding error that the jitter is built from (JITTER_FACTOR). One read of the
    block's exponents (the NumPy twin is tests/kernel_oracle.rounding_bounds)."""
    n = Qb.shape[0]
    rows, top = np.empty(n), np.zeros(n, np.int64)
    if n and Qb.shape[1]:
        _rounding_bounds(np.ascontiguousarray(Qb).view(np.int32), _HALF_SPACING_SQ, rows, top)
    else:
        rows[:] = 0.0
    return rows, float(_HALF_SPACING[top.max()]) if n and Qb.shape[1] else 0.0


def read_rows(dataset, normalizer, queries, block_bytes, executor=None):
    """(Xn float64 (l, d), float32 labels (l,), local query_ptr) of queries [q0, q1), normalised
    (one streamed pass through the executor)."""
    q0, q1 = queries
    qp = dataset.query_ptr
    l, d = int(qp[q1] - qp[q0]), dataset.n_features
    Xn, y = np.empty((l, d)), np.empty(l, np.float32)

    def put(k, item):
        a, b, Xb, yb = item
        Xn[a - int(qp[q0]):b - int(qp[q0])] = Xb
        y[a - int(qp[q0]):b - int(qp[q0])] = yb

    executor_or_local(executor).run(_NormalizedRows(normalizer), partitioned_stream(dataset, executor, block_bytes=block_bytes,
                                                                                 queries=(q0, q1)), collect=put)
    return Xn, y, qp[q0:q1 + 1] - qp[q0]


class _NormalizedRows(Pass):
    """A block's rows normalised (float64) and its labels, with their row range."""

    returns = True

    def __init__(self, normalizer):
        self.normalizer = normalizer

    def step(self, carry, item):
        b, start, stop = item
        return start, stop, self.normalizer.transform(b.X, b.query_ptr), b.y.copy()

    def merge(self, total, carry):
        return None


class KernelCache(FeatureCache):
    """Row blocks of Q = K(Xn, Xn) for the rows Xn (normalised, float64) of whole queries.

    Parameters
    ----------
    Xn : float64 (l, d)
        Normalised training rows (model inputs).
    query_ptr : int64 (n_queries + 1,)
        Query offsets in Xn (blocks hold whole queries).
    kernel, gamma, degree, coef0
        A PSD kernel (see :func:`check_psd_kernel`).
    key_material : dict
        What identifies Xn: dataset fingerprint, query range, normalisation (not C).
    block_bytes : int
        Bytes of one stored block (float32 rows of Q); a query larger than that is a block alone.
    memory_bytes : int
        Bytes of blocks kept in memory.
    cache_dir : path or None
        None keeps Q in memory only; blocks that do not fit are then recomputed every pass.
    partition_rows : int, optional
        Rows of one partition (:mod:`streamrank.execution.partitions`): no block straddles one.
    queries : (int, int), optional
        Only the row blocks of these queries (one partition, on a worker): built, kept and passed
        over; block numbers and columns stay those of the whole Q.
    """

    def __init__(self, Xn, query_ptr, *, kernel, gamma, degree=3, coef0=1.0, key_material, block_bytes,
                 memory_bytes, cache_dir=None, size_cap=None, partition_rows=None, queries=None):
        # how a worker makes its part (streamrank.execution.dask_executor): this, built
        self.spec = (built_kernel_cache, dict(Xn=Xn, query_ptr=query_ptr, kernel=kernel, gamma=gamma, degree=degree,
                                              coef0=coef0, key_material=key_material, block_bytes=block_bytes,
                                              memory_bytes=memory_bytes, cache_dir=cache_dir, size_cap=size_cap,
                                              partition_rows=partition_rows))
        kernel, gamma, degree, coef0 = check_psd_kernel(kernel, gamma, degree, coef0, Xn.shape[1])
        self.Xn = np.ascontiguousarray(Xn, np.float64)
        self.query_ptr = np.asarray(query_ptr, np.int64)
        self.kernel_params = {"kernel": kernel, "gamma": gamma, "degree": degree, "coef0": coef0}
        l = self.Xn.shape[0]
        self.l = l
        n_q = len(self.query_ptr) - 1
        self.partitions = partition_bounds(self.query_ptr, 0, n_q, partition_rows)
        parts = self.partitions
        self.block_queries = np.concatenate([[0]] + [plan_blocks(self.query_ptr, 4 * max(l, 1), block_bytes, a, b)[1:]
                                                     for a, b in zip(parts[:-1], parts[1:])]).astype(np.int64)
        layout = [(int(self.query_ptr[a]), int(self.query_ptr[b]))
                  for a, b in zip(self.block_queries[:-1], self.block_queries[1:])]
        bq = self.block_queries
        self.own = [k for k in range(len(layout))
                    if queries is None or (queries[0] <= bq[k] and bq[k + 1] <= queries[1])]
        key = {"kind": "kernel-matrix", **key_material, **self.kernel_params, "rows": l,
               "rows_digest": array_digest(self.Xn)}
        if queries is not None:  # a part's own store: workers never write one cache directory together
            key["part"] = [int(queries[0]), int(queries[1])]
        # the partition of each block this cache passes over (its own), in pass order
        self.block_partition = block_partitions(self.block_queries, parts)[self.own]
        super().__init__(cache_dir, key, layout, l, np.float32, memory_bytes=memory_bytes, size_cap=size_cap,
                         verify="once")
        self._prepared = None
        self._buffers = None
        self.build_seconds = 0.0
        self.computed_blocks = 0
        self.passes = 0
        self._jitter = None
        self._row_err = np.full(l, np.nan)  # rounding_bounds per row, as blocks are seen
        self._max_err = 0.0

    # -- computing -------------------------------------------------------------------------------
    def _kernel(self):
        if self._prepared is None:
            p = self.kernel_params
            self._prepared = PreparedKernel(self.Xn, p["kernel"], p["gamma"], p["degree"], p["coef0"])
        return self._prepared

    def compute(self, k, out):
        """Block k = K(Xn[a:b], Xn) rounded to float32 into ``out`` (float64 in between), in the
        kernel's tiles by row index in Xn (module docstring, "Row independence")."""
        a, b = self.layout[k]
        self._kernel()(self.Xn[a:b], out=out, row0=a)
        self.computed_blocks += 1
        return out

    def build(self):
        """Read the stored blocks that fit into the in-memory tier, then compute and store every
        block not stored yet (a background thread computes the next block while this one is
        written). Returns the seconds spent."""
        t0 = time.perf_counter()
        stored = set(self.present) & set(self.own)
        for k in sorted(stored):  # stored blocks that fit in the tier are read into it now
            if not self.in_memory(k) and self.memory_nbytes + self._nbytes(k) <= self.memory_bytes:
                Qk = self.get(k)
                if Qk is not None:
                    self._note(k, Qk)
        missing = [k for k in self.own
                   if not self.in_memory(k) and (k not in stored or k not in self.present)]
        # the blocks the in-memory tier will hold: computed into arrays of their own and handed to
        # it (no copy); the others go to disk through READ_BUFFERS reused buffers
        room, kept = self.memory_bytes - self.memory_nbytes, set()
        for k in missing:
            if self._nbytes(k) <= room:
                kept.add(k)
                room -= self._nbytes(k)
        if self.dir is None:  # memory only: compute what the tier can hold, the rest on demand
            missing = [k for k in missing if k in kept]
        if missing:
            bufs = ([np.empty((self.max_rows, self.l), np.float32) for _ in range(READ_BUFFERS)]
                    if len(kept) < len(missing) else None)

            def made():
                for n, k in enumerate(missing):
                    out = (np.empty((self.rows(k), self.l), np.float32) if k in kept
                           else bufs[n % READ_BUFFERS][:self.rows(k)])
                    yield k, self.compute(k, out)

            for k, Qk in background(made(), depth=1, name="streamrank-kernel-build"):
                self.put(k, Qk, take=k in kept)
                self._note(k, Qk)
        self.jitter  # the blocks not seen yet are read once for it
        self.build_seconds += time.perf_counter() - t0
        return self.build_seconds

    def _note(self, k, Qk):
        """Record block k's rounding bounds for the jitter."""
        a, b = self.layout[k]
        self._row_err[a:b], top = rounding_bounds(Qk)
        self._max_err = max(self._max_err, top)

    @property
    def jitter(self):
        """The diagonal added to float32(K) (see JITTER_FACTOR): from every row of Q, each block's
        bounds taken when it is built or first read (the rest read here, once)."""
        if self._jitter is None:
            for k in self.own:
                a, b = self.layout[k]
                if b > a and np.isnan(self._row_err[a]):
                    buf = np.empty((b - a, self.l), np.float32)
                    self._note(k, self.get(k) if self.in_memory(k) else self._fetch(k, buf))
            rows = [self._row_err[a:b] for a, b in (self.layout[k] for k in self.own)]
            self.set_bounds(max((float(r.max()) for r in rows if r.size), default=0.0), self._max_err)
        return self._jitter

    def set_bounds(self, row_err, max_err):
        """The jitter from the largest per-row bound and the largest element bound over every row
        of Q (:func:`rounding_bounds`; when the rows were seen elsewhere: :class:`RoundingBounds`)."""
        err = float(np.sqrt(row_err)) if self.l else 0.0
        self._jitter = JITTER_FACTOR * err + float(max_err) * float(np.sqrt(2.0 * np.log(max(self.l, 2))))

    # -- reading ---------------------------------------------------------------------------------
    @property
    def max_rows(self):
        return max((self.layout[k][1] - self.layout[k][0] for k in self.own), default=0)

    def _nbytes(self, k):
        return self.rows(k) * self.l * 4

    def in_memory(self, k):
        with self._state:
            return k in self._mem

    @property
    def all_in_memory(self):
        return all(self.in_memory(k) for k in self.own)

    def _fetch(self, k, out):
        Qk = self.get(k, out=out)
        if Qk is None:  # absent, damaged or evicted: compute it again and store it
            Qk = self.compute(k, out)
            self.put(k, Qk)
        return Qk

    def __iter__(self):
        """One counted pass: :meth:`blocks`."""
        self.passes += 1
        return self.blocks()

    def blocks(self):
        """(k, row start, row stop, read-only float32 block) for every block, in row order.

        Blocks in memory are returned as they are; the others are read (or recomputed) by a
        background thread into reused buffers, one block ahead: a block is valid until the
        next one is asked for.
        """
        disk = [k for k in self.own if not self.in_memory(k)]
        if disk and self._buffers is None:
            self._buffers = [np.empty((self.max_rows, self.l), np.float32) for _ in range(READ_BUFFERS)]

        def read():
            for n, k in enumerate(disk):
                yield k, self._fetch(k, self._buffers[n % READ_BUFFERS][:self.rows(k)])

        ahead = background(read(), depth=1, name="streamrank-kernel-prefetch") if disk else (x for x in ())
        try:
            for k in self.own:
                if self.in_memory(k):
                    Qk = self.get(k)
                else:
                    kk, Qk = next(ahead)
                    assert kk == k
                    Qk = Qk.view()
                    Qk.flags.writeable = False  # one numba specialisation for every block
                a, b = self.layout[k]
                yield k, a, b, Qk
        finally:
            ahead.close()


def built_kernel_cache(**kwargs):
    """A :class:`KernelCache` (of one partition's rows, with ``queries``), built: what a worker
    makes of the recipe ``KernelCache.spec``."""
    c = KernelCache(**kwargs)
    c.build()
    return c


class RoundingBounds(Pass):
    """Q's largest per-row and element rounding bounds over every block (one pass, where the
    blocks are): the jitter of Q built by workers (:meth:`KernelCache.set_bounds`)."""

    def start(self):
        return [0.0, 0.0]

    def step(self, carry, item):
        _, _, _, Qk = item
        rows, top = rounding_bounds(Qk)
        carry[0] = max(carry[0], float(rows.max()) if rows.size else 0.0)
        carry[1] = max(carry[1], top)

    def merge(self, total, carry):
        return [max(a, b) for a, b in zip(total, carry)]
