"""The Python estimators (RankSVM with every method, CLSRRank) under the same invariants as the
command line (issue 30, build item 8): hostile parameter values of any Python type and hostile
in-memory arrays (float64, so values beyond float32 too). A fit must end within its bound and
either return a finite model whose objective is at most f(0), every candidate converged or capped,
without numpy RuntimeWarnings, or raise a StreamrankError of one line; no temporary file is left.
"""

import math
import tempfile

import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st

import prop_checker as pc
import prop_kit as kit
import prop_strategies as ps

PV = ps.python_values()
RANKSVM = ["C", "tol", "max_iter", "memory_budget", "block_bytes", "gamma", "degree", "coef0", "n_components",
           "rank", "eta", "random_state", "pair_cost", "query_weight"]
CLSR = ["lam", "gamma", "degree", "coef0", "n_components", "memory_budget", "block_bytes", "random_state"]
KERNEL_OF = {"degree": "poly", "coef0": "sigmoid"}


def _must_refuse(params):
    for k, v in params.items():
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            return f"{k}={v!r}: inf and nan are always refused"
        if k in ("C", "gamma", "lam") and isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0:
            return f"{k}={v!r}: must be > 0"
    return ""


@kit.examples(30)
@given(data=st.data())
def test_estimators_with_hostile_parameters_and_arrays(prop_env, data):
    import streamrank
    draw = data.draw
    clsr = draw(st.integers(0, 4)) == 0
    hostile_data = draw(st.booleans())
    d = draw(ps.datasets(for_arrays=True, min_rows=1)) if hostile_data else prop_env.data
    names = draw(st.lists(st.sampled_from(CLSR if clsr else RANKSVM), max_size=3, unique=True))
    params = {}
    for k in names:
        if k == "pair_cost":
            params[k] = draw(st.sampled_from([None, "graded", "gain_difference", f"0-1:{draw(ps.numbers())}"]))
        elif k == "query_weight":
            params[k] = draw(st.sampled_from([None, "log_ratio"]))
        else:
            params[k] = draw(PV)
    if not clsr:
        params["method"] = draw(st.sampled_from(["primal", "nystroem", "rff", "exact"]))
        if params["method"] in ("nystroem", "rff") and "n_components" not in params:
            params["n_components"] = 4
    if any(k in params for k in KERNEL_OF):
        params["kernel"] = "poly" if "degree" in params else draw(st.sampled_from(["poly", "sigmoid"]))
    if "eta" in params:
        params["loss"] = "smooth_hinge"
    note(f"{'CLSRRank' if clsr else 'RankSVM'}({params}) on {d.describe()}")
    kinds = [f"{k} {ps.python_class(v)}" for k, v in params.items() if k in names] or ["defaults"]
    kinds += d.kinds if hostile_data else []
    refuse = _must_refuse({k: params[k] for k in names})
    if not d.finite() or (hostile_data and np.abs(np.asarray(d.X, np.float64)).max(initial=0) > ps.F32_MAX):
        refuse = refuse or "values that are not finite in float32"
    with prop_env.workspace() as (i, o, c):
        est = (streamrank.CLSRRank if clsr else streamrank.RankSVM)(**params)
        case = pc.Case(f"{type(est).__name__}.fit{'' if clsr else ' ' + params['method']}", kinds, None,
                       outputs=[o / "nothing"], data=d,
                       train={"pair_cost": params.get("pair_cost"), "query_weight": params.get("query_weight")},
                       must_refuse=refuse)
        case.estimator = est
        saved = tempfile.tempdir
        tempfile.tempdir = str(o)  # the temporary dataset of the arrays goes here, and must go away

        def fit():
            est.fit(np.asarray(d.X), np.asarray(d.y), qid=d.qid_per_row())
        try:
            res = pc.run_api(fit)
        finally:
            tempfile.tempdir = saved
        pc.check(case, res)


@kit.examples(16)
@given(data=st.data())
def test_predict_and_score_of_a_fitted_estimator_on_hostile_arrays(prop_env, data):
    """``load(model).predict`` / ``score`` on arrays of any values: finite scores (a score in
    [0, 1]), or a StreamrankError of one line; a value that is not finite must be refused."""
    import streamrank
    draw = data.draw
    d = draw(ps.datasets(for_arrays=True, min_rows=1))
    method = draw(st.sampled_from(kit.METHODS))
    call = draw(st.sampled_from(["predict", "score"]))
    note(f"load({method} model).{call} on {d.describe()}")
    est = streamrank.load(prop_env.models[method])
    got = {}

    def run():
        X = np.asarray(d.X)
        got["v"] = est.predict(X, qid=d.qid_per_row()) if call == "predict" else \
            est.score(X, np.asarray(d.y), qid=d.qid_per_row())

    def ok():
        v = np.asarray(got["v"], np.float64)
        if call == "predict" and v.shape != (d.n,):
            return f"{v.shape} scores for {d.n} rows"
        if not np.isfinite(v).all():
            return f"non-finite {call} results returned: {v[:5]}"
        if call == "score" and not 0 <= float(v) <= 1:
            return f"score {float(v)} outside [0, 1]"
        return ""
    bad_x = not np.isfinite(np.asarray(d.X, np.float64)).all() or \
        np.abs(np.asarray(d.X, np.float64)).max(initial=0) > ps.F32_MAX
    bad_y = call == "score" and not np.isfinite(np.asarray(d.y, np.float64)).all()
    with prop_env.workspace() as (i, o, c):
        case = pc.Case(f"estimator.{call}", d.kinds + [f"model {method}"], None, data=d,
                       must_refuse="a value that is not finite" if bad_x or bad_y else "")
        case.api_ok = ok
        pc.check(case, pc.run_api(run))
