"""The BLAS helpers: one_thread() from many threads at once, and products whose bits do not depend
on the thread count."""

import threading
import time

import numpy as np
import scipy.linalg  # its OpenBLAS is limited too
from threadpoolctl import threadpool_info, threadpool_limits

from streamrank._native.blas import add_atb, matmul_fixed, one_thread


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
