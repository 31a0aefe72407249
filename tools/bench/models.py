"""Every tool's model file, read here (streamrank's with h5py, the peers' text formats)."""
import json
from pathlib import Path


def read_streamrank_model(path, expect):
    """(w or beta, support rows or None, params) of a streamrank model file, read with h5py."""
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        norm = f["normalize"].attrs.get("kind", "none")
        norm = norm.decode() if isinstance(norm, bytes) else str(norm)
        if norm != "none":
            raise ValueError(f"{path}: normalize = {norm}, the bench expects none")
        if "input_features" in f.attrs:
            raise ValueError(f"{path}: a feature-subset model, the bench expects all features")
        fm = f["feature_map"]
        kind = fm.attrs["kind"]
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind != expect:
            raise ValueError(f"{path}: feature map {kind}, expected {expect}")
        w = f["w"][:].astype(np.float64)
        if kind == "identity":
            return w, None, {}
        params = json.loads(fm.attrs["params"])
        return w, fm["support"][:].astype(np.float64), params


def _sparse_line(tokens, d):
    import numpy as np
    x = np.zeros(d)
    for kv in tokens:
        k, v = kv.split(":")
        if int(k) >= 1:
            x[int(k) - 1] = float(v)
    return x


def read_liblinear_model(path, d):
    import numpy as np
    text = Path(path).read_text()
    head, _, body = text.partition("\nw\n")
    if "solver_type L2R_L2LOSS_RANKSVM" not in head or not body:
        raise ValueError(f"{path}: not a LIBLINEAR -s 8 model")
    bias = [float(ln.split()[1]) for ln in head.splitlines() if ln.startswith("bias ")]
    if bias and bias[0] >= 0:
        raise ValueError(f"{path}: the model has a bias term (-B {bias[0]:g})")
    w = np.array([float(v) for v in body.split()])
    return np.pad(w, (0, max(0, d - w.size)))[:max(d, w.size)]


def read_svmrank_model(path, d):
    last = [ln for ln in Path(path).read_text().splitlines() if ln.strip()][-1]
    return _sparse_line(last.split("#", 1)[0].split()[1:], d)


def read_libsvm_model(path, d):
    """(coef, SV rows, gamma) of a libsvm-ranksvm rbf model: f(x) = sum coef K(x, sv)."""
    import numpy as np
    text = Path(path).read_text()
    head, _, body = text.partition("\nSV\n")
    h = dict(ln.split(None, 1) for ln in head.splitlines() if ln.strip())
    if h.get("kernel_type", "").strip() != "rbf":
        raise ValueError(f"{path}: kernel_type {h.get('kernel_type')}, expected rbf")
    coef, S = [], []
    for ln in body.splitlines():
        t = ln.split()
        if t:
            coef.append(float(t[0]))
            S.append(_sparse_line(t[1:], d))
    return np.array(coef), np.array(S).reshape(len(S), d), float(h["gamma"])


def read_nystroem_model(path):
    """(w, landmarks float64 (m, d), projection float64 (m, k), gamma) of a streamrank Nystroem model:
    phi(x) = K(x, landmarks) projection, score = phi(x).w (read with h5py)."""
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        norm = f["normalize"].attrs.get("kind", "none")
        norm = norm.decode() if isinstance(norm, bytes) else str(norm)
        if norm != "none":
            raise ValueError(f"{path}: normalize = {norm}, the bench expects none")
        fm = f["feature_map"]
        kind = fm.attrs["kind"]
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        params = json.loads(fm.attrs["params"])
        if kind != "nystroem" or params.get("kernel") != "rbf":
            raise ValueError(f"{path}: feature map {kind} kernel {params.get('kernel')}, expected nystroem rbf")
        return (f["w"][:].astype(np.float64), fm["landmarks"][:].astype(np.float64),
                fm["projection"][:].astype(np.float64), float(params["gamma"]))


def h5_x_bytes(path):
    """Bytes of the row matrix X of a streamrank HDF5 dataset (its in-memory size, uncompressed)."""
    import h5py
    with h5py.File(path, "r") as f:
        return int(f["X"].size * f["X"].dtype.itemsize), int(f["X"].shape[0])


def read_scores(path):
    import numpy as np
    return np.loadtxt(path, dtype=np.float64, ndmin=1)


# children of the nystroem and gbdt sections (each run as ``python -c CODE ARGS``)
