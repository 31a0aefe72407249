"""Named points where the crash tests kill the process (tests/faults, tools/soak.py).

``STREAMRANK_TEST_KILL=NAME:N`` makes the N-th pass through :func:`faultpoint(NAME) <faultpoint>` send
SIGKILL to its own process: no ``finally`` block, no atexit handler, no flush runs, as when the
machine loses power or the kernel's OOM killer strikes. Unset (always, outside the tests) a point
costs one dictionary lookup.

Points: ``dataset-append`` (a block of rows written by the dataset writer), ``dataset-close``
(index written, before the rename), ``checkpoint-write`` (inside a checkpoint file being written),
``cache-write`` (a feature or kernel cache block on its temporary name), ``cg-step`` (a CG step of
TRON), ``model-write`` (a model file on its temporary name), ``scores-write`` (predictions on their
temporary name), ``convert-commit`` (a conversion's progress record just written).
"""

import os
import signal

ENV = "STREAMRANK_TEST_KILL"
POINTS = ("dataset-append", "dataset-close", "checkpoint-write", "cache-write", "cg-step", "model-write",
          "scores-write", "convert-commit")


def _parse(spec):
    if not spec:
        return None
    name, _, n = spec.partition(":")
    if name not in POINTS or not n.isdigit() or int(n) < 1:
        raise ValueError(f"{ENV}={spec!r}: expected NAME:N with NAME one of {', '.join(POINTS)} and N >= 1")
    return name, int(n)


_TARGET = _parse(os.environ.get(ENV, ""))
_SEEN = {}


def faultpoint(name):
    """Kill this process here if the test asked for the current pass through ``name``."""
    if _TARGET is None or _TARGET[0] != name:
        return
    _SEEN[name] = _SEEN.get(name, 0) + 1
    if _SEEN[name] == _TARGET[1]:
        os.kill(os.getpid(), signal.SIGKILL)
