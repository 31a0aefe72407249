"""Progress bars (tqdm, on standard error) for long work: a pass over the data that runs longer than
:data:`PASS_BAR_DELAY` shows its rows, rows/s and the pass's ETA (on a terminal or in a notebook,
where the bar is erased when the pass ends); grid and cv show their
configurations. Off unless switched on (the CLI does, but for ``--quiet`` and ``--json``; the
Python API with ``verbose=True``), so library calls and tests print nothing.
"""

import contextlib
import sys
import time

import numpy as np

# a pass's bar appears only once the pass has run this long (short passes, most of them, stay silent)
PASS_BAR_DELAY = 2.0
# at most this many redraws a second
MIN_INTERVAL = 0.5

_state = {"on": False, "shown": 0.0, "passes": 0}


def shown():
    """Something was just shown to the user (a log line): the next bars wait PASS_BAR_DELAY again."""
    _state["shown"] = time.monotonic()


@contextlib.contextmanager
def progress(on=True):
    """``with progress():`` bars are shown inside the block (``on=False``: hidden)."""
    before = _state["on"]
    _state["on"] = bool(on)
    shown()
    try:
        yield
    finally:
        _state["on"] = before


def bar(total, desc, unit, delay=0.0, leave=True):
    """A tqdm bar (disabled while progress is off)."""
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "rows", delay=delay, leave=leave,
                disable=not _state["on"], file=sys.stderr, dynamic_ncols=True, mininterval=MIN_INTERVAL)


def _redraws_in_place():
    """A pass's bar is erased when the pass ends (``leave=False``): only where standard error
    redraws a line in place, a terminal or a notebook. Written to a file, every pass would leave
    its first frame behind (an exact kernel's run: one line per CG step); the solver's log lines
    say the same there."""
    try:
        return sys.stderr.isatty() or "ipykernel" in sys.modules
    except (AttributeError, ValueError):
        return False


def block_rows(source):
    """Rows of each block of ``source`` when its plan says (a stream, a source over one, a kernel
    cache's own blocks), else None."""
    layout, own = getattr(source, "layout", None), getattr(source, "own", None)
    if layout is not None and own is not None:
        return np.array([layout[k][1] - layout[k][0] for k in own], np.int64)
    stream = source if hasattr(source, "bounds") else getattr(source, "stream", None)
    bounds, dataset = getattr(stream, "bounds", None), getattr(stream, "dataset", None)
    if bounds is None or dataset is None:
        return None
    qp = dataset.query_ptr
    b = np.asarray(bounds)
    return qp[b[1:]] - qp[b[:-1]]


class PassBar:
    """The bar of one pass: ``step(k)`` after block ``k``."""

    def __init__(self, p, source):
        self.rows = block_rows(source) if _state["on"] else None
        name = type(p).__name__.strip("_").lower()
        _state["passes"] += 1
        # a bar appears once PASS_BAR_DELAY has gone by without output: within a long pass, or at
        # once for the next of many short ones (an exact kernel's CG steps between log lines)
        delay = max(0.0, PASS_BAR_DELAY - (time.monotonic() - _state["shown"]))
        desc = f"pass {_state['passes']} {name}"
        if not _state["on"] or not _redraws_in_place():
            self.bar = None
        else:  # rows when the source's plan gives them, else blocks (of an unknown total)
            self.bar = bar(None if self.rows is None else int(self.rows.sum()), desc,
                           "blocks" if self.rows is None else "rows", delay, leave=False)

    def step(self, k):
        if self.bar is not None:
            self.bar.update(int(self.rows[k]) if self.rows is not None and k < len(self.rows) else 1)

    def close(self):
        if self.bar is not None:
            self.bar.close()
