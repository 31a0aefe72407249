"""Numba kernels: where the first non-finite float32 is, and how many there are.

A float32 is NaN or +-inf exactly when its 8 exponent bits are all ones. Shifted left by one (the
sign dropped), its bits as uint32 are then >= 0xFF000000, and a finite value's are below that. The
largest shifted word of a run of values is an integer max reduction, which LLVM vectorises without
fast-math (a float reduction such as sum(x * 0) would need reassociation, and fast-math's no-NaN
flag would let LLVM fold it to 0). The kernels take the values' bits (``a.view(np.uint32)``, one
dimension, contiguous): a block's rows are scanned right after HDF5 writes them into the buffer
(:meth:`streamrank.io.dataset.Dataset.read`), while they are still in cache.

Runs of ``_RUN`` values are tested by that max alone; a run that holds a non-finite value is
searched again one value at a time, so only the failing case pays for the position. The NumPy twin
is ``tests/io/finite_oracle.py``.
"""

import numba
import numpy as np

from streamrank._native import numba_cache

_RUN = 1 << 14             # values per max test: 64 KB, many vector iterations per test
_SHIFTED_INF = 0xFF000000  # (bits << 1) of +-inf; NaNs are above it


@numba.njit(cache=True, nogil=True)
def _top(bits):
    """max over the run of (bits << 1) as uint32: >= _SHIFTED_INF iff a value is not finite.

    A function of its own, called on a slice: inlined into the scan's strided loop, the reduction
    does not vectorise."""
    m = np.uint32(0)
    for i in range(bits.shape[0]):
        m = max(m, np.uint32(bits[i] << np.uint32(1)))
    return m


@numba.njit(cache=True, nogil=True)
def first_non_finite(bits):
    """Index of the first value whose float32 ``bits`` (uint32, 1-D) are NaN or +-inf, or -1."""
    n = bits.shape[0]
    for r in range((n + _RUN - 1) // _RUN):
        a = r * _RUN
        if _top(bits[a:a + _RUN]) >= np.uint32(_SHIFTED_INF):
            for i in range(a, min(a + _RUN, n)):
                if np.uint32(bits[i] << np.uint32(1)) >= np.uint32(_SHIFTED_INF):
                    return i
    return -1


@numba.njit(cache=True, nogil=True)
def count_non_finite(bits):
    """How many of the float32 ``bits`` (uint32, 1-D) are NaN or +-inf."""
    n = bits.shape[0]
    count = 0
    for r in range((n + _RUN - 1) // _RUN):
        a = r * _RUN
        if _top(bits[a:a + _RUN]) >= np.uint32(_SHIFTED_INF):
            for i in range(a, min(a + _RUN, n)):
                if np.uint32(bits[i] << np.uint32(1)) >= np.uint32(_SHIFTED_INF):
                    count += 1
    return count


def bits_of(a):
    """The uint32 words of a contiguous float32 array, as one dimension (a view, no copy)."""
    return a.reshape(-1).view(np.uint32)


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
