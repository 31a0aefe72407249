"""The scoring function of exact kernel RankSVM as a feature map: phi(x) = K(x, S), w = beta_S.

A model trained over beta (paper 004 eq. 2.9, 3.13) scores s(x) = sum_i beta_i K(x_i, x) over the
training rows x_i with beta_i != 0 (the support rows S). That is a linear model over the empirical
kernel map phi(x) = K(x, S) with weights beta_S, so the model file is the ordinary
``streamrank-model`` (version 1) with ``method = "exact"``: ``w`` holds beta_S, and the
``feature_map`` group (kind ``exact``) holds S as normalised float64 model inputs (normalisation
may depend on the training query, so raw rows would not do), the kernel and its parameters.

Kernel values are rounded to float32 as the training matrix Q was, and summed in float64 with
``_qprod``'s fixed order, in chunks of rows: prediction streams the support rows against the input
in blocks of at most :data:`SCORE_CHUNK_BYTES` of kernel values (or one transform tile, if more).
A row's kernel values come from its tile by row index (``row0``, see :mod:`streamrank.features.kernels`),
so its score does not depend on the chunks or blocks either.
"""

import numpy as np

from streamrank.features.kernels import PreparedKernel, check_psd_kernel
from streamrank.features.maps import FeatureMap

# float32 kernel values K(x, S) held at a time while scoring
SCORE_CHUNK_BYTES = 32 << 20


class ExactKernelMap(FeatureMap):
    """phi(x) = float32(K(x, S)) for the support rows S (normalised model inputs)."""

    kind = "exact"
    scores_in_chunks = True

    def __init__(self, support=None, kernel="rbf", gamma=None, degree=3, coef0=1.0):
        super().__init__()
        self.kernel, self.gamma_, self.degree, self.coef0 = kernel, gamma, degree, coef0
        self.support_ = None
        self._prep = None
        if support is not None:
            self._set_support(np.asarray(support, np.float64))

    def _set_support(self, S):
        self.kernel, self.gamma_, self.degree, self.coef0 = check_psd_kernel(
            self.kernel, self.gamma_, self.degree, self.coef0, S.shape[1])
        self.support_ = np.ascontiguousarray(S, np.float64)
        self.n_features_ = S.shape[1]
        self.n_components_ = S.shape[0]
        self._prep = None

    # -- FeatureMap hooks ----------------------------------------------------------------------
    def _arrays(self):
        return {"support": self.support_}

    def _array_names(self):
        return ("support",)

    def _config(self):
        return {"kernel": self.kernel, "gamma": self.gamma_, "degree": int(self.degree), "coef0": float(self.coef0)}

    def _map_tile(self, Xt, bufs, p, dest):
        if self._prep is None:
            self._prep = PreparedKernel(self.support_, self.kernel, self.gamma_, self.degree, self.coef0)
        self._prep.into(Xt, bufs[0])
        with np.errstate(over="ignore"):  # a value past float32's range is inf: the score writer refuses it
            dest[...] = bufs[0][p:p + len(dest)]

    @classmethod
    def _from_params(cls, p):
        return cls(None, p["kernel"], p["gamma"], p["degree"], p["coef0"])

    def _set_arrays(self, p, arrays):
        self._set_support(arrays["support"])

    # -- scoring ---------------------------------------------------------------------------------
    def scores(self, Xn, w, row0=0):
        """sum_i w_i float32(K(x, s_i)) for the rows of Xn, in chunks (``FeatureMap.chunked_scores``,
        read-only float32 like the blocks of Q in training); ``row0`` is the index of Xn's first row
        in its dataset (see ``transform``)."""
        return self.chunked_scores(Xn, w, row0, np.float32, SCORE_CHUNK_BYTES, read_only=True)
