"""Blocks of mapped features Phi = map(normalize(X)) for the objective (paper 000).

What is kept of a row (``rows``): ``features``, phi(x) in float32; or ``kernel``, K(x, L) in float32
for a Nystroem map whose projection keeps every landmark (k = m), the objective applying P to its
vectors (phi . w = K (P w), Phi^T u = P^T (K^T u)): the kernel alone costs about a fifth of the
map, so the first pass costs about K(x, L) alone (:func:`choose_rows` decides).

Three ways to have the rows for every pass, all giving the same float32 values:

- ``memory``: Phi fits in the memory share of the budget: mapped once, kept;
- ``cache``: mapped once and stored on disk in a :class:`~streamrank.cache.feature_cache.FeatureCache`
  (under ``--cache-dir``), read back every pass into a reused buffer;
- ``recompute``: the raw rows are re-read and mapped every pass into a reused buffer.

Between ``cache`` and ``recompute`` the first pass measures both rates (rows mapped per second,
bytes of mapped rows read per second) and :func:`featurecache.choose` decides; the choice is
logged and can be forced. ``block_bytes`` counts the block's raw rows (4 d + 4 bytes each), as
every other pass over the same data does: the memory plan
(:func:`streamrank.training.linear.plan_blocks`) sizes it by what a mapped row holds (its raw row,
float64 copy and two float32 mapped rows), so one size serves the raw passes and the mapped ones.
"""

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from streamrank.cache.feature_cache import FeatureCache, array_digest, choose
from streamrank.objectives.rank_objective import BlockSource, SourceBlock

log = logging.getLogger("streamrank.objectives.mapped_source")

MODES = ("auto", "memory", "cache", "recompute")


def _check_mapped(Phi, fmap, row0):
    """Raise KernelRangeError when a mapped row is not finite: a kernel value past float32's range (the
    map computes in float64 and stores float32) makes inf, and inf - inf a NaN pair difference,
    which the pair sums would take as no loss: a model trained on them scores NaN."""
    if np.isfinite(Phi.sum(dtype=np.float64)):  # one pass; a sum of finite float32 stays finite in float64
        return
    from streamrank.errors import KernelRangeError
    r, j = (int(v) for v in np.argwhere(~np.isfinite(Phi))[0])
    p = fmap.params()
    what = ", ".join(f"{k}={p[k]:g}" for k in ("gamma", "coef0") if isinstance(p.get(k), (int, float)))
    degree = f", degree={p['degree']}" if p.get("kernel") == "poly" else ""
    raise KernelRangeError(f"data row {row0 + r + 1}: its mapped feature {j + 1} of {Phi.shape[1]} ({p['kind']}) is "
                           f"{float(Phi[r, j])!r}, beyond float32's range where mapped rows are kept "
                           f"({p.get('kernel')} kernel, {what}{degree}): use a smaller gamma, coef0 or degree, or "
                           f"normalize=zscore")


# Largest relative rounding error (Nystroem.kernel_rows_error) at which float32 kernel rows stand in
# for float32 phi. TRON stops at ||g|| <= tol ||g0||, tol 1e-3 by default: a gradient 1e-5 off in
# norm is two orders below what the stopping rule resolves, and the optimum's objective moves by
# the loss's change at fixed w, which averages the rows' errors (1M generated rows, 4e-6 relative
# rounding: objectives 2e-8 apart, tools/bench_kernel_big.py --only equivalence).
KERNEL_ROWS_TOL = 1e-5


def choose_rows(fmap, force=None):
    """("features" | "kernel", why): what a MappedSource keeps of each row for ``fmap``. Kernel
    rows for a Nystroem map whose projection keeps every landmark (k = m; with fewer, K's rows are
    wider than phi's) and whose float32 kernel rows are within KERNEL_ROWS_TOL of the float64
    oracle; phi otherwise. ``force`` ("features" or "kernel") overrides where it can."""
    if getattr(fmap, "kind", None) != "nystroem":
        return "features", "the map's features"
    m, k = int(fmap.landmarks_.shape[0]), int(fmap.n_components_)
    if force == "features":
        return "features", "phi rows (forced)"
    if k < m:
        return "features", f"phi rows: the projection keeps {k} of {m} landmarks, so kernel rows would be wider"
    err = max(fmap.kernel_rows_error())
    if force == "kernel":
        return "kernel", f"kernel rows (forced; float32 rounding {err:.1e} relative)"
    if err > KERNEL_ROWS_TOL:
        return "features", (f"phi rows: float32 kernel rows would err by {err:.1e} relative through the "
                            f"projection (more than {KERNEL_ROWS_TOL:g})")
    return "kernel", f"kernel rows K(x, L), projection applied to vectors (float32 rounding {err:.1e} relative)"


class MappedSource(BlockSource):
    """Iterate over SourceBlocks of mapped rows (BlockSource with a feature map)."""

    def __init__(self, dataset, fmap, normalizer, *, block_bytes, memory_bytes, queries=None, levels=None,
                 cache_dir=None, mode="auto", fingerprint=None, cache_size=None, partition_rows=None,
                 buffer_pool=None, rows="features"):
        self.spec = (MappedSource, dict(dataset=dataset, fmap=fmap, normalizer=normalizer, block_bytes=block_bytes,
                                        memory_bytes=memory_bytes, queries=queries, levels=levels,
                                        cache_dir=cache_dir, mode=mode, fingerprint=fingerprint or dataset.fingerprint,
                                        cache_size=cache_size, partition_rows=partition_rows, rows=rows))
        self.dataset = dataset
        self.fmap = fmap
        self.normalizer = normalizer
        # what is kept of each row (module docstring): "features" phi, or "kernel" K(x, L) with the
        # projection applied to vectors by the objective (RankObjective.projection)
        self.rows = rows
        self.projection = fmap.projection_ if rows == "kernel" else None
        self.m = int(fmap.landmarks_.shape[0]) if rows == "kernel" else int(fmap.n_components_)
        q0, q1 = queries if queries is not None else (0, dataset.n_queries)
        self.n_rows = int(dataset.query_ptr[q1] - dataset.query_ptr[q0])
        need = self.n_rows * (4 * self.m + 4)
        self.in_memory = mode in ("auto", "memory") and need <= memory_bytes
        if mode == "memory" and not self.in_memory:
            log.warning("mapped rows need %.0f MB, more than the memory share of %.0f MB: not kept in memory",
                        need / 1e6, memory_bytes / 1e6)
        self.memory_bytes = need if self.in_memory else 0
        self.stream = dataset.stream(block_bytes=block_bytes, queries=(q0, q1), partition_rows=partition_rows,
                                     buffer_pool=buffer_pool)
        self.levels = np.asarray(levels, np.float64)
        self.passes = 0
        self.rows_read = 0
        self.mode = "memory" if self.in_memory else ("recompute" if mode == "auto" and cache_dir is None else mode)
        if self.mode == "cache" and cache_dir is None:
            raise ValueError("the feature cache needs cache_dir")
        self._cache = None
        self._meta = None
        self._ranks = {}
        self._disk = None
        if not self.in_memory and cache_dir is not None and self.mode in ("auto", "cache"):
            layout = [(int(dataset.query_ptr[a]), int(dataset.query_ptr[b]))
                      for a, b in zip(self.stream.bounds[:-1], self.stream.bounds[1:])]
            key = {"dataset": fingerprint or dataset.fingerprint, "map": fmap.params(),
                   "normalize": self.normalizer.kind,
                   "normalize_arrays": array_digest(*[a for a in (self.normalizer.mean_, self.normalizer.scale_)
                                                      if a is not None])}
            if rows == "kernel":
                key["rows"] = "kernel"
            # verify="once", as the kernel cache: each block's CRC is checked on its first read in this
            # process, then trusted while its inode, size and mtime hold; checked on every read it took
            # about 40% of a later pass (docs/design.md, "Measurements behind the code")
            self._disk = FeatureCache(cache_dir, key, layout, self.m, dtype=np.float32, size_cap=cache_size,
                                      verify="once")
        self._pool = buffer_pool
        # a pooled buffer is taken afresh each pass (_items): the pool may have grown for another partition
        self._buf = (None if self.in_memory or buffer_pool is not None
                     else np.empty((self.stream.max_block_rows, self.m), np.float32))
        self._buf2 = None  # the second buffer of cache reads, made on the first cached pass
        self._map_seconds = 0.0
        self._map_rows = 0
        self.reason = "mapped rows fit in memory" if self.in_memory else ""

    def _identity(self):
        return np.zeros((1, self.m)), np.ones((1, self.m))

    def _map(self, block, out):
        t = time.perf_counter()
        Xn = self.normalizer.transform(block.X, block.query_ptr)
        if self.rows == "kernel":
            out = np.empty((Xn.shape[0], self.m), np.float32) if out is None else out
            Phi = self.fmap.kernel_rows(Xn, row0=block.start, out=out)  # tiles by dataset row
        else:
            Phi = self.fmap.transform(Xn, dtype=np.float32, out=out, row0=block.start)  # tiles by dataset row
        _check_mapped(Phi, self.fmap, block.start)
        self._map_seconds += time.perf_counter() - t
        self._map_rows += block.X.shape[0]
        return Phi

    def _item(self, Phi, block, k):
        rank = self._rank(k, block)
        shift, scale = self._identity()
        return SourceBlock(Phi, rank, block.query_ptr.copy(), block.q_start, block.q_stop, shift, scale, 0)

    def _decide(self):
        """Cache or recompute, from measured rates: the first mapped block's rows/s against
        reading stored block 0 back. Made after the first block, so a run that recomputes never
        writes the rest of the cache, and a complete cache left by an earlier run is read from
        the first pass on."""
        if self.mode == "recompute":
            self.reason = "recompute (forced)"
            log.info("feature cache: %s", self.reason)
            return
        if self._disk is None or self._disk.rows(0) == 0 or 0 not in self._disk.present:
            self.mode = "recompute"
            self.reason = ("no feature cache: use cache_dir=DIR to store mapped rows" if self._disk is None
                           else "the feature cache was refused space (cache_size or a full disk)")
            log.info("feature cache: %s", self.reason)
            return
        read_bps = self._disk.measure_read(0)
        map_rps = self._map_rows / max(self._map_seconds, 1e-9) if self._map_rows else float("inf")
        forced = None if self.mode == "auto" else self.mode
        self.mode, self.reason = choose(read_bps, map_rps, 4 * self.m, force=forced)
        log.info("feature cache: %s", self.reason)

    def _cached_items(self):
        """A pass over the feature cache: block k + 1 is read (and its crc32 checked) by a
        thread into the other of two buffers while block k is used, as QueryStream does for rows."""
        bufs = self._two_buffers()
        n = self._disk.n_blocks

        def read(k):
            return self._disk.get(k, out=bufs[k % 2][:self._disk.rows(k)])

        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamrank-cache-read")
        try:
            fut = pool.submit(read, 0)
            for k, (block, _, _) in enumerate(self.stream):
                Phi = fut.result()
                if k + 1 < n:
                    fut = pool.submit(read, k + 1)
                if Phi is None:  # damaged or evicted: map it again and put it back
                    Phi = self._map(block, bufs[k % 2][:block.n_rows])
                    self._disk.put(k, Phi)
                yield self._item(Phi, block, k)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _two_buffers(self):
        """The pass's two block buffers (the memory plan counts two mapped rows a row)."""
        if self._buf2 is None:
            self._buf2 = (np.empty_like(self._buf) if self._pool is None
                          else self._pool.array(("mapped", 1), self._buf.shape))
        return self._buf, self._buf2

    def _items(self, first):
        if self._pool is not None and not self.in_memory:
            self._buf, self._buf2 = self._pool.array(("mapped", 0), (self.stream.max_block_rows, self.m)), None
        decided = not first or self.in_memory
        if decided and self.mode == "cache":
            yield from self._cached_items()
            return
        if decided or self._disk is None:
            yield from self._mapped_items(decided)
            return
        yield from self._first_items()

    def _mapped_items(self, decided):
        """A pass that maps every block (memory, recompute; the first pass without a cache)."""
        for k, (block, _, _) in enumerate(self.stream):
            Phi = self._map(block, None if self.in_memory else self._buf[:block.n_rows])
            if not decided:
                self._decide()
                decided = True
            yield self._item(Phi, block, k)

    def _first_items(self):
        """The first pass with a cache: block 0 is mapped and stored, then :meth:`_decide`; when
        it caches, each later block is read if an earlier run stored it, else mapped and stored
        by a thread while the next block is mapped into the other of two buffers (a buffer is
        used again once its block is on disk), so the pass costs the mapping or the disk's write
        rate, whichever is slower, rather than their sum."""
        bufs = self._two_buffers()
        pending = [None, None]
        writer = None
        try:
            for k, (block, _, _) in enumerate(self.stream):
                slot = k % 2
                if pending[slot] is not None:
                    pending[slot].result()  # its block is on disk, the buffer free (raises what put raised)
                    pending[slot] = None
                buf = bufs[slot][:block.n_rows]
                Phi = self._disk.get(k, out=buf) if k and self.mode == "cache" else None
                if Phi is None:  # not cached yet, damaged or evicted: map it (and store it when caching)
                    Phi = self._map(block, buf)
                    if k == 0:
                        self._disk.put(0, Phi)  # now: _decide times reading it back
                        self._decide()
                    elif self.mode == "cache":
                        if writer is None:
                            writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamrank-cache-write")
                        pending[slot] = writer.submit(self._disk.put, k, Phi)
                yield self._item(Phi, block, k)
            for f in pending:
                if f is not None:
                    f.result()
        finally:
            if writer is not None:
                writer.shutdown(wait=True, cancel_futures=True)

    def _after_first_pass(self):
        """Nothing left to decide: :meth:`_decide` ran after the first block."""
