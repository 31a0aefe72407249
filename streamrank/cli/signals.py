"""SIGINT, SIGTERM and SIGHUP end a command the same way (DESIGN.md, "Guarantees": signals).

While a command runs, each of them raises :class:`Interrupted` (a KeyboardInterrupt, so every
cleanup written for Ctrl-C runs: atomic writers remove their temporary files, checkpoints stay
whole, dask clusters and the warm-up helper are stopped) in the main thread; ``cli.main`` turns it
into one line and exit status 128 + the signal's number. A signal the process was started with
ignored (``nohup`` ignores SIGHUP) stays ignored. Once one signal is being handled, later ones are
ignored, so the cleanup it started is not cut short (SIGKILL still ends the process).
"""

import signal
import threading

NAMES = ("SIGINT", "SIGTERM", "SIGHUP")


class Interrupted(KeyboardInterrupt):
    """A command ended by signal ``signum``."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def signal_of(exc):
    """The signal number a KeyboardInterrupt stands for (a plain one: SIGINT)."""
    return getattr(exc, "signum", signal.SIGINT)


class Handlers:
    """``install()`` the handlers, ``restore()`` the ones before (both only in the main thread)."""

    def __init__(self):
        self._previous = {}
        self._raised = False

    def _handle(self, signum, frame):
        if self._raised:
            return
        self._raised = True
        raise Interrupted(signum)

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return
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

    def restore(self):
        previous, self._previous = self._previous, {}
        for num, handler in previous.items():
            signal.signal(num, signal.SIG_DFL if handler is None else handler)
