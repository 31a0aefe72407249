"""What a loaded model must hold before it scores anything, in every model file version (version
1 carries no digest, and a digest only proves that the bytes are what some writer wrote):

- every array and kernel parameter finite;
- every divisor positive: a zscore scale (the rows are multiplied by 1 / scale, which must be
  finite too), Nystroem's eigenvalues;
- shapes that agree with the model's width and with each other;
- scores that stay finite for every row of finite float32 values: :func:`score_bound` bounds
  |s(x)| over all such rows, and it must stay below :data:`SCORE_LIMIT`.

One exception is left to the scorer: Nystroem and the exact kernel round their kernel values
(or map output) to float32, as training did. With the poly or linear kernel, whose values grow
with the row, a row of values near float32's largest can pass float32's range there, although
the model is sound on its training rows (a degree-3 poly model on zscored rows bounds its kernel
values by about 1e129 at such rows). Refusing those models would refuse what train writes, so
the bound is float64's; such a row's non-finite score is refused where scores are written
(``evaluation.score_files.write_scores``), and the poly kernel's own overflow in float64 by the
kernel (``PreparedKernel``).

:func:`check_model` raises :class:`~streamrank.errors.FormatError` naming the file, what is wrong
and the fix; ``state.model.load`` calls it, so predict and every export read only models that pass.
"""

import math

import numpy as np

from streamrank.errors import FormatError

FLT_MAX = float(np.finfo(np.float32).max)
DBL_MAX = float(np.finfo(np.float64).max)
# the bound is computed in float64 from the arrays' magnitudes; the scoring code sums the same
# terms in other orders, each partial sum within (1 + n eps) of its exact value (n << 2^40), so a
# bound 16 times below float64's largest value leaves every rounded partial sum finite
SCORE_LIMIT = DBL_MAX / 16
# rows of a map's basis (support rows, landmarks) taken at a time: |R| of a block is its one temporary
_ROW_BLOCK = 4096


def _refuse(path, what):
    return FormatError(f"{path}: {what}; the model cannot score. Train the model again")


def _arrays(model):
    """(name, array) of every float array the scores use."""
    out = [("w", model.w)]
    norm = model.normalizer
    if norm.kind == "zscore":
        out += [("normalize/mean", norm.mean_), ("normalize/scale", norm.scale_)]
    if model.fmap is not None:
        out += [(f"feature_map/{k}", v) for k, v in model.fmap._arrays().items()]
    return out


def _check_finite(model, path):
    for name, a in _arrays(model):
        a = np.asarray(a)
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            i = int(np.flatnonzero(~np.isfinite(a.reshape(-1)))[0])
            raise _refuse(path, f"/{name} holds {float(a.reshape(-1)[i])!r} at index {i} (every value must be finite)")
    fmap = model.fmap
    for p in ("gamma_", "coef0", "degree"):
        v = getattr(fmap, p, None)
        if v is not None and not (isinstance(v, (int, float, np.number)) and math.isfinite(float(v))):
            raise _refuse(path, f"the feature map's {p.rstrip('_')} is {v!r} (it must be a finite number)")


def _check_shapes(model, path):
    d, norm, fmap = model.n_features, model.normalizer, model.fmap
    want = {}
    if norm.kind == "zscore":
        want.update({"normalize/mean": (d,), "normalize/scale": (d,)})
    if fmap is not None and fmap.kind == "nystroem":
        m, k = fmap.landmarks_.shape[0], fmap.projection_.shape[1]
        want.update({"feature_map/landmarks": (m, d), "feature_map/projection": (m, k),
                     "feature_map/eigenvalues": (k,), "feature_map/landmark_rows": (m,)})
    elif fmap is not None and fmap.kind == "rff":
        want.update({"feature_map/omega": (d, model.w.size), "feature_map/b": (model.w.size,)})
    elif fmap is not None and fmap.kind == "exact":
        want["feature_map/support"] = (model.w.size, d)
    elif fmap is not None and fmap.kind == "basis":
        want.update({"feature_map/basis": (model.w.size, d), "feature_map/basis_rows": (model.w.size,)})
    for name, a in _arrays(model):
        if name in want and np.shape(a) != want[name]:
            raise _refuse(path, f"/{name} has shape {np.shape(a)}, where the model's {d} features and "
                                f"{model.w.size} weights need {want[name]}")


def _check_divisors(model, path):
    norm, fmap = model.normalizer, model.fmap
    if norm.kind == "zscore":
        with np.errstate(divide="ignore", over="ignore"):
            bad = ~((norm.scale_ > 0) & np.isfinite(1.0 / norm.scale_))
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise _refuse(path, f"/normalize/scale of feature {j + 1} is {float(norm.scale_[j])!r} "
                                f"(rows are divided by it: it must be positive, with a finite reciprocal)")
    if fmap is not None and fmap.kind == "nystroem" and not (fmap.eigenvalues_ > 0).all():
        j = int(np.flatnonzero(~(fmap.eigenvalues_ > 0))[0])
        raise _refuse(path, f"/feature_map/eigenvalues[{j}] is {float(fmap.eigenvalues_[j])!r} "
                            f"(Nystroem divides by the square roots of its kept eigenvalues: each must be positive)")
    if fmap is not None and getattr(fmap, "kernel", None) in ("rbf", "laplacian") and not fmap.gamma_ > 0:
        raise _refuse(path, f"the {fmap.kernel} kernel's gamma is {fmap.gamma_!r} (it must be positive)")


def input_bounds(model):
    """B (float64 (n_features,)): |x_j| <= B_j for every model input x = normalize(row), over all
    rows of finite float32 values (inf where no finite bound exists in float64).

    none: |x_j| <= FLT_MAX. zscore: x_j = (r_j - mean_j) * (1 / scale_j), so |x_j| <= (FLT_MAX +
    |mean_j|) / scale_j. query_minmax: (r_j - min) / (max - min) within the query lies in [0, 1]."""
    d, norm = model.n_features, model.normalizer
    if norm.kind == "zscore":
        with np.errstate(over="ignore", divide="ignore"):
            return (FLT_MAX + np.abs(norm.mean_)) * (1.0 / norm.scale_)
    return np.full(d, 1.0 if norm.kind == "query_minmax" else FLT_MAX)


def _kernel_bounds(fmap, rows, B):
    """(K, inner): per basis row r, K >= |k(x, r)| and inner >= the largest intermediate the kernel
    computes, over all inputs with |x_j| <= B_j. rbf: ||x||^2 - 2 x.r + ||r||^2 <= sum (B + |r|)^2,
    then exp(-gamma .) in [0, 1]; laplacian: sum |x - r| <= sum (B + |r|), exp in [0, 1]; linear:
    |x.r| <= |r|.B; poly: (gamma |r|.B + |coef0|)^degree; sigmoid: tanh of gamma x.r + coef0, in
    [-1, 1] once x.r is finite."""
    K, inner = np.empty(rows.shape[0]), np.empty(rows.shape[0])
    with np.errstate(over="ignore", invalid="ignore"):
        for a in range(0, rows.shape[0], _ROW_BLOCK):
            R = np.abs(rows[a:a + _ROW_BLOCK])
            dot = R @ B
            if fmap.kernel == "rbf":
                inner[a:a + len(R)] = ((B + R) ** 2).sum(axis=1)
                K[a:a + len(R)] = 1.0
            elif fmap.kernel == "laplacian":
                inner[a:a + len(R)] = (B + R).sum(axis=1)
                K[a:a + len(R)] = 1.0
            elif fmap.kernel == "poly":
                inner[a:a + len(R)] = dot
                K[a:a + len(R)] = (abs(fmap.gamma_) * dot + abs(fmap.coef0)) ** int(fmap.degree)
            elif fmap.kernel == "sigmoid":
                inner[a:a + len(R)] = dot
                K[a:a + len(R)] = 1.0
            else:  # linear
                inner[a:a + len(R)] = dot
                K[a:a + len(R)] = dot
    return K, inner


def score_bound(model):
    """(bound, inner): |s(x)| <= bound for every row x of finite float32 values, and inner >= every
    intermediate the map computes on the way (a kernel's distances or products, RFF's arguments of
    cos); either is inf or nan when float64 cannot bound it.

    s(x) = sum_j w_j phi_j(x) <= sum_j |w_j| Phi_j with |phi_j| <= Phi_j: identity Phi = B
    (:func:`input_bounds`); random Fourier features sqrt(2/m) |cos| <= sqrt(2/m), the argument
    |x . omega_j + b_j| <= |omega_j| . B + |b_j|; Nystroem phi = k(x, L) P, Phi = K |P| with K the
    kernel's bound per landmark (:func:`_kernel_bounds`), rounded to float32; the exact kernel's and
    CLSRRank's phi = k(x, S), Phi = K (the exact kernel rounds K to float32)."""
    B, fmap = input_bounds(model), model.fmap
    w = np.abs(np.asarray(model.w, np.float64))
    inner = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        if fmap is None:
            Phi = B
        elif fmap.kind == "rff":
            inner = float(np.max(np.abs(fmap.omega_).T @ B + np.abs(fmap.offset_), initial=0.0))
            Phi = np.full(w.size, math.sqrt(2.0 / max(w.size, 1)))
        else:
            rows = {"nystroem": "landmarks_", "exact": "support_", "basis": "basis_"}[fmap.kind]
            K, kin = _kernel_bounds(fmap, getattr(fmap, rows), B)
            Phi = K @ np.abs(fmap.projection_) if fmap.kind == "nystroem" else K
            inner = max(float(np.max(kin, initial=0.0)), float(np.max(K, initial=0.0)))
        bound = float(w @ Phi) if w.size else 0.0
    return bound, inner


def check_model(model, path):
    """Refuse (:class:`FormatError`, naming ``path``, the array and the fix) a model that could
    score NaN or an infinity on finite rows (module docstring)."""
    _check_finite(model, path)
    _check_shapes(model, path)
    _check_divisors(model, path)
    bound, inner = score_bound(model)
    if not (bound <= SCORE_LIMIT and inner <= SCORE_LIMIT):
        where = f"score up to {bound:.3g}" if inner <= SCORE_LIMIT else f"overflow inside its {model.method} map"
        raise _refuse(path, f"its scores are not finite for every finite input: rows of float32 values could {where}, "
                            f"beyond float64's {DBL_MAX:.3g} (|w| up to {float(np.abs(model.w).max(initial=0)):.3g}"
                            f"{_scale_note(model)})")


def _scale_note(model):
    norm = model.normalizer
    if norm.kind != "zscore" or norm.scale_.size == 0:
        return ""
    return f", zscore scales down to {float(norm.scale_.min()):.3g}"
