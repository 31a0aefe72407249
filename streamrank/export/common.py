"""What every export format needs from a model: its input columns and their names, the model as
one linear function of the raw input features (for the formats that hold only weights), its
settings and a content digest.

A streamrank model scores s(x) = phi(normalize(x[cols])) . w (:mod:`streamrank.state.model`). Rows
given to an exported model are the raw rows the model reads: ``input_columns`` features (the
training data's width; for a model trained on ``--features``, the full rows it picks them from).
"""

import json
import unicodedata

import numpy as np

from streamrank.errors import InputError, ParameterError

# the formats that hold one weight per input feature and nothing else
LINEAR_FORMATS = ("solr", "elasticsearch", "svmrank", "liblinear")


def input_width(model):
    """Features of the raw rows an exported model takes (the model's ``input_columns``)."""
    return int(model.input_columns)


def kind(model):
    """The model's kind as the formats name it: primal, nystroem, rff, exact or clsr."""
    method = model.method
    return {"basis": "clsr"}.get(method, method)


def map_kernel(model):
    """(kernel, gamma, degree, coef0) of the model's kernel map, or None for a linear model."""
    fmap = model.fmap
    if fmap is None:
        return None
    return fmap.kernel, float(fmap.gamma_), int(getattr(fmap, "degree", 3)), float(getattr(fmap, "coef0", 1.0))


def linear_weights(model, fmt, *, fold_zscore=True):
    """(v, c): the model as s(x) = x . v + c over raw input rows x of :func:`input_width` features
    (float64), equal to the model's scores in exact arithmetic. With ``fold_zscore=False`` a zscore
    model's v weighs the normalised columns instead, (x_j - mean_j) / scale_j, and c is 0 (for a
    format with a normaliser of its own: Elasticsearch's ``standard``).

    - the subset of columns a ``--features`` model reads is scattered into the full width (the
      other features get weight 0);
    - zscore is folded: (x - mu) / sigma . w = x . (w / sigma) - mu . (w / sigma);
    - a kernel map with the linear kernel is linear too: Nystroem phi(x) = x L^T P (so v = L^T P w),
      exact kernel and CLSRRank phi(x) = x S^T (v = S^T beta; the exact kernel's float32 rounding
      of K is not in v, a difference of a few float32 ulps of each term).

    Refused, with what to use instead: query_minmax (per-query scaling is not a weight), and every
    map that is not linear in x (rbf, laplacian, poly, sigmoid, random Fourier features)."""
    name = f"format={fmt}"
    norm = model.normalizer
    if norm.kind == "query_minmax":
        raise ParameterError(f"{name} cannot express normalize=query_minmax: it scales each feature by its range "
                             f"within the query, which a weight per feature cannot hold; use format=onnx (its graph "
                             f"takes the query id per row), or retrain with normalize=zscore")
    fmap = model.fmap
    w = np.asarray(model.w, np.float64)
    if fmap is None:
        v = w.copy()
    else:
        k = map_kernel(model)
        if k is None or k[0] != "linear" or model.method == "rff":
            article = "an" if k is not None and k[0] in ("rbf",) else "a"
            what = "random Fourier features" if model.method == "rff" else f"{article} {k[0]} kernel ({kind(model)})"
            raise ParameterError(f"{name} holds one weight per feature, and this model is not linear in its features "
                                 f"({what}); use format=onnx, which holds the kernel map, or format=json")
        if model.method == "nystroem":
            v = fmap.landmarks_.T @ (fmap.projection_ @ w)
        else:
            rows = fmap.support_ if model.method == "exact" else fmap.basis_
            v = rows.T @ w
    c = 0.0
    if norm.kind == "zscore" and fold_zscore:
        v = v / norm.scale_[:v.size]
        c = -float(norm.mean_[:v.size] @ v)
    if model.input_features is not None:
        full = np.zeros(input_width(model))
        np.add.at(full, model.input_features, v)  # a column listed twice gets both weights
        v = full
    if not np.all(np.isfinite(v)):
        raise ParameterError(f"{name}: the model's weights are not finite once normalisation is folded into them "
                             f"(a feature's standard deviation underflows); use format=onnx")
    return v, c


def feature_names(model, names=None, *, source="feature_names"):
    """The names of the input features: ``names`` (a list, or the path of a file with one name per
    line) or f1..fd (SVMlight's feature ids). Each name must be non-empty, unique, and without
    surrounding spaces; the list must name every input feature."""
    d = input_width(model)
    if names is None:
        return [f"f{j}" for j in range(1, d + 1)]
    where = source
    if isinstance(names, (str, bytes)) or hasattr(names, "__fspath__"):
        from streamrank.io.urls import read_bytes, shown
        where = shown(names if isinstance(names, str) else names.decode() if isinstance(names, bytes) else str(names))
        try:
            text = read_bytes(names).decode("utf-8-sig")  # a leading byte-order mark (Notepad) is not a name
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{where}: cannot read the feature names ({exc}); give a UTF-8 text file with one "
                             f"name per line") from None
        # lines end at \n (or \r\n) only: str.splitlines would also end them at \x1c-\x1e, \x85 and
        # \u2028, splitting a name the user sees as one
        lines = text.replace("\r\n", "\n").split("\n")
        names = lines[:max((k + 1 for k, line in enumerate(lines) if line.strip()), default=0)]  # no trailing blanks
    names = list(names)
    if len(names) != d:
        raise InputError(f"{where}: {len(names)} feature names for a model that reads {d} features; give one name "
                         f"per feature, in order (line j names feature j)")
    seen = {}
    for j, n in enumerate(names, 1):
        if not isinstance(n, str) or not n.strip() or n != n.strip():
            raise InputError(f"{where}: name {j} is {n!r}; a feature name must be non-empty text without "
                             f"surrounding spaces")
        if "\ufeff" in n:
            raise InputError(f"{where}: name {j} is {n!r}, which holds a byte-order mark (U+FEFF, from text saved "
                             f"as UTF-8 with BOM and read as UTF-8); drop it (read the file as utf-8-sig)")
        if any(unicodedata.category(ch) == "Cc" for ch in n):
            raise InputError(f"{where}: name {j} is {n!r}, which holds a control character; a feature name must be "
                             f"printable text (the formats put names in JSON keys, URLs and text lines)")
        if n in seen:
            raise InputError(f"{where}: name {n!r} is given to features {seen[n]} and {j}; names must be unique")
        seen[n] = j
    return names


def model_digest(model):
    """sha256 of the model's content: its file's ``content_sha256`` when it was loaded from a file,
    otherwise the digest the file would carry (computed on an in-memory HDF5 image)."""
    digest = getattr(model, "content_sha256", None)
    if digest:
        return str(digest)
    return model.content_digest()


def settings(model):
    """JSON-able settings of the model: method, input width, normalisation, the map's parameters
    and the training configuration."""
    out = {"method": kind(model), "n_features": input_width(model), "normalize": model.normalizer.kind,
           "config": model.config}
    if model.fmap is not None:
        out["map"] = {k: v for k, v in model.fmap.params().items() if k != "sha256"}
    if model.input_features is not None:
        out["input_features"] = [int(c) + 1 for c in model.input_features]
    return out


def layout(obj, indent=0, width=100, depth=None):
    """Strict JSON (no NaN or infinity, which JSON lacks) for people to read: an object or array on
    one line when it fits in ``width`` characters, else one member per line, recursively; below
    ``depth`` levels of members every value stays on one line (a model's arrays)."""
    flat = json.dumps(obj, allow_nan=False, separators=(", ", ": "))
    if not isinstance(obj, (dict, list)) or not obj or depth == 0 or (indent and indent + len(flat) <= width):
        return flat
    pad, deeper = " " * (indent + 2), None if depth is None else depth - 1
    if isinstance(obj, dict):
        members = [f"{pad}{json.dumps(str(k))}: {layout(v, indent + 2, width, deeper)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(members) + "\n" + " " * indent + "}"
    return "[\n" + ",\n".join(pad + layout(v, indent + 2, width, deeper) for v in obj) + "\n" + " " * indent + "]"


def finite_json(obj):
    """``obj`` (a dict) as strict JSON: one top-level key per line, each value on one line (a
    model's arrays stay one line each rather than one number per line)."""
    return layout(obj, depth=1) + "\n"
