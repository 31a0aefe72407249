"""``streamrank.RankSVM`` and ``streamrank.CLSRRank``: scikit-learn estimators over the streamed trainers.

scikit-learn is optional (the ``sklearn`` extra); ``import streamrank`` never imports it.

The estimator protocol without scikit-learn
    :class:`_Estimator` implements it in plain Python: ``get_params`` / ``set_params`` from the
    ``__init__`` signature (nested ``name__param`` included), the repr of the parameters that
    differ from their defaults, ``__sklearn_tags__`` and the metadata requests; only the methods
    that scikit-learn alone calls import it. ``clone``, ``GridSearchCV``, ``Pipeline`` and
    ``sklearn.utils.estimator_checks`` take the estimators as they take a BaseEstimator
    (docs/design.md, "The estimators without a scikit-learn base class", says why).

Query ids inside scikit-learn: metadata routing
    ``fit``, ``predict`` and ``score`` take ``qid=`` (one query id per row, as XGBoost's XGBRanker
    takes it; LightGBM's ranker takes group sizes). scikit-learn hands an estimator's ``score``
    an array other than X and y only by metadata routing: without it, ``GridSearchCV.fit(X, y,
    groups=qid, qid=qid)`` gives ``qid`` to ``fit`` but nothing to ``score``, and ``groups``
    reaches the splitter only. Taking qid from ``groups`` is therefore no alternative (the
    estimator never sees ``groups``; under routing it is the alias
    ``set_fit_request(qid="groups").set_score_request(qid="groups")``, which users can set).
    ``qid`` is requested by default for ``fit``, ``predict`` and ``score``, as GroupKFold requests
    ``groups``: a ranker without its query ids ranks every row as one query, which is never what
    routing the ids was for::

        sklearn.set_config(enable_metadata_routing=True)
        GridSearchCV(RankSVM(), {"C": [0.1, 1]}, cv=GroupKFold(3)).fit(X, y, qid=qid, groups=qid)

sample_weight, and candidates that cannot be fitted or scored
    ``score`` takes ``sample_weight`` as scikit-learn's estimators do (``Pipeline.score`` passes it
    to its last step, with routing or without): per-row weights that weigh each query's NDCG@10,
    the same for every row of a query. As for scikit-learn's estimators it is not requested by
    default, so a router refuses one passed without ``set_score_request(sample_weight=True)``.
    ``fit`` takes no ``sample_weight`` (a pairwise loss weighs pairs: ``pair_cost`` and
    ``query_weight``), so, as for scikit-learn's estimators without one, it declares none and
    scikit-learn refuses it. A candidate that cannot be fitted or scored raises a
    :class:`ParameterError` (never a NaN score): a search then follows its ``error_score``,
    ``"raise"`` passing the error on, the default NaN warning and ranking the candidate last.

Without qid
    ``fit(X, y)`` ranks all rows as one query, with a warning (pass ``qid=np.zeros(n)`` to say
    so); it is what scikit-learn's generic checks fit. ``score(X, y)`` ranks all rows as one query
    too, with a warning when the model was fitted on several queries (the sign of a search
    without metadata routing, where qid reached fit only).

Arrays are stored and scored as float32, as the dataset format holds them (:mod:`streamrank.io`);
scores are float64 (see :meth:`RankSVM.predict`).
"""

import contextlib
import functools
import inspect
import numbers
import os
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike

from streamrank import settings
from streamrank.errors import ParameterError
from streamrank.evaluation.metrics import evaluate
from streamrank.io.dataset import Dataset, open_dataset
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.state.model import load as load_model
from streamrank.training.trainers import train

# scikit-learn's "keep the request as it is" (sklearn.utils.metadata_routing.UNCHANGED, compared by
# value so that the signature needs no import)
_UNCHANGED = "$UNCHANGED$"


class _Estimator:
    """scikit-learn's estimator protocol without importing scikit-learn (module docstring)."""

    # the metadata each method consumes, with its default request (module docstring): qid is
    # requested (True); score's sample_weight is unrequested (None), as scikit-learn's own
    # estimators leave it: passed through a router without a request, scikit-learn refuses it
    _METADATA = {"fit": {"qid": True}, "predict": {"qid": True}, "score": {"qid": True, "sample_weight": None}}

    @classmethod
    def _get_param_names(cls):
        """The parameters: ``__init__``'s keyword-only arguments, sorted (as BaseEstimator)."""
        return sorted(p.name for p in inspect.signature(cls.__init__).parameters.values()
                      if p.kind == p.KEYWORD_ONLY)

    def get_params(self, deep=True):
        out = {}
        for name in self._get_param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                out.update((f"{name}__{k}", v) for k, v in value.get_params().items())
            out[name] = value
        return out

    def set_params(self, **params):
        names = self._get_param_names()
        nested = {}
        for key, value in params.items():
            name, nest, sub = key.partition("__")
            if name not in names:
                raise ParameterError(f"{type(self).__name__} has no parameter {name!r}; "
                                     f"its parameters are {', '.join(names)}")
            if nest:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
        for name, sub in nested.items():
            getattr(self, name).set_params(**sub)
        return self

    def __repr__(self):
        params = self.get_params(deep=False)
        sklearn = sys.modules.get("sklearn")
        if sklearn is None or sklearn.get_config().get("print_changed_only", True):
            defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values()}
            params = {k: v for k, v in params.items() if repr(v) != repr(defaults[k])}
        items = [f"{k}={v!r}" for k, v in params.items()]
        if len(items) > _REPR_ITEMS:  # scikit-learn shows the first 30 and an ellipsis
            items = items[:_REPR_ITEMS] + ["..."]
        return _call_repr(type(self).__name__, items)

    def __sklearn_tags__(self):
        from sklearn.utils import Tags, TargetTags
        # "ranker" as XGBoost's rankers say it; scikit-learn has no ranker type, and a ranker is
        # not a regressor (its score is NDCG, not R^2)
        return Tags(estimator_type="ranker", target_tags=TargetTags(required=True))

    def get_metadata_routing(self):
        """scikit-learn's ``MetadataRequest``: ``qid`` for fit, predict and score, ``sample_weight``
        for score (module docstring)."""
        request = getattr(self, "_metadata_request", None)
        if request is None:
            from sklearn.utils.metadata_routing import MetadataRequest
            request = MetadataRequest(owner=self)
            for method, params in self._METADATA.items():
                for param, alias in params.items():
                    getattr(request, method).add_request(param=param, alias=alias)
        return request

    def set_fit_request(self, *, qid=_UNCHANGED):
        """Whether scikit-learn's metadata routing passes ``qid`` to :meth:`fit` (True by default;
        False, None, or an alias such as ``"groups"``), as BaseEstimator's ``set_fit_request``."""
        return self._set_request("fit", qid=qid)

    def set_predict_request(self, *, qid=_UNCHANGED):
        """As :meth:`set_fit_request`, for :meth:`predict`."""
        return self._set_request("predict", qid=qid)

    def set_score_request(self, *, qid=_UNCHANGED, sample_weight=_UNCHANGED):
        """As :meth:`set_fit_request`, for :meth:`score`; ``sample_weight`` (per-query weights,
        :meth:`RankSVM.score`) is not requested by default, as for scikit-learn's estimators."""
        return self._set_request("score", qid=qid, sample_weight=sample_weight)

    def _set_request(self, method, **aliases):
        try:
            import sklearn
        except ImportError:
            raise ImportError(f"set_{method}_request is scikit-learn's metadata routing; install scikit-learn: "
                              "pip install 'streamrank[sklearn]'") from None
        if not sklearn.get_config().get("enable_metadata_routing", False):
            raise RuntimeError("This method is only available when metadata routing is enabled. You can enable it "
                               "using sklearn.set_config(enable_metadata_routing=True).")
        request = self.get_metadata_routing()
        for param, alias in aliases.items():
            if not (isinstance(alias, str) and alias == _UNCHANGED):
                getattr(request, method).add_request(param=param, alias=alias)
        self._metadata_request = request
        return self


# scikit-learn's _EstimatorPrettyPrinter.n_max_elements_to_show
_REPR_ITEMS = 30


def _call_repr(name, items, width=80):
    """``name(a, b, ...)`` as scikit-learn prints an estimator (compact pretty printing,
    ``sklearn.utils._pprint``): items fill a line of ``width`` columns under the first (each
    counting its text and ", "; the last also the closing parenthesis), a line is broken before
    the item that would pass it, and an item "..." ends the list after the ones shown."""
    indent = len(name) + 1
    newline = ",\n" + " " * indent
    out, delim = [name, "("], ""
    room = full = width - indent + 1
    for k, rep in enumerate(items):
        if rep == "...":
            out.append(", ...")
            break
        if k == len(items) - 1:  # the closing parenthesis must fit too
            room, full = room - 1, full - 1
        need = len(rep) + 2
        if room < need:
            room = full
            delim = newline if delim else delim
        out.append(delim)
        out.append(rep)
        if room >= need:
            room -= need
            delim = ", "
        else:  # longer than a line: scikit-learn breaks the line after it
            delim = newline
    return "".join(out) + ")"


class RankSVM(_Estimator):
    """Pairwise RankSVM with the squared hinge loss, trained by TRON over a block stream.

    A scikit-learn estimator (without scikit-learn as a dependency; module docstring): ``fit(X, y,
    qid=qid)``, ``predict(X, qid=qid)``, ``score(X, y, qid=qid)`` (mean NDCG@10 over queries),
    ``get_params`` / ``set_params``, ``clone``; query ids reach it inside ``GridSearchCV`` or a
    ``Pipeline`` by metadata routing::

        sklearn.set_config(enable_metadata_routing=True)
        GridSearchCV(RankSVM(), {"C": [0.1, 1]}, cv=GroupKFold(3)).fit(X, y, qid=qid, groups=qid)

    Parameters are keyword-only, stored as given and validated in :meth:`fit`; they come from the
    settings table (:mod:`streamrank.settings`), which says the rule: a setting that does not apply
    to the chosen ``method`` (``gamma`` for ``"primal"``) is checked and then ignored, as
    scikit-learn's ``SVC`` ignores ``gamma`` for a linear kernel, and the model records only what
    applied. ``method``: ``"primal"`` (linear), ``"nystroem"`` or ``"rff"`` (paper 000),
    ``"exact"`` (paper 004); :class:`CLSRRank` is paper 002.

    Parameters
    ----------
{parameters}
    verbose : bool, default=False
        True: one log line per solver iteration and progress bars for long passes on standard
        error, as the command line prints them; False: silent.

    Attributes
    ----------
    model_ : the trained :class:`~streamrank.state.model.LinearModel`
    coef_ : ndarray of float64, the weights (in the mapped space for a feature map)
    n_features_in_ : int
    C_, objective_ : the chosen C and its objective
    training_ : dict, the training summary (every candidate's validation score)
    """

    _METHODS: tuple[str, ...] = settings.RANKSVM
    _EXCLUDE: tuple[str, ...] = ()
    # the parameters its methods read (__init__ sets every parameter of the table: _table_init)
    verbose: bool
    memory_budget: "int | str"
    random_state: object

    # __init__: keyword-only, one per setting of the table and verbose, each stored as given
    # (_table_init, below the class)

    def fit(self, X: "ArrayLike | str | os.PathLike[str] | Dataset", y: "ArrayLike | None" = None,
            qid: "ArrayLike | None" = None, *, valid: "object | None" = None,
            queries: "tuple[int, int] | None" = None) -> "RankSVM":
        """Train on a dataset or on in-memory arrays.

        Parameters
        ----------
        X : array-like (n_rows, n_features), or a dataset (path or :class:`Dataset`)
            In-memory arrays are written as float32 to a temporary dataset first, so every fit
            reads through the same query-aligned stream.
        y : array-like (n_rows,), optional
            Relevance labels (with arrays; a dataset holds its own).
        qid : array-like (n_rows,), optional
            One query id per row (integers or strings; a query's rows need not be adjacent).
            None ranks all rows as one query, with a warning.
        valid : dataset or (X, y, qid), optional
            Validation data, which chooses among several C (or gamma, lam) by ``select_metric``.
        queries : (int, int), optional
            Train on the dataset's queries ``[q0, q1)`` only.

        Returns
        -------
        self

        Raises
        ------
        ParameterError
            A setting out of its range or choices (whether it applies to the method or not).
        InputError
            Data that cannot be trained on, named with its row or file.
        """
        values = self._settings()
        with _fit_data(X, y, qid, valid, type(self).__name__) as (ds, vds), _verbose(self.verbose):
            model, summary = train(ds, values, valid=vds, queries=queries)
            self._n_fit_queries = ds.n_queries if queries is None else queries[1] - queries[0]
        self._set_fitted(model, summary)
        return self

    def _settings(self):
        """The settings table's values of this estimator's parameters, checked (ranges and
        choices, whether they apply or not: streamrank.settings.validate); ``random_state`` as
        the seed it gives."""
        values = {s.name: getattr(self, name) for name, s in settings.estimator_params(self._METHODS, self._EXCLUDE)}
        values["seed"] = _seed(self.random_state)
        values.setdefault("method", self._METHODS[0])
        if values["method"] not in self._METHODS:
            other = "CLSRRank" if values["method"] == "clsr" else None
            raise ParameterError(f"{type(self).__name__}'s method must be one of {', '.join(self._METHODS)}; got "
                                 f"{values['method']!r}." + (f" {other} is method 'clsr'" if other else
                                                              f" Use method={self._METHODS[0]}"))
        settings.validate({k: v for k, v in values.items() if k != "method"})
        return values

    def _set_fitted(self, model, summary):
        self.model_ = model
        self.coef_ = model.w
        self.n_features_in_ = model.n_features
        self.training_ = summary
        self.objective_ = summary.get("objective")
        self.C_ = summary.get("C")

    def predict(self, X: "ArrayLike | str | os.PathLike[str] | Dataset",
                qid: "ArrayLike | None" = None) -> np.ndarray:
        """Scores of the rows of ``X`` (array) or of a dataset (path/Dataset, input row order):
        a float64 array of one score per row.

        Array rows are read as float32, as :meth:`fit` stores them, so a row scores the same
        whatever X's dtype and whether it comes in an array or a dataset; float32 X is not copied.
        The scores are float64 for every input dtype: they are sums formed in float64, and
        rounding them to float32 would tie scores that differ, which reorders a ranking (LETOR's
        ties keep input order). ``qid`` is needed by ``normalize="query_minmax"`` only.
        """
        model = self._model()
        if _is_data(X):
            with _dataset(X) as ds:
                return model.predict_dataset(ds, memory_budget=self.memory_budget)
        X = _rows(X)
        if qid is None:
            return model.decision_function(X)
        order, query_ptr = _grouped(_qids(qid, X.shape[0]))
        if order is None:
            return model.decision_function(X, query_ptr)
        out = np.empty(X.shape[0])
        out[order] = model.decision_function(X[order], query_ptr)
        return out

    def score(self, X: "ArrayLike | str | os.PathLike[str] | Dataset", y: "ArrayLike | None" = None,
              qid: "ArrayLike | None" = None, sample_weight: "ArrayLike | None" = None) -> float:
        """Mean NDCG@10 over the queries of ``X, y, qid`` (arrays) or of a dataset (path/Dataset).

        In the estimator's ``convention``: by default LETOR 4.0's (``letor4`` in
        :mod:`streamrank.evaluation.metrics`: gains 0/1/3 for labels 0/1/2, 2^y - 1 above, positions
        1-2 undiscounted, ties in input order, NDCG@10 = 0 for a query shorter than 10; a query
        without a relevant document (no label >= 1) scores 0 and stays in the mean), the value
        ``select_metric="ndcg@10"`` chooses C by and ``streamrank eval`` prints; ``standard``:
        gain 2^y - 1, discount 1/log2(i+1), queries without a relevant document left out. Queries
        are averaged in order of first appearance, as a dataset holds them.
        ``qid`` None: all rows are one query (warned when the model was fitted on several).

        ``sample_weight``: None (every query weighs 1), or one weight >= 0 per row (of X, or of the
        dataset in input order) that is the same for every row of a query: the mean is then
        weighted by query, and weights of 1 give the unweighted mean to the bit. A weight that
        differs within a query is refused (NDCG is a query's, not a row's). Under scikit-learn's
        metadata routing it reaches score once requested: ``set_score_request(sample_weight=True)``.
        """
        model = self._model()
        if _is_data(X):
            from streamrank.training.problem import read_labels
            with _dataset(X) as ds:
                # predict_dataset puts dataset row k's score at ds.row[k]: back to dataset order
                s = model.predict_dataset(ds, memory_budget=self.memory_budget)[ds.row]
                y, query_ptr, ids = read_labels(ds), ds.query_ptr, ds.query_ids
                w = None if sample_weight is None else _row_weights(sample_weight, ds.n_rows)[ds.row]
            return _mean_ndcg10(y, s, query_ptr, w, ids, self._convention())
        X = _rows(X)
        y = _labels(y, X.shape[0], "score")
        w = None if sample_weight is None else _row_weights(sample_weight, X.shape[0])
        if qid is None and getattr(self, "_n_fit_queries", 1) > 1:
            _warn_no_qid(f"{type(self).__name__}.score", X.shape[0],
                         f", but the model was fitted on {self._n_fit_queries} queries")
        qid = _qids(qid, X.shape[0])
        order, query_ptr = _grouped(qid)
        if order is not None:
            X, y, qid = X[order], y[order], qid[order]
            w = None if w is None else w[order]
        s = model.decision_function(X, query_ptr)
        return _mean_ndcg10(y, s, query_ptr, w, qid[query_ptr[:-1]], self._convention())

    def _convention(self):
        """The gain convention of ``score`` (a fitted estimator's parameter; validated in ``fit``)."""
        return getattr(self, "convention", "letor4") or "letor4"

    def save(self, path):
        return self._model().save(path)

    def export(self, path=None, *, format="onnx", feature_names=None, name=None):
        """Write the fitted model in ``format`` (onnx, solr, elasticsearch, svmrank, liblinear,
        json; docs/formats.md) to ``path`` and return the path; without ``path``, return the
        content (bytes for onnx, text for the others). ``feature_names``: a list, or a file with
        one name per line (default f1..fd); ``name``: the model's name inside the file."""
        from streamrank.export import export_model
        return export_model(self._model(), format, path, feature_names=feature_names, name=name)

    def _model(self):
        if not hasattr(self, "model_"):
            raise _not_fitted(f"this {type(self).__name__} is not fitted yet; call fit first")
        return self.model_

    @classmethod
    def from_model(cls, model):
        est = cls(**_params_from_config(model.config))
        est._set_fitted(model, model.training)
        return est


def _params_from_config(cfg):
    out = {}
    for k_cfg, k in (("normalize", "normalize"), ("tol", "tol"), ("max_iter", "max_iter"),
                     ("pair_cost", "pair_cost"), ("query_weight", "query_weight"),
                     ("select_metric", "select_metric"), ("convention", "convention"), ("seed", "random_state"),
                     ("loss", "loss"),
                     ("eta", "eta"), ("features", "features")):
        if k_cfg in cfg:
            out[k] = cfg[k_cfg]
    if "C_path" in cfg:
        out["C"] = cfg["C_path"] if len(cfg["C_path"]) > 1 else cfg["C_path"][0]
    if cfg.get("C_rule") == "two-stage":
        out["C"] = "two-stage"
    return out


def _not_fitted(message):
    """A ParameterError, and scikit-learn's NotFittedError once scikit-learn is loaded (only then
    can a caller name that class to catch it, so this is the same as always raising it)."""
    exceptions = sys.modules.get("sklearn.exceptions")
    if exceptions is None:
        return ParameterError(message)
    return _both_errors(exceptions.NotFittedError)(message)


@functools.cache
def _both_errors(not_fitted):
    return type("NotFittedError", (ParameterError, not_fitted), {"__module__": __name__})


def _seed(random_state):
    """The int seed of ``random_state`` (scikit-learn's forms: int, None, RandomState, Generator)."""
    top = np.iinfo(np.int32).max
    if random_state is None:
        return int(np.random.randint(top))  # numpy's global RandomState, as check_random_state(None)
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(top))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(top))
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool) and random_state >= 0:
        return int(random_state)
    raise ParameterError(f"random_state must be an int >= 0, None, or a numpy RandomState or Generator; got "
                         f"{random_state!r}. Use random_state=0")


def _is_data(X):
    return isinstance(X, (str, Path, Dataset))


@contextlib.contextmanager
def _dataset(X):
    """The Dataset given, or the one at a path (closed on exit)."""
    if isinstance(X, Dataset):
        yield X
    else:
        with open_dataset(X) as ds:
            yield ds


class DataTypeError(ParameterError, TypeError):
    """A cell of X, y or qid that is neither a number nor text that reads as one (a dict, pandas'
    NA, a date): the package's ParameterError, and the TypeError numpy and scikit-learn raise for it."""


def _rows(X):
    """X as a C-ordered float32 (n, d) array with n, d >= 1 and finite values (no copy when it is one)."""
    if hasattr(X, "tocsr") or type(X).__module__.startswith("scipy.sparse"):
        raise ParameterError(f"X is a sparse {type(X).__name__}; streamrank reads dense rows: pass X.toarray(), or "
                             "write the data to a dataset (streamrank convert) and pass its path")
    columns = getattr(X, "columns", None)  # a DataFrame's, for messages
    X = np.asarray(X)
    if X.ndim != 2:
        raise ParameterError(f"X must be a 2-D array (n_rows, n_features); got shape {X.shape}. "
                             "Reshape your data: X.reshape(-1, 1) for a single feature, X.reshape(1, -1) for a "
                             "single row")
    if X.shape[0] == 0:
        raise ParameterError(f"X has 0 rows (shape={X.shape}); pass at least one row")
    if X.shape[1] == 0:
        raise ParameterError(f"X has 0 feature(s) (shape={X.shape}) while a minimum of 1 is required. "
                             "Pass at least one feature column")
    X = np.ascontiguousarray(_floats(X, "X", columns))
    # the float64 sum of float32 values cannot overflow (n * 3.4e38 << 1.8e308), so it is finite
    # exactly when every value is: one pass, no n x d mask unless there is something to report
    if not np.isfinite(np.sum(X, dtype=np.float64)):
        r, j = np.argwhere(~np.isfinite(X))[0]
        raise ParameterError(f"X must be finite (no NaN or inf); row {r}, {_feature(j, columns)} is {X[r, j]}. "
                             "Drop or impute it")
    return X


_FIX = {"X": "Encode it as numbers (e.g. sklearn's OneHotEncoder, or pd.get_dummies) or drop the column",
        "y": "Pass numeric relevance labels (0, 1, 2, ...)",
        "sample_weight": "Pass one numeric weight per row"}


def _floats(a, what, columns=None, dtype=np.float32):
    """The ndarray ``a`` (X, y or sample_weight) as ``dtype``, or a ParameterError naming the first
    cell that is no number: text that does not read as one, pandas' NA, an object, a date."""
    kind = a.dtype.kind
    if kind == "c":
        raise ParameterError(f"{what} has dtype {a.dtype}: Complex data not supported; pass real values")
    if kind in "mM":  # numpy would cast them to counts of their unit
        how = "(t - t.min()).dt.total_seconds()" if kind == "M" else "t.dt.total_seconds()"
        raise ParameterError(f"{what} holds {'dates' if kind == 'M' else 'durations'} (dtype {a.dtype}), not "
                             f"numbers. Convert them to numbers in the unit you mean, e.g. {how}")
    if kind in "biuf":
        return a.astype(dtype, copy=False)
    try:
        return a.astype(dtype)
    except (TypeError, ValueError):
        pass
    cells = a.reshape(a.shape[0], -1)
    for j in range(cells.shape[1]):
        for r, v in enumerate(cells[:, j]):
            try:
                np.float32(v)
            except (TypeError, ValueError):
                raise _cell_error(what, r, j if a.ndim > 1 else None, v, columns) from None
    raise ParameterError(f"{what} (dtype {a.dtype}) does not convert to numbers. {_FIX[what]}")


def _cell_error(what, r, j, v, columns):
    """The error for cell (r, j) of X (j None: row r of y) holding ``v``, which is no number."""
    cell = f"row {r}" + (f", {_feature(j, columns)}" if j is not None else "")
    v = _plain(v)
    if _missing(v):
        return DataTypeError(f"{what} must be finite (no NaN, inf or missing value); {cell} is missing ({v!r}). "
                             "Drop or impute it")
    if isinstance(v, (str, bytes)):
        return ParameterError(f"{what} must hold numbers; {cell} is the text {v!r}. {_FIX[what]}")
    return DataTypeError(f"{what} must hold numbers; {cell} is {v!r} (a {type(v).__name__}): the argument must be "
                         f"a number, or a string holding a number. {_FIX[what]}")


def _plain(v):
    """A numpy scalar as the Python value it holds, for messages ('a', not np.str_('a'))."""
    return v.item() if isinstance(v, np.generic) else v


def _feature(j, columns):
    """Feature ``j`` (0-based) as messages name it: 1-based, with its column name if X had names."""
    name = f" (column {columns[j]!r})" if columns is not None and j < len(columns) else ""
    return f"feature {j + 1}{name}"


def _missing(v):
    """Whether ``v`` is a missing value: None, NaN, or pandas' NA / NaT (named, not imported)."""
    if v is None or type(v).__name__ in ("NAType", "NaTType"):
        return True
    return isinstance(v, numbers.Real) and v != v


def _row_weights(sample_weight, n):
    """``sample_weight`` (a number, or one per row) as n finite float64 weights >= 0."""
    w = np.asarray(sample_weight)
    if w.ndim == 0:
        w = np.full(n, w)
    if w.shape != (n,):
        raise ParameterError(f"sample_weight must give one weight per row of X ({n}); got shape {w.shape}. "
                             "Pass one weight per row, the same for every row of a query")
    w = _floats(w, "sample_weight", dtype=np.float64)
    bad = np.flatnonzero(~(np.isfinite(w) & (w >= 0)))
    if bad.size:
        raise ParameterError(f"sample_weight must be finite and >= 0; row {bad[0]} is {w[bad[0]]}. Give it a weight "
                             ">= 0 (0 leaves its query out of the mean)")
    return w


def _mean_ndcg10(y, s, query_ptr, w=None, ids=None, convention="letor4"):
    """The mean NDCG@10 in ``convention`` of the queries of ``query_ptr``; with row weights ``w``
    (each query's rows alike, checked here), the mean weighted by query: the same left-to-right
    sum in the report's order as its unweighted mean, so weights of 1 give that mean's bits."""
    report = evaluate(y, s, query_ptr, ks=(10,), convention=convention)
    if w is None:
        return report.means["NDCG@10"]
    starts, sizes = query_ptr[:-1], np.diff(query_ptr)
    bad = np.flatnonzero(w != np.repeat(w[starts], sizes))
    if bad.size:
        q = int(np.searchsorted(query_ptr, bad[0], side="right")) - 1
        name = f"query {_plain(ids[q])!r}" if ids is not None else f"query {q + 1}"
        raise ParameterError(f"sample_weight must be the same for every row of a query (score is a mean over "
                             f"queries); {name} has rows weighted {w[starts[q]]:g} and {w[bad[0]]:g}. Give every row "
                             f"its query's weight, e.g. np.repeat(query_weights, query_sizes)")
    total = weight = 0.0
    for q in report.order:
        total += float(w[starts[q]]) * float(report.ndcg[q, 0])
        weight += float(w[starts[q]])
    if not weight > 0:
        raise ParameterError("sample_weight gives every query weight 0, so there is no mean to take. Give at least "
                             "one query a weight > 0")
    return total / weight


def _labels(y, n, method):
    """y as finite float32 labels, one per row."""
    if y is None:
        raise ParameterError(f"{method} requires y to be passed, but the target y is None: pass one relevance "
                             "label per row of X (or a dataset path as X)")
    y = np.asarray(y)
    if y.shape != (n,):
        raise ParameterError(f"y should be a 1d array of one label per row of X ({n}); got shape {y.shape}")
    y = _floats(y, "y")
    if not np.isfinite(y).all():
        r = int(np.flatnonzero(~np.isfinite(y))[0])
        raise ParameterError(f"y must be finite (no NaN or inf); row {r} is {y[r]}. Drop the row or give it a label")
    return y


@contextlib.contextmanager
def _verbose(on):
    """``verbose=True``: the training's log lines (one per solver iteration) and progress bars on
    standard error, as the command line shows them; False: silent."""
    if not on:
        yield
        return
    import logging

    from streamrank.execution.progress import progress
    logger = logging.getLogger("streamrank")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with progress(True):
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


_ROUTING_FIX = ("Pass qid= (one query id per row); inside GridSearchCV, cross_validate or a Pipeline, enable metadata "
                "routing (sklearn.set_config(enable_metadata_routing=True)) so that qid reaches fit and score")


def _warn_no_qid(who, n, why="", fix=_ROUTING_FIX, stacklevel=3):
    warnings.warn(f"{who} got no qid: its {n} rows are ranked as one query{why}. {fix}", UserWarning,
                  stacklevel=stacklevel)


def _qids(qid, n):
    """One query id per row; None: every row in query 0."""
    if qid is None:
        return np.zeros(n, np.int64)
    qid = np.asarray(qid)
    if qid.shape != (n,):
        raise ParameterError(f"qid must give one query id per row of X ({n}); got shape {qid.shape}"
                             f"{_per_query_hint(qid, n)}. Or read X, y and a per-row qid from a file at once: "
                             f"X, y, qid = streamrank.load_ranking(path)")
    return _ids(qid)


def _ids(qid):
    """The per-row query ids ``qid`` (an ndarray) as numbers, or as bytes (text as UTF-8), as
    DatasetWriter takes them; a missing id (None, NaN, pandas' NA) is a ParameterError, and so are
    ids of several kinds (1 and "1" would be one query once written)."""
    kind = qid.dtype.kind
    if kind in "biu":
        return qid
    if kind in "cV":
        raise ParameterError(f"qid must hold integer or text ids; got dtype {qid.dtype}. Pass qid as integers")
    if kind == "O":
        kinds = {"number" if isinstance(v, numbers.Number) else "text" if isinstance(v, (str, bytes))
                 else type(v).__name__ for v in qid if not _missing(v)}
        if len(kinds) > 1:
            raise ParameterError(f"qid mixes ids of kinds {', '.join(sorted(kinds))}; give every query an id of one "
                                 "kind, e.g. qid.astype(str)")
    if kind in "fmM":
        missing = np.flatnonzero(np.isnat(qid) if kind in "mM" else ~np.isfinite(qid))
        bad = int(missing[0]) if missing.size else None
    else:
        bad = next((r for r, v in enumerate(qid) if _missing(v)), None) if kind == "O" else None
    if bad is not None:
        raise ParameterError(f"qid must give every row a query id; row {bad} has none ({qid[bad]!r}). Drop the row "
                             "or give it its query's id")
    if kind == "O":
        qid = np.array(qid.tolist())
        kind = qid.dtype.kind
    return np.char.encode(qid, "utf-8") if kind == "U" else qid


def _per_query_hint(qid, n):
    """What a 1-D ``qid`` shorter than X most likely holds, and its per-row form: a dataset's row
    offsets (``query_ptr``: n_queries + 1 values from 0 to n), rows per query (``query_sizes``,
    LightGBM's group: they add up to n) or one id per query (``query_ids``)."""
    if qid.ndim != 1 or qid.size == 0 or qid.size >= n:
        return ""
    per_query = ("np.repeat(query_ids, query_sizes) (a dataset's: ds.row_query_ids(), beside "
                 "X, y = ds.read(0, ds.n_rows))")
    if qid.dtype.kind in "iu":
        v = qid.astype(np.int64)
        if qid.size > 1 and v[0] == 0 and v[-1] == n and (np.diff(v) >= 0).all():
            return (f": {qid.size} values from 0 to {n} are the row offsets of {qid.size - 1} queries (query_ptr), "
                    f"not ids. Per row: np.repeat(np.arange({qid.size - 1}), np.diff(query_ptr))")
        if (v > 0).all() and int(v.sum()) == n:
            return (f": {qid.size} values that add up to the {n} rows: if they are the sizes of {qid.size} queries "
                    f"(query_sizes, LightGBM's group), per row: np.repeat(np.arange({qid.size}), sizes); if they "
                    f"are one id per query, per row: {per_query}")
    try:
        distinct = np.unique(qid).size == qid.size
    except TypeError:  # ids of kinds that do not compare (an object array of str and int)
        distinct = False
    if distinct:
        return (f": {qid.size} distinct ids for {n} rows, one per query (as Dataset.query_ids holds them), not one "
                f"per row. Per row: {per_query}")
    return f": fewer ids than rows. Per row: {per_query}"


def _grouped(qid):
    """(order, query_ptr): rows grouped by query id as a dataset groups them (queries in order of
    first appearance, rows in input order within each); order is None when they are already."""
    _, first, inverse = np.unique(qid, return_index=True, return_inverse=True)
    appearance = np.empty(first.size, np.int64)
    appearance[np.argsort(first)] = np.arange(first.size)
    key = appearance[inverse.ravel()]
    query_ptr = np.concatenate(([0], np.cumsum(np.bincount(key, minlength=first.size))))
    if (np.diff(key) >= 0).all():
        return None, query_ptr
    return np.argsort(key, kind="stable"), query_ptr


class _fit_data:
    """``with _fit_data(X, y, qid, valid, "RankSVM") as (ds, vds)``: the training and validation
    datasets; those opened here (from paths, or arrays written to temporary datasets) are closed
    and removed on exit."""

    def __init__(self, X, y, qid, valid, who):
        self.who = who
        self.parts = [(X, y, qid)]
        if valid is not None:
            self.parts.append(tuple(valid) + (None,) * (3 - len(valid)) if isinstance(valid, (tuple, list))
                              else (valid, None, None))
        self.opened = []

    def __enter__(self):
        out = [None, None]
        try:
            for k, part in enumerate(self.parts):  # a loop, not a comprehension: the warnings' stack level
                out[k] = self._open(*part, k)
        except BaseException:
            self.__exit__()
            raise
        return tuple(out)

    def _open(self, X, y, qid, k):
        if isinstance(X, Dataset):
            return X
        if isinstance(X, (str, Path)):
            from streamrank.io.data_files import open_data
            ds = open_data(X)
            self.opened.append((ds, None))
            return ds
        X = _rows(X)
        y = _labels(y, X.shape[0], "fit")
        if qid is None:
            # the caller of fit, past _open, __enter__ and fit
            if k:
                _warn_no_qid(f"{self.who}.fit's valid=(X, y)", X.shape[0], fix="Pass valid=(X, y, qid)", stacklevel=5)
            else:
                _warn_no_qid(f"{self.who}.fit", X.shape[0], stacklevel=5)
        qid = _qids(qid, X.shape[0])
        tmp = tempfile.TemporaryDirectory(prefix="streamrank-fit-")
        self.opened.append((None, tmp))
        path = Path(tmp.name) / ("valid.h5" if k else "train.h5")
        with DatasetWriter(path, n_features=X.shape[1]) as w:
            w.append(X, y, qid if qid.dtype.kind in "iu" else qid.astype("S"))
        ds = open_dataset(path)
        ds.name = f"the {'validation' if k else 'training'} arrays"  # what messages call it, not the temp file
        self.opened[-1] = (ds, tmp)
        return ds

    def __exit__(self, *exc):
        for ds, tmp in reversed(self.opened):
            if ds is not None:
                ds.close()
            if tmp is not None:
                tmp.cleanup()
        self.opened = []


class CLSRRank(RankSVM):
    """Coefficient-based least-squares ranking (paper 002), RankSVM's sibling: f(x) = sum_t alpha_t
    K(x, x_t) over basis rows, fitted by one streamed pass and a Cholesky solve
    (:mod:`streamrank.training.clsr`). A scikit-learn estimator as :class:`RankSVM` is.

    Parameters are keyword-only, stored as given and validated in :meth:`fit` (the settings table,
    :mod:`streamrank.settings`, as for :class:`RankSVM`). ``kernel`` may also be a callable
    K(A, B), which need not be symmetric or PSD; a model with a callable kernel cannot be saved.
    ``n_components`` None: every training row is a basis row (the paper's setting).

    Parameters
    ----------
{parameters}
    verbose : bool, default=False
        As for RankSVM.

    Attributes
    ----------
    model_, n_features_in_, objective_, training_ : as for RankSVM
    alpha_ : ndarray, the coefficients of the basis rows
    basis_ : ndarray, the basis rows
    lambda_ : the chosen lambda
    """

    _METHODS = ("clsr",)
    # the text DATA cache of the command line: an estimator's data are arrays or datasets
    _EXCLUDE = ("method", "cache_dir")

    def _set_fitted(self, model, summary):
        self.model_ = model
        self.alpha_ = model.w
        self.basis_ = model.fmap.basis_
        self.n_features_in_ = model.n_features
        self.training_ = summary
        self.objective_ = summary.get("objective")
        self.lambda_ = summary.get("lambda")

    @classmethod
    def from_model(cls, model):
        cfg = model.config
        lams = cfg.get("lambda_path", [1e-3])
        gammas = cfg.get("gamma_path", [None])
        est = cls(lam=lams if len(lams) > 1 else lams[0], kernel=cfg.get("kernel", "rbf"),
                  gamma=gammas if len(gammas) > 1 else gammas[0], degree=cfg.get("degree", 3),
                  coef0=cfg.get("coef0", 1.0), n_components=cfg.get("components"),
                  normalize=cfg.get("normalize", "none"), select_metric=cfg.get("select_metric", "meanndcg"),
                  convention=cfg.get("convention", "letor4"), random_state=cfg.get("seed", 0),
                  features=cfg.get("features"))
        est._set_fitted(model, model.training)
        return est


def _table_init(cls, extra):
    """Give ``cls`` the keyword-only ``__init__`` of its settings (streamrank.settings: the table's
    entries for ``cls._METHODS``) and ``extra`` ``[(name, default)]``, which stores each argument
    as given (scikit-learn's convention: validation is ``fit``'s), and its docstring's Parameters."""
    sig = settings.estimator_signature(cls._METHODS, extra, cls._EXCLUDE)
    names = [n for n in sig.parameters if n != "self"]

    def __init__(self, **params):
        bound = sig.bind(self, **params)  # a name the table does not give: TypeError, as for any class
        bound.apply_defaults()
        for name in names:
            setattr(self, name, bound.arguments[name])

    __init__.__signature__ = sig
    __init__.__qualname__ = f"{cls.__name__}.__init__"
    cls.__init__ = __init__
    entries = settings.estimator_doc(cls._METHODS, cls._EXCLUDE)
    cls.__doc__ = cls.__doc__.replace("{parameters}", "\n".join("    " + ln for ln in entries.splitlines()))


_table_init(RankSVM, [("verbose", False)])
_table_init(CLSRRank, [("verbose", False)])


def load(path: "str | os.PathLike[str]") -> RankSVM:
    """A fitted estimator from a model file.

    Parameters
    ----------
    path : str or path-like
        A model that ``streamrank train``, ``grid``, ``cv`` or :meth:`RankSVM.save` wrote, of any
        released format version.

    Returns
    -------
    RankSVM or CLSRRank
        :class:`CLSRRank` for a CLSRRank model, else :class:`RankSVM`; fitted, with the
        parameters the model records.

    Raises
    ------
    InputError
        A file that is not a readable streamrank model, named with what is wrong.
    """
    model = load_model(path)
    return (CLSRRank if model.config.get("method") == "clsr" else RankSVM).from_model(model)
