"""The table of parameter ranges (streamrank.params): every value is either taken inside its range
or refused with a ParameterError that names the parameter, over values nobody listed."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamrank import params
from streamrank.errors import ParameterError
from streamrank.units import parse_size
from streamrank.workflow.values import parse_values

FAST = settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# the whole float range, with the values that broke runs before (inf, 1e300, subnormals), integers,
# text and things that are not numbers at all
ANY_VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.sampled_from([0, -1, 1e-300, 1e300, -1e300, 5e-324, float("inf"), float("-inf"), float("nan"), 2**31,
                     2**63, 2**64, -(2**63), 0.5, 1.0, 3, True, False, None]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.text(max_size=8),
    st.sampled_from(["inf", "nan", "-inf", "1e999", "0.5", "3", " 2 ", "0x10", "1_000", "", "2GB"]),
    st.builds(np.float32, st.floats(width=32)),
    st.builds(np.int64, st.integers(min_value=-(2**63), max_value=2**63 - 1)),
)


@FAST
@given(name=st.sampled_from(sorted(params.RANGES)), value=ANY_VALUE)
def test_a_value_is_taken_inside_its_range_or_refused_by_name(name, value):
    r = params.RANGES[name]
    try:
        v = params.check(name, value)
    except ParameterError as e:
        msg = str(e)
        assert msg.startswith(f"{name} must be ") and f"Use {name}=" in msg
        return
    assert math.isfinite(v)
    assert r.holds(v)
    assert isinstance(v, int) if r.integer else isinstance(v, float)


@pytest.mark.parametrize("name", sorted(params.RANGES))
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), "inf", "nan", True, None, "x"])
def test_inf_nan_and_non_numbers_are_refused_everywhere(name, bad):
    with pytest.raises(ParameterError, match=rf"^{name} must be "):
        params.check(name, bad)


def test_ranges_hold_their_own_example_and_bounds():
    for name, r in params.RANGES.items():
        if name in ("memory_budget", "block_bytes", "cache_size"):
            assert r.holds(parse_size(r.example, name))
        elif r.example not in ("auto",) and ":" not in r.example and "," not in r.example:
            assert r.holds(params.check(name, r.example)), name
        for edge, is_open in ((r.low, r.open_low), (r.high, r.open_high)):
            if math.isfinite(edge):
                assert r.holds(edge) is not is_open, name


def test_zero_and_negatives_are_refused_only_where_the_range_excludes_them():
    assert params.check("coef0", 0) == 0.0 and params.check("coef0", -2.5) == -2.5
    assert params.check("seed", 0) == 0
    assert params.check("tradeoff", 0) == 0.0
    for name in ("C", "gamma", "tol", "lam", "eta", "gap_tol"):
        with pytest.raises(ParameterError, match=name):
            params.check(name, 0)
        with pytest.raises(ParameterError, match=name):
            params.check(name, -1)
    # integers where floats are expected, and whole floats where integers are
    assert params.check("C", 2) == 2.0 and params.check("max_iter", 5.0) == 5
    with pytest.raises(ParameterError, match="max_iter must be an integer"):
        params.check("max_iter", 2.5)


@FAST
@given(text=st.one_of(st.text(max_size=20), st.sampled_from(
    ["inf", "nan", "2^2000", "2^-2000", "2^-5:2^5000", "1e999", "0.1,inf", "2^1:2^1024", "10^-400", "-1"])))
def test_value_lists_are_finite_and_positive_or_refused(text):
    try:
        values = parse_values(text, "C")
    except ParameterError as e:
        assert "C" in str(e)
        return
    assert values and all(math.isfinite(v) and v > 0 for v in values)


@FAST
@given(value=ANY_VALUE)
def test_sizes_are_positive_bytes_or_refused(value):
    try:
        n = parse_size(value)
    except ParameterError as e:
        assert "memory_budget" in str(e)
        return
    assert isinstance(n, int) and 0 < n <= 2**62


@FAST
@given(weight_sum=st.floats(0, 1e30), sq_norm=st.floats(0, 1e80))
def test_c_limit_keeps_the_objectives_bound_finite(weight_sum, sq_norm):
    C = params.c_limit(weight_sum, sq_norm)
    assert C > 0
    # the bound of params.c_limit's docstring, formed as the objective forms it, stays finite
    assert math.isfinite((2.0 * C * max(weight_sum, 1.0) * max(1.0, 4.0 * sq_norm) * 10) ** 3)


def _pairwise_objective_at_zero_and_gradient(X, y, qid, C):
    """f(0) and g(0) of the squared-hinge RankSVM by brute force over pairs (the oracle)."""
    f, g = 0.0, np.zeros(X.shape[1])
    for q in np.unique(qid):
        idx = np.flatnonzero(qid == q)
        for i in idx:
            for j in idx:
                if y[i] > y[j]:
                    f += C
                    g -= 2 * C * (X[i].astype(np.float64) - X[j])
    return f, g


def test_c_refused_on_data_where_it_overflows_and_the_limit_works():
    """C = 1e300 on huge raw values is refused before the first iteration with the limit; the
    limit's objective, gradient and Hessian scale are finite (the brute-force oracle)."""
    import streamrank
    rng = np.random.default_rng(0)
    X = (rng.standard_normal((12, 3)) * 1e30).astype(np.float32)
    y = np.array([0, 1, 2] * 4, np.float32)
    qid = np.repeat([1, 2], 6)
    with pytest.raises(ParameterError, match=r"C=1e\+300 overflows float64 .* C must be at most") as e:
        streamrank.RankSVM(C=1e300, max_iter=3).fit(X, y, qid=qid)
    limit = float(str(e.value).split("C must be at most ")[1].split(" ")[0])
    f0, g0 = _pairwise_objective_at_zero_and_gradient(X, y, qid, limit)
    assert math.isfinite(f0) and np.isfinite(g0).all()
    m = streamrank.RankSVM(C=limit / 10, max_iter=3).fit(X, y, qid=qid)
    assert np.isfinite(m.coef_).all() and math.isfinite(m.objective_)


@pytest.mark.parametrize("C", [float("inf"), float("nan"), -1.0, 0.0, "inf"])
def test_estimator_refuses_a_c_outside_its_range(C):
    import streamrank
    X = np.eye(4, dtype=np.float32)
    with pytest.raises(ParameterError, match="C must be a finite number > 0"):
        streamrank.RankSVM(C=C).fit(X, np.arange(4.0), qid=np.zeros(4))


@pytest.mark.parametrize("values", [[], (), np.array([]), set(), {}, {0.5: 1.0}, iter([])])
def test_an_empty_list_or_a_mapping_is_refused_by_name(values):
    with pytest.raises(ParameterError, match=r"^C must be a finite number > 0, or a non-empty list of them; got .*\. "
                                             r"Use C=0\.5$"):
        params.check_all("C", values)


@pytest.mark.parametrize("values,want", [(0.5, [0.5]), (np.array(0.5), [0.5]), ([1, 0.5], [1.0, 0.5]),
                                         (np.array([2.0, 3.0]), [2.0, 3.0]), ({2.0}, [2.0]), ("0.5", [0.5])])
def test_one_value_or_a_sequence_is_taken(values, want):
    assert params.check_all("C", values) == want


@pytest.mark.parametrize("cls,params_,message", [
    ("RankSVM", {"C": []}, r"C must be a finite number > 0, or a non-empty list of them; got \[\]\. Use C=0\.5"),
    ("RankSVM", {"C": np.array([])}, r"C must be .* non-empty list of them; got array\(\[\], dtype=float64\)"),
    ("RankSVM", {"C": [1, [2]]}, r"C must be a finite number > 0; got \[2\]\. Use C=0\.5"),
    ("RankSVM", {"method": "rff", "gamma": []}, r"gamma must be .* non-empty list of them; got \[\]"),
    ("RankSVM", {"method": "exact", "gamma": ()}, r"gamma must be .* non-empty list of them; got \(\)"),
    ("CLSRRank", {"lam": []}, r"lam must be .* non-empty list of them; got \[\]\. Use lam=1e-3"),
    ("CLSRRank", {"gamma": []}, r"gamma must be .* non-empty list of them; got \[\]"),
])
def test_estimators_refuse_an_empty_list_of_values_by_name(cls, params_, message):
    import streamrank
    X = np.eye(4, dtype=np.float32)
    with pytest.raises(ParameterError, match=message):
        getattr(streamrank, cls)(**params_).fit(X, np.arange(4.0), qid=np.zeros(4))
