"""Training runs: the C path with warm starts, validation, checkpoints and resume.

One run = prepare the data once (label levels, query weights, normaliser), then for each C in
increasing order solve with TRON from the previous solution (LIBLINEAR's warm-started C path),
score the validation data, and keep the best model by ``select_metric``. After every TRON
iteration a checkpoint holds everything to continue: the path position, the finished
candidates, and the solver state.
"""

import logging
import time

import numpy as np

from streamrank._native import pairkernels as pk
from streamrank.state.checkpoint import read_checkpoint, write_checkpoint
from streamrank.errors import ParameterError
from streamrank.io.info import preference_pairs_per_query
from streamrank.evaluation.metrics import evaluate
from streamrank.state.model import LinearModel
from streamrank.features.normalize import Normalizer
from streamrank.objectives.rank_objective import BlockSource, RankObjective
from streamrank.solvers.newton import newton_cholesky
from streamrank.solvers.tron import TronState, tron
from streamrank.units import parse_size

log = logging.getLogger("streamrank.training.linear")

SELECT_METRICS = ("meanndcg", "ndcg@10", "map")
QUERY_WEIGHTS = ("none", "log_ratio")
SOLVERS = ("auto", "tron", "newton_cholesky")
PAIR_COSTS = ("none", "gain_difference")
# share of --memory-budget for mapped float64 blocks kept in memory between passes
MEMORY_TIER_SHARE = 0.5
# settings a resumed run may change: the model does not depend on them (block-independent sums;
# more iterations simply continue)
RESUMABLE_CHANGES = ("memory_budget", "block_bytes", "max_iter")


def read_labels(ds):
    y = np.empty(ds.n_rows, np.float32)
    if ds.n_rows:
        ds.y.read_direct(y)
    return y


def query_weights(kind, y, query_ptr):
    """mu_q: 1, or paper 001's ln(1 + max_q' |P_q'| / |P_q|) (0 for a query without pairs)."""
    if kind in (None, "none"):
        return np.ones(len(query_ptr) - 1)
    if kind == "log_ratio":
        p = preference_pairs_per_query(y, query_ptr).astype(np.float64)
        mu = np.zeros_like(p)
        has = p > 0
        mu[has] = np.log1p(p.max() / p[has])
        return mu
    raise ParameterError(f"query_weight must be one of {', '.join(QUERY_WEIGHTS)}; got {kind!r}")


def pair_cost_table(kind, levels):
    """lambda over label ranks: 1 everywhere, or the gain difference (2^y_i - 1) - (2^y_j - 1)."""
    L = len(levels)
    if kind is None or (isinstance(kind, str) and kind == "none"):
        return np.ones((L, L))
    if isinstance(kind, str):
        if kind == "gain_difference":
            g = 2.0 ** np.asarray(levels) - 1.0
            return np.subtract.outer(g, g)
        raise ParameterError(f"pair_cost must be one of {', '.join(PAIR_COSTS)} or an L x L table; got {kind!r}")
    lam = np.asarray(kind, np.float64)
    if lam.shape != (L, L):
        raise ParameterError(f"pair_cost table must be {L} x {L} (one row and column per label level "
                             f"{list(levels)}); got shape {lam.shape}")
    return lam


def tron_state_from_checkpoint(ck):
    """The TronState a checkpoint holds (scalars written by :func:`checkpoint_scalars`)."""
    sc = ck["scalars"]
    return TronState(w=ck["w"], f=sc["f"], g=ck["g"], delta=sc["delta"], gnorm0=sc["gnorm0"],
                     iteration=sc["iteration"], n_steps=sc["n_steps"], n_cg=sc["n_cg"],
                     n_fun=sc["n_fun"], n_grad=sc["n_grad"], n_hessp=sc["n_hessp"],
                     seconds=sc["seconds"], history=[tuple(h) for h in sc["history"]],
                     converged=sc.get("converged", False), message=sc.get("message", ""))


def checkpoint_scalars(st, **extra):
    """The JSON scalars of TronState ``st`` for a checkpoint, with the caller's ``extra``."""
    return {"f": st.f, "delta": st.delta, "gnorm0": st.gnorm0, "iteration": st.iteration,
            "n_steps": st.n_steps, "n_cg": st.n_cg, "n_fun": st.n_fun, "n_grad": st.n_grad,
            "n_hessp": st.n_hessp, "seconds": st.seconds, "history": st.history,
            "converged": st.converged, "message": st.message, **extra}


def resume_point(checkpoint, config, fingerprint, points):
    """(candidates, path_w, path index, TronState or None, passes so far) from the checkpoint in
    directory ``checkpoint`` (None: start afresh); ``points`` are the path's (gamma index, C)."""
    if checkpoint:
        ck = read_checkpoint(checkpoint, config=config, fingerprint=fingerprint, warn=log.warning)
        if ck is not None:
            sc = ck["scalars"]
            state = tron_state_from_checkpoint(ck)
            log.info("resuming from %s: C=%g, iteration %d", ck["path"], points[sc["C_index"]][1], state.iteration)
            return (sc["candidates"], [ck["extra"][f"w{i}"] for i in range(len(sc["candidates"]))], sc["C_index"],
                    state, sc["passes"])
        log.info("no checkpoint in %s: starting from scratch", checkpoint)
    return [], [], 0, None, 0


def iteration_callback(*, checkpoint, config, fingerprint, settings, index, candidates, path_w, counter, passes,
                       validate=None):
    """TRON's callback for point ``index`` of a path: ``validate(state)`` (a log line), then a
    checkpoint (numbered by ``counter``) holding the solver state, the finished candidates and
    the solutions ``path_w`` of the earlier points."""
    def on_iteration(st):
        if validate is not None:
            validate(st)
        if checkpoint:
            counter[0] += 1
            scal = checkpoint_scalars(st, C_index=index, candidates=candidates, passes=passes(), settings=settings)
            write_checkpoint(checkpoint, config=config, fingerprint=fingerprint, scalars=scal, w=st.w, g=st.g,
                             extra={f"w{i}": v for i, v in enumerate(path_w)}, number=counter[0])
    return on_iteration


def finish_point(st, *, C, gamma, passes, candidates, path_w, valid=None):
    """Record a solved path point: its candidate entry (with ``valid`` = (key, score)) and w."""
    cand = {"C": C, "gamma": gamma, "objective": st.f, "grad_norm": st.gnorm, "iterations": st.iteration,
            "cg_steps": st.n_cg, "passes": passes, "seconds": st.seconds, "message": st.message}
    if valid is not None:
        cand[valid[0]] = valid[1]
    candidates.append(cand)
    path_w.append(st.w.copy())
    log.info("C=%g done: f %.6e |g| %.3e, %d iterations, %d CG steps, %s", C, st.f, st.gnorm, st.iteration,
             st.n_cg, st.message)


def grid_edges(Cs, gammas, C, gamma):
    """The grid edges the chosen (C, gamma) sits on, as (name, "smallest"|"largest") pairs: a
    grid of one value has no edge; a chosen value at an edge means the best may lie beyond it."""
    edges = []
    for name, grid, value in (("C", Cs, C), ("gamma", gammas, gamma)):
        grid = [g for g in grid if g is not None]
        if len(grid) > 1 and value is not None:
            if value <= min(grid):
                edges.append((name, "smallest"))
            elif value >= max(grid):
                edges.append((name, "largest"))
    return edges


def report_grid_edges(summary, Cs, gammas):
    """Put ``at_grid_edge`` (and ``grid_edge``, e.g. ["C smallest"]) into ``summary`` and log a
    warning when the chosen point is at the edge of its grid."""
    edges = grid_edges(Cs, gammas, summary["C"], summary.get("gamma"))
    summary["at_grid_edge"] = bool(edges)
    summary["grid_edge"] = [f"{name} {side}" for name, side in edges]
    for name, side in edges:
        value = summary[name]
        log.warning("the chosen %s=%g is the %s value of its grid: the best %s may lie beyond it; extend the grid "
                    "past %g", name, value, side, name, value)
    return summary


def _metric_value(report, name):
    m = report.means
    return {"meanndcg": m["MeanNDCG"], "ndcg@10": m["NDCG@10"], "map": m["MAP"]}[name]


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


def check_config(cfg):
    for name in ("C_path",):
        for C in cfg[name]:
            if not C > 0:
                raise ParameterError(f"C must be > 0; got {C}. Use C=0.5")
    if not cfg["tol"] > 0:
        raise ParameterError(f"tol must be > 0; got {cfg['tol']}. Use tol=1e-3")
    if int(cfg["max_iter"]) < 1:
        raise ParameterError(f"max_iter must be >= 1; got {cfg['max_iter']}. Use max_iter=1000")
    if cfg["select_metric"] not in SELECT_METRICS:
        raise ParameterError(f"select_metric must be one of {', '.join(SELECT_METRICS)}; got {cfg['select_metric']!r}")


METHODS = ("primal", "nystroem", "rff")
MAP_CACHE_MODES = ("auto", "memory", "cache", "recompute")
PRECONDITION_MODES = ("auto", "on", "off")


def train_linear(ds, *, valid=None, C=(1.0,), normalize="none", tol=1e-3, max_iter=1000,
                 memory_budget="2GB", pair_cost=None, query_weight=None, select_metric="meanndcg",
                 checkpoint=None, resume=False, seed=0, block_bytes=None, queries=None, solver="tron",
                 method="primal", kernel="rbf", gamma=None, degree=3, coef0=1.0, components=1000, rank=None,
                 cache_dir=None, map_cache="auto", cache_size=None, precondition="auto"):
    """Train a RankSVM on an open dataset; return (LinearModel, summary dict).

    ``method``: ``primal`` (linear), or ``nystroem`` / ``rff`` (paper 000: a feature map, then the
    same L2-loss RankSVM in the mapped space). Several ``gamma`` values and several ``C`` values form
    a path of (gamma, C) points: each gamma fits its map once (one pass; seeded, so a resumed run
    refits the same map), C runs in increasing order with warm starts, and the best point on
    ``valid`` by ``select_metric`` is kept (``valid`` is required when there are several points).
    ``queries``: train on the contiguous query range [q0, q1) only (tests, subsets).
    ``map_cache``: keep mapped rows in memory, on disk under ``cache_dir``, or recompute them each
    pass (``auto`` decides from the budget and measured rates; the values are the same).
    ``cache_size``: cap on the bytes of all feature caches in ``cache_dir`` (least recently used
    blocks are evicted; None: no cap).
    ``precondition``: TRON's CG with the sampled-Hessian preconditioner of
    :mod:`streamrank.objectives.linear_precond` (``on``), without (``off``), or ``auto``: by
    ``precondition.worth_it`` (linear RankSVM always; feature maps when building the
    preconditioner costs little against a pass).
    """
    t_start = time.perf_counter()
    Cs = sorted(float(c) for c in (C if np.ndim(C) else [C]))
    if method not in METHODS:
        raise ParameterError(f"method must be one of {', '.join(METHODS)}; got {method!r}. Use method=nystroem")
    if precondition not in PRECONDITION_MODES:
        raise ParameterError(f"precondition must be one of {', '.join(PRECONDITION_MODES)}; got {precondition!r}. "
                             f"Use precondition=auto")
    if map_cache not in MAP_CACHE_MODES:
        raise ParameterError(f"map_cache must be one of {', '.join(MAP_CACHE_MODES)}; got {map_cache!r}")
    if method == "primal":
        gammas = [None]
    else:
        gammas = [None] if gamma is None else [float(g) for g in (gamma if np.ndim(gamma) else [gamma])]
        for g in gammas:
            if g is not None and not g > 0:
                raise ParameterError(f"gamma must be > 0; got {g}. Use gamma=0.03125")
    budget = parse_size(memory_budget)
    if solver not in SOLVERS:
        raise ParameterError(f"solver must be one of {', '.join(SOLVERS)}; got {solver!r}. Use solver=tron")
    cfg = {"method": method, "solver": solver, "C_path": Cs, "normalize": normalize, "tol": float(tol),
           "max_iter": int(max_iter), "memory_budget": budget, "block_bytes": block_bytes,
           "pair_cost": pair_cost if isinstance(pair_cost, (str, type(None))) else np.asarray(pair_cost).tolist(),
           "query_weight": query_weight, "select_metric": select_metric, "seed": int(seed),
           "precondition": precondition,
           "queries": list(queries) if queries is not None else None,
           "valid_fingerprint": valid.fingerprint if valid is not None else None}
    if method != "primal":
        cfg.update({"kernel": kernel, "gamma_path": gammas, "degree": int(degree), "coef0": float(coef0),
                    "components": int(components), "rank": rank})
    check_config(cfg)
    points = [(gi, c) for gi in range(len(gammas)) for c in Cs]
    if len(points) > 1 and valid is None:
        raise ParameterError(f"several C (and gamma) values need validation data (valid=DATA) to choose between them; "
                             f"got C = {', '.join(map(str, Cs))}" + (f", gamma = {gammas}" if len(gammas) > 1 else ""))
    if not block_bytes:
        from streamrank.training import memory_plan as memplan
        from streamrank.objectives.linear_precond import temp_bytes
        n_train = int(ds.query_ptr[queries[1]] - ds.query_ptr[queries[0]]) if queries is not None else ds.n_rows
        widest = max([ds.n_features] + ([] if method == "primal" else [int(components)]))
        block_bytes = memplan.block_bytes(budget, n_train, extra=temp_bytes(widest))
    block_bytes = int(block_bytes)

    # -- one-time preparation: labels, weights, costs, normaliser ------------------------------------
    y_all = read_labels(ds)
    q0, q1 = queries if queries is not None else (0, ds.n_queries)
    qp = ds.query_ptr
    levels = np.unique(y_all[qp[q0]:qp[q1]])
    mu = np.zeros(ds.n_queries)
    mu[q0:q1] = query_weights(query_weight, y_all[qp[q0]:qp[q1]], qp[q0:q1 + 1] - qp[q0])
    del y_all
    cost = pk.pair_cost(pair_cost_table(pair_cost, levels))
    normalizer = Normalizer(normalize)
    if normalize == "zscore":
        normalizer.fit((b.X for b, _, _ in ds.stream(block_bytes=block_bytes, queries=(q0, q1))), ds.n_features)
    valid_y = read_labels(valid) if valid is not None else None
    maps = {}

    def feature_map(gi):
        """The fitted map of gamma number gi (None for the linear model), fitted once."""
        if method == "primal":
            return None
        if gi not in maps:
            from streamrank.features.maps import make_map
            t = time.perf_counter()
            fm = make_map(method, kernel=kernel, gamma=gammas[gi], degree=degree, coef0=coef0,
                          n_components=components, rank=rank, seed=seed)
            fm.fit(ds, queries=(q0, q1), block_bytes=block_bytes, normalizer=normalizer)
            log.info("%s map (%s kernel, gamma %s): %d features from %d, fitted in %.2f s", method, kernel,
                     f"{fm.gamma_:g}" if getattr(fm, "gamma_", None) else "default", fm.n_components_,
                     ds.n_features, time.perf_counter() - t)
            maps[gi] = fm
        return maps[gi]

    def make_source(gi):
        fm = feature_map(gi)
        if fm is None:
            return BlockSource(ds, normalizer, block_bytes=block_bytes, memory_bytes=int(budget * MEMORY_TIER_SHARE),
                               queries=(q0, q1), levels=levels)
        from streamrank.objectives.mapped_source import MappedSource
        return MappedSource(ds, fm, normalizer, block_bytes=block_bytes, memory_bytes=int(budget * MEMORY_TIER_SHARE),
                            queries=(q0, q1), levels=levels, cache_dir=cache_dir, mode=map_cache,
                            cache_size=cache_size)

    def width(gi):
        fm = feature_map(gi)
        return ds.n_features if fm is None else int(fm.n_components_)

    def score_valid(w, gi):
        model = LinearModel(w, normalizer, n_features=ds.n_features, fmap=feature_map(gi))
        s = np.empty(valid.n_rows)
        for block, a, b in valid.stream(block_bytes=block_bytes):
            s[a:b] = model.decision_function(block.X, block.query_ptr, row0=a)
        rep = evaluate(valid_y, s, valid.query_ptr, qid=None)
        return _metric_value(rep, select_metric)

    # -- resume ----------------------------------------------------------------------------------------
    ck_cfg = {k: v for k, v in cfg.items() if k not in RESUMABLE_CHANGES}
    candidates, path_w, start_index, tron_state, passes0 = resume_point(checkpoint if resume else None, ck_cfg,
                                                                        ds.fingerprint, points)

    # -- the path of (gamma, C) points ----------------------------------------------------------------
    n_ck = [0]
    source, source_gi, total_passes, read_s = None, None, passes0, 0.0
    for k in range(start_index, len(points)):
        gi, Ck = points[k]
        if source_gi != gi:
            if source is not None:
                total_passes += source.passes
                read_s += source.read_seconds
            source, source_gi = make_source(gi), gi
            if k == start_index:
                source.passes = 0
        m = width(gi)
        # warm start from the previous point of the same gamma
        w = (np.asarray(path_w[k - 1], np.float64) if k > 0 and points[k - 1][0] == gi and len(path_w) >= k
             else np.zeros(m))
        if tron_state is not None:
            w = tron_state.w
        if solver == "auto":
            solver, why = choose_solver(RankObjective(source, m, C=Ck, cost=cost, mu=mu), w)
            cfg["solver_chosen"] = solver
            log.info("solver auto: %s (%s)", solver, why)
        obj = RankObjective(source, m, C=Ck, cost=cost, mu=mu, keep_scores=solver != "tron")
        log.info("C=%g: %s eps=%g on %d rows, %d queries, %d features (%s)", Ck, solver, tol, source.n_rows,
                 q1 - q0, m, f"rows kept in memory, {source.memory_bytes / 1e6:.0f} MB" if source.in_memory
                 else f"rows {'re-mapped' if method != 'primal' else 're-read'} every pass in "
                      f"{len(source.stream)} blocks")

        on_iteration = iteration_callback(
            checkpoint=checkpoint, config=ck_cfg, fingerprint=ds.fingerprint, settings=cfg, index=k,
            candidates=candidates, path_w=path_w, counter=n_ck, passes=lambda: total_passes + source.passes,
            validate=None if valid is None else (lambda st, Ck=Ck, gi=gi: log.info(
                "    C=%g iter %d: validation %s %.4f", Ck, st.iteration, select_metric, score_valid(st.w, gi))))

        kw = {}
        if solver == "tron":
            from streamrank.objectives.linear_precond import worth_it
            kw["precondition"] = precondition == "on" or (precondition == "auto" and worth_it(source.n_rows, width(gi)))
        solve = tron if solver == "tron" else newton_cholesky
        st = solve(obj, w, eps=tol, max_iter=max_iter, state=tron_state, callback=on_iteration,
                   describe=lambda: f"passes {total_passes + source.passes}", **kw)
        tron_state = None
        finish_point(st, C=Ck, gamma=None if method == "primal" else feature_map(gi).gamma_,
                     passes=total_passes + source.passes, candidates=candidates, path_w=path_w,
                     valid=None if valid is None else ("valid_" + select_metric, score_valid(st.w, gi)))
    total_passes += source.passes if source is not None else 0
    read_s += source.read_seconds if source is not None else 0.0

    key = "valid_" + select_metric
    best = max(range(len(points)), key=lambda i: candidates[i].get(key, 0.0)) if valid is not None else len(points) - 1
    chosen = candidates[best]
    fmap = feature_map(points[best][0])
    summary = {"objective": chosen["objective"], "grad_norm": chosen["grad_norm"],
               "iterations": sum(c["iterations"] for c in candidates), "passes": total_passes,
               "seconds": time.perf_counter() - t_start, "read_seconds": read_s, "method": method, "solver": solver,
               "C": chosen["C"], "gamma": chosen["gamma"], "in_memory": source.in_memory if source else None,
               "candidates": candidates}
    report_grid_edges(summary, Cs, gammas)
    if method != "primal":
        summary["components"] = int(fmap.n_components_)
        summary["map_storage"] = source.mode if points[best][0] == source_gi else None
    model = LinearModel(path_w[best], normalizer, n_features=ds.n_features, fmap=fmap, config=cfg, training=summary,
                        fingerprint=ds.fingerprint, levels=levels)
    return model, summary


train = train_linear
