"""scikit-learn's callers of the estimators: a Pipeline fitted and scored, or inside GridSearchCV or
cross_val_score, with or without metadata routing, over hostile C grids and DataFrames as other tools
leave them (pandas' NA, text, object, nullable and categorical columns, dates; query ids missing or
of mixed kinds).

Each case ends in a fitted model whose scores are real numbers, or in the package's error of one
line (a StreamrankError), never in a raw TypeError / ValueError from numpy or pandas. Inside a search
with ``error_score=nan`` every failed fit is the package's error too (read from scikit-learn's
warnings, or from its "All the N fits failed" error), a candidate that must be refused scores NaN,
and a NaN candidate is never picked while a scored one exists.
"""

import re
import warnings

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import prop_checker as pc
import prop_kit as kit
import prop_strategies as ps
from streamrank.evaluation.metrics import MAX_GAIN_LABEL

pytest.importorskip("sklearn")
pytest.importorskip("pandas")

# a C grid's values: ones that work, and ones the parameter intake must refuse
GOOD_C = [0.1, 1.0, 0.01, 3]
BAD_C = [0.0, -1.0, float("nan"), float("inf"), [], "abc", None, {}]
PREPS = ["none", "StandardScaler", "MinMaxScaler", "FunctionTransformer"]
# DataFrame columns: (kind, refused whatever the values); the numbers a kept column stands for are
# computed beside it (_column)
COLUMNS = [("Float64", False), ("Float64 with NA", True), ("Int64", False), ("Int64 with NA", True),
           ("boolean", False), ("boolean with NA", True), ("object", False), ("numeric text", False),
           ("text", True), ("categorical of numbers", False), ("categorical of text", True),
           ("string with NA", True), ("None in object", True), ("dates", True), ("a dict cell", True)]
QIDS = [("int", False), ("str", False), ("Int64", False), ("category", False), ("None among str", True),
        ("NA in Int64", True), ("int and str mixed", True)]
# the last line of a traceback: the exception's class and message
RAISED = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)): ", re.M)


def _column(pd, kind, v, i):
    """(column of ``kind`` standing for the float64 values ``v``, the numbers it holds); ``i``: the
    row that a missing value or an odd cell goes to."""
    whole = bool(np.isfinite(v).all() and np.abs(v).max(initial=0) < 1e15)
    if kind.startswith(("Int64", "boolean")) and not whole:
        if kind.endswith("with NA"):  # values no integer column holds, and the missing one it stands for
            col = v.astype(object)
            col[i] = pd.NA
            return col, None
        kind = "object"  # values no integer column holds
    r = np.round(v) if whole else v
    if kind == "Float64":
        return pd.array(v, dtype="Float64"), v
    if kind == "Int64":
        return pd.array(r.astype(np.int64), dtype="Int64"), r
    if kind == "boolean":
        return pd.array(v > 0, dtype="boolean"), (v > 0).astype(float)
    if kind == "object":
        return v.astype(object), v
    if kind == "numeric text":
        return np.array([repr(float(x)) for x in v], dtype=object), v
    if kind == "categorical of numbers":
        return pd.Categorical(v), v
    n = len(v)
    cells = {"Float64 with NA": lambda: pd.array(v, dtype="Float64"),
             "Int64 with NA": lambda: pd.array(r.astype(np.int64), dtype="Int64"),
             "boolean with NA": lambda: pd.array(v > 0, dtype="boolean"),
             "string with NA": lambda: pd.array([repr(float(x)) for x in v], dtype="string"),
             "None in object": lambda: v.astype(object),
             "a dict cell": lambda: v.astype(object)}
    if kind in cells:
        col = cells[kind]()
        col[i] = {"k": 1} if kind == "a dict cell" else None if kind == "None in object" else pd.NA
        return col, None
    if kind == "text":
        return np.array([f"w{k % 3}" for k in range(n)], dtype=object), None
    if kind == "categorical of text":
        return pd.Categorical([f"c{k % 2}" for k in range(n)]), None
    return pd.to_datetime(np.arange(n), unit="D"), None  # dates


@st.composite
def frames(draw, data):
    """(X as a DataFrame with 0-2 columns replaced, y, qid, groups, kinds, why it must be refused or
    ""). ``groups``: the query of each row as clean integers, for the splitter (GroupKFold refuses
    hostile groups itself, before any estimator sees them)."""
    import pandas as pd
    X = np.asarray(data.X, np.float64)
    n, d = X.shape
    frame = pd.DataFrame(X, columns=[f"f{j + 1}" for j in range(d)])
    numbers = X.copy()
    kinds, refuse = [], []
    # half the frames keep their float columns; a replaced column holds numbers half the time
    for j in draw(st.lists(st.integers(0, d - 1), max_size=draw(st.sampled_from([0, 0, 1, 2])), unique=True)):
        kind, refused = draw(st.sampled_from([c for c in COLUMNS if c[1] == draw(st.booleans())]))
        col, held = _column(pd, kind, X[:, j], draw(st.integers(0, n - 1)))
        frame[frame.columns[j]] = col
        kinds.append(f"DataFrame column {kind}")
        if refused or held is None:
            refuse.append(f"a column of {kind}")
        else:
            numbers[:, j] = held
    if not kinds:
        kinds.append("DataFrame of floats")
    with np.errstate(over="ignore", invalid="ignore"):
        if not (np.isfinite(numbers).all() and np.abs(numbers).max(initial=0) <= ps.F32_MAX):
            refuse.append("X values that are not finite in float32")
    y = np.asarray(data.y, np.float64)
    if not np.isfinite(y).all():
        refuse.append("labels that are not finite")
    elif (y < 0).any() or (y > MAX_GAIN_LABEL).any():
        refuse.append("labels that NDCG cannot score (negative, or a gain beyond float64)")
    whole_y = bool(np.isfinite(y).all() and (y == np.round(y)).all() and np.abs(y).max(initial=0) < 1e15)
    y = pd.Series(y.astype(np.int64) if whole_y else y, dtype="Int64" if whole_y else "float64")
    qkind, qrefused = draw(st.sampled_from([q for q in QIDS if not q[1]] * 2 + [q for q in QIDS if q[1]]))
    groups = np.repeat(np.arange(len(data.qid)), np.diff(data.query_ptr))
    qid = _qids(pd, qkind, groups, draw(st.integers(0, n - 1)))
    kinds.append(f"qid {qkind}")
    if qrefused:
        refuse.append(f"query ids {qkind}")
    return frame, y, qid, groups, kinds, "; ".join(refuse)


def _qids(pd, kind, q, i):
    """Per-row query ids ``q`` (ints) as ``kind``; ``i``: the row an odd id goes to."""
    if kind == "int":
        return q + 100
    if kind == "str":
        return np.array([f"q{v}" for v in q])
    if kind == "Int64":
        return pd.Series(q, dtype="Int64")
    if kind == "category":
        return pd.Series([f"q{v}" for v in q], dtype="category")
    if kind == "NA in Int64":
        s = pd.Series(q, dtype="Int64")
        s[i] = pd.NA
        return s
    ids = np.array([f"q{v}" for v in q], dtype=object)
    ids[i] = None if kind == "None among str" else int(q[i])
    return ids


def _pipeline(prep, est, weights):
    from sklearn import preprocessing
    from sklearn.pipeline import make_pipeline
    if prep == "none":
        return make_pipeline(est)
    step = getattr(preprocessing, prep)()
    if weights and prep == "StandardScaler":
        step.set_fit_request(sample_weight=False)  # the weights are the score's, not the scaler's
    return make_pipeline(step, est)


def _raised_by_package(text):
    """Whether every exception named at the start of a line of ``text`` (scikit-learn's report of
    failed fits or scores) is the package's."""
    names = RAISED.findall(text)
    return bool(names) and all(n.startswith("streamrank.") for n in names)


def _unwrap(res):
    """scikit-learn's "All the N fits failed" ValueError, every failure the package's: the package's
    error (its first message), as error_score=nan reports it when no candidate fits."""
    from streamrank.errors import StreamrankError
    e = res.rc
    if isinstance(e, ValueError) and not isinstance(e, StreamrankError) and "fits failed" in str(e) \
            and _raised_by_package(str(e)):
        first = next(m for m in re.finditer(r"^streamrank\.[\w.]+: (.*)$", str(e), re.M))
        res.rc = StreamrankError(first.group(1))
    return res


@kit.examples(8)
@given(data=st.data())
def test_pipelines_in_a_search_end_in_scores_or_the_packages_error(prop_env, data):
    import sklearn
    import streamrank
    from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score
    draw = data.draw
    d = draw(ps.datasets(for_arrays=True, min_rows=2)) if draw(st.booleans()) else prop_env.data
    X, y, qid, groups, kinds, refuse = draw(frames(d))
    n_queries = len({q for q, size in zip(d.qid, np.diff(d.query_ptr)) if size})
    caller = draw(st.sampled_from(["fit and score", "GridSearchCV", "cross_val_score"]))
    if n_queries < 2:
        caller = "fit and score"  # GroupKFold(2) needs two queries: the splitter's own refusal
    routing = draw(st.integers(0, 3)) > 0
    prep = draw(st.sampled_from(PREPS))
    if prep in ("StandardScaler", "MinMaxScaler") and (refuse or any(k.startswith("DataFrame column") for k in kinds)):
        prep = "FunctionTransformer"  # a scaler refuses such a frame itself: the estimator must see it
    kind = draw(st.sampled_from(["primal", "nystroem", "clsr"]))
    est = streamrank.CLSRRank(n_components=4) if kind == "clsr" else \
        streamrank.RankSVM(method=kind, **({"n_components": 4} if kind == "nystroem" else {}))
    name = type(est).__name__.lower()
    Cs = draw(st.lists(st.sampled_from(GOOD_C * 3 + BAD_C), min_size=1, max_size=3))
    key = "lam" if kind == "clsr" else "C"
    error_score = draw(st.sampled_from(["raise", np.nan]))
    weights = routing and caller == "GridSearchCV" and draw(st.booleans())
    if caller != "GridSearchCV":
        est.set_params(**{key: Cs[0]})
    bad = [c for c in (Cs if caller == "GridSearchCV" else Cs[:1]) if c in BAD_C or c != c]
    kinds += [f"caller {caller}", f"routing {'on' if routing else 'off'}", f"prep {prep}"] + \
        [f"{key} grid value {ps.python_class(c) if not isinstance(c, (list, dict)) else type(c).__name__}" for c in bad]
    # with error_score=nan a search keeps the folds that fit: refused rows in one fold refuse that
    # fold only (scikit-learn warns with the package's error), so the whole call need not fail
    lenient = caller != "fit and score" and error_score != "raise"
    must = ("" if lenient else refuse) or ("a grid of refused values only" if bad and len(bad) == len(Cs) else "")
    if caller != "GridSearchCV" and bad:
        must = must or f"{key}={bad[0]!r}"
    note(f"{caller} routing={routing} prep={prep} {est!r} {key}={Cs} error_score={error_score} kinds={kinds} "
         f"must={must!r} data={d.describe()}")
    got = {}

    def run():
        with sklearn.config_context(enable_metadata_routing=routing), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # scoring without qid says so: not this case's subject
            e = est.set_score_request(sample_weight=True) if weights else est
            pipe = _pipeline(prep, e, weights)
            fit = {"qid": qid} if routing else {f"{name}__qid": qid}
            if caller == "fit and score":
                pipe.fit(X, y, **fit)
                got["scores"] = [pipe.score(X, y, qid=qid) if routing else pipe.score(X, y)]
            elif caller == "cross_val_score":
                extra = {"params": {**fit, "groups": groups}} if routing else {"groups": groups, "params": fit}
                got["scores"] = list(cross_val_score(pipe, X, y, cv=GroupKFold(2), error_score=error_score, **extra))
            else:
                search = GridSearchCV(pipe, {f"{name}__{key}": Cs}, cv=GroupKFold(2), error_score=error_score)
                w = {}
                if weights:  # one weight per query: 1, 2, 1, 2, ... by query
                    w = {"sample_weight": 1.0 + (groups % 2)}
                search.fit(X, y, groups=groups, **fit, **w)
                got["search"] = search
                got["scores"] = [search.score(X, y, qid=qid)] if routing else []

    with prop_env.workspace() as (i, o, c):
        case = pc.Case(f"{caller}(Pipeline)", kinds, None, data=d, must_refuse=must)
        res = _unwrap(pc.run_api(run))

        def ok():
            s = np.asarray(got["scores"], np.float64)
            if caller == "cross_val_score" and error_score != "raise":
                fails = [w for w in res.warnings if "fits failed" in w or "Scoring failed" in w]
                if any(not _raised_by_package(w) for w in fails):
                    return f"a failed fit or score that is not the package's error: {fails[:1]}"
                s = s[np.isfinite(s)]
            if not (np.isfinite(s).all() and ((s >= 0) & (s <= 1)).all()):
                return f"scores {s} not real numbers in [0, 1]"
            return _search_ok(got.get("search"), Cs, res, clean=not refuse) if "search" in got else ""
        case.api_ok = ok
        pc.check(case, res)


def _search_ok(search, Cs, res, clean):
    """A search's candidates: a refused value scores NaN, every failure is the package's error, and
    the one picked has a real score (``clean`` data: a candidate with a good value scores)."""
    mean = np.asarray(search.cv_results_["mean_test_score"], np.float64)
    for c, m in zip(Cs, mean):
        if (c in BAD_C or c != c) and not np.isnan(m):
            return f"candidate {c!r} must be refused but scored {m}"
    fails = [w for w in res.warnings if "fits failed" in w or "Scoring failed" in w]
    if any(not _raised_by_package(w) for w in fails):
        return f"a failed fit or score that is not the package's error: {fails[:1]}"
    if np.isnan(mean[search.best_index_]) and np.isfinite(mean).any():
        return f"picked a NaN candidate ({search.best_index_}) over scored ones: {mean}"
    if clean and not np.isfinite(mean[search.best_index_]):
        return f"picked a candidate without a score: {mean}"
    return ""
