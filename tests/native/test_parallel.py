"""The thread pool that runs serial kernels over item ranges (``_native.parallel``)."""

import threading

import numpy as np
import pytest

from streamrank._native import parallel


@pytest.mark.parametrize("n,parts", [(10, 3), (1, 4), (7, 7), (100, 8)])
def test_bounds_cover_every_item_once(n, parts):
    for weights in (None, np.cumsum(np.r_[0, np.arange(n) % 5 + 1])):
        b = parallel.bounds(n, parts, weights)
        assert b[0] == 0 and b[-1] == n and len(b) == parts + 1
        assert np.all(np.diff(b) >= 0)


def test_bounds_balance_weights():
    # one heavy item among light ones: the chunk edges follow the weight, not the count
    w = np.cumsum(np.r_[0, [1] * 50 + [1000] + [1] * 49])
    b = parallel.bounds(100, 4, w)
    assert 50 in b or 51 in b


def test_run_calls_every_item_once_on_several_threads(monkeypatch):
    monkeypatch.setattr(parallel, "SERIAL_WORK", 0)
    seen = np.zeros(1000, np.int64)
    names = set()
    # each runner's first chunk waits for the other runner's: both must run at the same time
    meet = threading.Barrier(2, timeout=60)

    def kernel(i0, i1, out):
        name = threading.current_thread().name
        if name not in names:
            names.add(name)
            meet.wait()
        out[i0:i1] += 1

    with parallel.limit(2):
        parallel.run(kernel, 1000, seen)
    assert np.all(seen == 1)
    assert len(names) == 2


def test_run_raises_the_kernels_error_and_stays_usable(monkeypatch):
    monkeypatch.setattr(parallel, "SERIAL_WORK", 0)

    def kernel(i0, i1):
        if i0 <= 500 < i1:
            raise ValueError("bad chunk")

    with pytest.raises(ValueError, match="bad chunk"):
        parallel.run(kernel, 1000)
    out = np.zeros(10)
    parallel.run(lambda a, b, o: o.__setitem__(slice(a, b), 1.0), 10, out)
    assert np.all(out == 1.0)


def test_nested_run_stays_in_its_thread(monkeypatch):
    monkeypatch.setattr(parallel, "SERIAL_WORK", 0)
    hits = np.zeros(64, np.int64)

    def inner(i0, i1, base):
        hits[base + i0:base + i1] += 1

    def outer(i0, i1):
        for k in range(i0, i1):
            parallel.run(inner, 8, 8 * k)

    parallel.run(outer, 8)
    assert np.all(hits == 1)


def test_limit_is_per_thread_and_restored():
    before = parallel.threads()
    with parallel.limit(1):
        assert parallel.threads() == 1
        seen = []
        t = threading.Thread(target=lambda: seen.append(parallel.threads()))
        t.start()
        t.join()
        assert seen == [parallel.default_threads()]
    assert parallel.threads() == before


def test_threads_reads_numbas_count_without_starting_its_threading_layer():
    """Before numba's threading layer starts, threads() is the configured count and does not start
    it (17 ms a run without prange need not pay); after set_num_threads, numba's count rules."""
    import subprocess
    import sys
    code = """
import numba
from numba.np.ufunc import parallel as numba_parallel
from streamrank._native import parallel
assert parallel.threads() == parallel.default_threads() == numba.config.NUMBA_NUM_THREADS
assert not numba_parallel._is_initialized
numba.set_num_threads(1)
assert parallel.threads() == 1
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
