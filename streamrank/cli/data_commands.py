"""The data commands: convert, info, eval, demo."""

from pathlib import Path

from streamrank.cli.common import (
    _add_progress,
    _add_query_file,
    _cache_outputs,
    _check_outputs,
    _data_inputs,
    _positive_int,
    emit_json,
    shows_progress,
)
from streamrank.settings import DEFAULT_MEMORY_BUDGET


def _cmd_convert(args):
    from streamrank.io.convert import convert
    _check_outputs((args.output, "output", False))
    stats = convert(args.inputs, args.output, query_files=args.query_file, zero_based=args.zero_based,
                    n_features=args.n_features, compression=args.compression,
                    keep_comments=not args.no_comments, memory_budget=args.memory_budget,
                    quiet=not shows_progress(args), commit_seconds=args.commit_every,
                    label_column=args.label_column, qid_column=args.qid_column, feature_columns=args.feature_columns)
    if args.json:
        emit_json(stats)
    elif not args.quiet:
        print(f"wrote {stats['output']}: {stats['rows']:,} rows, {stats['queries']:,} queries, "
              f"{stats['features']} features in {stats['seconds']:.2f} s "
              f"({stats['text_mb_per_s']:.1f} MB/s of text, {stats['rows_per_s']:,.0f} rows/s"
              f"{'; queries regrouped' if stats['regrouped'] else ''}"
              f"{'; continued after ' + format(stats['resumed_rows'], ',') + ' rows' if stats['resumed_rows'] else ''}"
              ")")
    return 0



def _convert_paths(args):
    from streamrank.io.urls import expand
    args.inputs = expand(args.inputs)  # the files a pattern names are inputs (none may be the output)
    inputs = [x for k, path in enumerate(args.inputs) for x in _data_inputs("IN" if len(args.inputs) == 1 else
                                                                            f"IN {k + 1}", path)]
    inputs += [("--query-file", q) for q in args.query_file or []]
    return inputs, [("-o", args.output, None)], []


def _eval_paths(args):
    files, trees = _cache_outputs(args)
    return _data_inputs("DATA", args.data, args.query_file) + [("SCORES", args.scores)], files, trees


def _cmd_info(args):
    from streamrank.state.model_info import format_model_info, is_model_file, model_info
    if is_model_file(args.data):
        info = model_info(args.data)
        if args.json:
            emit_json(info)
        else:
            print(format_model_info(info))
        return 0
    from streamrank.io.dataset import open_dataset
    from streamrank.io.info import dataset_info, format_info
    with open_dataset(args.data) as ds:
        info = dataset_info(ds)
    if args.json:
        emit_json(info)
    else:
        print(format_info(info))
    return 0


def _cmd_eval(args):
    from streamrank.evaluation.score_files import evaluate_file
    report = evaluate_file(args.data, args.scores, convention=args.convention, cache_dir=args.cache_dir,
                           query_file=args.query_file, memory_budget=args.memory_budget)
    if args.json:
        emit_json(report.to_dict(per_query=args.per_query))
    else:
        print(report.format(per_query=args.per_query))
    return 0


def _cmd_demo(args):
    from streamrank.demo import run_demo
    done = run_demo(workdir=args.workdir, quiet=args.quiet)
    if not args.quiet:
        print("\n".join(demo_steps(done["workdir"])))
    return 0


def demo_steps(workdir):
    """Where the demo's files are, and its steps as the commands that redo them on those files
    (the same model, scores and metrics)."""
    import shlex

    from streamrank.demo import C_EXPONENTS, NORMALIZE
    d = Path(workdir)

    def at(name):
        return shlex.quote(str(d / name))
    lo, hi, step = C_EXPONENTS
    steps = [f"streamrank convert {at(p + '.txt')} -o {at(p + '.h5')}" for p in ("train", "valid", "test")]
    steps += [f"streamrank train {at('train.h5')} --valid {at('valid.h5')} --C 2^{lo}:2^{hi}:{step} "
              f"--normalize {NORMALIZE} -o {at('model.h5')}",
              f"streamrank predict {at('model.h5')} {at('test.h5')} -o {at('scores.txt')}",
              f"streamrank eval {at('test.h5')} {at('scores.txt')}"]
    return [f"The demo's files are in {d}: the text (train.txt, valid.txt, test.txt), the datasets (.h5), "
            f"model.h5 and scores.txt. The same steps by hand:"] + ["  " + c for c in steps]


def register(sub):
    """The data commands' parsers."""
    c = sub.add_parser("convert",
                       help="LETOR/SVMlight text (.txt .gz .bz2 .xz; LF, CRLF or CR line ends), or Parquet / Arrow "
                            "tables, to an HDF5 dataset")
    c.add_argument("inputs", nargs="+", metavar="IN",
                   help="text files, concatenated in order; or Parquet / Arrow IPC files, or directories of parts "
                        "(Spark's part-*.parquet, hive folders), read in path order")
    c.add_argument("-o", "--output", required=True, metavar="OUT.h5", help="the HDF5 dataset to write")
    c.add_argument("--query-file", action="append", metavar="F",
                   help="group sizes (one per line) for an input without qid:; give once per input "
                        "(default: IN.query beside each input, if present)")
    c.add_argument("--zero-based", action="store_true", help="feature indices start at 0 (default 1)")
    c.add_argument("--n-features", type=_positive_int("--n-features", 46), metavar="D",
                   help="fix the number of features (train, vali and test must agree; default: the largest id seen)")
    c.add_argument("--compression", choices=["gzip", "lzf", "none"], default=None,
                   help="HDF5 compression of the rows "
                        "(default: none; docs/benchmarks-archive.md, \"Storage defaults\")")
    c.add_argument("--no-comments", action="store_true", help="do not keep the text after '#'")
    t = c.add_argument_group("Parquet and Arrow inputs")
    t.add_argument("--label-column", default=None, metavar="NAME", help="the label's column (default: label)")
    t.add_argument("--qid-column", default=None, metavar="NAME",
                   help="the query id's column, integers or text (default: qid)")
    t.add_argument("--feature-columns", default=None, metavar="SPEC",
                   help="A,B,C; a range FIRST:LAST in the file's column order; one list or Spark ML vector column; "
                        "default: every other numeric column")
    c.add_argument("--memory-budget", default=DEFAULT_MEMORY_BUDGET, metavar="SIZE",
                   help=f"bound on the memory the conversion uses (default {DEFAULT_MEMORY_BUDGET})")
    c.add_argument("--commit-every", type=float, default=60.0, metavar="SECONDS",
                   help="commit the rows written so far this often (default 60); a conversion killed or "
                        "interrupted continues from its last commit when the same command runs again")
    c.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    c.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    _add_progress(c)
    c.set_defaults(func=_cmd_convert, paths=_convert_paths)

    i = sub.add_parser("info", help="a dataset's rows, queries, labels and pairs; or a model's method, settings, "
                       "training and weights")
    i.add_argument("data", metavar="DATA.h5|MODEL.h5", help="a dataset or a model file")
    i.add_argument("--json", action="store_true", help="print the facts as one JSON line")
    i.set_defaults(func=_cmd_info)

    e = sub.add_parser("eval", help="NDCG, MAP, P@k and pairwise accuracy of a score file")
    e.add_argument("data", metavar="DATA", help="HDF5 dataset or LETOR text")
    e.add_argument("scores", metavar="SCORES.txt", help="one score per line, in the input's row order")
    _add_query_file(e)
    e.add_argument("--convention", choices=["letor4", "standard"], default="letor4",
                   help="letor4 (default): LETOR 4.0's Eval-Score-4.0.pl; "
                        "standard: gain 2^y - 1, ideal DCG of each query")
    e.add_argument("--per-query", action="store_true", help="print every query's values")
    e.add_argument("--cache-dir", default=None, help="where text DATA is converted (default ~/.cache/streamrank)")
    e.add_argument("--memory-budget", default=DEFAULT_MEMORY_BUDGET, metavar="SIZE",
                   help=f"(default {DEFAULT_MEMORY_BUDGET}) text DATA is converted within it; eval keeps about "
                        "48 bytes per row and says so when that does not fit")
    e.add_argument("--json", action="store_true", help="print the metrics as one JSON line")
    e.set_defaults(func=_cmd_eval, paths=_eval_paths)

    d = sub.add_parser("demo", help="generate a small LETOR-like dataset and run the pipeline on it")
    d.add_argument("--workdir", "--dir", dest="workdir", default=None, metavar="DIR",
                   help="write the demo's files here and keep them: text, datasets, model.h5, scores.txt (default "
                        "./streamrank-demo); a folder holding other files is refused, the demo's own is reused")
    d.add_argument("--quiet", action="store_true", help="no progress, no summary")
    d.set_defaults(func=_cmd_demo)
