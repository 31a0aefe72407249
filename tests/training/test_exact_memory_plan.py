"""The exact path's memory plan (issue 30, item 6): what it counts, when it refuses, and the two
process-level measures that keep the resident set inside the budget (the allocator's fixed mmap
threshold, LLVM's idle code pages). Peak RSS itself is measured by tools/bench_exact_kernel.py and
the reliability harness, not here (a test process holds pytest and every module it imported)."""

import re

import numpy as np
import pytest

from streamrank.errors import ParameterError
from streamrank.io import budget
from streamrank.training import memory_plan as memplan

MB = 10 ** 6


def test_mq2008_fold1_fits_300mb_with_q_on_disk_and_one_tile_thread():
    # MQ2008 Fold1's shape, with the resident set measured on this machine after LLVM's pages go
    qblock, tier, threads = memplan.exact_kernel_plan(9630, 46, 300 * MB, landmarks=1000, resident=105 * MB,
                                                      with_threads=True)
    assert 0 <= tier < 4 * 9630 * 9630 and threads == 1 and qblock <= 300 * MB // memplan.Q_BLOCKS_IN_BUDGET


def test_a_budget_that_cannot_hold_the_run_is_refused_with_one_that_can():
    kw = dict(landmarks=1000, resident=150 * MB)
    with pytest.raises(ParameterError, match=r"too small for exact kernel RankSVM on 9630 rows") as err:
        memplan.exact_kernel_plan(9630, 46, 250 * MB, **kw)
    want = int(float(re.search(r"use memory_budget=([0-9.]+) MB", str(err.value)).group(1)) * MB)
    qblock, tier = memplan.exact_kernel_plan(9630, 46, want, **kw)  # the budget it names is enough
    assert tier >= 0
    # the preconditioner named only where dropping it is what would make the run fit
    with pytest.raises(ParameterError, match=r"1000 landmarks .* precondition=off"):
        memplan.exact_kernel_plan(9630, 46, 300 * MB, landmarks=1000, resident=200 * MB)


def test_a_budget_below_the_process_itself_runs_with_q_on_disk_and_says_so(caplog):
    qblock, tier = memplan.exact_kernel_plan(300, 20, 2 * MB, landmarks=30, resident=100 * MB)
    assert tier == 0 and "peak RSS will exceed it" in caplog.text and "use memory_budget=" in caplog.text


def _llvm_rss():
    total, cur = 0, None
    with open("/proc/self/smaps") as f:
        for ln in f:
            head = ln.split(None, 5)
            if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                cur = head[5] if len(head) > 5 else ""
            elif ln.startswith("Rss:") and cur and "libllvmlite" in cur:
                total += int(ln.split()[1]) * 1024
    return total


def test_llvm_pages_leave_the_resident_set_and_kernels_still_run():
    try:
        open("/proc/self/smaps").close()
    except OSError:
        pytest.skip("no /proc/self/smaps")
    from streamrank._native import qprod
    budget.load_kernel_runtime()
    if not budget.drop_idle_library_pages() and _llvm_rss() == 0:
        pytest.skip("no libllvmlite mapping resident")
    assert _llvm_rss() < 8 * MB  # the code the kernels' loads ran again at most
    Q = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = np.zeros(4)
    qprod.add_cols(Q, np.ones(3), out)  # a compiled kernel, called after its library's pages went
    assert np.array_equal(out, Q.astype(np.float64).sum(0))


def test_the_allocator_is_tuned_on_glibc():
    if not budget._glibc():
        pytest.skip("not glibc")
    assert budget.tune_allocator()
    a = np.ones(10 * 2 ** 20 // 8)  # above the fixed threshold: mapped, and unmapped when freed
    del a
    budget.release_freed()


def test_the_threshold_never_rises_once_an_exact_plan_lowered_it(monkeypatch):
    """An exact run's 256 KB threshold holds through the validation passes inside it, which ask
    for the 4 MB of the streamed paths (an HDF5 chunk buffer of 1 MB kept in the heap)."""
    if not budget._glibc():
        pytest.skip("not glibc")
    calls = []
    real = budget._glibc()

    class Spy:
        def mallopt(self, param, value):
            calls.append((param, value))
            return 1
    monkeypatch.setattr(budget, "_libc", Spy())
    monkeypatch.setattr(budget, "_threshold", None)
    assert budget.tune_allocator()
    assert budget._threshold == budget.MMAP_THRESHOLD
    assert budget.tune_allocator(budget.EXACT_MMAP_THRESHOLD)
    assert budget._threshold == budget.EXACT_MMAP_THRESHOLD
    n = len(calls)
    assert budget.tune_allocator()  # a later streamed pass: no rise, no call
    assert budget._threshold == budget.EXACT_MMAP_THRESHOLD and len(calls) == n
    assert (-3, budget.EXACT_MMAP_THRESHOLD) in calls and real


def test_a_released_preconditioner_refuses_to_be_used():
    """at_point releases the last point's k x k factors before it makes the next point's (TRON has
    replaced its preconditioner by then); a released one is never used silently."""
    from streamrank.objectives.kernel_precond import _DiagLowRank
    rng = np.random.default_rng(0)
    U = rng.standard_normal((20, 4)).astype(np.float32)
    D = np.full(20, 0.5)
    M = _DiagLowRank(U, D, np.eye(4) * 2.0, U.astype(np.float64).T @ (U / D[:, None]))
    r = rng.standard_normal(20)
    dense = np.diag(D) + U.astype(np.float64) @ (2.0 * U.astype(np.float64).T)
    np.testing.assert_allclose(M.solve(r), np.linalg.solve(dense, r), rtol=1e-8)
    M.release()
    with pytest.raises(RuntimeError, match="earlier point"):
        M.solve(r)
