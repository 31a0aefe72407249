"""``streamrank info MODEL.h5``: what a model is: its method and settings, the data it was trained
on (fingerprint), how the training went, and a linear model's feature weights."""

import h5py
import numpy as np

# feature weights printed for people (all of them go to --json)
SHOWN_WEIGHTS = 20


def is_model_file(path):
    """Whether ``path`` is an HDF5 file whose format attribute says it is a streamrank model."""
    from streamrank.errors import StreamrankError
    from streamrank.state.model import FORMAT_NAME, _model_source
    try:
        source = _model_source(path)[0]
        with h5py.File(source, "r") as f:
            return f.attrs.get("format") == FORMAT_NAME
    except (OSError, StreamrankError):
        return False


def model_info(path):
    """A dict of the facts ``streamrank info`` prints about the model at ``path`` (JSON-ready)."""
    from streamrank.state.model import _model_source, load
    m = load(path)
    with h5py.File(_model_source(path)[0], "r") as f:
        version, created = int(f.attrs["version"]), str(f.attrs.get("created_by", ""))
    t = m.training
    from streamrank.io.urls import shown
    info = {"path": shown(path), "format": f"streamrank-model v{version}", "created_by": created,
            "method": m.config.get("method", m.method), "config": m.config,
            "trained_on": {"fingerprint": m.fingerprint, "features": m.n_features},
            "chosen": {k: t.get(k) for k in ("C", "gamma", "lambda", "eta") if t.get(k) is not None},
            "training": {k: t.get(k) for k in ("objective", "grad_norm", "iterations", "passes", "seconds", "solver")
                         if t.get(k) is not None},
            "candidates": len(t.get("candidates", [])), "width": int(m.w.size)}
    if m.fmap is None:  # linear: one weight per (used) input feature
        ids = (np.arange(m.n_features) + 1 if m.input_features is None else np.asarray(m.input_features) + 1)
        info["weights"] = {"feature": [int(i) for i in ids], "weight": [float(v) for v in m.w],
                           "on": "raw features" if m.normalizer.kind == "none" else
                           f"features after normalize={m.normalizer.kind}"}
    return info


def format_model_info(info):
    """The dict of :func:`model_info` as lines for people."""
    cfg = info["config"]
    lines = [f"{info['path']}: {info['format']}, {info['created_by']}",
             f"method: {info['method']}" + "".join(f", {k} {cfg[k]}" for k in ("kernel", "components", "loss", "solver",
                                                                              "normalize") if cfg.get(k) is not None),
             "chosen: " + (", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                     for k, v in info["chosen"].items()) or "-") +
             (f" (of {info['candidates']} candidates)" if info["candidates"] > 1 else ""),
             "training: " + ", ".join(f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}"
                                      for k, v in info["training"].items()),
             f"trained on: {info['trained_on']['features']} features, "
             f"data fingerprint {info['trained_on']['fingerprint']}",
             f"weights: {info['width']}" + ("" if "weights" in info else " (over the feature map's outputs)")]
    if "weights" in info:
        w = info["weights"]
        order = np.argsort(-np.abs(np.asarray(w["weight"])), kind="stable")[:SHOWN_WEIGHTS]
        lines.append(f"largest |weight| on {w['on']} "
                     f"(feature ids as in the data, 1-based; all of them in the JSON form):")
        lines += [f"  {w['feature'][i]:>7}  {w['weight'][i]:+.6g}" for i in order]
    return "\n".join(lines)
