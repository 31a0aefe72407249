"""Trust-region Newton with truncated conjugate gradients (TRON), as in LIBLINEAR.

Lin, Weng and Keerthi, "Trust region Newton method for large-scale logistic regression" (JMLR
2008), the solver of papers 000 (Alg. 3) and 004 (sec. 4). The solver sees only a function object
with ``fun(w)``, ``grad(w)``, ``hessp(s)`` and ``n_features``; calls come in the order fun ->
grad -> hessp at the same point, and ``grad`` is called only for an accepted point, so an
objective may keep the trial point's state aside in ``fun`` and commit it in ``grad``.

Stopping rule: ||g(w)|| <= eps * min(||g(0)||, ||g(w0)||), or ``max_iter`` iterations.

- ||g(0)|| is LIBLINEAR's reference: a cold start (w0 = 0) stops where LIBLINEAR stops.
- ||g(w0)|| makes the rule a promise about the solution also on a warm-started path: a candidate
  reduces its own starting gradient by eps, so it takes at least one accepted step, and a start
  that is already near its optimum is refined by the same factor as a cold one. With ||g(0)||
  alone (LIBLINEAR's C path), ||g(0)|| = C ||dloss(0)|| grows with C, and the previous C's
  solution met the rule before any step: every C after the first stopped at 0 iterations with
  the first C's model (issue 10).
  Costs one more fun/grad when w0 != 0 (at w = 0).
"""

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from streamrank.faultpoints import faultpoint

from streamrank.errors import CheckpointMismatch

log = logging.getLogger("streamrank.solvers.tron")

# acceptance thresholds on actual / predicted reduction (LIBLINEAR tron.cpp)
ETA0, ETA1, ETA2 = 1e-4, 0.25, 0.75
# trust-region radius update factors
SIGMA1, SIGMA2, SIGMA3 = 0.25, 0.5, 4.0
# CG stops when ||r|| <= XI_CG * ||g||: the truncated Newton step's inexactness
XI_CG = 0.1
# cg_stop="quadratic" also stops CG once the last step's decrease of the quadratic model q_j is
# small against the average decrease so far: j (q_j - q_{j-1}) <= CG_QUAD_TOL * q_j (both sides
# <= 0): the truncation test of Nash and Sofer, "Assessing a search direction within a
# truncated-Newton method", Oper. Res. Lett. 9 (1990).
# Only while the model decrease -q_j exceeds CG_QUAD_FLOOR |f|: a decrease f's float64 values can
# hardly confirm is no reason to truncate (the residual test alone then ends CG, and a tight eps
# still reaches a small gradient rather than stopping at TINY_REDUCTION)
CG_QUAD_TOL = 0.5
CG_QUAD_FLOOR = 1e-6
# ... and only once ||r|| <= XI_QUAD ||g|| (transformed norms): alone, the test cut CG at 3 or 4
# steps per iteration on badly scaled piecewise quadratics and TRON crawled (1,000 iterations
# without converging where the residual rule took 11); with it, as few or fewer products than the
# residual rule on those, and 30 instead of 63 passes to f* (1 + 1e-3) on MQ2008's exact kernel
XI_QUAD = 0.3
# reductions below this fraction of |f| mean no further progress is measurable in float64
TINY_REDUCTION = 1e-12


@dataclass
class TronState:
    """Everything TRON needs to continue: saved by checkpoints after each iteration."""

    w: np.ndarray
    f: float
    g: np.ndarray
    delta: float
    gnorm0: float
    iteration: int = 0          # accepted steps (LIBLINEAR's iter); max_iter counts these
    n_steps: int = 0            # trust-region steps tried, accepted or not
    n_cg: int = 0               # CG steps in all
    n_fun: int = 0
    n_grad: int = 0
    n_hessp: int = 0
    seconds: float = 0.0
    converged: bool = False
    message: str = ""
    history: list = field(default_factory=list)
    gap: float = None           # relative objective gap (f - f*) / f at w: see relative_gap
    gap_kind: str = ""          # "bound" or "estimate"

    @property
    def gnorm(self):
        return float(np.linalg.norm(self.g))


def _boundary_step(std, sts, dtd, delta):
    """t >= 0 with ||s + t d|| = delta, from s.d, s.s and d.d in the trust region's norm (the
    root of a quadratic, in the form that does not cancel for either sign of s.d)."""
    dsq = delta * delta
    rad = math.sqrt(max(std * std + dtd * (dsq - sts), 0.0))
    return (dsq - sts) / (std + rad) if std >= 0 else (rad - std) / dtd


class _Identity:
    """M = I: preconditioned CG with it is plain Steihaug CG, bit for bit (z = r, z.r = r.r,
    ||s||_M = sqrt(s.s), which is what np.linalg.norm computes for a float64 vector)."""

    @staticmethod
    def solve(r):
        return r

    @staticmethod
    def mdot(u, v):
        return float(u @ v)


def _trcg(hessp, g, delta, stats, quadratic=None):
    """Approximately solve H s = -g inside ||s|| <= delta (Steihaug CG). Returns (s, r, steps, boundary)."""
    return _trpcg(hessp, g, delta, stats, _Identity, quadratic)


def _trpcg(hessp, g, delta, stats, P, quadratic=None):
    """Preconditioned Steihaug CG (LIBLINEAR >= 2.20's trpcg): solve H s = -g approximately inside
    ||s||_M <= delta, M = P's matrix. It is plain CG on the transformed system
    M^-1/2 H M^-1/2 s^ = -M^-1/2 g with s^ = M^1/2 s, so the radius and the stopping test
    (||r^|| = sqrt(z.r) <= XI_CG ||g^||) are measured in the transformed norm. Returns
    (s, r, steps, boundary) like :func:`_trcg`.

    ``quadratic`` (|f| at the point, or None): stop also at the first step j whose model decrease is small,
    j (q_j - q_{j-1}) >= CG_QUAD_TOL q_j, once ||r^|| <= XI_QUAD ||g^||, with q(s) = g.s + 1/2 s.Hs = (g.s - s.r) / 2 (r = -g - Hs:
    two dot products, no product with H), or when q stops decreasing (rounding). The residual
    test can only be met later on an ill-conditioned H: with Q's spectrum inside the kernel
    problem's Hessian Q (I + C L Q), ||r|| lingers in directions that no longer move q (measured
    on MQ2008 Fold1, rbf 2^-5, C = 1: 112 CG steps to eps 1e-3 with the residual test, 54 with both
    from TRON's second step on).
    Steps are the same as without it up to that point (the same s, r, d)."""
    s = np.zeros_like(g)
    r = -g
    z = P.solve(r)
    d = z.copy()
    ztr = float(z @ r)
    cgtol = XI_CG * math.sqrt(ztr)
    steps = 0
    q = 0.0  # q(s) at s = 0
    while math.sqrt(ztr) > cgtol:
        steps += 1
        faultpoint("cg-step")
        hd = hessp(d)
        stats.n_hessp += 1
        dhd = float(d @ hd)
        if dhd <= 0:
            raise FloatingPointError(f"Hessian product is not positive definite (d.Hd = {dhd:g})")
        alpha = ztr / dhd
        s += alpha * d
        if math.sqrt(P.mdot(s, s)) > delta:
            # back to the boundary along d in the M-norm: ||s + t d||_M = delta
            s -= alpha * d
            alpha = _boundary_step(P.mdot(s, d), P.mdot(s, s), P.mdot(d, d), delta)
            s += alpha * d
            r -= alpha * hd
            return s, r, steps, True
        r -= alpha * hd
        z = P.solve(r)
        znew = float(z @ r)  # ||r^||^2, also the quadratic test's residual floor
        if quadratic is not None:
            q_new = 0.5 * (float(g @ s) - float(s @ r))
            q_diff, q = q_new - q, q_new
            if q_diff > 0 or q > 0 or (steps * q_diff >= CG_QUAD_TOL * q and -q > CG_QUAD_FLOOR * quadratic
                                       and znew <= (XI_QUAD * cgtol / XI_CG) ** 2):
                break
        d *= znew / ztr
        d += z
        ztr = znew
    return s, r, steps, False


def relative_gap(obj, g, f, P=None):
    """(value, kind) of the relative objective gap (f(w) - f*) / f(w) at a point with gradient g.

    - ``bound``: an objective that declares ``strong_convexity`` mu (f - mu/2 ||w||^2 convex;
      mu = 1 for RankSVM's 1/2 ||w||^2 + C loss) has f(w) - f* <= ||g||^2 / (2 mu): a rigorous
      upper bound, whatever the stopping rule did.
    - ``estimate``: otherwise, with a preconditioner M ~ H, the Newton decrement
      1/2 g^T M^-1 g, which is f(w) - f* for a quadratic with Hessian M: an estimate only as good
      as M is (exact kernel RankSVM, whose f is not strongly convex in beta: there a small
      ||g|| does not mean a small gap).
    - (None, "") without either.
    """
    if not f:
        return None, ""
    mu = getattr(obj, "strong_convexity", None)
    if mu:
        return 0.5 * float(g @ g) / (mu * abs(f)), "bound"
    if P is not None:
        return 0.5 * float(g @ P.solve(g)) / abs(f), "estimate"
    return None, ""


def stop_met(state, eps, gap_tol, gap):
    """The stopping rule at ``state``: with ``gap_tol``, its relative ``gap`` (bound or estimate,
    :func:`relative_gap`) at most ``gap_tol`` (the gradient rule is then not used: a gap target
    may need a smaller ||g|| than eps gives, or allow a larger one); otherwise
    ||g|| <= eps ``gnorm0``. A zero gradient always stops."""
    if state.gnorm == 0:
        return True
    if gap_tol is None:
        return state.gnorm <= eps * state.gnorm0
    return gap is not None and gap <= gap_tol


def _gap_text(gap, kind):
    return "" if gap is None else f"gap {'<=' if kind == 'bound' else '~'} {gap:.1e} "


def start_state(obj, w0, state, *, delta_from_gradient):
    """(state, t0) to begin or continue a solve; shared by TRON and Newton-Cholesky.

    A new state evaluates fun/grad at w0, and at 0 as well when w0 != 0: the stopping rule's
    reference ``gnorm0`` is min(||g(0)||, ||g(w0)||) (see the module docstring). A resumed
    state's f and g are recomputed at its w and must equal the stored ones bit for bit: the data and settings were checked already, so a difference means
    another numeric environment, and continuing would not reproduce the uninterrupted run.
    """
    t0 = time.perf_counter()
    if state is None:
        w = np.array(w0, dtype=np.float64, copy=True)
        calls = 1
        if np.any(w):
            z = np.zeros_like(w)
            obj.fun(z)
            gnorm0 = float(np.linalg.norm(obj.grad(z)))
            calls = 2
        f = obj.fun(w)
        g = obj.grad(w)
        gn = float(np.linalg.norm(g))
        state = TronState(w=w, f=f, g=g, delta=gn if delta_from_gradient else 0.0,
                          gnorm0=gn if calls == 1 else min(gnorm0, gn), n_fun=calls, n_grad=calls)
        return state, t0
    f = obj.fun(state.w)
    g = obj.grad(state.w)
    if f != state.f or not np.array_equal(g, state.g):
        raise CheckpointMismatch(
            f"the objective at the checkpoint's w is {f!r} here but {state.f!r} in the checkpoint: data and "
            f"settings match, so the numeric environment (BLAS, thread count, streamrank version) differs, or the "
            f"checkpoint was changed after it was written; "
            f"start again with resume=False")
    return state, t0 - state.seconds


def tron(obj, w0, *, eps=1e-3, max_iter=1000, state=None, callback=None, describe=None, precondition=False,
         gap_tol=None, cg_stop="residual"):
    """Minimise ``obj`` from ``w0`` (or continue from ``state``); return the final TronState.

    Parameters
    ----------
    obj : object with fun(w), grad(w), hessp(s), n_features
    eps : float
        Relative gradient tolerance: stop at ||g|| <= eps min(||g(0)||, ||g(w0)||).
    state : TronState, optional
        Continue a run (from a checkpoint). Its ``f`` and ``g`` are recomputed at ``w`` and must
        agree with the stored ones, which proves the data and settings are the same.
    callback : callable(state), optional
        Called after every iteration (accepted or not): checkpoints, validation logging.
    describe : callable() -> str, optional
        Extra text for each log line (e.g. the objective's pass count).
    precondition : bool
        Use ``obj.preconditioner()`` (an object with ``solve(r)`` = M^-1 r and ``mdot(u, v)`` =
        u^T M v, rebuilt at every accepted point) in CG, with the trust region in the M-norm.
        The radius starts at ||g||_{M^-1}, the transformed gradient's norm; the stopping rule is
        unchanged (||g|| <= eps ``gnorm0``, plain norms).
    gap_tol : float, optional
        Stop once the relative objective gap (:func:`relative_gap`: a bound for strongly convex
        objectives, else the preconditioner's estimate) is at most ``gap_tol``, in place of the
        gradient rule (:func:`stop_met`).
    cg_stop : "residual" or "quadratic"
        When CG ends a step: ``residual`` (LIBLINEAR's ||r|| <= XI_CG ||g||), or ``quadratic``, which
        adds the model-decrease test of :func:`_trpcg` (for ill-conditioned Hessians; it
        changes the steps, not the stopping rule of the outer iterations).
    """
    if cg_stop not in ("residual", "quadratic"):
        raise ValueError(f"cg_stop must be 'residual' or 'quadratic'; got {cg_stop!r}")
    state, t0 = start_state(obj, w0, state, delta_from_gradient=True)
    P = obj.preconditioner() if precondition else None
    p_at = state.iteration  # the accepted point P was made at
    if P is not None and state.iteration == 0 and state.n_steps == 0:
        state.delta = math.sqrt(float(state.g @ P.solve(state.g)))
    extra = describe or (lambda: "")
    if stop_met(state, eps, gap_tol, relative_gap(obj, state.g, state.f, P)[0]):
        state.converged = True
        state.message = "converged"
    # a stop recorded in the state (converged, or no progress possible) is final; max_iter is
    # not recorded, so a resumed run may be given more iterations
    stale = False
    while not state.converged and not state.message and state.iteration < max_iter:
        if stale:
            P, stale, p_at = obj.preconditioner(), False, state.iteration
        # not on the first step, whose length sets the radius (LIBLINEAR's delta = min(delta, ||s||)):
        # truncated, it made the radius 10x smaller on a 42,158-row kernel problem and doubled the iterations
        quadratic = abs(state.f) if cg_stop == "quadratic" and state.iteration > 0 else None
        if P is None:
            s, r, steps, boundary = _trcg(obj.hessp, state.g, state.delta, state, quadratic)
        else:
            s, r, steps, boundary = _trpcg(obj.hessp, state.g, state.delta, state, P, quadratic)
        state.n_cg += steps
        w_new = state.w + s
        gs = float(state.g @ s)
        prered = -0.5 * (gs - float(s @ r))
        f_new = obj.fun(w_new)
        state.n_fun += 1
        actred = state.f - f_new
        snorm = float(np.linalg.norm(s)) if P is None else math.sqrt(P.mdot(s, s))
        if state.iteration == 0:
            state.delta = min(state.delta, snorm)
        # radius update (LIBLINEAR): alpha minimises the 1-D quadratic interpolation along s
        curv = f_new - state.f - gs
        alpha = SIGMA3 if curv <= 0 else max(SIGMA1, -0.5 * (gs / curv))
        if actred < ETA0 * prered:
            state.delta = min(alpha * snorm, SIGMA2 * state.delta)
        elif actred < ETA1 * prered:
            state.delta = max(SIGMA1 * state.delta, min(alpha * snorm, SIGMA2 * state.delta))
        elif actred < ETA2 * prered:
            state.delta = max(SIGMA1 * state.delta, min(alpha * snorm, SIGMA3 * state.delta))
        elif boundary:
            state.delta = SIGMA3 * state.delta
        else:
            state.delta = max(state.delta, min(alpha * snorm, SIGMA3 * state.delta))
        state.n_steps += 1
        accepted = actred > ETA0 * prered
        if accepted:
            state.iteration += 1
            state.w = w_new
            state.f = f_new
            state.g = obj.grad(w_new)
            state.n_grad += 1
            stale = P is not None  # rebuilt at the new point when another CG follows
        state.seconds = time.perf_counter() - t0
        gnorm = state.gnorm
        # the log's gap: the last preconditioner's (built at this or the previous point)
        gap, kind = relative_gap(obj, state.g, state.f, P)
        log.info("iter %3d f %.6e |g| %.3e %sCG %3d radius %.3e %s%s %.1fs", state.iteration, state.f, gnorm,
                 _gap_text(gap, kind), steps, state.delta, "" if accepted else "(rejected) ", extra(),
                 state.seconds)
        state.history.append((state.iteration, state.f, gnorm, steps, bool(accepted)))
        if accepted and stop_met(state, eps, gap_tol, gap):
            state.converged, state.message = True, "converged"
        elif state.f < -1e32:
            state.message = "objective unbounded below"
        elif prered <= 0:
            state.message = "predicted reduction <= 0: no further progress possible"
        elif abs(actred) <= TINY_REDUCTION * abs(state.f) and abs(prered) <= TINY_REDUCTION * abs(state.f):
            state.message = "reductions below float64 resolution: no further progress possible"
        if callback is not None:
            callback(state)
        if state.message and not state.converged:
            log.warning("TRON stopped: %s", state.message)
            break
    if not state.message:
        state.message = f"reached max_iter={max_iter}"
    # the returned point's gap: with a preconditioner made at that point (P itself when it was),
    # so a resumed run that stops at the same w reports the same value
    if P is not None and p_at != state.iteration and not getattr(obj, "strong_convexity", None):
        P = obj.preconditioner()
    state.gap, state.gap_kind = relative_gap(obj, state.g, state.f, P)
    state.seconds = time.perf_counter() - t0
    return state
