"""The thread pool that runs serial kernels over item ranges (``_native.parallel``)."""

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

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


@pytest.mark.parametrize("threads,rounds", [(1, 0), (2, 4), (3, 2), (8, 6)])
def test_tapered_shares_halve_each_round_and_cover_the_group(threads, rounds):
    f = np.array(parallel.tapered(threads, rounds))
    assert f[0] == 0.0 and f[-1] == pytest.approx(1.0) and np.all(np.diff(f) > 0)
    sizes = np.diff(f)
    assert len(sizes) == threads * (rounds + 1)
    for r in range(rounds):  # threads chunks of 1/(2 threads), then of half that, ...
        np.testing.assert_allclose(sizes[r * threads:(r + 1) * threads], 0.5 ** (r + 1) / threads)
    np.testing.assert_allclose(sizes[-threads:], 0.5 ** rounds / threads)
    w = np.cumsum(np.r_[0, np.ones(1000)])
    b = parallel.bounds(1000, len(f) - 1, w, f)
    assert b[0] == 0 and b[-1] == 1000 and np.all(np.diff(b) >= 0)


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


class _G:
    def __init__(self, n, weights=None, args=()):
        self.n, self.weights, self.args = n, weights, args


def _pipeline_log(sizes, depth, threads, fail_at=None, fail_in=None, slow=0.0, batches=None):
    """A Pipeline over groups of ``sizes`` items, each reduction taking ``slow`` seconds at least (the
    other thread then runs ahead); returns the event log (under a lock) and the items' hit counts.
    ``batches``: cut points of the groups into batches (a pass's blocks); None: one batch."""
    import time
    lock = threading.Lock()
    log = []
    hits = [np.zeros(n, np.int64) for n in sizes]

    def kernel(i0, i1, gi):
        with lock:
            log.append(("start", gi, i0, i1))
        if fail_in == "kernel" and gi == fail_at:
            raise ValueError(f"bad group {gi}")
        hits[gi][i0:i1] += 1
        with lock:
            log.append(("end", gi, i0, i1))

    def reduce(g):
        gi = g.args[0]
        with lock:
            log.append(("reduce", gi))
        if fail_in == "reduce" and gi == fail_at:
            raise ValueError(f"bad reduce {gi}")
        time.sleep(slow)
        with lock:
            log.append(("reduced", gi))

    groups = [_G(n, np.cumsum(np.r_[0, np.arange(n) % 3 + 1]), (gi,)) for gi, n in enumerate(sizes)]
    with parallel.limit(threads):
        pipe = parallel.Pipeline(kernel, depth=depth)
        try:
            for a, b in zip([0, *(batches or [])], [*(batches or []), len(groups)]):
                assert pipe.added == a
                pipe.add(groups[a:b], reduce)
                time.sleep(slow)  # the caller makes the next batch meanwhile
        finally:
            pipe.finish()
    return log, hits


def _check_order(log, sizes, depth):
    reduced = set()
    done = {gi: 0 for gi in range(len(sizes))}
    order = []
    reducing = None
    for ev in log:
        if ev[0] == "start":
            assert ev[1] - depth < 0 or ev[1] - depth in reduced, f"{ev} before group {ev[1] - depth} was reduced"
        elif ev[0] == "end":
            done[ev[1]] += ev[3] - ev[2]
        elif ev[0] == "reduce":
            assert done[ev[1]] == sizes[ev[1]], f"group {ev[1]} reduced before its last chunk"
            assert reducing is None, f"group {ev[1]} reduced while group {reducing} was"
            reducing = ev[1]
            order.append(ev[1])
        else:
            reduced.add(ev[1])
            reducing = None
    return order


def test_groups_hypothesis_every_item_once_reductions_in_order():
    """Every item of every group runs once, each group is reduced once, in group order, after its
    last chunk, and no chunk of group k starts before group k - depth was reduced (its buffers):
    in one batch and over batches added one at a time (a Pipeline over a pass's
    blocks: the groups are numbered across batches, and the depth holds across a batch's end)."""
    from hypothesis import given, settings, strategies as st

    @settings(max_examples=100, deadline=None)
    @given(st.lists(st.integers(0, 300), min_size=0, max_size=12), st.integers(1, 3), st.integers(1, 2),
           st.integers(0, 64), st.sampled_from([0.0, 0.002]), st.data())
    def check(sizes, depth, threads, serial_work, slow, data):
        cuts = data.draw(st.none() | st.lists(st.integers(0, len(sizes)), max_size=4).map(sorted))
        parallel.SERIAL_WORK = serial_work
        log, hits = _pipeline_log(sizes, depth, threads, slow=slow, batches=cuts)
        assert all(np.all(h == 1) for h in hits)
        assert _check_order(log, sizes, depth) == list(range(len(sizes)))

    before = parallel.SERIAL_WORK
    try:
        check()
    finally:
        parallel.SERIAL_WORK = before


@pytest.mark.parametrize("batches,fail_at", [(None, 2), ([3, 6], 1), ([3, 6], 4)])
@pytest.mark.parametrize("where", ["kernel", "reduce"])
def test_groups_raise_the_first_error_and_the_pool_stays_usable(monkeypatch, where, batches, fail_at):
    monkeypatch.setattr(parallel, "SERIAL_WORK", 0)
    sizes = [200] * 9
    with pytest.raises(ValueError, match=f"bad {'group' if where == 'kernel' else 'reduce'} {fail_at}"):
        _pipeline_log(sizes, 2, 2, fail_at=fail_at, fail_in=where, batches=batches)
    log, hits = _pipeline_log(sizes, 2, 2, batches=batches)  # the pool still works
    assert all(np.all(h == 1) for h in hits)
    assert _check_order(log, sizes, 2) == list(range(9))


def test_pipeline_stops_reducing_after_an_error(monkeypatch):
    monkeypatch.setattr(parallel, "SERIAL_WORK", 0)
    lock = threading.Lock()
    events = []

    def kernel(i0, i1, gi):
        with lock:
            events.append(("start", gi))
        if gi == 3:
            raise ValueError("bad")

    def reduce(g):
        with lock:
            events.append(("reduce", g.args[0]))

    with parallel.limit(2), pytest.raises(ValueError, match="bad"):
        pipe = parallel.Pipeline(kernel, depth=1)
        try:
            pipe.add([_G(100, None, (gi,)) for gi in range(10)], reduce)
        finally:
            pipe.finish()
    assert ("reduce", 3) not in events and not any(e[0] == "reduce" and e[1] > 3 for e in events)
    # depth 1: group 5's chunks wait for group 4's reduction, which never comes
    assert not any(e[0] == "start" and e[1] >= 5 for e in events)


def test_a_pipeline_dropped_without_finish_keeps_no_pool_thread(monkeypatch):
    """The pool thread of a pipeline whose caller never calls finish (an error between two
    batches, say) leaves after IDLE_WAIT: the passes after it still get the pool (they would
    wait for ever for a runner queued behind it)."""
    import time
    monkeypatch.setattr(parallel, "SERIAL_WORK", 0)
    monkeypatch.setattr(parallel, "IDLE_WAIT", 0.01)
    with parallel.limit(2):
        pipe = parallel.Pipeline(lambda i0, i1, out: out.__setitem__(slice(i0, i1), 1.0))
        out = np.zeros(100)
        pipe.add([_G(100, None, (out,))], lambda g: None)
        del pipe  # dropped: no finish
        done = threading.Event()
        seen = np.zeros(1000)

        def later():
            parallel.run(lambda a, b, o: o.__setitem__(slice(a, b), o[a:b] + 1), 1000, seen)
            done.set()

        threading.Thread(target=later, daemon=True).start()
        assert done.wait(60), "a later pass waited for the dropped pipeline's pool thread"
    assert np.all(seen == 1)
    deadline = time.monotonic() + 60
    while not np.all(out == 1.0) and time.monotonic() < deadline:  # its batch still ran
        time.sleep(0.01)
    assert np.all(out == 1.0)


def test_a_pipeline_whose_pool_thread_left_starts_another_on_the_next_batch(monkeypatch):
    import time
    monkeypatch.setattr(parallel, "SERIAL_WORK", 0)
    monkeypatch.setattr(parallel, "IDLE_WAIT", 0.01)
    names = set()
    lock = threading.Lock()
    meet = threading.Barrier(2, timeout=60)

    def kernel(i0, i1, out, second):
        if second:
            with lock:
                first = threading.current_thread().name not in names
                names.add(threading.current_thread().name)
            if first:
                meet.wait()  # both threads run the second batch
        out[i0:i1] += 1

    with parallel.limit(2):
        pipe = parallel.Pipeline(kernel)
        a, b = np.zeros(400), np.zeros(400)
        pipe.add([_G(400, None, (a, False))], lambda g: None)
        time.sleep(0.2)  # the pool thread finishes the batch, waits IDLE_WAIT and leaves
        assert pipe.live == 0
        pipe.add([_G(400, None, (b, True)), _G(400, None, (b, True))], lambda g: None)
        pipe.finish()
    assert np.all(a == 1) and np.all(b == 2) and len(names) == 2 and pipe.live == 0


@pytest.mark.skipif(shutil.which("taskset") is None or os.cpu_count() < 2, reason="needs taskset and 2 CPUs")
def test_usable_cpus_follow_the_affinity_mask():
    """A dask worker's numba threads are the process's CPUs over the workers: under ``taskset -c 0``
    one, whatever the machine has."""
    code = "from streamrank._native.parallel import usable_cpus; print(usable_cpus())"
    out = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2]).stdout
    assert out.split() == ["1"]
