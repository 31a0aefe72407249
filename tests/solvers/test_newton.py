"""Newton-Cholesky on function objects alone: the exact line search on a piecewise quadratic, the
optimum against L-BFGS and TRON, and its shared stopping rule and state."""

import numpy as np
import pytest

from function_objects import SquaredHinge, hinge_problem, lbfgs_optimum
from streamrank.solvers.newton import line_search, newton_cholesky
from streamrank.solvers.tron import tron


@pytest.mark.parametrize("C", [1e-2, 1.0, 1e2])
def test_reaches_the_lbfgs_and_tron_optimum(C):
    X = hinge_problem(seed=11, scale_spread=3.0)
    _, f_ref = lbfgs_optimum(SquaredHinge(X, C), X.shape[1])
    st = newton_cholesky(SquaredHinge(X, C), np.zeros(X.shape[1]), eps=1e-10)
    assert st.converged or "no further progress" in st.message, st.message
    assert st.f <= f_ref + 1e-9 * abs(f_ref)
    tr = tron(SquaredHinge(X, C), np.zeros(X.shape[1]), eps=1e-10)
    assert st.f == pytest.approx(tr.f, rel=1e-11)
    assert st.iteration < 30  # Newton steps on a piecewise quadratic: few


def test_line_search_finds_the_minimiser_of_a_piecewise_quadratic():
    X = hinge_problem(seed=12)
    obj = SquaredHinge(X, 3.0)
    w = np.zeros(X.shape[1])
    obj.fun(w)
    g = obj.grad(w)
    s = -g
    obj.prepare_line(w, s)
    t, evals = line_search(obj.line, float(g @ s))
    ts = np.linspace(0, 2 * t, 2001)
    phis = [obj.line(u)[0] for u in ts]
    assert obj.line(t)[0] <= min(phis) + 1e-12 * abs(min(phis))
    assert abs(obj.line(t)[1]) <= 1e-10 * abs(g @ s)
    assert evals <= 40


def test_warm_start_and_the_shared_stopping_rule():
    X = hinge_problem(seed=13)
    w0 = tron(SquaredHinge(X, 1.0), np.zeros(X.shape[1]), eps=0.3).w  # a start still far from the optimum
    st = newton_cholesky(SquaredHinge(X, 1.0), w0, eps=1e-2)
    assert st.iteration >= 1 and st.gnorm <= 1e-2 * st.gnorm0
