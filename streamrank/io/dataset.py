"""Opening a streamrank dataset file: format check, the in-memory query index, fingerprint.

Only the small index (``query_ptr``, ``qid``) lives in memory; rows are read as contiguous
slices through :class:`streamrank.io.query_stream.QueryStream`.
"""

import json
from pathlib import Path

import h5py
import numpy as np

from streamrank.errors import FormatError
from streamrank.io.hdf5_format import FORMAT_NAME, FORMAT_VERSION, ContentHash


def _check_format(f, path):
    fmt = f.attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if fmt != FORMAT_NAME:
        raise FormatError(
            f"{path}: not a streamrank dataset (format attribute {fmt!r}, expected {FORMAT_NAME!r}). "
            f"Convert LETOR/SVMlight text with: streamrank convert IN.txt -o {Path(path).stem}.h5")
    version = int(f.attrs.get("version", -1))
    if version != FORMAT_VERSION:
        if version > FORMAT_VERSION:
            fix = "it was written by a newer streamrank; upgrade with: pip install -U streamrank"
        else:
            fix = "re-create it with: streamrank convert (from the original text)"
        raise FormatError(f"{path}: dataset format version {version} is not supported "
                          f"(this streamrank reads version {FORMAT_VERSION}); {fix}")
    for name in ("X", "y", "query_ptr", "qid"):
        if name not in f:
            raise FormatError(f"{path}: dataset is incomplete: /{name} is missing. Convert it again.")


class Dataset:
    """A read-only streamrank dataset (HDF5, format version 1).

    Attributes
    ----------
    n_rows, n_features, n_queries : int
    query_ptr : int64 array (n_queries + 1,)
        Rows of query q are ``query_ptr[q]:query_ptr[q+1]``.
    fingerprint : str
        sha256 of the content (X, y, query_ptr, qid); stable across copies and renames.
    """

    def __init__(self, path):
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"{self.path}: no such file")
        if not h5py.is_hdf5(self.path):
            raise FormatError(f"{self.path}: not an HDF5 file. If it is LETOR/SVMlight text, convert it "
                              f"with: streamrank convert {self.path} -o {self.path.stem}.h5")
        self._file = h5py.File(self.path, "r", rdcc_nbytes=4 << 20)
        try:
            _check_format(self._file, self.path)
        except BaseException:
            self._file.close()
            raise
        a = self._file.attrs
        self.n_rows = int(a["n_rows"])
        self.n_features = int(a["n_features"])
        self.n_queries = int(a["n_queries"])
        self.index_base = int(a.get("index_base", 1))
        self.query_ptr = self._file["query_ptr"][:].astype(np.int64)
        self.X = self._file["X"]
        self.y = self._file["y"]
        self._fingerprint = a.get("content_sha256")
        if self.query_ptr.shape != (self.n_queries + 1,) or self.query_ptr[-1] != self.n_rows \
                or self.X.shape != (self.n_rows, self.n_features):
            self._file.close()
            raise FormatError(f"{self.path}: dataset is inconsistent (query_ptr, X and attributes "
                              f"disagree on the number of rows). Convert it again.")

    # -- metadata -------------------------------------------------------------------------------
    @property
    def attrs(self):
        return dict(self._file.attrs)

    @property
    def source(self):
        return json.loads(self._file.attrs.get("source", "[]"))

    @property
    def qid(self):
        q = self._file["qid"]
        if h5py.check_string_dtype(q.dtype) is not None:
            return q.asstr()[:]
        return q[:]

    @property
    def row(self):
        """Each row's position in the input text (int64 array)."""
        return self._file["row"][:]

    def comments(self, start=0, stop=None):
        """The comments of rows ``start:stop`` as a list of str, or None without comments."""
        if "comment" not in self._file:
            return None
        stop = self.n_rows if stop is None else stop
        ptr = self._file["comment/ptr"][start:stop + 1]
        data = self._file["comment/data"][int(ptr[0]):int(ptr[-1])].tobytes()
        base = int(ptr[0])
        return [data[int(p) - base:int(q) - base].decode("utf-8", "replace") for p, q in zip(ptr[:-1], ptr[1:])]

    @property
    def fingerprint(self):
        """Content hash; computed by one pass for files written without one."""
        if self._fingerprint is None:
            h = ContentHash()
            step = max(1, (64 << 20) // (4 * max(self.n_features, 1)))
            for a in range(0, self.n_rows, step):
                h.update(*self.read(a, min(a + step, self.n_rows)))
            q = self.qid
            self._fingerprint = h.hexdigest(self.query_ptr, q if q.dtype.kind in "iu" else list(q))
        return str(self._fingerprint)

    # -- reading ------------------------------------------------------------------------------------
    def read(self, start, stop, out=None):
        """Rows ``start:stop`` as (X float32 (r, d), y float32 (r,)), one contiguous read each.

        ``out``: (X, y) buffers with at least ``stop - start`` rows to read into (views returned).
        """
        if out is None:
            X = np.empty((stop - start, self.n_features), np.float32)
            y = np.empty(stop - start, np.float32)
        else:
            X, y = out[0][:stop - start], out[1][:stop - start]
        if stop > start:
            self.X.read_direct(X, np.s_[start:stop])
            self.y.read_direct(y, np.s_[start:stop])
        return X, y

    def stream(self, **kwargs):
        """A :class:`~streamrank.io.query_stream.QueryStream` over this dataset (keywords passed on)."""
        from streamrank.io.query_stream import QueryStream
        return QueryStream(self, **kwargs)

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return (f"<streamrank.Dataset {self.path.name}: {self.n_rows} rows, {self.n_queries} queries, "
                f"{self.n_features} features>")


def open_dataset(path):
    """Open a streamrank HDF5 dataset for reading (see :class:`Dataset`)."""
    return Dataset(path)
