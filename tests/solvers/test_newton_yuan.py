"""Newton-Yuan (paper 001, sec. 2.3): the optimum TRON reaches, Yuan's step every third iteration,
the safeguard, the paper's absolute stopping tests, and CG directions when there is no dense Hessian."""

import logging
import math
import re

import numpy as np
import pytest

import streamrank
from function_objects import SquaredHinge, hinge_problem
from streamrank.synthetic import write_hdf5
from streamrank.solvers import newton_yuan as ny
from streamrank.solvers.tron import tron
from streamrank.training.exact import train_exact
from streamrank.training.linear import train_linear

COSTS = "0-1:1,1-2:1.3,0-2:2"


def classes():
    """Rows signed by a noisy linear rule: at the optimum many margins exceed 1 (inactive), so
    Newton needs several iterations (from 0 every row is active)."""
    X = hinge_problem(seed=3, n=300, d=12, scale_spread=1.0)
    wt = np.random.default_rng(0).standard_normal(12)
    return X * np.sign(X @ wt + 0.3 * np.random.default_rng(1).standard_normal(300))[:, None]


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    d = tmp_path_factory.mktemp("ny")
    write_hdf5(d / "train.h5", "small", seed=4, part="train", scale=0.2)
    with streamrank.open_dataset(d / "train.h5") as f:
        yield f


@pytest.mark.parametrize("loss", ["squared_hinge", "smooth_hinge"])
@pytest.mark.parametrize("method", ["primal", "nystroem"])
def test_newton_yuan_and_tron_reach_the_same_optimum(ds, method, loss):
    kw = dict(C=0.5, tol=1e-9, method=method, loss=loss, pair_cost=COSTS, query_weight="log_ratio",
              normalize="zscore", **({"eta": 0.2} if loss == "smooth_hinge" else {}),
              **({"gamma": 0.05, "components": 50} if method == "nystroem" else {}))
    _, st = train_linear(ds, solver="tron", **kw)
    _, sy = train_linear(ds, solver="newton_yuan", **kw)
    assert sy["objective"] == pytest.approx(st["objective"], rel=1e-8)
    assert sy["solver"] == "newton_yuan" and sy["grad_norm"] <= 1e-9 * 1e3 * st["grad_norm"] + 1e-6


def test_exact_kernel_newton_yuan_uses_cg_and_reaches_tron(ds):
    kw = dict(C=0.3, kernel="rbf", gamma=0.05, tol=1e-9, loss="smooth_hinge", eta=0.3, queries=(0, 8))
    _, st = train_exact(ds, solver="tron", **kw)
    _, sy = train_exact(ds, solver="newton_yuan", **kw)
    assert sy["objective"] == pytest.approx(st["objective"], rel=1e-8)
    assert sy["cg_steps"] > 0


def test_yuan_step_on_every_third_iteration(caplog):
    """The logged step of iteration k is 1 (or a halving of it) unless k % 3 == 0, where it is
    1 / sqrt(||g_k|| / ||w_k - w_{k-1}|| + 1) (or a halving of that)."""
    X = classes()
    obj = SquaredHinge(X, 10.0)
    points = []
    with caplog.at_level(logging.INFO, logger="streamrank.solvers.newton_yuan"):
        st = ny.newton_yuan(obj, np.zeros(X.shape[1]), eps=1e-12, max_iter=12,
                            callback=lambda s: points.append((s.w.copy(), s.g.copy())))
    steps = [float(m.group(1)) for m in re.finditer(r"step (\S+)", caplog.text)]
    assert len(steps) == st.iteration >= 4
    w_prev = [np.zeros(X.shape[1])] + [p[0] for p in points]
    for k, step in enumerate(steps, start=1):
        want = 1.0
        if k % 3 == 0:
            g_k = points[k - 2][1]  # the gradient at w_k (after iteration k-1)
            want = 1.0 / math.sqrt(np.linalg.norm(g_k) / np.linalg.norm(w_prev[k - 1] - w_prev[k - 2]) + 1.0)
        halvings = math.log2(want / step)  # the log prints 4 significant digits
        assert halvings >= -1e-3 and abs(halvings - round(halvings)) < 1e-3, (k, step, want)
    assert any(k % 3 == 0 and steps[k - 1] < 1 for k in range(1, len(steps) + 1))


def test_safeguard_backtracks_a_rising_step():
    """A function object whose Newton step overshoots (a badly scaled Hessian): the safeguard
    halves until f does not rise, and the run still converges."""

    class Overshoot:
        n_features = 2

        def fun(self, w):
            return float(np.sum(np.sqrt(1.0 + w * w)))  # smooth, convex, Newton overshoots far from 0

        def grad(self, w):
            return w / np.sqrt(1.0 + w * w)

        def hessp(self, s):
            return s / (1.0 + self._w * self._w) ** 1.5

        def hessian(self):
            return np.diag(1.0 / (1.0 + self._w * self._w) ** 1.5)

    o = Overshoot()
    real_grad = o.grad
    o.grad = lambda w: (setattr(o, "_w", np.array(w)), real_grad(w))[1]
    o._w = np.array([3.0, -2.0])
    st = ny.newton_yuan(o, np.array([3.0, -2.0]), eps=1e-10, max_iter=100)
    assert st.converged and np.abs(st.w).max() < 1e-8
    assert st.n_fun > st.iteration + 1  # some trial steps were halved
    fs = [h[1] for h in st.history]
    assert all(b <= a for a, b in zip(fs, fs[1:]))


def test_the_papers_absolute_tests_and_cg_directions(monkeypatch):
    X = classes()[:, :10]
    ref = tron(SquaredHinge(X, 1.0), np.zeros(10), eps=1e-12)
    st = ny.newton_yuan(SquaredHinge(X, 1.0), np.zeros(10), eps=1e-30, gtol_abs=1e-4)
    assert st.converged and st.gnorm <= 1e-4
    st = ny.newton_yuan(SquaredHinge(X, 1.0), np.zeros(10), eps=1e-30, dtol_abs=1e-3)
    assert st.converged and "eps3" in st.message
    monkeypatch.setattr(ny, "DENSE_MAX", 5)  # no dense Hessian: CG through hessp
    st = ny.newton_yuan(SquaredHinge(X, 1.0), np.zeros(10), eps=1e-10)
    assert st.converged and st.n_cg > 0 and st.f == pytest.approx(ref.f, rel=1e-10)


def test_the_papers_stopping_tests_from_the_training_api_and_cli(ds, tmp_path, capsys):
    from streamrank.cli import main
    from streamrank.errors import ParameterError
    _, full = train_linear(ds, solver="newton_yuan", tol=1e-10, C=0.5)
    _, early = train_linear(ds, solver="newton_yuan", tol=1e-10, C=0.5, abs_gtol=10.0 * full["grad_norm"] + 1.0)
    assert early["iterations"] < full["iterations"] and early["grad_norm"] <= 10.0 * full["grad_norm"] + 1.0
    with pytest.raises(ParameterError, match="solver=newton_yuan"):
        train_linear(ds, solver="tron", abs_dtol=1e-4)
    rc = main(["train", str(ds.path), "-o", str(tmp_path / "m.h5"),
               "--abs-gtol", "1e-4"])
    assert rc == 2 and "--solver newton_yuan" in capsys.readouterr().err
