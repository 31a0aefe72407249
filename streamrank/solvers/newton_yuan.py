"""Newton-Yuan (paper 001, sec. 2.3): Newton directions, full steps, and Yuan's step length on
every third iteration.

Each iteration k (counted from 1, as in the paper):

1. stop when ||g_k|| <= eps min(||g(0)||, ||g(w0)||) (TRON's rule, :mod:`streamrank.solvers.tron`),
   or, when given, the paper's absolute tests ||g_k|| <= eps2 (step 2) and ||d_k|| <= eps3 (step 4);
2. the Newton direction d_k solves H_k d = -g_k (step 3): by Cholesky of the dense Hessian
   ``obj.hessian()`` when the function object has one and the dimension is at most DENSE_MAX, else
   by (preconditioned) conjugate gradients through ``obj.hessp`` to a relative residual of
   min(CG_RTOL, sqrt(||g_k|| / ||g_ref||)) (an inexact Newton step, superlinear near the optimum);
3. the step (step 5): w_{k+1} = w_k + alpha_k d_k with alpha_k = 1 on most iterations and, when
   k mod 3 == 0, Yuan's steepest-descent step length alpha_k = 1 / sqrt(||g_k|| / ||w_k - w_{k-1}|| + 1).
   The paper writes ||w_{k+1} - w_k|| in that formula, which needs the step it defines; we read
   it as the previous step, the only one known.

Departures from the paper (say so when you compare figures):

- **Safeguard.** A full Newton step on a function that is only C2 (the smooth hinge changes
  curvature at the band's edges) need not descend; the paper takes it anyway. Here a step whose
  objective is higher than f_k is halved (BACKTRACK) until it is not, at most MAX_BACKTRACKS
  times; each trial costs one pass over the data. On the squared hinge (no C2) this is what
  keeps the method convergent.
- **Stopping.** TRON's relative rule by default, so the two solvers stop at the same accuracy;
  the paper's eps2 / eps3 (1e-4 there) are options.

The solver sees only the function object (``fun``, ``grad``, ``hessp``, ``n_features``, and
optionally ``hessian()`` and ``preconditioner()``) and keeps its state in a
:class:`~streamrank.solvers.tron.TronState`, so checkpoints and resume work as for TRON; the
state's ``delta`` holds ||w_k - w_{k-1}|| (Yuan's step needs it), 0 before the first step.
"""

import logging
import math
import time

import numpy as np

from streamrank.solvers.finite import check_f, numeric_error, vector_detail
from streamrank.solvers.tron import accept, cg_product, finish, relative_gap, start_state, stop_met

log = logging.getLogger("streamrank.solvers.newton_yuan")

# Yuan's step length on iterations k with k % YUAN_PERIOD == 0 (paper 001, step 5)
YUAN_PERIOD = 3
# safeguard: halve a step whose objective rises, at most this many times
BACKTRACK = 0.5
MAX_BACKTRACKS = 30
# the dense Hessian (m x m, formed in one pass and factored) up to this dimension; CG beyond
DENSE_MAX = 4096
# CG's relative residual: at most CG_RTOL, tighter (sqrt of the gradient's reduction) near the optimum
CG_RTOL = 0.1
# CG steps per direction at most (a direction is still a descent direction when CG stops early)
CG_MAX_STEPS = 500


def _checked_rz(rz, at, steps):
    """r.z = r^T M^-1 r, finite and >= 0 (M positive definite), else NumericError."""
    if not (math.isfinite(rz) and rz >= 0):
        raise numeric_error("residual", "cg", rz, cg_step=steps or None, detail="M is not positive definite"
                            if math.isfinite(rz) else "M^-1 r or the residual r overflows", **at)
    return rz


def _pcg(hessp, g, rtol, P, stats):
    """Solve H d = -g by (preconditioned) CG to ||r|| <= rtol ||g||; returns (d, steps).

    At most CG_MAX_STEPS steps. Curvature p.Hp <= 0 (an H that rounding made indefinite) ends CG
    with the direction so far, or with the first one, M^-1 (-g), when it is met at once: both are
    descent directions (the line-search Newton-CG rule, Nocedal and Wright, Alg. 7.1), and the
    backtracking safeguard picks the step length. A p.Hp or r.z that is not finite raises
    NumericError."""
    at = {"iteration": getattr(stats, "iteration", 0), "step": getattr(stats, "n_steps", 0) + 1}
    d = np.zeros_like(g)
    r = -g
    z = r if P is None else P.solve(r)
    p = z.copy()
    rz = _checked_rz(float(r @ z), at, 0)
    tol = rtol * float(np.linalg.norm(g))
    steps = 0
    while float(np.linalg.norm(r)) > tol and steps < CG_MAX_STEPS:
        steps += 1
        hp, php = cg_product(hessp, p, stats, steps, name="p")
        a = rz / php if php > 0 else math.inf
        if not math.isfinite(a):  # curvature <= 0, or below float64 resolution: see above
            return (p if steps == 1 else d), steps
        d += a * p
        r -= a * hp
        z = r if P is None else P.solve(r)
        rz_new = _checked_rz(float(r @ z), at, steps)
        p *= rz_new / rz
        p += z
        rz = rz_new
    return d, steps


def _dense_hessian(obj, dense_max):
    """The dense Hessian at the accepted point, or None (too wide, or the object has none)."""
    if obj.n_features > dense_max or not hasattr(obj, "hessian"):
        return None
    try:
        return obj.hessian()
    except NotImplementedError:
        return None


def _cholesky_direction(H, g):
    """-H^-1 g, or None when H is not positive definite in float64 (cannot happen for I + PSD).
    An m x m factor is small work: one BLAS thread (streamrank._native.blas)."""
    from scipy.linalg import LinAlgError, cho_factor, cho_solve  # here: TRON runs import no scipy

    from streamrank._native.blas import one_thread
    try:
        with one_thread():
            return -cho_solve(cho_factor(H, check_finite=False), g, check_finite=False)
    except LinAlgError:
        return None


def newton_yuan(obj, w0, *, eps=1e-3, max_iter=1000, state=None, callback=None, describe=None,
                precondition=False, gtol_abs=None, dtol_abs=None, dense_max=None, gap_tol=None):
    """Minimise ``obj`` from ``w0`` (or continue from ``state``); return the final TronState.

    Parameters as :func:`streamrank.solvers.tron.tron`; ``precondition`` uses
    ``obj.preconditioner()`` in the CG directions (it is not built for Cholesky ones). ``gtol_abs``, ``dtol_abs``:
    paper 001's eps2 (stop at ||g|| <= eps2) and eps3 (stop at ||d|| <= eps3), off by default.
    ``dense_max``: the largest dimension whose Hessian is formed (default DENSE_MAX; the caller
    lowers it when the m x m matrices would not fit its memory budget). ``gap_tol``: as
    :func:`streamrank.solvers.tron.tron`'s (with the bound or no preconditioner's estimate).

    Bounded: at most ``max_iter`` trial steps (backtracking trials included) of at most
    CG_MAX_STEPS CG steps each. A non-finite f, g, H, H p or direction raises NumericError
    (:mod:`streamrank.solvers.finite`).
    """
    dense_max = DENSE_MAX if dense_max is None else min(int(dense_max), DENSE_MAX)
    state, t0 = start_state(obj, w0, state, delta_from_gradient=False)
    extra = describe or (lambda: "")

    def done():
        g = state.gnorm
        return (stop_met(state, eps, gap_tol, relative_gap(obj, state.g, state.f)[0])
                or (gtol_abs is not None and g <= gtol_abs))

    if done():
        state.converged, state.message = True, "converged"
    while not state.converged and not state.message and state.n_steps < max_iter:
        k = state.iteration + 1
        at = {"iteration": state.iteration, "step": state.n_steps + 1}
        H = _dense_hessian(obj, dense_max)
        if H is not None and not np.all(np.isfinite(H)):
            raise numeric_error("hessian", "direction", detail=vector_detail(np.ravel(H)), **at)
        d = None if H is None else _cholesky_direction(H, state.g)
        steps, how = 0, "Cholesky"
        if d is None:  # CG through hessp, to a relative residual that tightens near the optimum
            P = obj.preconditioner() if precondition else None
            rtol = min(CG_RTOL, math.sqrt(state.gnorm / max(state.gnorm0, 1e-300)))
            d, steps = _pcg(obj.hessp, state.g, rtol, P, state)
            how = "CG"
        state.n_cg += steps
        dnorm = float(np.linalg.norm(d))
        if not math.isfinite(dnorm):
            raise numeric_error("direction", "direction", dnorm, detail=f"{how}: {vector_detail(d)}", **at)
        if dtol_abs is not None and dnorm <= dtol_abs:
            state.converged, state.message = True, "converged (direction below eps3)"
            break
        if not float(state.g @ d) < 0:  # H is I + PSD: only when g is below float64 resolution
            state.message = "no descent direction: no further progress possible"
            break
        alpha = 1.0
        if k % YUAN_PERIOD == 0 and state.delta > 0:
            alpha = 1.0 / math.sqrt(state.gnorm / state.delta + 1.0)  # Yuan's step length
        # every trial counts toward max_iter: a cap met while backtracking ends the run at w
        for _ in range(min(MAX_BACKTRACKS + 1, max_iter - state.n_steps)):
            w_new = state.w + alpha * d
            f_new = check_f(obj.fun(w_new), "trial", iteration=state.iteration, step=state.n_steps + 1)
            state.n_fun += 1
            state.n_steps += 1
            if f_new <= state.f:
                break
            alpha *= BACKTRACK  # the safeguard (module docstring)
        else:
            if state.n_steps < max_iter:
                state.message = "no decrease along the Newton direction: no further progress possible"
            break
        state.delta = float(np.linalg.norm(w_new - state.w))
        accept(obj, state, w_new, f_new, {"iteration": k - 1, "step": state.n_steps})
        state.seconds = time.perf_counter() - t0
        gnorm = state.gnorm
        log.info("iter %3d f %.6e |g| %.3e %s %3d step %.4g %s %.1fs", k, state.f, gnorm, how, steps, alpha,
                 extra(), state.seconds)
        state.history.append((k, state.f, gnorm, steps, True))
        if done():
            state.converged, state.message = True, "converged"
        elif state.delta == 0:
            state.message = "step below float64 resolution: no further progress possible"
        if callback is not None:
            callback(state)
    return finish(obj, state, max_iter, t0, log, "Newton-Yuan")
