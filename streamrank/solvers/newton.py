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
import math
import time

import numpy as np

from streamrank.solvers.finite import check_f, numeric_error, vector_detail
from streamrank.solvers.tron import accept, finish, relative_gap, start_state, stop_met

log = logging.getLogger("streamrank.solvers.newton")

# line search: stop when |phi'(t)| <= LINE_RTOL |phi'(0)|, when the bracket is narrower than
# LINE_XTOL relative to t (float64 cannot place t better), or after LINE_MAX_EVALS evaluations
LINE_RTOL = 1e-12
LINE_XTOL = 1e-12
LINE_MAX_EVALS = 40


def line_search(line, d0, at=None):
    """Minimise the convex piecewise quadratic phi with phi'(0) = d0 < 0; return (t, evals).

    Semismooth Newton from t = 1 (the Newton step), kept inside a bracket [lo, hi] with
    phi'(lo) < 0 < phi'(hi); a step that leaves the bracket is replaced by bisection. At most
    LINE_MAX_EVALS evaluations; a phi'(t) or phi''(t) that is not finite raises NumericError
    (``at``: the iteration and step, for its message).
    """
    lo, hi = 0.0, np.inf
    t = 1.0
    for k in range(1, LINE_MAX_EVALS + 1):
        _, d1, d2 = line(t)
        if not (math.isfinite(d1) and math.isfinite(d2)):
            raise numeric_error("line", "line search", d1 if not math.isfinite(d1) else d2,
                                detail=f"phi'({t:g}) = {d1!r}, phi''({t:g}) = {d2!r}", **(at or {}))
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
    (``gap_tol``: as :func:`streamrank.solvers.tron.tron`'s).

    Bounded: at most ``max_iter`` trial steps (one per iteration) of at most LINE_MAX_EVALS line
    evaluations. A non-finite f, g, H, direction or line value raises NumericError
    (:mod:`streamrank.solvers.finite`); an H that is not positive definite in float64 (I + PSD in
    exact arithmetic: only a scale that hides the identity makes it so) too."""
    from scipy.linalg import LinAlgError, cho_factor, cho_solve  # here: a TRON run never imports scipy.linalg

    from streamrank._native.blas import one_thread
    state, t0 = start_state(obj, w0, state, delta_from_gradient=False)
    extra = describe or (lambda: "")
    if stop_met(state, eps, gap_tol, relative_gap(obj, state.g, state.f)[0]):
        state.converged, state.message = True, "converged"
    while not state.converged and not state.message and state.n_steps < max_iter:
        at = {"iteration": state.iteration, "step": state.n_steps + 1}
        H = obj.hessian()
        if not np.all(np.isfinite(H)):
            raise numeric_error("hessian", "direction", detail=vector_detail(np.ravel(H)), **at)
        try:
            with one_thread():  # scipy's own OpenBLAS, loaded just above: one thread, the same bits
                s = -cho_solve(cho_factor(H, check_finite=False), state.g, check_finite=False)
        except LinAlgError:
            raise numeric_error("hessian", "direction", state="not positive definite in float64",
                                detail=f"max |H| = {float(np.max(np.abs(H))):.3g} hides its identity part",
                                **at) from None
        d0 = float(state.g @ s)
        if not math.isfinite(d0):
            raise numeric_error("direction", "direction", d0, detail=f"g.s = {d0!r}; {vector_detail(s)}", **at)
        if not d0 < 0:  # H is I + PSD: this only happens when g is below float64 resolution
            state.message = "no descent direction: no further progress possible"
            break
        obj.prepare_line(state.w, s)
        t, evals = line_search(obj.line, d0, at)
        w_new = state.w + t * s
        if np.array_equal(w_new, state.w):  # f(w_new) = f(w): no pass for it, and no iteration on the same w
            state.message = f"the step {t:g} s rounds to w in float64: no further progress possible"
            break
        f_new = check_f(obj.fun(w_new), "trial", **at)
        state.n_fun += 1
        state.n_steps += 1
        state.n_cg += evals  # line-search evaluations, reported in the CG column
        if f_new > state.f:  # cannot happen in exact arithmetic (convex, exact search)
            state.message = "line search found no decrease: no further progress possible"
            break
        accept(obj, state, w_new, f_new, at)
        state.seconds = time.perf_counter() - t0
        gnorm = state.gnorm
        log.info("iter %3d f %.6e |g| %.3e step %.3g line %d %s %.1fs", state.iteration, state.f, gnorm, t, evals,
                 extra(), state.seconds)
        state.history.append((state.iteration, state.f, gnorm, evals, True))
        if stop_met(state, eps, gap_tol, relative_gap(obj, state.g, state.f)[0]):
            state.converged, state.message = True, "converged"
        if callback is not None:
            callback(state)
    return finish(obj, state, max_iter, t0, log, "Newton-Cholesky")
