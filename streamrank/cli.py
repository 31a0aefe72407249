"""The ``streamrank`` command line (interface contract in DESIGN.md)."""

import argparse
import contextlib
import json
import logging
import re
import sys
from pathlib import Path

from streamrank._version import __version__
from streamrank.errors import StreamrankError

NOT_YET_METHODS = {}
# the longest line of a score file: %.17g of a float64 (at most 24 characters) and its newline
SCORE_LINE_BYTES = 25

# library parameter -> command-line flag: library messages name parameters (``C=0.5``,
# ``resume=False``); what the CLI prints names its flags (``--C 0.5``, ``without --resume``)
FLAGS = {"C": "--C", "tol": "--tol", "max_iter": "--max-iter", "method": "--method", "precondition": "--precondition",
         "gamma": "--gamma", "solver": "--solver", "kernel": "--kernel", "degree": "--degree", "coef0": "--coef0",
         "normalize": "--normalize", "n_components": "--components", "rank": "--rank", "seed": "--seed",
         "n_features": "--n-features", "memory_budget": "--memory-budget", "cache_dir": "--cache-dir",
         "cache_size": "--cache-size", "query_files": "--query-file", "zero_based": "--zero-based",
         "checkpoint": "--checkpoint", "resume": "--resume", "valid": "--valid", "select_metric": "--select-metric",
         "part": "--part", "preset": "--preset", "scale": "--scale", "pair_cost": "--pair-cost",
         "query_weight": "--query-weight", "loss": "--loss", "eta": "--eta", "abs_gtol": "--abs-gtol",
         "abs_dtol": "--abs-dtol", "lam": "--lambda", "components": "--components",
         "features": "--features", "importance": "--importance", "tradeoff": "--tradeoff",
         "workers": "--workers", "scheduler": "--scheduler", "partition_rows": "--partition-rows"}
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
            return ("with " if m.group(5) == "True" else "without ") + FLAGS[m.group(4)]
        lead, flag, value = m.group(1), FLAGS[m.group(2)], m.group(3)
        word = {"Use ": "Pass ", "use ": "pass "}.get(lead, lead)
        if value == "False":
            return word + "no " + flag
        if value == "True":
            return word + flag
        return f"{word}{flag} {value}"
    return _FIX.sub(fix, message)


class _TranslatingFormatter(logging.Formatter):
    """Formats library log messages in the CLI's terms (the record itself, which other handlers
    may also see, is left as the library wrote it)."""

    def format(self, record):
        return translate(super().format(record))


def _positive_int(name, example):
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer; got {text!r}") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be > 0; got {v}. Pass {name} {example}")
        return v
    return parse


def _check_outputs(*items):
    """Every (path, what, special_ok) the command will write, tried before the work starts."""
    from streamrank.io.atomic import check_writable
    for path, what, special_ok in items:
        if path is not None:
            check_writable(path, what, special_ok=special_ok)


def _check_checkpoint_dir(directory):
    from streamrank.errors import InputError
    from streamrank.state.checkpoint import CURRENT
    if directory is None:
        return
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise InputError(f"{d}: --checkpoint must name a directory; it is a file")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{d}: the checkpoint directory cannot be created ({e.strerror})") from None
    _check_outputs((d / CURRENT, "checkpoint", False))


def _cmd_convert(args):
    from streamrank.io.convert import convert
    _check_outputs((args.output, "output", False))
    stats = convert(args.inputs, args.output, query_files=args.query_file, zero_based=args.zero_based,
                    n_features=args.n_features, compression=args.compression,
                    keep_comments=not args.no_comments, memory_budget=args.memory_budget, quiet=args.quiet,
                    commit_seconds=args.commit_every)
    if args.json:
        print(json.dumps(stats))
    elif not args.quiet:
        print(f"wrote {stats['output']}: {stats['rows']:,} rows, {stats['queries']:,} queries, "
              f"{stats['features']} features in {stats['seconds']:.2f} s "
              f"({stats['text_mb_per_s']:.1f} MB/s of text, {stats['rows_per_s']:,.0f} rows/s"
              f"{'; queries regrouped' if stats['regrouped'] else ''}"
              f"{'; continued after ' + format(stats['resumed_rows'], ',') + ' rows' if stats['resumed_rows'] else ''})")
    return 0


def _cmd_select_features(args):
    from streamrank.errors import ParameterError
    from streamrank.evaluation.score_files import open_data
    from streamrank.selection.gas import gas_scores
    if args.resume and not args.checkpoint:
        raise ParameterError("--resume needs --checkpoint DIR (where the checkpoints are)")
    _check_outputs((args.output, "GAS file", False))
    _check_checkpoint_dir(args.checkpoint)
    _setup_logging(args.quiet or args.json, progress=True)
    with open_data(args.data, args.cache_dir, quiet=args.quiet, query_file=args.query_file) as ds, \
            _executor(args) as executor:
        k = ds.n_features if args.k is None else args.k
        if not 1 <= k <= ds.n_features:
            raise ParameterError(f"-k must be in 1..{ds.n_features} (the features of {ds.name}); got {k}. "
                                 f"Pass -k {min(10, ds.n_features)}")
        res = gas_scores(ds, importance=args.importance, signed=args.signed, tradeoff=args.tradeoff,
                         memory_budget=args.memory_budget, checkpoint=args.checkpoint, resume=args.resume,
                         commit_seconds=args.commit_every, executor=executor)
    if args.output:
        res.save(args.output)
    d = res.to_dict(k)
    if args.json:
        print(json.dumps(d))
        return 0
    print(f"GAS ({args.importance}{', signed' if args.signed else ''}, tradeoff c={args.tradeoff:g}) over "
          f"{res.n_queries:,} queries: {k} of {res.n_features} features, feature ids as in the data (1-based)")
    print(f"{'rank':>4}  {'feature':>7}  {'importance':>10}  {'sign':>4}  {'largest similarity to those above':>34}")
    for r in d["selected"]:
        sim = "" if r["max_similarity_to_chosen"] is None else f"{r['max_similarity_to_chosen']:.4f}"
        print(f"{r['rank']:>4}  {r['feature']:>7}  {r['importance']:>10.4f}  {r['sign']:>+4d}  {sim:>34}")
    if args.output:
        print(f"wrote {args.output} (importance, similarity matrix, the whole greedy order)")
    return 0


def _cmd_info(args):
    from streamrank.io.dataset import open_dataset
    from streamrank.io.info import dataset_info, format_info
    with open_dataset(args.data) as ds:
        info = dataset_info(ds)
    print(json.dumps(info) if args.json else format_info(info))
    return 0


def _cmd_eval(args):
    from streamrank.evaluation.score_files import evaluate_file
    report = evaluate_file(args.data, args.scores, convention=args.convention, cache_dir=args.cache_dir,
                           query_file=args.query_file, memory_budget=args.memory_budget)
    if args.json:
        print(json.dumps(report.to_dict(per_query=args.per_query)))
    else:
        print(report.format(per_query=args.per_query))
    return 0


def _cmd_demo(args):
    from streamrank.demo import run_demo
    return run_demo(workdir=args.dir, quiet=args.quiet)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """Library warnings as one log line in the CLI's terms (no source location, no class name)."""
    logging.getLogger("streamrank").warning("warning: %s", message)


def _setup_logging(quiet, progress=True):
    """Library log lines (and warnings) on stderr in the CLI's terms: INFO and up for commands that
    report progress (``progress``), warnings only otherwise or with --quiet."""
    import warnings
    warnings.showwarning = _show_warning
    logger = logging.getLogger("streamrank")
    logger.handlers[:] = []
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(_TranslatingFormatter("%(message)s"))
    logger.addHandler(h)
    logger.setLevel(logging.WARNING if quiet or not progress else logging.INFO)


def _float_list(name, words=()):
    def parse(text):
        if text.strip().lower() in words:
            return text.strip().lower()
        try:
            vals = [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            alt = "".join(" or " + w for w in words)
            raise argparse.ArgumentTypeError(f"{name} must be numbers separated by commas{alt}; got {text!r}") from None
        if not vals:
            raise argparse.ArgumentTypeError(f"{name} needs at least one value")
        return vals
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
    from streamrank.execution.dask_executor import DaskExecutor, start_cluster
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
    n = len(client.nthreads())
    board = "dashboard" in client.scheduler_info().get("services", {})
    log.info("dask: %d worker%s at %s%s", n, "" if n == 1 else "s", client.scheduler.address,
             f", dashboard {client.dashboard_link}" if board else "")
    ex = DaskExecutor(client, partition_rows=args.partition_rows)
    try:
        yield ex
    finally:
        ex.close()
        client.close()
        if cluster is not None:
            cluster.close()


def _cmd_train(args):
    from streamrank.errors import ParameterError
    from streamrank.evaluation.score_files import open_data
    if args.method in NOT_YET_METHODS:
        raise ParameterError(f"--method {args.method} ({NOT_YET_METHODS[args.method]}) is not available yet in "
                             f"streamrank {__version__}; use --method primal, nystroem or rff")
    if args.method == "primal":
        for opt in ("kernel", "gamma", "degree", "coef0", "components", "rank"):
            if getattr(args, opt) is not None:
                raise ParameterError(f"--{opt} applies to kernel methods; add --method nystroem or --method rff")
    if args.method == "rff" and args.kernel not in (None, "rbf", "laplacian"):
        raise ParameterError(f"--method rff supports --kernel rbf or laplacian; got {args.kernel}. "
                             f"Use --method nystroem for {args.kernel}")
    if args.resume and not args.checkpoint:
        raise ParameterError("--resume needs --checkpoint DIR (where the checkpoints are)")
    if args.lam is not None and args.method != "clsr":
        raise ParameterError("--lambda is CLSRRank's penalty; add --method clsr (the other methods take --C)")
    if args.method == "clsr":
        # RankSVM's settings: CLSRRank has no pairs' loss to weigh and no iterations to solve
        given = [flag for opt, flag, default in (
            ("C", "--C", None), ("rank", "--rank", None), ("solver", "--solver", "tron"),
            ("loss", "--loss", "squared_hinge"), ("eta", "--eta", None), ("pair_cost", "--pair-cost", "none"),
            ("query_weight", "--query-weight", "none"), ("abs_gtol", "--abs-gtol", None),
            ("abs_dtol", "--abs-dtol", None), ("precondition", "--precondition", "auto"))
            if getattr(args, opt) != default]
        if given:
            raise ParameterError(f"{', '.join(given)} do{'es' if len(given) == 1 else ''} not apply to --method clsr "
                                 f"(least squares over kernel coefficients: one pass and a direct solve, penalised by "
                                 f"--lambda); drop {', '.join(given)}")
    if args.C is None:
        args.C = [1.0]
    _check_outputs((args.output, "model file", False))
    _check_checkpoint_dir(args.checkpoint)
    _setup_logging(args.quiet)
    ds = open_data(args.data, args.cache_dir, quiet=args.quiet, query_file=args.query_file)
    valid = open_data(args.valid, args.cache_dir, quiet=args.quiet) if args.valid else None
    with _executor(args) as executor:
        model, summary = _train_method(args, ds, valid, executor)
        if executor is not None and executor.name == "dask":
            summary["cluster"] = executor.describe()
    model.save(args.output)
    if not args.quiet and args.method == "clsr":
        gamma = f", gamma={summary['gamma']:g}" if summary.get("gamma") is not None else ""
        print(f"saved {args.output}: lambda={summary['lambda']:g}{gamma}, {summary['basis']} basis rows, objective "
              f"{summary['objective']:.6e}, {summary['passes']} pass(es), {summary['seconds']:.2f} s")
    elif not args.quiet:
        eta = f", eta={summary['eta']:.3g}" if "eta" in summary else ""
        print(f"saved {args.output}: C={summary['C']:g}{eta}, objective {summary['objective']:.6e}, "
              f"|g| {summary['grad_norm']:.3e}, {summary['iterations']} iterations, {summary['passes']} passes, "
              f"{summary['seconds']:.2f} s")
    if not args.quiet and "cluster" in summary:
        c = summary["cluster"]
        print(f"cluster: {c['workers']} workers, {c['passes']} passes, {c['bytes_per_pass'] / 1e3:.1f} kB shipped "
              f"a pass ({c['bytes_shipped'] / 1e6:.2f} MB in all), {c['workers_lost']} worker(s) lost")
    if args.json:
        print(json.dumps(summary))
    return 0


def _train_method(args, ds, valid, executor):
    from streamrank.training.linear import train_linear
    if args.method == "exact":
        return _train_exact(args, ds, valid, executor)
    if args.method == "clsr":
        from streamrank.training.clsr import train_clsr
        return train_clsr(ds, valid=valid, lam=args.lam or [1e-3], kernel=args.kernel or "rbf",
                                    gamma=args.gamma, degree=3 if args.degree is None else args.degree,
                                    coef0=1.0 if args.coef0 is None else args.coef0, normalize=args.normalize,
                                    components=args.components, memory_budget=args.memory_budget,
                                    select_metric=args.select_metric, seed=args.seed, features=args.features,
                                    checkpoint=args.checkpoint, resume=args.resume, executor=executor)
    return train_linear(ds, valid=valid, C=args.C, normalize=args.normalize, tol=args.tol,
                                      max_iter=args.max_iter, memory_budget=args.memory_budget,
                                      pair_cost=args.pair_cost, query_weight=args.query_weight,
                                      select_metric=args.select_metric, checkpoint=args.checkpoint,
                                      resume=args.resume, seed=args.seed, solver=args.solver, method=args.method,
                                      kernel=args.kernel or "rbf", gamma=args.gamma,
                                      degree=3 if args.degree is None else args.degree,
                                      coef0=1.0 if args.coef0 is None else args.coef0,
                                      components=1000 if args.components is None else args.components,
                                      rank=args.rank, cache_dir=args.cache_dir, map_cache=args.map_cache,
                                      cache_size=args.cache_size, precondition=args.precondition,
                                      loss=args.loss, eta=args.eta, abs_gtol=args.abs_gtol,
                                      abs_dtol=args.abs_dtol, features=args.features, executor=executor)


def _train_exact(args, ds, valid, executor):
    """--method exact (paper 004): TRON over beta with Q = K(X, X) in a kernel cache."""
    from streamrank.errors import ParameterError
    from streamrank.training.exact import train_exact
    for opt in ("components", "rank"):
        if getattr(args, opt) is not None:
            raise ParameterError(f"--{opt} applies to --method nystroem / rff, not to --method exact (which uses "
                                 f"every training row); drop --{opt}")
    if args.solver not in ("tron", "newton_yuan"):
        raise ParameterError(f"--method exact is solved by TRON or Newton-Yuan; got --solver {args.solver}. "
                             f"Pass --solver tron")
    return train_exact(ds, valid=valid, C=args.C, kernel=args.kernel or "rbf", gamma=args.gamma,
                       degree=3 if args.degree is None else args.degree,
                       coef0=1.0 if args.coef0 is None else args.coef0, normalize=args.normalize, tol=args.tol,
                       max_iter=args.max_iter, memory_budget=args.memory_budget, pair_cost=args.pair_cost,
                       query_weight=args.query_weight, select_metric=args.select_metric,
                       checkpoint=args.checkpoint, resume=args.resume, seed=args.seed, cache_dir=args.cache_dir,
                       precondition=args.precondition, loss=args.loss, eta=args.eta, solver=args.solver,
                       abs_gtol=args.abs_gtol, abs_dtol=args.abs_dtol, features=args.features, executor=executor)


def _cmd_predict(args):
    import numpy as np
    from streamrank.evaluation.score_files import open_data
    from streamrank.faultpoints import faultpoint
    from streamrank.io.atomic import ensure_space, temp_name, written
    from streamrank.state.model import load
    model = load(args.model)
    _check_outputs((args.output, "score file", True))
    with open_data(args.data, args.cache_dir, query_file=args.query_file) as ds, _executor(args) as executor:
        scores = model.predict_dataset(ds, memory_budget=args.memory_budget, executor=executor)
    if not Path(args.output).exists() or Path(args.output).is_file():
        ensure_space(temp_name(args.output), SCORE_LINE_BYTES * scores.size, shown=args.output)
    with written(args.output, special_ok=True) as tmp:
        np.savetxt(tmp, scores, fmt="%.17g")  # round-trips every float64
        faultpoint("scores-write")
    if args.json:
        print(json.dumps({"output": str(args.output), "rows": int(scores.size)}))
    return 0


def _os_error(exc):
    """An OSError (HDF5's too, which carry the errno in their text) as one line with its cause."""
    from streamrank.io.atomic import why
    where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
    return f"{where}{why(exc)}"


def _add_cluster(p):
    """--workers / --scheduler / --partition-rows: where the passes over the data run."""
    from streamrank.execution.partitions import PARTITION_ROWS
    p.add_argument("--workers", type=_positive_int("--workers", 2), metavar="N",
                   help="run every pass on a local dask cluster of N single-threaded worker processes "
                        "(default: in this process)")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                   help="run every pass on the running dask cluster at this address; its workers read the data "
                        "by its path (a shared file system)")
    p.add_argument("--partition-rows", type=_positive_int("--partition-rows", PARTITION_ROWS), default=PARTITION_ROWS, metavar="R",
                   help=f"rows of one partition, the unit of work a worker keeps (default {PARTITION_ROWS}); the "
                        f"model depends on it, not on the number of workers")


def _add_query_file(p):
    """--query-file of the commands that take text DATA."""
    p.add_argument("--query-file", metavar="F", help="group sizes (one per line) of text DATA without qid: "
                   "(default: DATA.query beside it, if present)")


def build_parser():
    p = argparse.ArgumentParser(prog="streamrank", description="Pairwise ranking SVMs on data larger than memory.")
    p.add_argument("--version", action="version", version=f"streamrank {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser("convert", help="LETOR/SVMlight text (.txt .gz .bz2) to an HDF5 dataset")
    c.add_argument("inputs", nargs="+", metavar="IN", help="text files, concatenated in order")
    c.add_argument("-o", "--output", required=True, metavar="OUT.h5")
    c.add_argument("--query-file", action="append", metavar="F",
                   help="group sizes (one per line) for an input without qid:; give once per input")
    c.add_argument("--zero-based", action="store_true", help="feature indices start at 0 (default 1)")
    c.add_argument("--n-features", type=_positive_int("--n-features", 46), metavar="D",
                   help="fix the number of features (train, vali and test must agree)")
    c.add_argument("--compression", choices=["gzip", "lzf", "none"], default=None,
                   help="HDF5 compression of the rows (default: none; docs/benchmarks.md, \"Storage defaults\")")
    c.add_argument("--no-comments", action="store_true", help="do not keep the text after '#'")
    c.add_argument("--memory-budget", default="2GB", metavar="SIZE")
    c.add_argument("--commit-every", type=float, default=60.0, metavar="SECONDS",
                   help="commit the rows written so far this often (default 60); a conversion killed or "
                        "interrupted continues from its last commit when the same command runs again")
    c.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    c.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    c.set_defaults(func=_cmd_convert)

    i = sub.add_parser("info", help="rows, queries, labels, pairs of a dataset")
    i.add_argument("data", metavar="DATA.h5")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=_cmd_info)

    e = sub.add_parser("eval", help="NDCG, MAP, P@k and pairwise accuracy of a score file")
    e.add_argument("data", metavar="DATA", help="HDF5 dataset or LETOR text")
    e.add_argument("scores", metavar="SCORES.txt", help="one score per line, in the input's row order")
    _add_query_file(e)
    e.add_argument("--convention", choices=["letor4", "standard"], default="letor4")
    e.add_argument("--per-query", action="store_true", help="print every query's values")
    e.add_argument("--cache-dir", default=None, help="where text DATA is converted (default ~/.cache/streamrank)")
    e.add_argument("--memory-budget", default="2GB", metavar="SIZE",
                   help="text DATA is converted within it; eval keeps about 48 bytes per row and says so when "
                        "that does not fit")
    e.add_argument("--json", action="store_true")
    e.set_defaults(func=_cmd_eval)

    d = sub.add_parser("demo", help="generate a small LETOR-like dataset and run the pipeline on it")
    d.add_argument("--dir", default=None, help="keep the files here (default: a temporary directory)")
    d.add_argument("--quiet", action="store_true")
    d.set_defaults(func=_cmd_demo)

    t = sub.add_parser("train", help="train a RankSVM model")
    t.add_argument("data", metavar="DATA", help="HDF5 dataset or LETOR text")
    t.add_argument("-o", "--output", required=True, metavar="MODEL.h5")
    _add_query_file(t)
    t.add_argument("--valid", metavar="DATA", help="validation data: logged each iteration, chooses C")
    t.add_argument("--C", type=_float_list("--C", ("two-stage",)), default=None, metavar="C[,C...]|two-stage",
                   help="the loss weight; several values (with --valid) form a warm-started path; two-stage is "
                        "paper 001's rule: 1e-5..1e-1 by decades, then 0.6, 0.8, 1.2, 1.4 times the best")
    t.add_argument("--select-metric", choices=["meanndcg", "ndcg@10", "map", "avgndcg", "avgprec"],
                   default="meanndcg", help="what --valid chooses C (and gamma) by; avgndcg and avgprec are "
                   "paper 001's means of NDCG@1..20 and P@1..20")
    t.add_argument("--method", choices=["primal", "nystroem", "rff", "exact", "clsr"], default="primal",
                   help="primal (linear RankSVM), nystroem or rff (paper 000), exact (paper 004), clsr (paper 002: "
                        "CLSRRank, least squares over kernel coefficients, one pass and a direct solve)")
    t.add_argument("--lambda", dest="lam", type=_float_list("--lambda"), metavar="L[,L...]",
                   help="--method clsr's penalty lambda m ||alpha||^2 (default 0.001); several form a path chosen "
                        "on --valid, all from one pass over the data")
    t.add_argument("--kernel", choices=["rbf", "laplacian", "poly", "sigmoid", "linear"])
    t.add_argument("--gamma", type=_float_list("--gamma"), metavar="G[,G...]")
    t.add_argument("--degree", type=int, help="poly kernel degree (default 3)")
    t.add_argument("--coef0", type=float, help="poly / sigmoid offset (default 1)")
    t.add_argument("--components", type=int, metavar="M", help="Nystroem landmarks or random features (default 1000)")
    t.add_argument("--rank", type=int, metavar="K", help="keep the top K Nystroem eigenvectors (default: all)")
    t.add_argument("--map-cache", choices=["auto", "memory", "cache", "recompute"], default="auto",
                   help="mapped rows: in memory if they fit, else on disk under --cache-dir or recomputed each "
                        "pass, chosen from measured rates (auto); the model is the same either way")
    t.add_argument("--solver", choices=["auto", "tron", "newton_cholesky", "newton_yuan"], default="tron",
                   help="tron (default: the same bits for any memory budget), newton_cholesky, newton_yuan "
                        "(paper 001: Newton steps, Yuan's step length every third), or auto (tron or "
                        "newton_cholesky from measured pass and Hessian costs, so it may differ between runs)")
    t.add_argument("--precondition", choices=["auto", "on", "off"], default="auto",
                   help="TRON's CG preconditioned by the Hessian of a sample of queries: fewer CG steps and "
                        "passes; auto = on for linear features, and for feature maps when it is cheap against a pass; "
                        "--method exact: a Nystroem approximation of the Hessian from about 10 sqrt(rows) landmarks (on "
                        "unless off)")
    t.add_argument("--features", metavar="IDS|@FILE|GAS.h5:K",
                   help="train on these features only (ids as in the data, 1-based: 3,7,12; a file of ids; or the "
                        "first K of streamrank select-features' GAS file); predict applies the same subset")
    t.add_argument("--loss", choices=["squared_hinge", "smooth_hinge"], default="squared_hinge",
                   help="squared_hinge (RankSVM) or smooth_hinge (paper 001's cs-sRSVM: the hinge smoothed "
                        "in a band of half-width --eta around margin 0)")
    t.add_argument("--eta", default=None, metavar="E|auto",
                   help="--loss smooth_hinge's band half-width, 0 < E < 1, or auto (default): paper 001's "
                        "rule from C and the pair weights, recorded per C")
    t.add_argument("--pair-cost", default="none", metavar="SPEC",
                   help="label-pair costs lambda (paper 001): none, gain_difference, or pairs such as "
                        "'0-1:1,1-2:1.3,0-2:2' (unlisted pairs cost 1)")
    t.add_argument("--query-weight", choices=["none", "log_ratio"], default="none")
    t.add_argument("--tol", type=float, default=1e-3, metavar="EPS")
    t.add_argument("--abs-gtol", type=float, metavar="EPS2", help="--solver newton_yuan also stops at ||g|| <= "
                   "EPS2 (paper 001's eps2, 1e-4 there)")
    t.add_argument("--abs-dtol", type=float, metavar="EPS3", help="--solver newton_yuan also stops when its "
                   "Newton direction's norm is <= EPS3 (paper 001's eps3, 1e-4 there)")
    t.add_argument("--max-iter", type=int, default=1000, metavar="N")
    t.add_argument("--seed", type=int, default=0, metavar="S")
    t.add_argument("--normalize", choices=["none", "zscore", "query_minmax"], default="none")
    t.add_argument("--memory-budget", default="2GB", metavar="SIZE")
    t.add_argument("--cache-dir", metavar="DIR", help="where text DATA is converted (default ~/.cache/streamrank) "
                   "and mapped rows are cached (default: not cached, recomputed each pass)")
    t.add_argument("--cache-size", metavar="SIZE", help="cap on all feature caches in --cache-dir together; least "
                   "recently used blocks are evicted (default: no cap)")
    t.add_argument("--checkpoint", metavar="DIR", help="write a checkpoint after every iteration")
    t.add_argument("--resume", action="store_true", help="continue from the checkpoint in --checkpoint DIR")
    _add_cluster(t)
    t.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    t.add_argument("--quiet", action="store_true")
    t.set_defaults(func=_cmd_train)

    g = sub.add_parser("select-features", help="rank features by GAS (paper 003): importance, minus redundancy")
    g.add_argument("data", metavar="DATA", help="HDF5 dataset or LETOR text")
    g.add_argument("-k", type=_positive_int("-k", 10), metavar="K", help="features to select (default: rank all)")
    g.add_argument("--importance", default="map", metavar="map|ndcg@K|pairwise",
                   help="GAS-E: MAP or NDCG@K of ordering each query by the feature alone (letor4); GAS-L: "
                        "pairwise, the inverse of the pairwise error rate (default map)")
    g.add_argument("--tradeoff", type=float, default=0.5, metavar="C",
                   help="c in max sum w_i - c sum e_ij: how much redundancy (mean Kendall tau-b over queries) "
                        "costs; 0 ranks by importance alone (default 0.5)")
    g.add_argument("--signed", action="store_true", help="a feature may rank in either direction: keep the better")
    g.add_argument("-o", "--output", metavar="GAS.h5", help="write importance, similarity and the greedy order, "
                   "for train --features GAS.h5:K")
    _add_query_file(g)
    g.add_argument("--memory-budget", default="2GB", metavar="SIZE")
    g.add_argument("--cache-dir", metavar="DIR", help="where text DATA is converted")
    g.add_argument("--checkpoint", metavar="DIR", help="write the pass's sums here every --commit-every seconds")
    g.add_argument("--resume", action="store_true", help="continue the pass from the checkpoint in --checkpoint DIR")
    g.add_argument("--commit-every", type=float, default=60.0, metavar="SECONDS")
    _add_cluster(g)
    g.add_argument("--json", action="store_true")
    g.add_argument("--quiet", action="store_true")
    g.set_defaults(func=_cmd_select_features)

    pr = sub.add_parser("predict", help="score data with a model, one score per line in input order")
    pr.add_argument("model", metavar="MODEL.h5")
    pr.add_argument("data", metavar="DATA")
    pr.add_argument("-o", "--output", required=True, metavar="SCORES.txt")
    _add_query_file(pr)
    pr.add_argument("--memory-budget", default="2GB", metavar="SIZE")
    pr.add_argument("--cache-dir", metavar="DIR")
    _add_cluster(pr)
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(func=_cmd_predict)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    if getattr(args, "compression", "unset") is None:
        from streamrank.io.hdf5_format import DEFAULT_COMPRESSION
        args.compression = DEFAULT_COMPRESSION
    try:
        _setup_logging(getattr(args, "quiet", False), progress=args.command in ("train", "select-features"))
        return args.func(args)
    except (StreamrankError, FileNotFoundError) as exc:
        print(f"streamrank {args.command}: error: {translate(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:  # the system refused a read or write: one line, what and why
        print(f"streamrank {args.command}: error: {_os_error(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"streamrank {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
