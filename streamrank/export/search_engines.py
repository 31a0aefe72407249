"""``solr`` and ``elasticsearch``: the search engines' learning-to-rank plugins' linear models
(docs/formats.md). Both hold one weight per named feature, so both take only models that are
linear in the raw features (:func:`streamrank.export.common.linear_weights` refuses the others).

``solr``: Apache Solr's ``org.apache.solr.ltr.model.LinearModel``, the JSON that
``PUT /solr/<collection>/schema/model-store`` uploads (Solr Reference Guide, "Learning To Rank",
https://solr.apache.org/guide/solr/latest/query-guide/learning-to-rank.html; the class's javadoc).
Score = sum_j weight_j * feature_j. A zscore model's normalisation is folded into the weights,
(x_j - mu_j) / sigma_j . w = x . (w / sigma) - mu . (w / sigma), with no ``norm`` entries; the
constant mu . (w / sigma) is dropped (it does not change the order of a query's documents), and the
model's ``name`` says so (NAME_zscore_folded_bias_dropped).

``elasticsearch``: the Elasticsearch / OpenSearch learning-to-rank plugin's ``model/linear``, as the
body of ``POST _ltr/_featureset/<featureset>/_createmodel`` ("Uploading a trained model",
https://elasticsearch-learning-to-rank.readthedocs.io/en/latest/training-models.html and
https://opensearch.org/docs/latest/search-plugins/ltr/training-models/): ``definition`` is the
string of a JSON object {feature: weight}; zscore is the plugin's own ``standard`` feature
normaliser, value -> (value - mean) / standard_deviation, so the weights are the model's own and
no constant is lost (score = sum_j w_j (x_j - mean_j) / standard_deviation_j, the model's score
in exact arithmetic).

Every number is the float64 the model holds, written so that it reads back to the same bits
(Python's repr); JSON has no NaN or infinity, and both plugins read numbers as 32-bit floats
(Java ``float``), so a number beyond float32's range is refused.
"""

import json
import re

import numpy as np

from streamrank.errors import ParameterError
from streamrank.export.common import layout, linear_weights

SOLR_CLASS = "org.apache.solr.ltr.model.LinearModel"
ES_MODEL_TYPE = "model/linear"
# what a folded zscore model's name carries: the weights are w / sigma and mu . (w / sigma) is gone
FOLDED_SUFFIX = "_zscore_folded_bias_dropped"
# a model name Solr's local parameters read unquoted ({!ltr model=NAME}) and ES keeps as an id
_NAME = re.compile(r"[A-Za-z0-9_.:-]+")
# both plugins parse every number into a Java float (Solr: Number.floatValue(); the ES plugin:
# XContentParser.floatValue()); beyond this a weight becomes infinite there
FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_name(name, fmt):
    """The model's name, usable unquoted in Solr's ``{!ltr model=NAME}`` and as an ES model id."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        fixed = re.sub(r"[^A-Za-z0-9_.:-]+", "_", name if isinstance(name, str) else "").strip("_") or "streamrank"
        why = "Solr reads it unquoted in {!ltr model=NAME}" if fmt == "solr" else "an ES model id, named as for solr"
        raise ParameterError(f"format={fmt}: name must be letters, digits, '_', '-', '.' or ':' ({why}); got "
                             f"{name!r}. Use name={fixed}")
    return name


def _numbers(values, what, names, fmt):
    """``values`` as Python floats (repr reads back to the same float64), each finite and within
    the 32-bit float range the plugins parse into."""
    out = [float(x) for x in np.asarray(values, np.float64)]
    for j, x in enumerate(out):
        if not np.isfinite(x) or abs(x) > FLOAT32_MAX:
            raise ParameterError(f"format={fmt}: the {what} of feature {names[j]!r} is {x!r}, beyond the 32-bit "
                                 f"floats the plugin reads (|x| <= {FLOAT32_MAX:.4g}); use format=onnx or "
                                 f"format=json")
    return out


def _unfolded_zscore(model, fmt):
    """(u, mean, std, normalised) for a zscore model: weights u of the normalised input columns
    (the --features subset scattered, linear-kernel maps folded) and each column's (mean, std),
    so that s(x) = sum_j u_j (x_j - mean_j) / std_j exactly as the model scores; ``normalised``
    marks the columns the model reads (the others have weight 0 and no normaliser). None when a
    column read twice (a --features list naming it twice) has two different statistics."""
    norm = model.normalizer
    u, _ = linear_weights(model, fmt, fold_zscore=False)  # the map and the subset, on the normalised values
    d = u.size
    mean, std = np.zeros(d), np.ones(d)
    normalised = np.zeros(d, bool)
    cols = np.arange(model.n_features) if model.input_features is None else np.asarray(model.input_features)
    for i, j in enumerate(cols):
        if normalised[j] and (mean[j] != norm.mean_[i] or std[j] != norm.scale_[i]):
            return None
        mean[j], std[j], normalised[j] = norm.mean_[i], norm.scale_[i], True
    return u, mean, std, normalised


def to_solr(model, *, names, name):
    """Solr's LinearModel JSON: every input feature listed, zero weights included, names equal to
    the weight keys; zscore folded into the weights, the constant dropped (module docstring)."""
    check_name(name, "solr")
    v, c = linear_weights(model, "solr")
    weights = _numbers(v, "weight", names, "solr")
    folded = model.normalizer.kind == "zscore"
    doc = {"class": SOLR_CLASS,
           "name": name + FOLDED_SUFFIX if folded else name,
           "features": [{"name": n} for n in names],
           "params": {"weights": dict(zip(names, weights))}}
    return layout(doc) + "\n"


def to_elasticsearch(model, *, names, name):
    """The ES / OpenSearch LTR plugin's ``_createmodel`` body for a ``model/linear`` model: every
    input feature in ``definition``, zero weights included; zscore as the plugin's ``standard``
    feature normalisers of the columns the model reads (module docstring)."""
    check_name(name, "elasticsearch")
    # zscore as the plugin's standard normaliser; folded (with linear_weights's refusals) otherwise
    unfolded = _unfolded_zscore(model, "elasticsearch") if model.normalizer.kind == "zscore" else None
    normalizers = None
    if unfolded is None:
        v, _ = linear_weights(model, "elasticsearch")
        weights = _numbers(v, "weight", names, "elasticsearch")
        folded = model.normalizer.kind == "zscore"  # a column read twice with two statistics
    else:
        u, mean, std, normalised = unfolded
        weights = _numbers(u, "weight", names, "elasticsearch")
        means = _numbers(mean, "mean", names, "elasticsearch")
        stds = _numbers(std, "standard deviation", names, "elasticsearch")
        for j in np.flatnonzero(normalised):
            if not np.float32(stds[j]) > 0:  # the plugin refuses a standard deviation that is not > 0
                raise ParameterError(f"format=elasticsearch: the standard deviation of feature {names[j]!r} is "
                                     f"{stds[j]!r}, 0 as the 32-bit float the plugin reads; use format=onnx")
        normalizers = {names[j]: {"standard": {"mean": means[j], "standard_deviation": stds[j]}}
                       for j in np.flatnonzero(normalised)}
        folded = False
    definition = json.dumps(dict(zip(names, weights)), allow_nan=False)
    inner = {"type": ES_MODEL_TYPE, "definition": definition}
    if normalizers:
        inner["feature_normalizers"] = normalizers
    return layout({"model": {"name": name + FOLDED_SUFFIX if folded else name, "model": inner}}) + "\n"
