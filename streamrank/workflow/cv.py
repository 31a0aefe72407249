"""``streamrank cv``: the LETOR protocol over folds, as the papers' tables are made.

For every fold (``Fold1`` .. ``FoldK``, each with train, vali and test as LETOR text or HDF5) and
every method: a grid (:mod:`streamrank.workflow.grid`) on train, chosen on vali; the chosen model
is not retrained; it is evaluated on test in the run's gain ``convention``, by default LETOR 4.0's
official one (``letor4``: NDCG@k with gain 2^y - 1 and the script's handling of queries without
relevant documents, P@k and MAP with labels >= 1 relevant; labels above 2, which the script has no
gain for, take 2^y - 1 and every output says so), else ``standard``; vali chooses in the same one.
The table has NDCG@1,3,5,10, P@1,3,5,10, MAP and MeanNDCG per fold,
and their mean and standard deviation over folds (the sample standard deviation, ddof = 1).

Each fold and method lives in ``RUN_DIR/FoldK/METHOD`` (a grid run directory, plus ``test.json``
written last), so a killed cv rerun with the same command keeps what is finished and ends with the
table of an uninterrupted run.
"""

import logging
import re
import time
from pathlib import Path

import numpy as np

from streamrank.errors import InputError
from streamrank.io.atomic import check_no_input_inside, check_not_input, reading, write_atomically
from streamrank.settings import DEFAULT_MEMORY_BUDGET
from streamrank.workflow.grid import (
    APPLIES,
    WorkBar,
    configuration_points,
    configuration_work,
    configurations,
    costs_into_axes,
    evaluate_model,
    per_query,
    run_grid,
)
from streamrank.workflow.grid import run_outputs as grid_outputs
from streamrank.workflow.rundir import open_run, read_json, write_json
from streamrank.workflow.tables import csv_text, markdown_table, point_text, text_table

log = logging.getLogger("streamrank.workflow.cv")

CV_FORMAT = "streamrank-cv"
CV_VERSION = 1
PARTS = ("train", "vali", "test")
SUFFIXES = (".h5", ".hdf5", ".txt", ".txt.gz", ".txt.bz2", ".txt.xz", ".gz", ".bz2", ".xz", "")
# the papers' table: (key in Report.means, column title)
METRICS = (("NDCG@1", "NDCG@1"), ("NDCG@3", "NDCG@3"), ("NDCG@5", "NDCG@5"), ("NDCG@10", "NDCG@10"),
           ("P@1", "P@1"), ("P@3", "P@3"), ("P@5", "P@5"), ("P@10", "P@10"), ("MAP", "MAP"), ("MeanNDCG", "MeanNDCG"))


def find_folds(folds_dir, folds=None):
    """[(name, {"train": path, "vali": path, "test": path})] of ``folds_dir``'s Fold1..FoldK (only
    ``folds``, numbers, when given), in fold order."""
    d = Path(folds_dir)
    if not d.is_dir():
        raise InputError(f"{d}: not a directory; give the folder that holds Fold1, Fold2, ... (LETOR's layout)")
    found = sorted((int(m.group(1)), p) for p in d.iterdir()
                   if p.is_dir() and (m := re.fullmatch(r"Fold(\d+)", p.name)))
    if not found:
        raise InputError(f"{d}: holds no Fold1, Fold2, ... folders "
                         f"(LETOR's layout: FoldK/train.txt, vali.txt, test.txt)")
    if folds is not None:
        missing = sorted(set(folds) - {k for k, _ in found})
        if missing:
            raise InputError(f"{d}: has no Fold{missing[0]}; it has {', '.join(p.name for _, p in found)}")
        found = [(k, p) for k, p in found if k in folds]
    out = []
    for _, p in found:
        parts = {}
        for part in PARTS:
            cands = [p / (part + s) for s in SUFFIXES if (p / (part + s)).is_file()]
            if not cands:
                raise InputError(f"{p}: no {part} file ({part}.txt, {part}.txt.gz or {part}.h5)")
            parts[part] = cands[0]
        out.append((p.name, parts))
    return out


RUN_FILES = ("settings.json", "cv.json", "cv.md", "cv.csv")


def method_axes(axes, method):
    """The axes given that apply to ``method``, with ``method`` as the only method."""
    return dict({k: v for k, v in axes.items() if k not in APPLIES or method in APPLIES[k]}, method=[method])


def run_outputs(run_dir, fold_list, methods, axes):
    """(files, trees) a cv run writes into ``run_dir`` (as :func:`streamrank.workflow.grid.run_outputs`)."""
    run_dir = Path(run_dir)
    files, trees = [run_dir / name for name in RUN_FILES], []
    for name, _ in fold_list:
        for method in methods:
            out = run_dir / name / method
            f, t = grid_outputs(out, method_axes(axes, method))
            files += f + [out / "test.json"]
            trees += t
    return files, trees


def fold_inputs(fold_list):
    """(path, what) of every fold's files."""
    return [(p, f"{name} {part}") for name, paths in fold_list for part, p in paths.items()]


def run_cv(folds_dir, run_dir, *, methods, axes, settings, select_metric="meanndcg", folds=None, executor=None,
           cache_dir=None, neutral=(), command=None, open_data=None):
    """Run the LETOR protocol (module docstring); return the cv record (also ``run_dir/cv.json``,
    with ``cv.md`` and ``cv.csv`` beside it). ``axes``: grid axes given by the user (None: each
    method's default grid); an axis applies to the methods it applies to. ``open_data(path)``
    opens a fold's file (default: HDF5 or text converted into ``cache_dir``)."""
    if open_data is None:
        from streamrank.io.data_files import open_data as _open
        open_data = (lambda p: _open(p, cache_dir))  # noqa: E731
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    axes, settings = costs_into_axes(axes, settings)
    configurations(dict(axes, method=list(methods)))  # refuses an axis that applies to none of the methods
    fold_list = find_folds(folds_dir, folds)
    record_settings = {"methods": list(methods), "axes": {k: v for k, v in axes.items() if v is not None},
                       "settings": {k: v for k, v in settings.items() if k not in neutral},
                       "select_metric": select_metric, "folds": [name for name, _ in fold_list]}
    with reading(*fold_inputs(fold_list)):
        files, trees = run_outputs(run_dir, fold_list, methods, axes)
        for f in files:
            check_not_input(f, "run directory", within=run_dir)
        for t in trees:
            check_no_input_inside(t, "checkpoint directory")
        return _run_cv(folds_dir, run_dir, fold_list, record_settings, methods=methods, axes=axes, settings=settings,
                       select_metric=select_metric, executor=executor, neutral=neutral, command=command,
                       open_data=open_data, t0=t0)


def _run_cv(folds_dir, run_dir, fold_list, record_settings, *, methods, axes, settings, select_metric, executor,
            neutral, command, open_data, t0):
    from streamrank.state.model import load
    continued = open_run(run_dir, "cv", record_settings)
    convention = settings.get("convention") or "letor4"
    results = []
    works = fold_works(fold_list, methods, axes, open_data)
    outer = WorkBar([w for fold in works.values() for w, _ in fold.values()],
                    sum(p for fold in works.values() for _, p in fold.values()), "cv")
    for name, paths in fold_list:
        with open_data(paths["train"]) as ds, open_data(paths["vali"]) as vali, open_data(paths["test"]) as test:
            for method in methods:
                out = run_dir / name / method
                done = read_json(out / "test.json", kind=CV_FORMAT + "-test")
                data = {part: d.fingerprint for part, d in (("train", ds), ("vali", vali), ("test", test))}
                if done is not None and done.get("data") != data:
                    raise InputError(f"{out}: was evaluated on other {name} data than {folds_dir} holds now (its "
                                     f"files changed); give another run directory")
                if done is None:
                    log.info("cv: %s, %s", name, method)
                    # the axes given that apply to this method
                    m_axes = method_axes(axes, method)
                    grid = run_grid(ds, vali, out, axes=m_axes, settings=settings, select_metric=select_metric,
                                    executor=executor, neutral=neutral, command=command, progress=outer, where=name)
                    rep = evaluate_model(load(out / "model.h5"), test,
                                         settings.get("memory_budget", DEFAULT_MEMORY_BUDGET), convention)
                    done = {"format": CV_FORMAT + "-test", "version": CV_VERSION, "fold": name, "method": method,
                            "chosen": grid["chosen"], "edges": grid["edges"], "grid_seconds": grid["seconds"],
                            "test": {"name": str(paths["test"]), "fingerprint": test.fingerprint}, "data": data,
                            "convention": rep.convention, "notes": sorted(set(grid["notes"]) | set(rep.notes)),
                            "means": {k: float(rep.means[k]) for k, _ in METRICS},
                            "per_query": per_query(rep)}
                    write_json(out / "test.json", done)
                    done = read_json(out / "test.json")
                else:
                    outer(works[name][method][0])
                results.append(done)
    outer.close()
    edges = edge_summary(results)
    for line in edge_lines(edges):
        log.warning("cv: %s", line)
    record = {"format": CV_FORMAT, "version": CV_VERSION, "command": command, "folds_dir": str(folds_dir),
              "settings": dict(record_settings, settings=settings), "results": results,
              "table": table_rows(results, methods), "convention": convention, "notes": run_notes(results),
              "edges": edges, "seconds": time.perf_counter() - t0,
              "continued": continued}
    write_json(run_dir / "cv.json", record)
    cols = table_columns()
    from streamrank.workflow.tables import metric_notes
    write_atomically(run_dir / "cv.md", "\n".join(markdown_table(record["table"], cols) + [""] + metric_notes(record))
                     + "\n")
    write_atomically(run_dir / "cv.csv", csv_text(record["table"], cols))
    return read_json(run_dir / "cv.json")


def run_notes(results):
    """The notes of every fold's evaluations (vali and test), each once, in order of first appearance:
    what a convention does beyond its own labels (letor4 above 2), said as ``eval`` says it."""
    return list(dict.fromkeys(n for r in results for n in r.get("notes") or ()))


def edge_summary(results):
    """[{"method", "parameter", "side", "folds"}]: for each method and parameter, the folds whose
    chosen point sits at the same edge of its grid (a fold evaluated by an earlier version, without
    ``edges``, counts as none)."""
    out = {}
    for r in results:
        for e in r.get("edges") or ():
            key = (r["method"], e["parameter"], e["side"])
            out.setdefault(key, []).append(r["fold"])
    return [{"method": m, "parameter": p, "side": side, "folds": folds} for (m, p, side), folds in out.items()]


def edge_lines(edges):
    """cv's closing lines on grid edges, e.g. "gamma at its upper edge on folds 1, 3, 5 (nystroem)"."""
    return [f"{e['parameter']} at its {'upper' if e['side'] == 'largest' else 'lower'} edge on "
            f"fold{'s' if len(e['folds']) > 1 else ''} {', '.join(f.removeprefix('Fold') for f in e['folds'])} "
            f"({e['method']}): its best value may lie beyond the grid; the lines above say how to extend it"
            for e in edges]


def fold_works(fold_list, methods, axes, open_data):
    """{fold: {method: (expected work, grid points)}} of every fold's grids
    (:func:`streamrank.workflow.grid.configuration_work`, from each training set's rows and
    features), for cv's bar over all of them."""
    out = {}
    for name, paths in fold_list:
        with open_data(paths["train"]) as ds:
            rows, d = int(ds.n_rows), int(ds.n_features)
        out[name] = {}
        for method in methods:
            cfgs = configurations(method_axes(axes, method))
            out[name][method] = (sum(configuration_work(c, rows, d) for c in cfgs),
                                 sum(configuration_points(c) for c in cfgs))
    return out


def summary(record, run_dir=None):
    """cv's result as one JSON object (``cv --json``): every fold's row of the table under
    ``rows``, the mean and the standard deviation over folds (ddof = 1; None with one fold) per
    method under ``mean`` and ``std``, the settings that made them and where the run is."""
    metrics = [k for k, _ in METRICS]
    out = {"command": "cv", "folds_dir": record["folds_dir"], "methods": record["settings"]["methods"],
           "folds": record["settings"]["folds"], "select_metric": record["settings"]["select_metric"],
           "convention": record.get("convention", "letor4"), "notes": record.get("notes", []), "metrics": metrics,
           "rows": [r for r in record["table"] if r["fold"] not in ("mean", "std")], "mean": {}, "std": {}}
    for method in out["methods"]:
        for kind in ("mean", "std"):
            row = next((r for r in record["table"] if r["method"] == method and r["fold"] == kind), None)
            out[kind][method] = None if row is None else {k: row[k] for k in metrics}
    out["edges"] = record.get("edges", [])
    out["seconds"] = record["seconds"]
    out["continued"] = record["continued"]
    if run_dir is not None:
        out["run_dir"] = str(run_dir)
    return out


def table_rows(results, methods):
    """The papers' table: per method, one row per fold, then the mean and the std over folds."""
    rows = []
    for method in methods:
        mine = [r for r in results if r["method"] == method]
        for r in mine:
            rows.append({"method": method, "fold": r["fold"], **{k: r["means"][k] for k, _ in METRICS},
                         "chosen": point_text(r["chosen"])})
        vals = np.array([[r["means"][k] for k, _ in METRICS] for r in mine])
        rows.append({"method": method, "fold": "mean", **dict(zip((k for k, _ in METRICS), vals.mean(0).tolist()))})
        if len(mine) > 1:
            rows.append({"method": method, "fold": "std",
                         **dict(zip((k for k, _ in METRICS), vals.std(0, ddof=1).tolist()))})
    return rows


def table_columns():
    return [("method", "method", None), ("fold", "fold", None)] + \
        [(k, t, "{:.4f}") for k, t in METRICS] + [("chosen", "chosen on vali", None)]


def table_lines(record):
    """The cv table as people read it: per method, its folds, their mean and std."""
    lines = []
    for method in record["settings"]["methods"]:
        rows = [r for r in record["table"] if r["method"] == method]
        lines.append(f"{method}:")
        lines += ["  " + line for line in text_table(rows, table_columns()[1:])]
    return lines
