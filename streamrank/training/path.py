"""The one training path: any method over its hyper-parameter points with warm starts,
validation, checkpoints, resume and the best point's choice.

A path is a list of points (gamma index, C): every gamma's points in increasing C, each solved
from the previous point's solution of the same gamma (a warm start), or from 0 when gamma
changes. A method supplies only what differs between methods, through :class:`Method`: the
resource a gamma needs (a block source, a kernel matrix), the objective and solver of a point, and
its validation score. Checkpoints after every solver iteration hold the solver state, the finished
points and their solutions, so a killed run resumes at the point and iteration it stopped in
and ends with the model of an uninterrupted run.
"""

import contextlib
import logging
import time
from dataclasses import dataclass

import numpy as np

from streamrank._native.blas import one_thread
from streamrank.errors import FormatError, KernelRangeError, NumericError
from streamrank.solvers.tron import TronState
from streamrank.state.checkpoint import read_checkpoint, write_checkpoint

log = logging.getLogger("streamrank.training.path")

# settings a resumed run may change: the model does not depend on them (block-independent sums;
# more iterations simply continue)
RESUMABLE_CHANGES = ("memory_budget", "block_bytes", "max_iter")

# one row per solver iteration in a candidate's "trace" (the convergence plots': objective and
# gradient norm against time and passes, and the validation score when there are validation data)
TRACE_COLUMNS = ("iteration", "seconds", "passes", "objective", "grad_norm", "valid")

# Paper 001's two-stage choice of C (``C="two-stage"``): the decades, then these multiples of the
# best of them (on the validation data)
TWO_STAGE_DECADES = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
TWO_STAGE_FACTORS = (0.6, 0.8, 1.2, 1.4)


# callables told of every path point solved (a grid's progress: streamrank.workflow.grid), innermost last
_POINT_HOOKS = []


@contextlib.contextmanager
def on_points(callback):
    """``with on_points(f):`` f() after every point a path in this block solves (not those a
    resumed run finds solved)."""
    _POINT_HOOKS.append(callback)
    try:
        yield
    finally:
        _POINT_HOOKS.remove(callback)


def two_stage_refine(candidates, points, valid_key):
    """The second stage's points: TWO_STAGE_FACTORS times the first stage's best C, with its gamma."""
    best = max(range(len(points)), key=lambda i: candidates[i].get(valid_key, 0.0))
    gi, C = points[best]
    return [(gi, f * C) for f in TWO_STAGE_FACTORS]


class Method:
    """What a method supplies to :func:`run_path` (override every method but ``fresh``)."""

    def open(self, gi):
        """The resource of gamma number ``gi`` (a block source, a kernel matrix), with ``passes``."""
        raise NotImplementedError

    def close(self, resource):
        """Done with ``resource`` (the path moves to another gamma, or ends)."""

    def fresh(self, resource):
        """The first resource of a (resumed) run: its passes are counted from here."""

    def start(self, gi):
        """The starting point of gamma ``gi``'s first C (zeros of the model's width)."""
        raise NotImplementedError

    def prepare(self, resource, gi, C, w):
        """(objective, solver function, solver keyword arguments) of point (gi, C) from ``w``."""
        raise NotImplementedError

    def gamma(self, gi):
        """The gamma recorded with the candidates (None when the method has none)."""
        return None

    def point_info(self, gi, C):
        """What else a candidate records (e.g. the smooth hinge's eta, which depends on C)."""
        return {}

    def score(self, w, gi):
        """The validation score of solution ``w`` of gamma ``gi``."""
        raise NotImplementedError

    def decided(self):
        """Settings the method chose while running (e.g. ``solver_chosen`` for ``solver=auto``):
        recorded beside the run's settings in its checkpoints and in :attr:`PathResult.decided`."""
        return {}


@dataclass
class PathResult:
    candidates: list   # one dict per point: C, gamma, objective, iterations, ... and the validation score
    path_w: list       # the solution of each point
    best: int          # the chosen point's index
    passes: int        # passes over the data along the whole path (resumed runs included)
    points: list = None  # the (gamma index, C) of each candidate (a second stage's included)
    decided: dict = None  # what the method chose while running (:meth:`Method.decided`)

    @property
    def w(self):
        """The chosen point's solution."""
        return self.path_w[self.best]

    def summary(self):
        """The summary entries every method reports: the chosen point's, and the path's totals."""
        chosen = self.candidates[self.best]
        return {"objective": chosen["objective"], "grad_norm": chosen["grad_norm"], "gap": chosen.get("gap"),
                "gap_kind": chosen.get("gap_kind", ""),
                "iterations": sum(c["iterations"] for c in self.candidates), "passes": self.passes,
                "C": chosen["C"], "gamma": chosen["gamma"], "candidates": self.candidates,
                **({"eta": chosen["eta"]} if "eta" in chosen else {})}


def run_settings(method, points, settings, *, validate, checkpoint, resume, fingerprint, refine=None):
    """:func:`run_path` with the tolerance, iteration cap and validation metric of a training
    run's ``settings`` (validated only when ``validate``, i.e. there are validation data)."""
    return run_path(method, points, tol=settings["tol"], max_iter=settings["max_iter"], gap_tol=settings.get("gap_tol"),
                    select_metric=settings["select_metric"] if validate else None, checkpoint=checkpoint,
                    resume=resume, settings=settings, fingerprint=fingerprint, refine=refine)


def run_path(method, points, *, tol, max_iter, select_metric=None, checkpoint=None, resume=False, settings=None,
             fingerprint=None, refine=None, gap_tol=None):
    """Solve every point of ``points`` with ``method``; return a :class:`PathResult`.

    ``select_metric``: the validation metric the candidates record as ``valid_<metric>`` and the
    best point is chosen by (None: no validation; then the last point is the one chosen).
    ``settings``: the run's settings, recorded in each checkpoint; a checkpoint must match all of
    them but :data:`RESUMABLE_CHANGES` to be resumed.
    ``refine``: a second stage, ``refine(candidates, points, valid_key) -> more points``, called
    once the given points are solved (e.g. :func:`two_stage_refine`); the best point is chosen
    among both stages. A resumed run recomputes the second stage from the first stage's
    candidates in the checkpoint."""
    valid_key = None if select_metric is None else "valid_" + select_metric
    config = {k: v for k, v in (settings or {}).items() if k not in RESUMABLE_CHANGES}
    first = list(points)

    def all_points(cands):
        """The path's points once ``cands`` are known (the second stage needs the first's)."""
        if refine is None or len(cands) < len(first):
            return first
        return first + list(refine(cands[:len(first)], first, valid_key))

    candidates, path_w, start_index, state, passes0, trace = resume_point(checkpoint if resume else None, config,
                                                                          fingerprint, all_points)
    points = all_points(candidates)
    walk = _Walk(method, tol=tol, max_iter=max_iter, gap_tol=gap_tol, select_metric=select_metric,
                 checkpoint=checkpoint, config=config, settings=settings, fingerprint=fingerprint,
                 candidates=candidates, path_w=path_w, passes=passes0)
    k = start_index
    while k < len(points):
        gi, Ck = points[k]
        resource = walk.open(gi)
        w = _first_iterate(method, points, path_w, k, state, checkpoint)
        walk.solve(k, gi, Ck, resource, w, state, trace)
        state, trace = None, []
        for hook in list(_POINT_HOOKS):
            hook()
        points = all_points(candidates)
        k += 1
    walk.close()
    best = (max(range(len(points)), key=lambda i: candidates[i].get(valid_key, 0.0)) if valid_key is not None
            else len(points) - 1)
    return PathResult(candidates, path_w, best, walk.total, points, dict(method.decided()))


def _first_iterate(method, points, path_w, k, state, checkpoint):
    """Point ``k``'s first iterate: the checkpoint's ``state`` (a resumed point), else a warm start
    from the previous point's solution of the same gamma, else the method's start."""
    gi = points[k][0]
    w = (np.asarray(path_w[k - 1], np.float64) if k > 0 and points[k - 1][0] == gi and len(path_w) >= k
         else method.start(gi))
    if state is not None:
        if state.w.shape != w.shape:
            raise FormatError(f"the checkpoint in {checkpoint} holds a solution of {state.w.shape[0]} entries where "
                              f"this point's has {w.shape[0]}; it was changed after it was written. Start again "
                              f"with resume=False")
        w = state.w
    return w


class _Walk:
    """One run along a path: the open gamma's resource, the passes of the closed ones (``total``),
    the finished candidates and solutions, and the solve of one point with its checkpoints."""

    def __init__(self, method, *, tol, max_iter, gap_tol, select_metric, checkpoint, config, settings, fingerprint,
                 candidates, path_w, passes):
        self.method, self.tol, self.max_iter, self.gap_tol = method, tol, max_iter, gap_tol
        self.select_metric, self.checkpoint, self.config, self.settings = select_metric, checkpoint, config, settings
        self.fingerprint, self.candidates, self.path_w, self.total = fingerprint, candidates, path_w, passes
        self.resource, self.gi, self.counter = None, None, [0]

    def open(self, gi):
        """The resource of gamma ``gi`` (the open one, or the previous closed and this one opened;
        the run's first resource counts its passes from here)."""
        if self.gi != gi:
            first = self.resource is None
            self.close()
            self.resource, self.gi = self.method.open(gi), gi
            if first:
                self.method.fresh(self.resource)
        return self.resource

    def close(self):
        if self.resource is not None:
            self.total += self.resource.passes
            self.method.close(self.resource)

    def passes(self):
        return self.total + self.resource.passes

    def solve(self, k, gi, Ck, resource, w, state, trace):
        """Solve point ``k`` = (``gi``, ``Ck``) from ``w`` (or the resumed ``state``, its ``trace``
        so far) and record its candidate and solution."""
        method, valid_key = self.method, None if self.select_metric is None else "valid_" + self.select_metric
        obj, solve, kw = method.prepare(resource, gi, Ck, w)

        def validate(st):
            score = method.score(st.w, gi)
            log.info("    C=%g iter %d: validation %s %.4f", Ck, st.iteration, self.select_metric, score)
            return score
        recorded = self.settings if self.settings is None else {**self.settings, **method.decided()}
        on_iteration = iteration_callback(
            checkpoint=self.checkpoint, config=self.config, fingerprint=self.fingerprint, settings=recorded, index=k,
            candidates=self.candidates, path_w=self.path_w, counter=self.counter, passes=self.passes, trace=trace,
            validate=None if valid_key is None else validate)
        try:
            # the solver's BLAS calls (dot products of l-vectors, Newton's Cholesky) on one thread:
            # OpenBLAS splits a dot product of more than 10,000 entries across its threads and
            # rounds it otherwise than on one, and every thread count must give the same model.
            # Wide products inside run in fixed blocks on parallel threads (_native.blas)
            with one_thread():
                st = solve(obj, w, eps=self.tol, max_iter=self.max_iter, gap_tol=self.gap_tol, state=state,
                           callback=on_iteration, describe=lambda: f"passes {self.passes()}", **kw)
        except KernelRangeError:
            raise  # names the kernel's settings and row: no C is a fix
        except NumericError as e:
            raise overflow_error(e, Ck, method.gamma(gi), self.candidates) from None
        finish_point(st, C=Ck, gamma=method.gamma(gi), passes=self.passes(), candidates=self.candidates,
                     path_w=self.path_w, valid=None if valid_key is None else
                     (valid_key, _last_score(trace, st, lambda: method.score(st.w, gi))),
                     extra=dict(method.point_info(gi, Ck), trace=list(trace)))


def overflow_error(e, C, gamma, candidates):
    """The solver's :class:`NumericError` at point (C, gamma) with what the path knows: every block
    the objective read was finite (the block stream refuses others), so a value that is not finite
    comes from settings whose scale overflows float64 on these data; the largest C of this gamma
    that finished is one that works."""
    done = [c["C"] for c in candidates if c.get("gamma") == gamma]
    at = f"C={C:g}" + ("" if gamma is None else f", gamma={gamma:g}")
    fix = (f"use C={max(done):g}, the largest C that finished on this path, or one between it and {C:g}" if done
           else f"use C={C / 1e3:g} or smaller")
    what = str(e).split(": likely causes:")[0]  # the solver could not tell the causes apart; the path can
    err = NumericError(f"{at}: {what}; every value of the data is finite (the block stream checks them), so these "
                       f"settings overflow float64 on them: {fix}")
    for name in ("quantity", "where", "value", "iteration", "step", "cg_step"):
        setattr(err, name, getattr(e, name, None))
    err.C, err.gamma = C, gamma
    return err


def _inconsistent(state, k, n_done, path_w, n_points, passes):
    """Why a checkpoint's contents cannot belong to one run (None when they can)."""
    w, g = np.asarray(state.w), np.asarray(state.g)
    if not 0 <= k < n_points or n_done != k:
        return f"it is at point {k} of {n_points} with {n_done} finished"
    if w.ndim != 1 or g.shape != w.shape or any(np.asarray(v).ndim != 1 for v in path_w):
        return f"w has shape {w.shape} and g {g.shape}"
    if not (np.all(np.isfinite(w)) and np.all(np.isfinite(g)) and np.isfinite(state.f) and state.delta >= 0):
        return "w, g, f or the trust radius is not a finite number"
    if state.iteration < 0 or int(passes) < 0:
        return f"iteration {state.iteration}, passes {passes}"
    return None


def tron_state_from_checkpoint(ck):
    """The TronState a checkpoint holds (scalars written by :func:`checkpoint_scalars`)."""
    sc = ck["scalars"]
    return TronState(w=ck["w"], f=sc["f"], g=ck["g"], delta=sc["delta"], gnorm0=sc["gnorm0"],
                     iteration=sc["iteration"], n_steps=sc["n_steps"], n_cg=sc["n_cg"],
                     n_fun=sc["n_fun"], n_grad=sc["n_grad"], n_hessp=sc["n_hessp"],
                     seconds=sc["seconds"], history=[tuple(h) for h in sc["history"]],
                     converged=sc.get("converged", False), message=sc.get("message", ""),
                     gap=sc.get("gap"), gap_kind=sc.get("gap_kind", ""))


def checkpoint_scalars(st, **extra):
    """The JSON scalars of TronState ``st`` for a checkpoint, with the caller's ``extra``."""
    return {"f": st.f, "delta": st.delta, "gnorm0": st.gnorm0, "iteration": st.iteration,
            "n_steps": st.n_steps, "n_cg": st.n_cg, "n_fun": st.n_fun, "n_grad": st.n_grad,
            "n_hessp": st.n_hessp, "seconds": st.seconds, "history": st.history,
            "converged": st.converged, "message": st.message, "gap": st.gap, "gap_kind": st.gap_kind, **extra}


def resume_point(checkpoint, config, fingerprint, points):
    """(candidates, path_w, path index, TronState or None, passes so far, the point's trace so far)
    from the checkpoint in
    directory ``checkpoint`` (None: start afresh); ``points`` are the path's (gamma index, C), or
    ``points(candidates)`` gives them once the finished candidates are known (a second stage)."""
    if checkpoint:
        ck = read_checkpoint(checkpoint, config=config, fingerprint=fingerprint, warn=log.warning)
        if ck is not None:
            sc = ck["scalars"]
            try:
                state = tron_state_from_checkpoint(ck)
                k = int(sc["C_index"])
                done, path_w = _finished(sc, ck["extra"])
                points = points(done) if callable(points) else points
                why = _inconsistent(state, k, len(done), path_w, len(points), sc["passes"])
            except (KeyError, TypeError, ValueError, IndexError) as e:
                why = f"a field is missing or of the wrong kind ({e!r})"
            if why:
                raise FormatError(f"{ck['path']}: the checkpoint is inconsistent: {why}; it was changed after it was "
                                  f"written. Start again with resume=False (or remove {checkpoint})")
            log.info("resuming from %s: C=%g, iteration %d", ck["path"], points[k][1], state.iteration)
            return done, path_w, k, state, int(sc["passes"]), list(sc.get("trace", []))
        log.info("no checkpoint in %s: starting from scratch", checkpoint)
    return [], [], 0, None, 0, []


def iteration_callback(*, checkpoint, config, fingerprint, settings, index, candidates, path_w, counter, passes,
                       validate=None, trace=None):
    """TRON's callback for point ``index`` of a path: ``validate(state)`` (logs and returns the
    validation score), a row of ``trace`` (:data:`TRACE_COLUMNS`), then a checkpoint (numbered by
    ``counter``) holding the solver state, the trace, the finished candidates and the solutions
    ``path_w`` of the earlier points."""
    trace = [] if trace is None else trace
    packed = {}  # the finished points' arrays change only when a point finishes
    every, last = _CHECKPOINT_EVERY[-1], [None]  # checkpoints_every's spacing; the last write's clock

    def on_iteration(st):
        score = None if validate is None else _last_score(trace, st, lambda: validate(st))
        trace.append([int(st.iteration), float(st.seconds), int(passes()), float(st.f), float(st.gnorm),
                      None if score is None else float(score)])
        now = time.monotonic()
        if checkpoint and (last[0] is None or now - last[0] >= every):
            last[0] = now
            counter[0] += 1
            if packed.get("n") != len(candidates):
                packed.update(n=len(candidates), scalars=None, arrays=None)
                packed["scalars"], packed["arrays"] = _pack_finished(candidates, path_w)
            scal = checkpoint_scalars(st, C_index=index, passes=passes(), settings=settings, trace=trace,
                                      **packed["scalars"])
            write_checkpoint(checkpoint, config=config, fingerprint=fingerprint, scalars=scal, w=st.w, g=st.g,
                             extra=packed["arrays"], number=counter[0])
    return on_iteration


def _pack_finished(candidates, path_w):
    """The finished points for a checkpoint: their candidates without traces (scalars), and two
    flat arrays, every solution of ``path_w`` and every trace row (:data:`TRACE_COLUMNS`, a
    missing validation score as NaN with a 0 in a seventh column), with their lengths (scalars).
    Arrays, not JSON: a checkpoint is written at every solver iteration and holds every finished
    point, so its cost grows with the path (JSON text of every trace made a 40-point grid on a
    few rows take 40 s of checkpoints)."""
    rows = [[*r[:5], np.nan if r[5] is None else r[5], r[5] is not None]
            for c in candidates for r in c.get("trace", [])]
    scalars = {"candidates": [{k: v for k, v in c.items() if k != "trace"} for c in candidates],
               "trace_rows": [len(c["trace"]) if "trace" in c else -1 for c in candidates],
               "w_sizes": [int(np.asarray(v).size) for v in path_w]}
    arrays = {"path_w": np.concatenate([np.asarray(v, np.float64).ravel() for v in path_w] or [np.zeros(0)]),
              "traces": np.asarray(rows, np.float64).reshape(-1, len(TRACE_COLUMNS) + 1)}
    return scalars, arrays


def _finished(sc, extra):
    """(candidates, path_w) from a checkpoint's scalars and arrays: :func:`_pack_finished`'s layout,
    or the earlier one (each candidate's trace in the JSON, each solution an array ``w{i}``)."""
    done = sc["candidates"]
    if "w_sizes" not in sc:
        return done, [np.asarray(extra[f"w{i}"], np.float64) for i in range(len(done))]
    ends = np.cumsum([0, *sc["w_sizes"]])
    flat = np.asarray(extra["path_w"], np.float64)
    if len(sc["w_sizes"]) != len(done) or ends[-1] != flat.size or min(sc["w_sizes"], default=0) < 0:
        raise ValueError(f"{len(done)} points with solutions of sizes {sc['w_sizes']} in {flat.size} values")
    path_w = [flat[a:b].copy() for a, b in zip(ends[:-1], ends[1:])]
    rows, at = np.asarray(extra["traces"], np.float64), 0
    if len(sc["trace_rows"]) != len(done) or sum(max(n, 0) for n in sc["trace_rows"]) != len(rows):
        raise ValueError(f"trace lengths {sc['trace_rows']} for {len(rows)} rows")
    done = [dict(c) for c in done]
    for c, n in zip(done, sc["trace_rows"]):
        if n >= 0:
            c["trace"] = [[int(r[0]), float(r[1]), int(r[2]), float(r[3]), float(r[4]), float(r[5]) if r[6] else None]
                          for r in rows[at:at + n]]
            at += n
    return done, path_w


def _last_score(trace, st, score):
    """The validation score of ``st``'s w: the trace's when its last row is of the same iteration
    (the solvers change w only with the iteration count: the last callback's row, or a rejected
    step's, scored this very w), else ``score()``, a pass over the validation data."""
    if trace and trace[-1][0] == st.iteration and trace[-1][5] is not None:
        return trace[-1][5]
    return score()


def finish_point(st, *, C, gamma, passes, candidates, path_w, valid=None, extra=None):
    """Record a solved path point: its candidate entry (with ``valid`` = (key, score) and the
    method's ``extra`` entries) and w."""
    cand = {"C": C, "gamma": gamma, "objective": st.f, "grad_norm": st.gnorm, "gap": st.gap, "gap_kind": st.gap_kind,
            "iterations": st.iteration, "cg_steps": st.n_cg, "passes": passes, "seconds": st.seconds,
            "message": st.message, **(extra or {})}
    if valid is not None:
        cand[valid[0]] = valid[1]
    candidates.append(cand)
    path_w.append(st.w.copy())
    log.info("C=%g done: f %.6e |g| %.3e, %d iterations, %d CG steps, %s", C, st.f, st.gnorm, st.iteration,
             st.n_cg, st.message)


def grid_edges(Cs, gammas, C, gamma, c_name="C"):
    """The grid edges the chosen (C, gamma) sits on, as (name, "smallest"|"largest") pairs: a
    grid of one value has no edge; a chosen value at an edge means the best may lie beyond it.
    ``c_name``: what the first grid is called (CLSRRank's is lambda)."""
    edges = []
    for name, grid, value in ((c_name, Cs, C), ("gamma", gammas, gamma)):
        grid = [g for g in grid if g is not None]
        if len(grid) > 1 and value is not None:
            if value <= min(grid):
                edges.append((name, "smallest"))
            elif value >= max(grid):
                edges.append((name, "largest"))
    return edges


# parameter names of the edge advice, in the library's terms (the CLI's translate names the flag)
_PARAM_OF = {"C": "C", "gamma": "gamma", "lambda": "lam"}
# how far the advice extends an edge: this many of the grid's steps beyond it
EXTEND_STEPS = 2


def _powers(values):
    """(base, integer exponents) when every value is an exact integer power of 2 or of 10, else None."""
    import math
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        return None
    for base, log in ((2, math.log2), (10, math.log10)):
        exps = [round(log(v)) for v in values]
        if all(float(base) ** e == v for e, v in zip(exps, values)):
            return base, exps
    return None


def values_text(values):
    """``values`` written as ``train --gamma`` and ``--C`` read them (streamrank.workflow.values):
    b^a:b^z:s for integer powers of 2 or 10 in equal steps s, b^e items for other powers, else
    numbers."""
    values = list(values)
    p = _powers(values)
    if p is None:
        return ",".join(f"{v:g}" for v in values)
    base, exps = p
    if exps == [0]:
        return "1"
    steps = {b - a for a, b in zip(exps, exps[1:])}
    if len(values) > 1 and len(steps) == 1 and min(steps) > 0:
        step = steps.pop()
        return f"{base}^{exps[0]}:{base}^{exps[-1]}" + (f":{step}" if step != 1 else "")
    return ",".join(f"{base}^{e}" for e in exps)


def edge_extension(grid, value, side):
    """(the values that extend ``grid`` past its ``side`` edge, where the chosen ``value`` sits, by
    EXTEND_STEPS of its steps, the edge value included, and the factor they span): powers keep
    their base and step, other grids the ratio between the edge value and its neighbour."""
    import math
    grid = sorted(grid)
    p = _powers(grid)
    n = EXTEND_STEPS
    try:
        if p is not None:
            base, exps = p
            step = min(b - a for a, b in zip(exps, exps[1:]))
            e = exps[0] if side == "smallest" else exps[-1]
            ks = range(e - n * step, e + 1, step) if side == "smallest" else range(e, e + n * step + 1, step)
            more, factor = [float(base) ** k for k in ks], float(base) ** (n * step)
        else:
            ratio = grid[1] / grid[0] if side == "smallest" else grid[-1] / grid[-2]
            ks = range(-n, 1) if side == "smallest" else range(0, n + 1)
            more, factor = [value * ratio ** k for k in ks], ratio ** n
    except (OverflowError, ZeroDivisionError):
        return None, None
    # a grid at the ends of float64 (C = 5e-324, 1e308) has no extension to propose: values that
    # round to 0, overflow or repeat are not a grid
    if not (all(math.isfinite(v) and v > 0 for v in more) and math.isfinite(factor) and factor > 1
            and len(set(more)) == len(more)):
        return None, None
    return more, factor


# seconds between a path's checkpoints within a point (0: at every iteration, train --checkpoint's
# promise); a grid sets GRID_CHECKPOINT_SECONDS for its configurations (checkpoints_every)
_CHECKPOINT_EVERY = [0.0]
# a grid's: its points are often milliseconds each, and a checkpoint at every iteration (two fsyncs,
# an HDF5 file) took two thirds of a 100-point grid on a few rows
GRID_CHECKPOINT_SECONDS = 1.0


@contextlib.contextmanager
def checkpoints_every(seconds):
    """``with checkpoints_every(s):`` paths in this block write a point's checkpoint at its first
    iteration and then once at least ``s`` seconds have passed since the last one: a resume
    redoes at most ``s`` seconds of a point's solver work (the result is the same, as from any
    checkpoint)."""
    _CHECKPOINT_EVERY.append(float(seconds))
    try:
        yield
    finally:
        _CHECKPOINT_EVERY.pop()


# whether a training logs its own grid-edge advice: a grid (streamrank.workflow.grid) says it once
# for the configuration it chooses, naming where, and turns it off for its trainings
_EDGE_ADVICE = [True]


@contextlib.contextmanager
def edge_advice_off():
    """``with edge_advice_off():`` trainings in this block record their grid edges in their summary
    but log no advice (the caller gives it, :func:`edge_advice`)."""
    _EDGE_ADVICE.append(False)
    try:
        yield
    finally:
        _EDGE_ADVICE.pop()


def edge_advice(summary, Cs, gammas, c_name="C"):
    """The advice for each grid edge the chosen point of ``summary`` sits on, as (name, side, text):
    which way to extend the grid and by how much, as values the parameter takes (e.g. "the chosen
    gamma=2^-9 is the smallest value of its grid (...): ...; extend the grid downwards by 2 steps
    (a factor 16), e.g. use gamma=2^-13:2^-9:2")."""
    out = []
    grids = {c_name: [v for v in Cs if v is not None], "gamma": [g for g in gammas if g is not None]}
    for name, side in grid_edges(Cs, gammas, summary[c_name], summary.get("gamma"), c_name):
        value = summary[name]
        more, factor = edge_extension(grids[name], value, side)
        way = "downwards" if side == "smallest" else "upwards"
        advice = ("" if more is None else f" by {EXTEND_STEPS} steps (a factor {factor:g}), e.g. use "
                  f"{_PARAM_OF.get(name, name)}={values_text(more)}")
        out.append((name, side, f"the chosen {name}={values_text([value])} is the {side} value of its grid "
                    f"({values_text(sorted(grids[name]))}): the best {name} may lie "
                    f"{'below' if side == 'smallest' else 'above'} it; extend the grid {way}{advice}"))
    return out


def report_grid_edges(summary, Cs, gammas, c_name="C"):
    """Put ``at_grid_edge`` (and ``grid_edge``, e.g. ["C smallest"]) into ``summary`` and log a
    warning for each grid edge the chosen point is at (:func:`edge_advice`), unless a grid gives
    the advice itself (:func:`edge_advice_off`)."""
    edges = grid_edges(Cs, gammas, summary[c_name], summary.get("gamma"), c_name)
    summary["at_grid_edge"] = bool(edges)
    summary["grid_edge"] = [f"{name} {side}" for name, side in edges]
    if _EDGE_ADVICE[-1]:
        for _, _, text in edge_advice(summary, Cs, gammas, c_name):
            log.warning("%s", text)
    return summary
