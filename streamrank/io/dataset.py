"""Opening a streamrank dataset file: format check, the in-memory query index, fingerprint.

Only the small index (``query_ptr``, ``qid``) lives in memory; rows are read as contiguous
slices through :class:`streamrank.io.query_stream.QueryStream`.
"""

import json
import logging
from pathlib import Path

import h5py
import numpy as np

from streamrank.errors import FormatError, InputError
from streamrank.io.h5_edc import no_check_dxpl, read_rows
from streamrank.io.hdf5_format import (FORMAT_NAME, FORMAT_VERSION, READABLE_VERSIONS, ContentHash, first_non_finite,
                                       index_digest)


log = logging.getLogger("streamrank.io.dataset")

# datasets opened in this process without checksums (format version 1): said once each
_UNVERIFIED_SAID = set()


def _check_format(f, path):
    fmt = f.attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if fmt == "streamrank-model":
        raise FormatError(f"{path}: this is a streamrank model, not a dataset; give it as MODEL "
                          f"(streamrank predict {path} DATA -o SCORES.txt)")
    if fmt != FORMAT_NAME:
        raise FormatError(
            f"{path}: not a streamrank dataset (format attribute {fmt!r}, expected {FORMAT_NAME!r}). "
            f"Convert LETOR/SVMlight text with: streamrank convert IN.txt -o {Path(path).stem}.h5")
    version = _int_attr(f, path, "version", default=-1)
    if version not in READABLE_VERSIONS:
        if version > FORMAT_VERSION:
            fix = "it was written by a newer streamrank; upgrade with: pip install -U streamrank"
        else:
            fix = "re-create it with: streamrank convert (from the original text)"
        raise FormatError(f"{path}: dataset format version {version} is not supported "
                          f"(this streamrank reads versions {', '.join(map(str, READABLE_VERSIONS))}); {fix}")
    for name in ("X", "y", "query_ptr", "qid"):
        if name not in f or not isinstance(f[name], h5py.Dataset):
            raise FormatError(f"{path}: dataset is incomplete: /{name} is missing. Convert it again.")
    return version


def _int_attr(f, path, name, default=None):
    v = f.attrs.get(name, default)
    if v is None:
        raise FormatError(f"{path}: the attribute {name!r} is missing; convert the data again")
    try:
        if isinstance(v, (float, np.floating)) and float(v) != int(v):
            raise ValueError
        return int(v)
    except (TypeError, ValueError, OverflowError):
        raise FormatError(f"{path}: the attribute {name!r} is {v!r}, not an integer; the file is damaged, "
                          f"convert the data again") from None


def _fits(a, shape):
    """``a`` can take rows read straight from HDF5: float32, C-contiguous, exactly ``shape``."""
    return a.dtype == np.float32 and a.flags.c_contiguous and a.shape == shape


def _damaged(path, what):
    return FormatError(f"{path}: {what}; the file is damaged or was changed after it was written. "
                       f"Convert the data again from the original text")


class Dataset:
    """A read-only streamrank dataset (HDF5, format version 2, or 1 unverified).

    Attributes
    ----------
    n_rows, n_features, n_queries : int
    query_ptr : int64 array (n_queries + 1,)
        Rows of query q are ``query_ptr[q]:query_ptr[q+1]``.
    fingerprint : str
        sha256 of the content (X, y, query_ptr, qid) as written; with version 2's checksums, a
        file that reads without error still holds exactly that content.
    verified : bool
        Whether reads are checked (format version 2: Fletcher-32 per chunk, the index by its
        sha256 at open). Rows of an unverified file are checked to be finite as they are read.
    """

    def __init__(self, path):
        self.path = Path(path)
        self.name = str(self.path)  # what messages call it (open_data: the text file it came from)
        if not self.path.exists():
            raise FileNotFoundError(f"{self.path}: no such file")
        if self.path.is_dir():
            raise InputError(f"{self.path} is a directory; give a dataset file (.h5) or LETOR/SVMlight text")
        if not h5py.is_hdf5(self.path):
            raise FormatError(f"{self.path}: not an HDF5 file. If it is LETOR/SVMlight text, convert it "
                              f"with: streamrank convert {self.path} -o {self.path.stem}.h5")
        try:
            self._file = h5py.File(self.path, "r", rdcc_nbytes=4 << 20)
        except OSError as e:
            raise _damaged(self.path, f"HDF5 cannot open it ({e})") from None
        try:
            self._open()
        except BaseException:
            self._file.close()
            raise

    def _open(self):
        f, path = self._file, self.path
        try:
            self.version = _check_format(f, path)
            self.n_rows = _int_attr(f, path, "n_rows")
            self.n_features = _int_attr(f, path, "n_features")
            self.n_queries = _int_attr(f, path, "n_queries")
            self.index_base = _int_attr(f, path, "index_base", 1)
            self.X, self.y = f["X"], f["y"]
            # the index is checked before anything is allocated from the attributes
            if min(self.n_rows, self.n_features, self.n_queries) < 0:
                raise _damaged(path, "negative sizes in its attributes")
            if f["query_ptr"].shape != (self.n_queries + 1,) or f["qid"].shape != (self.n_queries,):
                raise _damaged(path, f"/query_ptr or /qid does not have the {self.n_queries} queries its "
                                     f"attributes declare")
            if self.X.shape != (self.n_rows, self.n_features) or self.y.shape != (self.n_rows,) \
                    or ("row" in f and f["row"].shape != (self.n_rows,)):
                raise _damaged(path, f"/X, /y or /row does not have the shape its attributes declare "
                                     f"({self.n_rows} rows, {self.n_features} features)")
            if self.X.dtype != np.float32 or self.y.dtype != np.float32:
                raise _damaged(path, f"/X and /y must be float32; got {self.X.dtype} and {self.y.dtype}")
            self.verified = self.version >= 2
            if self.verified and not (self.X.fletcher32 and self.y.fletcher32):
                raise _damaged(path, "it claims format version 2 but /X or /y carries no checksums")
            self._check_storage()
            self.query_ptr = f["query_ptr"][:].astype(np.int64)
            qp = self.query_ptr
            if qp[0] != 0 or qp[-1] != self.n_rows or np.any(np.diff(qp) < 0):
                raise _damaged(path, f"its query index /query_ptr is not a non-decreasing list from 0 to "
                                     f"{self.n_rows} rows")
            if self.verified:
                q = self.qid
                if index_digest(qp, q if q.dtype.kind in "iu" else list(q)) != f.attrs.get("index_sha256"):
                    raise _damaged(path, "its query index (/query_ptr, /qid) does not match index_sha256")
            elif str(path) not in _UNVERIFIED_SAID:
                _UNVERIFIED_SAID.add(str(path))
                log.warning("%s: dataset format version 1 carries no checksums, so damaged bytes would go "
                            "unnoticed; convert it again to get a verified version 2 file", path)
        except OSError as e:  # HDF5's own errors: a damaged chunk, a truncated file
            raise _damaged(path, f"HDF5 cannot read its index ({e})") from None
        self._fingerprint = f.attrs.get("content_sha256")
        self._verified = set()  # (start, stop) row ranges read with their checksums checked

    def _check_storage(self):
        """The chunk of X that holds the last row exists: a file whose attributes claim more rows
        than were written (HDF5 reads absent chunks as zeros) is refused before anything is read."""
        X = self.X
        if X.chunks is None or self.n_rows == 0 or self.n_features == 0:
            return
        last = (self.n_rows - 1) // X.chunks[0] * X.chunks[0]
        try:
            info = X.id.get_chunk_info_by_coord((last, 0))
            present = info.byte_offset is not None and info.size > 0
        except (KeyError, ValueError, OSError):
            present = False
        if not present:
            raise _damaged(self.path, f"/X has no stored rows at {last} and beyond, though its attributes "
                                      f"declare {self.n_rows} rows")

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
        A damaged chunk (version 2) or a non-finite value (version 1) is refused with the rows.
        """
        if not 0 <= start <= stop <= self.n_rows:
            raise IndexError(f"{self.path}: rows {start}:{stop} lie outside its {self.n_rows} rows")
        if out is None:
            X = np.empty((stop - start, self.n_features), np.float32)
            y = np.empty(stop - start, np.float32)
        else:
            X, y = out[0][:stop - start], out[1][:stop - start]
        if stop > start:
            # rows this process verified already are read without the checksum (io.h5_edc)
            dxpl = no_check_dxpl() if self.verified and (start, stop) in self._verified else None
            try:
                if dxpl is not None and _fits(X, (stop - start, self.n_features)) and _fits(y, (stop - start,)):
                    read_rows(self.X, X, start, stop, dxpl)
                    read_rows(self.y, y, start, stop, dxpl)
                else:
                    self.X.read_direct(X, np.s_[start:stop])
                    self.y.read_direct(y, np.s_[start:stop])
                    if self.verified:
                        self._verified.add((start, stop))
            except OSError as e:
                raise _damaged(self.path, f"rows {start} to {stop - 1} cannot be read ({e}; a checksum "
                                          f"mismatch means bytes changed on disk)") from None
            if not self.verified:
                bad = first_non_finite(X, y, start, self.index_base)
                if bad is not None:
                    raise InputError(f"{self.path}: stored {bad} is not a finite number; streamrank trains "
                                     f"on finite values only. Convert the data again")
        return X, y

    def stream(self, **kwargs):
        """A :class:`~streamrank.io.query_stream.QueryStream` over this dataset (keywords passed on)."""
        from streamrank.io.query_stream import QueryStream, stream_of
        qs = QueryStream(self, **kwargs)
        qs.spec = (stream_of, {"dataset": self, **kwargs})  # how a worker makes a part of it
        return qs

    def close(self):
        self._file.close()

    def __reduce__(self):
        # another process (a dask worker) opens the same file by its path: a shared or replicated
        # file system is the deployment assumption, checked by the content fingerprint
        return (reopen, (str(self.path.resolve()), self.fingerprint, self.name))  # not relative to this cwd

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return (f"<streamrank.Dataset {self.path.name}: {self.n_rows} rows, {self.n_queries} queries, "
                f"{self.n_features} features>")


_REOPENED = {}


def reopen(path, fingerprint, name=None):
    """The dataset at ``path`` in this process, checked to hold the content ``fingerprint`` (one
    open file per path and content, kept for the process's later tasks)."""
    key = (path, fingerprint)
    ds = _REOPENED.get(key)
    if ds is None:
        import socket
        try:
            ds = Dataset(path)
        except (OSError, FormatError) as e:
            raise FormatError(f"{path}: this worker ({socket.gethostname()}) cannot open the dataset ({e}). "
                              f"Workers read the data by its path: give every worker the same file at the "
                              f"same path (a shared or replicated file system)") from None
        if ds.fingerprint != fingerprint:
            ds.close()
            raise FormatError(f"{path}: this worker ({socket.gethostname()}) sees a file of other content than "
                              f"the one training started on. Workers read the data by its path: give every "
                              f"worker the same file at the same path")
        ds.name = name or ds.name
        _REOPENED[key] = ds
    return ds


def open_dataset(path):
    """Open a streamrank HDF5 dataset for reading (see :class:`Dataset`)."""
    return Dataset(path)
