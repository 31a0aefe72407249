"""One BLAS thread for small products.

OpenBLAS splits even a 136 x 2048 x 136 product across its threads, and when another process
holds a core, every call waits for the thread that is not running: measured on 2 cores with the
other one busy, building the linear preconditioner (eight such products and a 136 x 136
Cholesky) took 0.66-0.88 s with two BLAS threads and 0.05-0.09 s with one. Products this small
gain little from a second thread on an idle machine either, so they run on one; wide ones
(mapped features, the exact path's k x l x k products) keep every thread.
"""

import sys
import threading
from contextlib import contextmanager

import numpy as np

# the process-wide one-thread limit: taken by the outermost one_thread() of any thread and given
# back by the last one out (threadpoolctl's limits are process-wide; two threads each saving and
# restoring them could leave BLAS on one thread for good, a race that changed later products' bits)
_lock = threading.Lock()
_depth = 0
_limiter = None
_controller = None
_controller_saw_scipy = False


def _get_controller():
    """threadpoolctl's controller, made again when scipy (its own OpenBLAS) was imported since:
    start-up imports scipy lazily, and a controller sees only the libraries loaded before it."""
    global _controller, _controller_saw_scipy
    has_scipy = "scipy.linalg" in sys.modules
    if _controller is None or has_scipy != _controller_saw_scipy:
        from threadpoolctl import ThreadpoolController
        _controller, _controller_saw_scipy = ThreadpoolController(), has_scipy
    return _controller


@contextmanager
def one_thread():
    """Context manager: BLAS libraries on one thread inside it (threadpoolctl), safe to enter
    from several threads at once and nested."""
    global _depth, _limiter
    with _lock:
        if _depth == 0:
            _limiter = _get_controller().limit(limits=1, user_api="blas")
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _limiter.restore_original_limits()
                _limiter = None


# Columns of one block of a wide product A^T B (more columns than this), each block on one BLAS
# thread, the blocks on parallel threads: the bits then depend on this width alone, never on how
# many threads a process has. OpenBLAS otherwise splits the inner (row) dimension across its
# threads: measured, a 2048 x 300 A^T B differs by 1.4e-13 between one and two threads, so a
# worker with fewer cores would not give the local model.
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
    with one_thread():
        blocks = [(j, min(j + columns, n)) for j in range(0, n, columns)]
        from streamrank._native import parallel
        threads = min(len(blocks), parallel.threads())
        if threads <= 1:
            for jj in blocks:
                block(*jj)
            return
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="streamrank-atb") as pool:
            list(pool.map(lambda jj: block(*jj), blocks))
