"""Every solver loop ends (issue 30, build item 1): function objects that return nan or inf at the
start, at a trial point, in a Hessian product or in a gradient end the run at once with a
NumericError that names the quantity and where; a run whose every trial is rejected ends at
max_iter trial steps; a trust radius below float64 resolution ends with its message; negative
curvature is Steihaug's step to the boundary (oracles: the explicit model and norm); and, by
Hypothesis, any convex quadratic scaled by 10^k, |k| <= 300, with or without a fault at a random
call, ends within max_iter steps with a NumericError or a finite w no worse than w0."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamrank.errors import NumericError, StreamrankError
from streamrank.solvers.newton import newton_cholesky
from streamrank.solvers.newton_yuan import newton_yuan
from streamrank.solvers.tron import EPS64, TronState, _trcg, _trpcg, cg_cap, tron

SOLVERS = {"tron": tron, "newton_cholesky": newton_cholesky, "newton_yuan": newton_yuan}


class Quad:
    """f(w) = 1/2 w^T A w - b^T w with every method a solver may call (TRON's hessp, Newton's
    hessian and line), counting calls."""

    def __init__(self, A, b):
        self.A, self.b = np.asarray(A, np.float64), np.asarray(b, np.float64)
        self.n_features = len(self.b)
        self.calls = 0

    def value(self, w):
        return float(0.5 * w @ self.A @ w - self.b @ w)

    def fun(self, w):
        self.calls += 1
        return self.value(w)

    def grad(self, w):
        self.calls += 1
        return self.A @ w - self.b

    def hessp(self, s):
        self.calls += 1
        return self.A @ s

    def hessian(self):
        self.calls += 1
        return self.A.copy()

    def prepare_line(self, w, s):
        self._line = (self.value(w), float((self.A @ w - self.b) @ s), float(s @ self.A @ s))

    def line(self, t):
        self.calls += 1
        f0, gs, sas = self._line
        return f0 + t * gs + 0.5 * t * t * sas, gs + t * sas, sas


class Faulty(Quad):
    """A Quad whose ``bad``-th call of ``method`` (1-based) returns ``value`` (a vector: one entry)."""

    def __init__(self, A, b, method, bad, value):
        super().__init__(A, b)
        self.method, self.bad, self.value_ = method, bad, value
        self.n = {}

    def _hit(self, name):
        self.n[name] = self.n.get(name, 0) + 1
        return name == self.method and self.n[name] == self.bad

    def fun(self, w):
        v = super().fun(w)
        return self.value_ if self._hit("fun") else v

    def grad(self, w):
        v = super().grad(w)
        if self._hit("grad"):
            v = v.copy()
            v[-1] = self.value_
        return v

    def hessp(self, s):
        v = super().hessp(s)
        if self._hit("hessp"):
            v = v.copy()
            v[0] = self.value_
        return v

    def hessian(self):
        v = super().hessian()
        if self._hit("hessian"):
            v[0, -1] = self.value_
        return v

    def line(self, t):
        v = super().line(t)
        return (v[0], self.value_, v[2]) if self._hit("line") else v


def spd(n, cond, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (Q * np.geomspace(1.0, cond, n)) @ Q.T


def problem(n=6, seed=1):
    return spd(n, 100.0, seed), np.random.default_rng(seed + 1).standard_normal(n)


# -- non-finite values end the run at once, with what and where ---------------------------------------


@pytest.mark.parametrize("solver", sorted(SOLVERS))
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("method,bad,quantity,where", [
    ("fun", 1, "f", "start"),         # the starting point's objective
    ("grad", 1, "g", "start"),        # the starting point's gradient
    ("fun", 2, "f", "trial"),         # the first trial point
    ("grad", 2, "g", "accepted"),     # the first accepted point's gradient
])
def test_a_non_finite_value_ends_the_run_naming_it(solver, value, method, bad, quantity, where):
    A, b = problem()
    obj = Faulty(A, b, method, bad, value)
    with pytest.raises(NumericError) as e:
        SOLVERS[solver](obj, np.zeros(len(b)), eps=1e-12, max_iter=50)
    err = e.value
    assert isinstance(err, StreamrankError) and isinstance(err, ArithmeticError)
    assert (err.quantity, err.where) == (quantity, where), str(err)
    msg = str(err)
    assert "not finite" in msg and "a non-finite value in the data" in msg and "overflows float64" in msg
    assert ("starting point" in msg) == (where == "start")
    if where != "start":
        assert err.step == 1 and err.iteration == 0 and "step 1" in msg
    assert obj.calls <= 3 + cg_cap(len(b))  # at once: no loop on the value


@pytest.mark.parametrize("value", [math.nan, math.inf])
@pytest.mark.parametrize("bad", [1, 3])
def test_a_non_finite_hessian_product_ends_cg_naming_its_step(value, bad):
    A, b = problem(n=8)
    for solver in ("tron", "newton_yuan"):
        obj = Faulty(A, b, "hessp", bad, value)
        with pytest.raises(NumericError) as e:
            if solver == "tron":
                tron(obj, np.zeros(8), eps=1e-12)
            else:  # no dense Hessian: CG through hessp
                newton_yuan(obj, np.zeros(8), eps=1e-12, dense_max=0)
        err = e.value
        assert (err.quantity, err.where, err.cg_step, err.step) == ("hessp", "cg", bad, 1), str(err)
        assert f"CG step {bad} of step 1" in str(err)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_newton_cholesky_names_a_non_finite_hessian_or_line_value(value):
    A, b = problem()
    for method, quantity in (("hessian", "hessian"), ("line", "line")):
        with pytest.raises(NumericError) as e:
            newton_cholesky(Faulty(A, b, method, 1, value), np.zeros(len(b)), eps=1e-12)
        assert e.value.quantity == quantity, str(e.value)


def test_a_gradient_whose_norm_overflows_is_not_finite():
    """Entries of 1e200 are finite, but ||g|| is not: the radius and the stopping rule's reference
    would be inf (--C 1e300 "converged" at 0 iterations with |g| inf)."""
    A, b = problem()
    with pytest.raises(NumericError, match=r"squares overflow \(max \|entry\| = [0-9.]+e\+200\)") as e:
        tron(Quad(A, b * 1e200), np.zeros(len(b)))
    assert e.value.quantity == "g" and e.value.where == "start"


def test_the_warm_start_reference_point_is_checked_too():
    A, b = problem()
    obj = Faulty(A, b, "fun", 1, math.nan)  # the first call is at w = 0, the reference
    with pytest.raises(NumericError, match=r"at w = 0 \(the stopping rule's reference\)"):
        tron(obj, np.ones(len(b)))


def test_a_resumed_state_whose_objective_is_not_finite_is_a_numeric_error():
    A, b = problem()
    part = tron(Quad(A, b), np.zeros(len(b)), eps=1e-12, max_iter=2)
    part.message = ""
    with pytest.raises(NumericError, match="checkpoint's point"):
        tron(Faulty(A, b, "fun", 1, math.inf), None, state=part)


# -- every trial counts toward max_iter; a radius below float resolution ends the run ------------------


class AlwaysWorse(Quad):
    """The quadratic's model, but every point other than the start is worse than the start: every
    trial is rejected (TRON: actual reduction -1; Newton: no decrease)."""

    def __init__(self, A, b, w0):
        super().__init__(A, b)
        self.w0, self.f0 = np.array(w0, np.float64), self.value(np.asarray(w0, np.float64))

    def fun(self, w):
        self.calls += 1
        return self.f0 if np.array_equal(w, self.w0) else self.f0 + 1.0


@pytest.mark.parametrize("max_iter", [1, 5, 40])
def test_tron_stops_at_max_iter_trial_steps_when_every_trial_is_rejected(max_iter, caplog):
    """The --C inf --max-iter 5 hang: max_iter counted accepted steps, and none was accepted."""
    A, b = problem()
    obj = AlwaysWorse(A, b, np.zeros(len(b)))  # w = 0: the radius rule eps ||w|| = 0 cannot stop it first
    with caplog.at_level("INFO", logger="streamrank.solvers.tron"):
        st = tron(obj, np.zeros(len(b)), max_iter=max_iter)
    assert st.n_steps == max_iter and st.iteration == 0 and not st.converged
    assert st.message == f"reached max_iter={max_iter} (0 accepted, {max_iter} rejected steps)"
    assert st.n_fun == max_iter + 1 and np.array_equal(st.w, np.zeros(len(b)))
    lines = [r.getMessage() for r in caplog.records if r.name == "streamrank.solvers.tron"]
    assert [ln.split("(rejected, ")[1].split(")")[0] for ln in lines[:max_iter]] == \
        [f"step {k}" for k in range(1, max_iter + 1)]


def test_newton_yuan_counts_its_backtracking_trials_toward_max_iter():
    A, b = problem()
    st = newton_yuan(AlwaysWorse(A, b, np.zeros(len(b))), np.zeros(len(b)), max_iter=7)
    assert st.n_steps == 7 and st.message == "reached max_iter=7 (0 accepted, 7 rejected steps)"
    # with room for every halving, the safeguard's own stop
    st = newton_yuan(AlwaysWorse(A, b, np.zeros(len(b))), np.zeros(len(b)), max_iter=1000)
    assert st.n_steps == 31 and "no decrease along the Newton direction" in st.message


def test_newton_cholesky_ends_on_a_trial_without_decrease():
    A, b = problem()
    st = newton_cholesky(AlwaysWorse(A, b, np.zeros(len(b))), np.zeros(len(b)), max_iter=1000)
    assert st.n_steps == 1 and st.iteration == 0 and "no decrease" in st.message


class ExpSum:
    """f(w) = 1/2 ||w||^2 - b.w + sum_i exp(x_i.w): far from its minimiser the quadratic model
    underestimates f badly, so TRON rejects steps on the way (6 of its first 8 here)."""

    def __init__(self, seed=0, scale=1000.0):
        rng = np.random.default_rng(seed)
        self.X, self.b = rng.standard_normal((30, 4)), scale * rng.standard_normal(4)
        self.n_features = 4

    def fun(self, w):
        return float(0.5 * w @ w - self.b @ w + np.sum(np.exp(self.X @ w)))

    def grad(self, w):
        self.e = np.exp(self.X @ w)
        return w - self.b + self.X.T @ self.e

    def hessp(self, s):
        return s + self.X.T @ (self.e * (self.X @ s))


def test_a_capped_run_resumes_to_the_uninterrupted_runs_bits():
    """max_iter counts trial steps and the state keeps the count: a run capped after k steps and
    continued reaches the same point as one that was never stopped (rejections included)."""
    full = tron(ExpSum(), np.zeros(4), eps=1e-10, max_iter=60)
    assert sum(not h[4] for h in full.history) >= 3 and full.n_steps > full.iteration
    for k in (1, 2, 5, 8):
        part = tron(ExpSum(), np.zeros(4), eps=1e-10, max_iter=k)
        rejected = sum(not h[4] for h in part.history)
        assert part.n_steps == k and part.message == f"reached max_iter={k}" + \
            (f" ({k - rejected} accepted, {rejected} rejected steps)" if rejected else "")
        saved = TronState(w=part.w.copy(), f=part.f, g=part.g.copy(), delta=part.delta, gnorm0=part.gnorm0,
                          iteration=part.iteration, n_steps=part.n_steps)
        cont = tron(ExpSum(), None, eps=1e-10, max_iter=60, state=saved)
        assert np.array_equal(cont.w, full.w) and cont.f == full.f
        assert (cont.iteration, cont.n_steps, cont.message) == (full.iteration, full.n_steps, full.message)


def test_a_radius_below_float_resolution_ends_the_run_with_its_message():
    """From w0 != 0 every rejection shrinks the radius by at least SIGMA2 = 1/2: it falls below
    eps ||w|| within about log2(||g|| / (eps ||w||)) steps, far fewer than max_iter."""
    A, b = problem()
    w0 = np.full(len(b), 3.0)
    st = tron(AlwaysWorse(A, b, w0), w0, max_iter=100_000)
    assert "below float64 resolution" in st.message and "trust radius" in st.message, st.message
    assert st.delta <= EPS64 * np.linalg.norm(w0) and st.n_steps < 120
    assert np.array_equal(st.w, w0) and not st.converged


# -- negative curvature: Steihaug's step to the boundary ---------------------------------------------


class _Counter:
    n_hessp = 0


def _model(H, g, s):
    return float(g @ s + 0.5 * s @ H @ s)


@pytest.mark.parametrize("first", [True, False])
def test_negative_curvature_lands_on_the_boundary_and_decreases_the_model(first):
    """Oracle: the explicit model q(s) = g.s + 1/2 s.Hs and ||s||. ``first``: g along the negative
    eigenvector, so d.Hd < 0 on the first CG step (s = 0); else H = diag(3, -1), g = (1, 1): the
    first step has d.Hd = 2 and stays inside, the second d = (-2, -6) has d.Hd = -24."""
    if first:
        n = 10
        Q, _ = np.linalg.qr(np.random.default_rng(3).standard_normal((n, n)))
        H = (Q * np.r_[-2.0, np.geomspace(1.0, 50.0, n - 1)]) @ Q.T
        g = Q[:, 0]
    else:
        H, g = np.diag([3.0, -1.0]), np.array([1.0, 1.0])
    delta = 5.0
    curvatures = []

    def hessp(d):
        curvatures.append(float(d @ H @ d))
        return H @ d
    s, r, steps, boundary = _trcg(hessp, g, delta, _Counter())
    assert boundary and steps == (1 if first else 2) and curvatures[-1] < 0 and all(c > 0 for c in curvatures[:-1])
    assert np.linalg.norm(s) == pytest.approx(delta, rel=1e-12)
    assert _model(H, g, s) < 0
    np.testing.assert_allclose(r, -g - H @ s, atol=1e-12 * np.abs(H).sum())
    if first:  # along -g itself, to the boundary: the model's value there is known
        np.testing.assert_allclose(s, -delta * g / np.linalg.norm(g), rtol=1e-12)


def test_negative_curvature_under_a_preconditioner_lands_on_the_m_norm_boundary():
    n = 8
    rng = np.random.default_rng(5)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    H = (Q * np.r_[-1.0, np.geomspace(0.5, 20.0, n - 1)]) @ Q.T
    Md = rng.uniform(0.5, 3.0, n)

    class M:
        @staticmethod
        def solve(r):
            return r / Md

        @staticmethod
        def mdot(u, v):
            return float(u @ (Md * v))
    g = rng.standard_normal(n)
    s, r, steps, boundary = _trpcg(lambda d: H @ d, g, 2.0, _Counter(), M)
    assert boundary and math.sqrt(s @ (Md * s)) == pytest.approx(2.0, rel=1e-12)
    assert _model(H, g, s) < 0


def test_curvature_that_rounds_to_zero_is_a_boundary_step_not_an_overflow():
    H = np.diag([1e-320, 1.0])  # d.Hd subnormal: z.r / d.Hd overflows
    g = np.array([1.0, 0.0])
    s, r, steps, boundary = _trcg(lambda d: H @ d, g, 3.0, _Counter())
    assert boundary and np.allclose(s, [-3.0, 0.0]) and np.all(np.isfinite(r))


def test_tron_minimises_a_nonconvex_function_through_negative_curvature():
    """f = sum w^4 / 4 - w^2 / 2 + c.w: indefinite Hessian near 0, bounded below. Steihaug steps
    take TRON from near the saddle to a local minimum (the old CG raised FloatingPointError)."""
    c = np.array([0.1, -0.2, 0.05])

    class DoubleWell:
        n_features = 3

        def fun(self, w):
            return float(np.sum(w ** 4 / 4 - w ** 2 / 2) + c @ w)

        def grad(self, w):
            self.w = w
            return w ** 3 - w + c

        def hessp(self, s):
            return (3 * self.w ** 2 - 1) * s
    w0 = np.full(3, 1e-3)
    f0 = DoubleWell().fun(w0)
    st = tron(DoubleWell(), w0, eps=1e-10, max_iter=200)
    assert (st.converged or "float64 resolution" in st.message) and st.f < f0, st.message
    assert np.all(3 * st.w ** 2 - 1 > 0)  # a minimum: positive curvature in every coordinate
    np.testing.assert_allclose(st.w ** 3 - st.w + c, 0, atol=1e-6)  # f(w) - f* ~ |g|^2 is below f's resolution


def test_cg_is_capped_in_steps():
    """A hessp whose CG never meets its residual test (R d + 1e-3 d, R a rotation: d.Hd > 0 but
    the residual grows every step) stops at cg_cap(n) CG steps, inside the region."""
    n = 4
    R = np.zeros((n, n))
    R[0, 1], R[1, 0], R[2, 3], R[3, 2] = 1.0, -1.0, 1.0, -1.0
    calls = []

    def hessp(d):
        calls.append(1)
        return R @ d + 1e-3 * d
    s, r, steps, boundary = _trcg(hessp, np.ones(n), 1e300, _Counter())
    assert steps == cg_cap(n) == len(calls) and not boundary and np.all(np.isfinite(s))


# -- the property: any scaled convex quadratic, with or without a fault at a random call -------------


@st.composite
def faulty_quadratics(draw):
    n = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2 ** 16))
    k = draw(st.integers(-300, 300))
    cond = 10.0 ** draw(st.integers(0, 8))
    A = spd(n, cond, seed) * 10.0 ** k
    rng = np.random.default_rng(seed + 1)
    b = rng.standard_normal(n) * 10.0 ** draw(st.integers(-300, 300))
    method = draw(st.sampled_from([None, "fun", "grad", "hessp", "hessian", "line"]))
    bad = draw(st.integers(1, 12))
    value = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    w0 = np.zeros(n) if draw(st.booleans()) else rng.standard_normal(n)
    return (Quad(A, b) if method is None else Faulty(A, b, method, bad, value)), w0


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(case=faulty_quadratics(), solver=st.sampled_from(sorted(SOLVERS)), max_iter=st.integers(1, 25))
def test_every_run_ends_within_max_iter_with_a_numeric_error_or_a_finite_w_no_worse(case, solver, max_iter):
    obj, w0 = case
    n = obj.n_features
    try:
        with np.errstate(all="ignore"):
            st_ = SOLVERS[solver](obj, w0, eps=1e-8, max_iter=max_iter)
    except NumericError as e:
        assert e.quantity and e.where and "not finite" in str(e)
    else:
        assert st_.n_steps <= max_iter
        assert np.all(np.isfinite(st_.w)) and math.isfinite(st_.f)
        with np.errstate(all="ignore"):
            f0 = Quad(obj.A, obj.b).value(w0)
        assert st_.f <= f0 or not math.isfinite(f0)
        assert st_.converged or st_.message
    # the bound on work, whichever way it ended: fun/grad/hessian per step, CG and line search
    per_step = 3 + max(cg_cap(n), 500, 40)
    assert obj.calls <= 4 + max_iter * per_step
