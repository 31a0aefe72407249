"""CLSRRank's direct solve (training/clsr._solve) ends with NumericError on a system that is not
finite or not positive definite in float64, and solves a finite one (oracle: numpy's solve)."""

import math

import numpy as np
import pytest

from streamrank.errors import NumericError
from streamrank.training.clsr import _solve


def system(m=5, seed=0):
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((3 * m, m))
    return {"G": B.T @ B, "b": rng.standard_normal(m), "c": 4.0, "S": 30.0, "rows": 3 * m}


def test_a_finite_system_is_solved():
    s = system()
    alpha, obj = _solve(dict(s, G=s["G"].copy()), 0.1)
    A = (2 / s["S"]) * s["G"] + 0.1 * 5 * np.eye(5)
    np.testing.assert_allclose(alpha, np.linalg.solve(A, (2 / s["S"]) * s["b"]), rtol=1e-10)
    assert math.isfinite(obj)


@pytest.mark.parametrize("name", ["G", "b", "c"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_system_that_is_not_finite_is_a_numeric_error(name, value):
    s = system()
    if name == "c":
        s["c"] = value
    else:
        s[name] = s[name].copy()
        s[name].flat[1] = value
    with pytest.raises(NumericError, match=rf"not finite in the direct solve; lambda=0.1: {name}0: 1 of its") as e:
        _solve(s, 0.1)
    assert e.value.where == "direct solve"


def test_a_system_that_rounds_to_indefinite_is_a_numeric_error():
    s = system()
    s["G"] = np.diag([1.0, -1.0, 1.0, 1.0, 1.0])  # not a Gram matrix, as no data can make it
    with pytest.raises(NumericError, match="not positive definite in float64 in the direct solve"):
        _solve(s, 1e-6)
