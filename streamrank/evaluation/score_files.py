"""``streamrank eval``: score files against a dataset's labels (LETOR conventions)."""

import hashlib
import os
from pathlib import Path

import h5py
import numpy as np

from streamrank.io.dataset import open_dataset
from streamrank.errors import InputError
from streamrank.evaluation.metrics import evaluate


def read_scores(path, n_rows):
    """One float per line, in the input's row order (blank lines are not allowed)."""
    try:
        s = np.loadtxt(path, dtype=np.float64, ndmin=1, comments=None)
    except ValueError as exc:
        raise InputError(f"{path}: every line must hold one number ({exc})") from None
    if s.shape != (n_rows,):
        raise InputError(f"{path}: {s.size} scores but the data has {n_rows} rows; give one score per row, "
                         f"in the order of the input text")
    if not np.isfinite(s).all():
        k = int(np.flatnonzero(~np.isfinite(s))[0])
        raise InputError(f"{path}:{k + 1}: the score is not finite ({s[k]})")
    return s


def open_data(path, cache_dir=None, quiet=True):
    """Open an HDF5 dataset, or convert LETOR/SVMlight text into ``cache_dir`` first.

    The cached conversion is keyed by the text file's absolute path, size and modification time,
    and reused while those stay the same.
    """
    from streamrank.io.convert import convert
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if h5py.is_hdf5(path):
        return open_dataset(path)
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
    cache = Path(cache_dir) if cache_dir else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "streamrank"
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / f"{path.name}.{key}.h5"
    if not target.exists():
        convert([path], target, quiet=quiet)
    return open_dataset(target)


def evaluate_file(data, scores_path, *, convention="letor4", cache_dir=None):
    """Evaluate a score file (input row order) against DATA; returns a metrics Report."""
    with open_data(data, cache_dir) as ds:
        y = np.empty(ds.n_rows, np.float32)
        ds.y.read_direct(y)
        row = ds.row
        qid = ds.qid
        ptr = ds.query_ptr
    s = read_scores(scores_path, len(y))
    # the dataset groups rows by query; row[i] is row i's line position in the input text
    return evaluate(y, s[row], ptr, convention=convention, qid=qid)
