"""Training runs: the C path with warm starts, validation, checkpoints and resume.

One run = prepare the data once (label levels, query weights, normaliser), then for each C in
increasing order solve with TRON from the previous solution (LIBLINEAR's warm-started C path),
score the validation data, and keep the best model by ``select_metric``. After every TRON
iteration a checkpoint holds everything to continue: the path position, the finished
candidates, and the solver state.
"""

import logging
import time
from dataclasses import dataclass

import numpy as np

from streamrank import params
from streamrank.errors import ParameterError
from streamrank.execution.executor import executor_or_local
from streamrank.io.budget import remote_copies
from streamrank.objectives.rank_objective import BlockSource, RankObjective, preconditioner_bytes
from streamrank.solvers.newton import newton_cholesky
from streamrank.solvers.newton_yuan import newton_yuan
from streamrank.solvers.tron import tron
from streamrank.state.model import LinearModel
from streamrank.training import memory_plan as memplan
from streamrank.training.path import TWO_STAGE_FACTORS, Method, report_grid_edges, run_settings
from streamrank.training.problem import (
    MappedValidation,
    Problem,
    attach_features,
    base_config,
    c_path,
    check_c_scale,
    check_config,
    check_data,
    check_queries,
    fit_normalizer,
    frozen,
    gamma_path,
    label_weights,
    mapped_validation_bytes,
    max_row_sq_norm,
    pair_weight_sum,
    query_range,
    read_labels,
    row_sq_norm_bound,
    validation_score,
    with_features,
)
from streamrank.units import budget_bytes

log = logging.getLogger("streamrank.training.linear")

SOLVERS = ("auto", "tron", "newton_cholesky", "newton_yuan")
SOLVER_FUNCTIONS = {"tron": tron, "newton_cholesky": newton_cholesky, "newton_yuan": newton_yuan}


# TRON's expected CG steps per iteration for the cost comparison of --solver auto (LIBLINEAR's
# experience and bench_linear.py: 8 to 40 on LETOR-like data; the low end favours TRON)
TRON_CG_PER_ITER = 10
AUTO_SAMPLE_ROWS = 5_000


def choose_solver(obj, w):
    """Pick tron or newton_cholesky from measured costs; return (name, reason).

    TRON pays one pass per CG step, about (1 + TRON_CG_PER_ITER) passes an iteration; Newton pays
    two passes plus forming the dense Hessian (an m-wide pair sweep and n m^2 flops), timed here
    on about AUTO_SAMPLE_ROWS rows and scaled to all rows.
    """
    obj.fun(w)
    obj.grad(w)
    t = time.perf_counter()
    obj.hessp(np.ones(obj.n_features))
    pass_s = time.perf_counter() - t
    obj.hessian(max_rows=1)  # loads (or compiles) the wide kernels outside the timing
    t = time.perf_counter()
    obj.hessian(max_rows=AUTO_SAMPLE_ROWS)
    hess_s = (time.perf_counter() - t) * obj.source.n_rows / max(obj.hessian_rows, 1)
    tron_it = (1 + TRON_CG_PER_ITER) * pass_s
    newton_it = 2 * pass_s + hess_s
    name = "newton_cholesky" if newton_it < tron_it else "tron"
    return name, (f"measured: a pass {pass_s:.3g} s, the {obj.n_features} x {obj.n_features} Hessian ~{hess_s:.3g} s; "
                  f"per iteration TRON ~{tron_it:.3g} s ({1 + TRON_CG_PER_ITER} passes), "
                  f"Newton-Cholesky ~{newton_it:.3g} s")


# bytes a block holds per mapped row besides the map's fixed arrays: its raw row in the stream's two
# buffers (4 d + 4 each), its float64 normalised copy (8 d), its float32 mapped row in the source's
# two buffers (a cache read fills one while the other is used: 8 m), and the objective's per-row
# float64 temporaries of the block (scores, their step and sorted copies: 64)
def mapped_block_row_bytes(d, m):
    from streamrank.io.budget import BUFFERS
    return BUFFERS * (4 * d + 4) + 8 * d + 8 * m + 64


# per validation row, held while it is scored between the solves: its label (float64, kept for the
# run), its score, and what the metrics keep of it (evaluation.score_files.EVAL_BYTES_PER_ROW)
def valid_row_bytes():
    from streamrank.evaluation.score_files import EVAL_BYTES_PER_ROW
    return 8 + 8 + EVAL_BYTES_PER_ROW


def plan_blocks(budget, ds, n_train, queries, method, components, extra, loss, given_block=None, valid=None):
    """(fixed bytes, bytes of a block or None for the plan's own, resident bytes) of a linear or
    mapped run inside ``budget``, or ParameterError with the smallest budget that works, before
    any work: a block holds at least one whole query, and a kernel map's arrays
    (:func:`~streamrank.features.maps.plan_bytes`: its fit's peak, or its kept arrays beside
    ``extra``, the preconditioner's and the mapped validation rows) are needed whole.

    A mapped run's blocks are sized here from what a mapped row really holds
    (:func:`mapped_block_row_bytes`), in the mapped stream's units (4 m + 4 d + 4 bytes a row); a
    linear run's by ``memory_plan.linear_plan`` (two buffers per raw byte). The block size never
    changes a model, only the number of reads.

    With ``valid``, its rows are scored between the solves while the training stream keeps its
    buffers: a block then counts the validation stream's raw rows beside the training's, and every
    validation row's label, score and metrics (:func:`valid_row_bytes`) are fixed bytes."""
    from streamrank.features.maps import plan_bytes
    from streamrank.io.budget import BUFFERS, HEADROOM, STREAM_SLACK
    from streamrank.io.query_stream import BLOCK_SHARE_OF_BUDGET
    from streamrank.units import format_size
    d = ds.n_features
    q0, q1 = queries if queries is not None else (0, ds.n_queries)
    sizes = np.diff(ds.query_ptr[q0:q1 + 1])
    qmax = int(sizes.max()) if sizes.size else 0
    fit, kept = plan_bytes(method, d, components) if method != "primal" else (0, 0)
    valid_fixed = valid.n_rows * valid_row_bytes() if valid is not None else 0
    fixed = max(fit, kept + extra) + valid_fixed
    state = n_train * memplan.state_bytes_per_row(loss)
    # a block's bytes are the mapped stream's (4 m + 4 d + 4 a row) in the passes over mapped rows,
    # and the raw stream's (4 d + 4) in those over raw rows (statistics, the landmark draw, scoring
    # the validation rows, which maps each block: float64 copy and float32 mapped rows)
    raw_row = BUFFERS * (4 * d + 4) + (0 if method == "primal" else 8 * d + 4 * components + 16)
    row = raw_row if method == "primal" else max(mapped_block_row_bytes(d, components), raw_row)
    if valid is not None:  # (the validation rows are as wide as the training rows: check_valid_width)
        sizes_v = np.diff(valid.query_ptr)
        qmax = max(qmax, int(sizes_v.max()) if sizes_v.size else 0)
        row += raw_row
    from streamrank.state.model import settled_resident
    resident = settled_resident()
    avail = (budget - resident - STREAM_SLACK) / HEADROOM - state - fixed
    if avail < qmax * row:
        need = resident + STREAM_SLACK + HEADROOM * (state + fixed + qmax * row)
        if budget < resident + STREAM_SLACK and state + fixed <= max(budget, resident):
            # below what the process holds before any work no plan can keep the budget: the
            # smallest blocks (tests use such budgets for many blocks), and the budget that works.
            # Not when the run's own arrays are larger than the budget and the whole process (a
            # map of 10^9 components): that run is refused below, before it allocates them
            log.warning("memory budget %s is below the %s this process holds before any work: blocks of "
                        "%s, and peak RSS will exceed it; use memory_budget=%dMB", format_size(budget),
                        format_size(resident + STREAM_SLACK), format_size(budget * BLOCK_SHARE_OF_BUDGET),
                        -(-int(need) // 10**6))
            return fixed, given_block or max(1, int(budget * BLOCK_SHARE_OF_BUDGET)), resident
        raise _budget_error(budget, need, [f"{format_size(resident)} resident",
                                           f"{format_size(state)} of per-row state for {n_train:,} rows"],
                            method=method, components=components, map_bytes=fixed - valid_fixed,
                            fit_peak=fit >= kept + extra, extra=extra, valid=valid, valid_fixed=valid_fixed,
                            block=(qmax, int(qmax * row)))
    if given_block:
        return fixed, given_block, resident
    # rows of either kind a block may hold: its share of the budget, and never fewer than the largest
    # query (avail holds it, checked above), which a stream would otherwise read whole past the block
    rows = max(min(avail, budget * BLOCK_SHARE_OF_BUDGET * BUFFERS) / row, qmax)
    block = int(np.ceil(rows * 4 * (d + 1)))  # the raw stream's rows fit, and the mapped stream's are fewer
    return fixed, max(block, 1), resident


def _budget_error(budget, need, parts, *, method, components, map_bytes, fit_peak, extra, valid, valid_fixed, block):
    """The refusal of a ``budget`` below a linear or mapped run's ``need``: what it needs, part by
    part (``parts`` so far, then the map's or the preconditioner's arrays, the validation rows'
    and a block holding the largest query, ``block`` = (its rows, its bytes)), and the budget that
    works, in whole MB (10^6 bytes, the unit of --memory-budget), rounded up."""
    from streamrank.units import format_size
    need = -(-int(need) // 10**6) * 10**6
    if method != "primal":
        parts.append(f"the {method} map's {components:,} components {format_size(map_bytes)}"
                     + (" (its fit's peak)" if fit_peak else " with the preconditioner"))
    elif extra:
        parts.append(f"the preconditioner's {format_size(extra)}")
    if valid_fixed:
        parts.append(f"the labels, scores and metrics of {valid.n_rows:,} validation rows {format_size(valid_fixed)}")
    parts.append(f"a block holding the largest query ({block[0]:,} rows) {format_size(block[1])}")
    return ParameterError(f"memory_budget {format_size(budget)} is too small for this run: it needs "
                          f"{format_size(need)} ({', '.join(parts)}, with the allocator's headroom); "
                          f"use memory_budget={need // 10**6}MB"
                          + ("" if method == "primal" else " or fewer components"))


METHODS = ("primal", "nystroem", "rff")
MAP_CACHE_MODES = ("auto", "memory", "cache", "recompute")
MAP_ROWS_MODES = ("auto", "features", "kernel")
PRECONDITION_MODES = ("auto", "on", "off")


def train_linear(ds, *, valid=None, C=(1.0,), normalize="none", tol=1e-3, max_iter=1000, gap_tol=None,
                 memory_budget="2GB", pair_cost=None, query_weight=None, select_metric="meanndcg",
                 checkpoint=None, resume=False, seed=0, block_bytes=None, queries=None, solver="tron",
                 method="primal", kernel="rbf", gamma=None, degree=3, coef0=1.0, components=1000, rank=None,
                 cache_dir=None, map_cache="auto", cache_size=None, precondition="auto", executor=None,
                 map_rows="auto", loss="squared_hinge", eta=None, abs_gtol=None, abs_dtol=None, features=None,
                 convention="letor4"):
    """Train a RankSVM on an open dataset; return (LinearModel, summary dict).

    ``loss``: ``squared_hinge`` (paper 004 eq. 3.13) or ``smooth_hinge`` (paper 001's cs-sRSVM,
    problem 4) with band half-width ``eta`` in (0, 1), or ``auto`` / None: paper 001's rule per C
    (:func:`~streamrank.training.problem.eta_for`); each candidate records its eta.
    ``gap_tol``: stop a point once its relative objective gap (f - f*)/f is at most this, in
    place of ``tol``'s rule (a rigorous bound here, ||g||^2 / 2f:
    :func:`streamrank.solvers.tron.relative_gap`).
    ``abs_gtol``, ``abs_dtol``: paper 001's absolute stopping tests eps2 (||g|| <= eps2) and eps3
    (||d|| <= eps3) for ``solver="newton_yuan"``, beside ``tol``'s relative rule.
    ``method``: ``primal`` (linear), or ``nystroem`` / ``rff`` (paper 000: a feature map, then the
    same L2-loss RankSVM in the mapped space). Several ``gamma`` values and several ``C`` values form
    a path of (gamma, C) points: each gamma fits its map once (one pass; seeded, so a resumed run
    refits the same map), C runs in increasing order with warm starts, and the best point on
    ``valid`` by ``select_metric`` is kept (``valid`` is required when there are several points).
    ``queries``: train on the contiguous query range [q0, q1) only (tests, subsets).
    ``map_cache``: keep mapped rows in memory, on disk under ``cache_dir``, or recompute them each
    pass (``auto`` decides from the budget and measured rates; the values are the same).
    ``map_rows``: what a Nystroem run's passes keep of each row, ``features`` (phi) or ``kernel``
    (K(x, L), the projection applied to vectors); ``auto``:
    :func:`~streamrank.objectives.mapped_source.choose_rows`.
    ``cache_size``: cap on the bytes of all feature caches in ``cache_dir`` (least recently used
    blocks are evicted; None: no cap).
    ``precondition``: TRON's CG with a preconditioner (``auto``, the same as ``on``) or without
    (``off``): the sampled Hessian of :mod:`streamrank.objectives.linear_precond` up to its
    ``AUTO_WIDTH`` columns (linear RankSVM), wider the Nystrom sketch of
    :mod:`streamrank.objectives.sketch_precond` (feature maps; one per map, seeded by ``seed``).
    ``executor``: what runs the passes over the data (:mod:`streamrank.execution.executor`; None:
    in this process). ``convention``: the gains of ``select_metric`` (letor4 or standard,
    :mod:`streamrank.evaluation.metrics`).
    """
    t_start = time.perf_counter()
    executor = executor_or_local(executor)
    check_queries(ds, queries)
    ds, valid, feature_cols, input_width = with_features(ds, valid, features)
    settings, refine = linear_settings(
        valid, executor, C=C, method=method, solver=solver, precondition=precondition, map_cache=map_cache,
        map_rows=map_rows,
        kernel=kernel, gamma=gamma, degree=degree, coef0=coef0, components=components, rank=rank,
        memory_budget=memory_budget, normalize=normalize, tol=tol, max_iter=max_iter, gap_tol=gap_tol,
        block_bytes=block_bytes, pair_cost=pair_cost, query_weight=query_weight, select_metric=select_metric,
        seed=seed, queries=queries, loss=loss, eta=eta, abs_gtol=abs_gtol, abs_dtol=abs_dtol, convention=convention)
    points = check_data(ds, valid, select_metric, settings["C_path"], settings.get("gamma_path", [None]))
    components = settings.get("components", components)  # as checked ("1" is 1): the plan and the map use it
    rows = plan_rows(ds, valid, settings, queries, components=components, cache_dir=cache_dir, map_cache=map_cache,
                     cache_size=cache_size)
    problem = linear_problem(ds, valid, settings, query_range(ds, queries), rows.block_bytes, executor)
    check_scale(problem, settings, refine, rows.block_bytes)
    maps = FeatureMaps(problem, MapSpec(method, kernel, settings.get("gamma_path", [None]), degree, coef0, components,
                                        rank, seed), rows.block_bytes)
    path = LinearPath(problem, settings, rows, maps)
    res = run_settings(path, points, settings, validate=valid is not None, checkpoint=checkpoint, resume=resume,
                       fingerprint=ds.fingerprint, refine=refine)
    model, summary = linear_model(problem, settings, res, path, t_start)
    return attach_features(model, feature_cols, input_width), summary


def linear_settings(valid, executor, *, C, method, solver, precondition, map_cache, kernel, gamma, degree, coef0,
                    components, rank, memory_budget, map_rows="auto", **common):
    """(the checked settings of a linear or mapped run, read-only: the config its model records;
    the two-stage rule's refine function or None). ``common``: :func:`~streamrank.training.problem.base_config`'s."""
    Cs, refine = c_path(C)
    if method not in METHODS:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}; got {method!r}. Use method=nystroem")
    if precondition not in PRECONDITION_MODES:
        raise ParameterError(f"precondition must be one of {', '.join(PRECONDITION_MODES)}; got {precondition!r}. "
                             f"Use precondition=auto")
    if map_cache not in MAP_CACHE_MODES:
        raise ParameterError(f"map_cache must be one of {', '.join(MAP_CACHE_MODES)}; got {map_cache!r}")
    if map_rows not in MAP_ROWS_MODES:
        raise ParameterError(f"map_rows must be one of {', '.join(MAP_ROWS_MODES)}; got {map_rows!r}. Use "
                             f"map_rows=auto")
    gammas = gamma_path(gamma) if method != "primal" else [None]
    if method == "primal":  # unused, but out of their ranges they are still refused
        if gamma is not None:
            gamma_path(gamma)
        params.check("degree", degree), params.check("coef0", coef0)
    budget = budget_bytes(memory_budget)
    if solver not in SOLVERS:
        raise ParameterError(f"solver must be one of {', '.join(SOLVERS)}; got {solver!r}. Use solver=tron")
    cfg = {"method": method, "solver": solver,
           **base_config(Cs=Cs, refine=refine, memory_budget=budget, valid=valid, **common),
           "precondition": precondition, "partition_rows": executor.partition_rows}
    if method != "primal":
        cfg.update({"kernel": kernel, "gamma_path": gammas, "degree": params.check("degree", degree),
                    "coef0": params.check("coef0", coef0), "components": params.check("components", components),
                    "rank": None if rank is None else params.check("rank", rank)})
        if map_rows != "auto":  # recorded when forced (configs and checkpoints from before match)
            cfg["map_rows"] = map_rows
    check_config(cfg)
    return frozen(cfg), refine


@dataclass(frozen=True)
class RowPlan:
    """Where a run's rows live: blocks of ``block_bytes``, ``tier`` bytes of them kept in memory,
    ``valid_map_bytes`` for the mapped validation rows (0: each score maps them again), and mapped
    rows kept as ``map_cache`` says, under ``cache_dir`` within ``cache_size``. None of it changes
    a model."""

    block_bytes: int
    tier: int
    valid_map_bytes: int
    cache_dir: object
    map_cache: str
    cache_size: object


def plan_rows(ds, valid, settings, queries, *, components, cache_dir, map_cache, cache_size):
    """The run's :class:`RowPlan` inside its memory budget (:func:`plan_blocks`, then
    ``memory_plan.linear_plan``), or ParameterError with the smallest budget that works."""
    method, budget, loss = settings["method"], settings["memory_budget"], settings["loss"]
    q0, q1 = query_range(ds, queries)
    n_train = int(ds.query_ptr[q1] - ds.query_ptr[q0]) if queries is not None else ds.n_rows
    widest = max([ds.n_features] + ([] if method == "primal" else [settings["components"]]))
    # a kernel map's C path scores the validation rows mapped once per gamma, when they fit their share
    valid_map_bytes = (mapped_validation_bytes(valid, widest, 8 if method == "nystroem" else 4)
                       if method != "primal" else 0)
    if valid_map_bytes > memplan.VALID_MAP_SHARE * budget:
        valid_map_bytes = 0
    fixed, block_bytes, resident = plan_blocks(budget, ds, n_train, (q0, q1) if queries is not None else None, method,
                                               settings.get("components", 0),
                                               preconditioner_bytes(widest) + valid_map_bytes,
                                               loss, settings["block_bytes"], valid)
    block_bytes, tier = memplan.linear_plan(budget, n_train, fixed, block_bytes,
                                            mapped_ratio=0.0 if method == "primal" else components / ds.n_features,
                                            loss=loss, resident=resident, store_copies=remote_copies(ds))
    return RowPlan(block_bytes, tier, valid_map_bytes, cache_dir, map_cache, cache_size)


def linear_problem(ds, valid, settings, queries, block_bytes, executor):
    """The run's :class:`~streamrank.training.problem.Problem`: labels, weights and costs of the
    training queries ``queries`` = (q0, q1) (mu over every query of ``ds``, 0 outside the range),
    the normaliser fitted on them, the validation labels."""
    q0, q1 = queries
    qp = ds.query_ptr
    levels, mu_range, cost, weight_sum = label_weights(read_labels(ds)[qp[q0]:qp[q1]], qp[q0:q1 + 1] - qp[q0],
                                                       settings["query_weight"], settings["pair_cost"],
                                                       settings["loss"])
    mu = np.zeros(ds.n_queries)
    mu[q0:q1] = mu_range
    normalizer = fit_normalizer(ds, settings["normalize"], queries, block_bytes, executor)
    return Problem(ds=ds, valid=valid, queries=queries, levels=levels, mu=mu, cost=cost, loss=settings["loss"],
                   eta=settings["eta"], weight_sum=weight_sum, normalizer=normalizer,
                   valid_y=read_labels(valid) if valid is not None else None, executor=executor)


def check_scale(problem, settings, refine, block_bytes):
    """Before the first iteration: refuse a largest C whose objective overflows float64 on these
    data (:func:`~streamrank.training.problem.check_c_scale`), where a row's squared norm has a
    bound; otherwise a solver's NumericError names the point (training.path)."""
    ds, (q0, q1) = problem.ds, problem.queries
    qp = ds.query_ptr
    sq_bound, exact_norm = row_sq_norm_bound(settings["method"], settings.get("kernel"), settings["normalize"],
                                             ds.n_features, qp[q1] - qp[q0])
    if sq_bound is None:
        return

    def weight_sum():  # the labels read again: the squared hinge's run does not keep its sum
        return problem.weight_sum or pair_weight_sum(np.searchsorted(problem.levels, read_labels(ds)[qp[q0]:qp[q1]]),
                                                     qp[q0:q1 + 1] - qp[q0], problem.cost.lam, problem.mu[q0:q1])

    def max_sq_norm():
        return max_row_sq_norm(ds.stream(block_bytes=block_bytes, queries=(q0, q1)), problem.normalizer)
    C_max = max(settings["C_path"]) * (max(TWO_STAGE_FACTORS) if refine is not None else 1.0)
    check_c_scale(C_max, query_ptr=qp[q0:q1 + 1], lam=problem.cost.lam, mu=problem.mu[q0:q1], data_name=ds.name,
                  sq_norm_bound=sq_bound, weight_sum=weight_sum, max_sq_norm=max_sq_norm if exact_norm else None)


@dataclass(frozen=True)
class MapSpec:
    """A run's feature map as its arguments give it: ``method`` (primal: none), its kernel, the
    gamma of each path gamma index, and the map's settings (:func:`~streamrank.features.maps.make_map`)."""

    method: str
    kernel: str
    gammas: list
    degree: object
    coef0: object
    components: int
    rank: object
    seed: object


class FeatureMaps:
    """The fitted map of each gamma of a run (None for the linear model), fitted once on the
    problem's training queries (one pass; seeded, so a resumed run refits the same map)."""

    def __init__(self, problem, spec, block_bytes):
        self.problem, self.spec, self.block_bytes = problem, spec, block_bytes
        self.maps = {}

    def get(self, gi):
        if self.spec.method == "primal":
            return None
        if gi not in self.maps:
            self.maps[gi] = self._fit(gi)
        return self.maps[gi]

    def _fit(self, gi):
        from streamrank.features.maps import make_map
        s, p = self.spec, self.problem
        t = time.perf_counter()
        fm = make_map(s.method, kernel=s.kernel, gamma=s.gammas[gi], degree=s.degree, coef0=s.coef0,
                      n_components=s.components, rank=s.rank, seed=s.seed)
        fm.fit(p.ds, queries=p.queries, block_bytes=self.block_bytes, normalizer=p.normalizer, executor=p.executor)
        log.info("%s map (%s kernel, gamma %s): %d features from %d, fitted in %.2f s", s.method, s.kernel,
                 f"{fm.gamma_:g}" if getattr(fm, "gamma_", None) else "default", fm.n_components_,
                 p.ds.n_features, time.perf_counter() - t)
        return fm

    def width(self, gi):
        """The model's width at gamma ``gi``: the data's features, or the map's components."""
        fm = self.get(gi)
        return self.problem.ds.n_features if fm is None else int(fm.n_components_)

    def gamma(self, gi):
        return None if self.spec.method == "primal" else self.get(gi).gamma_


class LinearPath(Method):
    """The linear and mapped methods on the training path: a block source per gamma (raw rows, or
    rows through its map), a :class:`RankObjective` per C, solved by ``settings["solver"]`` (or
    the one ``auto`` measures as cheaper at the first point: :meth:`decided`)."""

    def __init__(self, problem, settings, rows, maps):
        self.problem, self.settings, self.rows, self.maps = problem, settings, rows, maps
        self.solver, self.read_seconds, self.last, self.last_gi = settings["solver"], 0.0, None, None
        self.sketch = None  # the wide preconditioner's sketch of the open map, for all its C
        self.mapped_valid = {}  # one gamma's mapped validation rows at a time

    def open(self, gi):
        from streamrank.objectives.sketch_precond import SharedSketch
        self.last, self.last_gi = self._source(gi), gi
        self.sketch = SharedSketch(self.maps.spec.seed)
        return self.last

    def _source(self, gi):
        p, r, fm = self.problem, self.rows, self.maps.get(gi)
        kw = dict(block_bytes=r.block_bytes, memory_bytes=r.tier, queries=p.queries, levels=p.levels,
                  partition_rows=p.executor.partition_rows)
        if fm is None:
            return BlockSource(p.ds, p.normalizer, **kw)
        from streamrank.objectives.mapped_source import MappedSource, choose_rows
        rows, why = choose_rows(fm, force=None if self.settings.get("map_rows", "auto") == "auto"
                                else self.settings["map_rows"])
        log.info("mapped rows: %s", why)
        return MappedSource(p.ds, fm, p.normalizer, cache_dir=r.cache_dir, mode=r.map_cache, cache_size=r.cache_size,
                            rows=rows, **kw)

    def close(self, source):
        self.read_seconds += source.read_seconds

    def fresh(self, source):
        source.passes = 0

    def start(self, gi):
        return np.zeros(self.maps.width(gi))

    def prepare(self, source, gi, C, w):
        p, m, ck = self.problem, self.maps.width(gi), self.problem.point_cost(C)
        if self.solver == "auto":
            self.solver, why = choose_solver(RankObjective(source, m, C=C, cost=ck, mu=p.mu, executor=p.executor), w)
            log.info("solver auto: %s (%s)", self.solver, why)
        obj = RankObjective(source, m, C=C, cost=ck, mu=p.mu, keep_scores=self.solver == "newton_cholesky",
                            executor=p.executor, sketch=self.sketch)
        log.info("C=%g: %s%s eps=%g on %d rows, %d queries, %d features (%s)", C, self.solver,
                 f" (smooth hinge, eta {ck.eta:.3g})" if ck.eta else "", self.settings["tol"], source.n_rows,
                 p.n_queries, m, f"rows kept in memory, {source.memory_bytes / 1e6:.0f} MB" if source.in_memory
                 else f"rows {'re-mapped' if self.maps.spec.method != 'primal' else 're-read'} every pass in "
                      f"{len(source.stream)} blocks")
        return obj, SOLVER_FUNCTIONS[self.solver], self._solver_options()

    def _solver_options(self):
        s, kw = self.settings, {}
        if self.solver in ("tron", "newton_yuan"):
            kw["precondition"] = s["precondition"] != "off"
        if self.solver == "newton_yuan":
            kw.update(dense_max=memplan.dense_hessian_max(s["memory_budget"]), gtol_abs=s["abs_gtol"],
                      dtol_abs=s["abs_dtol"])
        return kw

    def gamma(self, gi):
        return self.maps.gamma(gi)

    def point_info(self, gi, C):
        return self.problem.point_info(C)

    def score(self, w, gi):
        p, metric = self.problem, self.settings["select_metric"]
        model = LinearModel(w, p.normalizer, n_features=p.ds.n_features, fmap=self.maps.get(gi))
        if not self.rows.valid_map_bytes:
            return validation_score(model, p.valid, p.valid_y, metric, block_bytes=self.rows.block_bytes,
                                    executor=p.executor, convention=self.settings.get("convention", "letor4"))
        if gi not in self.mapped_valid:
            self.mapped_valid.clear()
            self.mapped_valid[gi] = MappedValidation(model, p.valid, p.valid_y, metric,
                                                     block_bytes=self.rows.block_bytes, executor=p.executor,
                                                     convention=self.settings.get("convention", "letor4"))
        return self.mapped_valid[gi].score(model)

    def decided(self):
        return {"solver_chosen": self.solver} if self.settings["solver"] == "auto" and self.solver != "auto" else {}


def linear_model(problem, settings, res, path, t_start):
    """(the chosen point's LinearModel, the run's summary) after the path ``res`` of ``path``;
    the model's config is the settings with what the run decided (``solver_chosen``)."""
    method, gi = settings["method"], res.points[res.best][0]
    fmap, source = path.maps.get(gi), path.last
    summary = {**res.summary(), "seconds": time.perf_counter() - t_start, "read_seconds": path.read_seconds,
               "method": method, "solver": res.decided.get("solver_chosen", settings["solver"]),
               "in_memory": source.in_memory if source else None}
    report_grid_edges(summary, sorted({c["C"] for c in res.candidates}), settings.get("gamma_path", [None]))
    if method != "primal":
        summary["components"] = int(fmap.n_components_)
        summary["map_storage"] = source.mode if gi == path.last_gi else None
        summary["map_rows"] = source.rows if gi == path.last_gi else None
    model = LinearModel(res.w, problem.normalizer, n_features=problem.ds.n_features, fmap=fmap,
                        config={**settings, **res.decided}, training=summary, fingerprint=problem.ds.fingerprint,
                        levels=problem.levels)
    return model, summary


train = train_linear
