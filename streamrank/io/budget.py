"""From a memory budget to the bytes of a block: what is resident already, what a run keeps per
row, and what is alive per byte of a raw block (its buffers and the copies made from it).

The budget (``--memory-budget``) bounds the whole process: the interpreter and its libraries
count, and so does numba's runtime, which the first compiled kernel call maps (so it is loaded
before the resident set is measured). Blocks get what remains, at most ``BLOCK_SHARE_OF_BUDGET``
of the budget each; the block size never changes a result (every sum runs in an order fixed by
the data), only the number of reads.
"""

import logging
import os


from streamrank.io.query_stream import BLOCK_SHARE_OF_BUDGET
from streamrank.units import format_size

log = logging.getLogger("streamrank.io.budget")

# two block buffers (one in use, one being read ahead)
BUFFERS = 2
# resident bytes per byte of numpy arrays planned here: the allocator's retained free memory,
# the numba kernels' per-query temporaries and HDF5's buffers (measured on generated mslr30k x
# 0.5 with a 309 MB budget: arrays peaked at 103 MB while RSS rose 128 MB above its start, and
# more over a longer run as the allocator fragments)
HEADROOM = 1.4
# bytes a streamed run holds besides its planned arrays whatever their size: HDF5's chunk buffers
# and checksum reads, the read-ahead thread, the allocator's arenas (measured: a stream of 10 MB
# blocks over generated mslr30k x 0.5 peaked 25 MB above its start, not 20)
STREAM_SLACK = 16 << 20


def load_kernel_runtime():
    """Call one small compiled kernel, so that numba's runtime is resident: the first call of any
    kernel maps LLVM's code (about 45 MB measured on Linux x86-64 with the threading layer),
    which a plan measured before it would leave out. Later calls cost nothing; the kernel is the
    smallest there is, so a first run does not compile a large one before it is needed."""
    from streamrank._native.linalg import runtime_probe
    runtime_probe(0)


def resident_bytes(kernels=True):
    """This process's resident set now (Linux /proc/self/statm; 0 where unavailable), with the
    kernels' runtime loaded first unless ``kernels`` is false."""
    if kernels:
        load_kernel_runtime()
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def block_bytes(budget, n_rows, *, per_row, per_block_byte=BUFFERS, extra=0, resident=None):
    """Bytes of one raw block for a run over ``n_rows`` rows within ``budget`` bytes: ``per_row``
    bytes kept for every row, ``per_block_byte`` bytes alive per byte of a raw block, ``extra``
    other fixed bytes (a preconditioner's temporaries)."""
    resident = resident_bytes() if resident is None else resident
    state = n_rows * per_row
    share = int(budget * BLOCK_SHARE_OF_BUDGET)
    left = int(((budget - resident - STREAM_SLACK) / HEADROOM - state - extra) / per_block_byte)
    if left <= 0:
        log.warning("memory budget %s is below what this run needs besides its blocks (%s resident, "
                    "%s of per-row state): peak RSS will exceed it; blocks of %s (an eighth of it)",
                    format_size(budget), format_size(resident), format_size(state), format_size(share))
        return max(1, share)
    if left < share:
        log.info("memory budget %s: %s resident and %s of per-row state leave %s blocks", format_size(budget),
                 format_size(resident), format_size(state), format_size(left))
    return max(1, min(share, left))
