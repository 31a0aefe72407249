"""Training exact kernel RankSVM (paper 004): Q in a KernelCache, TRON over beta, checkpoints.

One run = read the training rows once (normalised, float64; l x d is small beside Q), compute Q =
K(X, X) once per gamma into a :class:`~streamrank.cache.kernel_cache.KernelCache` (in memory when it fits
the budget, else on disk under ``--cache-dir`` with the part that fits in memory), then for each C
in increasing order solve (3.13) with TRON from the previous beta (warm start), as
:func:`streamrank.training.linear.train_linear` does for the linear problem, with the same checkpoints,
resume and validation. The model keeps beta and the rows with beta_i != 0
(:mod:`streamrank.features.exact_map`).

Memory (``--memory-budget``): the rows Xn, O(l) solver vectors, the float64 rows of a block being
computed, three block buffers (computing or reading ahead), and the in-memory tier of Q, which
gets the rest.
"""

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from streamrank import params
from streamrank.cache.feature_cache import array_digest
from streamrank.cache.kernel_cache import KernelCache, RoundingBounds, read_rows
from streamrank.errors import ParameterError
from streamrank.execution.executor import executor_or_local
from streamrank.features.exact_map import ExactKernelMap
from streamrank.features.kernels import check_psd_kernel
from streamrank.io.budget import release_freed
from streamrank.objectives.kernel_objective import KernelObjective, LinearKernelObjective, ZeroPoint
from streamrank.objectives.kernel_precond import (
    DEFAULT_LANDMARKS,
    RKHS_TRACE_TOL,
    NystroemPreconditioner,
    RKHSPreconditioner,
    auto_landmarks,
    rpcholesky,
)
from streamrank.params import EXACT_GAP_TOL
from streamrank.solvers.newton_yuan import newton_yuan
from streamrank.solvers.tron import tron
from streamrank.state.model import LinearModel
from streamrank.training import memory_plan as memplan
from streamrank.training.path import Method, report_grid_edges, run_settings
from streamrank.training.problem import (
    MappedValidation,
    Problem,
    attach_features,
    base_config,
    c_path,
    check_config,
    check_data,
    check_queries,
    fit_normalizer,
    frozen,
    label_weights,
    query_range,
    read_labels,
    validation_score,
    with_features,
)
from streamrank.units import budget_bytes, format_size

log = logging.getLogger("streamrank.training.exact")

def default_cache_dir():
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "streamrank"


class _Gram:
    """Q for one gamma: a built KernelCache and its preconditioner, or X X^T for the linear kernel."""

    def __init__(self, Xn, qp, rank, cost, mu, *, kernel, gamma, degree, coef0, key, qblock, tier, where, landmarks,
                 seed, executor=None, tile_threads=None, rkhs=False):
        self.executor = executor
        self.Xn, self.qp, self.rank, self.cost, self.mu = Xn, qp, rank, cost, mu
        self.cache, self.precond, self.counter = None, None, None
        self.zero = ZeroPoint()  # fun at beta = 0, shared by the path's C (one pair cost per run)
        self.build_seconds = self.precond_seconds = 0.0
        if kernel == "linear":  # Q = X X^T in float64, never stored (paper 004 sec. 3.3)
            self.counter = LinearKernelObjective(Xn, rank, qp, C=1.0, cost=cost, mu=mu).source
            return
        self.cache = c = KernelCache(Xn, qp, kernel=kernel, gamma=gamma, degree=degree, coef0=coef0,
                                     key_material=key, block_bytes=qblock, memory_bytes=tier, cache_dir=where,
                                     partition_rows=executor_or_local(executor).partition_rows,
                                     tile_threads=tile_threads)
        pivots = None
        if landmarks:  # before Q: its float64 temporaries are freed before the tier of Q fills memory
            t = time.perf_counter()
            if rkhs:  # TRON's CG in the RKHS norm: the landmarks alone now, U once Q' is known (below)
                pivots, _ = rpcholesky(Xn, landmarks, kernel=kernel, gamma=gamma, degree=degree, coef0=coef0,
                                       seed=seed, trace_tol=RKHS_TRACE_TOL)
            else:
                self.precond = NystroemPreconditioner(Xn, kernel=kernel, gamma=gamma, degree=degree, coef0=coef0,
                                                      landmarks=landmarks, seed=seed)
            self.precond_seconds = time.perf_counter() - t
        if getattr(executor, "remote", False):
            # workers build their partitions' blocks of Q where they read them (the recipe c.spec); the
            # jitter needs every row's rounding bound: one pass over the blocks, where they are
            t = time.perf_counter()
            _, kept = executor.run(RoundingBounds(c), c)
            c.set_bounds(RoundingBounds.jitter(kept))
            c.passes = 0  # building Q is not a pass of the solver (as c.build() is not)
            c.build_seconds = time.perf_counter() - t
        else:
            c.build()
        release_freed()  # the preconditioner's float64 factor and the kernel tiles are freed by now
        self.build_seconds = c.build_seconds
        if pivots is not None:  # U = Q'[:, S] Lq^-T needs Q''s shift and jitter
            t = time.perf_counter()
            self.precond = RKHSPreconditioner(Xn, pivots, kernel=kernel, gamma=gamma, degree=degree, coef0=coef0,
                                              shift=c.shift, jitter=c.jitter)
            self.precond_seconds += time.perf_counter() - t
            release_freed()
            log.info("RKHS preconditioner: %d landmarks (randomly pivoted Cholesky), %.2f s", self.precond.rank,
                     self.precond_seconds)
        elif self.precond is not None:  # the jitter is known once every block of Q has been seen
            t = time.perf_counter()
            self.precond.set_ridge(c.jitter)
            self.precond_seconds += time.perf_counter() - t
            log.info("Nystroem preconditioner: %d landmarks (randomly pivoted Cholesky), residual diagonal "
                     "mean %.3g, %.2f s", len(self.precond.landmarks), float(np.mean(self.precond.diag)),
                     self.precond_seconds)
        log.info("Q = K(X, X) (%s kernel, gamma %g): %d x %d, %d blocks, %s in memory%s; built in %.2f s "
                 "(%d blocks computed); shift %.6g, jitter %.3g", kernel, gamma, c.l, c.l, c.n_blocks,
                 format_size(c.memory_nbytes), f", {c.dir}" if c.dir is not None else "", c.build_seconds,
                 c.computed_blocks, c.shift, c.jitter)

    def objective(self, C, cost=None):
        """The objective of point C (``cost``: the costs with that point's loss; default the Gram's)."""
        cost = self.cost if cost is None else cost
        if self.cache is None:
            obj = LinearKernelObjective(self.Xn, self.rank, self.qp, C=C, cost=cost, mu=self.mu)
            obj.source = self.counter  # one pass count for the whole path
            return obj
        return KernelObjective(self.cache, self.rank, C=C, cost=cost, mu=self.mu, executor=self.executor,
                               zero=self.zero).set_preconditioner(self.precond)

    @property
    def passes(self):
        return (self.cache or self.counter).passes

    @property
    def jitter(self):
        return 0.0 if self.cache is None else self.cache.jitter

    @property
    def shift(self):
        """c of Q' = float32(K - c) + c 1 1^T + jitter I (kernel_cache's storage)."""
        return 0.0 if self.cache is None else self.cache.shift

    @property
    def in_memory(self):
        return True if self.cache is None else self.cache.all_in_memory

    def close(self):
        if self.cache is not None:
            self.cache.close()


def train_exact(ds, *, valid=None, C=(1.0,), kernel="rbf", gamma=None, degree=3, coef0=1.0, normalize="none",
                tol=1e-3, max_iter=1000, gap_tol=EXACT_GAP_TOL, memory_budget="2GB", pair_cost=None, query_weight=None,
                select_metric="meanndcg", checkpoint=None, resume=False, seed=0, block_bytes=None, queries=None,
                cache_dir=None, precondition="auto", landmarks=DEFAULT_LANDMARKS, executor=None,
                loss="squared_hinge", eta=None, solver="tron", abs_gtol=None, abs_dtol=None, features=None,
                convention="letor4"):
    """Train exact kernel RankSVM on an open dataset; return (LinearModel with an ExactKernelMap, summary).

    ``loss``, ``eta``: as in :func:`~streamrank.training.linear.train_linear` (paper 001's smooth
    hinge over beta, paper 004's problem with p(m)^2 for max(0, m)^2). ``solver``: ``tron`` or
    ``newton_yuan`` (paper 001; its directions by preconditioned CG, the l x l Hessian is not formed).
    ``gamma``: one value or several (then ``valid`` chooses), None for 1 / n_features.
    ``block_bytes``: bytes of a stored block of Q (default from the budget); the model does not
    depend on it, nor on ``memory_budget``. ``cache_dir``: where Q is stored when it does not fit
    in memory (default ``$XDG_CACHE_HOME/streamrank``), and where a stored Q is found again by
    later runs (given explicitly, Q is always stored there). ``precondition``: ``auto`` or ``on``
    precondition CG with a Nystroem approximation of Q from ``landmarks`` rows (``"auto"``:
    10 sqrt(l) in thousands, 500 to 4,000; :mod:`streamrank.objectives.kernel_precond`), ``off`` runs
    plain CG (as ``landmarks=0``). ``executor``: what runs the passes
    (:mod:`streamrank.execution.executor`; None: in this process). ``gap_tol``: stop (in place of
    ``tol``'s rule) once the estimated relative objective gap (the preconditioner's Newton decrement:
    :func:`streamrank.solvers.tron.relative_gap`) is at most this (default
    :data:`~streamrank.params.EXACT_GAP_TOL`); None or ``"off"``: ``tol``'s gradient rule. ``convention``: the gains of
    ``select_metric`` (letor4 or standard).
    """
    t_start = time.perf_counter()
    check_queries(ds, queries)
    ds, valid, feature_cols, input_width = with_features(ds, valid, features)
    settings, refine = exact_settings(
        ds, valid, C=C, kernel=kernel, gamma=gamma, degree=degree, coef0=coef0, precondition=precondition,
        landmarks=landmarks, solver=solver, memory_budget=memory_budget, normalize=normalize, tol=tol,
        max_iter=max_iter, gap_tol=gap_tol, block_bytes=block_bytes, pair_cost=pair_cost, query_weight=query_weight,
        select_metric=select_metric, seed=seed, queries=queries, loss=loss, eta=eta, abs_gtol=abs_gtol,
        abs_dtol=abs_dtol, convention=convention)
    points = check_data(ds, valid, select_metric, settings["C_path"], settings["gamma_path"])
    problem, rows = exact_problem(ds, valid, settings, query_range(ds, queries), executor)
    path = ExactPath(problem, rows, gram_plan(problem, rows, settings, cache_dir), settings)
    res = run_settings(path, points, settings, validate=valid is not None, checkpoint=checkpoint, resume=resume,
                       fingerprint=ds.fingerprint, refine=refine)
    model, summary = exact_model(problem, settings, res, path, t_start)
    return attach_features(model, feature_cols, input_width), summary


def exact_settings(ds, valid, *, C, kernel, gamma, degree, coef0, precondition, landmarks, solver, memory_budget,
                   **common):
    """(the checked settings of an exact kernel run on ``ds``, read-only: the config its model
    records; the two-stage rule's refine function or None). The kernel's settings as
    :func:`~streamrank.features.kernels.check_psd_kernel` reads them (Q must be PSD); ``landmarks``
    0 without a preconditioner. ``common``: :func:`~streamrank.training.problem.base_config`'s."""
    Cs, refine = c_path(C)
    gammas = [None] if gamma is None else params.check_all("gamma", gamma)
    d = ds.n_features
    gammas = [check_psd_kernel(kernel, g, degree, coef0, d)[1] for g in gammas]
    kernel, _, degree, coef0 = check_psd_kernel(kernel, gammas[0], degree, coef0, d)
    budget = budget_bytes(memory_budget)
    if precondition not in ("auto", "on", "off"):
        raise ParameterError(f"precondition must be one of auto, on, off; got {precondition!r}. Use precondition=on")
    if precondition == "off" or kernel == "linear":
        landmarks = 0
    elif landmarks == "auto":
        q0, q1 = query_range(ds, common["queries"])
        landmarks = auto_landmarks(int(ds.query_ptr[q1] - ds.query_ptr[q0]))
    if solver not in ("tron", "newton_yuan"):
        raise ParameterError(f"method=exact is solved by tron or newton_yuan; got solver={solver!r}. Use solver=tron")
    cfg = {"method": "exact", "solver": solver,
           **base_config(Cs=Cs, refine=refine, memory_budget=budget, valid=valid, **common),
           "kernel": kernel, "gamma_path": gammas, "degree": degree, "coef0": coef0, "landmarks": int(landmarks)}
    check_config(cfg)
    return frozen(cfg), refine


@dataclass(frozen=True, eq=False)
class KernelRows:
    """An exact kernel run's training rows, read once and kept: ``Xn`` (l, d) normalised float64,
    their label ranks (int32), their queries' offsets ``qp`` from 0, and ``raw_block``, the bytes
    of a block of raw rows read (statistics, validation)."""

    Xn: np.ndarray
    rank: np.ndarray
    qp: np.ndarray
    raw_block: int

    @property
    def l(self):
        return len(self.rank)


def exact_problem(ds, valid, settings, queries, executor):
    """(the run's :class:`~streamrank.training.problem.Problem`, its :class:`KernelRows`): the
    normaliser fitted on the training queries, their rows read once (one pass), their labels'
    weights and costs, the validation labels."""
    raw_block = memplan.raw_block_bytes(settings["memory_budget"], ds)
    normalizer = fit_normalizer(ds, settings["normalize"], queries, raw_block, executor)
    Xn, y, qp = read_rows(ds, normalizer, queries, raw_block, executor=executor)
    levels, mu, cost, weight_sum = label_weights(y, qp, settings["query_weight"], settings["pair_cost"],
                                                 settings["loss"])
    problem = Problem(ds=ds, valid=valid, queries=queries, levels=levels, mu=mu, cost=cost, loss=settings["loss"],
                      eta=settings["eta"], weight_sum=weight_sum, normalizer=normalizer,
                      valid_y=read_labels(valid) if valid is not None else None, executor=executor)
    return problem, KernelRows(Xn, np.searchsorted(levels, y).astype(np.int32), qp, raw_block)


@dataclass(frozen=True)
class GramPlan:
    """How Q is held (:func:`~streamrank.training.memory_plan.exact_kernel_plan`): stored blocks of
    ``qblock`` bytes, ``tier`` bytes of them in memory, the rest under ``where`` (None: memory
    only), computed on ``tile_threads``; ``key``: what identifies a stored Q besides its kernel;
    ``valid_bytes``: the validation rows' kernel values kept per gamma (0: not kept)."""

    qblock: int
    tier: int
    tile_threads: object
    where: object
    key: dict
    valid_bytes: int = 0


def gram_plan(problem, rows, settings, cache_dir):
    """The run's :class:`GramPlan` inside its memory budget; Q goes under ``cache_dir`` (default
    :func:`default_cache_dir` when it does not fit in memory)."""
    l, ds, normalizer = rows.l, problem.ds, problem.normalizer
    budget = settings["memory_budget"]
    valid_bytes = memplan.exact_valid_bytes(l, ds.n_features, budget, problem.valid, settings["block_bytes"],
                                            settings["landmarks"], loss=settings["loss"])
    qblock, tier, tile_threads = memplan.exact_kernel_plan(l, ds.n_features, budget, settings["block_bytes"],
                                                           settings["landmarks"], loss=settings["loss"],
                                                           with_threads=True, extra=valid_bytes)
    where = cache_dir
    if where is None and not (settings["kernel"] == "linear" or tier >= 4 * l * l):
        where = default_cache_dir()
        log.info("Q (%s) does not fit in the memory budget: stored under %s (use cache_dir=DIR to choose)",
                 format_size(4 * l * l), where)
    if valid_bytes:
        log.info("validation rows' kernel values K(x, X) kept for each gamma's C path: %s", format_size(valid_bytes))
    key = {"dataset": ds.fingerprint, "queries": list(problem.queries), "normalize": normalizer.kind,
           "normalize_arrays": array_digest(*[a for a in (normalizer.mean_, normalizer.scale_) if a is not None])}
    return GramPlan(qblock, tier, tile_threads, where, key, valid_bytes)


class ExactPath(Method):
    """Exact kernel RankSVM on the training path: Q of each gamma (:class:`_Gram`), a
    :class:`KernelObjective` over beta per C, solved by TRON or Newton-Yuan."""

    def __init__(self, problem, rows, plan, settings):
        self.problem, self.rows, self.plan, self.settings = problem, rows, plan, settings
        self.build_seconds = self.precond_seconds = 0.0
        self.in_memory = self.jitter = self.shift = None
        self.mapped_valid = None  # (gamma index, MappedValidation) of the open gamma

    def open(self, gi):
        s, p, r, g = self.settings, self.problem, self.rows, self.plan
        gram = _Gram(r.Xn, r.qp, r.rank, p.cost, p.mu, kernel=s["kernel"], gamma=s["gamma_path"][gi],
                     degree=s["degree"], coef0=s["coef0"], key=g.key, qblock=g.qblock, tier=g.tier, where=g.where,
                     landmarks=s["landmarks"], seed=s["seed"], executor=p.executor, tile_threads=g.tile_threads,
                     rkhs=s["solver"] == "tron")
        self.build_seconds += gram.build_seconds
        self.precond_seconds += gram.precond_seconds
        return gram

    def close(self, gram):
        self.in_memory, self.jitter, self.shift = gram.in_memory, gram.jitter, gram.shift
        self.mapped_valid = None  # the next gamma's Q is built without this one's validation rows
        gram.close()

    def start(self, gi):
        return np.zeros(self.rows.l)

    def prepare(self, gram, gi, C, w):
        s, ck = self.settings, self.problem.point_cost(C)
        log.info("C=%g: exact kernel %s%s eps=%g on %d rows, %d queries", C, s["solver"],
                 f" (smooth hinge, eta {ck.eta:.3g})" if ck.eta else "", s["tol"], self.rows.l, self.problem.n_queries)
        kw = {}
        if gram.precond is not None:  # TRON: CG in the RKHS norm (tron.RKHSMetric); Newton-Yuan: M ~ H in beta
            kw["precondition"] = "rkhs" if s["solver"] == "tron" else True
        if s["solver"] == "newton_yuan":
            kw.update(gtol_abs=s["abs_gtol"], dtol_abs=s["abs_dtol"])
        else:  # Q's spread spectrum: CG also ends once the model stops decreasing (tron._trpcg)
            kw["cg_stop"] = "quadratic"
        return gram.objective(C, ck), tron if s["solver"] == "tron" else newton_yuan, kw

    def gamma(self, gi):
        return self.settings["gamma_path"][gi]

    def point_info(self, gi, C):
        return self.problem.point_info(C)

    def kernel_map(self, gi, rows=slice(None)):
        """The kernel map of gamma ``gi`` over the training rows ``rows`` (the model's support)."""
        s = self.settings
        return ExactKernelMap(self.rows.Xn[rows], s["kernel"], s["gamma_path"][gi], s["degree"], s["coef0"])

    def score(self, beta, gi):
        """The validation score of beta: float32 K(x, X) . beta per validation row, from the kernel
        values kept for gamma ``gi`` when the plan has room for them (the same tiles and
        row sums as :func:`validation_score`, so the same bits), else computed again."""
        p, s = self.problem, self.settings
        model = LinearModel(beta, p.normalizer, n_features=p.ds.n_features, fmap=self.kernel_map(gi))
        kw = dict(block_bytes=self.rows.raw_block, executor=p.executor, convention=s.get("convention", "letor4"))
        if not self.plan.valid_bytes:
            return validation_score(model, p.valid, p.valid_y, s["select_metric"], **kw)
        if self.mapped_valid is None or self.mapped_valid[0] != gi:
            self.mapped_valid = None
            self.mapped_valid = (gi, MappedValidation(model, p.valid, p.valid_y, s["select_metric"], wide=True, **kw))
        return self.mapped_valid[1].score(model)


def exact_model(problem, settings, res, path, t_start):
    """(the chosen point's LinearModel over its support rows, the run's summary) after the path
    ``res`` of ``path``."""
    beta = np.asarray(res.w, np.float64)
    support = np.flatnonzero(beta)
    summary = {**res.summary(), "cg_steps": sum(c["cg_steps"] for c in res.candidates),
               "seconds": time.perf_counter() - t_start, "kernel_seconds": path.build_seconds,
               "precondition_seconds": path.precond_seconds, "jitter": path.jitter, "kernel_shift": path.shift,
               "method": "exact", "solver": settings["solver"], "kernel": settings["kernel"],
               "in_memory": path.in_memory, "support": int(support.size), "landmarks": settings["landmarks"]}
    report_grid_edges(summary, sorted({c["C"] for c in res.candidates}), settings["gamma_path"])
    model = LinearModel(beta[support], problem.normalizer, n_features=problem.ds.n_features,
                        fmap=path.kernel_map(res.points[res.best][0], support), config={**settings, **res.decided},
                        training=summary, fingerprint=problem.ds.fingerprint, levels=problem.levels)
    return model, summary
