"""One BLAS thread for small products.

OpenBLAS splits even a 136 x 2048 x 136 product across its threads, and when another process
holds a core, every call waits for the thread that is not running (the linear preconditioner's
products then take about ten times as long: docs/design.md, Measurements). Products this small
gain little from a second thread on an idle machine either, so they run on one; wide ones
(mapped features, the exact path's k x l x k products) keep every thread.
"""

import os
import sys
import threading
from contextlib import contextmanager

import numpy as np

# the process-wide one-thread limit: taken by the outermost one_thread() of any thread and given
# back by the last one out (threadpoolctl's limits are process-wide; two threads each saving and
# restoring them could leave BLAS on one thread for good, a race that changed later products' bits)
_lock = threading.Lock()
_depth = 0
_limiters = []  # one per controller seen inside the outermost one_thread(), restored in reverse
_controller = None
_controller_saw_scipy = False


def _get_controller():
    """threadpoolctl's controller, made again when scipy (its own OpenBLAS) was imported since:
    start-up imports scipy lazily, and a controller sees only the libraries loaded before it.
    Returns (controller, made now)."""
    global _controller, _controller_saw_scipy
    has_scipy = "scipy.linalg" in sys.modules
    if _controller is None or has_scipy != _controller_saw_scipy:
        ThreadpoolController = _threadpoolctl().ThreadpoolController
        _controller, _controller_saw_scipy = ThreadpoolController(), has_scipy
        return _controller, True
    return _controller, False


def _threadpoolctl():
    """threadpoolctl, imported without its mark on the environment: its import sets
    ``KMP_DUPLICATE_LIB_OK=True`` (Intel's and LLVM's OpenMP runtimes read it when they load, to
    tolerate a second copy), which the user's process did not ask for and streamrank does not
    need."""
    unset = "KMP_DUPLICATE_LIB_OK" not in os.environ
    import threadpoolctl
    if unset:
        os.environ.pop("KMP_DUPLICATE_LIB_OK", None)
    return threadpoolctl


@contextmanager
def one_thread():
    """Context manager: BLAS libraries on one thread inside it (threadpoolctl), safe to enter
    from several threads at once and nested. A library loaded inside it (scipy's OpenBLAS, which
    a solver imports when it first needs it) is limited too at the next entry, nested or not:
    an entry made before scipy was imported had left scipy's factorisations on every thread."""
    global _depth
    with _lock:
        controller, new = _get_controller()
        if _depth == 0 or new:
            _limiters.append(controller.limit(limits=1, user_api="blas"))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for limiter in reversed(_limiters):  # the last first: it saw the earlier ones' one thread as original
                    limiter.restore_original_limits()
                _limiters.clear()


# Columns of one block of a wide product A^T B (more columns than this), each block on one BLAS
# thread, the blocks on parallel threads: the bits then depend on this width alone, never on how
# many threads a process has. OpenBLAS otherwise splits the inner (row) dimension across its
# threads, so the last bits would depend on the thread count, and a worker with fewer cores would
# not give the local model.
ATB_COLUMNS = 256


def add_atb(M, A, B, columns=ATB_COLUMNS):
    """M += A^T B (float64), the same bits for any number of threads (see ATB_COLUMNS); up to
    ``columns`` columns one product on one thread."""
    def block(j0, j1):
        M[:, j0:j1] += A.T @ B[:, j0:j1]
    _by_columns(B.shape[1], columns, block)
    return M


def matmul_fixed(A, B, columns=ATB_COLUMNS):
    """A @ B (float64) with the same bits for any number of threads: column blocks of B of
    ``columns`` columns, each one product on one BLAS thread, the blocks on parallel threads."""
    out = np.empty((A.shape[0], B.shape[1]))

    def block(j0, j1):
        out[:, j0:j1] = A @ B[:, j0:j1]
    _by_columns(B.shape[1], columns, block)
    return out


def _by_columns(n, columns, block):
    """``block(j0, j1)`` over column blocks of width ``columns`` of n columns, each on one BLAS
    thread, in parallel threads (numpy releases the GIL) up to numba's thread count."""
    _in_threads([(j, min(j + columns, n)) for j in range(0, n, columns)], lambda jj: block(*jj))


# rows of one block of :func:`matmul_rows`: a block's bits depend on its rows and this height alone
ROW_BLOCK = 2048


def add_atb_upper(M, A, B, columns=ATB_COLUMNS):
    """M[I, J] += A[:, I]^T B[:, J] for the column blocks I <= J of width ``columns`` (the block
    upper triangle of M += A^T B, M square): half the flops of the whole product where A^T B is
    symmetric up to rounding (U^T L U, W^T W). Each block is one product on one BLAS thread, the
    blocks on parallel threads: the same bits for any number of threads. :func:`mirror_upper`
    makes M symmetric once the sums are done."""
    n = M.shape[0]
    edges = list(range(0, n, columns)) + [n]
    spans = list(zip(edges[:-1], edges[1:]))
    pairs = [(i, j) for i in spans for j in spans if i[0] <= j[0]]

    def block(pair):
        (i0, i1), (j0, j1) = pair
        buf = _block_buffers.take(columns)
        try:
            out = buf[:(i1 - i0) * (j1 - j0)].reshape(i1 - i0, j1 - j0)
            np.matmul(A[:, i0:i1].T, B[:, j0:j1], out=out)  # the product's bits, into a kept buffer
            M[i0:i1, j0:j1] += out
        finally:
            _block_buffers.give(buf)
    _in_threads(pairs, block)
    return M


class _BlockBuffers:
    """The block products' outputs of :func:`add_atb_upper`, one per thread at work, kept from
    one call to the next: a fresh 512 KB temporary per block is mapped (above the allocator's
    threshold, io.budget.tune_allocator) and faulted in again, thousands of times per
    preconditioner update (docs/design.md, "Measurements behind the code")."""

    def __init__(self):
        self._free, self._lock = [], threading.Lock()

    def take(self, columns):
        with self._lock:
            for i, b in enumerate(self._free):
                if b.size >= columns * columns:
                    return self._free.pop(i)
        return np.empty(columns * columns)

    def give(self, buf):
        with self._lock:
            self._free.append(buf)


_block_buffers = _BlockBuffers()


def mirror_upper(M, columns=ATB_COLUMNS):
    """Make M exactly symmetric from the block upper triangle :func:`add_atb_upper` summed: each
    diagonal block (X + X^T) / 2, each block below it the transpose of the one above."""
    n = M.shape[0]
    for i0 in range(0, n, columns):
        i1 = min(i0 + columns, n)
        D = M[i0:i1, i0:i1]
        D += D.T.copy()
        D *= 0.5
        M[i1:, i0:i1] = M[i0:i1, i1:].T
    return M


def matmul_rows(A, B, rows=None):
    """A @ B (float64) in row blocks of A of ``rows`` rows, each one product on one BLAS thread,
    the blocks on parallel threads: the same bits for any number of threads (for a B too narrow
    for :func:`matmul_fixed`'s column blocks to share out)."""
    rows = ROW_BLOCK if rows is None else int(rows)
    out = np.empty((A.shape[0], B.shape[1]))
    spans = [(r, min(r + rows, A.shape[0])) for r in range(0, A.shape[0], rows)]

    def block(span):
        out[span[0]:span[1]] = A[span[0]:span[1]] @ B
    _in_threads(spans, block)
    return out


def _in_threads(items, block):
    """``block(item)`` for every item on one BLAS thread each, in parallel threads (numpy releases
    the GIL) up to numba's thread count."""
    with one_thread():
        from streamrank._native import parallel
        threads = min(len(items), parallel.threads())
        if threads <= 1:
            for it in items:
                block(it)
            return
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="streamrank-atb") as pool:
            list(pool.map(block, items))
