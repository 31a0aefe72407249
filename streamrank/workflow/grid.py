"""``streamrank grid``: a search over methods and their hyper-parameters, chosen on validation data.

The grid is the product of the *outer* axes (method, loss, components, eta), each combination a
*configuration*, and inside each configuration the training path of :mod:`streamrank.training.path`
over (gamma x C), or CLSRRank's (gamma x lambda): one map (one feature or kernel cache) per gamma
shared by all its C values, C in increasing order with warm starts. An axis that does not apply
to a method (components for primal, C for clsr, eta for the squared hinge) collapses to one value
for it; an axis given that applies to none of the chosen methods is refused.

A run directory holds one folder per configuration (its path checkpoint, its chosen model and a
``result.json`` written last), so a killed grid rerun with the same command keeps the finished
configurations and resumes the one it stopped in at its last checkpoint (at most a second of
solver work before: :func:`streamrank.training.path.checkpoints_every`), ending with the
candidates and model of an uninterrupted run. The best configuration (first of equals, in grid
order) by the validation metric gives ``model.h5``; ``grid.json`` records every candidate.
"""

import itertools
import logging
import shutil
import time
from pathlib import Path

from streamrank import settings as settings_table
from streamrank.errors import ParameterError
from streamrank.execution.progress import bar
from streamrank.io.atomic import check_no_input_inside, check_not_input, reading, write_atomically, written
from streamrank.settings import DEFAULT_MEMORY_BUDGET
from streamrank.training.path import values_text
from streamrank.workflow.rundir import open_run, read_json, write_json
from streamrank.workflow.tables import chosen_point, csv_text

log = logging.getLogger("streamrank.workflow.grid")

GRID_FORMAT = "streamrank-grid"
GRID_VERSION = 1
METHODS = settings_table.METHODS
KERNEL_METHODS = settings_table.KERNELS
# which axes apply to which methods: the settings table's
APPLIES = {name: settings_table.TABLE[name].methods
           for name in ("C", "gamma", "lam", "components", "loss", "eta", "pair_cost", "query_weight")}
# the pair weights of RankSVM configurations (paper 001, eq. 1: lambda per label pair, mu per query):
# the default search tries each configuration plain and with paper 001's cost-sensitive setting
# and keeps the latter unless validation says otherwise beyond its noise (keep_cost_sensitive;
# docs/methods.md, "Cost-sensitive defaults"); a given pair_cost or query_weight is the one
# setting of every configuration
COSTS = ("pair_cost", "query_weight")
PLAIN = {"pair_cost": "none", "query_weight": "none"}
COST_SENSITIVE = {"pair_cost": "graded", "query_weight": "log_ratio"}

# The default grids (docs/methods.md, "Default grids"): those behind the README's MQ2008 table
# (tools/bench_kernel_approx.py --mq2008-table, tools/bench_papers.py --clsr). A kernel method's
# gamma grid is not fixed: it follows the data (DEFAULT_GAMMA_OFFSETS).
DEFAULT_GRIDS = {
    "primal": {"C": [2.0 ** k for k in range(-16, 5, 2)]},
    "nystroem": {"components": [500, 2000], "C": [2.0 ** k for k in range(-12, 3, 2)]},
    "rff": {"components": [500, 2000], "C": [2.0 ** k for k in range(-12, 3, 2)]},
    "exact": {"C": [2.0 ** k for k in range(-8, 3, 2)]},
    "clsr": {"components": [2000], "lam": [10.0 ** k for k in range(-12, -2)]},
}

# A kernel method's default gamma grid is anchor * 2^k for k in these offsets, where the anchor is
# scikit-learn's gamma='scale' = 1 / (d Var X) of the training rows as the kernel sees them (after
# --normalize; Var X over all their values) rounded to a power of two, so that the grid is written
# in --gamma's 2^k grammar and a grid edge can be extended in it. Var X makes gamma ||x - y||^2 of
# order one whatever the features' units (raw LETOR features reach 1e4). Ranking prefers wider
# kernels than that: the offsets reach anchor x 2^-9 (CLSRRank and exact 2^-11), and every gamma chosen
# on the MQ2008 folds and on generated raw-scale folds (tools/bench_raw_scale.py) lies inside the grid
# or on its edge (docs/methods.md, "Default grids": exact's top offset, -1, was never chosen and cost
# more than half of its grid's time).
DEFAULT_GAMMA_OFFSETS = {"nystroem": (-9, -7, -5, -3, -1), "rff": (-9, -7, -5, -3, -1),
                         "exact": (-11, -9, -7, -5, -3), "clsr": (-11, -9, -7, -5, -3, -1)}


def gamma_anchor(gamma_scale):
    """The power of two nearest to ``gamma_scale`` in log2 (halves round up): 2^round(log2 g)."""
    import math
    return 2.0 ** math.floor(math.log2(gamma_scale) + 0.5)


def default_gamma_grid(method, anchor):
    """The default gamma grid of ``method`` on data whose gamma anchor is ``anchor``."""
    return [anchor * 2.0 ** k for k in DEFAULT_GAMMA_OFFSETS[method]]


def data_gamma_scale(ds, settings, executor=None):
    """The facts of the default gamma grids on training data ``ds``: Var X of its rows after
    ``settings['normalize']`` (over the columns of ``settings['features']``), gamma='scale' =
    1 / (d Var X) and its anchor; one streamed pass in blocks of the exact path's raw share of
    the budget (memory_plan.raw_block_bytes). Constant data (Var X = 0) falls back to 1 / d."""
    from streamrank.features.kernels import default_gamma
    from streamrank.training.memory_plan import raw_block_bytes
    from streamrank.training.problem import kernel_value_variance, with_features
    from streamrank.units import budget_bytes
    data, _, _, _ = with_features(ds, None, settings.get("features"))
    normalize = settings.get("normalize") or "none"
    var = kernel_value_variance(data, normalize, executor=executor,
                                block_bytes=raw_block_bytes(
                                    budget_bytes(settings.get("memory_budget") or DEFAULT_MEMORY_BUDGET), data))
    d = data.n_features
    g = default_gamma(d, var)
    out = {"normalize": normalize, "n_features": int(d), "value_var": var, "gamma_scale": g, "anchor": gamma_anchor(g)}
    if not var > 0:
        out["fallback"] = "every feature value is the same (Var X = 0): gamma='scale' is undefined; 1 / n_features"
    return out


def cost_options(axes):
    """The pair weights a RankSVM configuration of ``axes`` takes, as dicts of pair_cost and
    query_weight: those given (the other at its default), else plain and paper 001's (COSTS)."""
    given = {k: axes[k] for k in COSTS if axes.get(k) is not None}
    return [dict(PLAIN, **given)] if given else [dict(PLAIN), dict(COST_SENSITIVE)]


def costs_into_axes(axes, settings):
    """(axes, settings) with pair_cost and query_weight moved from ``settings`` (the API's way to
    give them) into ``axes`` (the grid's), where each configuration takes them."""
    moved = {k: settings[k] for k in COSTS if settings.get(k) is not None}
    return dict(axes, **moved), {k: v for k, v in settings.items() if k not in COSTS}


def configurations(axes, anchor=None):
    """The configurations of ``axes`` (name -> list or None; pair_cost and query_weight one value
    or None), in grid order: dicts of method, loss, components, eta, pair_cost, query_weight
    (:func:`cost_options`) and the inner lists C, gamma, lam (None where an axis does not apply),
    each with a ``label`` naming its folder. Unset axes take the method's default grid; an unset gamma
    of a kernel method is marked ``gamma_default`` and is the data's grid around ``anchor``
    (:func:`default_gamma_grid`; None before the data are read: gamma None then)."""
    methods = list(axes.get("method") or ["primal"])
    for m in methods:
        if m not in METHODS:
            raise ParameterError(f"method must be among {', '.join(METHODS)}; got {m!r}. Use method=primal")
    for name, applies in APPLIES.items():  # the pair weights: one value, ignored where they do not apply
        if axes.get(name) is not None and name not in COSTS and not any(m in applies for m in methods):
            raise ParameterError(f"{name} applies to method {' or '.join(applies)}, not to "
                                 f"{', '.join(methods)}; drop {name} or use method={applies[0]}")
    if axes.get("eta") is not None and "smooth_hinge" not in (axes.get("loss") or []):
        raise ParameterError("eta is the smooth hinge's band; use loss=smooth_hinge")
    out = []
    for m in methods:
        # bound per method: values() is called within this iteration only
        def values(name, fallback, m=m, default=DEFAULT_GRIDS[m]):
            if m not in APPLIES[name]:
                return [None]
            v = axes.get(name)
            return list(v) if v is not None else list(default.get(name, fallback))

        for loss, comp in itertools.product(values("loss", ["squared_hinge"]), values("components", [None])):
            etas = values("eta", [None]) if loss == "smooth_hinge" else [None]
            for eta, costs in itertools.product(etas, cost_options(axes) if m in APPLIES["pair_cost"] else [{}]):
                cfg = {"method": m, "loss": loss, "components": comp, "eta": eta,
                       **{k: costs.get(k) for k in COSTS}}
                for name, fallback in (("C", [1.0]), ("gamma", [None]), ("lam", [1e-3])):  # the path's own axes
                    v = values(name, fallback)
                    cfg[name] = None if v == [None] else v
                if m in KERNEL_METHODS and axes.get("gamma") is None:
                    cfg["gamma"] = None if anchor is None else default_gamma_grid(m, anchor)
                    cfg["gamma_default"] = True
                cfg["label"] = _label(cfg, len(out))
                out.append(cfg)
    return out


def cost_sensitive(cfg):
    """Whether configuration (or chosen point) ``cfg`` weighs pairs by paper 001's setting."""
    return all(cfg.get(k) == v for k, v in COST_SENSITIVE.items())


def _label(cfg, k):
    parts = [f"{k:02d}", cfg["method"]]
    if cfg["components"] is not None:
        parts.append(f"m{cfg['components']}")
    if cfg["loss"] not in (None, "squared_hinge"):
        parts.append(cfg["loss"])
    if cfg["eta"] is not None:
        parts.append(f"eta{cfg['eta']}")
    if cost_sensitive(cfg):
        parts.append("cs")
    return "-".join(str(p) for p in parts)


# what a run directory of a grid holds, beside one folder per configuration under runs/
RUN_FILES = ("settings.json", "grid.json", "candidates.csv", "model.h5")
CONFIG_FILES = ("model.h5", "result.json")


def run_outputs(run_dir, axes):
    """(files, trees) a grid of ``axes`` writes into ``run_dir``: the files it creates or replaces,
    and the folders it fills and then deletes (each configuration's checkpoint). None of them may
    be an input; the run directory itself may hold inputs."""
    run_dir = Path(run_dir)
    files = [run_dir / name for name in RUN_FILES]
    trees = []
    for cfg in configurations(axes):
        folder = run_dir / "runs" / cfg["label"]
        files += [folder / name for name in CONFIG_FILES]
        trees.append(folder / "checkpoint")
    return files, trees


def check_run_outputs(run_dir, axes):
    """Refuse, before any work, a run directory whose writes would replace or delete an input of
    this process (:func:`streamrank.io.atomic.register_input`)."""
    files, trees = run_outputs(run_dir, axes)
    for f in files:
        check_not_input(f, "run directory", within=run_dir)
    for t in trees:
        check_no_input_inside(t, "checkpoint directory")


def _dataset_inputs(*pairs):
    """(path, what) of open datasets: the file read, and the text it was converted from (its name)."""
    out = []
    for ds, what in pairs:
        for p in {str(getattr(ds, "path", "")), str(getattr(ds, "name", ""))}:
            if p and Path(p).is_file():
                out.append((p, what))
    return out


def train_configuration(ds, valid, cfg, settings, *, select_metric, checkpoint=None, resume=False, executor=None):
    """(model, summary) of one configuration: the method's trainer over its inner path."""
    from streamrank.training.trainers import train
    if cfg.get("gamma_default") and cfg["gamma"] is None:
        raise AssertionError(f"{cfg['label']}: the default gamma grid needs the data's anchor "
                             f"(configurations(axes, anchor))")
    values = dict(settings, select_metric=select_metric, checkpoint=checkpoint, resume=resume,
                  **{k: cfg.get(k) for k in ("method", "loss", "eta", "gamma", "C", "lam") + COSTS})
    if cfg["components"] is not None:
        values["components"] = cfg["components"]
    return train(ds, values, valid=valid, executor=executor)


def run_grid(ds, valid, run_dir, *, axes, settings, select_metric="meanndcg", executor=None, command=None,
             neutral=("memory_budget", "cache_dir", "cache_size", "map_cache"), progress=None, where=None):
    """Run the grid of ``axes`` on open datasets ``ds`` (training) and ``valid`` into ``run_dir``;
    return the grid record (also written to ``run_dir/grid.json``; the chosen model is
    ``run_dir/model.h5``). ``settings``: the trainers' other keyword arguments (tol, normalize,
    kernel, memory_budget, ...), the same for every configuration. A rerun with the same
    arguments (those in ``neutral``, which change no result, may differ) continues a killed run.
    ``progress(work)``: told the work done (:func:`configuration_work`) as it is done, in place of
    the grid's own bar (cv's bar over every fold). The advice for a chosen point at a grid edge is
    logged once, for the chosen configuration, naming ``where`` (cv's fold) when given; the
    record's ``edges`` lists them."""
    if valid is None:
        raise ParameterError("a grid chooses on validation data; use valid=DATA")
    axes, settings = costs_into_axes(axes, settings)
    # its /row is read (and checked) by the chosen model's report: reading it here refuses a bad one before training
    _ = valid.row
    with reading(*_dataset_inputs((ds, "training data"), (valid, "validation data"))):
        check_run_outputs(run_dir, axes)
        return _run_grid(ds, valid, Path(run_dir), axes=axes, settings=settings, select_metric=select_metric,
                         executor=executor, command=command, neutral=neutral, progress=progress, where=where)


# Expected work of a configuration, for progress: each (gamma, C) point of a TRON path costs about
# PASSES_PER_POINT passes over the training rows, a pass rows x width (primal: the d features; a
# kernel map: its m columns and the d it maps from; exact: a row of Q, one value per training row).
# CLSRRank's pass per gamma accumulates rows x m^2 / 2 (its m x m system), its lambdas cost no
# pass. Only the ratios matter (a bar's ETA): they put a primal grid beside a Nystroem one.
PASSES_PER_POINT = 50


def configuration_work(cfg, n_rows, n_features):
    """The expected work of configuration ``cfg`` on ``n_rows`` training rows of ``n_features``
    (arbitrary units, see PASSES_PER_POINT)."""
    m = cfg["method"]
    gammas = len(DEFAULT_GAMMA_OFFSETS[m]) if cfg.get("gamma_default") else len(cfg["gamma"] or [None])
    if m == "clsr":
        comp = cfg["components"] or n_rows
        return gammas * n_rows * comp * comp / 2.0
    width = {"primal": n_features, "exact": n_rows}.get(m, (cfg["components"] or 0) + n_features)
    return gammas * len(cfg["C"] or [None]) * PASSES_PER_POINT * float(n_rows) * width


def configuration_points(cfg):
    """The (gamma, C) or (gamma, lambda) points of ``cfg``."""
    gammas = len(DEFAULT_GAMMA_OFFSETS[cfg["method"]]) if cfg.get("gamma_default") else len(cfg["gamma"] or [None])
    return gammas * len(cfg["C"] or cfg["lam"] or [None])


class WorkBar:
    """A bar over grid points weighted by their expected work (:func:`configuration_work`): its
    total is the number of points, each configuration's share of it its share of the work, so the
    rate and the ETA count what is left, not how many configurations are (a Nystroem grid of 64
    points beside a primal one of 11). Uses only a bar's total, update and close."""

    def __init__(self, works, points, desc):
        total_work = float(sum(works))
        self.points = int(points)
        self.scale = self.points / total_work if total_work > 0 else 0.0
        self.bar = bar(self.points, desc, "point")
        self.done, self.shown = 0.0, 0

    def __call__(self, work):
        self.done += work
        n = min(self.points, int(self.done * self.scale + 1e-9))
        if n > self.shown:
            self.bar.update(n - self.shown)
            self.shown = n

    def close(self):
        if self.shown < self.points:
            self.bar.update(self.points - self.shown)
        self.bar.close()


def _run_grid(ds, valid, run_dir, *, axes, settings, select_metric, executor, command, neutral, progress, where):
    from streamrank.training.path import GRID_CHECKPOINT_SECONDS, checkpoints_every, edge_advice_off, on_points
    t0 = time.perf_counter()
    configs = configurations(axes)
    record_settings = {"axes": {k: v for k, v in axes.items() if v is not None},
                       "settings": {k: v for k, v in settings.items() if k not in neutral},
                       "select_metric": select_metric, "train": ds.fingerprint, "valid": valid.fingerprint}
    continued = open_run(run_dir, "grid", record_settings)
    if continued:
        log.info("grid: continuing the run in %s", run_dir)
    scale = None
    if any(c.get("gamma_default") for c in configs):
        scale = data_gamma_scale(ds, settings, executor)
        configs = configurations(axes, scale["anchor"])
        for m in dict.fromkeys(c["method"] for c in configs if c.get("gamma_default")):
            log.info("grid: %s's default gamma grid %s: gamma='scale' = 1 / (%d x Var X %.4g) = %.4g (normalize %s), "
                     "rounded to %s", m, values_text(default_gamma_grid(m, scale["anchor"])), scale["n_features"],
                     scale["value_var"], scale["gamma_scale"], scale["normalize"], values_text([scale["anchor"]]))
        if "fallback" in scale:
            log.warning("grid: %s", scale["fallback"])
    works = [configuration_work(c, ds.n_rows, ds.n_features) for c in configs]
    own = progress is None
    if own:
        progress = WorkBar(works, sum(configuration_points(c) for c in configs), "grid")
    results = []
    for k, cfg in enumerate(configs):
        folder = run_dir / "runs" / cfg["label"]
        done = read_json(folder / "result.json", kind=GRID_FORMAT + "-result")
        if done is not None and (folder / "model.h5").exists():
            log.info("grid: %s finished earlier (kept)", cfg["label"])
            results.append(done)
            progress(works[k])
            continue
        log.info("grid: configuration %d of %d: %s", k + 1, len(configs), describe(cfg))
        folder.mkdir(parents=True, exist_ok=True)
        ck = folder / "checkpoint"
        told = [0.0]
        per_point = works[k] / max(configuration_points(cfg), 1)

        def point_done(per_point=per_point, told=told):
            told[0] += per_point
            progress(per_point)
        with on_points(point_done), edge_advice_off(), checkpoints_every(GRID_CHECKPOINT_SECONDS):
            model, summary = train_configuration(ds, valid, cfg, settings, select_metric=select_metric,
                                                 checkpoint=ck, resume=ck.exists(), executor=executor)
        progress(max(0.0, works[k] - told[0]))  # points resumed from a checkpoint, CLSRRank's lambdas
        model.save(folder / "model.h5")
        res = {"format": GRID_FORMAT + "-result", "version": GRID_VERSION, "label": cfg["label"],
               "config": {k_: v for k_, v in cfg.items() if k_ != "label"}, "summary": summary}
        write_json(folder / "result.json", res)
        check_no_input_inside(ck, "checkpoint directory")
        shutil.rmtree(ck, ignore_errors=True)
        results.append(read_json(folder / "result.json"))  # as a rerun would see it (JSON round trip)
    if own:
        progress.close()
    best = choose(results, select_metric)
    best, cost_choice, reports = keep_cost_sensitive(results, best, run_dir, valid, select_metric, settings)
    edges = tell_edges(results[best], select_metric, where)
    from streamrank.state.model import load
    chosen_model = run_dir / "runs" / results[best]["label"] / "model.h5"
    with written(run_dir / "model.h5") as tmp:  # copied in pieces: an exact kernel's model holds its rows
        shutil.copyfile(chosen_model, tmp)
    rep = reports.get(best) or evaluate_model(load(chosen_model), valid, settings.get("memory_budget",
                                                                                        DEFAULT_MEMORY_BUDGET),
                                              settings.get("convention") or "letor4")
    record = {"format": GRID_FORMAT, "version": GRID_VERSION, "command": command, "select_metric": select_metric,
              "settings": dict(record_settings, settings=settings),
              "data": {"train": _data_info(ds), "valid": _data_info(valid)},
              "configs": results, "best": best, "chosen": chosen_point(results[best], select_metric),
              "convention": rep.convention, "notes": list(rep.notes), "valid_per_query": per_query(rep),
              "edges": edges, **({"cost_choice": cost_choice} if cost_choice else {}),
              "seconds": time.perf_counter() - t0, "continued": continued,
              **({"gamma_scale": scale} if scale is not None else {})}
    write_json(run_dir / "grid.json", record)
    rows = candidates_table(record)
    write_atomically(run_dir / "candidates.csv",
                     csv_text(rows, [(k, k, None) for k in CANDIDATE_COLUMNS if any(k in r for r in rows)]))
    return read_json(run_dir / "grid.json")


def tell_edges(result, select_metric, where=None):
    """Log the grid-edge advice of configuration ``result``'s chosen point, one warning per
    parameter at an edge, naming ``where`` (a fold), the method and the other settings of the
    point; return them as [{"parameter", "side"}] (side: smallest or largest)."""
    from streamrank.training.path import edge_advice
    from streamrank.workflow.tables import point_text
    s, method = result["summary"], result["config"]["method"]
    c_name = "lambda" if method == "clsr" else "C"
    grid = {k: sorted({c[k] for c in s["candidates"] if c.get(k) is not None}) for k in (c_name, "gamma")}
    point = chosen_point(result, select_metric)
    out = []
    for name, side, text in edge_advice(s, grid[c_name] or [None], grid["gamma"] or [None], c_name):
        others = point_text({k: v for k, v in point.items() if k != name})
        log.warning("%s%s%s: %s", f"{where}, " if where else "", method, f" ({others})" if others else "", text)
        out.append({"parameter": name, "side": side})
    return out


def evaluate_model(model, ds, memory_budget=DEFAULT_MEMORY_BUDGET, convention="letor4"):
    """The report of ``model`` on open dataset ``ds`` in the gain ``convention`` (scores in the
    input's row order)."""
    from streamrank.evaluation.metrics import evaluate
    from streamrank.training.problem import read_labels
    scores = model.predict_dataset(ds, memory_budget=memory_budget)
    qid = ds.query_ids if hasattr(type(ds), "query_ids") else ds.qid  # one id per query
    return evaluate(read_labels(ds), scores[ds.row], ds.query_ptr, convention=convention, qid=qid)


def per_query(rep):
    """Per-query NDCG@10 and AP of a report, in its display order (None where a query is skipped)."""
    rows = rep.to_dict(per_query=True)["per_query"]
    return {"qid": [r["qid"] for r in rows], "ndcg@10": [r["NDCG@10"] for r in rows], "map": [r["AP"] for r in rows]}


def choose(results, select_metric):
    """The index of the best configuration: its chosen candidate's validation score, the first of equals."""
    key = "valid_" + select_metric
    scores = [chosen_point(r, select_metric).get(key, float("-inf")) for r in results]
    return max(range(len(results)), key=lambda i: scores[i])


def per_query_metric(rep, select_metric):
    """The per-query values of ``select_metric`` in report ``rep`` (NaN where a query is skipped)."""
    return {"meanndcg": lambda: rep.mean_ndcg, "ndcg@10": lambda: rep.ndcg[:, list(rep.ks).index(10)],
            "map": lambda: rep.average_precision, "avgndcg": lambda: rep.avg_ndcg,
            "avgprec": lambda: rep.avg_precision}[select_metric]()


# the default search keeps paper 001's setting unless plain RankSVM is better on validation by
# more than this many standard errors of the per-query differences
COST_SE = 2.0


def keep_cost_sensitive(results, best, run_dir, valid, select_metric, settings):
    """(the configuration chosen, the record of the choice or None, {configuration: its validation
    report} of those it evaluated, so that the chosen one is not scored again). When the default search chose
    a plain configuration whose cost-sensitive twin (the same method, loss, components and eta with
    paper 001's setting) was tried, keep the twin unless the plain one is better on validation by
    more than COST_SE standard errors of the per-query differences of ``select_metric``
    (docs/methods.md, "Cost-sensitive defaults"): the paper's setting, which its experiments and
    tools/bench_quality.py found better, stays the default unless the validation queries say
    otherwise beyond their noise (on MQ2008 the two differ by 0.001-0.007 in MeanNDCG, within it)."""
    import numpy as np

    from streamrank.state.model import load
    cfg = results[best]["config"]
    if cost_sensitive(cfg) or any(cfg.get(k) != v for k, v in PLAIN.items()):
        return best, None, {}
    same = ("method", "loss", "components", "eta")
    twin = next((i for i, r in enumerate(results) if cost_sensitive(r["config"])
                 and all(r["config"].get(k) == cfg.get(k) for k in same)), None)
    if twin is None:
        return best, None, {}
    budget, convention = settings.get("memory_budget", DEFAULT_MEMORY_BUDGET), settings.get("convention") or "letor4"
    reports = {i: evaluate_model(load(run_dir / "runs" / results[i]["label"] / "model.h5"), valid, budget, convention)
               for i in (best, twin)}
    a, b = (per_query_metric(reports[i], select_metric) for i in (best, twin))
    d = (a - b)[np.isfinite(a) & np.isfinite(b)]
    diff = float(d.mean()) if d.size else 0.0
    se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("inf")
    keep_plain = diff > COST_SE * se
    log.info("grid: %s beats %s on validation by %.4f %s (standard error %.4f over %d queries): %s",
             results[best]["label"], results[twin]["label"], diff, select_metric, se, d.size,
             "kept" if keep_plain else f"within {COST_SE:g} standard errors, paper 001's setting kept")
    record = {"plain": results[best]["label"], "cost_sensitive": results[twin]["label"], "difference": diff,
              "standard_error": se, "queries": int(d.size), "kept": "plain" if keep_plain else "cost_sensitive"}
    return (best if keep_plain else twin), record, reports


def describe(cfg):
    """A configuration in a few words, e.g. "nystroem m=500, 4 gamma x 8 C"."""
    bits = [cfg["method"]]
    if cfg["components"] is not None:
        bits[0] += f" m={cfg['components']}"
    if cfg["loss"] not in (None, "squared_hinge"):
        bits.append(cfg["loss"] + ("" if cfg["eta"] is None else f" eta={cfg['eta']}"))
    bits += [f"{k}={cfg[k]}" for k in COSTS if cfg.get(k) not in (None, "none")]
    sizes = [f"{len(cfg[a])} {'lambda' if a == 'lam' else a}" for a in ("gamma", "C", "lam") if cfg[a] is not None]
    return ", ".join(bits) + (", " + " x ".join(sizes) if sizes else "")


def _data_info(ds):
    return {"name": str(getattr(ds, "name", "")), "fingerprint": ds.fingerprint, "rows": int(ds.n_rows),
            "queries": int(ds.n_queries), "features": int(ds.n_features)}


# candidates.csv: every candidate's settings and results, and nothing that depends on the clock or on
# interruptions (seconds; passes, which count the work a resumed run redid): a rerun of a killed grid
# writes the same file byte for byte
CANDIDATE_COLUMNS = ("config", "method", "loss", "components", "pair_cost", "query_weight", "eta", "gamma", "C",
                     "lambda", "valid_meanndcg",
                     "valid_ndcg@10", "valid_map", "valid_avgndcg", "valid_avgprec", "objective", "grad_norm",
                     "iterations", "cg_steps", "message")


def candidates_table(record):
    """Every candidate of a grid record as flat rows (configuration, hyper-parameters, results)."""
    rows = []
    for r in record["configs"]:
        cfg = r["config"]
        for c in r["summary"]["candidates"]:
            rows.append({"config": r["label"], "method": cfg["method"], "loss": cfg["loss"],
                         "components": cfg["components"], **{k: cfg.get(k) for k in COSTS},
                         **{k: v for k, v in c.items() if k != "trace"}})
    return rows
