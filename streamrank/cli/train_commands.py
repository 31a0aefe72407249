"""The model commands: train, predict, select-features."""

import argparse

from streamrank.cli.common import (
    _add_cluster,
    _add_json_quiet,
    _add_progress,
    _add_query_file,
    _cache_outputs,
    _check_checkpoint_dir,
    _check_outputs,
    _checkpoint_outputs,
    _data_inputs,
    _executor,
    _features_inputs,
    _positive_int,
    _setup_logging,
    _values,
    emit_json,
)
from streamrank.settings import DEFAULT_MEMORY_BUDGET


def _train_paths(args):
    intake(args)
    inputs = _data_inputs("DATA", args.data, args.query_file) + _data_inputs("--valid", args.valid) + \
        _features_inputs(args.features)
    files, trees = _cache_outputs(args)
    return inputs, [("-o", args.output, None)] + _checkpoint_outputs(args) + files, trees


def _predict_paths(args):
    files, trees = _cache_outputs(args)
    inputs = [("MODEL", args.model)] + _data_inputs("DATA", args.data, args.query_file)
    return inputs, [("-o", args.output, None)] + files, trees


def _select_features_paths(args):
    files, trees = _cache_outputs(args)  # GAS keeps its similarity rows in the checkpoint's similarity.h5
    return (_data_inputs("DATA", args.data, args.query_file),
            [("-o", args.output, None)] + _checkpoint_outputs(args, ("similarity.h5",)) + files, trees)


def _cmd_select_features(args):
    from streamrank.errors import InputError, ParameterError
    from streamrank.io.data_files import open_data
    from streamrank.selection.gas import gas_scores
    if args.resume and not args.checkpoint:
        raise ParameterError("--resume needs --checkpoint DIR (where the checkpoints are)")
    _check_outputs((args.output, "GAS file", False))
    _check_checkpoint_dir(args.checkpoint)
    _setup_logging(args.quiet or args.json, progress=True)
    with open_data(args.data, args.cache_dir, quiet=args.quiet, query_file=args.query_file) as ds, \
            _executor(args) as executor:
        if args.k is not None and not 1 <= args.k <= ds.n_features:
            raise ParameterError(f"-k must be in 1..{ds.n_features} (the features of {ds.name}); got {args.k}. "
                                 f"Pass -k {min(10, ds.n_features)}")
        res = gas_scores(ds, importance=args.importance, signed=args.signed, tradeoff=args.tradeoff,
                         memory_budget=args.memory_budget, checkpoint=args.checkpoint, resume=args.resume,
                         commit_seconds=args.commit_every, executor=executor)
        name = ds.name
    n = res.n_selectable
    if n == 0:
        raise InputError(f"{name}: none of its {res.n_features} features varies within any query (each is constant "
                         f"within every query), so none can change a ranking; there is nothing to select")
    k = n if args.k is None else args.k
    if k > n:
        raise ParameterError(f"-k must be in 1..{n}: {res.n_features - n} of the {res.n_features} features of {name} "
                             f"are constant within every query and cannot be selected; got {k}. Pass -k {n}")
    if args.output:
        res.save(args.output)
    d = res.to_dict(k)
    if args.json:
        emit_json(d)
        return 0
    print(f"GAS ({args.importance}{', signed' if args.signed else ''}, tradeoff c={args.tradeoff:g}) over "
          f"{res.n_queries:,} queries: {k} of the {n} features that vary within a query (of {res.n_features}), "
          f"feature ids as in the data (1-based)")
    print(f"{'rank':>4}  {'feature':>7}  {'importance':>10}  {'sign':>4}  {'largest similarity to those above':>34}")
    undefined = []
    for r in d["selected"]:
        sim = "" if r["max_similarity_to_chosen"] is None else f"{r['max_similarity_to_chosen']:.4f}"
        if r["similarity_undefined_with"]:
            undefined.append(r)
            sim = ("undefined" if r["max_similarity_to_chosen"] is None else sim) + " *"
        print(f"{r['rank']:>4}  {r['feature']:>7}  {r['importance']:>10.4f}  {r['sign']:>+4d}  {sim:>34}")
    for r in undefined:
        print(f"* feature {r['feature']} has no similarity to feature(s) "
              f"{', '.join(map(str, r['similarity_undefined_with']))}: no query where both vary, so tau-b is "
              f"undefined on every query and its weight was not lowered for them")
    if d["constant_within_queries"]:
        print("never selected, constant within every query (they cannot change any ranking):")
        for c in d["constant_within_queries"]:
            print(f"  feature {c['feature']:>4}: {c['reason']}")
    if args.output:
        print(f"wrote {args.output} (importance, similarity matrix, the whole greedy order)")
    return 0



def _cmd_train(args):
    from streamrank.errors import ParameterError
    from streamrank.io.data_files import open_data
    intake(args)
    if args.method == "rff" and args.kernel not in ("rbf", "laplacian"):
        raise ParameterError(f"--method rff supports --kernel rbf or laplacian; got {args.kernel}. "
                             f"Use --method nystroem for {args.kernel}")
    if args.method == "exact" and args.solver not in ("tron", "newton_yuan"):
        raise ParameterError(f"--method exact is solved by TRON or Newton-Yuan; got --solver {args.solver}. "
                             f"Pass --solver tron")
    if args.resume and not args.checkpoint:
        raise ParameterError("--resume needs --checkpoint DIR (where the checkpoints are)")
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
        gamma = f", gamma={summary['gamma']:g}" if summary.get("gamma") is not None else ""
        gap = summary.get("gap")
        gap = "" if gap is None else f" (gap {'<=' if summary.get('gap_kind') == 'bound' else '~'} {gap:.1e})"
        print(f"saved {args.output}: C={summary['C']:g}{gamma}{eta}, objective {summary['objective']:.6e}{gap}, "
              f"|g| {summary['grad_norm']:.3e}, {summary['iterations']} iterations, {summary['passes']} passes, "
              f"{summary['seconds']:.2f} s")
    if not args.quiet and "cluster" in summary:
        c = summary["cluster"]
        print(f"cluster: {c['workers']} workers, {c['passes']} passes, {c['bytes_per_pass'] / 1e3:.1f} kB shipped "
              f"a pass ({c['bytes_shipped'] / 1e6:.2f} MB in all), {c['workers_lost']} worker(s) lost")
    if args.json:
        emit_json(summary)
    return 0


def intake(args):
    """The training settings of a command line (streamrank.settings, one table): refuse those given
    that apply to none of the command's methods (the CLI's half of the table's rule), then give the
    ones not given their defaults (those a method or a grid decides stay None: C, lambda, gamma,
    components, eta, grid's losses). Idempotent; the commands' path checks call it first."""
    if getattr(args, "given", None) is not None:
        return
    from streamrank import settings
    from streamrank.errors import ParameterError
    args.given = {name: getattr(args, name) for name in settings.TABLE if getattr(args, name, None) is not None}
    method = args.method or settings.TABLE["method"].default
    refused = settings.inapplicable(args.given, method if isinstance(method, list) else [method])
    if refused is not None:
        raise refused
    if getattr(args, "cache_size", None) is not None and not getattr(args, "cache_dir", None):
        raise ParameterError("--cache-size caps the feature caches in --cache-dir; pass --cache-dir DIR too")
    many = args.command != "train"
    for name, s in settings.TABLE.items():
        if (hasattr(args, name) and getattr(args, name) is None and name not in _LATER
                and not (many and s.many in ("list", "search"))):
            setattr(args, name, s.default)
    if many and args.method is None:
        args.method = [settings.TABLE["method"].default]


# settings whose default the method (or a grid) decides: None until then
_LATER = ("C", "lam", "gamma", "components", "eta")


def _train_method(args, ds, valid, executor):
    from streamrank import settings
    from streamrank.training.trainers import train
    values = {name: getattr(args, name) for name in settings.TABLE if hasattr(args, name)}
    return train(ds, values, valid=valid, executor=executor)


def _cmd_predict(args):
    from streamrank.evaluation.score_files import write_scores
    from streamrank.io.data_files import open_data
    from streamrank.state.model import load
    if args.json and args.output == "-":
        from streamrank.errors import ParameterError
        raise ParameterError("--json and -o - both write to standard output (the JSON line would end the scores); "
                             "pass -o SCORES.txt with --json")
    model = load(args.model)
    if args.output != "-":
        _check_outputs((args.output, "score file", True))
    with open_data(args.data, args.cache_dir, query_file=args.query_file) as ds, _executor(args) as executor:
        _check_width(args, model, ds)
        scores = model.predict_dataset(ds, memory_budget=args.memory_budget, executor=executor)
    write_scores(args.output, scores, ds.name)  # "-": standard output, as a pipe's first stage
    if args.json:
        emit_json({"output": str(args.output), "rows": int(scores.size)})
    return 0


def _check_width(args, model, ds):
    """Text DATA of another width than the model's is read by SVMlight's rule (missing trailing
    features are 0, features past the model's are ignored; the scoring says so in one line): text
    lists a row's nonzero features only, so the last ones may be absent from a whole file. An HDF5
    dataset records its width: another one is refused unless --pad-features (narrower) or
    --ignore-extra-features (wider) asks for SVMlight's rule."""
    import h5py

    from streamrank.errors import InputError
    if not h5py.is_hdf5(args.data):
        return
    d, width = ds.n_features, model.input_columns
    if d < width and not args.pad_features:
        raise InputError(f"{args.data} has {d} features, the model {args.model} {width}: pass --pad-features to read "
                         f"features {d + 1} to {width} as 0 (SVMlight's rule for text), or convert the data with "
                         f"--n-features {width}")
    if d > width and not args.ignore_extra_features:
        raise InputError(f"{args.data} has {d} features, the model {args.model} {width}: pass --ignore-extra-features "
                         f"to score without features {width + 1} to {d} (SVMlight's rule for text), or use a model "
                         f"trained on {d}-feature data")



def register(sub):
    """The model commands' parsers."""
    t = sub.add_parser("train", help="train a RankSVM model")
    t.add_argument("data", metavar="DATA", help="HDF5 dataset or LETOR text")
    t.add_argument("-o", "--output", required=True, metavar="MODEL.h5", help="the model file to write")
    _add_query_file(t)
    t.add_argument("--valid", metavar="DATA", help="validation data: logged each iteration, chooses C (and gamma, "
                   "lambda) among several (default: none)")
    add_model_options(t, many=False)
    _add_cluster(t)
    _add_json_quiet(t, "print a JSON summary as the last line")
    t.set_defaults(func=_cmd_train, paths=_train_paths)

    g = sub.add_parser("select-features", help="rank features by GAS (paper 003): importance, minus redundancy")
    g.add_argument("data", metavar="DATA", help="HDF5 dataset or LETOR text")
    g.add_argument("-k", type=_positive_int("-k", 10), metavar="K", help="features to select (default: rank all that "
                   "vary within a query; features constant within every query are listed apart, never selected)")
    g.add_argument("--importance", default="map", metavar="map|ndcg@K|p@K|pairwise",
                   help="GAS-E: MAP, NDCG@K or P@K of ordering each query by the feature alone (letor4; documents "
                        "the feature ties count at the measure's expected value over their orders); GAS-L: "
                        "pairwise, the inverse of the pairwise error rate (default map)")
    g.add_argument("--tradeoff", type=float, default=0.5, metavar="C",
                   help="c in max sum w_i - c sum e_ij: how much redundancy (mean Kendall tau-b over queries) "
                        "costs; 0 ranks by importance alone (default 0.5)")
    g.add_argument("--signed", action="store_true", help="a feature may rank in either direction: keep the better")
    g.add_argument("-o", "--output", metavar="GAS.h5", help="write importance, similarity and the greedy order, "
                   "for train --features GAS.h5:K (default: not written)")
    _add_query_file(g)
    g.add_argument("--memory-budget", default=DEFAULT_MEMORY_BUDGET, metavar="SIZE",
                    help=f"bound on the process's memory (default {DEFAULT_MEMORY_BUDGET})")
    g.add_argument("--cache-dir", metavar="DIR", help="where text DATA is converted (default ~/.cache/streamrank)")
    g.add_argument("--checkpoint", metavar="DIR",
                   help="write the pass's sums here every --commit-every seconds (default: none)")
    g.add_argument("--resume", action="store_true", help="continue the pass from the checkpoint in --checkpoint DIR")
    g.add_argument("--commit-every", type=float, default=60.0, metavar="SECONDS",
                   help="how often the checkpoint is written (default 60)")
    _add_cluster(g)
    _add_json_quiet(g, "print the selection as one JSON line", "no progress, no log lines")
    g.set_defaults(func=_cmd_select_features, paths=_select_features_paths)

    pr = sub.add_parser("predict", help="score data with a model, one score per line in input order")
    pr.add_argument("model", metavar="MODEL.h5", help="a model written by streamrank train, grid or cv")
    pr.add_argument("data", metavar="DATA", help="HDF5 dataset or LETOR text")
    pr.add_argument("-o", "--output", required=True, metavar="SCORES.txt",
                    help="one score per line, %%.17g (- : standard output)")
    _add_query_file(pr)
    pr.add_argument("--memory-budget", default=DEFAULT_MEMORY_BUDGET, metavar="SIZE",
                    help=f"bound on the process's memory (default {DEFAULT_MEMORY_BUDGET})")
    pr.add_argument("--cache-dir", metavar="DIR", help="where text DATA is converted (default ~/.cache/streamrank)")
    _add_cluster(pr)
    pr.add_argument("--pad-features", action="store_true",
                    help="score an HDF5 dataset narrower than the model, its missing trailing features read as 0 "
                         "(default: refused; text DATA always follows SVMlight's rule, said in one line)")
    pr.add_argument("--ignore-extra-features", action="store_true",
                    help="score an HDF5 dataset wider than the model, the features past the model's width ignored "
                         "(default: refused; text DATA always follows SVMlight's rule, said in one line)")
    pr.add_argument("--json", action="store_true", help="print the output path and row count as one JSON line")
    _add_progress(pr)
    pr.set_defaults(func=_cmd_predict, paths=_predict_paths)


def _choices(name, allowed):
    """A parser of one or several of ``allowed``, comma-separated (grid's --method primal,nystroem)."""
    def parse(text):
        vals = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in vals if v not in allowed]
        if bad or not vals:
            raise argparse.ArgumentTypeError(f"{name} takes {', '.join(allowed)} (several separated by commas); "
                                             f"got {text!r}")
        return list(dict.fromkeys(vals))
    return parse


def _etas(text):
    """--eta of grid: auto or values."""
    return [v if v == "auto" else _values("--eta")(v)[0] for v in
            (w.strip().lower() for w in text.split(",") if w.strip())] or _values("--eta")(text)


# what a word among a setting's values means, said in train's help (grid takes numbers only)
_WORDS_HELP = {"C": "two-stage is paper 001's rule: 1e-5..1e-1 by decades, then 0.6, 0.8, 1.2, 1.4 times the best"}
# a grid's axes that default to the method's grid (docs/methods.md)
_GRID_AXES = ("C", "lam", "gamma", "components")


def _option(s, many):
    """argparse keyword arguments of setting ``s`` (streamrank.settings) for train, or for grid
    and cv (``many``)."""
    listed = many and s.many == "list"
    if s.kind == "flag":
        return {"action": "store_true", "default": None}
    if s.kind == "choice":
        if listed:
            return {"type": _choices(s.flag, s.choices), "metavar": s.metavar}
        return {"choices": list(s.choices)}
    if s.kind == "values":
        words = () if many else s.words
        metavar = s.metavar + "".join(f"|{w}" for w in words)
        return {"type": _values(s.flag, words), "metavar": metavar}
    if s.kind == "posint":
        if listed:
            return {"type": _values(s.flag, integer=True), "metavar": f"{s.metavar}[,{s.metavar}...]"}
        return {"type": _positive_int(s.flag, str(s.default or params_example(s.name))), "metavar": s.metavar}
    if s.name == "eta" and listed:
        return {"type": _etas, "metavar": "E[,E...]|auto"}
    if s.kind == "float" and s.words:
        return {"type": _number_or_word(s.words), "metavar": s.metavar + "".join(f"|{w}" for w in s.words)}
    parse = {"int": int, "float": float}.get(s.kind)
    return {"metavar": s.metavar, **({"type": parse} if parse else {})}


def _number_or_word(words):
    """A parser of one number, or one of ``words`` (--gap-tol G|off)."""
    def parse(text):
        word = text.strip().lower()
        if word in words:
            return word
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number or {' or '.join(map(repr, words))}: {text!r}") from None
    return parse


def params_example(name):
    from streamrank import params
    return params.RANGES[name].example if name in params.RANGES else "1"


def _help(s, many):
    """Setting ``s``'s help with its default, in train's or grid's (``many``) terms."""
    text = s.help
    if s.words and not many and s.name in _WORDS_HELP:
        text += "; " + _WORDS_HELP[s.name]
    if many and s.name in _GRID_AXES:
        return text.split(" (default")[0] + " (default: the method's grid, docs/methods.md)"
    if many and s.many == "search":
        return (text.split(" (default")[0] + " (default: neither --pair-cost nor --query-weight given, each "
                "RankSVM configuration is tried plain and with paper 001's costs, --pair-cost graded --query-weight "
                "log_ratio, and plain is chosen only when it beats them on validation beyond two standard errors; "
                "docs/methods.md)")
    if many and s.many == "list" and s.kind == "choice":
        text = ("one or both of " if len(s.choices) == 2 else "one or several of ") + text
    if "default" in text or s.kind == "flag":
        return text
    default = f"{s.default:g}" if isinstance(s.default, float) else s.default
    return f"{text} (default {default})"


def add_model_options(t, *, many):
    """The options of a training, one per setting of streamrank.settings' table: train's (one
    method, one loss, one m) or grid's and cv's (``many``: lists of methods, losses, components
    and etas as well; no --gap-tol, --checkpoint or --resume). Every option's default is None here:
    :func:`intake` knows what was given, then fills in the table's defaults."""
    from streamrank import settings
    for s in settings.TABLE.values():
        if not s.flag or (many and s.many == "none"):
            continue
        dest = {} if s.flag[2:].replace("-", "_") == s.name else {"dest": s.name}
        kw = {"default": None, **_option(s, many), **dest}
        t.add_argument(s.flag, help=_help(s, many), **{k: v for k, v in kw.items() if v is not None or k == "default"})
