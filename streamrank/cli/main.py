"""The ``streamrank`` command line (interface contract in DESIGN.md): the parser of every
command and the one place errors become messages and exit codes."""

import argparse
import re
import shlex
import signal
import sys

from streamrank._native.process import configure
from streamrank._version import __version__
from streamrank.cli import data_commands, export_commands, search_commands, train_commands
from streamrank.cli.common import _check_paths, _os_error, _setup_logging, shows_progress, translate
from streamrank.cli.signals import Handlers, signal_of
from streamrank.errors import StreamrankError
from streamrank.execution.progress import progress

# the first-use kernel lists (streamrank/_native/warm_manifest.py) each command starts with; train,
# grid and cv add each method's own (_warm_lists)
_WARM_LISTS = {"demo": "demo", "convert": "convert", "train": "train", "grid": "train", "cv": "train",
               "select-features": "select-features"}


def _warm_lists(args):
    """The kernel lists a command compiles on its first run: its own, and for train, grid and cv
    each method's (train's own list, recorded with --valid, only when --valid is given)."""
    base = _WARM_LISTS.get(args.command)
    if base != "train":
        return [base] if base else []
    methods = getattr(args, "method", None) or ["primal"]
    methods = [methods] if isinstance(methods, str) else list(methods)
    own = [] if args.command == "train" and not getattr(args, "valid", None) else ["train"]
    return own + [f"train-{m}" for m in methods]


def _budget_bytes(args):
    """The command's --memory-budget in bytes, None when it has none or it does not parse (the
    command says so itself, later)."""
    from streamrank.units import parse_size
    try:
        return parse_size(args.memory_budget) if getattr(args, "memory_budget", None) else None
    except Exception:  # noqa: BLE001 - refused with its message by the command
        return None


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line, as every other refusal is: the error, then
    where the options are listed, as git's hint says it (argparse printed the whole synopsis first,
    24 lines for train)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # a value such as --C -1e-5 or --coef0 -.5e1 is a (negative) number, not an option
        # (argparse's own pattern misses exponents and says "expected one argument")
        self._negative_number_matcher = re.compile(r"^-(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")

    def error(self, message):
        # one line, as every other refusal, ending where git's hint would be
        self.exit(2, f"{self.prog}: error: {message}; try '{self.prog} --help'\n")


def build_parser():
    p = _Parser(prog="streamrank", description="Pairwise ranking SVMs on data larger than memory.")
    p.add_argument("--version", action="version", version=f"streamrank {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for module in (data_commands, train_commands, search_commands, export_commands):
        module.register(sub)
    for c in sub.choices.values():  # every command may read or write a URL (streamrank.io.urls)
        c.add_argument("--storage-option", action="append", default=None, metavar="KEY=VALUE",
                       help="an option of the file system a URL is opened with (fsspec's storage_options; "
                            "e.g. anon=true, client_kwargs.endpoint_url=http://host:9000); repeat for more (default: "
                            "none, fsspec's own: the environment, config files)")
    return p


def main(argv=None):
    """Run one command (``argv``, default ``sys.argv[1:]``) and return its exit status. The
    program's process settings (``_native.process.configure``) come first, before numpy loads."""
    configure()
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    try:
        args = _parse(build_parser(), argv)
    except SystemExit as e:  # --help, --version, or a usage error argparse has printed
        return e.code
    args.command_line = "streamrank " + " ".join(shlex.quote(a) for a in argv)
    _folders_as_paths(args)
    if getattr(args, "compression", "unset") is None:
        from streamrank.io.hdf5_format import DEFAULT_COMPRESSION
        args.compression = DEFAULT_COMPRESSION
    from streamrank._native import warmup
    from streamrank.io.atomic import forget_input
    from streamrank.io.urls import storage_options
    handlers, inputs = Handlers(), []
    try:
        handlers.install()  # SIGTERM and SIGHUP end the command as SIGINT does
        _local_only(args)
        _check_paths(args, inputs)  # the inputs, which no output may be or replace
        # on a cold numba cache, helpers compile the command's kernels before it plans its memory
        warmup.start(_warm_lists(args), _budget_bytes(args))
        _setup_logging(getattr(args, "quiet", False),
                       progress=args.command in ("train", "select-features", "grid", "cv"))
        # bars on a terminal or with --progress; plain progress lines in a log (execution.progress)
        with progress(shows_progress(args), draw=True if getattr(args, "progress", False) else None), \
                storage_options(_storage_options(args)):
            return args.func(args)
    except (StreamrankError, FileNotFoundError) as exc:
        handlers.acknowledge()
        _end_bars()
        print(f"streamrank {args.command}: error: {_message(exc, args)}", file=sys.stderr)
        return 2
    except MemoryError as exc:  # the plan fits the budget, the machine has less: one line naming the budget
        handlers.acknowledge()
        _end_bars()
        print(f"streamrank {args.command}: error: {_memory_error(exc, args)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader of standard output went away (| head): stop quietly, as cat does
        handlers.acknowledge()
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:  # the system refused a read or write: one line, what and why
        handlers.acknowledge()
        _end_bars()
        print(f"streamrank {args.command}: error: {_os_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # SIGINT, SIGTERM or SIGHUP (cli.signals)
        signum = signal_of(exc)
        handlers.acknowledge()
        _end_bars()
        print(f"streamrank {args.command}: interrupted by {signal.Signals(signum).name}{_kept(args)}", file=sys.stderr)
        return 128 + signum
    finally:
        handlers.acknowledge()  # from here on a signal is ignored: the command has ended
        warmup.stop()
        for token in inputs:
            forget_input(token)
        handlers.restore()


def _parse(parser, argv):
    """``parser.parse_args(argv)``, with an unknown option refused by the command it was given to
    (``streamrank train: error: unrecognized arguments: --bogus``, then ``try 'streamrank train
    --help'``), not by ``streamrank`` itself."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        (sub.choices.get(getattr(args, "command", None), parser) if sub else parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    return args


# options that name a folder (grid's and cv's -o RUN_DIR among them): messages join names to them
_FOLDERS = ("png_dir", "workdir", "checkpoint", "cache_dir")


def _storage_options(args):
    """--storage-option KEY=VALUE ... as one dict (None when none is given)."""
    from streamrank.io.urls import merged, parse_option
    given = getattr(args, "storage_option", None)
    if not given:
        return None
    out = {}
    for text in given:
        out = merged(out, parse_option(text))
    return out


# where a URL is not taken yet: (command or None for any, option's dest, flag)
_LOCAL_ONLY = ((None, "cache_dir", "--cache-dir"), (None, "png_dir", "--png-dir"), (None, "workdir", "--workdir"),
               ("grid", "output", "-o"), ("cv", "output", "-o"), ("cv", "folds_dir", "FOLDS_DIR"),
               ("select-features", "output", "-o"), ("report", "output", "-o"), ("report", "run_dir", "RUN_DIR"))


def _local_only(args):
    """Refuse a URL where the command writes or walks a local folder (no silent local
    directory named ``s3:``)."""
    from streamrank.errors import InputError
    from streamrank.io.urls import is_url, shown
    for command, dest, flag in _LOCAL_ONLY:
        v = getattr(args, dest, None)
        if (command is None or command == args.command) and isinstance(v, str) and is_url(v):
            raise InputError(f"{flag} {shown(v)}: {args.command} takes a local path here, not a URL; give a local "
                             f"one (datasets, models, scores, exports and --checkpoint take URLs)")


def _folders_as_paths(args):
    """A folder as pathlib spells it (``run/`` -> ``run``, ``a//b`` -> ``a/b``; the same folder),
    so no message shows ``run//model.h5``, whichever way a file's name is joined to it."""
    from pathlib import Path
    names = _FOLDERS + (("output",) if args.command in ("grid", "cv") else ())
    for name in names:
        v = getattr(args, name, None)
        from streamrank.io.urls import is_url
        if isinstance(v, str) and v not in ("", "-") and not is_url(v):
            setattr(args, name, str(Path(v)))


def _end_bars():
    """Close the progress bars the command left open (grid's and cv's, a pass's), so the line that
    ends the command comes after them, not inside one."""
    from streamrank.execution.progress import close_all
    close_all()
    tqdm = getattr(sys.modules.get("tqdm"), "tqdm", None)
    for b in list(getattr(tqdm, "_instances", ())):
        try:
            b.close()
        except Exception:  # noqa: BLE001 - a bar must not hide the message
            pass


def _checkpoint_left(args):
    """What a command that ended early leaves to continue from, found on disk now: its --checkpoint
    DIR when that holds a checkpoint, a grid's or cv's newest configuration checkpoint, a
    conversion's last commit; None when there is none. Every message that names a checkpoint
    takes it from here, so none promises one that does not exist."""
    from pathlib import Path

    from streamrank.state.checkpoint import CURRENT, PREVIOUS
    try:
        if getattr(args, "checkpoint", None):
            from streamrank.io.urls import filesystem, is_url, store_errors
            if is_url(args.checkpoint):
                try:
                    fs, base = filesystem(args.checkpoint)
                    return args.checkpoint if any(fs.exists(f"{base.rstrip('/')}/{n}") for n in (CURRENT, PREVIOUS)) \
                        else None
                except store_errors():  # the store is gone: no checkpoint is promised
                    return None
            d = Path(args.checkpoint)
            return d if (d / CURRENT).is_file() or (d / PREVIOUS).is_file() else None
        if args.command in ("grid", "cv") and Path(args.output).is_dir():
            found = [p for p in Path(args.output).rglob(CURRENT) if p.parent.name == "checkpoint"]
            return max(found, key=lambda p: p.stat().st_mtime).parent if found else None
        if args.command == "convert":
            from streamrank.io.convert_progress import work_paths
            record = work_paths(args.output)[1]
            return record if record.is_file() else None
    except OSError:  # pragma: no cover - the folder changed meanwhile
        return None
    return None


def _kept(args):
    """What an interrupted command leaves to continue from, as the end of its last line
    (:func:`_checkpoint_left`; nothing when it leaves nothing)."""
    left = _checkpoint_left(args)
    if left is None:
        return ""
    return f"; checkpoint kept at {left}" + (
        " (the same command continues from it)" if args.command == "convert" else "")


def _message(exc, args):
    """The error line's text: the library's message in the CLI's terms; for a lost cluster, its cause
    and what to do here (:func:`_after_cluster_loss`)."""
    from streamrank.errors import StoreError
    from streamrank.execution.dask_executor import ClusterLost
    if isinstance(exc, ClusterLost):
        return f"{translate(exc.cause)}; {_after_cluster_loss(args)}"
    if isinstance(exc, StoreError):
        return f"{translate(str(exc))}{_after_store_loss(args)}"
    return translate(str(exc))


def _after_store_loss(args):
    """What to do after a store stopped answering: continue from the checkpoint where one exists
    (:func:`_checkpoint_left`), nothing otherwise."""
    left = _checkpoint_left(args)
    if left is None:
        return ""
    if args.command == "convert":
        return f"; the rows committed so far are kept at {left}: the same command continues once the store answers"
    how = "run the same command again" if getattr(args, "resume", False) else "pass --resume to the same command"
    return f"; the checkpoint in {left} is kept: {how} to continue once the store answers"


def _after_cluster_loss(args):
    """What to do after the cluster (its scheduler, or every worker) was lost: continue from the
    checkpoint where one exists (:func:`_checkpoint_left`), else run again."""
    where = "--workers N or --scheduler ADDRESS of live workers, or neither"
    left = _checkpoint_left(args)
    if left is not None:
        if getattr(args, "checkpoint", None):
            how = ("run the same command again" if getattr(args, "resume", False)
                   else "pass --resume to the same command")
            return f"the checkpoint in {left} is kept: {how} to continue from it ({where})"
        return f"the same command continues from the checkpoint kept at {left} ({where})"
    if getattr(args, "checkpoint", None):
        return (f"{args.checkpoint} holds no checkpoint yet (none was written before the loss): run the same "
                f"command again ({where})")
    if hasattr(args, "resume"):
        return (f"nothing of the run was saved: run the same command again ({where}); with --checkpoint DIR too, "
                f"a run that loses its cluster can continue with --resume")
    return f"run the same command again ({where})"


def run():
    """The ``streamrank`` program: :func:`main`, then the exit without the interpreter's teardown.

    A process that has loaded numba kernels spends a noticeable part of a short command's time
    tearing down numba's and LLVM's objects after the command is done. Everything an exit must do still runs: the exit
    handlers (logging's flush among them) and the flush of standard output and error; files are
    closed by the commands themselves. Where other threads still run (a dask cluster's) the
    process exits the normal way. Tests call :func:`main`, which returns.
    """
    code = main()
    code = 0 if code is None else code
    if not isinstance(code, int):  # as sys.exit(message): the message, status 1
        print(code, file=sys.stderr)
        code = 1
    if _others_running():
        sys.exit(code)
    import atexit
    import os
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing more can be said
                pass
        os._exit(code)


def _others_running():
    """True while a thread other than the main one and streamrank's idle pools runs (a dask
    cluster's, a user's), or a profiler or tracer watches (``python -m cProfile`` writes its
    output after the program returns): those get the interpreter's normal shutdown."""
    import threading
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    ours = ("streamrank-pass", "streamrank-atb")
    return any(t is not threading.main_thread() and not t.daemon and not t.name.startswith(ours)
               for t in threading.enumerate())




def _memory_error(exc, args):
    """The line for an allocation the system refused: what was asked (numpy says it) and the budget
    the plan was made for, which this machine cannot give."""
    what = str(exc).split(" for an array")[0].strip() or "an allocation failed"
    budget = getattr(args, "memory_budget", None)
    import os
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        have = 0
    from streamrank.units import format_size
    machine = f" ({format_size(have)} of memory on this machine)" if have else ""
    return (f"out of memory: {what[0].lower() + what[1:]}; the plan fitted --memory-budget {budget}, more than the "
            f"system could give{machine}: pass a smaller --memory-budget" if budget else
            f"out of memory: {what[0].lower() + what[1:]}{machine}")


if __name__ == "__main__":  # pragma: no cover
    run()
