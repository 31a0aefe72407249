"""``json``: every model kind as plain JSON, for anyone who writes their own scorer (docs/formats.md).

The file (format ``streamrank-model-json``, version 2) holds everything between a raw row and its
score, in the order a scorer applies it. For a raw row x of ``n_features`` values:

1. ``input_features`` (1-based, or null): the columns the model reads, in order: x <- x[cols];
2. ``normalize``: ``none``; ``zscore``: x_j <- (x_j - mean_j) * (1 / scale_j); ``query_minmax``:
   per query, x_j <- (x_j - min_j) * (1 / (max_j - min_j)), 0 when max_j = min_j (LETOR's
   QueryLevelNorm; the rows of one query are needed together);
3. ``map`` (phi): ``identity``; ``nystroem``: K(x, landmarks) @ projection (paper 000 eq. 18), whose
   score the map also gives without phi: K(x, landmarks) . landmark_weights (= projection @
   weights), as streamrank scores it;
   ``rff``: sqrt(2 / m) cos(x @ omega + offset) (paper 000 eq. 21); ``exact``: K(x, support)
   (paper 004); ``basis``: K(x, basis) (CLSRRank, paper 002 theorem 1). The kernels:
   rbf exp(-gamma ||x - y||^2), laplacian exp(-gamma ||x - y||_1), poly (gamma x.y + coef0)^degree,
   sigmoid tanh(gamma x.y + coef0), linear x.y. ``round_to_float32``: streamrank rounds phi to
   float32 before the weights (rff, exact), as training saw it;
4. the score: phi . weights, in float64.

Every number is a float64 written so that it reads back to the same bits (Python's repr).

Version 1 (the files written before version 2) scored a nystroem map as float32(K(x, landmarks) @ projection) .
weights (its ``round_to_float32`` was true, and it had no ``landmark_weights``); version 2 scores
it in float64 throughout, within float32 rounding of version 1's score.
"""

import math

import numpy as np

from streamrank._version import __version__
from streamrank.export.common import finite_json, input_width, kind, model_digest, settings

JSON_FORMAT = "streamrank-model-json"
JSON_VERSION = 2


def _arr(a):
    return np.asarray(a, np.float64).tolist()


def describe(model, names):
    """The model as a JSON-able dict (the module docstring's layout)."""
    norm = model.normalizer
    normalize = {"kind": norm.kind}
    if norm.kind == "zscore":
        normalize.update(mean=_arr(norm.mean_), scale=_arr(norm.scale_))
    fmap = model.fmap
    if fmap is None:
        fm = {"kind": "identity"}
    else:
        fm = {"kind": fmap.kind, "kernel": getattr(fmap, "kernel", None), "gamma": float(fmap.gamma_)}
        if fmap.kind in ("nystroem", "exact", "basis"):
            fm.update(degree=int(fmap.degree), coef0=float(fmap.coef0))
        if fmap.kind == "nystroem":
            fm.update(landmarks=_arr(fmap.landmarks_), projection=_arr(fmap.projection_),
                      landmark_weights=_arr(fmap.landmark_weights(model.w)))
        elif fmap.kind == "rff":
            fm.update(omega=_arr(fmap.omega_), offset=_arr(fmap.offset_),
                      scale=math.sqrt(2.0 / fmap.n_components_))
        elif fmap.kind == "exact":
            fm.update(support=_arr(fmap.support_))
        else:
            fm.update(basis=_arr(fmap.basis_))
        fm["round_to_float32"] = fmap.kind in ("rff", "exact")
    return {
        "format": JSON_FORMAT, "version": JSON_VERSION, "producer": f"streamrank {__version__}",
        "source_sha256": model_digest(model), "method": kind(model), "n_features": input_width(model),
        "feature_names": list(names),
        "input_features": None if model.input_features is None else [int(c) + 1 for c in model.input_features],
        "normalize": normalize, "map": fm, "weights": _arr(model.w), "settings": settings(model),
    }


def to_json(model, *, names, name):
    d = describe(model, names)
    d = {"name": name, **d}
    return finite_json(d)
