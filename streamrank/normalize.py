"""Feature normalisation: ``none``, ``zscore`` (statistics from one streamed pass) and
``query_minmax`` (LETOR's QueryLevelNorm, computed per query at training and prediction alike).

Every transform returns float64 rows: the solver works in float64 whatever is stored.
"""

import numba
import numpy as np

from .errors import ParameterError

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
                                 f"Pass --normalize zscore")
        self.kind = kind
        self.mean_ = None
        self.scale_ = None

    @property
    def needs_queries(self):
        return self.kind == "query_minmax"

    def fit(self, blocks, n_features):
        """``blocks``: iterable of float32 row blocks (one streamed pass)."""
        if self.kind != "zscore":
            return self
        n, mean, m2 = 0, np.zeros(n_features), np.zeros(n_features)
        for X in blocks:
            n = _welford_rows(np.ascontiguousarray(X), n, mean, m2)
        std = np.sqrt(m2 / max(n, 1))  # population std, as scikit-learn's StandardScaler
        self.mean_ = mean
        self.scale_ = np.where(std > 0, std, 1.0)
        return self

    def transform(self, X, query_ptr=None):
        """float64 copy of ``X`` normalised; ``query_ptr`` (local offsets) for ``query_minmax``."""
        Xd = np.asarray(X, dtype=np.float64)
        if self.kind == "none":
            return Xd if Xd is not X else Xd.copy()
        if self.kind == "zscore":
            d = min(Xd.shape[1], self.mean_.shape[0])
            return (Xd - self.mean_[:d]) / self.scale_[:d]
        if query_ptr is None:
            raise ParameterError("normalize=query_minmax needs query ids at prediction time; pass qid")
        out = np.empty_like(Xd)
        starts = np.asarray(query_ptr[:-1])
        sizes = np.diff(query_ptr)
        if Xd.shape[0] == 0:
            return out
        lo = np.minimum.reduceat(Xd, starts, axis=0)
        hi = np.maximum.reduceat(Xd, starts, axis=0)
        span = hi - lo
        # LETOR QueryLevelNorm: (x - min) / (max - min) within the query; a feature constant within
        # the query becomes 0 (infinite span)
        span[span == 0] = np.inf
        np.subtract(Xd, np.repeat(lo, sizes, axis=0), out=out)
        out /= np.repeat(span, sizes, axis=0)
        return out

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
