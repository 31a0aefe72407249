"""The search commands: grid (hyper-parameters chosen on validation data) and cv (the LETOR
protocol over folds)."""

import json

from streamrank.cli.common import _add_cluster, _add_query_file, _executor, _setup_logging
from streamrank.cli.train_commands import add_model_options

# what every configuration shares (the trainers' keyword arguments) and the flags they come from
SHARED = ("normalize", "tol", "max_iter", "memory_budget", "pair_cost", "query_weight", "seed", "solver",
          "kernel", "degree", "coef0", "rank", "cache_dir", "map_cache", "cache_size", "precondition",
          "abs_gtol", "abs_dtol", "features")
# settings that change no result: a rerun may change them and still continue the run
NEUTRAL = ("memory_budget", "cache_dir", "cache_size", "map_cache")


def grid_axes(args):
    return {"method": args.method, "loss": args.loss, "components": args.components, "eta": args.eta,
            "C": args.C, "gamma": args.gamma, "lam": args.lam}


def grid_settings(args):
    s = {k: getattr(args, k) for k in SHARED}
    s["kernel"] = s["kernel"] or "rbf"
    s["degree"] = 3 if s["degree"] is None else s["degree"]
    s["coef0"] = 1.0 if s["coef0"] is None else s["coef0"]
    return s


def _cmd_grid(args):
    from streamrank.evaluation.score_files import open_data
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
        print(json.dumps(record["chosen"]))
    elif not args.quiet:
        print("\n".join(grid_lines(record, args.output)))
    return 0


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
    _add_cluster(g)
    g.add_argument("--json", action="store_true", help="print the chosen point as one JSON line")
    g.add_argument("--quiet", action="store_true", help="no progress, no log lines, no summary")
    g.set_defaults(func=_cmd_grid)
