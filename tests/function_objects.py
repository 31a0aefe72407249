"""Small function objects for the solvers' own tests: the solver contract (fun, grad, hessp,
n_features; Newton-Cholesky's hessian, prepare_line, line) without any data layer."""

import numpy as np


class Quadratic:
    """f(w) = 1/2 w^T A w - b^T w, A symmetric positive definite: minimiser A^-1 b."""

    def __init__(self, A, b):
        self.A, self.b = np.asarray(A, np.float64), np.asarray(b, np.float64)
        self.n_features = len(b)

    def fun(self, w):
        return float(0.5 * w @ self.A @ w - self.b @ w)

    def grad(self, w):
        return self.A @ w - self.b

    def hessp(self, s):
        return self.A @ s


class SquaredHinge:
    """f(w) = 1/2 ||w||^2 + C sum_i max(0, 1 - x_i.w)^2 (an L2-loss SVM on rows x_i), piecewise
    quadratic like the ranking objectives. ``fun`` keeps the trial point's active set aside and
    ``grad`` commits it, as the contract says; ``hessp`` uses the committed one."""

    def __init__(self, X, C):
        self.X, self.C = np.asarray(X, np.float64), float(C)
        self.n_features = self.X.shape[1]
        self._active = None
        self.calls = []

    def _margins(self, w):
        return 1.0 - self.X @ w

    def fun(self, w):
        self.calls.append("fun")
        m = np.maximum(self._margins(w), 0.0)
        self._trial = (w.copy(), m > 0)
        return float(0.5 * w @ w + self.C * m @ m)

    def grad(self, w):
        self.calls.append("grad")
        assert np.array_equal(self._trial[0], w), "grad must follow fun at the same point"
        m = np.maximum(self._margins(w), 0.0)
        self._active = self._trial[1]
        return w - 2.0 * self.C * self.X.T @ m

    def hessp(self, s):
        self.calls.append("hessp")
        Xa = self.X[self._active]
        return s + 2.0 * self.C * Xa.T @ (Xa @ s)

    def hessian(self):
        Xa = self.X[self._active]
        return np.eye(self.n_features) + 2.0 * self.C * Xa.T @ Xa

    def prepare_line(self, w, s):
        self._line = (self._margins(w), self.X @ s, w @ w, w @ s, s @ s)

    def line(self, t):
        """phi(t) = f(w + t s) and its first two derivatives (generalised) in t."""
        m0, xs, ww, ws, ss = self._line
        m = m0 - t * xs
        act = m > 0
        phi = 0.5 * (ww + 2 * t * ws + t * t * ss) + self.C * np.sum(m[act] ** 2)
        d1 = ws + t * ss - 2.0 * self.C * np.sum(m[act] * xs[act])
        d2 = ss + 2.0 * self.C * np.sum(xs[act] ** 2)
        return phi, d1, d2


def lbfgs_optimum(obj, n):
    """An independent reference: scipy's L-BFGS-B to a tight gradient tolerance."""
    from scipy.optimize import minimize

    def fg(w):
        f = obj.fun(w)
        return f, obj.grad(w)
    r = minimize(fg, np.zeros(n), jac=True, method="L-BFGS-B", options={"gtol": 1e-12, "ftol": 1e-15, "maxiter": 10000})
    return r.x, r.fun


def hinge_problem(seed=0, n=300, d=12, scale_spread=3.0):
    """Rows with features of very different scales (10^-k .. 10^k)."""
    rng = np.random.default_rng(seed)
    scales = 10.0 ** rng.uniform(-scale_spread / 2, scale_spread / 2, d)
    X = rng.standard_normal((n, d)) * scales
    return X
