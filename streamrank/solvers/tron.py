"""Trust-region Newton with truncated conjugate gradients (TRON), as in LIBLINEAR.

Lin, Weng and Keerthi, "Trust region Newton method for large-scale logistic regression" (JMLR
2008), the solver of papers 000 (Alg. 3) and 004 (sec. 4). The solver sees only a function object
with ``fun(w)``, ``grad(w)``, ``hessp(s)`` and ``n_features``; calls come in the order fun ->
grad -> hessp at the same point, and ``grad`` is called only for an accepted point, so an
objective may keep the trial point's state aside in ``fun`` and commit it in ``grad``.

Stopping rule: ||g(w)|| <= eps * min(||g(0)||, ||g(w0)||), or ``max_iter`` trial steps (accepted or
rejected: "reached max_iter=5 (3 accepted, 2 rejected steps)").

- ||g(0)|| is LIBLINEAR's reference: a cold start (w0 = 0) stops where LIBLINEAR stops.
- ||g(w0)|| makes the rule a promise about the solution also on a warm-started path: a candidate
  reduces its own starting gradient by eps, so it takes at least one accepted step, and a start
  that is already near its optimum is refined by the same factor as a cold one. With ||g(0)||
  alone (LIBLINEAR's C path), ||g(0)|| = C ||dloss(0)|| grows with C, and the previous C's
  solution would meet the rule before any step: every C after the first would stop at 0
  iterations with the first C's model.
  Costs one more fun/grad when w0 != 0 (at w = 0).
"""

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from streamrank.errors import CheckpointMismatch
from streamrank.faultpoints import faultpoint
from streamrank.solvers.finite import check_f, check_g, numeric_error, vector_detail

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
# ... and only once ||r|| <= XI_QUAD ||g|| (transformed norms): alone, the test can cut CG at 3 or
# 4 steps per iteration on badly scaled piecewise quadratics, and TRON then crawls; with it, CG
# takes no more products than the residual rule on those, and fewer on the exact kernel problem
XI_QUAD = 0.3
# reductions below this fraction of |f| mean no further progress is measurable in float64
TINY_REDUCTION = 1e-12
# CG steps per trust-region step at most CG_CAP_FACTOR n + CG_CAP_MIN (n the dimension): exact
# arithmetic ends CG within n steps; rounding (lost conjugacy) may delay it, and the cap makes sure
# it cannot delay it for ever. Far above what runs take (tens to a few hundred steps at n in the
# thousands); a capped CG still returns a step that decreases the model
CG_CAP_FACTOR, CG_CAP_MIN = 2, 20
# float64's relative resolution: a trust radius delta <= EPS64 ||w|| (in the radius's own norm)
# admits only steps that change w by at most one rounding of w itself, so f(w + s) - f(w) is
# rounding noise of the same order as f's own and the ratio actred / prered decides nothing; every
# further rejection would shrink delta again (by SIGMA2 at least) without a step that can be judged
EPS64 = float(np.finfo(np.float64).eps)
# an objective below this is taken as unbounded below
UNBOUNDED = -1e32
# the boundary step's products s.d, s.s, d.d and delta^2 are used as they are while d.d lies in this
# range and delta^2 below its top (LIBLINEAR's formula and its bits); outside it their squares
# under- or overflow (d.d = 2e-163 and delta^2 = 2e-163 give a radicand of 0 and a division
# by zero), and the root is taken with s, d and delta divided by max |d_i|, which leaves t unchanged
BOUNDARY_RANGE = (1e-150, 1e150)


@dataclass
class TronState:
    """Everything TRON needs to continue: saved by checkpoints after each iteration."""

    w: np.ndarray
    f: float
    g: np.ndarray
    delta: float
    gnorm0: float
    iteration: int = 0          # accepted steps (LIBLINEAR's iter)
    n_steps: int = 0            # trial steps, accepted or not; max_iter counts these
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
    try:
        return (dsq - sts) / (std + rad) if std >= 0 else (rad - std) / dtd
    except ZeroDivisionError:  # s = 0 and d = 0 in float64: no step; the caller says so
        return math.nan


class _Identity:
    """M = I: preconditioned CG with it is plain Steihaug CG, bit for bit (z = r, z.r = r.r,
    ||s||_M = sqrt(s.s), which is what np.linalg.norm computes for a float64 vector)."""

    @staticmethod
    def solve(r):
        return r

    @staticmethod
    def mdot(u, v):
        return float(u @ v)


def cg_cap(n):
    """The most CG steps one trust-region step may take in dimension ``n`` (see CG_CAP_FACTOR)."""
    return CG_CAP_FACTOR * int(n) + CG_CAP_MIN


def _at(stats):
    """Where a CG step is, for an error: the trust-region step it serves (TRON's state counts
    them; a bare counter, as tests pass, does not)."""
    return {"iteration": getattr(stats, "iteration", 0), "step": getattr(stats, "n_steps", 0) + 1}


def cg_product(hessp, d, stats, cg_step, name="d"):
    """(H d, d.Hd) for CG step ``cg_step`` (counted in ``stats.n_hessp``); a d.Hd that is not
    finite raises NumericError (``name``: the direction's letter in its message)."""
    faultpoint("cg-step")
    hd = hessp(d)
    stats.n_hessp += 1
    dhd = float(d @ hd)  # any non-finite entry of H d makes it nan or inf (0 * inf is nan)
    if not math.isfinite(dhd):
        raise numeric_error("hessp", "cg", dhd, cg_step=cg_step, detail=f"{name}.H{name} = {dhd!r}" + (
            f"; {vector_detail(hd)}" if not np.all(np.isfinite(hd)) else " overflows"), **_at(stats))
    return hd, dhd


def _residual(ztr, stats, cg_step):
    """z.r = r^T M^-1 r checked: finite and >= 0 (M positive definite), else NumericError."""
    if not (math.isfinite(ztr) and ztr >= 0):
        detail = ("M is not positive definite" if math.isfinite(ztr)
                  else "the gradient's M^-1 g overflows" if cg_step == 0 else "M^-1 r or the residual r overflows")
        raise numeric_error("residual", "cg", ztr, cg_step=cg_step or None, detail=detail, **_at(stats))
    return ztr


def _to_boundary(s, r, d, hd, delta, P, stats, cg_step, why):
    """Steihaug's last step: from s along d to ||s + t d||_M = delta, t >= 0, with the residual
    r = -g - H s kept in step (one axpy with the H d already made). Along d the model decreases:
    its slope there is -r.d = -z.r < 0 whatever the curvature (CG's r_j is orthogonal to d_{j-1})."""
    if not math.isfinite(delta):
        raise numeric_error("radius", "cg", delta, cg_step=cg_step,
                            detail=f"{why}, and the trust region has no finite boundary to stop at", **_at(stats))
    std, sts, dtd = P.mdot(s, d), P.mdot(s, s), P.mdot(d, d)
    if BOUNDARY_RANGE[0] < dtd < BOUNDARY_RANGE[1] and delta < BOUNDARY_RANGE[1] ** 0.5:
        t = _boundary_step(std, sts, dtd, delta)
    else:  # the squares under- or overflow: the same root with s, d and delta divided by max |d_i|
        k = float(np.max(np.abs(d)))
        ds, ss = d / k, s / k
        t = _boundary_step(P.mdot(ss, ds), P.mdot(ss, ss), P.mdot(ds, ds), delta / k)
    if not (math.isfinite(t) and t >= 0):
        raise numeric_error("step", "cg", t, cg_step=cg_step,
                            detail=f"{why}; the step to the boundary (radius {delta:.3g}) is t = {t!r}", **_at(stats))
    s += t * d
    r -= t * hd
    return s, r


def _trcg(hessp, g, delta, stats, quadratic=None):
    """Approximately solve H s = -g inside ||s|| <= delta (Steihaug CG). Returns (s, r, steps, boundary)."""
    return _trpcg(hessp, g, delta, stats, _Identity, quadratic)


def _trpcg(hessp, g, delta, stats, P, quadratic=None):
    """Preconditioned Steihaug CG (LIBLINEAR >= 2.20's trpcg): solve H s = -g approximately inside
    ||s||_M <= delta, M = P's matrix. It is plain CG on the transformed system
    M^-1/2 H M^-1/2 s^ = -M^-1/2 g with s^ = M^1/2 s, so the radius and the stopping test
    (||r^|| = sqrt(z.r) <= XI_CG ||g^||) are measured in the transformed norm. Returns
    (s, r, steps, boundary) like :func:`_trcg`.

    Bounded: at most :func:`cg_cap` steps (exact arithmetic needs n). Curvature d.Hd <= 0 (an H
    that rounding made indefinite, e.g. a float32 kernel Q at a small gamma) ends CG with
    Steihaug's step to the boundary along d (Steihaug 1983; TRON, Lin-Weng-Keerthi sec. 2), as
    does a d.Hd so small that alpha = z.r / d.Hd overflows; a d.Hd, z.r or boundary step that is
    not finite raises NumericError (:mod:`streamrank.solvers.finite`).

    ``quadratic`` (|f| at the point, or None): stop also at the first step j whose model decrease is
    small, j (q_j - q_{j-1}) >= CG_QUAD_TOL q_j, once ||r^|| <= XI_QUAD ||g^||, with q(s) = g.s +
    1/2 s.Hs = (g.s - s.r) / 2 (r = -g - Hs: two dot products, no product with H), or when q stops
    decreasing (rounding). The residual test can only be met later on an ill-conditioned H: with Q's
    spectrum inside the kernel problem's Hessian Q (I + C L Q), ||r|| lingers in directions that
    no longer move q. Steps are the same as without it up to that point (the same s, r, d)."""
    s = np.zeros_like(g)
    r = -g
    z = P.solve(r)
    d = z.copy()
    ztr = _residual(float(z @ r), stats, 0)
    cgtol = XI_CG * math.sqrt(ztr)
    steps, cap = 0, cg_cap(len(g))
    q = 0.0  # q(s) at s = 0
    while math.sqrt(ztr) > cgtol and steps < cap:
        steps += 1
        hd, dhd = cg_product(hessp, d, stats, steps)
        if dhd <= 0:
            s, r = _to_boundary(s, r, d, hd, delta, P, stats, steps, f"the curvature d.Hd = {dhd:g} is not positive")
            return s, r, steps, True
        alpha = ztr / dhd
        if not math.isfinite(alpha):  # curvature that float64 cannot tell from 0: as above
            s, r = _to_boundary(s, r, d, hd, delta, P, stats, steps, f"the curvature d.Hd = {dhd:g} is below "
                                f"float64 resolution against z.r = {ztr:g}")
            return s, r, steps, True
        s += alpha * d
        # "not <=": a step that overflowed (nan or inf norm) goes back to the boundary too
        if not math.sqrt(max(P.mdot(s, s), 0.0)) <= delta:
            # back to the boundary along d in the M-norm: ||s + t d||_M = delta
            s -= alpha * d
            s, r = _to_boundary(s, r, d, hd, delta, P, stats, steps, "the step crosses the boundary")
            return s, r, steps, True
        r -= alpha * hd
        z = P.solve(r)
        znew = _residual(float(z @ r), stats, steps)  # ||r^||^2, also the quadratic test's residual floor
        if quadratic is not None:
            stop, q = _quadratic_stop(g, s, r, q, steps, quadratic, znew, cgtol)
            if stop:
                break
        d *= znew / ztr
        d += z
        ztr = znew
    return s, r, steps, False


def _quadratic_stop(g, s, r, q, steps, quadratic, znew, cgtol):
    """(stop, q_j): Nash and Sofer's test on the CG model q_j = 1/2 (g.s - s.r) after step j
    (module constants CG_QUAD_*): stop once it increases, or its last decrease is small against
    the average so far while it is a real decrease and the residual is below XI_QUAD."""
    q_new = 0.5 * (float(g @ s) - float(s @ r))
    q_diff = q_new - q
    stop = q_diff > 0 or q_new > 0 or (steps * q_diff >= CG_QUAD_TOL * q_new and -q_new > CG_QUAD_FLOOR * quadratic
                                       and znew <= (XI_QUAD * cgtol / XI_CG) ** 2)
    return stop, q_new


class RKHSMetric:
    """TRON's preconditioner for the exact kernel objective in beta (``precondition="rkhs"``):
    CG in the RKHS norm ||s||_{Q'} with the Nystroem block ``W`` on top, i.e. plain CG on the
    Hessian in w (I + C Phi^T L Phi, well conditioned from below) where CG in beta sees
    Q' (I + C L Q') and Q's spectrum spread over ten decades.

    With g = Q' rho (rho = beta + C dz, ``obj.kernel_metric()``) and H d = Q' t (t = d + C L Q' d,
    ``obj.hessp_t``), CG keeps rho_j = Q'^-1 r_j by recurrence (:func:`_trkcg`): no system with Q'
    is solved, and each CG step is one pass, as before. ``W`` (None, or
    :class:`~streamrank.objectives.kernel_precond.RKHSPreconditioner` at the accepted point) maps
    (rho, r) to the beta representation of M_w^-1 r_w."""

    rkhs = True

    def __init__(self, obj, W=None):
        self.obj, self.W = obj, W

    def solve(self, g):
        """M^-1 g for the accepted point's gradient g (only: rho is that point's)."""
        rho = self.obj.kernel_metric()
        return rho if self.W is None else self.W.apply(rho, g)

    def wnorm(self, w):
        """||w||_{Q'} = sqrt(beta^T Q' beta) from the accepted point's scores."""
        return math.sqrt(max(float(w @ self.obj.scores()), 0.0))


def _trkcg(obj, g, delta, stats, W=None, quadratic=None):
    """Preconditioned Steihaug CG on H s = -g with M = Q' (and ``W``, :class:`RKHSMetric`):
    M^-1 r_j = rho_j = rho_0 - sum alpha_i t_i, t_i = Q'^-1 H d_i from the same pass as H d_i;
    the M-norms ||s||^2, s.Md and d.Md by the recurrences of Conn, Gould and Toint (Trust-Region
    Methods, sec. 7.5.1), so no product with M is formed. Stopping tests as :func:`_trpcg`.
    Returns (s, r, steps, boundary, ||s||_M^2)."""
    s = np.zeros_like(g)
    r = -g
    rho = -np.array(obj.kernel_metric(), np.float64)
    z = rho if W is None else W.apply(rho, r)
    d = z.copy()
    ztr = _residual(float(z @ r), stats, 0)
    cgtol = XI_CG * math.sqrt(ztr)
    steps, cap = 0, cg_cap(len(g))
    q = 0.0
    sms, smd, dmd = 0.0, 0.0, ztr  # s.Ms, s.Md, d.Md

    def to_boundary(why):
        if not math.isfinite(delta):
            raise numeric_error("radius", "cg", delta, cg_step=steps,
                                detail=f"{why}, and the trust region has no finite boundary to stop at", **_at(stats))
        t = _boundary_step(smd, sms, dmd, delta)
        if not (math.isfinite(t) and t >= 0):
            raise numeric_error("step", "cg", t, cg_step=steps,
                                detail=f"{why}; the step to the boundary (radius {delta:.3g}) is t = {t!r}",
                                **_at(stats))
        return t

    while math.sqrt(ztr) > cgtol and steps < cap:
        steps += 1
        faultpoint("cg-step")
        hd, t = obj.hessp_t(d)
        stats.n_hessp += 1
        dhd = float(d @ hd)
        if not math.isfinite(dhd):
            raise numeric_error("hessp", "cg", dhd, cg_step=steps, detail=f"d.Hd = {dhd!r}" + (
                f"; {vector_detail(hd)}" if not np.all(np.isfinite(hd)) else " overflows"), **_at(stats))
        alpha = ztr / dhd if dhd > 0 else math.inf
        sms_new = sms + 2 * alpha * smd + alpha * alpha * dmd if math.isfinite(alpha) else math.inf
        if not sms_new <= delta * delta:  # curvature <= 0, or the step crosses the boundary
            tb = to_boundary("the step crosses the boundary" if dhd > 0 else
                             f"the curvature d.Hd = {dhd:g} is not positive")
            s += tb * d
            r -= tb * hd
            return s, r, steps, True, sms + 2 * tb * smd + tb * tb * dmd
        s += alpha * d
        sms = sms_new
        r -= alpha * hd
        rho -= alpha * t
        z = rho if W is None else W.apply(rho, r)
        znew = _residual(float(z @ r), stats, steps)
        if quadratic is not None:
            stop, q = _quadratic_stop(g, s, r, q, steps, quadratic, znew, cgtol)
            if stop:
                break
        b = znew / ztr
        d *= b
        d += z
        smd = b * (smd + alpha * dmd)
        dmd = znew + b * b * dmd
        ztr = znew
    return s, r, steps, False, sms


def capped_message(max_iter, state):
    """The status of a run that reached max_iter: with its accepted and rejected steps when some
    were rejected ("reached max_iter=5 (3 accepted, 2 rejected steps)")."""
    rejected = state.n_steps - state.iteration
    return f"reached max_iter={max_iter}" + (f" ({state.iteration} accepted, {rejected} rejected steps)"
                                             if rejected else "")


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
    may need a smaller ||g|| than eps gives, or allow a larger one); otherwise, or where no gap is
    known (``gap`` None: an objective that is not strongly convex, without a preconditioner),
    ||g|| <= eps ``gnorm0``. A zero gradient always stops."""
    if state.gnorm == 0:
        return True
    if gap_tol is None or gap is None:
        return state.gnorm <= eps * state.gnorm0
    return gap <= gap_tol


def _gap_text(gap, kind):
    return "" if gap is None else f"gap {'<=' if kind == 'bound' else '~'} {gap:.1e} "


def start_state(obj, w0, state, *, delta_from_gradient):
    """(state, t0) to begin or continue a solve; shared by TRON and the Newton solvers.

    A new state evaluates fun/grad at w0, and at 0 as well when w0 != 0: the stopping rule's
    reference ``gnorm0`` is min(||g(0)||, ||g(w0)||) (see the module docstring). A resumed
    state's f and g are recomputed at its w and must equal the stored ones bit for bit: the data
    and settings were checked already, so a difference means another numeric environment, and
    continuing would not reproduce the uninterrupted run.
    A value that is not finite at any of these points raises NumericError (solvers.finite).
    """
    t0 = time.perf_counter()
    if state is None:
        w = np.array(w0, dtype=np.float64, copy=True)
        calls = 1
        if np.any(w):
            z = np.zeros_like(w)
            check_f(obj.fun(z), "start", point="w = 0 (the stopping rule's reference)")
            gnorm0 = check_g(obj.grad(z), "start", point="w = 0 (the stopping rule's reference)")
            calls = 2
        f = check_f(obj.fun(w), "start")
        g = obj.grad(w)
        gn = check_g(g, "start")
        state = TronState(w=w, f=f, g=g, delta=gn if delta_from_gradient else 0.0,
                          gnorm0=gn if calls == 1 else min(gnorm0, gn), n_fun=calls, n_grad=calls)
        return state, t0
    at = {"iteration": state.iteration, "point": f"the checkpoint's point (iteration {state.iteration})"}
    f = check_f(obj.fun(state.w), "start", **at)
    g = obj.grad(state.w)
    check_g(g, "start", **at)
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
    max_iter : int
        The most trial steps, accepted or rejected (``state.n_steps``; ``state.iteration`` counts
        the accepted ones, as the log does).
    callback : callable(state), optional
        Called after every trial step (accepted or not): checkpoints, validation logging.
    describe : callable() -> str, optional
        Extra text for each log line (e.g. the objective's pass count).
    precondition : bool or "rkhs"
        ``"rkhs"``: CG in the RKHS norm for an objective with ``kernel_metric`` and ``hessp_t``
        (:class:`RKHSMetric`). True: use ``obj.preconditioner()`` (an object with ``solve(r)`` =
        M^-1 r and ``mdot(u, v)`` = u^T M v, rebuilt at every accepted point) in CG, with the trust
        region in the M-norm.
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

    Bounded by construction: at most ``max_iter`` trial steps of at most :func:`cg_cap` CG steps
    each. A non-finite f, g, H d or M^-1 r anywhere raises NumericError
    (:mod:`streamrank.solvers.finite`); a radius below float64 resolution (EPS64) or a trial
    point that rounds to w ends the run with its message.
    """
    if cg_stop not in ("residual", "quadratic"):
        raise ValueError(f"cg_stop must be 'residual' or 'quadratic'; got {cg_stop!r}")
    state, t0 = start_state(obj, w0, state, delta_from_gradient=True)
    P = _preconditioner(obj, precondition)
    p_at = state.iteration  # the accepted point P was made at
    if P is not None and state.iteration == 0 and state.n_steps == 0:
        state.delta = math.sqrt(_residual(float(state.g @ P.solve(state.g)), state, 0))
    extra = describe or (lambda: "")
    if stop_met(state, eps, gap_tol, relative_gap(obj, state.g, state.f, P)[0]):
        state.converged = True
        state.message = "converged"
    # a stop recorded in the state (converged, or no progress possible) is final; max_iter is
    # not recorded, so a resumed run may be given more iterations. max_iter counts every trial
    # step, rejected ones included (a run that only rejects still ends), and the state keeps the
    # count, so a resumed run stops where the uninterrupted one does
    stale = False
    while not state.converged and not state.message and state.n_steps < max_iter:
        if stale:
            P, stale, p_at = _preconditioner(obj, precondition), False, state.iteration
        accepted = _tron_step(obj, state, P, cg_stop, eps, gap_tol, extra, t0)
        if accepted is None:
            break
        stale = accepted and P is not None  # rebuilt at the new point when another CG follows
        if callback is not None:
            callback(state)
        if state.message and not state.converged:
            log.warning("TRON stopped: %s", state.message)
            break
    if not state.message:
        state.message = capped_message(max_iter, state)
    _final_gap(obj, state, P, p_at)
    state.seconds = time.perf_counter() - t0
    return state


def _preconditioner(obj, precondition):
    """TRON's preconditioner at the accepted point: None, obj's (``precondition=True``), or the
    RKHS metric with obj's Nystroem block (``precondition="rkhs"``, :class:`RKHSMetric`)."""
    if precondition == "rkhs":
        return RKHSMetric(obj, obj.preconditioner())
    return obj.preconditioner() if precondition else None


def _tron_step(obj, state, P, cg_stop, eps, gap_tol, extra, t0):
    """One trial step of :func:`tron` from ``state`` (updated in place): CG inside the radius, f at
    the trial point, the radius update, the accepted point's gradient, the log line and the stop
    reason. Returns whether the step was accepted, or None (and the message) when the trial
    point rounds to w."""
    # not on the first step, whose length sets the radius (LIBLINEAR's delta = min(delta, ||s||)):
    # truncated, it made the radius 10x smaller on a 42,158-row kernel problem and doubled the iterations
    quadratic = abs(state.f) if cg_stop == "quadratic" and state.iteration > 0 else None
    sms = None
    if getattr(P, "rkhs", False):
        s, r, steps, boundary, sms = _trkcg(obj, state.g, state.delta, state, P.W, quadratic)
    elif P is None:
        s, r, steps, boundary = _trcg(obj.hessp, state.g, state.delta, state, quadratic)
    else:
        s, r, steps, boundary = _trpcg(obj.hessp, state.g, state.delta, state, P, quadratic)
    state.n_cg += steps
    w_new = state.w + s
    if np.array_equal(w_new, state.w):  # no radius this small or smaller can move w: no pass for it
        state.message = (f"the trial step rounds to w in float64 (radius {state.delta:.3g}): no further "
                         f"progress possible")
        log.warning("TRON stopped: %s", state.message)
        return None
    gs = float(state.g @ s)
    prered = -0.5 * (gs - float(s @ r))
    at = {"iteration": state.iteration, "step": state.n_steps + 1}
    f_new = check_f(obj.fun(w_new), "trial", **at)
    state.n_fun += 1
    actred = state.f - f_new
    if not (math.isfinite(actred) and math.isfinite(prered)):
        raise numeric_error("reduction", "trial", actred if not math.isfinite(actred) else prered,
                            detail=f"f(w) = {state.f!r}, f(w + s) = {f_new!r}, predicted {prered!r}", **at)
    snorm = (math.sqrt(max(sms, 0.0)) if sms is not None else float(np.linalg.norm(s)) if P is None
             else math.sqrt(max(P.mdot(s, s), 0.0)))
    if state.iteration == 0:
        state.delta = min(state.delta, snorm)
    state.delta = _new_radius(state.delta, actred, prered, gs, f_new - state.f - gs, snorm, boundary)
    state.n_steps += 1
    accepted = actred > ETA0 * prered
    if accepted:
        accept(obj, state, w_new, f_new, at)
    state.seconds = time.perf_counter() - t0
    gnorm = state.gnorm
    # the log's gap: the last preconditioner's (built at this or the previous point)
    gap, kind = relative_gap(obj, state.g, state.f, P)
    state.gap, state.gap_kind = gap, kind  # kept (and checkpointed): the returned point's, if it is the last
    log.info("iter %3d f %.6e |g| %.3e %sCG %3d radius %.3e %s%s %.1fs", state.iteration, state.f, gnorm,
             _gap_text(gap, kind), steps, state.delta, "" if accepted else f"(rejected, step {state.n_steps}) ",
             extra(), state.seconds)
    state.history.append((state.iteration, state.f, gnorm, steps, bool(accepted)))
    if accepted and stop_met(state, eps, gap_tol, gap):
        state.converged, state.message = True, "converged"
    else:
        state.message = _no_progress(state, accepted, actred, prered, P)
    return accepted


def _new_radius(delta, actred, prered, gs, curv, snorm, boundary):
    """LIBLINEAR's radius update after a trial step s of M-norm ``snorm`` (``curv`` = f(w + s) -
    f(w) - g.s): alpha minimises the 1-D quadratic interpolation along s."""
    alpha = SIGMA3 if curv <= 0 else max(SIGMA1, -0.5 * (gs / curv))
    if actred < ETA0 * prered:
        return min(alpha * snorm, SIGMA2 * delta)
    if actred < ETA1 * prered:
        return max(SIGMA1 * delta, min(alpha * snorm, SIGMA2 * delta))
    if actred < ETA2 * prered:
        return max(SIGMA1 * delta, min(alpha * snorm, SIGMA3 * delta))
    if boundary:
        return SIGMA3 * delta
    return max(delta, min(alpha * snorm, SIGMA3 * delta))


def _no_progress(state, accepted, actred, prered, P):
    """The message that ends a run which has not converged after a trial step, or "" to go on."""
    if state.f < UNBOUNDED:
        return "objective unbounded below"
    if prered <= 0:
        # the quadratic model of a positive definite Hessian decreases along every CG step, so a
        # predicted reduction <= 0 is rounding: its decrease is below float64 resolution at this f
        return "predicted reduction <= 0, the model's decrease below float64 resolution: no further progress possible"
    if abs(actred) <= TINY_REDUCTION * abs(state.f) and abs(prered) <= TINY_REDUCTION * abs(state.f):
        return "reductions below float64 resolution: no further progress possible"
    if not accepted:
        wnorm = (float(np.linalg.norm(state.w)) if P is None else P.wnorm(state.w) if getattr(P, "rkhs", False)
                 else math.sqrt(max(P.mdot(state.w, state.w), 0.0)))
        if state.delta <= EPS64 * wnorm:  # see EPS64
            return (f"trust radius {state.delta:.3g} below float64 resolution at w (eps ||w|| = "
                    f"{EPS64 * wnorm:.3g}): no further progress possible")
    return ""


def _final_gap(obj, state, P, p_at):
    """The returned point's gap: the last log line's (with the preconditioner built at this or the
    previous point, ``p_at``), which the checkpoint keeps, so a run resumed at its last iteration
    reports the value the uninterrupted one does. A new preconditioner only for this number would
    cost a whole update (seconds on the exact kernel path); it is built only when no log line's
    gap is known (a checkpoint written before the gap was kept, or no step taken)."""
    if P is None or getattr(obj, "strong_convexity", None) or getattr(P, "rkhs", False):
        state.gap, state.gap_kind = relative_gap(obj, state.g, state.f, P)
    elif state.gap is None or not state.history:
        state.gap, state.gap_kind = relative_gap(obj, state.g, state.f,
                                                 P if p_at == state.iteration else obj.preconditioner())


def accept(obj, state, w_new, f_new, at):
    """Move ``state`` to the accepted point w_new (one more iteration) with its f and gradient
    (one grad call, checked finite; ``at``: the step, for its message)."""
    state.iteration += 1
    state.w, state.f = w_new, f_new
    state.g = obj.grad(w_new)
    state.n_grad += 1
    check_g(state.g, "accepted", **at)


def finish(obj, state, max_iter, t0, logger, name):
    """End a Newton run: warn of a stop without convergence (``name``: the solver's, in
    ``logger``), the capped message, the returned point's gap and the seconds."""
    if state.message and not state.converged:
        logger.warning("%s stopped: %s", name, state.message)
    if not state.message:
        state.message = capped_message(max_iter, state)
    state.gap, state.gap_kind = relative_gap(obj, state.g, state.f)
    state.seconds = time.perf_counter() - t0
    return state
