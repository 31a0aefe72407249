"""The memory plan: blocks get what the budget leaves; the model never depends on it."""

from streamrank.training import memory_plan as memplan
from streamrank.io.query_stream import BLOCK_SHARE_OF_BUDGET


def test_blocks_get_what_the_resident_process_and_the_state_leave():
    MB = 10**6
    # plenty: the usual share of the budget
    assert memplan.block_bytes(4000 * MB, 1000, resident=200 * MB) == int(4000 * MB * BLOCK_SHARE_OF_BUDGET)
    # tight: resident + HEADROOM x (state + extra + two blocks) fills the budget exactly
    n, extra = 1_000_000, 9 * MB
    b = memplan.block_bytes(310 * MB, n, extra=extra, resident=190 * MB)
    planned = 190 * MB + memplan.HEADROOM * (n * memplan.STATE_BYTES_PER_ROW + extra + memplan.BUFFERS * b)
    assert 0 < b < 310 * MB * BLOCK_SHARE_OF_BUDGET and abs(planned - 310 * MB) < 10
    # impossible: the share, with a warning (the run goes on)
    assert memplan.block_bytes(50 * MB, n, resident=190 * MB) == int(50 * MB * BLOCK_SHARE_OF_BUDGET)


def test_resident_bytes_is_this_process():
    """The same figure as VmRSS in /proc/self/status (Linux), within what a few calls allocate."""
    try:
        with open("/proc/self/status") as f:
            vmrss = int([ln for ln in f if ln.startswith("VmRSS")][0].split()[1]) * 1024
    except OSError:
        assert memplan.resident_bytes() == 0
        return
    assert abs(memplan.resident_bytes() - vmrss) < 4 * 10**6
