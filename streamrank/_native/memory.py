"""Memory helpers for streamrank's large buffers: heap trimming, cache-line-aligned arrays and the
resident set. (The process-wide settings, numpy's huge-page advice among them, are in
:mod:`streamrank._native.process`.)"""

import os


def trimmer(min_growth=0):
    """A function that hands the free pages of glibc's heaps back to the system (malloc_trim),
    or does nothing off glibc. For pipelines that allocate and free buffers of megabytes in
    several threads (conversion): glibc raises its mmap threshold to the size of every mmapped
    block it frees, after which such buffers come from per-thread heaps that keep their pages.

    ``min_growth`` (bytes): trim only when the heaps' free bytes (``mallinfo2``) have grown by
    more than that since the last trim, so at most that much more stays mapped. A trim walks
    every heap while the caller's other threads wait; ungated at each pass's start, it would
    mostly free nothing."""
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    info = getattr(libc, "mallinfo2", None)  # glibc >= 2.33
    if not min_growth or info is None:
        return lambda: trim(0)

    class _Mallinfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                    "fsmblks", "uordblks", "fordblks", "keepcost")]

    info.restype = _Mallinfo2
    after = [None]  # the free bytes the last trim left

    def gated():
        free = info().fordblks
        if after[0] is None or free > after[0] + min_growth:
            trim(0)
            after[0] = info().fordblks
    return gated


# The cache-line boundary streamrank's hot buffers start on: block rows (when a row's bytes are a
# multiple of 32), and the fused passes' X^T sums (_native.fused._aligned_acc). The passes read
# each row with 32-byte loads and store the sums at full width, and numpy's large arrays begin 16
# bytes past a line, so every other access would straddle two
ALIGN = 64


def aligned_empty(shape, dtype):
    """``np.empty(shape, dtype)`` whose first element sits on an ``ALIGN`` boundary."""
    import numpy as np
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    buf = np.empty(n * dtype.itemsize + ALIGN, np.uint8)
    off = (-buf.ctypes.data) % ALIGN
    return buf[off:off + n * dtype.itemsize].view(dtype).reshape(shape)


def resident_now():
    """This process's resident set in bytes now (Linux /proc/self/statm; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
