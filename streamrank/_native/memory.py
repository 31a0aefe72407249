"""Process-wide memory settings that streamrank's large buffers depend on.

numpy asks the kernel for transparent huge pages on every large allocation
(``madvise(MADV_HUGEPAGE)``). Where THP ``defrag`` is ``madvise`` (a common default), every
such fault compacts memory synchronously: measured on this project's machines, first touching a
600 MB array took 1.60 s with the advice and 0.26 s without. streamrank allocates its blocks and
in-memory tiers once and touches them in one sweep, so it turns the advice off when imported.
Set ``STREAMRANK_NUMPY_HUGEPAGES=1`` to keep numpy's default.
"""

import os


def configure():
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
