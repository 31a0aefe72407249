"""From a memory budget to the bytes of a block: what is resident already, what a run keeps per
row, and what is alive per byte of a raw block (its buffers and the copies made from it).

The budget (``--memory-budget``) bounds the whole process: the interpreter and its libraries
count, and so does numba's runtime, which the first compiled kernel call maps (so it is loaded
before the resident set is measured). Blocks get what remains, at most ``BLOCK_SHARE_OF_BUDGET``
of the budget each; the block size never changes a result (every sum runs in an order fixed by
the data), only the number of reads.
"""

import ctypes
import ctypes.util
import logging

from streamrank.io.query_stream import BLOCK_SHARE_OF_BUDGET
from streamrank.units import format_size

log = logging.getLogger("streamrank.io.budget")

# two block buffers (one in use, one being read ahead)
BUFFERS = 2
# resident bytes per byte of numpy arrays planned here: the allocator's retained free memory,
# the numba kernels' per-query temporaries and HDF5's buffers, which grow over a long run as the
# allocator fragments (docs/design.md, "Measurements behind the code")
HEADROOM = 1.4
# bytes a streamed run holds besides its planned arrays whatever their size: HDF5's chunk buffers
# and checksum reads, the read-ahead thread, the allocator's arenas (counted on top of HEADROOM)
STREAM_SLACK = 16 << 20


def remote_copies(ds):
    """Bytes alive per byte of a raw block beyond the planned buffers, for reading ``ds``: 1 for a
    dataset in a store (its known-parts cache holds the block's stored chunks while h5py copies
    them out: io.remote_file), else 0."""
    return 1 if getattr(ds, "_remote", None) is not None else 0


def load_kernel_runtime():
    """Call one small compiled kernel, so that numba's runtime is resident: the first call of any
    kernel maps LLVM's code (tens of MB with the threading layer), which a plan measured before
    it would leave out. Later calls cost nothing; the kernel is the smallest there is, so a first
    run does not compile a large one before it is needed."""
    from streamrank._native.linalg import runtime_probe
    runtime_probe(0)


def resident_bytes(kernels=True):
    """This process's resident set now (Linux /proc/self/statm; 0 where unavailable), with the
    kernels' runtime loaded first unless ``kernels`` is false."""
    from streamrank._native.memory import resident_now
    if kernels:
        load_kernel_runtime()
    return resident_now()


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


# glibc's malloc: a fixed mmap threshold (setting it turns off the dynamic one, which rises to the
# size of the largest mmapped block freed, up to 32 MB: after that every array up to that size
# comes from the heap or a thread's arena and stays in the resident set when freed, fragmented),
# and a heap trimmed past TRIM_BYTES, so that arrays freed long before do not stay in the
# resident set. Not below HDF5's buffer for a chunk (about 1 MB in our files): below it each chunk
# read maps, faults in and unmaps a fresh buffer (docs/design.md, "Measurements behind the code").
MMAP_THRESHOLD = 4 << 20
# the exact path's: its passes keep many arrays of 0.25-4 MB (rows of Q's blocks, the
# preconditioner's chunks) whose holes in the heap the budget cannot hold
EXACT_MMAP_THRESHOLD = 256 << 10
_threshold = None  # the threshold set in this process: the smallest any plan asked for
TRIM_BYTES = 4 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_libc = None


def _glibc():
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            # glibc only (musl and macOS have neither)
            _libc = lib if hasattr(lib, "mallopt") and hasattr(lib, "malloc_trim") else False
        except OSError:
            _libc = False
    return _libc


def tune_allocator(threshold=None):
    """Arrays above ``threshold`` (default MMAP_THRESHOLD) are mapped and unmapped when freed, the
    heap is trimmed past TRIM_BYTES (glibc; elsewhere nothing). A process-wide setting: only the
    allocation of memory changes, never a value. The threshold never rises once set (an exact run
    after a linear one lowers it; a validation pass inside an exact run keeps the exact path's).
    Returns whether it applied."""
    global _threshold
    lib = _glibc()
    if not lib:
        return False
    t = int(MMAP_THRESHOLD if threshold is None else threshold)
    if _threshold is not None and _threshold <= t:
        return True
    ok = bool(lib.mallopt(_M_MMAP_THRESHOLD, t)) and bool(lib.mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES))
    if ok:
        _threshold = t
    return ok


def release_freed():
    """Give the allocator's free memory back to the system (glibc's malloc_trim: the heap's top and
    the free pages inside it and every thread's arena); after a phase that freed large temporaries."""
    lib = _glibc()
    if lib:
        lib.malloc_trim(0)


# Shared libraries whose code a run has finished with once its kernels are loaded: LLVM (numba's
# compiler, in llvmlite). Importing numba maps its 82 MB of code and touches nearly all of it
# (static constructors, fault-around): 100 MB of the resident set of every run that uses a numba
# kernel, while a run that loads cached kernels runs a small part of it again (the object-code
# linker, at each kernel's first call).
IDLE_LIBRARIES = ("libllvmlite",)
_MADV_DONTNEED = 4


def drop_idle_library_pages(names=IDLE_LIBRARIES):
    """Take the resident pages of the read-only mappings of ``names`` out of this process's resident
    set (madvise MADV_DONTNEED; Linux). Only mappings without a private (copy-on-write) page
    ("Anonymous: 0 kB" in /proc/self/smaps) and not writable: their pages are the file's, so a later
    access reads the same bytes back from the page cache (man 2 madvise). Returns the bytes dropped."""
    lib = _glibc()
    if not lib:
        return 0
    try:
        with open("/proc/self/smaps") as f:
            lines = f.read().splitlines()
    except OSError:
        return 0
    spans, cur = [], None
    for ln in lines:
        head = ln.split(None, 5)
        if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
            path = head[5] if len(head) > 5 else ""
            cur = None
            if "w" not in head[1] and any(n in path for n in names):
                a, b = (int(x, 16) for x in head[0].split("-"))
                cur = [a, b, 0, 0]
                spans.append(cur)
        elif cur is not None and ln.startswith("Rss:"):
            cur[2] = int(ln.split()[1]) * 1024
        elif cur is not None and ln.startswith("Anonymous:"):
            cur[3] = int(ln.split()[1])
    madvise = lib.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    dropped = 0
    for a, b, rss, anon in spans:
        if anon == 0 and rss and madvise(a, b - a, _MADV_DONTNEED) == 0:
            dropped += rss
    return dropped
