"""Serial nogil kernels run over contiguous ranges of items by a pool of Python threads.

The per-query passes (the fused RankSVM kernels, the pair sweeps, the text parser, row dot
products) are written as plain serial numba functions of an item range ``(i0, i1)``; :func:`run`
cuts ``0..n`` into contiguous chunks and calls the kernel on them from several threads at once;
:class:`Pipeline` does the same for groups of items added batch by batch (the linear passes'
groups of queries, block after block), each group reduced in order once its chunks are done.
The kernels are compiled with ``nogil=True``, so the threads run in parallel.

Why not numba's ``prange``: a ``parallel=True`` kernel is compiled through numba's parfor
pipeline, which costs far more than the loop itself (nearly twice the demo's cold compile
time: docs/design.md, Measurements), a cost every fresh install and every CI run pays once.

Each item (a query, a line segment, a row) writes only its own outputs, and no sum runs across
items inside a kernel, so neither the chunking nor the thread count changes a value.
"""

import os
import threading
from collections import deque
from contextlib import contextmanager

import numpy as np

# chunks per thread: queries differ in cost by more than their row counts say (pairs grow
# faster than rows), so a few chunks per thread let a free thread take the next one
CHUNKS_PER_THREAD = 4
# below this much work (rows, or the weight the caller gives) one call in the calling thread
# costs less than handing chunks to the pool (about 20 us per chunk)
SERIAL_WORK = 4096
# chunks per thread of each group in a Pipeline: between groups no thread waits for another, so
# fewer, longer chunks (fewer kernel calls, each with its set-up) balance as well; the last
# group's shrink (tapered) so that the threads finish together
GROUP_CHUNKS_PER_THREAD = 2
LAST_GROUP_ROUNDS = 4
# seconds a Pipeline's pool thread waits for the next batch before it leaves (a block's set-up
# between two batches takes about 0.2 ms)
IDLE_WAIT = 0.05

_local = threading.local()
_pool_lock = threading.Lock()
_pool = None
_pool_pid = None


def usable_cpus():
    """The CPUs this process may run on: its affinity mask (``taskset``, a container's cpuset), as
    numba counts them, not the machine's ``os.cpu_count()``."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call on this platform
        return max(1, os.cpu_count() or 1)


def default_threads():
    """Threads of the pool: numba's configured maximum (``NUMBA_NUM_THREADS``, all cores unless
    set; a dask worker sets it to its share)."""
    from numba import config
    return max(1, int(config.NUMBA_NUM_THREADS))


def threads():
    """The thread count in force in this thread: numba's (``numba.set_num_threads`` and
    :func:`limit` lower it per thread), so one setting governs these passes and ``prange``'s.
    Before numba's threading layer has started (``set_num_threads`` starts it) the count is
    numba's configured one, read without starting the layer (17 ms that a run without
    ``prange`` need not pay)."""
    from numba.np.ufunc import parallel as numba_parallel
    if not getattr(numba_parallel, "_is_initialized", True):
        return default_threads()
    return numba_parallel.get_num_threads()


@contextmanager
def limit(n):
    """Run the passes started in this thread with at most ``n`` threads, and never more than the
    count in force (a lower ``numba.set_num_threads`` of the caller's is kept)."""
    import numba
    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(int(n), before)))
    try:
        yield
    finally:
        numba.set_num_threads(before)


def _executor():
    global _pool, _pool_pid
    from concurrent.futures import ThreadPoolExecutor
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():  # a forked child has none of the threads
            _pool = ThreadPoolExecutor(max_workers=max(1, default_threads() - 1),
                                       thread_name_prefix="streamrank-pass",
                                       initializer=_mark_worker)
            _pool_pid = os.getpid()
        return _pool


def _mark_worker():
    _local.worker = True


def bounds(n, parts, weights=None, fractions=None):
    """Cut points 0 = b_0 <= ... <= b_parts = n of ``parts`` contiguous chunks of ``0..n`` of about
    equal weight; ``weights`` is the cumulative weight at each item edge (length n + 1, such as a
    block's query offsets), equal item counts without it. ``fractions`` (rising, 0 to 1, length
    parts + 1) puts the cuts at those shares of the weight instead of equal ones."""
    f = np.arange(parts + 1) / parts if fractions is None else np.asarray(fractions, np.float64)
    if weights is None:
        b = (f * n).round().astype(np.int64)
    else:
        weights = np.asarray(weights)
        targets = weights[0] + (weights[n] - weights[0]) * f
        b = np.searchsorted(weights, targets, side="left")  # rising targets <= weights[n]: in 0..n, rising
    b[0], b[-1] = 0, n
    return b


def tapered(threads, rounds):
    """Shares of a pass's last group in a :class:`Pipeline`: ``threads`` chunks of a quarter, then
    of an eighth, ... (``rounds`` rounds, each half the last), the rest in ``threads`` equal
    chunks; the thread that finishes last waits for at most the smallest chunk."""
    f = [0.0]
    rest = 1.0
    for _ in range(rounds):
        for _ in range(threads):
            f.append(f[-1] + rest / (2 * threads))
        rest /= 2
    for k in range(1, threads + 1):
        f.append(1.0 - rest + rest * k / threads)
    return f


def run(kernel, n, *args, weights=None, item_cost=1):
    """``kernel(i0, i1, *args)`` for contiguous chunks ``i0:i1`` covering ``0..n``, on up to
    :func:`threads` threads; returns when all are done (the first error is raised). ``weights``
    as in :func:`bounds`; ``item_cost`` the work per unit of weight (a row's columns, say)."""
    work = (n if weights is None else int(weights[n] - weights[0])) * item_cost
    t = threads()
    if n <= 1 or work < SERIAL_WORK or getattr(_local, "worker", False) or t <= 1:
        kernel(0, n, *args)  # small, one thread, or already inside a pass's worker: no hand-off
        return
    parts = min(n, t * CHUNKS_PER_THREAD)
    b = bounds(n, parts, weights)
    chunks = [(int(b[k]), int(b[k + 1])) for k in range(parts) if b[k + 1] > b[k]]
    pool = _executor()
    # the pool has default_threads() - 1 threads and the caller works too; a lower limit in force
    # is kept by queueing at most t - 1 chunk runners at a time
    lock = threading.Lock()
    todo = iter(chunks)

    def drain():
        while True:
            with lock:
                c = next(todo, None)
            if c is None:
                return
            kernel(c[0], c[1], *args)

    futures = [pool.submit(drain) for _ in range(min(t, len(chunks)) - 1)]
    error = None
    try:
        drain()
    except BaseException as exc:  # noqa: B036 - re-raised after the others stop
        error = exc
        with lock:
            for _ in todo:  # the other runners find nothing left
                pass
    for f in futures:
        try:
            f.result()
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error


class Pipeline:
    """Groups of chunks run by the pool as they are added, a batch at a time (the blocks of a pass).

    ``add(groups, reduce)`` queues a batch: ``kernel(i0, i1, *g.args)`` over the chunks of each
    group ``g`` (``g.n`` items, ``g.weights`` as in :func:`bounds`), then ``reduce(g)`` once per
    group, in the order the groups were added, after the group's last chunk. In ``add`` the
    caller's thread works on the earlier batches' chunks and returns when none of them is left
    to start, without waiting for the other threads' last ones or taking this batch's: those
    run on while it makes the next batch. ``finish()`` works on the rest and returns when every
    group is reduced.

    The threads take the chunks in order, so while one thread finishes group k's last chunk (or
    reduces it) the others start on group k + 1, where :func:`run` per group would make every
    thread wait for the slowest at each group's end and for the reduction, and a batch per call
    at each block's end.
    A chunk of group k (counted over all batches) starts only after ``reduce`` of group
    ``k - depth`` has returned, so group k may reuse that group's buffers: ``depth`` buffer sets
    suffice. Every value is as :func:`run`'s: each item writes only its own outputs and the
    reductions run one at a time, in order.

    The first error stops the pipeline: no chunk starts after it, ``add`` raises it in the
    caller (at once or at its next call) and ``finish`` once every thread has stopped.
    """

    def __init__(self, kernel, depth=2, item_cost=1):
        self.kernel, self.depth, self.item_cost = kernel, depth, item_cost
        self.t = threads()
        self.serial = self.t <= 1 or getattr(_local, "worker", False)
        self.items = []  # (group, its reduce), in the order added
        self.n_serial = 0  # groups run in the caller's thread alone (one thread in force)
        self.queue = deque()  # (group index, i0, i1) cut and not yet taken
        self.left = []  # chunks of each group not yet done (-1: not yet cut)
        self.cond = threading.Condition()
        self.cut = 0  # groups cut into chunks so far
        self.reduced = -1  # the last group reduced
        self.reducing = False
        self.closed = False
        self.error = None
        self.raised = False
        self.futures = []
        self.live = 0  # pool runners started and not yet returned

    @property
    def added(self):
        """Groups added so far (the index the next batch's first group gets)."""
        return self.n_serial + len(self.items)

    def add(self, groups, reduce):
        if self.serial:
            for g in groups:
                self.kernel(0, g.n, *g.args)
                reduce(g)
                self.n_serial += 1
            return
        with self.cond:
            self._check()
            first = len(self.items)
            for g in groups:
                self.items.append((g, reduce))
                self.left.append(-1)
            self.cond.notify_all()
            start = self.t - 1 - self.live  # the pool's runners: up to t - 1 alive (an idle one left)
            self.live += start
        self.futures += [_executor().submit(self._runner, True) for _ in range(start)]
        # the caller works on the earlier batches' chunks only, and leaves this one's to the
        # others while it makes the next batch: taking the last ones itself would leave them idle
        # for a block's set-up (and waiting for the interpreter's lock after it)
        self._runner(False, upto=first)
        with self.cond:
            self._check()

    def finish(self):
        """Wait for every group to be reduced (the caller works too); raise the first error."""
        if self.serial:
            return
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self._runner(False)
        for f in self.futures:
            f.result()  # the runners catch their errors (self.error)
        with self.cond:
            self._check()

    def _check(self):
        # called under cond: raise the first error once
        if self.error is not None and not self.raised:
            self.raised = True
            raise self.error

    def _chunks_of(self, gi):
        # (i0, i1) of group gi's chunks; a group of no items still has its (empty) call
        g = self.items[gi][0]
        work = (g.n if g.weights is None else int(g.weights[g.n] - g.weights[0])) * self.item_cost
        if g.n <= 1 or work < SERIAL_WORK:
            return [(0, g.n)]
        if gi == len(self.items) - 1 and self.closed:  # the end: the threads finish together
            f = tapered(self.t, LAST_GROUP_ROUNDS)
            b = bounds(g.n, len(f) - 1, g.weights, f)
        else:
            b = bounds(g.n, min(g.n, self.t * GROUP_CHUNKS_PER_THREAD), g.weights)
        return [(int(b[k]), int(b[k + 1])) for k in range(len(b) - 1) if b[k + 1] > b[k]]

    def _take(self):
        # the next chunk in group order, or None (under cond). The chunks are cut a group at a
        # time as the threads reach it: cutting every group's first would keep both threads idle
        # while every group's bounds are made
        if not self.queue and self.cut < len(self.items) and self.error is None:
            gi = self.cut
            cs = self._chunks_of(gi)
            self.left[gi] = len(cs)
            self.queue.extend((gi, i0, i1) for i0, i1 in cs)
            self.cut = gi + 1
        return self.queue.popleft() if self.queue else None

    def _fail(self, exc):
        with self.cond:
            self.error = self.error or exc
            self.queue.clear()  # no chunk starts after an error
            self.cut = len(self.items)
            self.cond.notify_all()

    def _reduce_ready(self):
        # called with self.reducing claimed: reduce every finished group in order
        while True:
            with self.cond:
                gi = self.reduced + 1
                if self.error is not None or gi >= len(self.items) or self.left[gi] != 0:
                    self.reducing = False
                    return
            g, reduce = self.items[gi]
            reduce(g)
            with self.cond:
                self.reduced = gi
                self.cond.notify_all()

    def _runner(self, pool_thread, upto=None):
        """Take and run chunks. The caller's thread returns when no chunk of a group before
        ``upto`` is left to start (None: no chunk at all). A pool thread waits for the next batch
        when none is left, and returns once the pipeline is closed, or after IDLE_WAIT seconds
        with no batch (the next ``add`` starts another): a pipeline its caller dropped without
        ``finish`` keeps no pool thread, which every later pass needs."""
        counted = pool_thread  # in self.live until it leaves, uncounted under the lock that decides it
        try:
            while True:
                with self.cond:
                    if upto is not None and (self.queue[0][0] if self.queue else self.cut) >= upto:
                        return
                    c = self._take()
                    while c is None and pool_thread and not self.closed and self.error is None:
                        if not self.cond.wait(IDLE_WAIT):
                            c = self._take()
                            break
                        c = self._take()
                    if c is None:
                        if counted:
                            self.live -= 1
                            counted = False
                        return
                    gi, i0, i1 = c
                    while self.reduced < gi - self.depth and self.error is None:  # group gi - depth's buffers
                        self.cond.wait()
                    if self.error is not None:
                        return
                g = self.items[gi][0]
                self.kernel(i0, i1, *g.args)
                with self.cond:
                    self.left[gi] -= 1
                    nxt = self.reduced + 1  # the next group to reduce: finished, and no one reducing?
                    claim = not self.reducing and nxt < len(self.items) and self.left[nxt] == 0
                    if claim:
                        self.reducing = True
                if claim:
                    self._reduce_ready()
        except BaseException as exc:  # noqa: B036 - raised in the caller by add or finish
            self._fail(exc)
        finally:
            if counted:
                with self.cond:
                    self.live -= 1
