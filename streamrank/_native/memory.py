"""Process-wide memory settings that streamrank's large buffers depend on.

numpy asks the kernel for transparent huge pages on every large allocation
(``madvise(MADV_HUGEPAGE)``). Where THP ``defrag`` is ``madvise`` (a common default), every
such fault compacts memory synchronously: measured on this project's machines, first touching a
600 MB array took 1.60 s with the advice and 0.26 s without. streamrank allocates its blocks and
in-memory tiers once and touches them in one sweep, so it turns the advice off when imported.
Set ``STREAMRANK_NUMPY_HUGEPAGES=1`` to keep numpy's default.

OpenBLAS's threads busy-wait for 2^28 cycles (about 0.1 s) after each call before they sleep.
streamrank alternates BLAS products with numba passes on the same cores (the exact kernel path:
the preconditioner's update, then a pass over Q), and the spinning threads took the cores from
the next pass: measured on MQ2008 Fold1, the pass after each update took 96 to 134 ms instead of
41, and the update itself, which interleaves the two per chunk, 0.35-0.54 s instead of 0.31-0.35.
When streamrank is imported before numpy, the spin is cut to 2^20 cycles (OpenBLAS reads
``OPENBLAS_THREAD_TIMEOUT`` once, when numpy loads it); a value already set is kept.

numba leaves LLVM's SLP vectoriser off by default (``NUMBA_SLP_VECTORIZE=0``), so the row dots'
interleaved partial sums (``_native.fused``; four lanes then) compile to scalar multiply-adds: the linear
Hessian pass on 1.1M x 136 rows in memory took 0.078 s, 5.8x the time to read X once, scaling
1.96x from one thread to two (arithmetic, not bandwidth; tools/bench_limits.py, issue 34). With
SLP on, the same sums run several lanes at a time. SLP only packs independent operations of the same
kind; with no fastmath anywhere (qprod, linalg) LLVM may not reassociate a sum, so every kernel
gives the same bits (tools/check_bit_identity.py). When streamrank is imported before numba, it is
switched on (numba reads it once, when it loads); a value already set is kept. Kernels cached
by a process that compiled them otherwise are kept under their own key and not loaded
(:mod:`streamrank._native.numba_cache`).

numba's OpenMP threading layer (the ``prange`` loops of the kernel paths: Q's blocks, the
kernel maps) keeps its workers spinning between parallel loops (libgomp's default wait policy).
On two cores the spinning workers took the core from the thread that maps the next block of Q,
and the exact kernel path's first two-thread pass took about 10 s instead of 1 (generated
mq2007, issue 34). When streamrank is imported before numba, ``OMP_WAIT_POLICY=PASSIVE`` lets
them sleep; libgomp reads it once, when it loads; a value already set is kept.
"""

import os
import sys

# OPENBLAS_THREAD_TIMEOUT: the spin before a BLAS thread sleeps, 2^value cycles (OpenBLAS accepts 4..30)
BLAS_SPIN_LOG2 = "20"


def configure():
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", BLAS_SPIN_LOG2)
    if "numba" not in sys.modules:
        os.environ.setdefault("NUMBA_SLP_VECTORIZE", "1")
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if os.environ.get("STREAMRANK_NUMPY_HUGEPAGES", "") == "1":
        return
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # numpy < 2
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            return
    _set_madvise_hugepage(False)


def trimmer(min_growth=0):
    """A function that hands the free pages of glibc's heaps back to the system (malloc_trim),
    or does nothing off glibc. For pipelines that allocate and free buffers of megabytes in
    several threads (conversion): glibc raises its mmap threshold to the size of every mmapped
    block it frees, after which such buffers come from per-thread heaps that keep their pages
    (measured: converting 960 MB of text peaked 69 MB higher without the trim).

    ``min_growth`` (bytes): trim only when the heaps' free bytes (``mallinfo2``) have grown by
    more than that since the last trim, so at most that much more stays mapped. A trim walks
    every heap, and the linear passes called one at each pass's start with both threads idle:
    65-800 us a pass on 1.1M MSLR rows, to free nothing on two passes of three (issue 34)."""
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
# bytes past a line, so every other access straddled two (measured, 1.1M x 136 rows: the Hessian
# pass 3% faster with aligned rows, X^T 7.5 against 9.5-10 ns a row with aligned sums)
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
