"""Progress of long work on standard error: bars where a line can be redrawn in place, plain
lines where it cannot.

- **Bars** (tqdm) are drawn only where standard error redraws a line in place, a terminal or a
  notebook, or wherever the user asks for them (``streamrank ... --progress``): a pass over the
  data that runs longer than :data:`PASS_BAR_DELAY` shows its rows, rows/s and the pass's ETA;
  convert shows its bytes; grid and cv their configurations.
- **Plain lines** everywhere else (a log file, a pipe): one line such as ``progress: grid 4/10
  configurations (40%), 1 min 12 s elapsed, about 1 min 48 s left`` at most every
  :data:`PLAIN_INTERVAL` seconds, without carriage returns, so a log holds the log lines and these
  (a bar written to a file leaves a frame per redraw: grid's log held one before every line).

Off unless switched on (the CLI does, but for ``--quiet`` and ``--json``; the Python API with
``verbose=True``), so library calls and tests print nothing. What :func:`bar` returns is
tqdm's bar or an object with its API (``total=``, ``update(n)`` with int or float weights, ``n``,
``set_postfix_str``, ``close``, a context manager), so callers need not know which they have.
"""

import contextlib
import sys
import time

# a pass's bar appears only once the pass has run this long (short passes, most of them, stay silent)
PASS_BAR_DELAY = 2.0
# at most this many redraws a second
MIN_INTERVAL = 0.5
# a plain progress line at most this often (seconds): a log of a long run gets a few hundred, not a
# line per block
PLAIN_INTERVAL = 30.0

# "on": None outside any progress() (library calls), False inside progress(False) (--json, --quiet)
_state = {"on": None, "draw": None, "interval": PLAIN_INTERVAL, "shown": 0.0, "passes": 0, "last_line": 0.0,
          "open": []}


def shown():
    """Something was just shown to the user (a log line): the next bars wait PASS_BAR_DELAY again."""
    _state["shown"] = time.monotonic()


@contextlib.contextmanager
def progress(on=True, *, draw=None, interval=None):
    """``with progress():`` progress is shown inside the block (``on=False``: hidden).

    ``draw``: True draws bars wherever standard error goes (``--progress``), False never, None
    (default) where it redraws a line in place (a terminal or a notebook); elsewhere plain lines,
    at most one every ``interval`` seconds (default :data:`PLAIN_INTERVAL`; tests pass 0)."""
    before, was_open = dict(_state), list(_state["open"])
    _state.update(on=bool(on), draw=draw, interval=PLAIN_INTERVAL if interval is None else float(interval),
                  last_line=time.monotonic())
    shown()
    try:
        yield
    finally:
        for k in ("on", "draw", "interval", "last_line"):
            _state[k] = before[k]
        _state["open"][:] = [b for b in _state["open"] if b in was_open]  # bars an error left open


def drawing():
    """Whether bars are drawn now (progress on, and a terminal or ``--progress``)."""
    if not _state["on"]:
        return False
    return _redraws_in_place() if _state["draw"] is None else bool(_state["draw"])


def _redraws_in_place():
    """Only where standard error redraws a line in place, a terminal or a notebook, is a bar a
    bar. Written to a file, every redraw leaves its frame behind (an exact kernel's run: one line
    per CG step; grid's: a bar before every log line)."""
    try:
        return sys.stderr.isatty() or "ipykernel" in sys.modules
    except (AttributeError, ValueError):
        return False


def bar(total, desc, unit, delay=0.0, leave=True, *, own=False, unit_scale=None):
    """A progress bar of ``total`` (None: unknown) ``unit``: tqdm's where bars are drawn, a
    :class:`PlainBar` where they are not, a disabled one while progress is off. ``own``: a
    library call's own bar (a conversion's), drawn on a terminal outside any :func:`progress`
    (a library call), silent in a file then and inside ``progress(False)``."""
    unit_scale = unit in ("rows", "B") if unit_scale is None else unit_scale
    if drawing() or (own and _state["on"] is None and _redraws_in_place()):
        from tqdm import tqdm
        return tqdm(total=total, desc=desc, unit=unit, unit_scale=unit_scale, delay=delay, leave=leave,
                    file=sys.stderr, dynamic_ncols=True, mininterval=MIN_INTERVAL)
    return PlainBar(total, desc, unit, silent=not _state["on"])


class PlainBar:
    """tqdm's API, shown as a plain line now and then (:func:`report`) instead of a bar; or
    nothing (``silent``). ``update(n)`` takes int or float weights."""

    disable = False

    def __init__(self, total=None, desc="", unit="it", silent=False):
        self.total, self.desc, self.unit, self.n = total, desc, unit, 0
        self.postfix = ""
        self.silent = silent
        self.start = time.monotonic()
        self.closed = False
        if not silent:
            _state["open"].append(self)

    def update(self, n=1):
        self.n += n
        if not self.silent:
            report()

    def set_postfix_str(self, s="", refresh=True):
        self.postfix = str(s)

    def set_description(self, desc=None, refresh=True):
        self.desc = desc or ""

    def refresh(self):
        pass

    def close(self):
        if not self.closed:
            self.closed = True
            if self in _state["open"]:
                _state["open"].remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def line(self, now=None):
        """``grid 4/10 configurations (40%), 12 s elapsed, about 18 s left`` (weights that are not
        whole numbers: ``cv 35% of the work``); the postfix in parentheses after the count."""
        now = time.monotonic() if now is None else now
        elapsed = now - self.start
        done, total = self.n, self.total
        whole = float(done).is_integer() and (total is None or float(total).is_integer())
        if total is None or not total > 0:
            count = f"{_amount(done, self.unit)} {'' if self.unit == 'B' else _plural(self.unit)}".rstrip()
            frac = None
        else:
            frac = min(max(done / total, 0.0), 1.0)
            if self.unit == "B":
                count = f"{_amount(done, 'B')} of {_amount(total, 'B')} ({frac:.0%})"
            elif whole:
                count = f"{_amount(done, self.unit)}/{_amount(total, self.unit)} {_plural(self.unit)} ({frac:.0%})"
            else:
                count = f"{frac:.0%} of the work"
        post = f" ({self.postfix})" if self.postfix else ""
        left = f", about {duration(elapsed * (1 - frac) / frac)} left" if frac and frac < 1 else ""
        return f"{self.desc} {count}{post}, {duration(elapsed)} elapsed{left}"


def report(now=None):
    """Write one plain progress line (the outermost open bar's; an inner pass's after it) if
    the last was at least the interval ago."""
    now = time.monotonic() if now is None else now
    if not _state["open"] or now - _state["last_line"] < _state["interval"]:
        return
    _state["last_line"] = now
    bars = _state["open"]
    text = bars[0].line(now) + "".join(f"; {b.line(now)}" for b in bars[1:2])
    try:
        sys.stderr.write(f"progress: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed standard error: nothing can be said
        pass


def close_all():
    """Forget the plain bars left open (a command that ended by an error)."""
    for b in list(_state["open"]):
        b.close()


def _plural(unit):
    """tqdm's units are singular (``configuration``); a count of them is not."""
    return unit if unit.endswith("s") else unit + "s"


def _amount(v, unit):
    """``1,234`` / ``1.2M`` rows / ``3.4 GB`` (bytes)."""
    if unit == "B":
        from streamrank.units import format_size
        return format_size(v)
    if not float(v).is_integer():
        return f"{v:,.1f}"
    v = int(v)
    return f"{v / 1e6:.1f}M" if unit == "rows" and v >= 10**6 else f"{v:,}"


def duration(seconds):
    """``45 s``, ``1 min 12 s``, ``2 h 5 min``."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


def block_rows(source):
    """Rows of each block of ``source`` when its plan says (a stream, a source over one, a kernel
    cache's own blocks), else None."""
    import numpy as np  # here: the command line imports this module before it configures numpy
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
    """The bar of one pass: ``step(k)`` after block ``k``. Drawn (erased when the pass ends) where
    bars are; a plain line's second part elsewhere (``; pass 12 linear 1.2M/3.4M rows``)."""

    def __init__(self, p, source):
        self.rows = block_rows(source) if _state["on"] else None
        name = type(p).__name__.strip("_").lower()
        _state["passes"] += 1
        # a bar appears once PASS_BAR_DELAY has gone by without output: within a long pass, or at
        # once for the next of many short ones (an exact kernel's CG steps between log lines)
        delay = max(0.0, PASS_BAR_DELAY - (time.monotonic() - _state["shown"]))
        desc = f"pass {_state['passes']} {name}"
        total = None if self.rows is None else int(self.rows.sum())
        unit = "blocks" if self.rows is None else "rows"  # rows when the source's plan gives them
        if not _state["on"]:
            self.bar = None
        elif drawing():
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=unit == "rows", delay=delay, leave=False,
                            file=sys.stderr, dynamic_ncols=True, mininterval=MIN_INTERVAL)
        else:
            self.bar = PlainBar(total, desc, unit)

    def step(self, k):
        if self.bar is not None:
            self.bar.update(int(self.rows[k]) if self.rows is not None and k < len(self.rows) else 1)

    def close(self):
        if self.bar is not None:
            self.bar.close()
