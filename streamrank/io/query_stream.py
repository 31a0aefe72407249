"""Query-aligned row blocks inside a byte budget, read ahead by a background thread.

A :class:`QueryStream` yields ``(block, start, stop)``: rows ``start:stop`` of the dataset, never
splitting a query, each block at most ``block_bytes`` unless one query alone is larger (it is
still yielded whole, with a warning). Blocks are planned from the in-memory ``query_ptr`` only, so
the layout is known before any row is read and every pass reads the same contiguous slices.

Every block comes from :meth:`streamrank.io.dataset.Dataset.read`, which checks each value to be
finite the first time this process reads its rows (any format version, whoever wrote the file): a
block is yielded finite or the pass ends with an InputError naming the file, row and feature. The
check runs on the prefetch thread, fused with the read (no pass over the rows of its own).

Rows are read into two buffers allocated once per stream and reused by every pass (double
buffering: the prefetch thread fills one while the caller works on the other). A block's arrays
are therefore valid until the caller asks for the next block; copy what must outlive that.
Fresh allocations for every block would cost page faults on every pass (docs/design.md,
"Measurements behind the code").
"""

import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from streamrank._native.memory import aligned_empty
from streamrank.execution.partitions import block_partitions, partition_bounds
from streamrank.settings import DEFAULT_MEMORY_BUDGET
from streamrank.units import budget_bytes, format_size, parse_size

# Share of --memory-budget given to one raw block: a pass holds the block being used, the one
# being prefetched, and float64 / mapped working copies of the block (up to ~4x the raw bytes).
BLOCK_SHARE_OF_BUDGET = 1 / 8


@dataclass
class Block:
    """Rows ``start:stop`` of a dataset: whole queries ``q_start:q_stop``.

    ``query_ptr`` is local: query ``q_start + k`` is rows ``query_ptr[k]:query_ptr[k+1]`` of ``X``.
    """

    X: np.ndarray
    y: np.ndarray
    query_ptr: np.ndarray
    start: int
    stop: int
    q_start: int
    q_stop: int

    @property
    def n_rows(self):
        return self.stop - self.start

    @property
    def n_queries(self):
        return self.q_stop - self.q_start


def plan_blocks(query_ptr, row_bytes, block_bytes, q_start=0, q_stop=None):
    """Query indices at block boundaries: block k holds queries ``bounds[k]:bounds[k+1]``.

    Greedy: whole queries are added while the block stays within ``block_bytes``; a query that
    alone exceeds it becomes a block of its own.
    """
    q_stop = len(query_ptr) - 1 if q_stop is None else q_stop
    max_rows = max(1, int(block_bytes // max(row_bytes, 1)))
    bounds = [q_start]
    q = q_start
    while q < q_stop:
        limit = query_ptr[q] + max_rows
        # last query whose end is within the limit (at least one query per block)
        nxt = int(np.searchsorted(query_ptr, limit, side="right")) - 1
        nxt = min(max(nxt, q + 1), q_stop)
        bounds.append(nxt)
        q = nxt
    return np.asarray(bounds, np.int64)


def stream_of(dataset, **kwargs):
    """``dataset.stream(**kwargs)``: the recipe a worker follows to read its part of a stream."""
    return dataset.stream(**kwargs)


stream_of.accepts_buffer_pool = True  # streamrank.execution.remote.BufferPool


class QueryStream:
    """Iterate over a dataset in query-aligned blocks.

    Parameters
    ----------
    dataset : streamrank.Dataset
    block_bytes : int or str, optional
        Raw bytes of one block (X and y). Default: ``memory_budget * BLOCK_SHARE_OF_BUDGET``.
    memory_budget : int or str, optional
        The run's whole budget (default 2GB); used only to derive ``block_bytes``.
    queries : (int, int), optional
        Stream only the contiguous range of queries ``[q0, q1)``.
    prefetch : bool
        Read the next block in a background thread while the caller works on this one.
    reuse_buffers : bool
        Read into two buffers reused by every pass (default). False gives every block arrays of
        its own (for a caller that keeps them all, e.g. an in-memory tier).
    row_bytes : int, optional
        Bytes one row costs the caller, for planning (default: the stored row, 4 d + 4). A
        feature map that turns d features into m wider ones plans with its mapped width.
    partition_rows : int, optional
        Rows of one partition (:mod:`streamrank.execution.partitions`; default
        ``PARTITION_ROWS``): no block straddles a partition boundary. ``partitions`` holds the
        boundaries (query indices), ``block_partition`` the partition of each block.
    """

    spec: object = None  # (function, keywords) that make this stream in another process (Dataset.stream)

    def __init__(self, dataset, *, block_bytes=None, memory_budget=None, queries=None, prefetch=True,
                 reuse_buffers=True, row_bytes=None, partition_rows=None, buffer_pool=None):
        self.dataset = dataset
        # the block's size is the stream's own share of a budget, or a caller's plan (block_bytes)
        self.planned = block_bytes is not None
        budget = None
        if block_bytes is None:
            budget = budget_bytes(memory_budget if memory_budget is not None else DEFAULT_MEMORY_BUDGET)
            block_bytes = int(budget * BLOCK_SHARE_OF_BUDGET)
        self.block_bytes = parse_size(block_bytes, "block_bytes")
        q0, q1 = (0, dataset.n_queries) if queries is None else (int(queries[0]), int(queries[1]))
        if not 0 <= q0 <= q1 <= dataset.n_queries:
            raise ValueError(f"queries must lie within [0, {dataset.n_queries}]; got {queries}")
        self.row_bytes = int(row_bytes) if row_bytes else 4 * dataset.n_features + 4
        qp = dataset.query_ptr
        self.partition_rows = partition_rows
        self.partitions = partition_bounds(qp, q0, q1, partition_rows)
        parts = self.partitions
        self.bounds = np.concatenate([[q0]] + [plan_blocks(qp, self.row_bytes, self.block_bytes, a, b)[1:]
                                               for a, b in zip(parts[:-1], parts[1:])]).astype(np.int64)
        self.block_partition = block_partitions(self.bounds, parts)
        self.prefetch = prefetch
        self.reuse_buffers = reuse_buffers
        self.buffer_pool = buffer_pool
        self._buffers = None
        rows = qp[self.bounds[1:]] - qp[self.bounds[:-1]]
        self.max_block_rows = int(rows.max()) if rows.size else 0
        oversized = np.flatnonzero(rows * self.row_bytes > self.block_bytes)
        if oversized.size:
            q = int(self.bounds[oversized[0]])
            largest = int(rows.max()) * self.row_bytes
            if self.planned:
                # a caller's plan chose the block (training plans count every byte a row costs the
                # run, so their block is far below an eighth of the budget): only the block size
                # that holds the largest query is known here, not the budget that would give it
                fix = (f"the plan that chose the block did not count it; use block_bytes={largest} or more (a "
                       f"memory plan gives a block that holds the largest query whenever it accepts the budget)")
            else:  # this stream's own rule: BLOCK_SHARE_OF_BUDGET of memory_budget
                need = -(-int(largest / BLOCK_SHARE_OF_BUDGET) // 10**6)  # whole MB, up
                fix = (f"this stream's block is 1/{round(1 / BLOCK_SHARE_OF_BUDGET)} of the memory budget "
                       f"{format_size(budget)}; use memory_budget={need}MB or more")
            warnings.warn(
                f"{getattr(dataset, 'name', dataset.path)}: {oversized.size} "
                f"quer{'y is' if oversized.size == 1 else 'ies are'} larger than the block budget of "
                f"{format_size(self.block_bytes)} (e.g. query {q} with {int(qp[q + 1] - qp[q])} rows, "
                f"{format_size(largest)}); each is read whole, beyond the block: {fix}", RuntimeWarning, stacklevel=2)

    def __len__(self):
        return len(self.bounds) - 1

    def blocks_meta(self):
        """(None, local query_ptr, q0, q1) of every block, reading no rows (passes over outputs
        kept with the blocks: :attr:`streamrank.execution.executor.Pass.reads` ``"meta"``)."""
        qp = self.dataset.query_ptr
        return [(None, qp[q0:q1 + 1] - qp[q0], int(q0), int(q1))
                for q0, q1 in zip(self.bounds[:-1].tolist(), self.bounds[1:].tolist())]

    @property
    def n_rows(self):
        qp = self.dataset.query_ptr
        return int(qp[self.bounds[-1]] - qp[self.bounds[0]])

    def _read(self, k):
        qp = self.dataset.query_ptr
        q0, q1 = int(self.bounds[k]), int(self.bounds[k + 1])
        start, stop = int(qp[q0]), int(qp[q1])
        out = self._buffers[k % len(self._buffers)] if self.reuse_buffers else None
        X, y = self.dataset.read(start, stop, out=out)
        return Block(X, y, qp[q0:q1 + 1] - start, start, stop, q0, q1)

    def __iter__(self):
        if not (self.reuse_buffers and self.buffer_pool is not None):
            yield from self._pass()
            return
        # pooled buffers are this pass's only: a stream left between passes holds none of them (a
        # pool grown for a larger block frees the smaller array once no stream holds it)
        n, d, pool, rows = len(self), self.dataset.n_features, self.buffer_pool, self.max_block_rows
        self._buffers = [(pool.array(("X", i), (rows, d)), pool.array(("y", i), (rows,)))
                         for i in range(2 if self.prefetch and n > 1 else 1)]
        try:
            yield from self._pass()
        finally:
            self._buffers = None

    def _pass(self):
        n = len(self)
        n_buf = 2 if self.prefetch and n > 1 else 1
        if self.reuse_buffers and self.buffer_pool is None and (self._buffers is None or len(self._buffers) != n_buf):
            d = self.dataset.n_features
            self._buffers = [(aligned_empty((self.max_block_rows, d), np.float32),
                              np.empty(self.max_block_rows, np.float32))
                             for _ in range(n_buf)]
        if not self.prefetch or n <= 1:
            for k in range(n):
                b = self._read(k)
                yield b, b.start, b.stop
            return
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamrank-prefetch")
        try:
            fut = pool.submit(self._read, 0)
            for k in range(n):
                b = fut.result()
                if k + 1 < n:
                    fut = pool.submit(self._read, k + 1)
                yield b, b.start, b.stop
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
