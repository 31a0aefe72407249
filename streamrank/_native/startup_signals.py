"""SIGINT, SIGTERM and SIGHUP before the command line's own handlers are installed.

``cli.main`` installs its handlers (:mod:`streamrank.cli.signals`) once its modules are imported and
the arguments parsed: a quarter of a second after start on an idle machine, more on a busy one.
A signal before that killed the process without a line (exit 143 on SIGTERM). When this process is
the ``streamrank`` program (the console script or ``python -m streamrank``), :func:`install` runs
first thing in ``import streamrank`` and ends the process on such a signal with the command's one
line and status 128 + the signal's number, as a later signal ends it. Nothing has been written
then, so nothing is left to keep. A signal the process was started with ignored stays ignored;
imported as a library, streamrank leaves every handler alone.
"""

import os
import signal
import sys

NAMES = ("SIGINT", "SIGTERM", "SIGHUP")


def is_command_line():
    """Whether this process runs the ``streamrank`` program (asked while streamrank is first imported)."""
    argv = list(getattr(sys, "orig_argv", ()))
    if sys.argv[:1] == ["-m"] and "-m" in argv:  # python [options] -m streamrank ...
        i = argv.index("-m")
        return argv[i + 1:i + 2] in (["streamrank"], ["streamrank.cli.main"])
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None) or ""
    return bool(sys.argv) and os.path.basename(sys.argv[0]) == "streamrank" and script == sys.argv[0]


def _end(signum, frame):
    command = next((a for a in sys.argv[1:] if not a.startswith("-")), "")
    name = signal.Signals(signum).name
    os.write(2, f"streamrank{' ' + command if command else ''}: interrupted by {name}\n".encode())
    os._exit(128 + signum)


def install():
    """End on SIGINT, SIGTERM or SIGHUP with the one line, when this process is the program."""
    if not is_command_line():
        return
    for name in NAMES:
        num = getattr(signal, name, None)
        try:
            if num is not None and signal.getsignal(num) is not signal.SIG_IGN:
                signal.signal(num, _end)
        except (ValueError, OSError):  # pragma: no cover - not the main thread, or no such signal here
            pass
