"""One BLAS thread for small products.

OpenBLAS splits even a 136 x 2048 x 136 product across its threads, and when another process
holds a core, every call waits for the thread that is not running: measured on 2 cores with the
other one busy, building the linear preconditioner (eight such products and a 136 x 136
Cholesky) took 0.66-0.88 s with two BLAS threads and 0.05-0.09 s with one. Products this small
gain little from a second thread on an idle machine either, so they run on one; wide ones
(mapped features, the exact path's k x l x k products) keep every thread.
"""

_controller = None


def one_thread():
    """Context manager: BLAS libraries on one thread inside it (threadpoolctl)."""
    global _controller
    if _controller is None:
        from threadpoolctl import ThreadpoolController
        _controller = ThreadpoolController()
    return _controller.limit(limits=1, user_api="blas")
