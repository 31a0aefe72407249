"""Feature normalisation: ``none``, ``zscore`` (statistics from one streamed pass) and
``query_minmax`` (LETOR's QueryLevelNorm, computed per query at training and prediction alike).

Every transform returns float64 rows: the solver works in float64 whatever is stored.
"""

import numba
import numpy as np

from streamrank._native import numba_cache
from streamrank.errors import ParameterError
from streamrank.execution.executor import Pass, executor_or_local

KINDS = ("none", "zscore", "query_minmax")


@numba.njit(cache=True, nogil=True)
def _welford_rows(X, count, mean, m2):
    """Welford's update, one row at a time in row order: the statistics (to the last bit) do
    not depend on how the rows were split into blocks, and there is no cancellation of a
    sum of squares. Returns the new count."""
    d = mean.shape[0]
    for i in range(X.shape[0]):
        count += 1
        inv = 1.0 / count
        for k in range(d):
            x = np.float64(X[i, k])
            delta = x - mean[k]
            mean[k] += delta * inv
            m2[k] += delta * (x - mean[k])
    return count


class _Moments(Pass):
    """Count, mean and sum of squared deviations of the rows (Welford within a partition)."""

    def __init__(self, n_features):
        self.d = n_features

    def start(self):
        return [0, np.zeros(self.d), np.zeros(self.d)]

    def step(self, carry, item):
        X = item if isinstance(item, np.ndarray) else item[0].X
        carry[0] = _welford_rows(np.ascontiguousarray(X), carry[0], carry[1], carry[2])

    def merge(self, total, carry):
        """Chan, Golub and LeVeque's pairwise update of (n, mean, M2)."""
        (na, ma, sa), (nb, mb, sb) = total, carry
        n = na + nb
        if n == 0:
            return [0, ma.copy(), sa.copy()]
        delta = mb - ma
        return [n, ma + delta * (nb / n), sa + sb + delta * delta * (na * nb / n)]


class _NormalisedMoments(_Moments):
    """:class:`_Moments` of the rows as ``normalizer`` maps them (per query for query_minmax: the
    stream's blocks hold whole queries)."""

    def __init__(self, n_features, normalizer):
        super().__init__(n_features)
        self.normalizer = normalizer

    def step(self, carry, item):
        block = item[0]
        X = self.normalizer.transform(block.X, block.query_ptr)
        carry[0] = _welford_rows(np.ascontiguousarray(X), carry[0], carry[1], carry[2])


def value_variance(count, mean, m2):
    """Var X over all n d values of the rows (numpy's ``X.var()``, scikit-learn's gamma='scale')
    from per-column moments (n, mean_k, M2_k = n var_k): by the law of total variance, the mean of
    the columns' variances plus the variance of their means (population variances, ddof = 0)."""
    if count == 0 or len(mean) == 0:
        return 0.0
    return float(np.mean(m2) / count + np.var(mean))


class Normalizer:
    """Maps a block of raw float32 rows to float64 model inputs.

    Attributes
    ----------
    kind : str
    mean_, scale_ : float64 arrays (n_features,) for ``zscore``; a constant feature keeps
        scale 1 (it maps to 0 instead of dividing by zero).
    """

    def __init__(self, kind="none"):
        if kind not in KINDS:
            raise ParameterError(f"normalize must be one of {', '.join(KINDS)}; got {kind!r}. "
                                 f"Use normalize=zscore")
        self.kind = kind
        self.mean_ = None
        self.scale_ = None
        self.moments_ = None  # (rows, column means, column M2) of the raw rows, once fit (zscore)

    @property
    def needs_queries(self):
        return self.kind == "query_minmax"

    def fit(self, blocks, n_features, executor=None):
        """``blocks``: one streamed pass, as a dataset stream (items (block, start, stop)) or an
        iterable of float32 row arrays; run through ``executor`` (None: in this process)."""
        if self.kind != "zscore":
            return self
        carry, _ = executor_or_local(executor).run(_Moments(n_features), blocks)
        n, mean, m2 = carry
        std = np.sqrt(m2 / max(n, 1))  # population std, as scikit-learn's StandardScaler
        self.mean_ = mean
        self.scale_ = np.where(std > 0, std, 1.0)
        self.moments_ = (n, mean, m2)
        return self

    def value_variance(self, stream=None, executor=None):
        """Var X of every value of the training rows as this normaliser maps them (the kernel's
        view, for gamma='scale' = 1 / (d Var X)). ``zscore``: from the moments :meth:`fit`
        accumulated (no pass: column k maps to mean (mu_k - mean_k) / scale_k, variance
        var_k / scale_k^2, i.e. 0 and 1, or 0 and 0 for a constant column); ``none`` and
        ``query_minmax``: one pass over ``stream`` (a dataset stream of the training rows, as
        ``fit`` takes), Welford's moments of the mapped rows."""
        if self.kind == "zscore":
            if getattr(self, "moments_", None) is None:
                raise ValueError("value_variance of a zscore normaliser needs fit() first (its moments)")
            n, mean, m2 = self.moments_
            if n == 0:
                return 0.0
            return value_variance(n, (mean - self.mean_) / self.scale_, m2 / self.scale_ ** 2)
        if stream is None:
            raise ValueError(f"value_variance of normalize={self.kind} reads the rows: pass the training stream")
        d = stream.dataset.n_features
        pass_ = _Moments(d) if self.kind == "none" else _NormalisedMoments(d, self)
        (n, mean, m2), _ = executor_or_local(executor).run(pass_, stream)
        return value_variance(n, mean, m2)

    AFFINE_NONE, AFFINE_GLOBAL, AFFINE_PER_QUERY = 0, 1, 2

    def affine(self, X, query_ptr=None):
        """(shift, scale, mode): Phi = (X - shift) * scale, with one row of (shift, scale) for
        all rows (mode 1), one per query (mode 2), or the identity (mode 0). The fused kernels
        apply this on the fly; :meth:`transform` materialises it with the same arithmetic."""
        d = X.shape[1]
        if self.kind == "none":
            return np.zeros((1, d)), np.ones((1, d)), self.AFFINE_NONE
        if self.kind == "zscore":
            return self.mean_[None, :d].copy(), (1.0 / self.scale_[None, :d]), self.AFFINE_GLOBAL
        if query_ptr is None:
            raise ParameterError("normalize=query_minmax needs query ids at prediction time; pass qid")
        starts = np.asarray(query_ptr[:-1])
        if X.shape[0] == 0:
            return np.zeros((0, d)), np.zeros((0, d)), self.AFFINE_PER_QUERY
        # empty queries (a start equal to the next one) have no rows to reduce: reduceat would
        # read past the end or take the next query's first row; they get (0, 0), which no row uses
        sizes = np.diff(np.asarray(query_ptr))
        lo, hi = np.zeros((len(starts), d)), np.zeros((len(starts), d))
        full = sizes > 0
        lo[full] = np.minimum.reduceat(X, starts[full], axis=0)
        hi[full] = np.maximum.reduceat(X, starts[full], axis=0)
        # LETOR QueryLevelNorm: (x - min) / (max - min) within the query, as a product with the
        # reciprocal; a feature constant within the query becomes 0 (reciprocal of an infinite span)
        span = hi - lo
        span[span == 0] = np.inf
        return lo, 1.0 / span, self.AFFINE_PER_QUERY

    def transform(self, X, query_ptr=None):
        """float64 normalised copy of ``X``; ``query_ptr`` (local offsets) for ``query_minmax``."""
        Xd = np.array(X, dtype=np.float64)
        shift, scale, mode = self.affine(X, query_ptr)
        if mode == self.AFFINE_NONE:
            return Xd
        if mode == self.AFFINE_PER_QUERY:
            sizes = np.diff(query_ptr)
            shift, scale = np.repeat(shift, sizes, axis=0), np.repeat(scale, sizes, axis=0)
        Xd -= shift
        Xd *= scale
        return Xd

    def to_h5(self, group):
        group.attrs["kind"] = self.kind
        if self.kind == "zscore":
            group.create_dataset("mean", data=self.mean_)
            group.create_dataset("scale", data=self.scale_)

    @classmethod
    def from_h5(cls, group):
        n = cls(str(group.attrs["kind"]))
        if n.kind == "zscore":
            n.mean_ = group["mean"][:]
            n.scale_ = group["scale"][:]
        return n


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
