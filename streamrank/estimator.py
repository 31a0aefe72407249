"""``streamrank.RankSVM``: the scikit-learn style estimator over the streamed trainer."""

import tempfile
from pathlib import Path

import numpy as np

from streamrank.io.dataset import Dataset, open_dataset
from streamrank.errors import ParameterError
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.state.model import load as load_model
from streamrank.training.linear import train_linear


class RankSVM:
    """Pairwise RankSVM with the squared hinge loss, trained by TRON over a block stream.

    Parameters (keyword-only; stored as given, validated in :meth:`fit`)
    ----------
    C : float, sequence of float, or "two-stage"
        Loss weight; several values need ``valid`` in :meth:`fit` and the best is kept;
        "two-stage" is paper 001's rule (1e-5..1e-1 by decades, then 0.6-1.4 x the best).
    normalize : {"none", "zscore", "query_minmax"}
    pair_cost : None, "gain_difference", label pair costs such as "0-1:1,1-2:1.3,0-2:2", or (L, L) array
        lambda(y_i, y_j) over the sorted label levels (paper 001); unlisted pairs cost 1.
    query_weight : None or "log_ratio"
        mu_q (paper 001).
    tol, max_iter : TRON's relative gradient tolerance and iteration limit.
    memory_budget : str or int, e.g. "2GB".
    checkpoint : directory for per-iteration checkpoints; ``resume`` continues from it.
    select_metric : {"meanndcg", "ndcg@10", "map", "avgndcg", "avgprec"} for choosing among several C.
    method : {"primal", "nystroem", "rff"}
        Linear, or a kernel approximation (paper 000) with ``kernel``, ``gamma`` (float or several
        with ``valid``; default 1/n_features), ``degree``, ``coef0``, ``n_components`` (m),
        ``rank`` (Nystroem truncation), ``cache_dir`` and ``map_cache`` (where mapped rows live).
        ``exact``: exact kernel RankSVM over beta (paper 004) with ``kernel`` (PSD), ``gamma``,
        ``degree``, ``coef0``; Q = K(X, X) in memory or under ``cache_dir``; ``block_bytes`` is then
        the size of a stored block of Q.
    solver : {"tron", "newton_cholesky", "newton_yuan", "auto"}
        ``tron`` (default) gives the same bits for any block size or budget; ``newton_cholesky``
        forms the dense Hessian with BLAS (block layouts agree to the tolerance); ``newton_yuan``
        is paper 001's Newton-Yuan (Cholesky directions up to 4,096 features, CG beyond and for
        ``exact``); ``auto`` picks tron or newton_cholesky from measured costs, so its choice may
        differ between runs (it is logged and saved).
    loss : {"squared_hinge", "smooth_hinge"}
        ``smooth_hinge`` is paper 001's cs-sRSVM loss (a C2 hinge with band half-width ``eta``),
        for every method.
    eta : None, "auto" or float in (0, 1)
        The smooth hinge's band; None / "auto": paper 001's rule per C.
    features : None, "3,7,12", "@file", "gas.h5:20" or a list of 1-based ids
        Train on these input features only; the model applies the same subset when it scores.
    random_state : int (recorded; the linear primal path draws no random numbers).
    """

    def __init__(self, *, C=1.0, normalize="none", pair_cost=None, query_weight=None, tol=1e-3,
                 max_iter=1000, memory_budget="2GB", checkpoint=None, resume=False,
                 select_metric="meanndcg", random_state=0, block_bytes=None, solver="tron",
                 method="primal", kernel="rbf", gamma=None, degree=3, coef0=1.0, n_components=1000, rank=None,
                 cache_dir=None, map_cache="auto", loss="squared_hinge", eta=None, features=None):
        self.C = C
        self.features = features
        self.loss = loss
        self.eta = eta
        self.normalize = normalize
        self.pair_cost = pair_cost
        self.query_weight = query_weight
        self.tol = tol
        self.max_iter = max_iter
        self.memory_budget = memory_budget
        self.checkpoint = checkpoint
        self.resume = resume
        self.select_metric = select_metric
        self.random_state = random_state
        self.block_bytes = block_bytes
        self.solver = solver
        self.method = method
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.n_components = n_components
        self.rank = rank
        self.cache_dir = cache_dir
        self.map_cache = map_cache

    def get_params(self, deep=True):
        return {k: getattr(self, k) for k in ("C", "normalize", "pair_cost", "query_weight", "tol", "max_iter",
                                              "memory_budget", "checkpoint", "resume", "select_metric",
                                              "random_state", "block_bytes", "solver", "method", "kernel",
                                              "gamma", "degree", "coef0", "n_components", "rank", "cache_dir",
                                              "map_cache", "loss", "eta", "features")}

    def set_params(self, **params):
        for k, v in params.items():
            if k not in self.get_params():
                raise ParameterError(f"unknown parameter {k!r} for RankSVM")
            setattr(self, k, v)
        return self

    def fit(self, X, y=None, qid=None, *, valid=None, queries=None):
        """Train on a dataset (path or :class:`Dataset`) or on in-memory arrays ``X, y, qid``.

        In-memory arrays are written to a temporary dataset first, so every fit reads through
        the same query-aligned stream.
        """
        tmp = None
        try:
            ds, tmp = _as_dataset(X, y, qid, "train")
            vds, vtmp = (None, None) if valid is None else _as_dataset(*_valid_parts(valid), "valid")
            try:
                train = _train_exact if self.method == "exact" else train_linear
                model, summary = train(
                    ds, valid=vds, C=self.C, normalize=self.normalize, tol=self.tol, max_iter=self.max_iter,
                    memory_budget=self.memory_budget, pair_cost=self.pair_cost, query_weight=self.query_weight,
                    select_metric=self.select_metric, checkpoint=self.checkpoint, resume=self.resume,
                    seed=self.random_state, block_bytes=self.block_bytes, queries=queries, solver=self.solver,
                    method=self.method, kernel=self.kernel, gamma=self.gamma, degree=self.degree, coef0=self.coef0,
                    components=self.n_components, rank=self.rank, cache_dir=self.cache_dir,
                    map_cache=self.map_cache, loss=self.loss, eta=self.eta, features=self.features)
            finally:
                if vtmp is not None:
                    vds.close()
                    vtmp.cleanup()
        finally:
            if tmp is not None:
                ds.close()
                tmp.cleanup()
        self.model_ = model
        self.coef_ = model.w
        self.n_features_in_ = model.n_features
        self.training_ = summary
        self.objective_ = summary["objective"]
        self.C_ = summary["C"]
        return self

    def predict(self, X, qid=None):
        """Scores of the rows of ``X`` (array) or of a dataset (path/Dataset, input row order)."""
        model = self._model()
        if isinstance(X, (str, Path, Dataset)):
            ds = open_dataset(X) if not isinstance(X, Dataset) else X
            return model.predict_dataset(ds, memory_budget=self.memory_budget)
        query_ptr = None
        if qid is not None:
            qid = np.asarray(qid)
            change = np.flatnonzero(qid[1:] != qid[:-1]) + 1
            query_ptr = np.concatenate(([0], change, [len(qid)]))
        return model.decision_function(np.asarray(X), query_ptr)

    def save(self, path):
        return self._model().save(path)

    def _model(self):
        if not hasattr(self, "model_"):
            raise ParameterError("this RankSVM is not fitted yet; call fit first")
        return self.model_

    @classmethod
    def from_model(cls, model):
        est = cls(**{k: v for k, v in _params_from_config(model.config).items()})
        est.model_ = model
        est.coef_ = model.w
        est.n_features_in_ = model.n_features
        est.training_ = model.training
        est.objective_ = model.training.get("objective")
        est.C_ = model.training.get("C")
        return est


def _train_exact(ds, *, solver, method, components, rank, map_cache, **kw):
    """train_exact with the estimator's arguments (no map settings)."""
    from streamrank.training.exact import train_exact
    return train_exact(ds, solver=solver, **kw)


def _params_from_config(cfg):
    out = {}
    for k_cfg, k in (("normalize", "normalize"), ("tol", "tol"), ("max_iter", "max_iter"),
                     ("pair_cost", "pair_cost"), ("query_weight", "query_weight"),
                     ("select_metric", "select_metric"), ("seed", "random_state"), ("loss", "loss"),
                     ("eta", "eta"), ("features", "features")):
        if k_cfg in cfg:
            out[k] = cfg[k_cfg]
    if "C_path" in cfg:
        out["C"] = cfg["C_path"] if len(cfg["C_path"]) > 1 else cfg["C_path"][0]
    if cfg.get("C_rule") == "two-stage":
        out["C"] = "two-stage"
    return out


def _valid_parts(valid):
    if isinstance(valid, (tuple, list)):
        return valid
    return valid, None, None


def _as_dataset(X, y, qid, name):
    """(Dataset, TemporaryDirectory or None) for a path, a Dataset or arrays."""
    if isinstance(X, Dataset):
        return X, None
    if isinstance(X, (str, Path)):
        from streamrank.evaluation.score_files import open_data
        return open_data(X), None
    if y is None or qid is None:
        raise ParameterError("fit(X, y, qid) needs labels y and query ids qid with an array X "
                             "(or pass a dataset path)")
    X = np.asarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.float32)
    qid = np.asarray(qid)
    if X.ndim != 2 or y.shape != (X.shape[0],) or qid.shape != (X.shape[0],):
        raise ParameterError(f"X must be (n, d) with y and qid of length n; got X {X.shape}, y {y.shape}, "
                             f"qid {qid.shape}")
    if not np.isfinite(X).all() or not np.isfinite(y).all():
        raise ParameterError("X and y must be finite (no NaN or inf)")
    tmp = tempfile.TemporaryDirectory(prefix="streamrank-fit-")
    path = Path(tmp.name) / f"{name}.h5"
    with DatasetWriter(path, n_features=X.shape[1]) as w:
        w.append(X, y, qid if qid.dtype.kind in "iu" else qid.astype("S"))
    return open_dataset(path), tmp


class CLSRRank(RankSVM):
    """Coefficient-based least-squares ranking (paper 002), RankSVM's sibling: f(x) = sum_t alpha_t
    K(x, x_t) over basis rows, fitted by one streamed pass and a Cholesky solve
    (:mod:`streamrank.training.clsr`).

    Parameters (keyword-only; stored as given, validated in :meth:`fit`)
    ----------
    lam : float or sequence of float
        The penalty lambda m ||alpha||^2; several values need ``valid`` in :meth:`fit` (one pass
        serves them all).
    kernel : {"rbf", "laplacian", "poly", "sigmoid", "linear"} or callable K(A, B)
        Need not be symmetric or PSD; a model with a callable kernel cannot be saved.
    gamma, degree, coef0 : kernel parameters (gamma: one or several; None = 1 / n_features).
    n_components : None or int
        Basis rows drawn from the data (seeded); None: every training row (the paper's setting).
    normalize, memory_budget, select_metric, random_state, block_bytes, features : as for RankSVM.
    """

    _PARAMS = ("lam", "kernel", "gamma", "degree", "coef0", "n_components", "normalize", "memory_budget",
               "select_metric", "random_state", "block_bytes", "features")

    def __init__(self, *, lam=1e-3, kernel="rbf", gamma=None, degree=3, coef0=1.0, n_components=None,
                 normalize="none", memory_budget="2GB", select_metric="meanndcg", random_state=0, block_bytes=None,
                 features=None):
        self.lam = lam
        self.features = features
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.n_components = n_components
        self.normalize = normalize
        self.memory_budget = memory_budget
        self.select_metric = select_metric
        self.random_state = random_state
        self.block_bytes = block_bytes

    def get_params(self, deep=True):
        return {k: getattr(self, k) for k in self._PARAMS}

    def set_params(self, **params):
        for k, v in params.items():
            if k not in self._PARAMS:
                raise ParameterError(f"unknown parameter {k!r} for CLSRRank")
            setattr(self, k, v)
        return self

    def fit(self, X, y=None, qid=None, *, valid=None, queries=None):
        """Train on a dataset (path or :class:`Dataset`) or in-memory arrays ``X, y, qid``."""
        from streamrank.training.clsr import train_clsr
        tmp = vtmp = vds = None
        try:
            ds, tmp = _as_dataset(X, y, qid, "train")
            vds, vtmp = (None, None) if valid is None else _as_dataset(*_valid_parts(valid), "valid")
            model, summary = train_clsr(ds, valid=vds, lam=self.lam, kernel=self.kernel, gamma=self.gamma,
                                        degree=self.degree, coef0=self.coef0, normalize=self.normalize,
                                        components=self.n_components, memory_budget=self.memory_budget,
                                        select_metric=self.select_metric, seed=self.random_state,
                                        block_bytes=self.block_bytes, queries=queries, features=self.features)
        finally:
            for d_, t_ in ((vds, vtmp), (None if tmp is None else ds, tmp)):
                if t_ is not None:
                    d_.close()
                    t_.cleanup()
        self.model_ = model
        self.alpha_ = model.w
        self.basis_ = model.fmap.basis_
        self.n_features_in_ = model.n_features
        self.training_ = summary
        self.objective_ = summary["objective"]
        self.lambda_ = summary["lambda"]
        return self

    @classmethod
    def from_model(cls, model):
        cfg = model.config
        lams = cfg.get("lambda_path", [1e-3])
        gammas = cfg.get("gamma_path", [None])
        est = cls(lam=lams if len(lams) > 1 else lams[0], kernel=cfg.get("kernel", "rbf"),
                  gamma=gammas if len(gammas) > 1 else gammas[0], degree=cfg.get("degree", 3),
                  coef0=cfg.get("coef0", 1.0), n_components=cfg.get("components"),
                  normalize=cfg.get("normalize", "none"), select_metric=cfg.get("select_metric", "meanndcg"),
                  random_state=cfg.get("seed", 0), features=cfg.get("features"))
        est.model_ = model
        est.alpha_ = model.w
        est.basis_ = model.fmap.basis_
        est.n_features_in_ = model.n_features
        est.training_ = model.training
        est.objective_ = model.training.get("objective")
        est.lambda_ = model.training.get("lambda")
        return est


def load(path):
    """A fitted estimator from a model file: :class:`CLSRRank` for a CLSRRank model, else :class:`RankSVM`."""
    model = load_model(path)
    return (CLSRRank if model.config.get("method") == "clsr" else RankSVM).from_model(model)
