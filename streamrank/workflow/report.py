"""``streamrank report RUN_DIR -o report.html``: one static, self-contained page of a grid or cv run.

The page holds the run's command and settings, the data's fingerprints, its tables and its plots
(PNG images inlined as data URIs): it needs no network and no other file to be viewed, and can be
mailed or archived as it is. Everything comes from the run directory's JSON records.
"""

import base64
import datetime
import html
import sys
from pathlib import Path

from streamrank._version import __version__
from streamrank.errors import InputError
from streamrank.io.atomic import check_not_input, reading, write_atomically
from streamrank.workflow.rundir import read_json

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td.l, th.l { text-align: left; }
tr.chosen td { background: #fff6d5; font-weight: 600; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { color: #555; font-size: 12px; } code { background: #f5f5f5; padding: 0 3px; }
"""


def load_run(run_dir):
    """(kind, record) of the run in ``run_dir``: its grid.json or cv.json."""
    run_dir = Path(run_dir)
    for kind, name in (("cv", "cv.json"), ("grid", "grid.json")):
        rec = read_json(run_dir / name, kind=f"streamrank-{kind}")
        if rec is not None:
            return kind, rec
    raise InputError(f"{run_dir}: holds no finished grid or cv run (no grid.json or cv.json); run streamrank grid "
                     f"or streamrank cv into it first (a killed run: rerun the same command to finish it)")


def write_report(run_dir, output, *, plots=True, png_dir=None):
    """Write the report of ``run_dir`` to ``output`` (atomically; "-": standard output); with ``png_dir``, each plot
    also as a PNG file there. Returns the number of plots."""
    run_dir = Path(run_dir)
    with reading(*((p, f"record {p.relative_to(run_dir)}") for p in run_records(run_dir))):
        if str(output) != "-":
            check_not_input(output, "report")
        if png_dir is not None:
            check_not_input(png_dir, "PNG folder")
        return _write_report(run_dir, output, plots=plots, png_dir=png_dir)


def run_records(run_dir):
    """The JSON records of ``run_dir`` a report reads (its inputs)."""
    run_dir = Path(run_dir)
    return [p for p in [run_dir / "cv.json", run_dir / "grid.json", *sorted(run_dir.glob("*/*/grid.json"))]
            if p.is_file()]


def _write_report(run_dir, output, *, plots, png_dir):
    kind, rec = load_run(run_dir)
    figures = []
    if plots:
        from streamrank.workflow.plots import all_plots
        figures += [(name, png, None) for name, png in all_plots(rec)]
        if kind == "cv":  # the first fold's grids show how each method was tuned
            fold = rec["results"][0]["fold"]
            for m in rec["settings"]["methods"]:
                g = read_json(run_dir / fold / m / "grid.json", kind="streamrank-grid")
                if g is not None:
                    figures += [(f"{fold}-{m}-{name}", png, f"{fold}, {m}") for name, png in all_plots(g)
                                if name in ("convergence", "heatmap")]
    # one PNG file per figure: a name taken twice (a fold or method named like another's plot)
    # gets a suffix, so the count said is the count written
    seen = {}
    for i, (name, png, where) in enumerate(figures):
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            figures[i] = (f"{name}-{seen[name]}", png, where)
    if png_dir is not None:
        for name, _, _ in figures:  # all refused before the first is written
            check_not_input(Path(png_dir) / f"{name}.png", "PNG folder", within=png_dir)
        Path(png_dir).mkdir(parents=True, exist_ok=True)
        for name, png, _ in figures:
            write_atomically(Path(png_dir) / f"{name}.png", png)
    body = (_grid_body(rec) if kind == "grid" else _cv_body(rec)) + _figures(figures)
    page = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>streamrank {kind} report: {html.escape(run_dir.name)}</title><style>{STYLE}</style></head>"
            f"<body><h1>streamrank {kind} report: <code>{html.escape(str(run_dir))}</code></h1>{body}"
            f"<p><small>written by streamrank {__version__} on "
            f"{datetime.datetime.now().isoformat(timespec='seconds')} from {kind}.json</small></p></body></html>\n")
    if str(output) == "-":
        sys.stdout.write(page)
        sys.stdout.flush()
    else:
        write_atomically(output, page, special_ok=True)
    return len(figures)


def _table(rows, columns, chosen=None):
    """An HTML table of ``rows`` (dicts) under ``columns`` [(key, title, fmt)]; row ``chosen`` marked."""
    from streamrank.workflow.tables import cell
    head = "".join(f"<th class=\"{'l' if i == 0 else ''}\">{html.escape(t)}</th>"
                   for i, (_, t, _) in enumerate(columns))
    out = [f"<table><thead><tr>{head}</tr></thead><tbody>"]
    for n, r in enumerate(rows):
        cells = "".join(f"<td class=\"{'l' if i == 0 else ''}\">{html.escape(cell(r.get(k), f))}</td>"
                        for i, (k, _, f) in enumerate(columns))
        mark = ' class="chosen"' if n == chosen else ""
        out.append(f"<tr{mark}>{cells}</tr>")
    return "".join(out) + "</tbody></table>"


def _settings(rec):
    s = rec["settings"]
    rows = [{"k": "command", "v": rec.get("command") or "-"},
            {"k": "chosen by", "v": f"validation {s['select_metric']}"}]
    for k, v in sorted(s.get("axes", {}).items()):
        rows.append({"k": f"grid: {k}", "v": ", ".join(map(str, v)) if isinstance(v, list) else str(v)})
    if "methods" in s:
        rows.append({"k": "methods", "v": ", ".join(s["methods"])})
    for k, v in sorted(s["settings"].items()):
        rows.append({"k": k, "v": "-" if v is None else str(v)})
    return "<h2>Settings</h2>" + _table(rows, [("k", "setting", None), ("v", "value", None)])


def _notes(rec):
    """The run's notes on its metrics' convention (letor4 beyond labels 0-2), as ``eval`` words them."""
    from streamrank.evaluation.metrics import convention_line
    lines = [convention_line(rec.get("convention", "letor4"))] + [f"note: {n}" for n in rec.get("notes") or ()]
    return "".join(f"<p class=\"note\">{html.escape(line)}</p>" for line in lines)


def _data(items):
    rows = [dict(d, part=p) for p, d in items]
    return "<h2>Data</h2>" + _table(rows, [("part", "part", None), ("name", "file", None), ("rows", "rows", None),
                                           ("queries", "queries", None), ("features", "features", None),
                                           ("fingerprint", "content sha256", None)])


def _grid_body(rec):
    from streamrank.workflow.grid import CANDIDATE_COLUMNS, candidates_table
    from streamrank.workflow.tables import chosen_point, grid_columns, point_text
    metric = rec["select_metric"]
    c = rec["chosen"]
    out = [f"<p>Chosen: <b>{html.escape(c['label'])}</b> ({html.escape(point_text(c))}), validation {metric} "
           f"<b>{c['valid_' + metric]:.4f}</b> ({rec.get('convention', 'letor4')}), in {rec['seconds']:.1f} s. "
           f"Model: <code>model.h5</code>.</p>" + _notes(rec)]
    out.append(_settings(rec))
    out.append(_data(rec["data"].items()))
    rows = [dict(chosen_point(r, metric), iterations=r["summary"].get("iterations"), passes=r["summary"].get("passes"))
            for r in rec["configs"]]
    out.append("<h2>Configurations (each one's chosen point)</h2>" + _table(rows, grid_columns(metric), rec["best"]))
    cands = candidates_table(rec)
    cols = [(k, k, "{:.6g}" if k not in ("config", "method", "loss", "message", "components", "iterations",
                                          "cg_steps") else None)
            for k in CANDIDATE_COLUMNS + ("passes", "seconds") if any(r.get(k) is not None for r in cands)]
    out.append(f"<h2>Every candidate ({len(cands)})</h2>" + _table(cands, cols))
    return "".join(out)


def _cv_body(rec):
    from streamrank.workflow.cv import table_columns
    out = [f"<p>{len(rec['settings']['folds'])} folds of <code>{html.escape(rec['folds_dir'])}</code>, methods "
           f"{html.escape(', '.join(rec['settings']['methods']))}: per fold a grid on train chosen on vali by "
           f"{rec['settings']['select_metric']}, evaluated on test ({rec.get('convention', 'letor4')}); "
           f"{rec['seconds']:.1f} s.</p>" + _notes(rec)]
    out.append("<h2>Test metrics per fold, mean and std over folds</h2>" + _table(rec["table"], table_columns()))
    out.append(_settings(rec))
    data = [(f"{r['fold']} test", {"name": r["test"]["name"], "fingerprint": r["test"]["fingerprint"]})
            for r in rec["results"] if r["method"] == rec["settings"]["methods"][0]]
    out.append(_data(data))
    return "".join(out)


def _figures(figures):
    if not figures:
        return ""
    out = ["<h2>Plots</h2>"]
    for name, png, where in figures:
        src = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        title = name.replace("_", " ") if where is None else f"{where}: {name.split('-')[-1].replace('_', ' ')}"
        out.append(f"<figure id=\"{html.escape(name)}\"><img src=\"{src}\" alt=\"{html.escape(title)}\">"
                   f"<figcaption>{html.escape(title)}</figcaption></figure>")
    return "".join(out)
