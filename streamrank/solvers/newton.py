"""Newton's method with a Cholesky solve and an exact line search (paper 001, sec. 3).

Each iteration: the dense Hessian H = I + C Phi^T L Phi at w (one pass, m x m), the Newton
direction s = -H^{-1} g by Cholesky, then a one-dimensional semismooth Newton search for the
minimiser of the piecewise quadratic phi(t) = f(w + t s) on scores held in memory (one pass for
u = Phi s; each trial t costs pair sweeps only), and fun + grad at the new point (one pass).
About n m^2 flops per iteration against TRON's one pass per CG step: worth it when passes are
expensive and m is moderate.

Same contract as TRON beyond ``fun``/``grad``: the objective also offers ``hessian()``,
``prepare_line(w, s)`` and ``line(t) -> (phi, phi', phi'')``. Same stopping rule
(||g|| <= eps min(||g(0)||, ||g(w0)||), see :mod:`streamrank.solvers.tron`) and the same state
object, so checkpoints work unchanged.
"""

import logging
import time

import numpy as np

from streamrank.solvers.tron import relative_gap, start_state, stop_met

log = logging.getLogger("streamrank.solvers.newton")

# line search: stop when |phi'(t)| <= LINE_RTOL |phi'(0)|, when the bracket is narrower than
# LINE_XTOL relative to t (float64 cannot place t better), or after LINE_MAX_EVALS evaluations
LINE_RTOL = 1e-12
LINE_XTOL = 1e-12
LINE_MAX_EVALS = 40


def line_search(line, d0):
    """Minimise the convex piecewise quadratic phi with phi'(0) = d0 < 0; return (t, evals).

    Semismooth Newton from t = 1 (the Newton step), kept inside a bracket [lo, hi] with
    phi'(lo) < 0 < phi'(hi); a step that leaves the bracket is replaced by bisection.
    """
    lo, hi = 0.0, np.inf
    t = 1.0
    for k in range(1, LINE_MAX_EVALS + 1):
        _, d1, d2 = line(t)
        if abs(d1) <= LINE_RTOL * abs(d0):
            return t, k
        if d1 < 0:
            lo = t
        else:
            hi = t
        if hi - lo <= LINE_XTOL * max(1.0, t):
            return t, k
        nt = t - d1 / d2 if d2 > 0 else np.inf
        if not (lo < nt < hi):
            nt = 2.0 * lo + 1.0 if np.isinf(hi) else 0.5 * (lo + hi)
        if nt == t:
            return t, k
        t = nt
    return t, LINE_MAX_EVALS


def newton_cholesky(obj, w0, *, eps=1e-3, max_iter=1000, state=None, callback=None, describe=None, gap_tol=None):
    """Minimise ``obj`` from ``w0`` (or continue from ``state``); return the final TronState
    (``gap_tol``: as :func:`streamrank.solvers.tron.tron`'s)."""
    from scipy.linalg import cho_factor, cho_solve  # here: a TRON run never imports scipy.linalg (issue 17)
    state, t0 = start_state(obj, w0, state, delta_from_gradient=False)
    extra = describe or (lambda: "")
    if stop_met(state, eps, gap_tol, relative_gap(obj, state.g, state.f)[0]):
        state.converged, state.message = True, "converged"
    while not state.converged and not state.message and state.iteration < max_iter:
        H = obj.hessian()
        s = -cho_solve(cho_factor(H, check_finite=False), state.g, check_finite=False)
        d0 = float(state.g @ s)
        if not d0 < 0:  # H is I + PSD: this only happens when g is below float64 resolution
            state.message = "no descent direction: no further progress possible"
            break
        obj.prepare_line(state.w, s)
        t, evals = line_search(obj.line, d0)
        w_new = state.w + t * s
        f_new = obj.fun(w_new)
        state.n_fun += 1
        state.n_steps += 1
        state.n_cg += evals  # line-search evaluations, reported in the CG column
        if f_new > state.f:  # cannot happen in exact arithmetic (convex, exact search)
            state.message = "line search found no decrease: no further progress possible"
            break
        state.iteration += 1
        state.w, state.f = w_new, f_new
        state.g = obj.grad(w_new)
        state.n_grad += 1
        state.seconds = time.perf_counter() - t0
        gnorm = state.gnorm
        log.info("iter %3d f %.6e |g| %.3e step %.3g line %d %s %.1fs", state.iteration, state.f, gnorm, t, evals,
                 extra(), state.seconds)
        state.history.append((state.iteration, state.f, gnorm, evals, True))
        if stop_met(state, eps, gap_tol, relative_gap(obj, state.g, state.f)[0]):
            state.converged, state.message = True, "converged"
        if callback is not None:
            callback(state)
    if not state.message:
        state.message = f"reached max_iter={max_iter}"
    state.gap, state.gap_kind = relative_gap(obj, state.g, state.f)
    state.seconds = time.perf_counter() - t0
    return state
