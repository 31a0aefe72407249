"""What every command shares: library messages in the CLI's terms, logging, option parsers, output
checks and the executor of --workers / --scheduler."""

import argparse
import contextlib
import logging
import re
import sys
from pathlib import Path

from streamrank import settings as training_settings
from streamrank.console import setup_logging
from streamrank.errors import StreamrankError

# library parameter -> command-line flag: library messages name parameters (``C=0.5``,
# ``resume=False``); what the CLI prints names its flags (``--C 0.5``, ``without --resume``)
FLAGS = {**training_settings.flags(),  # the training settings' flags (and the estimators' names for them)
         **{s.api_name: s.flag for s in training_settings.TABLE.values()
            if s.flag and s.api_name not in (None, s.name)},
         "n_features": "--n-features", "query_files": "--query-file", "zero_based": "--zero-based", "valid": "--valid",
         "part": "--part", "preset": "--preset", "scale": "--scale", "importance": "--importance",
         "tradeoff": "--tradeoff", "workers": "--workers", "scheduler": "--scheduler",
         "partition_rows": "--partition-rows", "commit_seconds": "--commit-every", "pad_features": "--pad-features",
         "workdir": "--workdir", "plots": "--plots", "format": "--format", "name": "--name",
         "feature_names": "--feature-names"}
# boolean parameters whose flag switches them off: ``use plots=False`` -> ``pass --no-plots``
FLAGS_OFF = {"plots": "--no-plots"}
_PARAM = "|".join(sorted(map(re.escape, FLAGS), key=len, reverse=True))
# only where a message says what to set: after "use", "or", "and", "with" or "(" (descriptions such
# as "C=0.01: tron eps=..." or "kernel=sigmoid is not PSD" keep the library's words)
_FIX = re.compile(rf"(\b[Uu]se |\bor |\band |\()({_PARAM})=(\S*?)(?=[\s;,)]|$)|\bwith ({_PARAM})=(True|False)\b")


def translate(message):
    """A library message in the CLI's terms where it says what to set: ``use C=0.5`` -> ``pass --C
    0.5``, ``with resume=False`` -> ``without --resume``, ``use zero_based=True`` -> ``pass
    --zero-based``, ``(valid=DATA)`` -> ``(--valid DATA)``."""
    def fix(m):
        if m.group(4):  # "with name=True|False"
            if m.group(5) == "False" and m.group(4) in FLAGS_OFF:
                return "with " + FLAGS_OFF[m.group(4)]
            return ("with " if m.group(5) == "True" else "without ") + FLAGS[m.group(4)]
        lead, flag, value = m.group(1), FLAGS[m.group(2)], m.group(3)
        word = {"Use ": "Pass ", "use ": "pass "}.get(lead, lead)
        if value == "False" and m.group(2) in FLAGS_OFF:
            return word + FLAGS_OFF[m.group(2)]
        if value == "False":
            return word + "no " + flag
        if value == "True":
            return word + flag
        return f"{word}{flag} {value}"
    from streamrank.io.urls import redact_urls
    return redact_urls(_BLOCK_FIX.sub(_BLOCK_ADVICE, _FIX.sub(fix, message)))


# the stream's advice on a planned block too small for a query names block_bytes, which no flag
# sets: on the command line the memory plan chose the block, and its own line names the budget
_BLOCK_FIX = re.compile(r"use block_bytes=\d+ or more \(a memory plan gives a block that holds the largest query "
                        r"whenever it accepts the budget\)")
_BLOCK_ADVICE = ("pass a --memory-budget the plan accepts (a planned block holds the largest query; the plan's "
                 "line names the budget)")


def _setup_logging(quiet, progress=True):
    """Library log lines (and warnings) on stderr in the CLI's terms (:func:`translate`):
    :func:`streamrank.console.setup_logging` with the CLI's wording."""
    setup_logging(quiet, progress, wording=translate)


def _positive_int(name, example):
    """A parser of flag ``name``'s integer, in its range of the table (streamrank.params; > 0
    for a flag the table does not list)."""
    from streamrank import params
    param = {f: p for p, f in FLAGS.items()}.get(name, name.lstrip("-").replace("-", "_"))
    r = params.RANGES.get(param)

    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer; got {text!r}") from None
        if not (r.holds(v) if r is not None else v > 0):
            fix = params.suggest(param, v) if r is not None else (str(-v) if v < 0 else example)
            raise argparse.ArgumentTypeError(f"{name} must be {r.describe() if r is not None else 'an integer > 0'}; "
                                             f"got {v}" + (f". Pass {name} {fix}" if fix else ""))
        return v
    return parse


def _check_outputs(*items):
    """Every (path, what, special_ok) the command will write, tried before the work starts."""
    from streamrank.io.atomic import check_writable
    for path, what, special_ok in items:
        if path is not None:
            check_writable(path, what, special_ok=special_ok)


# --- no output is an input: what each command reads and writes, checked before any work ---------------
# A command's ``paths(args)`` (set_defaults) returns (inputs, outputs, trees): inputs [(name, path)],
# outputs [(flag, path, within)] (``within``: the directory the flag named, for a file inside it),
# trees [(flag, directory)] that the command fills and may delete. cli.main registers the inputs for
# the whole command (the writers of io.atomic refuse them: the guarantee) and checks the outputs
# here first, for a message in the command's flags.

def _data_inputs(name, path, query_file=None):
    """DATA and the group-size files a text DATA may be read with."""
    if path is None:
        return []
    out = [(name, path)]
    if query_file:
        out.append(("--query-file", query_file))
    sibling = Path(str(path) + ".query")
    if sibling.is_file():
        out.append((f"{name}'s query file", sibling))
    return out


def _features_inputs(spec):
    """The file --features reads: @FILE, or the GAS file of GAS.h5:K."""
    spec = str(spec or "").strip()
    if spec.startswith("@"):
        return [("--features", spec[1:])]
    if ":" in spec and spec.rsplit(":", 1)[0].endswith((".h5", ".hdf5")):
        return [("--features", spec.rsplit(":", 1)[0])]
    return []


def _cache_outputs(args):
    """--cache-dir: not an input itself, and no input inside the caches it fills and evicts."""
    d = getattr(args, "cache_dir", None)
    if not d:
        return [], []
    from streamrank.cache.feature_cache import DIR_PREFIX
    trees = [("--cache-dir", p) for p in sorted(Path(d).glob(DIR_PREFIX + "*"))] if Path(d).is_dir() else []
    return [("--cache-dir", d, None)], trees


def _checkpoint_outputs(args, extra=()):
    """The files --checkpoint DIR's writes create or replace."""
    d = getattr(args, "checkpoint", None)
    if not d:
        return []
    from streamrank.io.urls import is_url
    from streamrank.state.checkpoint import files
    if is_url(d):
        return [("--checkpoint", p, None) for p in files(d)]
    return [("--checkpoint", d, None)] + [("--checkpoint", p, d) for p in files(d) + [Path(d) / n for n in extra]]


def _check_paths(args, tokens):
    """Register the command's inputs (their tokens appended to ``tokens``, for the caller to forget)
    and refuse, before any work, an output that is or links to one of them, or a folder it fills
    that holds one."""
    from streamrank.io.atomic import check_no_input_inside, check_not_input, register_input
    paths = getattr(args, "paths", None)
    if paths is None:
        return
    inputs, outputs, trees = paths(args)
    for name, path in inputs:
        tokens.append(register_input(path, name))
    for flag, path, within in outputs:
        if path is not None and str(path) != "-":
            check_not_input(path, flag=flag, within=within)
    for flag, directory in trees:
        check_no_input_inside(directory, flag=flag)


def _check_checkpoint_dir(directory):
    from streamrank.errors import InputError
    from streamrank.state.checkpoint import CURRENT
    if directory is None:
        return
    from streamrank.io.urls import is_url
    if is_url(directory):  # a prefix in a store: its bucket must exist
        _check_outputs((f"{str(directory).rstrip('/')}/{CURRENT}", "checkpoint", False))
        return
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise InputError(f"{d}: --checkpoint must name a directory; it is a file")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{d}: the checkpoint directory cannot be created ({e.strerror})") from None
    _check_outputs((d / CURRENT, "checkpoint", False))



def shows_progress(args):
    """Whether the command shows progress: not with --quiet or --json, unless --progress asks."""
    return bool(getattr(args, "progress", False)) or not (getattr(args, "quiet", False) or getattr(args, "json", False))


def _values(name, words=(), integer=False):
    """A parser of values in the grammar of :mod:`streamrank.workflow.values` (0.1,1,10 or 2^-5:2^5[:2]),
    or one of ``words``."""
    def parse(text):
        if text.strip().lower() in words:
            return text.strip().lower()
        from streamrank.workflow.values import parse_values
        try:
            return parse_values(text, {f: p for p, f in FLAGS.items()}.get(name, name), integer=integer)
        except StreamrankError as e:
            alt = "".join(f" or {w!r}" for w in words)
            raise argparse.ArgumentTypeError(f"{translate(str(e))}{alt and ' (or' + alt[3:] + ')'}") from None
    return parse


@contextlib.contextmanager
def _executor(args):
    """The executor of --workers N / --scheduler ADDR (None: passes run in this process)."""
    workers, scheduler = getattr(args, "workers", None), getattr(args, "scheduler", None)
    if workers is None and scheduler is None:
        from streamrank.execution.executor import LocalExecutor
        yield LocalExecutor(partition_rows=getattr(args, "partition_rows", None))
        return
    from streamrank.errors import ParameterError
    from streamrank.execution.dask_executor import DaskExecutor, start_cluster, stop_cluster
    if workers is not None and scheduler is not None:
        raise ParameterError("--workers starts a local cluster, --scheduler joins a running one; pass one of them")
    import importlib
    importlib.import_module("distributed")  # it configures its loggers on import; then they are quietened
    for name in [n for n in logging.root.manager.loggerDict if n.split(".")[0] == "distributed"] + ["distributed"]:
        logging.getLogger(name).setLevel(logging.CRITICAL)  # the cluster's own chatter: errors are ours to say
    log = logging.getLogger("streamrank.cli")
    try:
        client, cluster = start_cluster(workers=workers, scheduler=scheduler)
    except (OSError, ValueError) as e:
        raise ParameterError(f"cannot reach the dask scheduler at {scheduler} ({e}). Check the address "
                             f"(tcp://HOST:PORT) or start a local cluster with --workers N") from None
    ex = None
    try:
        n = len(client.nthreads())
        board = "dashboard" in client.scheduler_info().get("services", {})
        log.info("dask: %d worker%s at %s%s", n, "" if n == 1 else "s", client.scheduler.address,
                 f", dashboard {client.dashboard_link}" if board else "")
        ex = DaskExecutor(client, partition_rows=args.partition_rows)
        yield ex
    finally:
        if ex is not None:
            ex.close()
        stop_cluster(client, cluster)  # bounded, also after every worker is lost



def _os_error(exc):
    """An OSError (HDF5's too, which carry the errno in their text) as one line with its cause."""
    from streamrank.io.atomic import why
    where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
    return f"{where}{why(exc)}"


def emit_json(obj):
    """``--json``: ``obj`` (a dict) as ONE line of strict JSON, the last of standard output (the
    README's promise): numpy numbers as numbers, NaN and infinities as null (JSON has none),
    paths as text."""
    import json
    import math

    def plain(v):
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):  # numpy scalars and arrays
            return plain(v.tolist())
        if isinstance(v, Path):
            return str(v)
        return v
    if not isinstance(obj, dict):
        raise TypeError(f"--json prints one JSON object; got {type(obj).__name__}")
    sys.stdout.write(json.dumps(plain(obj), allow_nan=False) + "\n")
    sys.stdout.flush()


def _add_cluster(p):
    """--workers / --scheduler / --partition-rows: where the passes over the data run."""
    from streamrank.execution.partitions import PARTITION_ROWS
    p.add_argument("--workers", type=_positive_int("--workers", 2), metavar="N",
                   help="run every pass on a local dask cluster of N single-threaded worker processes "
                        "(default: in this process)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="run every pass on the running dask cluster at this address; its workers read the data "
                        "by its path (a shared file system; default: in this process)")
    p.add_argument("--partition-rows", type=_positive_int("--partition-rows", PARTITION_ROWS), default=PARTITION_ROWS,
                   metavar="R",
                   help=f"rows of one partition, the unit of work a worker keeps (default {PARTITION_ROWS}); the "
                        f"model depends on it, not on the number of workers")


def _add_query_file(p):
    """--query-file of the commands that take text DATA."""
    p.add_argument("--query-file", metavar="F", help="group sizes (one per line) of text DATA without qid: "
                   "(default: DATA.query beside it, if present)")


def _add_json_quiet(p, json_help, quiet_help="no progress, no log lines, no summary"):
    """--json (one JSON line for machines; no progress bars), --quiet and --progress."""
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--quiet", action="store_true", help=quiet_help)
    _add_progress(p)


def _add_progress(p):
    """--progress: bars wherever standard error goes (a terminal gets them anyway)."""
    p.add_argument("--progress", action="store_true",
                   help="draw progress bars on standard error even when it is not a terminal, and with --json or "
                        "--quiet (default: bars on a terminal; elsewhere a plain progress line at most every 30 s)")
