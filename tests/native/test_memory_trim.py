"""The pass-start heap trim (``_native.memory.trimmer``): gated by the growth of the heaps' free
bytes, so a pass that freed little does not pay a walk of every heap."""

import ctypes
import ctypes.util
import threading

import pytest

from streamrank._native.memory import trimmer

libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
if getattr(libc, "mallinfo2", None) is None or getattr(libc, "malloc_trim", None) is None:
    pytest.skip("glibc >= 2.33 only (mallinfo2)", allow_module_level=True)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


libc.mallinfo2.restype = _Mallinfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]


def _free_bytes():
    return libc.mallinfo2().fordblks


def _rss():
    import os
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _freed_in_a_heap(n_bytes, out):
    """Allocate, touch and free n_bytes in 64 KB pieces (below any mmap threshold) in a new
    thread's heap, keeping the last piece so the heap's top stays in use: the freed pages stay
    resident in glibc's heap until a trim."""
    ptrs = [libc.malloc(64 << 10) for _ in range(n_bytes >> 16)]
    for p in ptrs:
        ctypes.memset(p, 1, 64 << 10)  # resident
    for p in ptrs[:-1]:
        libc.free(p)
    out.append(ptrs[-1])


def _grow_free(n_bytes):
    keep = []
    t = threading.Thread(target=_freed_in_a_heap, args=(n_bytes, keep))
    t.start()
    t.join()
    return keep


def test_gated_trim_runs_when_free_bytes_grew_and_skips_otherwise():
    """The free pages stay resident (the heap's top is in use, so only a trim's madvise gives
    them back) until the free bytes have grown past the gate since the last trim."""
    trim = trimmer(8 << 20)
    trim()  # the first call always trims: the baseline
    keep = _grow_free(4 << 20)  # 4 MB: under the 8 MB gate
    rss = _rss()
    trim()
    assert _rss() > rss - (2 << 20)  # skipped: the 4 MB stay resident
    keep += _grow_free(32 << 20)  # 32 MB more: past the gate
    rss = _rss()
    trim()
    assert _rss() < rss - (24 << 20)  # trimmed
    for p in keep:
        libc.free(p)


def test_ungated_trim_always_runs():
    trim = trimmer()
    keep = _grow_free(16 << 20)
    rss = _rss()
    trim()
    assert _rss() < rss - (8 << 20)
    for p in keep:
        libc.free(p)
