"""The BLAS helpers: one_thread() from many threads at once, and products whose bits do not depend
on the thread count."""

import subprocess
import sys
import threading
import time

import numpy as np
import scipy.linalg  # its OpenBLAS is limited too
from threadpoolctl import threadpool_info, threadpool_limits

from streamrank._native.blas import add_atb, add_atb_upper, matmul_fixed, matmul_rows, mirror_upper, one_thread


def blas_threads():
    assert scipy.linalg.blas  # loaded: one_thread() limits its OpenBLAS as well as numpy's
    return sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})


def test_one_thread_nests_and_survives_a_race_between_threads():
    with threadpool_limits(2, user_api="blas"):
        assert blas_threads() == [2]
        with one_thread():
            assert blas_threads() == [1]
            with one_thread():
                assert blas_threads() == [1]
            assert blas_threads() == [1]   # the inner exit does not lift the outer limit
        assert blas_threads() == [2]
        barrier = threading.Barrier(4)

        def work():
            barrier.wait()
            for _ in range(300):
                with one_thread():
                    time.sleep(0)  # let another thread enter or leave meanwhile
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # threads saving and restoring a process-wide limit in turn would leave it at 1
        assert blas_threads() == [2]


def test_fixed_products_have_the_same_bits_on_one_and_two_threads():
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((700, 300)), rng.standard_normal((700, 200))
    out = {}
    for n in (1, 2):
        with threadpool_limits(n, user_api="blas"):
            M = np.zeros((300, 200))
            out[n] = (add_atb(M, A, B, 48).copy(), matmul_fixed(A, B[:300], 48))
    assert np.array_equal(out[1][0], out[2][0]) and np.array_equal(out[1][1], out[2][1])
    np.testing.assert_allclose(out[1][0], A.T @ B, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out[1][1], A @ B[:300], rtol=1e-12, atol=1e-12)


def test_symmetric_and_row_block_products_have_the_same_bits_on_any_thread_count():
    """add_atb_upper + mirror_upper (A^T B of a symmetric product, block upper triangle) and
    matmul_rows: the same bits on 1 and 2 BLAS threads and 1 and 2 block threads; exactly symmetric;
    equal to numpy's products to rounding."""
    from streamrank._native import parallel
    rng = np.random.default_rng(1)
    U = rng.standard_normal((600, 130))
    LU = U * rng.random(600)[:, None]  # U^T L U: symmetric, L diagonal
    F, P = rng.standard_normal((700, 90)), rng.standard_normal((90, 20))
    out = {}
    for n in (1, 2):
        with threadpool_limits(n, user_api="blas"), parallel.limit(n):
            M = np.zeros((130, 130))
            for a in range(0, 600, 200):  # chunks of rows, as the preconditioner sums them
                add_atb_upper(M, U[a:a + 200], LU[a:a + 200], 48)
            out[n] = (mirror_upper(M, 48), matmul_rows(F, P, 64))
    assert np.array_equal(out[1][0], out[2][0]) and np.array_equal(out[1][1], out[2][1])
    M = out[1][0]
    assert np.array_equal(M, M.T)
    np.testing.assert_allclose(M, U.T @ LU, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out[1][1], F @ P, rtol=1e-12, atol=1e-12)


def test_one_thread_limits_scipy_loaded_inside_it():
    """A solver imports scipy.linalg inside the solve's one_thread(): its own OpenBLAS (another
    library than numpy's) is limited at the next entry, nested or not, and both are given back."""
    code = """
import numpy
from threadpoolctl import threadpool_info
from streamrank._native.blas import one_thread
def blas(): return sorted((i["filepath"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas")
with one_thread():
    import scipy.linalg
    with one_thread():
        inside = blas()
after = blas()
assert len(inside) == 2, inside
assert all(n == 1 for _, n in inside), inside
assert all(n == 2 for _, n in after), after
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**__import__("os").environ, "OPENBLAS_NUM_THREADS": "2"})
    assert r.returncode == 0, r.stderr[-2000:]
