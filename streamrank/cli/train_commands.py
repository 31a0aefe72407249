"""The model commands: train, predict, select-features."""

import argparse
import sys
from pathlib import Path

from streamrank.cli.common import (_add_cluster, _add_json_quiet, _add_progress, _add_query_file, _cache_outputs,
                                   _check_checkpoint_dir, _check_outputs, _checkpoint_outputs, _data_inputs, _executor,
                                   _features_inputs, _values, _positive_int, _setup_logging, emit_json)


def _train_paths(args):
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
    from streamrank.evaluation.score_files import open_data
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
    from streamrank.evaluation.score_files import open_data
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
    refuse_inapplicable(args, [args.method])
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


# options that only some methods (or settings) read: given to none of them, they are refused, not ignored
ONLY_FOR = {"rank": ("--rank", ("nystroem",)), "map_cache": ("--map-cache", ("nystroem", "rff")),
            "gap_tol": ("--gap-tol", ("primal", "nystroem", "rff", "exact")),
            "kernel": ("--kernel", ("nystroem", "rff", "exact", "clsr")),
            "degree": ("--degree", ("nystroem", "exact", "clsr")), "coef0": ("--coef0", ("nystroem", "exact", "clsr"))}


def refuse_inapplicable(args, methods):
    """Refuse options that apply to none of ``methods`` or to none of the given settings."""
    from streamrank.errors import ParameterError
    for opt, (flag, applies) in ONLY_FOR.items():
        default = "auto" if opt == "map_cache" else None
        if getattr(args, opt, None) != default and not set(methods) & set(applies):
            raise ParameterError(f"{flag} applies to --method {' or '.join(applies)}, not to {', '.join(methods)}; "
                                 f"drop {flag}")
    kernel = args.kernel or "rbf"
    if args.degree is not None and kernel != "poly":
        raise ParameterError(f"--degree is the poly kernel's; got --kernel {kernel}. Pass --kernel poly or drop --degree")
    if args.coef0 is not None and kernel not in ("poly", "sigmoid"):
        raise ParameterError(f"--coef0 is the poly and sigmoid kernels' offset; got --kernel {kernel}. Pass --kernel "
                             f"poly or sigmoid, or drop --coef0")
    for opt, flag in (("abs_gtol", "--abs-gtol"), ("abs_dtol", "--abs-dtol")):
        if getattr(args, opt) is not None and args.solver != "newton_yuan":
            raise ParameterError(f"{flag} is a stopping test of --solver newton_yuan; got --solver {args.solver}. "
                                 f"Pass --solver newton_yuan or drop {flag}")
    if getattr(args, "cache_size", None) is not None and not getattr(args, "cache_dir", None):
        raise ParameterError("--cache-size caps the feature caches in --cache-dir; pass --cache-dir DIR too")


def kernel_settings(args):
    """--kernel, --degree, --coef0 with their defaults (rbf, 3, 1)."""
    return {"kernel": args.kernel or "rbf", "degree": 3 if args.degree is None else args.degree,
            "coef0": 1.0 if args.coef0 is None else args.coef0}


def _train_method(args, ds, valid, executor):
    from streamrank.training.linear import train_linear
    if args.method == "exact":
        return _train_exact(args, ds, valid, executor)
    if args.method == "clsr":
        from streamrank.training.clsr import train_clsr
        return train_clsr(ds, valid=valid, lam=args.lam or [1e-3], **kernel_settings(args),
                                    gamma=args.gamma, normalize=args.normalize,
                                    components=args.components, memory_budget=args.memory_budget,
                                    select_metric=args.select_metric, seed=args.seed, features=args.features,
                                    checkpoint=args.checkpoint, resume=args.resume, executor=executor)
    return train_linear(ds, valid=valid, C=args.C, normalize=args.normalize, tol=args.tol,
                                      max_iter=args.max_iter, gap_tol=args.gap_tol,
                                      memory_budget=args.memory_budget,
                                      pair_cost=args.pair_cost, query_weight=args.query_weight,
                                      select_metric=args.select_metric, checkpoint=args.checkpoint,
                                      resume=args.resume, seed=args.seed, solver=args.solver, method=args.method,
                                      **kernel_settings(args), gamma=args.gamma,
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
    return train_exact(ds, valid=valid, C=args.C, **kernel_settings(args), gamma=args.gamma,
                       normalize=args.normalize, tol=args.tol,
                       max_iter=args.max_iter, gap_tol=args.gap_tol, memory_budget=args.memory_budget,
                       pair_cost=args.pair_cost,
                       query_weight=args.query_weight, select_metric=args.select_metric,
                       checkpoint=args.checkpoint, resume=args.resume, seed=args.seed, cache_dir=args.cache_dir,
                       precondition=args.precondition, loss=args.loss, eta=args.eta, solver=args.solver,
                       abs_gtol=args.abs_gtol, abs_dtol=args.abs_dtol, features=args.features, executor=executor)


def _cmd_predict(args):
    from streamrank.evaluation.score_files import open_data, write_scores
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
    t.add_argument("--checkpoint", metavar="DIR", help="write a checkpoint after every iteration (default: none)")
    t.add_argument("--resume", action="store_true", help="continue from the checkpoint in --checkpoint DIR")
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
    g.add_argument("--memory-budget", default="2GB", metavar="SIZE", help="bound on the process's memory (default 2GB)")
    g.add_argument("--cache-dir", metavar="DIR", help="where text DATA is converted (default ~/.cache/streamrank)")
    g.add_argument("--checkpoint", metavar="DIR", help="write the pass's sums here every --commit-every seconds (default: none)")
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
    pr.add_argument("--memory-budget", default="2GB", metavar="SIZE", help="bound on the process's memory (default 2GB)")
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


METHODS = ["primal", "nystroem", "rff", "exact", "clsr"]
LOSSES = ["squared_hinge", "smooth_hinge"]


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


def add_model_options(t, *, many):
    """The options of a training: train's (one method, one loss, one m) or grid's (``many``: lists
    of methods, losses, components and etas as well)."""
    t.add_argument("--C", type=_values("--C", () if many else ("two-stage",)), default=None,
                   metavar="C[,C...]" if many else "C[,C...]|two-stage",
                   help="the loss weight: values 0.1,1,10 or powers 2^-5:2^5 (step 2: 2^-5:2^5:2); several (with "
                        "--valid) form a warm-started path" + ("" if many else "; two-stage is paper 001's rule: "
                        "1e-5..1e-1 by decades, then 0.6, 0.8, 1.2, 1.4 times the best") +
                        (" (default: the method's grid, docs/methods.md)" if many else " (default 1)"))
    t.add_argument("--select-metric", choices=["meanndcg", "ndcg@10", "map", "avgndcg", "avgprec"],
                   default="meanndcg", help="what --valid chooses by (default meanndcg); avgndcg and avgprec are "
                   "paper 001's means of NDCG@1..20 and P@1..20")
    methods = "primal (linear RankSVM), nystroem or rff (paper 000), exact (paper 004), clsr (paper 002: CLSRRank, " \
              "least squares over kernel coefficients, one pass and a direct solve)"
    if many:
        t.add_argument("--method", type=_choices("--method", METHODS), default=["primal"], metavar="M[,M...]",
                       help=f"one or several of {methods} (default primal)")
    else:
        t.add_argument("--method", choices=METHODS, default="primal", help=f"{methods} (default primal)")
    t.add_argument("--lambda", dest="lam", type=_values("--lambda"), metavar="L[,L...]",
                   help="--method clsr's penalty lambda m ||alpha||^2, values as --C; several form a path chosen "
                        "on --valid, all from one pass over the data (default " +
                        ("the method's grid)" if many else "0.001)"))
    t.add_argument("--kernel", choices=["rbf", "laplacian", "poly", "sigmoid", "linear"],
                   help="the kernel of nystroem, rff (rbf or laplacian), exact and clsr (default rbf)")
    t.add_argument("--gamma", type=_values("--gamma"), metavar="G[,G...]",
                   help="kernel width, values as --C; several form a path, one map each (default " +
                        ("the method's grid)" if many else "1/n_features)"))
    t.add_argument("--degree", type=int, help="poly kernel degree (default 3)")
    t.add_argument("--coef0", type=float, help="poly / sigmoid offset (default 1)")
    if many:
        t.add_argument("--components", type=_values("--components", integer=True), metavar="M[,M...]",
                       help="Nystroem landmarks, random features or CLSRRank basis rows; several are tried in turn "
                            "(default: the method's grid)")
    else:
        t.add_argument("--components", type=_positive_int("--components", 1000), metavar="M",
                       help="Nystroem landmarks or random features (default 1000), CLSRRank basis rows (default: "
                            "every training row)")
    t.add_argument("--rank", type=_positive_int("--rank", 100), metavar="K",
                   help="keep the top K Nystroem eigenvectors (default: all)")
    t.add_argument("--map-cache", choices=["auto", "memory", "cache", "recompute"], default="auto",
                   help="mapped rows: in memory if they fit, else on disk under --cache-dir or recomputed each "
                        "pass, chosen from measured rates (default auto); the model is the same either way")
    t.add_argument("--solver", choices=["auto", "tron", "newton_cholesky", "newton_yuan"], default="tron",
                   help="tron (default: the same bits for any memory budget), newton_cholesky, newton_yuan "
                        "(paper 001: Newton steps, Yuan's step length every third), or auto (tron or "
                        "newton_cholesky from measured pass and Hessian costs, so it may differ between runs)")
    t.add_argument("--precondition", choices=["auto", "on", "off"], default="auto",
                   help="TRON's CG preconditioned: fewer CG steps and passes. auto (default) = on: up to 256 "
                        "features the Hessian of a sample of queries; wider maps a rank-192 Nystrom sketch of the "
                        "Hessian at w = 0 (one pass per map, seeded by --seed); --method exact: a Nystroem "
                        "approximation of the Hessian from about 10 sqrt(rows) landmarks")
    t.add_argument("--features", metavar="IDS|@FILE|GAS.h5:K",
                   help="train on these features only (ids as in the data, 1-based: 3,7,12; a file of ids; or the "
                        "first K of streamrank select-features' GAS file); predict applies the same subset "
                        "(default: all)")
    loss_help = ("squared_hinge (RankSVM) or smooth_hinge (paper 001's cs-sRSVM: the hinge smoothed in a band of "
                 "half-width --eta around margin 0)")
    if many:
        t.add_argument("--loss", type=_choices("--loss", LOSSES), default=None, metavar="L[,L...]",
                       help=f"one or both of {loss_help} (default squared_hinge)")
        t.add_argument("--eta", type=_etas, default=None, metavar="E[,E...]|auto",
                       help="--loss smooth_hinge's band half-widths, 0 < E < 1, or auto (default): paper 001's rule "
                            "from C and the pair weights")
    else:
        t.add_argument("--loss", choices=LOSSES, default="squared_hinge", help=f"{loss_help} (default squared_hinge)")
        t.add_argument("--eta", default=None, metavar="E|auto",
                       help="--loss smooth_hinge's band half-width, 0 < E < 1, or auto (default): paper 001's "
                            "rule from C and the pair weights, recorded per C")
    t.add_argument("--pair-cost", default="none", metavar="SPEC",
                   help="label-pair costs lambda (paper 001): none (default), gain_difference, or pairs such as "
                        "'0-1:1,1-2:1.3,0-2:2' (unlisted pairs cost 1)")
    t.add_argument("--query-weight", choices=["none", "log_ratio"], default="none",
                   help="paper 001's query weights mu_q: none (default) or log_ratio")
    t.add_argument("--tol", type=float, default=1e-3, metavar="EPS",
                   help="stop when ||g|| <= EPS ||g0|| (TRON's and LIBLINEAR's rule; default 1e-3)")
    if not many:  # train only, for now: grid and cv stop by --tol
        t.add_argument("--gap-tol", type=float, metavar="G",
                       help="stop when the relative objective gap (f - f*)/f is at most G, in place of --tol's "
                            "rule: a rigorous bound ||g||^2/2f for linear and mapped models, the preconditioner's "
                            "estimate for --method exact (default: off; every log line and --json report the gap "
                            "either way)")
    t.add_argument("--abs-gtol", type=float, metavar="EPS2", help="--solver newton_yuan also stops at ||g|| <= "
                   "EPS2 (paper 001's eps2, 1e-4 there; default: off)")
    t.add_argument("--abs-dtol", type=float, metavar="EPS3", help="--solver newton_yuan also stops when its "
                   "Newton direction's norm is <= EPS3 (paper 001's eps3, 1e-4 there; default: off)")
    t.add_argument("--max-iter", type=_positive_int("--max-iter", 1000), default=1000, metavar="N",
                   help="solver iterations per C at most (default 1000)")
    t.add_argument("--seed", type=int, default=0, metavar="S",
                   help="fixes every random choice: landmarks, random features, basis rows (default 0)")
    t.add_argument("--normalize", choices=["none", "zscore", "query_minmax"], default="none",
                   help="feature scaling fitted on the training data and stored in the model (default none)")
    t.add_argument("--memory-budget", default="2GB", metavar="SIZE",
                   help="bound on the process's memory: blocks, caches and solver state (default 2GB)")
    t.add_argument("--cache-dir", metavar="DIR", help="where text DATA is converted (default ~/.cache/streamrank) "
                   "and mapped rows are cached (default: not cached, recomputed each pass)")
    t.add_argument("--cache-size", metavar="SIZE", help="cap on all feature caches in --cache-dir together; least "
                   "recently used blocks are evicted (default: no cap)")
