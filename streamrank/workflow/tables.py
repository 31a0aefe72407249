"""Tables of a run for people (aligned text), for documents (markdown) and for programs (CSV)."""

import csv
import io
import math
from pathlib import Path


def cell(v, fmt=None):
    """One value as text: floats in ``fmt`` (default: :func:`number`), None as "-"."""
    if v is None:
        return "-"
    if fmt is not None and not isinstance(v, str):
        return fmt.format(v)
    if isinstance(v, float):
        return number(v)
    return str(v)


def number(v, min_exp=3):
    """A float in 4 significant digits, or as 2^k when it is a power of two with |k| >= ``min_exp``
    (grids are written in powers of two: 2^-5 reads better than 0.03125)."""
    k = math.log2(v) if v > 0 else 0.5
    if k.is_integer() and abs(k) >= min_exp:
        return f"2^{int(k)}"
    return f"{v:.4g}"


def point_text(point, sep=", "):
    """A candidate's hyper-parameters, e.g. "components=500, gamma=2^-7, C=4", its pair weights
    first where they are not plain ("pair_cost=graded, query_weight=log_ratio, C=2^-4")."""
    return sep.join(f"{k}={cell(point[k])}" for k in ("pair_cost", "query_weight", "components", "gamma", "C",
                                                       "lambda", "eta")
                    if point.get(k) is not None and not (k in ("pair_cost", "query_weight") and point[k] == "none"))


def text_table(rows, columns):
    """``rows`` (dicts) under ``columns`` [(key, title, fmt or None)] as aligned lines."""
    body = [[cell(r.get(k), f) for k, _, f in columns] for r in rows]
    heads = [t for _, t, _ in columns]
    widths = [max([len(h)] + [len(b[i]) for b in body]) for i, h in enumerate(heads)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(b, widths)) for b in body]
    return lines


def markdown_table(rows, columns):
    """The same table in markdown."""
    lines = ["| " + " | ".join(t for _, t, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(k), f) for k, _, f in columns) + " |" for r in rows]
    return lines


def csv_text(rows, columns):
    """The same table as CSV with full precision (keys as headers; floats as repr)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([k for k, _, _ in columns])
    for r in rows:
        w.writerow(["" if r.get(k) is None else repr(r[k]) if isinstance(r.get(k), float) else r[k]
                    for k, _, _ in columns])
    return out.getvalue()


def chosen_point(result, select_metric):
    """The candidate a configuration's training chose (its hyper-parameters and validation score)."""
    s = result["summary"]
    key = "lambda" if result["config"]["method"] == "clsr" else "C"
    for c in s["candidates"]:
        if c.get(key) == s.get(key) and c.get("gamma") == s.get("gamma"):
            cfg = result["config"]
            return dict(c, method=cfg["method"], components=cfg["components"], loss=cfg["loss"],
                        pair_cost=cfg.get("pair_cost"), query_weight=cfg.get("query_weight"), label=result["label"])
    raise AssertionError(f"{result['label']}: the chosen point is not among its candidates")


def metric_notes(record):
    """The lines a run's printed metrics come with: their convention and its notes (letor4 beyond
    labels 0-2), the words ``eval`` prints."""
    from streamrank.evaluation.metrics import convention_line
    return [convention_line(record.get("convention", "letor4"))] + [f"note: {n}" for n in record.get("notes") or ()]


def grid_columns(select_metric):
    return [("label", "configuration", None), ("gamma", "gamma", None), ("C", "C", None),
            ("lambda", "lambda", None), ("valid_" + select_metric, f"valid {select_metric}", "{:.4f}"),
            ("objective", "objective", "{:.6e}"), ("iterations", "iterations", None), ("passes", "passes", None)]


def grid_lines(record, run_dir):
    """What ``streamrank grid`` prints: each configuration's chosen point, and the grid's choice."""
    metric = record["select_metric"]
    rows = []
    for r in record["configs"]:
        p = chosen_point(r, metric)
        rows.append(dict(p, iterations=r["summary"].get("iterations"), passes=r["summary"].get("passes")))
    cols = [c for c in grid_columns(metric) if any(row.get(c[0]) is not None for row in rows)]
    best = record["chosen"]
    n = sum(len(r["summary"]["candidates"]) for r in record["configs"])
    return (text_table(rows, cols) + metric_notes(record) +
            [f"chosen: {best['label']} ({point_text(best)}), valid {metric} {best['valid_' + metric]:.4f}, "
             f"of {n} candidates in {record['seconds']:.1f} s; model {Path(run_dir) / 'model.h5'}, "
             f"every candidate in {Path(run_dir) / 'grid.json'}"])
