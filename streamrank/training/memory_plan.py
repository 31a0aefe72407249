"""How a memory budget is spent: the block size that keeps a training run's peak RSS inside it.

The budget (``--memory-budget``) bounds the whole process: the interpreter and its libraries
(already resident when training starts), the per-row arrays the objective keeps (the active
sets of the accepted and of a trial point, 3 int32 each, and the label ranks), the
preconditioner's temporaries, and the two block buffers of the prefetching stream. Blocks get
what remains, at most ``BLOCK_SHARE_OF_BUDGET`` of the budget each; the block size never changes a
model (every sum runs in an order fixed by the data), only the number of reads.
"""

import logging
import os

from streamrank.io.query_stream import BLOCK_SHARE_OF_BUDGET

log = logging.getLogger("streamrank.training.memory_plan")

# per row: active sets of the accepted and the trial point (order, cut_pref, cut_less: int32
# each) and the label rank (int32)
STATE_BYTES_PER_ROW = 2 * 3 * 4 + 4
# two block buffers (one in use, one being read ahead)
BUFFERS = 2
# resident bytes per byte of numpy arrays planned here: the allocator's retained free memory,
# the numba kernels' per-query temporaries and HDF5's buffers (measured on generated mslr30k x
# 0.5 with a 309 MB budget: arrays peaked at 103 MB while RSS rose 128 MB above its start, and
# more over a longer run as the allocator fragments)
HEADROOM = 1.4


def resident_bytes():
    """This process's resident set now (Linux /proc/self/statm; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def block_bytes(budget, n_rows, extra=0, resident=None):
    """Bytes of one block for a run over ``n_rows`` rows within ``budget`` bytes; ``extra``:
    other fixed bytes of the run (the preconditioner's temporaries)."""
    resident = resident_bytes() if resident is None else resident
    fixed = resident + n_rows * STATE_BYTES_PER_ROW + extra
    share = int(budget * BLOCK_SHARE_OF_BUDGET)
    left = int(((budget - resident) / HEADROOM - (fixed - resident)) / BUFFERS)
    if left <= 0:
        log.warning("memory budget %.1f MB is below what this run needs besides its blocks (%.1f MB resident, "
                    "%.1f MB of per-row state): peak RSS will exceed it; blocks of %.1f MB (an eighth of it)",
                    budget / 1e6, resident / 1e6, n_rows * STATE_BYTES_PER_ROW / 1e6, share / 1e6)
        return max(1, share)
    if left < share:
        log.info("memory budget %.0f MB: %.0f MB resident and %.0f MB of per-row state leave %.0f MB blocks",
                 budget / 1e6, resident / 1e6, n_rows * STATE_BYTES_PER_ROW / 1e6, left / 1e6)
    return max(1, min(share, left))
