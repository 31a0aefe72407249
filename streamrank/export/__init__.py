"""Models that leave streamrank: one model file written in a format another program scores.

``export_model(model, format, path)`` (and ``streamrank export MODEL --format F -o OUT``):

- ``onnx``: every model kind as an ONNX graph, raw float32 rows in, one float32 score per row out
  (:mod:`streamrank.export.onnx_graph`);
- ``solr``, ``elasticsearch``: the learning-to-rank plugins' linear models
  (:mod:`streamrank.export.search_engines`);
- ``svmrank``, ``liblinear``: the model files SVMrank's ``svm_rank_classify`` and the LIBLINEAR
  ranksvm extension's ``predict`` read (:mod:`streamrank.export.peer_files`);
- ``json``: a plain, documented description of every model kind (:mod:`streamrank.export.plain_json`).

The formats and what each cannot express: docs/formats.md. ``onnx`` needs the ``export`` extra
(``pip install 'streamrank[export]'``); the others need nothing beyond streamrank.
"""

import importlib

from streamrank.errors import ParameterError

FORMATS = ("onnx", "solr", "elasticsearch", "svmrank", "liblinear", "json")
# format -> (module under streamrank.export, its function model, names, name -> str | bytes)
_RENDERERS = {"onnx": ("onnx_graph", "to_onnx"), "solr": ("search_engines", "to_solr"),
              "elasticsearch": ("search_engines", "to_elasticsearch"), "svmrank": ("peer_files", "to_svmrank"),
              "liblinear": ("peer_files", "to_liblinear"), "json": ("plain_json", "to_json")}


def check_format(fmt):
    if not isinstance(fmt, str) or fmt.lower() not in FORMATS:
        raise ParameterError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}. Use format=onnx")
    return fmt.lower()


def check_name(name):
    """``name`` (the model's name inside the file) is None (the default) or printable text that is
    not empty; an empty one is refused rather than replaced by the default."""
    import unicodedata
    if name is None:
        return
    if not isinstance(name, str) or not name.strip() or name != name.strip() or \
            any(unicodedata.category(ch) in ("Cc", "Cf") for ch in name):
        raise ParameterError(f"the model's name inside the file must be non-empty printable text without surrounding "
                             f"spaces; got name {name!r}. Use name=ranker, or leave it out for the default")


def render(model, format, *, feature_names=None, name=None):
    """The exported model's content (bytes for onnx, text for the others). ``model``: a
    :class:`~streamrank.state.model.LinearModel`; ``feature_names``: a list or the path of a file
    with one name per line (f1..fd by default); ``name``: the model's name inside the file
    (formats that carry one)."""
    from streamrank.export.common import feature_names as check_names
    fmt = check_format(format)
    check_name(name)
    names = check_names(model, feature_names)
    module, function = _RENDERERS[fmt]
    fn = getattr(importlib.import_module(f"streamrank.export.{module}"), function)
    return fn(model, names=names, name=name or "streamrank")


def export_model(model, format, path=None, *, feature_names=None, name=None):
    """Write ``model`` in ``format`` to ``path`` atomically (a temporary name, then a rename: a
    reader never sees part of it) and return the path; without ``path``, return the content."""
    content = render(model, format, feature_names=feature_names, name=name)
    if path is None:
        return content
    from streamrank.io.atomic import ensure_space, write_atomically
    from streamrank.io.urls import location
    path = location(path)
    ensure_space(path, len(content))
    write_atomically(path, content)
    return path
