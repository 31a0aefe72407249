"""Opening a streamrank dataset file: format check, the in-memory query index, fingerprint.

Only the small index (``query_ptr``, ``query_ids``) lives in memory; rows are read as contiguous
slices through :class:`streamrank.io.query_stream.QueryStream`.
"""

import json
import logging
import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

import h5py
import numpy as np

from streamrank._native import finite
from streamrank._native.memory import aligned_empty
from streamrank.errors import FormatError, InputError, StreamrankError
from streamrank.io.atomic import forget_input, register_input
from streamrank.io.h5_edc import RowReader, no_check_dxpl
from streamrank.io.hdf5_format import FORMAT_NAME, FORMAT_VERSION, READABLE_VERSIONS, ContentHash, index_digest

if TYPE_CHECKING:
    from streamrank.io.query_stream import QueryStream


# the first 8 bytes of an HDF5 file (with no user block, as h5py writes it)
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"

log = logging.getLogger("streamrank.io.dataset")

# datasets opened in this process without checksums (format version 1): said once each
_UNVERIFIED_SAID: set[str] = set()

# Rows of X read by one HDF5 call on a block's first read, each piece scanned for non-finite values
# as soon as it lands, while it is still in cache. Whole HDF5 chunks (about 1 MB each,
# docs/formats.md) are never split between two pieces. A piece fits L2 (1 MB a core), where its
# scan is fastest; tools/bench_finite.py compares piece sizes (docs/design.md, "Measurements
# behind the code").
PIECE_BYTES = 1 << 20
# a first read of at least two groups of this many bytes of X is scanned by one thread of its own
# while the next pieces are read (Dataset._read_x_scanned_alongside): the read's own thread pays
# a hand-off a group, not the scan (tools/bench_finite.py)
SCAN_GROUP_BYTES = 8 << 20
_scan_pool = None


def _scanner():
    """The scanning thread (made at first use; a daemon-like worker of a one-thread pool)."""
    global _scan_pool
    if _scan_pool is None:
        from concurrent.futures import ThreadPoolExecutor
        _scan_pool = ThreadPoolExecutor(1, thread_name_prefix="streamrank-finite")
    return _scan_pool


# streamrank's other HDF5 files, and what each is for (a dataset's readers name them, not a conversion)
_OTHER_FILES = {
    "streamrank-gas": "a GAS feature ranking (streamrank select-features), not a dataset; to train on its top K "
                      "features, use features={path}:K with the dataset it was selected on",
    "streamrank-gas-similarity": "a GAS ranking's feature similarities, not a dataset",
    "streamrank-checkpoint": "a training checkpoint, not a dataset; a training continues from it: use checkpoint=DIR "
                             "and resume=True",
    "streamrank-feature-cache": "a feature map's cache, made where a training was told (cache_dir=DIR), not a dataset",
}


def converted_name(path):
    """A name for the dataset of text ``path`` that is not ``path`` itself (convert refuses to
    write over its input): ``NAME.h5`` beside ``NAME.txt``, ``NAME.converted.h5`` beside ``NAME.h5``."""
    p = Path(path)
    name = p.with_suffix(".h5").name
    return p.with_name(p.stem + ".converted.h5").name if name == p.name else name


def _check_format(f, path):
    fmt = f.attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if fmt == "streamrank-model":
        raise FormatError(f"{path}: this is a streamrank model, not a dataset; give it as MODEL "
                          f"(streamrank predict {path} DATA -o SCORES.txt)")
    if fmt in _OTHER_FILES:
        raise FormatError(f"{path}: this is {_OTHER_FILES[fmt].format(path=path)}")
    key = _pandas_key(f) if fmt != FORMAT_NAME else None
    if key == "":
        raise FormatError(f"{path}: a PyTables file (pandas' DataFrame.to_hdf) that holds no DataFrame (an empty "
                          f"one writes none), not a streamrank dataset; write the rows again, then convert them")
    if key is not None:
        raise FormatError(
            f"{path}: a pandas DataFrame (DataFrame.to_hdf, key {key!r}), not a streamrank dataset. Convert it: in "
            f"Python, df = pandas.read_hdf({str(path)!r}, {key!r}); sklearn.datasets.dump_svmlight_file("
            f"df[FEATURES], df[LABEL], 'data.txt', query_id=df[QID].to_numpy().copy(), zero_based=False); "
            f"then streamrank convert data.txt -o data.h5")
    if fmt != FORMAT_NAME:
        raise FormatError(
            f"{path}: not a streamrank dataset (format attribute {fmt!r}, expected {FORMAT_NAME!r}). "
            f"Convert the LETOR/SVMlight text it came from into a new file: streamrank convert TEXT -o "
            f"{converted_name(path)}")
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


def _pandas_key(f):
    """The key (its path, "a/b" for a nested one) of the first DataFrame or Series that pandas'
    ``to_hdf`` (PyTables) stored in ``f`` (pandas marks each with a ``pandas_type`` attribute); ""
    for a PyTables file without one; None for any other file."""
    try:
        key = f.visititems(lambda name, item: name if "pandas_type" in item.attrs else None)
    except (OSError, KeyError, RuntimeError):  # a damaged file: the format check names it
        return None
    return key if key is not None else ("" if "PYTABLES_FORMAT_VERSION" in f.attrs else None)


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


def _first_bad_numpy(a):
    """Index of the first value of ``a`` (any layout, in C order) that is not finite, or -1."""
    bad = np.flatnonzero(~np.isfinite(np.asarray(a, np.float32).reshape(-1)))
    return int(bad[0]) if bad.size else -1


def not_a_permutation(r):
    """None when ``r`` (int64 (n,)) holds each of 0..n-1 once, else what is wrong, naming the first
    offending stored row. n bytes beside ``r``: range by min/max, then each value marked once; n
    marks in range cover 0..n-1 exactly when no value repeats (pigeonhole)."""
    n = r.shape[0]
    if n == 0:
        return None
    lo, hi = int(r.min()), int(r.max())
    if lo < 0 or hi >= n:
        i = int(np.flatnonzero((r < 0) | (r >= n))[0])
        return f"stored row {i} maps to {int(r[i])}, outside 0..{n - 1}"
    seen = np.zeros(n, np.bool_)
    seen[r] = True
    if seen.all():
        return None
    # a value repeats: the first stored row that repeats an earlier one (the error path only sorts)
    order = np.argsort(r, kind="stable")
    s = r[order]
    dup = np.flatnonzero(s[1:] == s[:-1])
    firsts = order[dup + 1]
    k = int(np.argmin(firsts))
    return (f"stored rows {int(order[dup[k]])} and {int(firsts[k])} both map to {int(s[dup[k]])}, "
            f"and no row maps to {int(np.flatnonzero(~seen)[0])}")


def _bad_row(path, n_rows, what):
    return FormatError(f"{path}: /row must map each stored row to its input line, a permutation of 0..{n_rows - 1}; "
                       f"{what}. Convert the original text again, or delete /row (h5py: del f['row']) to read "
                       f"the rows in stored order")


def _damaged(path, what):
    return FormatError(f"{path}: {what}; the file is damaged or was changed after it was written. "
                       f"Convert the data again from the original text")


class Dataset:
    """A read-only streamrank dataset (HDF5, format version 2, or 1 unverified).

    Attributes
    ----------
    n_rows, n_features, n_queries : int
    query_ids : array (n_queries,): ONE PER QUERY
        The original query ids (int64, or str when not integers), in stored order.
    query_ptr : int64 array (n_queries + 1,): row offsets
        Rows of query q are ``query_ptr[q]:query_ptr[q+1]``.
    query_sizes : int64 array (n_queries,): rows per query
        LightGBM's ``group``, XGBoost's ``set_group``.
    row_query_ids(start, stop) : array (stop - start,): ONE PER ROW
        Each row's query id: the ``qid`` that ``fit(X, y, qid=...)``, ``predict`` and ``score``
        take (``streamrank.load_ranking(path)`` returns it beside X and y).
    row : int64 array (n_rows,)
        Each stored row's position in the input text.
    qid
        Deprecated: ``query_ids`` (one per query, not per row).
    fingerprint : str
        sha256 of the content (X, y, query_ptr, qid) as written; with version 2's checksums, a
        file that reads without error still holds exactly that content.
    verified : bool
        Whether reads are checked (format version 2: Fletcher-32 per chunk, the index by its
        sha256 at open).

    Every value read, in either version, is checked to be finite the first time this process
    reads its rows (:meth:`read`, and ``X`` / ``y`` read directly): a NaN or an infinity is refused
    with its row and feature, whoever wrote the file.
    """

    def __init__(self, path):
        from streamrank.io.urls import is_url
        self._remote = None  # a store's object (io.remote_file): block reads prefetch their chunks
        if is_url(path):
            self._open_url(str(path))
            return
        self.path = Path(path)
        self.name = str(self.path)  # what messages call it (open_data: the text file it came from)
        if not self.path.exists():
            raise FileNotFoundError(f"{self.path}: no such file")
        if self.path.is_dir():
            raise InputError(f"{self.path} is a directory; give a dataset file (.h5) or LETOR/SVMlight text")
        if not h5py.is_hdf5(self.path):
            raise FormatError(f"{self.path}: not an HDF5 file. If it is LETOR/SVMlight text, convert it "
                              f"with: streamrank convert {self.path} "
                              f"-o {self.path.with_name(converted_name(self.path))}")
        try:
            self._file = h5py.File(self.path, "r", rdcc_nbytes=4 << 20)
        except OSError as e:
            raise _damaged(self.path, f"HDF5 cannot open it ({e})") from None
        try:
            self._open()
        except BaseException:
            self._file.close()
            raise
        # while it is open no output may be this file or a link to it (io.atomic's writers refuse)
        self._input_token = register_input(self.path, "dataset")

    def _open_url(self, url):
        """Open the dataset at a URL (:mod:`streamrank.io.urls`) through a RemoteFile."""
        from streamrank.io.remote_file import RemoteFile
        from streamrank.io.urls import Url, current_options, filesystem, size_of
        self.path = Url(url)
        self._options = current_options() or None
        self.name = self.path.shown
        fs, inner = filesystem(url)
        self._remote = RemoteFile(fs, inner, size_of(url), url)
        if self._remote.read(8) != HDF5_SIGNATURE:
            raise FormatError(f"{self.name}: not an HDF5 file (a streamrank dataset starts with HDF5's signature); "
                              f"convert text with: streamrank convert TEXT -o OUT.h5")
        try:
            self._file = h5py.File(self._remote, "r", rdcc_nbytes=4 << 20)
        except OSError as e:
            raise _damaged(self.name, f"HDF5 cannot open it ({e})") from None
        self._chunk_ranges_of = {}
        try:
            self._open()
        except BaseException:
            self._file.close()
            raise
        self._input_token = register_input(url, "dataset")  # no output may be this object while it is read

    def _chunk_ranges(self, start, stop):
        """Byte ranges in the file of the chunks of /X and /y that hold rows start:stop."""
        out = []
        for ds in (self._X, self._y):
            if ds.chunks is None:  # contiguous: the rows' bytes
                row = ds.dtype.itemsize * int(np.prod(ds.shape[1:], dtype=np.int64))
                base = ds.id.get_offset()
                out.append((base + start * row, base + stop * row))
                continue
            cr = ds.chunks[0]
            cols = range(0, ds.shape[1], ds.chunks[1]) if ds.ndim == 2 else [None]
            for k in range(start // cr, (stop - 1) // cr + 1):
                for c in cols:
                    key = (ds.name, k, c)
                    r = self._chunk_ranges_of.get(key)
                    if r is None:
                        info = ds.id.get_chunk_info_by_coord((k * cr,) if c is None else (k * cr, c))
                        r = self._chunk_ranges_of[key] = (info.byte_offset, info.byte_offset + info.size)
                    out.append(r)
        return out

    def _open(self):
        f, path = self._file, self.path
        try:
            self.version = _check_format(f, path)
            self.n_rows = _int_attr(f, path, "n_rows")
            self.n_features = _int_attr(f, path, "n_features")
            self.n_queries = _int_attr(f, path, "n_queries")
            self.index_base = _int_attr(f, path, "index_base", 1)
            self._X, self._y = f["X"], f["y"]
            self.X, self.y = CheckedRows(self, self._X, "X"), CheckedRows(self, self._y, "y")
            # the index is checked before anything is allocated from the attributes
            if min(self.n_rows, self.n_features, self.n_queries) < 0:
                raise _damaged(path, "negative sizes in its attributes")
            if f["query_ptr"].shape != (self.n_queries + 1,) or f["qid"].shape != (self.n_queries,):
                raise _damaged(path, f"/query_ptr or /qid does not have the {self.n_queries} queries its "
                                     f"attributes declare")
            if self._X.shape != (self.n_rows, self.n_features) or self._y.shape != (self.n_rows,):
                raise _damaged(path, f"/X or /y does not have the shape its attributes declare "
                                     f"({self.n_rows} rows, {self.n_features} features)")
            self._check_row_layout()
            if self._X.dtype != np.float32 or self._y.dtype != np.float32:
                raise _damaged(path, f"/X and /y must be float32; got {self._X.dtype} and {self._y.dtype}")
            self.verified = self.version >= 2
            if self.verified and not (self._X.fletcher32 and self._y.fletcher32):
                raise _damaged(path, "it claims format version 2 but /X or /y carries no checksums")
            self._check_storage()
            self.query_ptr = f["query_ptr"][:].astype(np.int64)
            qp = self.query_ptr
            if qp[0] != 0 or qp[-1] != self.n_rows or np.any(np.diff(qp) < 0):
                raise _damaged(path, f"its query index /query_ptr is not a non-decreasing list from 0 to "
                                     f"{self.n_rows} rows")
            if self.verified:
                q = self.query_ids
                if index_digest(qp, q if q.dtype.kind in "iu" else list(q)) != f.attrs.get("index_sha256"):
                    raise _damaged(path, "its query index (/query_ptr, /qid) does not match index_sha256")
            elif str(path) not in _UNVERIFIED_SAID:
                _UNVERIFIED_SAID.add(str(path))
                log.warning("%s: dataset format version 1 carries no checksums, so damaged bytes would go "
                            "unnoticed; convert it again to get a verified version 2 file", path)
        except OSError as e:  # HDF5's own errors: a damaged chunk, a truncated file
            raise _damaged(path, f"HDF5 cannot read its index ({e})") from None
        self._fingerprint = f.attrs.get("content_sha256")
        self._row_checked = False  # /row's values: checked on their first read (Dataset.row)
        # (start, stop) row ranges read once in this process: their values were checked to be finite
        # and (version 2) their chunks' checksums; later reads of the same rows skip both
        self._verified = set()
        self._piece_rows = self._plan_pieces()
        self._rx, self._ry = RowReader(self._X), RowReader(self._y)

    def _check_row_layout(self):
        """``/row``, when present, is a dataset of ``n_rows`` integers (its values are checked where
        they are first read: :attr:`row`)."""
        f = self._file
        if "row" not in f:
            return
        r = f["row"]
        if not isinstance(r, h5py.Dataset) or r.dtype.kind not in "iu" or r.shape != (self.n_rows,):
            what = "not a dataset" if not isinstance(r, h5py.Dataset) else f"{r.dtype} {r.shape}"
            raise _bad_row(self.path, self.n_rows, f"it is {what}, not {self.n_rows} integers")

    def _check_storage(self):
        """The chunk of X that holds the last row exists: a file whose attributes claim more rows
        than were written (HDF5 reads absent chunks as zeros) is refused before anything is read."""
        X = self._X
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
    def query_ids(self):
        """The original query ids, ONE PER QUERY (``n_queries``), in stored order: int64, or str
        (object array) when they are not integers. Per row: :meth:`row_query_ids`."""
        q = self._file["qid"]
        if h5py.check_string_dtype(q.dtype) is not None:
            return q.asstr()[:]
        return q[:]

    @property
    def query_sizes(self):
        """Rows of each query (int64 (n_queries,)): ``np.diff(query_ptr)``, LightGBM's ``group``."""
        return np.diff(self.query_ptr)

    def row_query_ids(self, start=0, stop=None):
        """The query id of each stored row ``start:stop`` (default every row), ONE PER ROW: the
        ``qid`` that ``fit(X, y, qid=...)`` takes beside ``X, y = ds.read(start, stop)``."""
        stop = self.n_rows if stop is None else stop
        if not 0 <= start <= stop <= self.n_rows:
            raise IndexError(f"{self.path}: rows {start}:{stop} lie outside its {self.n_rows} rows")
        # the query of row r is the last q with query_ptr[q] <= r (an empty query holds no row)
        q = np.searchsorted(self.query_ptr, np.arange(start, stop), side="right") - 1
        return self.query_ids[q]

    @property
    def qid(self):
        """Deprecated alias of :attr:`query_ids`: ONE id PER QUERY, not the per-row ``qid`` that
        ``fit`` takes (use :meth:`row_query_ids` or ``streamrank.load_ranking`` for that)."""
        import warnings
        warnings.warn(f"Dataset.qid is deprecated: it holds one id per query ({self.n_queries} here), not one per row "
                      f"as fit(X, y, qid=...) takes. Use Dataset.query_ids for the per-query ids, and "
                      f"Dataset.row_query_ids() or X, y, qid = streamrank.load_ranking(path) for one per row",
                      DeprecationWarning, stacklevel=2)
        return self.query_ids

    @property
    def row(self):
        """Each stored row's position in the input text (int64 (n_rows,)): ``/row``, refused
        (:class:`~streamrank.errors.FormatError`) on its first read in this process unless it is a
        permutation of 0..n_rows-1; a file without ``/row`` is in input order (``arange(n_rows)``).
        Every reader of ``/row`` (predict, eval, grid, cv, the estimator's score) reads it here."""
        if "row" not in self._file:
            return np.arange(self.n_rows, dtype=np.int64)
        try:
            r = self._file["row"][:].astype(np.int64, copy=False)
        except OSError as e:
            raise _damaged(self.path, f"its /row cannot be read ({e})") from None
        if not self._row_checked:
            bad = not_a_permutation(r)
            if bad:
                raise _bad_row(self.path, self.n_rows, bad)
            self._row_checked = True
        return r

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
            rows = min(step, self.n_rows)
            X, y = np.empty((rows, self.n_features), np.float32), np.empty(rows, np.float32)
            for a in range(0, self.n_rows, step):
                b = min(a + step, self.n_rows)
                # the bytes as stored, whatever they hold: `info` reports a non-finite value itself
                self._read_raw(self._rx, X[:b - a], a, b)
                self._read_raw(self._ry, y[:b - a], a, b)
                h.update(X[:b - a], y[:b - a])
            q = self.query_ids
            self._fingerprint = h.hexdigest(self.query_ptr, q if q.dtype.kind in "iu" else list(q))
        return str(self._fingerprint)

    # -- reading ------------------------------------------------------------------------------------
    def read(self, start, stop, out=None):
        """Rows ``start:stop`` as (X float32 (r, d), y float32 (r,)), one contiguous read each.

        ``out``: (X, y) buffers with at least ``stop - start`` rows to read into (views returned).
        The first read of these rows in this process checks them: a damaged chunk (version 2) is
        refused with the rows, a value that is not finite (any version) with its row and feature
        (:class:`~streamrank.errors.InputError`). Every row any pass uses is read here.
        """
        if not 0 <= start <= stop <= self.n_rows:
            raise IndexError(f"{self.path}: rows {start}:{stop} lie outside its {self.n_rows} rows")
        if out is None:
            X = aligned_empty((stop - start, self.n_features), np.float32)
            y = np.empty(stop - start, np.float32)
        else:
            X, y = out[0][:stop - start], out[1][:stop - start]
        if stop > start:
            if self._remote is not None:
                self._remote.prefetch(self._chunk_ranges(start, stop))
            try:
                if (start, stop) in self._verified:
                    # read before in this process: values and checksums checked (io.h5_edc)
                    dxpl = no_check_dxpl() if self.verified else None
                    self._read_raw(self._rx, X, start, stop, dxpl)
                    self._read_raw(self._ry, y, start, stop, dxpl)
                else:
                    self._read_checked(X, y, start, stop)
                    self._verified.add((start, stop))
            except OSError as e:
                raise _damaged(self.path, f"rows {start} to {stop - 1} cannot be read ({e}; a checksum "
                                          f"mismatch means bytes changed on disk)") from None
        return X, y

    @staticmethod
    def _read_raw(reader, out, start, stop, dxpl=None):
        """``out[:] = rows start:stop`` of ``reader``'s dataset through ``dxpl`` where the buffer can
        take the rows as HDF5 lays them out, else through a copy (checksums checked)."""
        if out.size == 0:
            return
        if _fits(out, (stop - start,) + reader.dataset.shape[1:]):
            reader.read(out, start, stop, dxpl)
        else:  # another dtype or a strided buffer
            out[...] = reader.dataset[start:stop]

    def _plan_pieces(self):
        """Rows of one piece of a first read: whole HDF5 chunks of X within ``PIECE_BYTES``."""
        chunk = self._X.chunks[0] if self._X.chunks is not None else 1
        return max(1, PIECE_BYTES // (chunk * 4 * max(self.n_features, 1))) * chunk

    def _read_checked(self, X, y, start, stop):
        """Read rows ``start:stop`` into X, y and scan each piece for values that are not finite
        as soon as it lands (labels whole first: 4 bytes a row). The first one is refused."""
        self._read_raw(self._ry, y, start, stop)
        bad_y = finite.first_non_finite(finite.bits_of(y)) if _fits(y, (stop - start,)) \
            else _first_bad_numpy(y)
        bad_x = -1
        d = self.n_features
        if d and _fits(X, (stop - start, d)) and (stop - start) * 4 * d >= 2 * SCAN_GROUP_BYTES:
            bad_x = self._read_x_scanned_alongside(X, start, stop, bad_y)
        elif d and _fits(X, (stop - start, d)):
            step = self._piece_rows
            p = start
            while p < stop:  # a bounded walk: p grows by at least one row a piece
                if 0 <= bad_y < p - start:
                    break  # the label before this piece is the first bad value
                q = min(stop, (p // step + 1) * step)  # chunk-aligned, so no chunk is read twice
                piece = X[p - start:q - start]
                self._rx.read(piece, p, q)
                j = finite.first_non_finite(finite.bits_of(piece))
                if j >= 0:
                    bad_x = p - start + j // d
                    break
                p = q
        elif d:  # a buffer HDF5 cannot fill as laid out (another dtype, strided): read, then scan
            self._read_raw(self._rx, X, start, stop)
            bad_x = _first_bad_numpy(X)
            bad_x = bad_x // d if bad_x >= 0 else -1
        if bad_x >= 0 or bad_y >= 0:
            # at one row, the label is named (as the writer's check does)
            r = bad_y if bad_y >= 0 and (bad_x < 0 or bad_y <= bad_x) else bad_x
            raise self._not_finite(start + r, None if r == bad_y else X[r], float(y[r]))

    def _read_x_scanned_alongside(self, X, start, stop, bad_y):
        """Read rows ``start:stop`` of X in chunk-aligned groups of about ``SCAN_GROUP_BYTES``,
        each scanned by the scanning thread while the next group is read (the scan holds no GIL,
        HDF5's read does). The index (into X's rows) of the first row holding a
        value that is not finite, or -1; the groups' results are taken in row order, so it is
        the same row the serial scan finds."""
        d, step = self.n_features, self._piece_rows
        group_rows = max(step, SCAN_GROUP_BYTES // (4 * d) // step * step)  # whole chunks
        pending, bad_x, p = [], -1, start
        try:
            while p < stop and bad_x < 0:  # a bounded walk: p grows by at least one row a group
                if 0 <= bad_y < p - start:
                    break  # the label before this group is the first bad value
                # one HDF5 call a group (a call a chunk costs more than the scan saves),
                # chunk-aligned, so no chunk is read twice
                q = min(stop, (p // group_rows + 1) * group_rows)
                self._rx.read(X[p - start:q - start], p, q)
                pending.append((p - start, _scanner().submit(finite.first_non_finite,
                                                             finite.bits_of(X[p - start:q - start]))))
                p = q
                while pending and pending[0][1].done():  # stop reading at the first bad group found
                    off, f = pending.pop(0)
                    j = f.result()
                    if j >= 0:
                        bad_x = off + j // d
                        break
            while pending and bad_x < 0:
                off, f = pending.pop(0)
                j = f.result()
                if j >= 0:
                    bad_x = off + j // d
        finally:
            for _, f in pending:  # an error or a signal: the scans of this buffer end before it is reused
                f.cancel() or f.exception()
        return bad_x

    def where(self, row):
        """Stored row ``row`` as the user knows it: "input data row N, qid Q" (what of it can be
        read; "" when neither can)."""
        extra = []
        try:
            line = int(self._file["row"][row]) if "row" in self._file else row
            if 0 <= line < self.n_rows:  # a /row out of range (not yet checked) names no input row
                extra.append(f"input data row {line + 1}")
            q = int(np.searchsorted(self.query_ptr, row, side="right")) - 1
            qid = self.query_ids[q]
            extra.append(f"qid {qid.decode() if isinstance(qid, bytes) else qid}")
        except (OSError, ValueError, IndexError):  # a damaged /row or /qid: the stored row still names it
            pass
        return ", ".join(extra)

    def _not_finite(self, row, x_row, label):
        """The error for stored row ``row``: its first non-finite feature in ``x_row`` (None: its
        label ``label``), named as the user knows it."""
        where = self.where(row)
        extra = [where] if where else []
        if x_row is None:
            what = f"label: {label}"
        else:
            j = int(np.flatnonzero(~np.isfinite(x_row))[0])
            what = f"feature {j + self.index_base}: {x_row[j]}"
        return InputError(f"{self.name}: stored row {row}, {what} is not a finite number"
                          f"{' (' + ', '.join(extra) + ')' if extra else ''}; streamrank trains and predicts on "
                          f"finite values only. Fix or drop that row where the file was written, or convert the "
                          f"original text again (streamrank info {self.path} counts every such value)")

    def labels(self, check=True):
        """Every row's label (float32 (n_rows,)); refused, with its row, if one is not finite,
        unless ``check`` is False (``streamrank info`` shows them as they are)."""
        y = np.empty(self.n_rows, np.float32)
        step = 1 << 22
        try:
            for a in range(0, self.n_rows, step):
                b = min(a + step, self.n_rows)
                self._read_raw(self._ry, y[a:b], a, b)
        except OSError as e:
            raise _damaged(self.path, f"its labels cannot be read ({e})") from None
        if check:
            r = finite.first_non_finite(y.view(np.uint32))
            if r >= 0:
                raise self._not_finite(r, None, float(y[r]))
        return y

    def non_finite(self):
        """Values of X and y that are not finite: ``{"count", "count_features", "count_labels",
        "first"}`` with ``first`` None or ``{"row", "feature" (None for the label), "value",
        "message"}``. One pass over every row (``streamrank info``), in pieces of ``PIECE_BYTES``."""
        d, n = self.n_features, self.n_rows
        step = max(1, PIECE_BYTES // (4 * max(d, 1)))
        X, y = np.empty((min(step, n), d), np.float32), np.empty(min(step, n), np.float32)
        count_x = count_y = 0
        first = None
        try:
            for a in range(0, n, step):
                b = min(a + step, n)
                Xa, ya = X[:b - a], y[:b - a]
                self._read_raw(self._rx, Xa, a, b)
                self._read_raw(self._ry, ya, a, b)
                cx, cy = finite.count_non_finite(finite.bits_of(Xa)), finite.count_non_finite(finite.bits_of(ya))
                count_x, count_y = count_x + cx, count_y + cy
                if first is None and (cx or cy):
                    rx = finite.first_non_finite(finite.bits_of(Xa)) // max(d, 1) if cx else b - a
                    ry = finite.first_non_finite(finite.bits_of(ya)) if cy else b - a
                    r = min(rx, ry)
                    label = ry == r
                    j = None if label else int(np.flatnonzero(~np.isfinite(Xa[r]))[0])
                    err = self._not_finite(a + r, None if label else Xa[r], float(ya[r]))
                    first = {"row": a + r, "feature": None if label else j + self.index_base,
                             "value": str(ya[r] if label else Xa[r, j]), "message": str(err)}
        except OSError as e:
            raise _damaged(self.path, f"its rows cannot be read ({e})") from None
        return {"count": count_x + count_y, "count_features": count_x, "count_labels": count_y, "first": first}

    def stream(self, *, block_bytes: "int | str | None" = None, memory_budget: "int | str | None" = None,
               queries: "tuple[int, int] | None" = None, **kwargs) -> "QueryStream":
        """Query-aligned blocks of this dataset: iterate over ``(block, start, stop)``.

        Parameters
        ----------
        block_bytes : int or str, optional
            Raw bytes of one block (X and y); by default the stream's share of ``memory_budget``.
            A block always holds whole queries; the results of a pass do not depend on its size.
        memory_budget : int or str, optional
            The run's budget (default 2GB), used only to derive ``block_bytes``.
        queries : (int, int), optional
            Only the contiguous queries ``[q0, q1)``.
        **kwargs
            The other keywords of :class:`~streamrank.io.query_stream.QueryStream` (prefetch,
            reuse_buffers, row_bytes, partition_rows).

        Returns
        -------
        QueryStream
            Yields ``(block, start, stop)``: ``block.X`` (rows x features, float32), ``block.y``,
            ``block.query_ptr``; rows ``start:stop`` of the dataset's stored order.
        """
        kwargs.update(block_bytes=block_bytes, memory_budget=memory_budget, queries=queries)
        from streamrank.io.query_stream import QueryStream, stream_of
        qs = QueryStream(self, **kwargs)
        qs.spec = (stream_of, {"dataset": self, **kwargs})  # how a worker makes a part of it
        return qs

    def close(self):
        forget_input(getattr(self, "_input_token", None))
        self._input_token = None
        self._file.close()

    def __reduce__(self):
        # another process (a dask worker) opens the same file by its path: a shared or replicated
        # file system is the deployment assumption, checked by the content fingerprint
        if self._remote is not None:  # a URL, with the storage options it was opened with
            return (reopen, (str(self.path), self.fingerprint, self.name, self._options))
        return (reopen, (str(self.path.resolve()), self.fingerprint, self.name))  # not relative to this cwd

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return (f"<streamrank.Dataset {self.path.name}: {self.n_rows} rows, {self.n_queries} queries, "
                f"{self.n_features} features>")


class CheckedRows:
    """``Dataset.X`` / ``Dataset.y``: the HDF5 dataset, whose values read through ``[...]``,
    ``read_direct`` or ``np.asarray`` are checked to be finite (labels read by ``eval`` or the
    training's statistics, a caller's own slices). Everything else is h5py's."""

    def __init__(self, dataset, column, name):
        # a weak reference: a dataset dropped without close() still closes its file when collected
        self._ds, self._column, self._name = weakref.ref(dataset), column, name

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_ds", "_column", "_name"):
            raise AttributeError(name)
        return getattr(self._column, name)

    def __len__(self):
        return len(self._column)

    def __repr__(self):
        return f"<checked {self._column!r}>"

    def __getitem__(self, sel):
        a = self._column[sel]
        self._check(a, sel)
        return a

    def __array__(self, dtype=None, copy=None):
        a = self[()]
        return a if dtype is None else a.astype(dtype)

    def read_direct(self, dest, source_sel=None, dest_sel=None):
        self._column.read_direct(dest, source_sel, dest_sel)
        self._check(dest if dest_sel is None else dest[dest_sel], source_sel)

    def _check(self, a, sel):
        a = np.asarray(a)
        k = _first_bad_numpy(a)
        if k < 0:
            return
        ds = self._ds()
        rows = sel[0] if isinstance(sel, tuple) and sel else sel
        if rows is None or rows is Ellipsis or (isinstance(sel, tuple) and not sel):
            rows = slice(None)
        if isinstance(rows, (int, np.integer)):
            r = range(ds.n_rows)[rows]
        elif isinstance(rows, slice):
            picked = range(ds.n_rows)[rows]
            r = picked[k // max(1, a.size // max(1, len(picked)))]
        else:  # a fancy selection: the file's first value that is not finite is named
            raise InputError(ds.non_finite()["first"]["message"])
        raise ds._not_finite(r, None if self._name == "y" else ds._X[r], float(ds._y[r]))


_REOPENED: dict = {}


def why_unreadable(url, options, fingerprint):
    """Why this process (a dask worker, before a run's first pass) cannot read the dataset at
    ``url`` with storage ``options`` and content ``fingerprint``; None when it can."""
    from streamrank.io.urls import storage_options
    try:
        with storage_options(options), Dataset(url) as ds:
            if ds.fingerprint != fingerprint:
                return "it sees other content there than the run started on"
    except Exception as e:  # noqa: BLE001 - any failure is the reason this worker cannot take part
        return f"{type(e).__name__}: {str(e)[:300]}"
    return None


def reopen(path, fingerprint, name=None, options=None):
    """The dataset at ``path`` in this process, checked to hold the content ``fingerprint`` (one
    open file per path and content, kept for the process's later tasks); a URL is opened with the
    storage ``options`` it was opened with where the run started (a worker reads its own ranges
    of the object: no shared file system)."""
    from streamrank.io.urls import is_url, shown, storage_options
    key = (path, fingerprint)
    ds = _REOPENED.get(key)
    if ds is None:
        import socket
        try:
            with storage_options(options):
                ds = Dataset(path)
        except (OSError, StreamrankError) as e:
            if is_url(path):
                raise FormatError(f"{shown(path)}: this worker ({socket.gethostname()}) cannot read the dataset "
                                  f"({e}); give the workers the protocol's package and access to the store "
                                  f"(credentials by the environment, or storage_options)") from None
            raise FormatError(f"{path}: this worker ({socket.gethostname()}) cannot open the dataset ({e}). "
                              f"Workers read the data by its path: give every worker the same file at the "
                              f"same path (a shared or replicated file system), or keep it in a bucket "
                              f"(s3://...)") from None
        if ds.fingerprint != fingerprint:
            ds.close()
            raise FormatError(f"{path}: this worker ({socket.gethostname()}) sees a file of other content than "
                              f"the one training started on. Workers read the data by its path: give every "
                              f"worker the same file at the same path")
        ds.name = name or ds.name
        _REOPENED[key] = ds
    return ds


def open_dataset(path: "str | os.PathLike[str]") -> "Dataset":
    """Open a streamrank HDF5 dataset for reading.

    Parameters
    ----------
    path : str or path-like
        A dataset that ``streamrank convert`` (or :class:`~streamrank.io.hdf5_format.DatasetWriter`)
        wrote, of any released format version.

    Returns
    -------
    Dataset
        Open for reading; close it, or use it as a context manager (``with open_dataset(p) as ds``).

    Raises
    ------
    InputError
        The file is missing, not HDF5, or not a streamrank dataset (one line naming the file and
        what would read it).
    """
    return Dataset(path)
