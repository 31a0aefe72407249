"""Serial nogil kernels run over contiguous ranges of items by a pool of Python threads.

The per-query passes (the fused RankSVM kernels, the pair sweeps, the text parser, row dot
products) are written as plain serial numba functions of an item range ``(i0, i1)``; :func:`run`
cuts ``0..n`` into contiguous chunks and calls the kernel on them from several threads at once.
The kernels are compiled with ``nogil=True``, so the threads run in parallel.

Why not numba's ``prange``: a ``parallel=True`` kernel is compiled through numba's parfor
pipeline, which costs far more than the loop itself: on a cold cache the demo compiled its
kernels in 31.2 s with ``prange`` and in 16.8 s with the same loops serial (numba's compile
events, as ``tools/kernel_manifest.py --times`` prints them; docs/benchmarks-archive.md), a cost every
fresh install and every CI run pays once.

Each item (a query, a line segment, a row) writes only its own outputs, and no sum runs across
items inside a kernel, so neither the chunking nor the thread count changes a value.
"""

import os
import threading
from contextlib import contextmanager

import numpy as np

# chunks per thread: queries differ in cost by more than their row counts say (pairs grow
# faster than rows), so a few chunks per thread let a free thread take the next one
CHUNKS_PER_THREAD = 4
# below this much work (rows, or the weight the caller gives) one call in the calling thread
# costs less than handing chunks to the pool (about 20 us per chunk)
SERIAL_WORK = 4096
# chunks per thread of each group in run_groups: between groups no thread waits for another, so
# fewer, longer chunks (fewer kernel calls, each with its set-up) balance as well; the last
# group's shrink (tapered) so that the threads finish together
GROUP_CHUNKS_PER_THREAD = 2
LAST_GROUP_ROUNDS = 4

_local = threading.local()
_pool_lock = threading.Lock()
_pool = None
_pool_pid = None


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
    """Run the passes started in this thread with at most ``n`` threads."""
    import numba
    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(int(n), default_threads())))
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
    """Shares of a block's last group for :func:`run_groups`: ``threads`` chunks of a quarter, then
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


def run_groups(kernel, groups, reduce, depth=2, item_cost=1):
    """``kernel(i0, i1, *g.args)`` over the chunks of each group ``g`` (``g.n`` items, ``g.weights``
    as in :func:`bounds`) and ``reduce(g)`` once per group, in group order, after its last chunk:
    :func:`run` per group with no wait between groups.

    The threads take the groups' chunks in order, so while one thread finishes group k's last
    chunk (or reduces it) the others start on group k + 1; :func:`run` per group made every
    thread wait for the slowest at each group's end and for the reduction (issue 34: 1.8 ms of a
    37.7 ms fun + grad pass on 1.1M rows in 17 groups). A chunk of group k starts only after
    ``reduce`` of group ``k - depth`` has returned, so group k may reuse that group's buffers:
    ``depth`` buffer sets suffice. Every value is as :func:`run`'s: each item writes only its
    own outputs and the reductions run one at a time, in order. The first error is raised once
    every thread has stopped; no chunk starts after it.
    """
    t = threads()
    if t <= 1 or getattr(_local, "worker", False):
        for g in groups:
            kernel(0, g.n, *g.args)
            reduce(g)
        return
    chunks = []  # (group, i0, i1) in group order; a group of no items still has its (empty) call
    for gi, g in enumerate(groups):
        work = (g.n if g.weights is None else int(g.weights[g.n] - g.weights[0])) * item_cost
        if g.n <= 1 or work < SERIAL_WORK:
            b = bounds(g.n, 1)
        elif gi == len(groups) - 1:  # the block's end: the threads finish together
            f = tapered(t, LAST_GROUP_ROUNDS)
            b = bounds(g.n, len(f) - 1, g.weights, f)
        else:
            b = bounds(g.n, min(g.n, t * GROUP_CHUNKS_PER_THREAD), g.weights)
        parts = len(b) - 1
        chunks.extend((gi, int(b[k]), int(b[k + 1])) for k in range(parts) if b[k + 1] > b[k] or g.n == 0)
    left = [0] * len(groups)  # chunks of each group not yet done
    for gi, _, _ in chunks:
        left[gi] += 1
    cond = threading.Condition()
    st = {"next": 0, "reduced": -1, "reducing": False, "error": None}

    def fail(exc):
        with cond:
            st["error"] = st["error"] or exc
            st["next"] = len(chunks)  # no chunk starts after an error
            cond.notify_all()

    def reduce_ready():
        # called with st["reducing"] claimed: reduce every finished group in order
        while True:
            with cond:
                gi = st["reduced"] + 1
                if st["error"] is not None or gi >= len(groups) or left[gi]:
                    st["reducing"] = False
                    return
            reduce(groups[gi])
            with cond:
                st["reduced"] = gi
                cond.notify_all()

    def runner():
        try:
            while True:
                with cond:
                    if st["next"] >= len(chunks):
                        return
                    gi, i0, i1 = chunks[st["next"]]
                    st["next"] += 1
                    while st["reduced"] < gi - depth and st["error"] is None:  # group gi - depth's buffers
                        cond.wait()
                    if st["error"] is not None:
                        return
                kernel(i0, i1, *groups[gi].args)
                with cond:
                    left[gi] -= 1
                    nxt = st["reduced"] + 1  # the next group to reduce: finished, and no one reducing?
                    claim = not st["reducing"] and nxt < len(groups) and left[nxt] == 0
                    if claim:
                        st["reducing"] = True
                if claim:
                    reduce_ready()
        except BaseException as exc:  # noqa: B036 - re-raised by the caller after the others stop
            fail(exc)

    pool = _executor()
    futures = [pool.submit(runner) for _ in range(min(t, len(chunks)) - 1)]
    runner()
    for f in futures:
        f.result()
    if st["error"] is not None:
        raise st["error"]
