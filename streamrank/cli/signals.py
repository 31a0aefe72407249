"""SIGINT, SIGTERM and SIGHUP end a command the same way (DESIGN.md, "Guarantees": signals).

While a command runs, each of them raises :class:`Interrupted` (a KeyboardInterrupt, so every
cleanup written for Ctrl-C runs: atomic writers remove their temporary files, checkpoints stay
whole, dask clusters and the warm-up helper are stopped) in the main thread; ``cli.main`` turns it
into one line and exit status 128 + the signal's number. A signal the process was started with
ignored (``nohup`` ignores SIGHUP) stays ignored. Before they are installed (the program's imports),
:mod:`streamrank._native.startup_signals` ends the program on these signals with the same line.

An exception a signal handler raises can be lost: CPython runs the handler at whatever bytecode the
main thread is at, and C code that calls back into Python and then clears whatever error it got
(``PyDict_GetItem`` does, with a key whose ``__eq__`` is Python) discards it silently, and the
command would run to its end and exit 0. So the first signal also starts a watcher that re-delivers
it to the main thread every :data:`RETRY_SECONDS` until ``cli.main`` has acknowledged it; a repeat
raises again only where no exception is being handled, so the cleanup that a delivered one started
is never cut short (a second Ctrl-C then waits for it; SIGKILL still ends the process).
"""

import signal
import sys
import threading

NAMES = ("SIGINT", "SIGTERM", "SIGHUP")
RETRY_SECONDS = 0.25


class Interrupted(KeyboardInterrupt):
    """A command ended by signal ``signum``."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def signal_of(exc):
    """The signal number a KeyboardInterrupt stands for (a plain one: SIGINT)."""
    return getattr(exc, "signum", signal.SIGINT)


class Handlers:
    """``install()`` the handlers, ``acknowledge()`` the interruption once it has arrived,
    ``restore()`` the handlers from before (all in the main thread)."""

    def __init__(self):
        self._previous = {}
        self.signum = None      # the first signal received
        self._done = threading.Event()  # acknowledged or restored: the watcher stops

    def _handle(self, signum, frame):
        if self._done.is_set():
            return
        if self.signum is None:
            self.signum = signum
            threading.Thread(target=self._watch, name="streamrank-signal-watch", daemon=True).start()
            raise Interrupted(signum)
        if sys.exc_info()[1] is None:  # the first was lost (no exception is on its way): again
            raise Interrupted(self.signum)

    def _watch(self):
        main = threading.main_thread().ident
        while not self._done.wait(RETRY_SECONDS):
            try:
                signal.pthread_kill(main, self.signum)
            except (OSError, ValueError):  # pragma: no cover - the main thread is gone
                return

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return
        self._hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        for name in NAMES:
            num = getattr(signal, name, None)
            if num is None:
                continue
            try:
                if signal.getsignal(num) is signal.SIG_IGN:
                    continue
                self._previous[num] = signal.signal(num, self._handle)
            except (ValueError, OSError):  # pragma: no cover - a platform without it
                pass

    def acknowledge(self):
        """The command is ending (the interruption reached ``cli.main``, or it ended otherwise):
        no more re-deliveries, and later signals are ignored until :meth:`restore`."""
        self._done.set()

    def _unraisable(self, unraisable):
        """An Interrupted raised where Python cannot pass it on (a weakref callback or __del__ that
        the signal handler ran inside) is said by no one: the watcher sends the signal again, and
        the command's one line follows. Anything else goes to the hook from before."""
        if not isinstance(unraisable.exc_value, Interrupted):
            self._hook(unraisable)

    def restore(self):
        if getattr(self, "_hook", None) is not None and sys.unraisablehook == self._unraisable:
            sys.unraisablehook = self._hook
        self._done.set()
        previous, self._previous = self._previous, {}
        for num, handler in previous.items():
            signal.signal(num, signal.SIG_DFL if handler is None else handler)
