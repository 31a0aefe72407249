"""What every training method shares before its path starts: labels, query weights (paper 001's
mu), label-pair costs (lambda), the validation metric's value, and the settings' checks.

A training run reads in three steps: its settings are checked once and frozen (a read-only
mapping, the config its model records), the data are prepared once into a :class:`Problem`
(labels, weights, costs, normaliser, validation labels), and a method's path runs over that
problem (:mod:`streamrank.training.path`); what the run decides on the way (e.g. the solver of
``solver=auto``) comes back with the path's result, never written into the settings."""

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from streamrank import params
from streamrank.errors import InputError, ParameterError
from streamrank.evaluation.metrics import evaluate
from streamrank.execution.executor import Pass, executor_or_local, partitioned_stream
from streamrank.io.info import preference_pairs_per_query
from streamrank.units import budget_bytes, parse_size

SELECT_METRICS = ("meanndcg", "ndcg@10", "map", "avgndcg", "avgprec")
QUERY_WEIGHTS = ("none", "log_ratio")
PAIR_COSTS = ("none", "graded", "gain_difference")
LOSSES = ("squared_hinge", "smooth_hinge")

# Paper 001, theorem 2: with the smooth hinge of band half-width eta, the optima satisfy
# ||w_eta - w*||^2 <= C * sum_pairs lambda mu * THEOREM2_CONSTANT * eta^2 (THEOREM2_CONSTANT =
# max_m p(m)^2 - max(0, m)^2 over eta^2). eta=auto solves that bound = ETA_AUTO_EPS1 for eta (the
# paper's eps1), and keeps the band no wider than ETA_AUTO_MAX.
THEOREM2_CONSTANT = 0.0515
ETA_AUTO_EPS1 = 1e-5
ETA_AUTO_MAX = 0.5


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


PAIR_COST_FORM = "'0-1:1,1-2:1.3,0-2:2' (label a-label b:cost > 0; unlisted pairs cost 1)"


def parse_pair_costs(spec):
    """Paper 001's lambda per label pair from ``'0-1:1,1-2:1.3,0-2:2'``: {(low, high): cost}."""
    out = {}
    for item in spec.split(","):
        pair, sep, cost = item.strip().partition(":")
        a, dash, b = pair.strip().partition("-")
        try:
            la, lb, c = float(a), float(b), float(cost)
        except ValueError:
            la = lb = c = None
        if not (sep and dash) or c is None or not np.isfinite([la, lb, c]).all() or not c > 0 or la == lb:
            raise ParameterError(f"pair_cost {spec!r}: {item.strip()!r} is not a label pair and its cost; use "
                                 f"pair_cost={PAIR_COST_FORM.split(' ')[0]}, the form {PAIR_COST_FORM}")
        key = (min(la, lb), max(la, lb))
        if key in out:
            raise ParameterError(f"pair_cost {spec!r}: labels {a.strip()}-{b.strip()} are given twice; give each "
                                 f"pair once, as in {PAIR_COST_FORM}")
        out[key] = c
    return out


# paper 001's costs for LETOR's three grades (sec. 4.1, OHSUMED): lambda(0,1) = 1, lambda(1,2) = 1.3,
# lambda(0,2) = 2
PAPER001_COSTS = {(0.0, 1.0): 1.0, (1.0, 2.0): 1.3, (0.0, 2.0): 2.0}


def graded_costs(levels):
    """The ``graded`` rule's lambda over label ranks (symmetric, diagonal unused): paper 001's table
    (PAPER001_COSTS) when every level is one of 0, 1, 2; otherwise lambda(a, b) = log2(1 + |g(a) -
    g(b)|) with the evaluation's gains g(y) = 2^y - 1 (both conventions' gains on graded labels).

    The rule keeps what sec. 4.4 of paper 001 asks of the costs: they grow with the gain a misorder
    loses (so lambda(0,2) > lambda(1,2) > lambda(0,1) on three grades) but slower than the gain
    itself, since "too large lambda leads to overfitting"; it gives the paper's lambda(0,1) = 1 and
    lambda(0,2) = 2 exactly, and 1.585 where the paper chose 1.3 by hand. The logarithm keeps the
    spread of costs to about the number of grades (1 to 4 on grades 0-4, where the gain difference
    itself spans 1 to 15), docs/methods.md ("Cost-sensitive defaults")."""
    lv = np.asarray(levels, np.float64)
    if lv.size and set(lv.tolist()) <= {0.0, 1.0, 2.0}:
        lam = np.ones((lv.size, lv.size))
        for i, a in enumerate(lv):
            for j, b in enumerate(lv):
                if a != b:
                    lam[i, j] = PAPER001_COSTS[(min(a, b), max(a, b))]
        return lam
    # log2(1 + 2^hi - 2^lo) = log2(1 + 2^x) with x = hi + log2(1 - 2^(lo - hi)), by logaddexp2:
    # finite for every finite pair of grades (2^y itself overflows past y = 1024)
    hi, lo = np.maximum.outer(lv, lv), np.minimum.outer(lv, lv)
    with np.errstate(divide="ignore"):  # the diagonal: log2(0) = -inf, and lambda 0
        x = hi + np.log2(-np.expm1((lo - hi) * np.log(2.0)))
    return np.logaddexp2(0.0, x)


def pair_cost_table(kind, levels):
    """lambda over label ranks: 1 everywhere, the ``graded`` rule (:func:`graded_costs`), the gain
    difference (2^y_i - 1) - (2^y_j - 1), a spec of costs per label pair
    (:func:`parse_pair_costs`; the table is symmetric, unlisted pairs cost 1, pairs of labels
    absent from the data do not count), or an L x L table."""
    L = len(levels)
    if kind is None or (isinstance(kind, str) and kind == "none"):
        return np.ones((L, L))
    if isinstance(kind, str):
        if kind == "graded":
            return graded_costs(levels)
        if kind == "gain_difference":
            g = 2.0 ** np.asarray(levels) - 1.0
            return np.subtract.outer(g, g)
        if ":" not in kind and "-" not in kind:
            raise ParameterError(f"pair_cost must be one of {', '.join(PAIR_COSTS)}, label pair costs such as "
                                 f"{PAIR_COST_FORM}, or an L x L table; got {kind!r}. "
                                 f"Use pair_cost={PAIR_COST_FORM.split(' ')[0]}")
        lam = np.ones((L, L))
        rank = {float(v): r for r, v in enumerate(levels)}
        for (a, b), c in parse_pair_costs(kind).items():
            if a in rank and b in rank:
                lam[rank[a], rank[b]] = lam[rank[b], rank[a]] = c
        return lam
    lam = np.asarray(kind, np.float64)
    if lam.ndim == 2 and not (np.isfinite(lam).all() and (lam >= 0).all()):
        raise ParameterError(f"pair_cost table must hold finite costs >= 0; got {kind!r}. "
                             f"Use pair_cost={PAIR_COST_FORM.split(' ')[0]}")
    if lam.shape != (L, L):
        raise ParameterError(f"pair_cost table must be {L} x {L} (one row and column per label level "
                             f"{list(levels)}); got shape {lam.shape}")
    return lam


def kernel_value_variance(ds, normalize, *, block_bytes, executor=None):
    """Var X of every value of ``ds``'s rows as a kernel sees them (after ``normalize``), for
    gamma='scale' (:func:`streamrank.features.kernels.default_gamma`): one streamed pass, the
    normaliser's statistics pass (Welford's moments per column, combined by the law of total
    variance: :func:`streamrank.features.normalize.value_variance`)."""
    from streamrank.features.normalize import Normalizer
    normalizer = Normalizer(normalize)
    stream = partitioned_stream(ds, executor, block_bytes=block_bytes)
    if normalizer.kind == "zscore":  # the fit's moments give the z-scored rows' variance
        return normalizer.fit(stream, ds.n_features, executor=executor).value_variance()
    return normalizer.value_variance(stream, executor=executor)


def gamma_path(gamma):
    """The gamma values of a path: [None] (the kernel's default) or the given ones, each > 0."""
    if gamma is None:
        return [None]
    return params.check_all("gamma", gamma)


def grid_points(values, gammas, valid, name="C"):
    """The path's (gamma index, value) points; several of them need validation data to choose."""
    points = [(gi, v) for gi in range(len(gammas)) for v in values]
    if len(points) > 1 and valid is None:
        raise ParameterError(f"several {name} (and gamma) values need validation data (valid=DATA) to choose between "
                             f"them; got {name} = {', '.join(map(str, values))}"
                             + (f", gamma = {gammas}" if len(gammas) > 1 else ""))
    return points


def c_path(C):
    """(the C values of the path's first stage, its refine function or None) for ``C``: a value,
    several, or ``"two-stage"`` (paper 001: the decades 1e-5..1e-1, then 0.6, 0.8, 1.2 and 1.4 times
    the best of them; :func:`~streamrank.training.path.two_stage_refine`)."""
    from streamrank.training.path import TWO_STAGE_DECADES, two_stage_refine
    if isinstance(C, str):
        if C.strip().lower() == "two-stage":
            return list(TWO_STAGE_DECADES), two_stage_refine
    return sorted(params.check_all("C", C)), None


def check_loss(loss, eta):
    """The loss and its eta as the config records them: (loss, None | "auto" | float)."""
    if loss not in LOSSES:
        raise ParameterError(f"loss must be one of {', '.join(LOSSES)}; got {loss!r}. Use loss=smooth_hinge")
    if loss == "squared_hinge":
        if eta is not None:
            raise ParameterError(f"eta applies to the smooth hinge; got eta={eta} with loss=squared_hinge. "
                                 f"Use loss=smooth_hinge")
        return loss, None
    if eta is None or (isinstance(eta, str) and eta.strip().lower() == "auto"):
        return loss, "auto"
    return loss, params.check("eta", eta)


def pair_weight_sum(rank, query_ptr, lam, mu):
    """sum over preference pairs of lambda mu: sum_q mu_q sum_{a > b} n_qa n_qb lam[a, b] from the
    per-query counts n_qa of each label rank (no pair is built)."""
    L = lam.shape[0]
    nq = len(query_ptr) - 1
    qid = np.repeat(np.arange(nq), np.diff(query_ptr))
    counts = np.zeros((nq, L))
    np.add.at(counts, (qid, np.asarray(rank, np.int64)), 1.0)
    low = np.tril(lam, -1)  # a > b
    per_query = np.einsum("qa,ab,qb->q", counts, low, counts)
    return float(np.asarray(mu, np.float64) @ per_query)


def eta_for(loss, eta, C, weight_sum):
    """The eta of one C: 0 for the squared hinge, the given one, or paper 001's rule
    eta = sqrt(eps1 / (THEOREM2_CONSTANT * C * sum lambda mu)), at most ETA_AUTO_MAX."""
    if loss == "squared_hinge":
        return 0.0
    if eta != "auto":
        return float(eta)
    if weight_sum <= 0:
        return ETA_AUTO_MAX
    return float(min(ETA_AUTO_MAX, np.sqrt(ETA_AUTO_EPS1 / (THEOREM2_CONSTANT * C * weight_sum))))


def validation_score(model, valid, valid_y, metric, *, block_bytes, executor=None, convention="letor4"):
    """``metric`` (one of SELECT_METRICS) of ``model`` on the validation dataset in the gain
    ``convention`` (:mod:`streamrank.evaluation.metrics`; one streamed pass)."""
    s = model.score_stream(valid, block_bytes=block_bytes, executor=executor, quiet_width=True)
    return metric_value(evaluate(valid_y, s, valid.query_ptr, qid=None, convention=convention), metric)


def check_convention(convention):
    """The gain convention of the validation metric, checked; a run records it only when it is not
    letor4 (so configs and checkpoints written before it existed match)."""
    from streamrank.evaluation.metrics import CONVENTIONS
    if convention not in CONVENTIONS:
        raise ParameterError(f"convention must be one of {', '.join(CONVENTIONS)}; got {convention!r}. "
                             f"Use convention=letor4")
    return {} if convention == "letor4" else {"convention": convention}


class _MapRows(Pass):
    """Validation rows normalised and mapped once (kept with their blocks for later passes)."""

    def __init__(self, model, wide=False):
        self.model, self.wide = model, wide

    def step(self, carry, item):
        block, a, b = item
        return a, b, np.ascontiguousarray(self.model.mapped_rows(block.X, block.query_ptr, row0=a, extra="ignore",
                                                                 wide=self.wide))

    def merge(self, total, carry):
        return None


class _MappedScores(Pass):
    """Scores of kept mapped rows by weights ``w``."""

    returns = True
    reads = "meta"

    def __init__(self, model):
        self.model = model

    def step(self, carry, item, rows):
        a, b, F = rows
        return a, b, self.model.dot_features(F)

    def merge(self, total, carry):
        return None


class MappedValidation:
    """The validation score of many weight vectors over one feature map (a C path): the validation
    rows are mapped once (one pass; their mapped rows, :func:`mapped_validation_bytes`, are
    held by the executor with their blocks) and each score is then a product per block, the bits of
    :func:`validation_score`. ``wide``: rows as wide as a support (the exact kernel's K(x, X),
    :meth:`~streamrank.state.model.LinearModel.mapped_rows`)."""

    def __init__(self, model, valid, valid_y, metric, *, block_bytes, executor=None, convention="letor4", wide=False):
        self.valid, self.valid_y, self.metric, self.executor = valid, valid_y, metric, executor_or_local(executor)
        self.convention = convention
        self.source = partitioned_stream(valid, executor, block_bytes=block_bytes)
        _, self.kept = self.executor.run(_MapRows(model, wide), self.source)

    def score(self, model):
        out = np.empty(self.valid.n_rows)

        def collect(k, item):
            a, b, s = item
            out[a:b] = s
        self.executor.run(_MappedScores(model), self.source, kept=[self.kept], collect=collect)
        return metric_value(evaluate(self.valid_y, out, self.valid.query_ptr, qid=None, convention=self.convention),
                            self.metric)


def mapped_validation_bytes(valid, width, itemsize=4):
    """Bytes of a validation set's mapped rows for :class:`MappedValidation`: ``width`` values of
    ``itemsize`` bytes a row (float32 phi; a Nystroem map's float64 kernel rows, 8)."""
    return 0 if valid is None else int(itemsize) * int(valid.n_rows) * int(width)


def with_features(ds, valid, features):
    """(ds, valid, cols, width): the training (and validation) data seen through ``features``, a
    spec as ``train --features`` takes it ('3,7,12', '@FILE', 'gas.h5:20') or 1-based ids; cols
    are 0-based and width the data's own. None: every feature (cols None)."""
    if features is None:
        return ds, valid, None, None
    from streamrank.io.feature_subset import FeatureSubset
    from streamrank.selection.gas import parse_features
    spec = features if isinstance(features, str) else ",".join(str(int(v)) for v in np.ravel(features))
    cols = parse_features(spec, ds.n_features)
    return (FeatureSubset(ds, cols), None if valid is None else FeatureSubset(valid, cols), cols, ds.n_features)


def attach_features(model, cols, width):
    """The model reads the input columns ``cols`` of ``width``-wide rows (none: all of them)."""
    if cols is not None:
        model.input_features, model.input_width = np.asarray(cols, np.int64), int(width)
        model.config["features"] = [int(c) + 1 for c in cols]
    return model


def check_queries(ds, queries):
    """A training query range [q0, q1) inside the dataset (None: all of it)."""
    if queries is None:
        return
    q0, q1 = (int(v) for v in queries)
    if not 0 <= q0 < q1 <= ds.n_queries:
        raise ParameterError(f"queries must be a range q0 < q1 within the {ds.n_queries} queries of {ds.name}; "
                             f"got {list(queries)}")


def check_has_features(ds):
    from streamrank.errors import InputError
    if ds.n_rows == 0:
        raise InputError(f"{ds.name} has no rows; there is nothing to train on")
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


def check_validation_labels(valid, metric):
    """Before any pass: every label of ``valid`` is one the validation ``metric`` can take (a
    gain 2^y - 1: finite, 0 to MAX_GAIN_LABEL), or InputError naming the file, its row and the fix."""
    if valid is None:
        return
    from streamrank.evaluation.metrics import first_bad_label
    y = read_labels(valid)
    bad = first_bad_label(y)
    if bad is None:
        return
    r, why = bad
    where = valid.where(r) if hasattr(valid, "where") else ""
    raise InputError(f"{valid.name}: stored row {r}{' (' + where + ')' if where else ''} has label {float(y[r]):g}, "
                     f"which the validation metric ({metric}) cannot take: {why}. Relabel the validation data with "
                     f"grades 0, 1, 2, ... (add 1 to every label where -1 marks the least relevant), or give other "
                     f"validation data (valid=DATA)")


def metric_value(report, name):
    m = report.means
    return {"meanndcg": m["MeanNDCG"], "ndcg@10": m["NDCG@10"], "map": m["MAP"], "avgndcg": m["AvgNDCG"],
            "avgprec": m["AvgPrec"]}[name]


# the numeric settings of a training's config, checked against the table of ranges (streamrank.params)
_CHECKED = {"tol": "tol", "gap_tol": "gap_tol", "max_iter": "max_iter", "seed": "seed", "degree": "degree",
            "coef0": "coef0", "components": "components", "rank": "rank", "memory_budget": "memory_budget",
            "block_bytes": "block_bytes", "cache_size": "cache_size", "partition_rows": "partition_rows"}
# sizes: written as 512MB or bytes, read by units.parse_size first
_SIZES = ("memory_budget", "block_bytes", "cache_size")


def check_config(cfg):
    """Every setting of a training's config in its range (streamrank.params), the C path's and
    gamma path's values included; values are stored as the table reads them."""
    params.check_all("C", cfg["C_path"])
    for g in cfg.get("gamma_path") or ():
        if g is not None:
            params.check("gamma", g)
    for key, name in _CHECKED.items():
        v = cfg.get(key)
        if v is None:
            continue
        if name in _SIZES:
            v = budget_bytes(v, name) if name == "memory_budget" else parse_size(v, name)
        params.check(name, v)
    if cfg["select_metric"] not in SELECT_METRICS:
        raise ParameterError(f"select_metric must be one of {', '.join(SELECT_METRICS)}; got {cfg['select_metric']!r}")
    if "loss" in cfg:
        cfg["loss"], cfg["eta"] = check_loss(cfg["loss"], cfg.get("eta"))
    for name in ("abs_gtol", "abs_dtol"):
        v = cfg.get(name)
        if v is not None:
            if cfg.get("solver") != "newton_yuan":
                raise ParameterError(f"{name} is Newton-Yuan's stopping test (paper 001's "
                                     f"{'eps2' if name == 'abs_gtol' else 'eps3'}); use solver=newton_yuan")
            params.check(name, v)
    if isinstance(cfg.get("pair_cost"), str):
        pair_cost_table(cfg["pair_cost"], [])  # a malformed spec is refused before the data is read


# float32's largest value squared: the a-priori bound of one raw feature's square
_F32_MAX_SQ = float(np.finfo(np.float32).max) ** 2


def check_c_scale(C_max, *, query_ptr, lam, mu, weight_sum, sq_norm_bound, max_sq_norm, data_name):
    """Refuse, after the statistics pass and before the first iteration, a C whose objective
    overflows float64 on these data (:func:`streamrank.params.c_limit`), naming the largest C that
    works.

    Cheap bounds come first, so an ordinary C costs nothing: the sum of pair weights is at most
    max(lambda) max(mu) sum_q l_q^2 / 2, and a row's squared norm at most ``sq_norm_bound``
    (:func:`row_sq_norm_bound`). Only when C passes those does the check pay for ``weight_sum()``
    (labels only) and ``max_sq_norm()`` (one pass over the rows; None: the bound is the value).
    """
    from streamrank import params
    sizes = np.diff(np.asarray(query_ptr, np.float64))
    w_bound = float(np.max(lam, initial=1.0)) * float(np.max(mu, initial=1.0)) * float(sizes @ sizes) / 2
    if C_max <= params.c_limit(w_bound, sq_norm_bound):
        return
    W = weight_sum()
    if C_max <= params.c_limit(W, sq_norm_bound):
        return
    params.check_c_on_data([C_max], W, sq_norm_bound if max_sq_norm is None else max_sq_norm(), data_name)


def row_sq_norm_bound(method, kernel, normalize, n_features, n_rows):
    """(a bound of a row's squared norm as the objective sees it, whether a pass can make it exact)
    or (None, False) where no bound is known without the map (poly, sigmoid, linear kernels).

    - the identity map: d (query_minmax: values in [0, 1]), d n (zscore: |x - mean| <= sqrt(n) std
      for every value of a column) or d float32max^2 (raw values); a pass gives the exact value;
    - random Fourier features: ||phi(x)||^2 = (2/m) sum cos^2 <= 2 (paper 000, eq. 11's map);
    - Nystroem: ||phi(x)||^2 = K(x, L) W_k^+ K(L, x) <= k(x, x) = 1 for rbf and laplacian (the
      projection onto the landmarks' span shortens phi).
    """
    if method == "primal":
        per_value = {"query_minmax": 1.0, "zscore": float(max(n_rows, 1))}.get(normalize, _F32_MAX_SQ)
        return n_features * per_value, True
    if kernel in ("rbf", "laplacian") and method in ("rff", "nystroem"):
        return 2.0, False
    return None, False


def max_row_sq_norm(stream, normalizer=None):
    """The largest squared norm of a row of ``stream``'s blocks (normalised by ``normalizer``), in
    float64: one pass, for :func:`check_c_scale`."""
    top = 0.0
    for block, _, _ in stream:
        X = block.X if normalizer is None else normalizer.transform(block.X, block.query_ptr)
        if len(X):
            X = np.asarray(X, np.float64)
            top = max(top, float(np.einsum("ij,ij->i", X, X).max()))
    return top


def frozen(settings):
    """A read-only copy of a run's checked ``settings`` (the config its model records)."""
    return MappingProxyType(dict(settings))


def base_config(*, Cs, refine, normalize, tol, max_iter, gap_tol, memory_budget, block_bytes, pair_cost, query_weight,
                select_metric, seed, queries, valid, loss, eta, abs_gtol, abs_dtol, convention="letor4"):
    """The settings every method of the C path (primal, maps, exact) records, the numbers checked
    (:mod:`streamrank.params`); ``gap_tol`` only when given (old checkpoints match; ``"off"`` is
    not given: ``tol``'s rule), ``C_rule`` only for the two-stage rule."""
    if isinstance(gap_tol, str) and gap_tol.strip().lower() == "off":
        gap_tol = None
    return {"C_path": Cs, "normalize": normalize, "tol": params.check("tol", tol),
            **({"gap_tol": params.check("gap_tol", gap_tol)} if gap_tol is not None else {}),
            "max_iter": params.check("max_iter", max_iter), "memory_budget": memory_budget, "block_bytes": block_bytes,
            "pair_cost": pair_cost if isinstance(pair_cost, (str, type(None))) else np.asarray(pair_cost).tolist(),
            "query_weight": query_weight, "select_metric": select_metric, **check_convention(convention),
            "seed": params.check("seed", seed),
            "queries": list(queries) if queries is not None else None,
            "valid_fingerprint": valid.fingerprint if valid is not None else None,
            "loss": loss, "eta": eta, "abs_gtol": abs_gtol, "abs_dtol": abs_dtol,
            **({"C_rule": "two-stage"} if refine is not None else {})}


def check_data(ds, valid, select_metric, values, gammas, name="C"):
    """The path's (gamma index, value) points, once the data are known to be trainable: rows and
    features present, validation data as wide and with labels the metric takes."""
    check_has_features(ds)
    check_valid_width(ds, valid)
    check_validation_labels(valid, select_metric)
    return grid_points(values, gammas, valid, name)


def query_range(ds, queries):
    """(q0, q1): the training queries (None: all of them)."""
    return tuple(queries) if queries is not None else (0, ds.n_queries)


def fit_normalizer(ds, normalize, queries, block_bytes, executor):
    """The normaliser of ``normalize``, fitted on training queries [q0, q1) when it needs
    statistics (zscore: one streamed pass)."""
    from streamrank.features.normalize import Normalizer
    normalizer = Normalizer(normalize)
    if normalize == "zscore":
        normalizer.fit(partitioned_stream(ds, executor, block_bytes=block_bytes, queries=queries), ds.n_features,
                       executor=executor)
    return normalizer


def label_weights(y, qp, query_weight, pair_cost, loss):
    """(label levels, mu per query, pair costs, sum of lambda mu over the pairs or 0) of the
    training labels ``y`` in queries ``qp`` (offsets from 0); the sum only for the smooth hinge,
    whose eta=auto needs it."""
    from streamrank._native import pairkernels as pk
    levels = np.unique(y)
    mu = query_weights(query_weight, y, qp)
    cost = pk.pair_cost(pair_cost_table(pair_cost, levels))
    weight_sum = pair_weight_sum(np.searchsorted(levels, y), qp, cost.lam, mu) if loss == "smooth_hinge" else 0.0
    return levels, mu, cost, weight_sum


@dataclass(frozen=True, eq=False)
class Problem:
    """A training run's data as its path needs them, prepared once.

    ``ds``, ``valid``: the (feature-selected) training and validation data; ``queries``: the
    training range (q0, q1); ``levels``: the training labels' distinct values; ``mu``: the query
    weights the objective takes (indexed as its queries are); ``cost``: lambda per label-rank pair;
    ``loss`` and ``eta`` as checked (:func:`check_loss`); ``weight_sum``: sum of lambda mu over the
    pairs (smooth hinge only); ``normalizer``: fitted; ``valid_y``: the validation labels or None;
    ``executor``: what runs the passes."""

    ds: object
    valid: object
    queries: tuple
    levels: np.ndarray
    mu: np.ndarray
    cost: object
    loss: str
    eta: object
    weight_sum: float
    normalizer: object
    valid_y: object
    executor: object

    @property
    def n_queries(self):
        return self.queries[1] - self.queries[0]

    def point_cost(self, C):
        """The costs with the loss of point C (the smooth hinge's eta may depend on C)."""
        from streamrank._native import pairkernels as pk
        return pk.pair_cost(self.cost, eta=eta_for(self.loss, self.eta, C, self.weight_sum))

    def point_info(self, C):
        """What a candidate of point C records beside the path's entries: the smooth hinge's eta."""
        return {"eta": self.point_cost(C).eta} if self.loss == "smooth_hinge" else {}
