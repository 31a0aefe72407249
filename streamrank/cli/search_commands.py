"""The search commands: grid (hyper-parameters chosen on validation data) and cv (the LETOR
protocol over folds)."""

from pathlib import Path

from streamrank.cli.common import (
    _add_cluster,
    _add_json_quiet,
    _add_query_file,
    _cache_outputs,
    _data_inputs,
    _executor,
    _features_inputs,
    _setup_logging,
    _values,
    emit_json,
)
from streamrank.cli.train_commands import add_model_options, intake

# settings that change no result: a rerun may change them and still continue the run
NEUTRAL = ("memory_budget", "cache_dir", "cache_size", "map_cache")


def grid_axes(args):
    return {"method": args.method, "loss": args.loss, "components": args.components, "eta": args.eta,
            "C": args.C, "gamma": args.gamma, "lam": args.lam, "pair_cost": args.pair_cost,
            "query_weight": args.query_weight}


def grid_settings(args):
    """What every configuration shares: the settings of the table (streamrank.settings) that grid
    takes one value of, the axes (grid_axes) and --select-metric (the grid's own) aside."""
    from streamrank import settings
    return {k: getattr(args, k) for k, s in settings.TABLE.items()
            if s.many == "one" and k != "select_metric" and hasattr(args, k)}


def _grid_paths(args):
    from streamrank.workflow.grid import run_outputs
    intake(args)  # its message before the grid's own
    inputs = _data_inputs("DATA", args.data, args.query_file) + _data_inputs("--valid", args.valid) + \
        _features_inputs(args.features)
    files, trees = run_outputs(args.output, grid_axes(args))
    cache_files, cache_trees = _cache_outputs(args)
    return inputs, [("-o", f, args.output) for f in files] + cache_files, [("-o", t) for t in trees] + cache_trees


def _cv_paths(args):
    from streamrank.workflow.cv import find_folds, fold_inputs, run_outputs
    intake(args)
    folds = find_folds(args.folds_dir, args.folds)
    files, trees = run_outputs(args.output, folds, args.method, grid_axes(args))
    cache_files, cache_trees = _cache_outputs(args)
    return ([x for p, name in fold_inputs(folds) for x in _data_inputs(name, p)] + _features_inputs(args.features),
            [("-o", f, args.output) for f in files] + cache_files, [("-o", t) for t in trees] + cache_trees)


def _report_paths(args):
    from streamrank.workflow.report import run_records
    inputs = [(f"RUN_DIR's {p.relative_to(args.run_dir)}", p) for p in run_records(args.run_dir)]
    return inputs, [("-o", args.output, None), ("--png-dir", args.png_dir, None)], []


def _cmd_grid(args):
    from streamrank.io.data_files import open_data
    intake(args)
    from streamrank.workflow.grid import run_grid
    from streamrank.workflow.tables import grid_lines
    _setup_logging(args.quiet or args.json)
    settings = grid_settings(args)
    with open_data(args.data, args.cache_dir, quiet=args.quiet, query_file=args.query_file) as ds, \
            open_data(args.valid, args.cache_dir, quiet=args.quiet) as valid, _executor(args) as executor:
        record = run_grid(ds, valid, args.output, axes=grid_axes(args), settings=settings,
                          select_metric=args.select_metric, executor=executor, neutral=NEUTRAL,
                          command=args.command_line)
    if args.json:
        emit_json(dict(record["chosen"], convention=record["convention"], notes=record["notes"]))
    elif not args.quiet:
        print("\n".join(grid_lines(record, args.output)))
    return 0


def _cmd_cv(args):
    from streamrank.workflow.cv import run_cv, table_lines
    intake(args)
    _setup_logging(args.quiet or args.json)
    with _executor(args) as executor:
        record = run_cv(args.folds_dir, args.output, methods=args.method, axes=grid_axes(args),
                        settings=grid_settings(args), select_metric=args.select_metric, folds=args.folds,
                        executor=executor, cache_dir=args.cache_dir, neutral=NEUTRAL, command=args.command_line)
    if args.json:
        from streamrank.workflow.cv import summary
        emit_json(summary(record, args.output))
    elif not args.quiet:
        from streamrank.workflow.tables import metric_notes
        print("\n".join(table_lines(record) + metric_notes(record)))
        print(f"{record['convention']} test metrics, chosen on vali by {args.select_metric}; "
              f"{record['seconds']:.1f} s. Written: "
              f"{Path(args.output) / 'cv.md'}, cv.csv, cv.json "
              f"(every fold's grid in {Path(args.output) / 'FoldK' / 'METHOD'})")
    return 0


def _cmd_report(args):
    from streamrank.cli.common import _check_outputs
    from streamrank.workflow.report import write_report
    if args.output == "-":
        args.quiet = True
    else:
        _check_outputs((args.output, "report", True))
    n = write_report(args.run_dir, args.output, plots=not args.no_plots, png_dir=args.png_dir)
    if not args.quiet:
        print(f"wrote {args.output}: the run's settings, data, tables and {n} plot(s), self-contained"
              + (f"; the plots also as PNG files in {args.png_dir}" if args.png_dir else ""))
    return 0


# cv chooses on each fold's vali file and has no --valid: the training options' help (shared with
# train and grid, streamrank.cli.train_commands.add_model_options) said so in grid's terms
_CV_HELP = (("several (with --valid) form a warm-started path", "several form a warm-started path, chosen on "
             "each fold's vali"), ("what --valid chooses by", "what each fold's vali chooses by"),
            ("chosen on --valid", "chosen on each fold's vali"),
            ("where text DATA is converted", "where the folds' text files are converted"))
# grid chooses on its required --valid: "(with --valid)" read as if it were optional; its --valid
# text is converted into --cache-dir as DATA is
_GRID_HELP = (("several (with --valid) form a warm-started path", "several form a warm-started path, chosen on "
               "--valid"), ("where text DATA is converted", "where text DATA and --valid are converted"))
# both: a list of one or two losses
_LOSS_HELP = ("one or both of squared_hinge (RankSVM) or smooth_hinge", "one or both of squared_hinge (RankSVM) and "
              "smooth_hinge")
# the default gamma grid follows the data (streamrank.workflow.grid.DEFAULT_GAMMA_OFFSETS)
_GAMMA_DEFAULT = ("one map each (default: the method's grid, docs/methods.md)",
                  "one map each (default: the method's grid around "
                  "the data's gamma='scale' = 1/(d Var X) after --normalize, docs/methods.md)")


def _reword(parser, changes):
    """Replace phrases in the help of ``parser``'s options (tests/workflow/test_search_help.py
    checks that cv's help names no --valid and grid's gamma default is the data's)."""
    for old, new in changes:
        for a in parser._actions:
            if a.help and old in a.help:
                a.help = a.help.replace(old, new)


def register(sub):
    """The search commands' parsers."""
    g = sub.add_parser("grid", help="train over a grid of methods and hyper-parameters; choose on --valid")
    g.add_argument("data", metavar="DATA", help="training data: HDF5 dataset or LETOR text")
    g.add_argument("--valid", required=True, metavar="DATA", help="validation data: chooses the configuration")
    g.add_argument("-o", "--output", required=True, metavar="RUN_DIR",
                   help="the run directory: model.h5 (the chosen model), grid.json (every candidate), one "
                        "folder per configuration; the same command continues a killed run")
    _add_query_file(g)
    add_model_options(g, many=True)
    _reword(g, _GRID_HELP + (_GAMMA_DEFAULT, _LOSS_HELP))
    _add_cluster(g)
    _add_json_quiet(g, "print the chosen point as one JSON line")
    g.set_defaults(func=_cmd_grid, paths=_grid_paths)

    c = sub.add_parser("cv", help="the LETOR protocol: per fold a grid on train chosen on vali, evaluated on test")
    c.add_argument("folds_dir", metavar="FOLDS_DIR", help="folder with Fold1..FoldK, each with train, vali and test "
                   "(LETOR text: .txt, .txt.gz, .txt.bz2 or .txt.xz, or HDF5: .h5)")
    c.add_argument("-o", "--output", required=True, metavar="RUN_DIR",
                   help="the run directory: cv.md, cv.csv, cv.json and each fold's grid; the same command "
                        "continues a killed run")
    c.add_argument("--folds", type=_values("--folds", integer=True), metavar="K[,K...]",
                   help="only these folds (default: every FoldK found)")
    add_model_options(c, many=True)
    _add_cluster(c)
    _add_json_quiet(c, "print one JSON object on one line, last: the table's rows (every fold, every method), "
                    "the mean and the std over folds per method", "no progress, no log lines, no table")
    _reword(c, _CV_HELP + (_GAMMA_DEFAULT, _LOSS_HELP))
    c.set_defaults(func=_cmd_cv, paths=_cv_paths)

    r = sub.add_parser("report", help="one self-contained HTML page of a grid or cv run: settings, data, tables, plots")
    r.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by streamrank grid or cv")
    r.add_argument("-o", "--output", required=True, metavar="REPORT.html", help="the page (- : standard output)")
    r.add_argument("--png-dir", metavar="DIR", help="also write each plot as a PNG file here (default: none)")
    r.add_argument("--no-plots", action="store_true", help="tables only (no matplotlib needed)")
    r.add_argument("--quiet", action="store_true", help="no summary line")
    r.set_defaults(func=_cmd_report, paths=_report_paths)
