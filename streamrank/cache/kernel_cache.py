"""The kernel matrix Q = K(X, X) of exact kernel RankSVM in row blocks, on disk and in memory.

Paper 004 sec. 3.3: Q does not depend on beta, so it is computed once and stored; for large l it
does not fit in memory, so it is split into row blocks, some kept in memory, the others read
when needed. Here Q is computed once in query-aligned row blocks (rows of whole queries, so the
objective can run the pair sweeps block by block), each block as K(X_b, X) - c in float64 (BLAS for
the distance part, see :mod:`streamrank.features.kernels`; c the shift, see JITTER_FACTOR) rounded once
to float32, and stored with the
file, manifest and checksum machinery of :class:`~streamrank.cache.feature_cache.FeatureCache` (one
cache directory ``features-<key16>`` under ``--cache-dir``; a block is a ``(rows, l)`` float32
array). The key holds the dataset fingerprint, the query range, the kernel and its parameters and
the normalisation (with a digest of its fitted arrays): nothing about C or the solver, so every
C of a path (and later runs) reuse the same Q. A damaged or foreign cache is discarded and
rebuilt by FeatureCache; a block that fails its check is recomputed and stored again.

Memory: the first blocks that fit in ``memory_bytes`` stay in memory (a fixed set: passes scan
the blocks cyclically, where LRU would never hit); the others come from disk every pass, mapped
from the cache's files (:meth:`KernelCache._mapped`: a read-only shared mapping of the file's
pages in the page cache, faulted in where the products touch them) as the pass reaches them
(SYNC_MAP), or one block ahead by a thread with at most MAPPED_AHEAD mappings handed out at a
time: pages of a mapped file count in RSS only while mapped, so the pass holds at most what three
read buffers would. A read() copies every byte into a buffer that the pass then reads again,
a core's work beside the products, where a mapping costs only the page table. A block that is
not stored (no cache directory) or fails its check is read or computed into reused buffers
instead. Blocks are checked with ``verify="once"``: the CRC is checked on a block's first
read in the process, then trusted while the file's inode, size and mtime are unchanged (a pass
re-reads all of Q, and the CRC would cost about 40% of the read). The files are only ever replaced
by a rename (a new inode; a mapping keeps the old one alive), never written in place: a file
truncated in place by another program during a pass would end the process (SIGBUS).

Row independence: Q's row i is K(Xn[i], Xn) computed by :class:`~streamrank.features.kernels.PreparedKernel`
in the tile of ``tile_rows`` rows that holds row i of Xn, at position i mod tile_rows (a fixed
call shape, a fixed position, a pinned BLAS thread count; see :mod:`streamrank.features.kernels`). The
tile size depends on l and d alone, so a block's rows are the same bits for any block layout
(any ``block_bytes`` or memory budget), and so is everything computed from Q. The temporaries are
one tile: at most ``kernels.TILE_BYTES`` unless l is so large that ROW_ALIGN rows pass it.
"""

import logging
import mmap
import os
import threading
import time
import zlib

import numba
import numpy as np
from numba import prange

from streamrank._native import numba_cache
from streamrank._native.threads import background
from streamrank.cache.feature_cache import FeatureCache, array_digest
from streamrank.execution.executor import Pass, executor_or_local, partitioned_stream
from streamrank.execution.partitions import block_partitions, partition_bounds
from streamrank.features.kernels import PreparedKernel, ScratchPool, aligned_empty, check_psd_kernel, parallel_tiles
from streamrank.io.query_stream import plan_blocks

log = logging.getLogger("streamrank.cache.kernel_cache")

# block buffers for reads from disk: the one in use, the one queued, the one being read
READ_BUFFERS = 3
# mapped blocks handed out and not yet given back (the one in use, the one ahead); the pass's last
# block stays mapped until the consumer drops it, so at most MAPPED_AHEAD + 1 <= READ_BUFFERS are
# mapped at once (the memory plan's READ_BUFFERS blocks)
MAPPED_AHEAD = 2
# False: every block from disk is read into buffers (tests compare the two)
MAP_BLOCKS = True
# True: blocks are mapped in the pass's own thread as it reaches them, not by a thread one block
# ahead, which OpenMP's workers (spinning between the pass's parallel loops) can starve
SYNC_MAP = True
# mmap flags beyond MAP_SHARED: none. MAP_POPULATE would fault each block's pages in at mapping
# time, in the one thread that maps, while the pass's threads wait; faulted where the products
# first touch them, the threads share the work (the bits do not depend on it)
_MAP_FLAGS = 0
# Q is stored as float32(K - c) with a shift c (below), and the objective works with
# Q' = float32(K - c) + c 1 1^T + jitter I. The rounding error E = float32(K - c) - (K - c) (plus
# the float64 evaluation error of K, below) makes float32(K - c) + c 1 1^T indefinite where K's
# spectrum has decayed to nothing: TRON then finds directions with beta^T Q beta < 0 and meets
# d.Hd < 0 in CG, where a preconditioner's M^-1 amplifies exactly those directions.
#
# The jitter is a bound on ||E||_2 that holds for every matrix, not only for independent errors.
# The bound for a matrix of independent entries (2 max_i ||E_i|| + max |E_ij| sqrt(2 ln l), the
# semicircle edge) does not hold on query-level-normalised LETOR data at small gamma: there K is
# close to 1 1^T, many rows are exact or near duplicates (documents with the same normalised
# features), and their rounding errors are the SAME numbers in many rows, a coherent E whose norm
# grows like l max|E_ij| rather than sqrt(l) max|E_ij|. So:
#
#   (1) Weyl: lambda_min(Q') >= lambda_min(K) - ||sym(E)||_2 + jitter, and lambda_min(K) >= 0 (a PSD
#       kernel); only the symmetric part sym(E) = (E + E^T) / 2 enters beta^T Q' beta.
#   (2) ||sym(E)||_2 <= ||sym(E)||_inf = max_i sum_j |E_ij + E_ji| / 2 (the 2-norm of a symmetric
#       matrix is its spectral radius, at most any induced norm; Gershgorin).
#   (3) round to nearest: |E_ij| <= spacing(float32(K_ij - c)) / 2 =: h_ij, a function of the
#       stored number alone, so sum_j |E_ij + E_ji| / 2 <= (sum_j h_ij + sum_j h_ji) / 2: row i's
#       sum and column i's (the stored (j, i) need not be the stored (i, j): the two are computed
#       in different tiles and may round to neighbouring float32 numbers).
#   (4) the float64 values themselves: rbf's squared distance ||x||^2 + ||y||^2 - 2 x.y (BLAS, d
#       terms) is within 2 d eps64 (||x||^2 + ||y||^2) of the exact one (Higham, Accuracy and
#       Stability, eq. 3.5: |fl(x.y) - x.y| <= gamma_d |x|.|y|, gamma_d ~ d eps64), so
#       |K64 - K| <= |K| (gamma 2 d eps64 (n_i + n_j) + EVAL_ULPS eps64), n_i = ||x_i||^2;
#       laplacian's L1 distance (a sum of d terms) the same with n_i = ||x_i||_1 and half the
#       factor; poly's only through EVAL_ULPS (its dot products are not bounded here).
#
# jitter = max_i [ (sum_j h_ij + sum_j h_ji) / 2 + sum_j |K_ij| eps64 (EVAL_ULPS + a_i + a_j) ],
# a_i the row's factor of (4) (JITTER_FACTOR = 1: no margin is needed, the bound holds for every
# matrix). It is loose by about 2 where the rounding errors are spread uniformly (|E_ij| averages
# h_ij / 2) and by up to sqrt(l) / 2 beside the independent-entry bound where they are independent.
# The shift c keeps this small: at a small gamma K - c is 10 to 1,000 times smaller than K where K
# is near 1, and so is its spacing. c drops out of the
# pair loss (a constant added to every score of a query moves no pair margin), so it costs one
# rank-one term per pass (the objective's) and nothing else. The jitter moves the optimum by
# about jitter ||beta||^2 / 2.
JITTER_FACTOR = 1.0
EVAL_ULPS = 8.0
_EPS64 = float(np.finfo(np.float64).eps)
# spacing / 2 of a float32 number by its biased exponent e (bits 23-30): spacing = 2^(e - 150)
# for normal numbers (e >= 1), 2^-149 for zero and subnormals (e = 0)
_EXP = np.arange(256)
_HALF_SPACING = np.ldexp(0.5, np.maximum(_EXP, 1) - 150)
# rows of K sampled for the shift c (their median)
SHIFT_ROWS = 64


@numba.njit(cache=True, nogil=True, parallel=True)
def _rounding_bounds(Q, bits, half, shift, scale, r0, rows, top_exp):
    """rows[i] = sum_j (JITTER_FACTOR half[e_ij] / 2 + |Q_ij + shift| eps64 (EVAL_ULPS + scale[r0 + i]
    + scale[j])) in increasing j, top_exp[i] = max_j e_ij; e_ij the biased exponent of the float32
    Q[i, j] (``bits``: its int32 view; the sign bit is masked)."""
    n, m = bits.shape
    for i in prange(n):
        s = 0.0
        t = 0
        si = EVAL_ULPS + scale[r0 + i]
        for j in range(m):
            e = (bits[i, j] >> 23) & 0xFF
            s += 0.5 * JITTER_FACTOR * half[e] + abs(np.float64(Q[i, j]) + shift) * _EPS64 * (si + scale[j])
            t = max(t, e)
        rows[i] = s
        top_exp[i] = t


@numba.njit(cache=True, nogil=True, parallel=True)
def _column_bounds(bits, half, cols):
    """cols[j] += sum_i JITTER_FACTOR half[e_ij] / 2 in increasing i (columns split across threads)."""
    n, m = bits.shape
    n_chunks = (m + 1023) // 1024
    for c in prange(n_chunks):
        for i in range(n):
            for j in range(c * 1024, min(m, c * 1024 + 1024)):
                cols[j] += 0.5 * JITTER_FACTOR * half[(bits[i, j] >> 23) & 0xFF]


def rounding_bounds(Qb, shift=0.0, scale=None, r0=0, cols=None):
    """(per-row sum_j (h_ij / 2 + |K64_ij - K_ij| bound), max_ij h_ij) of a float32 block of rows
    r0.. of float32(K - shift), h_ij = spacing_ij / 2 (module comment above JITTER_FACTOR);
    ``scale`` is a_i of (4) per row of Q (None: zeros). With ``cols`` (float64, one per column of
    Q), adds sum_i h_ij / 2 to cols[j]: the column half of (3). The jitter is the largest
    row + column sum. The NumPy twin is in tests/cache/test_kernel_jitter.py."""
    n, m = Qb.shape
    rows, top = np.zeros(n), np.zeros(n, np.int64)
    if n and m:
        scale = np.zeros(m) if scale is None else np.ascontiguousarray(scale, np.float64)
        Qb = np.ascontiguousarray(Qb)
        bits = Qb.view(np.int32)
        _rounding_bounds(Qb, bits, _HALF_SPACING, float(shift), scale, int(r0), rows, top)
        if cols is not None:
            _column_bounds(bits, _HALF_SPACING, cols)
        return rows, float(_HALF_SPACING[top.max()])
    return rows, 0.0


def eval_scale(Xn, kernel, gamma):
    """a_i of the float64 evaluation bound (4) per row of Xn (module comment above JITTER_FACTOR)."""
    d = Xn.shape[1]
    if kernel == "rbf":
        return 2.0 * d * gamma * np.einsum("ij,ij->i", Xn, Xn)
    if kernel == "laplacian":
        return d * gamma * np.abs(Xn).sum(axis=1)
    return np.zeros(Xn.shape[0])


def kernel_shift(prepared, Xn):
    """c: the median of K over SHIFT_ROWS rows spread evenly over Xn (a function of Xn alone),
    as a float32 number (so c is exact in both precisions)."""
    l = Xn.shape[0]
    if l == 0:
        return 0.0
    idx = np.unique(np.linspace(0, l - 1, min(l, SHIFT_ROWS)).astype(np.int64))
    K = prepared(Xn[idx])
    if prepared.kernel in UNBOUNDED_KERNELS:
        check_storable(K, prepared)
    return float(np.float32(np.median(K)))


# kernels whose values are not bounded by 1 on finite rows: their values, shifted, must fit the
# float32 Q is stored in
UNBOUNDED_KERNELS = ("poly", "linear")
FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_storable(K, prepared):
    """Raise KernelRangeError when kernel values ``K`` (float64, shifted) do not fit float32, where Q
    is stored: the kernel's settings overflow it on these data."""
    top = float(np.max(np.abs(K), initial=0.0))
    if not top <= FLOAT32_MAX:
        from streamrank.errors import KernelRangeError
        what = ("(gamma x.y + coef0)^degree" if prepared.kernel == "poly" else "x.y")
        raise KernelRangeError(
            f"the {prepared.kernel} kernel {what} reaches {top:.4g}, beyond float32's range ({FLOAT32_MAX:.3g}) "
            f"where exact kernel RankSVM stores Q, with gamma={prepared.gamma:g}, coef0={prepared.coef0:g}, "
            f"degree={prepared.degree}: use a smaller gamma, coef0 or degree, or normalize=zscore")


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

    stream = partitioned_stream(dataset, executor, block_bytes=block_bytes, queries=(q0, q1))
    executor_or_local(executor).run(_NormalizedRows(normalizer), stream, collect=put)
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
                 memory_bytes, cache_dir=None, size_cap=None, partition_rows=None, queries=None, tile_threads=None):
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
        self._prepared = None
        # Q is stored as float32(K - shift) (module comment above JITTER_FACTOR); the key holds the
        # shift, so a cache stored with another shift (or none: float32(K)) is never read as one
        self.shift = kernel_shift(self._kernel(), self.Xn)
        self.eval_scale = eval_scale(self.Xn, kernel, gamma)
        key = {"kind": "kernel-matrix", **key_material, **self.kernel_params, "rows": l,
               "rows_digest": array_digest(self.Xn), "shift": self.shift}
        if queries is not None:  # a part's own store: workers never write one cache directory together
            key["part"] = [int(queries[0]), int(queries[1])]
        # the partition of each block this cache passes over (its own), in pass order
        self.block_partition = block_partitions(self.block_queries, parts)[self.own]
        super().__init__(cache_dir, key, layout, l, np.float32, memory_bytes=memory_bytes, size_cap=size_cap,
                         verify="once")
        self._buffers = None
        self.tile_threads = tile_threads  # None: kernels.parallel_tiles' count; 1: one tile at a time
        self.build_seconds = 0.0
        self.computed_blocks = 0
        self.passes = 0
        self._jitter = None
        self._tile_scratch = None  # build()'s ScratchPool while it runs
        self._row_err = np.full(l, np.nan)  # rounding_bounds per row, as blocks are seen
        self._col_err = np.zeros(l)  # and per column of Q, summed over the blocks seen

    # -- computing -------------------------------------------------------------------------------
    def _kernel(self):
        if self._prepared is None:
            p = self.kernel_params
            self._prepared = PreparedKernel(self.Xn, p["kernel"], p["gamma"], p["degree"], p["coef0"])
        return self._prepared

    def compute(self, k, out):
        """Block k = K(Xn[a:b], Xn) - shift rounded to float32 into ``out`` (float64 in between,
        the shift subtracted in float64), in the kernel's tiles by row index in Xn (module
        docstring, "Row independence")."""
        a, b = self.layout[k]
        prep, c = self._kernel(), self.shift
        T = prep.tile_rows

        unbounded = prep.kernel in UNBOUNDED_KERNELS

        def tile(At, s, e, p, bufs):
            K = prep.into(At, bufs[0])
            K -= c
            if unbounded:
                check_storable(K[p:p + e - s], prep)
            out[s:e] = K[p:p + e - s]

        if b > a:  # tile_threads 1: one tile buffer at a time (the memory plan's choice), the same bits
            pool = self._tile_scratch  # build()'s, kept from block to block
            parallel_tiles(self.Xn[a:b], a, T, tile,
                           pool.take if pool is not None else (lambda: [aligned_empty((T, self.l))]),
                           pool.give if pool is not None else None, threads=self.tile_threads)
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
            T = self._kernel().tile_rows
            # the tile threads' buffers, kept from block to block for the build only (the memory
            # plan counts them while Q is built, not during the passes)
            self._tile_scratch = ScratchPool(lambda: [aligned_empty((T, self.l))])

            def made():
                for n, k in enumerate(missing):
                    out = (np.empty((self.rows(k), self.l), np.float32) if k in kept
                           else bufs[n % READ_BUFFERS][:self.rows(k)])
                    yield k, self.compute(k, out)

            try:
                for k, Qk in background(made(), depth=1, name="streamrank-kernel-build"):
                    self.put(k, Qk, take=k in kept)
                    self._note(k, Qk)
            finally:
                self._tile_scratch = None
        _ = self.jitter  # read now: the blocks not seen yet are read once for it
        self.build_seconds += time.perf_counter() - t0
        return self.build_seconds

    def _note(self, k, Qk):
        """Record block k's rounding bounds for the jitter."""
        a, b = self.layout[k]
        self._row_err[a:b], _ = rounding_bounds(Qk, self.shift, self.eval_scale, a, self._col_err)

    @property
    def jitter(self):
        """The diagonal added to float32(K) (see JITTER_FACTOR): from every row of Q, each block's
        bounds taken when it is built or first read (the rest read here, once)."""
        if self._jitter is None:
            for k in self.own:
                a, b = self.layout[k]
                if b > a and np.isnan(self._row_err[a]):
                    Qk = self.get(k) if self.in_memory(k) else self._mapped(k) if MAP_BLOCKS else None
                    self._note(k, Qk if Qk is not None else self._fetch(k, np.empty((b - a, self.l), np.float32)))
                    Qk = None
            # the rows' sums and the columns' over the blocks this cache holds (all of Q, except
            # for a partition's cache on a worker, whose jitter RoundingBounds makes)
            rows = [self._row_err[a:b] + self._col_err[a:b] for a, b in (self.layout[k] for k in self.own)]
            self.set_bounds(max((float(r.max()) for r in rows if r.size), default=0.0))
        return self._jitter

    def set_bounds(self, row_err, max_err=None):
        """The jitter: the largest per-row bound over every row of Q (:func:`rounding_bounds`; when
        the rows were seen elsewhere: :class:`RoundingBounds`). ``max_err`` (an element bound) is
        accepted and not used."""
        self._jitter = float(row_err)

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

    def _mapped(self, k):
        """Block k as a read-only float32 array over its stored file (mmap, shared, read-only), or
        None when it is not stored here or its file is not what the manifest says (size; the CRC
        on its first use in this process, or every use with ``verify="always"``):
        the caller then reads it (which drops a damaged block) or computes it. The mapping ends
        when the last reference to the array goes."""
        if self.dir is None:
            return None
        with self._state:
            entry = self._blocks.get(k)
        if entry is None or entry["bytes"] != self._nbytes(k) or entry["bytes"] == 0:
            return None
        try:
            fd = os.open(self.dir / entry["file"], os.O_RDONLY)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if st.st_size != entry["bytes"]:
                return None
            m = mmap.mmap(fd, st.st_size, flags=mmap.MAP_SHARED | _MAP_FLAGS, prot=mmap.PROT_READ)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self.verify != "once" or self._verified.get(k) != sig:
            if zlib.crc32(m) != entry["crc32"]:
                m.close()
                return None
            self._verified[k] = sig
        self.stats.disk_reads += 1
        self.stats.bytes_read += st.st_size
        return np.frombuffer(m, np.float32).reshape(self.rows(k), self.l)  # read-only: m is

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

        Blocks in memory are returned as they are; the others are mapped from their files (or,
        when not stored, read or recomputed into reused buffers) by a background thread, one
        block ahead: a block is valid until the next one is asked for.
        """
        disk = [k for k in self.own if not self.in_memory(k)]
        if MAP_BLOCKS and SYNC_MAP and self.dir is not None:
            yield from self._blocks_mapped_here(disk)
            return
        tokens = threading.Semaphore(MAPPED_AHEAD)

        def buffer(n, k):
            if self._buffers is None:
                self._buffers = [np.empty((self.max_rows, self.l), np.float32) for _ in range(READ_BUFFERS)]
            return self._buffers[n % READ_BUFFERS][:self.rows(k)]

        def read():
            for n, k in enumerate(disk):
                tokens.acquire()  # given back when the consumer asks for the block after it
                Qk = self._mapped(k) if MAP_BLOCKS else None
                yield k, (self._fetch(k, buffer(n, k)) if Qk is None else Qk)

        ahead = background(read(), depth=1, name="streamrank-kernel-prefetch") if disk else (x for x in ())
        held = False
        try:
            for k in self.own:
                if self.in_memory(k):
                    Qk = self.get(k)
                else:
                    if held:
                        tokens.release()
                    Qk = None  # this generator's reference to the last mapping goes first
                    kk, Qk = next(ahead)
                    held = True
                    assert kk == k
                    Qk = Qk.view()
                    Qk.flags.writeable = False  # one numba specialisation for every block
                a, b = self.layout[k]
                yield k, a, b, Qk
        finally:
            tokens.release(MAPPED_AHEAD + 1)  # a reader waiting for a token sees the stop
            ahead.close()

    def _blocks_mapped_here(self, disk):
        """:meth:`blocks` with the blocks on disk mapped in this thread (SYNC_MAP): the consumer's
        block and the one being mapped are the only mappings alive."""
        n = 0
        for k in self.own:
            if self.in_memory(k):
                Qk = self.get(k)
            else:
                Qk = None  # this generator's reference to the last mapping goes first
                Qk = self._mapped(k)
                if Qk is None:
                    if self._buffers is None:
                        self._buffers = [np.empty((self.max_rows, self.l), np.float32) for _ in range(READ_BUFFERS)]
                    Qk = self._fetch(k, self._buffers[n % READ_BUFFERS][:self.rows(k)])
                n += 1
                Qk = Qk.view()
                Qk.flags.writeable = False
            a, b = self.layout[k]
            yield k, a, b, Qk


def built_kernel_cache(**kwargs):
    """A :class:`KernelCache` (of one partition's rows, with ``queries``), built: what a worker
    makes of the recipe ``KernelCache.spec``."""
    c = KernelCache(**kwargs)
    c.build()
    return c


class RoundingBounds(Pass):
    """Q's largest per-row and element rounding bounds over every block (one pass, where the
    blocks are): the jitter of Q built by workers (:meth:`KernelCache.set_bounds`); ``cache`` gives
    the shift and the evaluation scales."""

    def __init__(self, cache=None):
        self.shift = 0.0 if cache is None else cache.shift
        self.scale = None if cache is None else cache.eval_scale

    returns = True

    def start(self):
        return 0.0

    def step(self, carry, item):
        _, a, b, Qk = item
        cols = np.zeros(Qk.shape[1])
        rows, top = rounding_bounds(Qk, self.shift, self.scale, a, cols)
        return a, b, rows, cols  # column sums of every block are needed before the largest row

    def merge(self, total, carry):
        return total

    @staticmethod
    def jitter(kept):
        """The jitter from the blocks' (a, b, rows, cols) kept by a pass of this."""
        if not kept:
            return 0.0
        cols = np.zeros(len(kept[0][3]))
        for _, _, _, c in kept:
            cols += c
        return max((float((r + cols[a:b]).max()) for a, b, r, _ in kept if b > a), default=0.0)


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
