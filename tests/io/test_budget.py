"""The memory budget: blocks get what the resident process, the per-row state and the block's
copies leave; the plans of training and scoring count everything (io.budget, training.memory_plan)."""

import pytest

from streamrank.io import budget
from streamrank.io.query_stream import BLOCK_SHARE_OF_BUDGET
from streamrank.training import memory_plan as memplan

MB = 10**6


def test_blocks_get_what_the_resident_process_and_the_state_leave():
    # plenty: the usual share of the budget
    assert budget.block_bytes(4000 * MB, 1000, per_row=28, resident=200 * MB) == \
        int(4000 * MB * BLOCK_SHARE_OF_BUDGET)
    # tight: resident + slack + HEADROOM x (state + extra + copies of a block) fills the budget exactly
    n, extra = 1_000_000, 9 * MB
    for per_row, per_byte in ((memplan.STATE_BYTES_PER_ROW, budget.BUFFERS), (8, 4), (8, 4 + 256 / 136)):
        b = budget.block_bytes(310 * MB, n, per_row=per_row, per_block_byte=per_byte, extra=extra, resident=190 * MB)
        planned = 190 * MB + budget.STREAM_SLACK + budget.HEADROOM * (n * per_row + extra + per_byte * b)
        assert 0 < b < 310 * MB * BLOCK_SHARE_OF_BUDGET and abs(planned - 310 * MB) < 10
    # impossible: the share, with a warning (the run goes on)
    assert budget.block_bytes(50 * MB, n, per_row=28, resident=190 * MB) == int(50 * MB * BLOCK_SHARE_OF_BUDGET)


def test_the_in_memory_tier_is_what_the_budget_leaves_beside_the_process():
    size, tier = memplan.linear_plan(256 * MB, 100_000, 0, resident=180 * MB)
    assert tier == int((256 * MB - 180 * MB) / budget.HEADROOM - 100_000 * memplan.STATE_BYTES_PER_ROW)
    assert memplan.linear_plan(4000 * MB, 100_000, 0, resident=180 * MB)[1] == int(4000 * MB * memplan.MEMORY_TIER_SHARE)
    assert memplan.linear_plan(200 * MB, 100_000, 0, resident=199 * MB)[1] == 0


def test_an_exact_run_that_does_not_fit_beside_the_process_is_refused_with_a_budget_that_does():
    """Below what the rows, vectors, preconditioner and blocks of Q need beside the process: refused
    before any work, naming a budget that holds them (a fixed point: Q's blocks grow with the
    budget); at that budget Q is read from disk; with room for Q, all of it is in memory."""
    import re
    from streamrank.errors import ParameterError
    l, d = 10_000, 46
    with pytest.raises(ParameterError, match="use memory_budget=") as e:
        memplan.exact_kernel_plan(l, d, 256 * MB, landmarks=1000, resident=186 * MB)
    named = float(re.search(r"use memory_budget=([0-9.]+) MB", str(e.value)).group(1)) * MB
    qblock, tier = memplan.exact_kernel_plan(l, d, int(named), landmarks=1000, resident=186 * MB)
    assert tier < 4 * l * l
    qblock, tier = memplan.exact_kernel_plan(l, d, 2000 * MB, landmarks=1000, resident=186 * MB)
    assert tier == 4 * l * l


def test_resident_bytes_is_this_process_with_the_kernel_runtime_loaded():
    """The same figure as VmRSS in /proc/self/status (Linux), within what a few calls allocate."""
    budget.load_kernel_runtime()
    try:
        with open("/proc/self/status") as f:
            vmrss = int([ln for ln in f if ln.startswith("VmRSS")][0].split()[1]) * 1024
    except OSError:
        assert budget.resident_bytes() == 0
        return
    assert abs(budget.resident_bytes() - vmrss) < 4 * 10**6
