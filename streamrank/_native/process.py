"""The process-wide settings streamrank's speed depends on, applied by one call: :func:`configure`.

``import streamrank`` changes nothing in the process. The ``streamrank`` program calls
:func:`configure` first thing (``cli.main.main``, before numpy is imported); a library user who
wants the same speed calls ``streamrank.configure()`` before importing numpy (or anything that
imports it). Each setting changes speed only, never a result, and a value the user has set
already is kept:

- ``OPENBLAS_THREAD_TIMEOUT=20``: OpenBLAS's threads busy-wait 2^28 cycles (about 0.1 s) after each
  call before they sleep, and streamrank alternates BLAS products with numba passes on the same
  cores (the exact kernel path: the preconditioner's update, then a pass over Q), so spinning
  threads would take the cores from the next pass. OpenBLAS reads the variable once, when numpy
  loads it: set only while numpy is not imported.
- ``OMP_WAIT_POLICY=PASSIVE``: numba's OpenMP workers (the ``prange`` loops of the kernel paths)
  spin between parallel loops by default; on two cores they would take the core from the thread
  that maps the next block of Q. libgomp reads it once, when it loads: set only while numba is not
  imported.
- numpy's huge-page advice off: numpy asks for transparent huge pages on every large allocation
  (``madvise(MADV_HUGEPAGE)``), and where THP ``defrag`` is ``madvise`` (a common default) every
  such fault compacts memory synchronously, several times the cost of the touch itself. streamrank
  allocates its blocks and in-memory tiers once and touches them in one sweep.
  ``STREAMRANK_NUMPY_HUGEPAGES=1`` keeps numpy's default. This one takes effect whenever it is
  called (for later allocations); it imports numpy.

LLVM's SLP vectoriser needs no call: streamrank turns it on around its own compiles only
(:mod:`streamrank._native.numba_cache`).
"""

import os
import sys

# OPENBLAS_THREAD_TIMEOUT: the spin before a BLAS thread sleeps, 2^value cycles (4..30 accepted)
BLAS_SPIN_LOG2 = "20"
HUGEPAGES_ENV = "STREAMRANK_NUMPY_HUGEPAGES"


def configure() -> None:
    """Apply streamrank's process settings: OpenBLAS's threads spin briefly, OpenMP's workers
    sleep between loops, and numpy's huge-page advice is off (this module's docstring says what
    each buys). Call it before numpy is imported: the two environment variables are read once,
    when numpy and numba load, and are left unset when that has happened already. A value already
    in the environment is kept; ``STREAMRANK_NUMPY_HUGEPAGES=1`` keeps numpy's advice. Idempotent.

    The ``streamrank`` command line calls it; a library process that does not runs with its own
    settings and every result the same."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", BLAS_SPIN_LOG2)
    if "numba" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if os.environ.get(HUGEPAGES_ENV, "") != "1":
        set_hugepage_advice(False)


def set_hugepage_advice(on):
    """numpy's huge-page advice for its large allocations on or off; returns what it was, or None
    where numpy has no such switch. (A private numpy function, the only way to it.)"""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # numpy < 2
        try:
            from numpy.core.multiarray import _set_madvise_hugepage
        except ImportError:
            return None
    return bool(_set_madvise_hugepage(bool(on)))
