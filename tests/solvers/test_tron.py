"""TRON on function objects alone (no data layer): the minimiser, the stopping rule, warm starts,
the preconditioned trust region, continuing from a saved state, and the errors it raises."""

import logging
import re

import numpy as np
import pytest

from function_objects import Quadratic, SquaredHinge, hinge_problem, lbfgs_optimum
from streamrank.errors import CheckpointMismatch
from streamrank.solvers.tron import TronState, tron


def spd(n, cond, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (Q * np.geomspace(1.0, cond, n)) @ Q.T


def test_quadratic_reaches_the_solution_of_the_linear_system():
    A = spd(30, 1e3)
    b = np.random.default_rng(1).standard_normal(30)
    st = tron(Quadratic(A, b), np.zeros(30), eps=1e-6)
    assert st.converged
    x = np.linalg.solve(A, b)
    np.testing.assert_allclose(st.w, x, rtol=1e-5, atol=1e-7 * np.abs(x).max())
    assert np.linalg.norm(st.g) <= 1e-6 * np.linalg.norm(b)  # g(0) = -b


@pytest.mark.parametrize("C", [1e-3, 1.0, 1e3])
def test_piecewise_quadratic_with_raw_scales_reaches_the_lbfgs_optimum(C):
    X = hinge_problem(seed=2, scale_spread=4.0)
    obj = SquaredHinge(X, C)
    w_ref, f_ref = lbfgs_optimum(SquaredHinge(X, C), X.shape[1])
    st = tron(obj, np.zeros(X.shape[1]), eps=1e-9)
    # converged, or stopped where float64 cannot see a reduction (a designed stop, not a failure)
    assert st.converged or "float64 resolution" in st.message, st.message
    assert st.f <= f_ref + 1e-9 * abs(f_ref)
    # the contract: fun before grad before hessp at each point, grad only for accepted points
    assert obj.calls[0] == "fun" and obj.calls[1] == "grad"
    assert st.n_grad == st.iteration + 1 and st.n_fun == st.n_steps + 1


def test_warm_start_takes_a_step_and_stops_relative_to_its_own_start():
    """gnorm0 = min(||g(0)||, ||g(w0)||): a start near the optimum is refined by eps again."""
    X = hinge_problem(seed=3)
    w_near = tron(SquaredHinge(X, 1.0), np.zeros(X.shape[1]), eps=1e-3).w
    obj = SquaredHinge(X, 1.0)
    st = tron(obj, w_near, eps=1e-3)
    g0 = np.linalg.norm(_grad_at(X, 1.0, np.zeros_like(w_near)))
    gw = np.linalg.norm(_grad_at(X, 1.0, w_near))
    assert st.gnorm0 == pytest.approx(min(g0, gw), rel=1e-12)
    assert st.iteration >= 1 and st.gnorm <= 1e-3 * min(g0, gw)


def _grad_at(X, C, w):
    obj = SquaredHinge(X, C)
    obj.fun(w)
    return obj.grad(w)


class _Jacobi:
    """M = diag(A): TRON's preconditioner hook (solve, mdot)."""

    def __init__(self, d):
        self.d = d

    def solve(self, r):
        return r / self.d

    def mdot(self, u, v):
        return float(u @ (self.d * v))


def test_preconditioned_trust_region_reaches_the_same_point_in_fewer_cg_steps():
    rng = np.random.default_rng(4)
    d = 10.0 ** rng.uniform(-3, 3, 40)     # badly scaled diagonal times a mild SPD factor
    S = np.sqrt(d)
    A = S[:, None] * spd(40, 10.0, seed=5) * S[None, :]
    b = rng.standard_normal(40)
    plain = tron(Quadratic(A, b), np.zeros(40), eps=1e-10)
    obj = Quadratic(A, b)
    obj.preconditioner = lambda: _Jacobi(np.diag(A).copy())
    pre = tron(obj, np.zeros(40), eps=1e-10, precondition=True)
    x = np.linalg.solve(A, b)
    for st in (plain, pre):
        np.testing.assert_allclose(st.w, x, rtol=1e-6, atol=1e-8 * np.abs(x).max())
    assert pre.n_cg < plain.n_cg / 2


def test_a_saved_state_continues_to_the_same_bits():
    X = hinge_problem(seed=6)
    full = tron(SquaredHinge(X, 10.0), np.zeros(X.shape[1]), eps=1e-10)
    part = tron(SquaredHinge(X, 10.0), np.zeros(X.shape[1]), eps=1e-10, max_iter=2)
    assert part.message == "reached max_iter=2" and part.iteration == 2
    saved = TronState(w=part.w.copy(), f=part.f, g=part.g.copy(), delta=part.delta, gnorm0=part.gnorm0,
                      iteration=part.iteration, n_steps=part.n_steps)
    cont = tron(SquaredHinge(X, 10.0), None, eps=1e-10, state=saved)
    assert np.array_equal(cont.w, full.w) and cont.f == full.f and cont.iteration == full.iteration


def test_a_state_whose_objective_evaluates_differently_is_refused():
    X = hinge_problem(seed=7)
    part = tron(SquaredHinge(X, 1.0), np.zeros(X.shape[1]), max_iter=1)
    part.f += 1e-9
    part.message = ""
    with pytest.raises(CheckpointMismatch, match="numeric environment"):
        tron(SquaredHinge(X, 1.0), None, state=part)


def test_negative_curvature_is_a_step_to_the_boundary_not_an_error():
    """Steihaug: d.Hd <= 0 ends CG on the trust region's boundary (tests/solvers/test_bounded.py
    has the oracle); the indefinite quadratic is unbounded below, and TRON says so."""
    A = np.diag([1.0, -1.0])
    st = tron(Quadratic(A, np.array([1.0, 1.0])), np.zeros(2))
    assert st.message == "objective unbounded below" and st.f < -1e32


def test_one_log_line_per_iteration(caplog):
    X = hinge_problem(seed=8)
    with caplog.at_level(logging.INFO, logger="streamrank.solvers.tron"):
        st = tron(SquaredHinge(X, 1.0), np.zeros(X.shape[1]), eps=1e-6, describe=lambda: "passes 7")
    lines = [r.getMessage() for r in caplog.records if r.name == "streamrank.solvers.tron"]
    assert len(lines) == st.n_steps
    assert all(re.match(r"iter +\d+ f [-+0-9.e]+ \|g\| [0-9.e+-]+ CG +\d+ radius [0-9.e+-]+ .*passes 7", s)
               for s in lines), lines[:2]


@pytest.mark.parametrize("C", [1e-2, 1.0, 1e2])
def test_the_gap_bound_of_a_strongly_convex_objective_holds_at_every_stop(C):
    """f(w) - f* <= ||g||^2 / 2 for 1/2 ||w||^2 + C loss: the reported relative gap bounds the
    true one (against L-BFGS's optimum), at a loose and at a tight tolerance."""
    X = hinge_problem(seed=4, scale_spread=3.0)
    _, f_ref = lbfgs_optimum(SquaredHinge(X, C), X.shape[1])
    for eps in (1e-1, 1e-3):
        obj = SquaredHinge(X, C)
        obj.strong_convexity = 1.0
        st = tron(obj, np.zeros(X.shape[1]), eps=eps)
        assert st.gap_kind == "bound"
        assert (st.f - f_ref) / st.f <= st.gap * (1 + 1e-9) + 1e-15
        assert st.gap == pytest.approx(0.5 * st.gnorm ** 2 / st.f, rel=1e-12)


def test_the_gap_estimate_with_the_exact_hessian_is_the_gap_of_a_quadratic():
    """Without strong convexity declared, 1/2 g^T M^-1 g with M the preconditioner: M = A on a
    quadratic gives f(w) - f* itself; no preconditioner, no gap."""
    A = spd(25, 1e4, seed=5)
    b = np.random.default_rng(6).standard_normal(25)
    f_star = -0.5 * b @ np.linalg.solve(A, b)
    obj = Quadratic(A, b)
    obj.preconditioner = lambda: _Jacobi(np.diag(A).copy())  # a poor M: the estimate is M's
    st = tron(obj, np.zeros(25), eps=1e-2, precondition=True, max_iter=2)
    exact = Quadratic(A, b)
    exact.preconditioner = lambda: type("M", (), {"solve": staticmethod(lambda r: np.linalg.solve(A, r)),
                                                   "mdot": staticmethod(lambda u, v: float(u @ A @ v))})()
    st2 = tron(exact, st.w, eps=1e-12, precondition=True, max_iter=0)  # evaluates at st.w and stops
    assert st2.gap_kind == "estimate"
    assert st2.gap == pytest.approx((st2.f - f_star) / abs(st2.f), rel=1e-8)
    assert tron(Quadratic(A, b), np.zeros(25), eps=1e-2).gap is None


def test_a_gap_target_replaces_the_gradient_rule_and_holds():
    """gap_tol: TRON stops once the bound is at most the target, so the true relative gap is too;
    a loose --tol that stopped earlier no longer does, and a target met at once stops at once."""
    X = hinge_problem(seed=7, scale_spread=3.0)
    _, f_ref = lbfgs_optimum(SquaredHinge(X, 1.0), X.shape[1])

    def run(**kw):
        obj = SquaredHinge(X, 1.0)
        obj.strong_convexity = 1.0
        return tron(obj, np.zeros(X.shape[1]), **kw)
    loose = run(eps=1e-1)
    for target in (1e-5, 1e-8):
        st = run(eps=1e-1, gap_tol=target)
        assert st.converged and st.gap <= target
        assert (st.f - f_ref) / st.f <= target + 1e-15
        assert st.iteration >= loose.iteration
    assert run(eps=1e-12, gap_tol=0.99).iteration < run(eps=1e-12).iteration


# -- cg_stop="quadratic": the model-decrease truncation test (Nash and Sofer) ----------------------


class _Counted:
    def __init__(self, H):
        self.H, self.n_hessp = H, 0

    def __call__(self, d):
        return self.H @ d


def test_the_quadratic_truncation_stops_at_the_first_step_the_explicit_model_allows():
    """Oracle: plain CG with the model q(s) = g.s + 1/2 s.Hs evaluated from H itself; the
    solver's q comes from the residual instead. Same steps, the same first j with
    j (q_j - q_{j-1}) >= 0.5 q_j and ||r_j|| <= 0.3 ||g||."""
    from streamrank.solvers.tron import CG_QUAD_TOL, XI_QUAD, _trcg
    n = 200
    H = spd(n, 1e3, seed=4)
    g = np.random.default_rng(5).standard_normal(n)
    s, r, steps, boundary = _trcg(_Counted(H), g, 1e12, _Counted(H), quadratic=1.0)
    assert not boundary
    # the oracle's CG
    x, res, d, q_prev, want = np.zeros(n), -g.copy(), -g.copy(), 0.0, None
    for j in range(1, 10 * n):
        a = (res @ res) / (d @ H @ d)
        x = x + a * d
        res_new = res - a * (H @ d)
        q = g @ x + 0.5 * x @ H @ x
        if j * (q - q_prev) >= CG_QUAD_TOL * q and np.linalg.norm(res_new) <= XI_QUAD * np.linalg.norm(g):
            want = j
            break
        d = res_new + (res_new @ res_new) / (res @ res) * d
        res, q_prev = res_new, q
    assert want is not None and steps == want
    np.testing.assert_allclose(s, x, rtol=1e-9, atol=1e-12 * np.abs(x).max())
    # the residual test alone runs on: the truncation is what stopped it
    _, _, steps_res, _ = _trcg(_Counted(H), g, 1e12, _Counted(H))
    assert steps_res > steps


@pytest.mark.parametrize("seed", [2, 6])
@pytest.mark.parametrize("C", [1e-2, 1.0, 10.0, 1e3])
def test_quadratic_truncation_reaches_the_optimum_on_raw_scales_without_crawling(seed, C):
    """Without the residual floor XI_QUAD the truncation cut CG at 3 steps and seed 6, C = 10 ran
    1,000 iterations without converging (the residual rule: 11)."""
    X = hinge_problem(seed=seed, scale_spread=4.0)
    w_ref, f_ref = lbfgs_optimum(SquaredHinge(X, C), X.shape[1])
    res = tron(SquaredHinge(X, C), np.zeros(X.shape[1]), eps=1e-8)
    quad = tron(SquaredHinge(X, C), np.zeros(X.shape[1]), eps=1e-8, cg_stop="quadratic")
    for st in (res, quad):
        assert st.converged or "float64 resolution" in st.message, st.message
        assert st.f <= f_ref + 1e-9 * abs(f_ref)
    assert quad.iteration <= 2 * res.iteration + 5


def test_a_model_decrease_below_the_floor_leaves_the_residual_test_in_charge():
    from streamrank.solvers.tron import _trcg
    H = spd(40, 1e6, seed=7)
    g = np.random.default_rng(8).standard_normal(40)
    a = _trcg(_Counted(H), g, 1e12, _Counted(H))
    # |f| so large that every model decrease is below CG_QUAD_FLOOR |f|
    b = _trcg(_Counted(H), g, 1e12, _Counted(H), quadratic=1e300)
    assert a[2] == b[2] and np.array_equal(a[0], b[0])


def test_an_unknown_cg_stop_is_refused():
    with pytest.raises(ValueError, match="cg_stop must be"):
        tron(Quadratic(np.eye(3), np.ones(3)), np.zeros(3), cg_stop="model")


def test_the_first_step_is_not_truncated_its_length_sets_the_radius():
    """LIBLINEAR's first step shrinks the radius to ||s_1||: a truncated first step made the radius
    10x smaller on a 42,158-row kernel problem. The first iteration is the residual rule's, bit for bit."""
    X = hinge_problem(seed=6, scale_spread=4.0)
    a = tron(SquaredHinge(X, 10.0), np.zeros(X.shape[1]), eps=1e-8, max_iter=1)
    b = tron(SquaredHinge(X, 10.0), np.zeros(X.shape[1]), eps=1e-8, max_iter=1, cg_stop="quadratic")
    assert a.n_cg == b.n_cg and np.array_equal(a.w, b.w) and a.delta == b.delta
    c = tron(SquaredHinge(X, 10.0), np.zeros(X.shape[1]), eps=1e-8, max_iter=2, cg_stop="quadratic")
    d = tron(SquaredHinge(X, 10.0), np.zeros(X.shape[1]), eps=1e-8, max_iter=2)
    assert c.n_cg < d.n_cg  # from the second step on it truncates


def test_the_returned_gap_is_the_last_log_lines_and_a_run_resumed_at_its_end_reports_it():
    """The returned point's gap estimate is the last iteration's (its preconditioner built at this
    or the previous point): no preconditioner is built for it alone (a whole update on the exact
    kernel path), and a run resumed from the final state, as a checkpoint restores it, reports
    the same number. A preconditioner that depends on the point makes the two differ if either
    rule breaks."""
    import copy
    A = spd(25, 1e3, seed=7)
    b = np.random.default_rng(8).standard_normal(25)
    obj = Quadratic(A, b)
    built = []

    def precond():  # depends on the last point f was evaluated at
        built.append(1)
        w = getattr(obj, "_last", np.zeros(25))
        return _Jacobi(np.diag(A) * (1.0 + 0.1 * np.tanh(np.abs(w))))

    fun = obj.fun
    obj.fun = lambda w: (setattr(obj, "_last", np.array(w)), fun(w))[1]
    obj.preconditioner = precond
    st = tron(obj, np.zeros(25), eps=1e-6, precondition=True)
    assert st.converged and st.gap_kind == "estimate" and st.gap is not None
    accepted = sum(1 for h in st.history if h[4])
    assert len(built) == 1 + accepted - 1  # one at the start, one after each accepted step but the last
    resumed = tron(obj, st.w, state=copy.deepcopy(st), precondition=True)
    assert resumed.gap == st.gap and resumed.gap_kind == st.gap_kind
