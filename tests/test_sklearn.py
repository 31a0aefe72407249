"""RankSVM and CLSRRank as scikit-learn estimators: GridSearchCV with query ids routed to fit and
score, the choice of C against train_linear's on the same validation data, scikit-learn's
estimator checks, and the BaseEstimator behaviour (repr, get_params / set_params, clone)."""

import functools
import warnings

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")

from sklearn.base import BaseEstimator, clone  # noqa: E402
from sklearn.model_selection import GridSearchCV, GroupKFold, PredefinedSplit  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

import streamrank  # noqa: E402
from small_data import small_pair  # noqa: E402
from streamrank.errors import ParameterError  # noqa: E402
from streamrank.evaluation.metrics import evaluate  # noqa: E402
from streamrank.synthetic import generate_batches  # noqa: E402
from streamrank.training.linear import train_linear  # noqa: E402

# the generic checks fit(X, y) without query ids, which the estimators warn about
NO_QID = "ignore:.*got no qid:UserWarning"


def letor_arrays(scale=0.2, seed=3, part="train"):
    """X, y, qid of the generated ``small`` preset (20 features, grades 0-2, whole queries): copies
    of arrays generated once."""
    return tuple(a.copy() for a in _generated(scale, seed, part))


@functools.cache
def _generated(scale, seed, part):
    return tuple(np.concatenate(c) for c in zip(*generate_batches("small", scale=scale, seed=seed, part=part)))


def ndcg10(est, X, y, qid):
    """Mean letor4 NDCG@10 of est's scores over the queries of X (whose rows are adjacent), by hand."""
    query_ptr = np.concatenate(([0], np.flatnonzero(qid[1:] != qid[:-1]) + 1, [len(qid)]))
    return evaluate(y, est.predict(X), query_ptr, convention="letor4", ks=(10,)).means["NDCG@10"]


def routing():
    return sklearn.config_context(enable_metadata_routing=True)


# -- (a) GridSearchCV over folds of whole queries ---------------------------------------------------
def test_grid_search_with_group_kfold_routes_qid_to_fit_and_score():
    X, y, qid = letor_arrays()
    Cs = [1e-4, 1e-2, 1.0]
    cv = GroupKFold(n_splits=3)
    with routing():
        search = GridSearchCV(streamrank.RankSVM(), {"C": Cs}, cv=cv).fit(X, y, qid=qid, groups=qid)
    res = search.cv_results_
    assert search.best_params_["C"] in Cs and isinstance(search.best_estimator_, streamrank.RankSVM)
    assert search.best_estimator_.C_ == search.best_params_["C"]
    scores = np.array([res[f"split{k}_test_score"] for k in range(3)])  # (fold, C)
    assert np.isfinite(scores).all() and (scores > 0).all() and (scores <= 1).all()
    np.testing.assert_array_equal(res["mean_test_score"], scores.mean(axis=0))
    # every fold's score is a fit on the fold's queries scored on the held-out ones by query:
    # qid reached both fit and score (without it, one query would stand for all rows)
    for k, (train, test) in enumerate(cv.split(X, y, qid)):
        assert not set(qid[train]) & set(qid[test])
        for j, C in enumerate(Cs):
            est = streamrank.RankSVM(C=C).fit(X[train], y[train], qid=qid[train])
            assert scores[k, j] == ndcg10(est, X[test], y[test], qid[test]) == est.score(X[test], y[test], qid[test])
    assert len(set(scores.ravel())) > 1


def test_without_metadata_routing_score_warns_that_it_got_no_qid():
    """scikit-learn without routing gives fit params to fit only: score sees no qid and says so."""
    X, y, qid = letor_arrays(scale=0.1)
    search = GridSearchCV(streamrank.RankSVM(), {"C": [1.0]}, cv=GroupKFold(n_splits=2))
    with pytest.warns(UserWarning, match=r"RankSVM.score got no qid: .* the model was fitted on \d+ queries"):
        search.fit(X, y, groups=qid, qid=qid)


def test_qid_can_come_from_groups_by_an_alias():
    X, y, qid = letor_arrays(scale=0.1)
    with routing():
        est = streamrank.RankSVM().set_fit_request(qid="groups").set_score_request(qid="groups")
        search = GridSearchCV(est, {"C": [1.0]}, cv=GroupKFold(n_splits=2)).fit(X, y, groups=qid)
    train, test = next(GroupKFold(n_splits=2).split(X, y, qid))
    est = streamrank.RankSVM().fit(X[train], y[train], qid[train])
    assert search.cv_results_["split0_test_score"][0] == ndcg10(est, X[test], y[test], qid[test])


# -- (a2) a Pipeline inside GridSearchCV and cross_val_score; sample_weight; error_score --------------
def pipeline(est=None, weights=False):
    """StandardScaler then est; ``weights``: the scaler declines sample_weight (routing must be on),
    so that a search's sample_weight can go to est.score alone."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    scaler = StandardScaler().set_fit_request(sample_weight=False) if weights else StandardScaler()
    return make_pipeline(scaler, est if est is not None else streamrank.RankSVM())


def by_hand(est, X, y, qid, train, test):
    """The pipeline's fold score by hand: the scaler fitted on the training rows, then est."""
    from sklearn.preprocessing import StandardScaler
    scaler = StandardScaler().fit(X[train])
    fitted = clone(est).fit(scaler.transform(X[train]), y[train], qid=qid[train])
    return fitted.score(scaler.transform(X[test]), y[test], qid=qid[test])


@pytest.mark.parametrize("est", [streamrank.RankSVM(), streamrank.CLSRRank(n_components=8)], ids=repr)
def test_a_pipeline_fits_and_scores_with_qid_routed(est):
    X, y, qid = letor_arrays(scale=0.1)
    everything = np.arange(len(y))
    with routing(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: qid reached both fit and score
        got = pipeline(est).fit(X, y, qid=qid).score(X, y, qid=qid)
    assert got == by_hand(est, X, y, qid, everything, everything) and 0 < got <= 1


def test_grid_search_and_cross_val_score_over_a_pipeline_score_every_candidate():
    from sklearn.model_selection import cross_val_score
    X, y, qid = letor_arrays(scale=0.1)
    Cs, cv = [1e-4, 1.0], GroupKFold(n_splits=2)
    with routing(), warnings.catch_warnings():
        warnings.simplefilter("error")  # no "Scoring failed", no "non-finite" warning
        search = GridSearchCV(pipeline(), {"ranksvm__C": Cs}, cv=cv).fit(X, y, qid=qid, groups=qid)
        cvs = cross_val_score(pipeline(streamrank.RankSVM(C=Cs[1])), X, y, cv=cv, params={"qid": qid, "groups": qid})
    res = search.cv_results_
    scores = np.array([res[f"split{k}_test_score"] for k in range(2)])  # (fold, C)
    want = np.array([[by_hand(streamrank.RankSVM(C=C), X, y, qid, tr, te) for C in Cs]
                     for tr, te in cv.split(X, y, qid)])
    np.testing.assert_array_equal(scores, want)
    assert len(set(want.ravel())) > 1
    assert search.best_params_["ranksvm__C"] == Cs[int(np.argmax(want.mean(axis=0)))]
    np.testing.assert_array_equal(cvs, want[:, 1])


def test_without_routing_a_pipeline_scores_as_one_query_and_says_so():
    """What Ridge's users do, without metadata routing: fit and score work; score cannot get qid
    from scikit-learn, so it ranks all rows as one query and warns."""
    X, y, qid = letor_arrays(scale=0.1)
    pipe = pipeline().fit(X, y, ranksvm__qid=qid)
    with pytest.warns(UserWarning, match=r"RankSVM.score got no qid: .* fitted on \d+ queries.* metadata routing"):
        got = pipe.score(X, y)
    with pytest.warns(UserWarning, match="got no qid"):
        assert pipe.score(X, y, sample_weight=np.full(len(y), 2.0)) == got  # Pipeline passes it on


def weighted_by_hand(est, X, y, qid, weight_of):
    """The mean of the queries' NDCG@10 weighted by weight_of[query id], by hand."""
    ids = list(dict.fromkeys(qid))
    ndcg = [ndcg10(est, X[qid == q], y[qid == q], qid[qid == q]) for q in ids]
    w = np.array([weight_of[q] for q in ids])
    return float(np.dot(w, ndcg) / w.sum())


@pytest.fixture(scope="module")
def fitted():
    """A RankSVM fitted on the small arrays, and the arrays."""
    X, y, qid = letor_arrays(scale=0.1)
    return streamrank.RankSVM().fit(X, y, qid=qid), (X, y, qid)


def test_score_weighs_queries_by_their_sample_weight(fitted):
    est, (X, y, qid) = fitted
    ids = list(dict.fromkeys(qid))
    weight_of = {q: float(k % 3) for k, q in enumerate(ids)}  # 0, 1, 2, 0, ...
    w = np.array([weight_of[q] for q in qid])
    got = est.score(X, y, qid=qid, sample_weight=w)
    assert got == pytest.approx(weighted_by_hand(est, X, y, qid, weight_of), rel=1e-12)
    assert got != pytest.approx(est.score(X, y, qid=qid), rel=1e-6)
    # weights of one are the unweighted mean to the bit; a weight of 2 is the query twice
    assert est.score(X, y, qid=qid, sample_weight=np.ones(len(y))) == est.score(X, y, qid=qid)
    assert est.score(X, y, qid=qid, sample_weight=1.0) == est.score(X, y, qid=qid)
    q0 = qid == ids[0]
    twice = (np.concatenate([X, X[q0]]), np.concatenate([y, y[q0]]), np.concatenate([qid, np.full(q0.sum(), -1)]))
    assert est.score(X, y, qid=qid, sample_weight=np.where(q0, 2.0, 1.0)) == pytest.approx(est.score(*twice), rel=1e-12)


@pytest.mark.parametrize("weights,message", [
    (lambda qid: np.where(np.arange(len(qid)) == 1, 2.0, 1.0),
     r"sample_weight must be the same for every row of a query \(score is a mean over queries\); query \d+ has rows "
     r"weighted 1 and 2\. Give every row its query's weight, e\.g\. np\.repeat\(query_weights, query_sizes\)"),
    (lambda qid: np.where(qid == qid[0], -1.0, 1.0), r"sample_weight must be finite and >= 0; row 0 is -1\.0"),
    (lambda qid: np.zeros(len(qid)), r"sample_weight gives every query weight 0, so there is no mean to take"),
    (lambda qid: np.ones(3), r"sample_weight must give one weight per row of X \(\d+\); got shape \(3,\)"),
    (lambda qid: np.array(["a"] * len(qid)), r"sample_weight must hold numbers; row 0 is the text 'a'"),
])
def test_sample_weights_that_do_not_weigh_queries_are_refused(fitted, weights, message):
    est, (X, y, qid) = fitted
    with pytest.raises(ParameterError, match=message):
        est.score(X, y, qid=qid, sample_weight=weights(qid))


def test_sample_weight_is_routed_to_score_only_when_requested():
    from sklearn.exceptions import UnsetMetadataPassedError
    X, y, qid = letor_arrays(scale=0.1)
    ids = list(dict.fromkeys(qid))
    weight_of = {q: 1.0 + (k % 2) for k, q in enumerate(ids)}
    w = np.array([weight_of[q] for q in qid])
    cv = GroupKFold(n_splits=2)
    with routing():
        pipe = pipeline().fit(X, y, qid=qid)
        with pytest.raises(UnsetMetadataPassedError, match=r"sample_weight.*set_score_request"):
            pipe.score(X, y, qid=qid, sample_weight=w)
        # inside a search, Pipeline.score raises it per candidate: error_score decides, as for Ridge
        with pytest.raises(UnsetMetadataPassedError, match=r"sample_weight.*RankSVM.score.*set_score_request"):
            GridSearchCV(pipeline(weights=True), {"ranksvm__C": [1.0]}, cv=cv, error_score="raise").fit(
                X, y, qid=qid, groups=qid, sample_weight=w)
        est = streamrank.RankSVM().set_score_request(sample_weight=True)
        assert pipeline(est).fit(X, y, qid=qid).score(X, y, qid=qid, sample_weight=w) == \
            pipe[-1].score(pipe[0].transform(X), y, qid=qid, sample_weight=w)
        search = GridSearchCV(pipeline(est, weights=True), {"ranksvm__C": [1.0]}, cv=cv).fit(
            X, y, qid=qid, groups=qid, sample_weight=w)
        # fit takes no sample_weight: a router refuses to send it there
        with pytest.raises(TypeError, match="set_fit_request"):
            est.set_fit_request(sample_weight=True)
    for k, (train, test) in enumerate(cv.split(X, y, qid)):
        fitted = pipeline().fit(X[train], y[train], ranksvm__qid=qid[train])
        want = weighted_by_hand(fitted, X[test], y[test], qid[test], weight_of)
        assert search.cv_results_[f"split{k}_test_score"][0] == pytest.approx(want, rel=1e-12)


def test_a_candidate_that_cannot_be_fitted_or_scored_raises_and_is_never_picked():
    """The estimator raises its ParameterError, never returns NaN: error_score="raise" passes it
    on; the default ranks the candidate last, so a scored candidate is picked."""
    from sklearn.exceptions import FitFailedWarning
    X, y, qid = letor_arrays(scale=0.1)
    cv = GroupKFold(n_splits=2)
    grid = {"ranksvm__C": [0.0, [], 1.0]}  # out of range, an empty list, a good one
    with routing():
        with pytest.raises(ParameterError, match=r"C must be a finite number > 0; got 0\.0\. Use C=0\.5"):
            GridSearchCV(pipeline(), grid, cv=cv, error_score="raise").fit(X, y, qid=qid, groups=qid)
        with pytest.warns(FitFailedWarning, match=r"C must be a finite number > 0, or a non-empty list of them; got"), \
                pytest.warns(UserWarning, match=r"test scores are non-finite: \[ +nan +nan +0\.\d+\]"):
            search = GridSearchCV(pipeline(), grid, cv=cv).fit(X, y, qid=qid, groups=qid)
        # a score that cannot be taken (weights that differ within a query) is raised, not NaN
        est = streamrank.RankSVM().set_score_request(sample_weight=True)
        with pytest.raises(ParameterError, match="sample_weight must be the same for every row of a query"):
            GridSearchCV(pipeline(est, weights=True), {"ranksvm__C": [1.0]}, cv=cv, error_score="raise").fit(
                X, y, qid=qid, groups=qid, sample_weight=np.arange(len(y), dtype=float))
    assert search.best_params_["ranksvm__C"] == 1.0
    assert np.isnan(search.cv_results_["mean_test_score"][:2]).all()
    assert list(search.cv_results_["rank_test_score"]) == [2, 2, 1]


# -- (b) the same C as train_linear on the same train / vali pair -----------------------------------
TOL = 1e-9  # both sides solve each C to this tolerance: the path's warm starts and the search's cold fits agree


def test_predefined_split_chooses_the_C_that_train_linear_chooses_by_ndcg10(tmp_path_factory):
    ds, vds = small_pair(tmp_path_factory, "sklearn", 0.2)
    Cs = [1e-4, 1e-3, 1e-2, 1e-1, 1.0]
    _, summary = train_linear(ds, valid=vds, C=Cs, select_metric="ndcg@10", tol=TOL)
    want = np.array([c["valid_ndcg@10"] for c in summary["candidates"]])

    parts = [(*d.read(0, d.n_rows), d.row_query_ids()) for d in (ds, vds)]
    X, y, qid = (np.concatenate(c) for c in zip(*parts))
    fold = np.repeat([-1, 0], [ds.n_rows, vds.n_rows])  # train rows never held out; vali is the one test fold
    with routing():
        search = GridSearchCV(streamrank.RankSVM(tol=TOL), {"C": Cs}, cv=PredefinedSplit(fold), refit=False)
        search.fit(X, y, qid=qid)
    got = search.cv_results_["split0_test_score"]

    # the data decides: the scores differ and one C is best by a clear margin
    top = np.sort(want)[::-1]
    assert top[0] - top[1] > 1e-3 and len(set(want.round(6))) == len(Cs)
    # the same NDCG@10 (letor4, queries in file order) for every C, not only the same winner
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert search.best_params_["C"] == summary["C"] == Cs[int(np.argmax(want))]
    # and the same C as `streamrank grid --select-metric ndcg@10` on the same pair
    from streamrank.cli import main
    run = tmp_path_factory.mktemp("sklearn-grid") / "run"
    assert main(["grid", ds.path, "--valid", vds.path, "-o", str(run), "--C", ",".join(map(repr, Cs)),
                 "--tol", repr(TOL), "--select-metric", "ndcg@10", "--quiet"]) == 0
    assert streamrank.load(run / "model.h5").C_ == search.best_params_["C"]


# -- (c) scikit-learn's estimator checks ------------------------------------------------------------
# Checks that do not apply to a ranker, each with its reason (none now: an array of another width is
# refused as scikit-learn refuses it, issue 31)
EXPECTED_FAILED_CHECKS = {}

with warnings.catch_warnings():  # collecting the checks warns that there is no BaseEstimator base class
    warnings.filterwarnings("ignore", message="Estimator .* does not inherit from `sklearn.base.BaseEstimator`")
    estimator_checks = parametrize_with_checks(
        [streamrank.RankSVM(), streamrank.RankSVM(method="nystroem", n_components=8, normalize="zscore"),
         streamrank.CLSRRank(n_components=8)],
        expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS)


@pytest.mark.filterwarnings(NO_QID)
@pytest.mark.filterwarnings("ignore:Estimator .* does not inherit from `sklearn.base.BaseEstimator`")
@estimator_checks
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


# -- (d) repr, get_params / set_params, clone -------------------------------------------------------
def twin(cls):
    """A BaseEstimator with ``cls``'s __init__: what scikit-learn's own machinery makes of the signature."""
    return type(cls.__name__, (BaseEstimator,), {"__init__": cls.__init__})


REPR_CASES = [
    (streamrank.RankSVM, {}),
    (streamrank.RankSVM, {"C": 0.1, "normalize": "zscore"}),
    (streamrank.RankSVM, {"C": [0.01, 0.1, 1], "loss": "smooth_hinge", "pair_cost": "0-1:1,1-2:1.3,0-2:2",
                          "query_weight": "log_ratio", "select_metric": "avgndcg", "random_state": 7}),
    (streamrank.CLSRRank, {"lam": [1e-4, 1e-3], "kernel": "sigmoid", "gamma": 0.01, "n_components": 2000}),
]


@pytest.mark.parametrize("cls,params", REPR_CASES)
def test_repr_and_params_as_base_estimator_gives_them(cls, params):
    est, ref = cls(**params), twin(cls)(**params)
    assert repr(est) == repr(ref)
    with sklearn.config_context(print_changed_only=False):
        assert repr(est) == repr(ref)
    assert est.get_params() == ref.get_params()
    assert list(est.get_params()) == list(ref.get_params())  # sorted, from the signature


def test_repr_of_defaults_and_of_changed_parameters():
    assert repr(streamrank.RankSVM()) == "RankSVM()"
    assert repr(streamrank.RankSVM(normalize="zscore", C=0.1)) == "RankSVM(C=0.1, normalize='zscore')"
    assert repr(streamrank.CLSRRank(lam=1e-4)) == "CLSRRank(lam=0.0001)"


@pytest.mark.parametrize("cls", [streamrank.RankSVM, streamrank.CLSRRank])
def test_set_params_round_trip_and_clone(cls):
    est = cls(random_state=3, normalize="zscore")
    params = est.get_params()
    other = cls().set_params(**params)
    assert other.get_params() == params and repr(other) == repr(est)
    X, y, qid = letor_arrays(scale=0.1)
    est.fit(X, y, qid)
    copy = clone(est)
    assert type(copy) is cls and copy is not est and copy.get_params() == params
    assert not hasattr(copy, "model_") and not hasattr(copy, "n_features_in_")
    with pytest.raises(ParameterError, match=rf"{cls.__name__} has no parameter 'Cee'; its parameters are .*"):
        est.set_params(Cee=1)


def test_nested_parameters_of_a_kernel_object():
    """A callable kernel with parameters of its own (scikit-learn's kernels are K(A, B)) is searched
    through name__param, as BaseEstimator does."""
    from sklearn.gaussian_process.kernels import RBF
    est = streamrank.CLSRRank(kernel=RBF(length_scale=2.0), n_components=20)
    assert est.get_params()["kernel__length_scale"] == 2.0
    est.set_params(kernel__length_scale=3.0, lam=1e-2)
    assert est.kernel.length_scale == 3.0 and est.lam == 1e-2
    X, y, qid = letor_arrays(scale=0.1)
    with routing():
        search = GridSearchCV(est, {"kernel__length_scale": [1.0, 10.0]}, cv=GroupKFold(n_splits=2))
        search.fit(X, y, qid=qid, groups=qid)
    assert search.best_params_["kernel__length_scale"] in (1.0, 10.0)


def test_clone_keeps_metadata_requests():
    with routing():
        est = streamrank.RankSVM().set_fit_request(qid=False)
        back = clone(est)
        assert back.get_metadata_routing().fit.requests == {"qid": False}
        # qid requested by default; score's sample_weight not, as scikit-learn's estimators leave it
        assert back.get_metadata_routing().score.requests == {"qid": True, "sample_weight": None}
        with pytest.raises(TypeError):
            est.set_fit_request(groups=True)
    with pytest.raises(RuntimeError, match="enable_metadata_routing=True"):
        streamrank.RankSVM().set_score_request(qid=True)


def test_not_fitted_is_scikit_learns_error_and_streamranks():
    from sklearn.exceptions import NotFittedError
    with pytest.raises(NotFittedError) as err:
        streamrank.RankSVM().predict(np.ones((2, 3)))
    assert isinstance(err.value, ParameterError) and "not fitted yet; call fit first" in str(err.value)


def test_a_datasets_queries_are_weighed_as_its_arrays_are(fitted, tmp_path):
    from streamrank.io.hdf5_format import DatasetWriter
    est, (X, y, qid) = fitted
    names = np.char.add("q", qid.astype(str)).astype("S")
    with DatasetWriter(tmp_path / "d.h5", n_features=X.shape[1]) as w:
        w.append(X, y, names)
    weight_of = {q: float(k % 3) for k, q in enumerate(dict.fromkeys(qid))}
    weights = np.array([weight_of[q] for q in qid])
    assert est.score(tmp_path / "d.h5", sample_weight=weights) == est.score(X, y, qid, sample_weight=weights)
    with pytest.raises(ParameterError, match=r"query 'q\d+' has rows weighted 0 and 1"):
        est.score(tmp_path / "d.h5", sample_weight=np.arange(len(y), dtype=float))
