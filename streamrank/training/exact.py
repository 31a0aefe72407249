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
from pathlib import Path

import numpy as np

from streamrank import params
from streamrank._native import pairkernels as pk
from streamrank.errors import ParameterError
from streamrank.execution.executor import executor_or_local, partitioned_stream
from streamrank.features.exact_map import ExactKernelMap
from streamrank.cache.feature_cache import array_digest
from streamrank.objectives.kernel_objective import KernelObjective, LinearKernelObjective
from streamrank.objectives.kernel_precond import DEFAULT_LANDMARKS, NystroemPreconditioner, auto_landmarks
from streamrank.cache.kernel_cache import KernelCache, RoundingBounds, read_rows
from streamrank.features.kernels import check_psd_kernel
from streamrank.io.budget import release_freed
from streamrank.state.model import LinearModel
from streamrank.features.normalize import Normalizer
from streamrank.training import memory_plan as memplan
from streamrank.training.path import Method, report_grid_edges, run_settings
from streamrank.training.problem import (attach_features, c_path, check_config, check_has_features, check_queries,
                                        check_validation_labels, check_valid_width, eta_for, grid_points, pair_cost_table, pair_weight_sum,
                                        query_weights, read_labels, validation_score, with_features)
from streamrank.solvers.newton_yuan import newton_yuan
from streamrank.solvers.tron import tron
from streamrank.units import format_size, parse_size

log = logging.getLogger("streamrank.training.exact")

def default_cache_dir():
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "streamrank"


class _Gram:
    """Q for one gamma: a built KernelCache and its preconditioner, or X X^T for the linear kernel."""

    def __init__(self, Xn, qp, rank, cost, mu, *, kernel, gamma, degree, coef0, key, qblock, tier, where, landmarks,
                 seed, executor=None, tile_threads=None):
        self.executor = executor
        self.Xn, self.qp, self.rank, self.cost, self.mu = Xn, qp, rank, cost, mu
        self.cache, self.precond, self.counter = None, None, None
        self.build_seconds = self.precond_seconds = 0.0
        if kernel == "linear":  # Q = X X^T in float64, never stored (paper 004 sec. 3.3)
            self.counter = LinearKernelObjective(Xn, rank, qp, C=1.0, cost=cost, mu=mu).source
            return
        self.cache = c = KernelCache(Xn, qp, kernel=kernel, gamma=gamma, degree=degree, coef0=coef0,
                                     key_material=key, block_bytes=qblock, memory_bytes=tier, cache_dir=where,
                                     partition_rows=executor_or_local(executor).partition_rows,
                                     tile_threads=tile_threads)
        if landmarks:  # before Q: its float64 temporaries are freed before the tier of Q fills memory
            t = time.perf_counter()
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
        if self.precond is not None:  # the jitter is known once every block of Q has been seen
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
        return KernelObjective(self.cache, self.rank, C=C, cost=cost, mu=self.mu,
                               executor=self.executor).set_preconditioner(self.precond)

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
                tol=1e-3, max_iter=1000, gap_tol=None, memory_budget="2GB", pair_cost=None, query_weight=None,
                select_metric="meanndcg", checkpoint=None, resume=False, seed=0, block_bytes=None, queries=None,
                cache_dir=None, precondition="auto", landmarks=DEFAULT_LANDMARKS, executor=None,
                loss="squared_hinge", eta=None, solver="tron", abs_gtol=None, abs_dtol=None, features=None):
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
    :func:`streamrank.solvers.tron.relative_gap`) is at most this.
    """
    t_start = time.perf_counter()
    check_queries(ds, queries)
    ds, valid, feature_cols, input_width = with_features(ds, valid, features)
    Cs, refine = c_path(C)
    gammas = [None] if gamma is None else params.check_all("gamma", gamma)
    d = ds.n_features
    gammas = [check_psd_kernel(kernel, g, degree, coef0, d)[1] for g in gammas]
    kernel, _, degree, coef0 = check_psd_kernel(kernel, gammas[0], degree, coef0, d)
    budget = parse_size(memory_budget)
    if precondition not in ("auto", "on", "off"):
        raise ParameterError(f"precondition must be one of auto, on, off; got {precondition!r}. Use precondition=on")
    if precondition == "off" or kernel == "linear":
        landmarks = 0
    elif landmarks == "auto":
        q0_, q1_ = queries if queries is not None else (0, ds.n_queries)
        landmarks = auto_landmarks(int(ds.query_ptr[q1_] - ds.query_ptr[q0_]))
    if solver not in ("tron", "newton_yuan"):
        raise ParameterError(f"method=exact is solved by tron or newton_yuan; got solver={solver!r}. Use solver=tron")
    cfg = {"method": "exact", "solver": solver, "C_path": Cs, "kernel": kernel, "gamma_path": gammas,
           "degree": degree, "coef0": coef0, "normalize": normalize, "tol": params.check("tol", tol),
           "max_iter": params.check("max_iter", max_iter),
           **({"gap_tol": params.check("gap_tol", gap_tol)} if gap_tol is not None else {}),  # absent: old checkpoints match
           "memory_budget": budget, "block_bytes": block_bytes,
           "pair_cost": pair_cost if isinstance(pair_cost, (str, type(None))) else np.asarray(pair_cost).tolist(),
           "query_weight": query_weight, "select_metric": select_metric, "seed": params.check("seed", seed),
           "queries": list(queries) if queries is not None else None,
           "valid_fingerprint": valid.fingerprint if valid is not None else None,
           "landmarks": int(landmarks), "loss": loss, "eta": eta, "abs_gtol": abs_gtol, "abs_dtol": abs_dtol}
    if refine is not None:
        cfg["C_rule"] = "two-stage"
    check_config(cfg)
    check_has_features(ds)
    check_valid_width(ds, valid)
    check_validation_labels(valid, select_metric)
    points = grid_points(Cs, gammas, valid)

    # -- the rows, labels, weights, costs ------------------------------------------------------------
    q0, q1 = queries if queries is not None else (0, ds.n_queries)
    raw_block = memplan.raw_block_bytes(budget)
    normalizer = Normalizer(normalize)
    if normalize == "zscore":
        normalizer.fit(partitioned_stream(ds, executor, block_bytes=raw_block, queries=(q0, q1)), d, executor=executor)
    Xn, y, qp = read_rows(ds, normalizer, (q0, q1), raw_block, executor=executor)
    l = len(y)
    levels = np.unique(y)
    rank = np.searchsorted(levels, y).astype(np.int32)
    mu = query_weights(query_weight, y, qp)
    cost = pk.pair_cost(pair_cost_table(pair_cost, levels))
    weight_sum = pair_weight_sum(rank, qp, cost.lam, mu) if cfg["loss"] == "smooth_hinge" else 0.0

    def point_cost(Ck):
        """The costs with the loss of point C (the smooth hinge's eta may depend on C)."""
        return pk.pair_cost(cost, eta=eta_for(cfg["loss"], cfg["eta"], Ck, weight_sum))

    qblock, tier, tile_threads = memplan.exact_kernel_plan(l, d, budget, block_bytes, cfg["landmarks"], loss=cfg["loss"],
                                                           with_threads=True)
    fits = kernel == "linear" or tier >= 4 * l * l
    where = cache_dir
    if where is None and not fits:
        where = default_cache_dir()
        log.info("Q (%s) does not fit in the memory budget: stored under %s (use cache_dir=DIR to choose)",
                 format_size(4 * l * l), where)
    key = {"dataset": ds.fingerprint, "queries": [q0, q1], "normalize": normalizer.kind,
           "normalize_arrays": array_digest(*[a for a in (normalizer.mean_, normalizer.scale_) if a is not None])}
    valid_y = read_labels(valid) if valid is not None else None

    def make_gram(gi):
        return _Gram(Xn, qp, rank, cost, mu, kernel=kernel, gamma=gammas[gi], degree=degree, coef0=coef0, key=key,
                     qblock=qblock, tier=tier, where=where, landmarks=cfg["landmarks"], seed=seed, executor=executor,
                     tile_threads=tile_threads)

    def kmap(gi, rows=slice(None)):
        return ExactKernelMap(Xn[rows], kernel, gammas[gi], degree, coef0)

    def score_valid(beta, gi):
        model = LinearModel(beta, normalizer, n_features=d, fmap=kmap(gi))
        return validation_score(model, valid, valid_y, select_metric, block_bytes=raw_block, executor=executor)

    # -- the path of (gamma, C) points -----------------------------------------------------------------
    class Exact(Method):
        def __init__(self):
            self.build_seconds = self.precond_seconds = 0.0
            self.in_memory = self.jitter = self.shift = None

        def open(self, gi):
            gram = make_gram(gi)
            self.build_seconds += gram.build_seconds
            self.precond_seconds += gram.precond_seconds
            return gram

        def close(self, gram):
            self.in_memory, self.jitter, self.shift = gram.in_memory, gram.jitter, gram.shift
            gram.close()

        def start(self, gi):
            return np.zeros(l)

        def prepare(self, gram, gi, Ck, w):
            ck = point_cost(Ck)
            log.info("C=%g: exact kernel %s%s eps=%g on %d rows, %d queries", Ck, solver,
                     f" (smooth hinge, eta {ck.eta:.3g})" if ck.eta else "", tol, l, q1 - q0)
            kw = {"precondition": True} if gram.precond is not None else {}
            if solver == "newton_yuan":
                kw.update(gtol_abs=abs_gtol, dtol_abs=abs_dtol)
            else:  # Q's spread spectrum: CG also ends once the model stops decreasing (tron._trpcg)
                kw["cg_stop"] = "quadratic"
            return gram.objective(Ck, ck), tron if solver == "tron" else newton_yuan, kw

        def gamma(self, gi):
            return gammas[gi]

        def point_info(self, gi, Ck):
            return {"eta": point_cost(Ck).eta} if cfg["loss"] == "smooth_hinge" else {}

        score = staticmethod(score_valid)

    path = Exact()
    res = run_settings(path, points, cfg, validate=valid is not None, checkpoint=checkpoint, resume=resume,
                       fingerprint=ds.fingerprint, refine=refine)
    build_s, precond_s, in_memory, jitter = path.build_seconds, path.precond_seconds, path.in_memory, path.jitter

    beta = np.asarray(res.w, np.float64)
    support = np.flatnonzero(beta)
    summary = {**res.summary(), "cg_steps": sum(c["cg_steps"] for c in res.candidates),
               "seconds": time.perf_counter() - t_start, "kernel_seconds": build_s, "precondition_seconds": precond_s,
               "jitter": jitter, "kernel_shift": path.shift, "method": "exact", "solver": solver, "kernel": kernel, "in_memory": in_memory,
               "support": int(support.size), "landmarks": cfg["landmarks"]}
    report_grid_edges(summary, sorted({c["C"] for c in res.candidates}), gammas)
    model = LinearModel(beta[support], normalizer, n_features=d, fmap=kmap(res.points[res.best][0], support), config=cfg,
                        training=summary, fingerprint=ds.fingerprint, levels=levels)
    return attach_features(model, feature_cols, input_width), summary
