"""A dataset seen through a subset of its features (``train --features``, a model's input features).

The rows are read whole (the file is chunked by rows) and each block's chosen columns are copied
out, in the order given; everything else (queries, labels, the row order) is the dataset's own.
A chosen column past the dataset's width reads as 0, as a missing trailing feature does in
SVMlight. The view's fingerprint is the dataset's with the columns, so checkpoints and caches of
a subset are not taken for the whole's.

Rows come from the dataset's own reads, so they are checked to be finite whole: a NaN in a column
left out is refused too: the file is what is wrong, and the check lives in the one place rows are read.
"""

import dataclasses
import hashlib

import numpy as np


def take_columns(X, cols):
    """X[:, cols] as a C-contiguous array of X's dtype, columns past X's width as 0."""
    out = np.zeros((X.shape[0], len(cols)), X.dtype)
    inside = cols < X.shape[1]
    out[:, inside] = X[:, cols[inside]]
    return out


class _SubsetStream:
    """The dataset's query-aligned stream with each block narrowed to the chosen columns."""

    def __init__(self, inner, cols):
        self._inner, self._cols = inner, cols

    def __getattr__(self, name):
        if name.startswith("__") or name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __len__(self):
        return len(self._inner)

    def __iter__(self):
        for block, start, stop in self._inner:
            yield dataclasses.replace(block, X=take_columns(block.X, self._cols)), start, stop


class FeatureSubset:
    """``dataset`` with only the columns ``cols`` (0-based, in that order)."""

    def __init__(self, dataset, cols):
        self.base = dataset
        self.cols = np.asarray(cols, np.int64)
        self.n_features = int(self.cols.size)
        h = hashlib.sha256((dataset.fingerprint + ":features:" + ",".join(map(str, self.cols))).encode())
        self.fingerprint = h.hexdigest()
        self.name = f"{dataset.name} (features {', '.join(str(c + 1) for c in self.cols[:8])}" \
                    f"{', ...' if self.cols.size > 8 else ''})"

    def __getattr__(self, name):
        if name.startswith("__") or name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def __reduce__(self):
        return (FeatureSubset, (self.base, self.cols))

    def stream(self, **kwargs):
        from streamrank.io.query_stream import stream_of
        s = _SubsetStream(self.base.stream(**kwargs), self.cols)
        s.spec = (stream_of, {"dataset": self, **kwargs})
        return s

    def read(self, start, stop, out=None):
        X, y = self.base.read(start, stop)
        return take_columns(X, self.cols), y

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
