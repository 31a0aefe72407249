"""What every training method shares before its path starts: labels, query weights (paper 001's
mu), label-pair costs (lambda), the validation metric's value, and the settings' checks."""

import numpy as np

from streamrank.errors import ParameterError
from streamrank.evaluation.metrics import evaluate
from streamrank.io.info import preference_pairs_per_query

SELECT_METRICS = ("meanndcg", "ndcg@10", "map")
QUERY_WEIGHTS = ("none", "log_ratio")
PAIR_COSTS = ("none", "gain_difference")


def read_labels(ds):
    y = np.empty(ds.n_rows, np.float32)
    if ds.n_rows:
        ds.y.read_direct(y)
    return y


def query_weights(kind, y, query_ptr):
    """mu_q: 1, or paper 001's ln(1 + max_q' |P_q'| / |P_q|) (0 for a query without pairs)."""
    if kind in (None, "none"):
        return np.ones(len(query_ptr) - 1)
    if kind == "log_ratio":
        p = preference_pairs_per_query(y, query_ptr).astype(np.float64)
        mu = np.zeros_like(p)
        has = p > 0
        mu[has] = np.log1p(p.max() / p[has])
        return mu
    raise ParameterError(f"query_weight must be one of {', '.join(QUERY_WEIGHTS)}; got {kind!r}")


def pair_cost_table(kind, levels):
    """lambda over label ranks: 1 everywhere, or the gain difference (2^y_i - 1) - (2^y_j - 1)."""
    L = len(levels)
    if kind is None or (isinstance(kind, str) and kind == "none"):
        return np.ones((L, L))
    if isinstance(kind, str):
        if kind == "gain_difference":
            g = 2.0 ** np.asarray(levels) - 1.0
            return np.subtract.outer(g, g)
        raise ParameterError(f"pair_cost must be one of {', '.join(PAIR_COSTS)} or an L x L table; got {kind!r}")
    lam = np.asarray(kind, np.float64)
    if lam.shape != (L, L):
        raise ParameterError(f"pair_cost table must be {L} x {L} (one row and column per label level "
                             f"{list(levels)}); got shape {lam.shape}")
    return lam


def validation_score(model, valid, valid_y, metric, *, block_bytes, executor=None):
    """``metric`` (one of SELECT_METRICS) of ``model`` on the validation dataset (one streamed pass)."""
    s = model.score_stream(valid, block_bytes=block_bytes, executor=executor, quiet_width=True)
    return metric_value(evaluate(valid_y, s, valid.query_ptr, qid=None), metric)


def check_has_features(ds):
    from streamrank.errors import InputError
    if ds.n_features == 0:
        raise InputError(f"{ds.name} has no features (every row is empty); there is nothing to rank by")


def check_valid_width(ds, valid):
    """Said once before training: validation data of another width than the training data."""
    if valid is None or valid.n_features == ds.n_features:
        return
    import logging
    how = "are not in the model and are ignored" if valid.n_features > ds.n_features else "are read as 0"
    lo, hi = sorted((valid.n_features, ds.n_features))
    logging.getLogger("streamrank.training").warning(
        "%s has %d features, the training data %s %d: features %d to %d %s when it is scored", valid.name,
        valid.n_features, ds.name, ds.n_features, lo + 1, hi, how)


def metric_value(report, name):
    m = report.means
    return {"meanndcg": m["MeanNDCG"], "ndcg@10": m["NDCG@10"], "map": m["MAP"]}[name]


def check_config(cfg):
    for name in ("C_path",):
        for C in cfg[name]:
            if not C > 0:
                raise ParameterError(f"C must be > 0; got {C}. Use C=0.5")
    if not cfg["tol"] > 0:
        raise ParameterError(f"tol must be > 0; got {cfg['tol']}. Use tol=1e-3")
    if int(cfg["max_iter"]) < 1:
        raise ParameterError(f"max_iter must be >= 1; got {cfg['max_iter']}. Use max_iter=1000")
    if cfg["select_metric"] not in SELECT_METRICS:
        raise ParameterError(f"select_metric must be one of {', '.join(SELECT_METRICS)}; got {cfg['select_metric']!r}")
