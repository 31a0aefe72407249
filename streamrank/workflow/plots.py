"""The plots of a run (matplotlib, the ``plot`` extra), each a function of a run record returning
PNG bytes, or None when the record has nothing to show:

- :func:`convergence`: the chosen configuration's path, every C: the relative objective gap
  (f - f_final) / |f_final| against solver time and against passes over the training data, ||g||
  and the validation score against passes (paper 004's figures plot the gap against time);
- :func:`heatmap`: validation score over C x gamma (or lambda x gamma) of each configuration
  with more than one gamma;
- :func:`query_distribution`: the distribution of per-query NDCG@10 (validation for a grid, test
  for cv, pooled over folds);
- :func:`fold_comparison`: cv's methods side by side, fold by fold.

Figures are drawn on :class:`matplotlib.figure.Figure` objects without pyplot, so no display or
GUI backend is involved.
"""

import io

import numpy as np

from streamrank.errors import ParameterError
from streamrank.workflow.tables import number

DPI = 110
# entries of a legend at most (a long path's lines are coloured in order between them)
MAX_LEGEND = 12
METRIC_NAMES = {"meanndcg": "MeanNDCG", "ndcg@10": "NDCG@10", "map": "MAP", "avgndcg": "AvgNDCG",
                "avgprec": "AvgPrec"}


def _figure(w, h):
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ParameterError("plots need matplotlib: pip install 'streamrank[plot]' (or leave the plots out: "
                             "use plots=False)") from None
    return Figure(figsize=(w, h), dpi=DPI, layout="constrained")


def _png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _chosen_config(record):
    if record.get("format") == "streamrank-grid":
        return record["configs"][record["best"]], record["select_metric"]
    return None, None


def convergence(record):
    """Four panels of the chosen configuration's path (grid records only)."""
    cfg, metric = _chosen_config(record)
    if cfg is None:
        return None
    cands = cfg["summary"]["candidates"]
    traced = [c for c in cands if c.get("trace")]
    if not traced:
        return None
    fig = _figure(11.5, 7)
    axes = fig.subplots(2, 2)
    colors = _colors(len(traced))
    offset = 0.0
    vname = METRIC_NAMES.get(metric, metric)
    for c, color in zip(traced, colors):
        tr = np.array([[np.nan if v is None else v for v in row] for row in c["trace"]], float)
        sec, passes, f, g, val = offset + tr[:, 1], tr[:, 2], tr[:, 3], tr[:, 4], tr[:, 5]
        offset = sec[-1]
        label = (f"C={number(c['C'], min_exp=0)}" if c.get("C") is not None else f"lambda={c.get('lambda'):g}") + \
            (f", gamma={number(c['gamma'], min_exp=0)}" if c.get("gamma") is not None else "")
        # the gap to the point's own final objective; the final iterate itself (gap 0) is left out
        gap = (f - f[-1]) / max(abs(f[-1]), np.finfo(float).tiny)
        keep = gap > 0
        axes[0, 0].semilogy(sec[keep], gap[keep], "o-", ms=3, color=color, label=label)
        axes[0, 1].semilogy(passes[keep], gap[keep], "o-", ms=3, color=color, label=label)
        axes[1, 0].semilogy(passes, g, "o-", ms=3, color=color, label=label)
        if np.isfinite(val).any():
            axes[1, 1].plot(passes, val, "o-", ms=3, color=color, label=label)
    axes[0, 0].set(xlabel="solver time along the path (s)", ylabel="relative objective gap (f - f_final) / f_final",
                   title="objective gap against time")
    axes[0, 1].set(xlabel="passes over the training data", ylabel="relative objective gap (f - f_final) / f_final",
                   title="objective gap against passes")
    axes[1, 0].set(xlabel="passes over the training data", ylabel="gradient norm ||g||", title="gradient norm")
    axes[1, 1].set(xlabel="passes over the training data", ylabel=f"validation {vname}", title=f"validation {vname}")
    for ax in axes.flat:
        ax.grid(True, alpha=0.3)
    # one legend beside the panels; a long path shows every k-th point's entry (the colours run in
    # path order, so the rest lie between them)
    handles, labels = axes[0, 1].get_legend_handles_labels()
    pick = np.unique(np.linspace(0, len(handles) - 1, min(len(handles), MAX_LEGEND)).round().astype(int))
    fig.legend([handles[i] for i in pick], [labels[i] for i in pick], loc="outside right upper", fontsize=7,
               title="points (path order)" if len(pick) == len(handles) else f"{len(pick)} of {len(handles)} points",
               title_fontsize=7)
    fig.suptitle(f"convergence of {cfg['label']}: one line per point of its path (warm-started)")
    return _png(fig)


def heatmap(record):
    """Validation score over the inner grid of every configuration with several gammas (grid records)."""
    if record.get("format") != "streamrank-grid":
        return None
    metric = record["select_metric"]
    vname = METRIC_NAMES.get(metric, metric)
    panels = []
    for r in record["configs"]:
        cands = r["summary"]["candidates"]
        key = "lambda" if r["config"]["method"] == "clsr" else "C"
        gammas = sorted({c["gamma"] for c in cands if c.get("gamma") is not None})
        cs = sorted({c[key] for c in cands})
        if len(gammas) > 1 or (len(gammas) == 1 and len(cs) > 1):
            grid = np.full((len(gammas), len(cs)), np.nan)
            for c in cands:
                grid[gammas.index(c["gamma"]), cs.index(c[key])] = c.get("valid_" + metric, np.nan)
            panels.append((r["label"], key, cs, gammas, grid))
    if not panels:
        return None
    fig = _figure(min(5.5 * len(panels), 16), 4.2)
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    for ax, (label, key, cs, gammas, grid) in zip(axes, panels):
        im = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
        ax.set_xticks(range(len(cs)), [number(c, min_exp=0) if key == "C" else f"{c:.0e}" for c in cs], rotation=45,
                      fontsize=7)
        ax.set_yticks(range(len(gammas)), [number(g, min_exp=0) for g in gammas], fontsize=7)
        ax.set(xlabel=f"{key} (loss weight)" if key == "C" else "lambda (penalty)", ylabel="gamma (kernel width)",
               title=label)
        best = np.unravel_index(np.nanargmax(grid), grid.shape)
        ax.plot(best[1], best[0], "r*", ms=12, label="best")
        ax.legend(fontsize=7, loc="upper right")
        fig.colorbar(im, ax=ax, label=f"validation {vname}")
    fig.suptitle(f"validation {vname} over the grid (red star: the best point)")
    return _png(fig)


def query_distribution(record):
    """Per-query NDCG@10: validation (grid) or test (cv, per method, folds pooled)."""
    series, where = [], ""
    if record.get("format") == "streamrank-grid" and record.get("valid_per_query"):
        series.append(("chosen model", record["valid_per_query"]["ndcg@10"]))
        where = "validation"
    elif record.get("format") == "streamrank-cv":
        for m in record["settings"]["methods"]:
            vals = [v for r in record["results"] if r["method"] == m
                    for v in (r.get("per_query") or {}).get("ndcg@10", ())]
            series.append((m, vals))
        where = "test, all folds"
    # a query the metric skips (None) is left out; a method without any query left has no line
    series = [(name, v) for name, vals in series if (v := np.array([x for x in vals if x is not None], float)).size]
    if not series:
        return None
    fig = _figure(8, 4)
    ax = fig.subplots()
    bins = np.linspace(0, 1, 21)
    for (name, v), color in zip(series, _colors(len(series))):
        ax.hist(v, bins=bins, histtype="step", lw=2, color=color,
                label=f"{name}: {len(v)} queries, mean {v.mean():.4f}, {np.mean(v == 0):.0%} at 0")
    ax.set(xlabel="NDCG@10 of a query (letor4)", ylabel="number of queries",
           title=f"per-query NDCG@10 ({where}); queries without a relevant document are left out")
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)
    return _png(fig)


def fold_comparison(record, metrics=("NDCG@10", "MAP", "MeanNDCG")):
    """cv: each metric per fold, the methods' bars side by side (cv records only)."""
    if record.get("format") != "streamrank-cv":
        return None
    methods = record["settings"]["methods"]
    folds = [f for f in dict.fromkeys(r["fold"] for r in record["table"]) if f not in ("mean", "std")]
    fig = _figure(4.2 * len(metrics), 3.8)
    axes = np.atleast_1d(fig.subplots(1, len(metrics)))
    width = 0.8 / len(methods)
    for ax, metric in zip(axes, metrics):
        for j, (m, color) in enumerate(zip(methods, _colors(len(methods)))):
            vals = [next(r[metric] for r in record["table"] if r["method"] == m and r["fold"] == f) for f in folds]
            ax.bar(np.arange(len(folds)) + (j - (len(methods) - 1) / 2) * width, vals, width, color=color, label=m)
        ax.set_xticks(range(len(folds)), folds)
        ax.set(xlabel="fold", ylabel=f"test {metric} (letor4)", title=metric)
        lo = min(r[metric] for r in record["table"] if r["fold"] in folds)
        ax.set_ylim(max(0.0, lo - 0.05), None)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("methods side by side, fold by fold (chosen on vali, evaluated on test)")
    return _png(fig)


def _colors(n):
    from matplotlib import colormaps
    cmap = colormaps["viridis" if n > 10 else "tab10"]
    return [cmap(i / max(n - 1, 1)) if n > 10 else cmap(i) for i in range(n)]


PLOTS = (("convergence", convergence), ("heatmap", heatmap), ("query_distribution", query_distribution),
         ("fold_comparison", fold_comparison))


def all_plots(record):
    """[(name, PNG bytes)] of every plot the record has something for."""
    return [(name, png) for name, fn in PLOTS if (png := fn(record)) is not None]
