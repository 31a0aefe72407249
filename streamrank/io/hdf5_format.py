"""The HDF5 dataset file (format ``streamrank-dataset`` version 2) and its streaming writer.

Layout (DESIGN.md, "Dataset file"):

- root attrs: ``format``, ``version``, ``n_rows``, ``n_features``, ``n_queries``, ``index_base``,
  ``source`` (JSON list of ``{"name", "sha256"}``), ``created_by``, ``content_sha256`` (the dataset
  fingerprint: sha256 of X, y, query_ptr and qid in file order), ``qid_kind`` (``int`` or ``str``),
  ``compression``, ``chunk_rows``, ``extra`` (JSON, e.g. generator settings), ``index_sha256``
  (sha256 of query_ptr and qid as written; checked when the file is opened).
- ``/X`` float32 ``(n_rows, n_features)`` chunked by rows; ``/y`` float32; ``/query_ptr`` int64
  ``(n_queries + 1,)``; ``/qid`` int64 or variable-length str ``(n_queries,)``; ``/row`` int64: each
  row's position in the input.
- Version 2: every numeric dataset is chunked with HDF5's Fletcher-32 filter, so a damaged chunk is
  found when it is read (HDF5 checks the chunk's checksum; a reader checks each block the first
  time its process reads it, :mod:`streamrank.io.h5_edc`), and the index by
  ``index_sha256`` when the file opens; ``content_sha256`` is the content as written, and with
  the checksums a file that still reads is that content. Version 1 (no checksums) still loads,
  unverified. Values are finite: the writer refuses NaN and infinities.
- optional ``/comment``: a group with ``data`` (uint8, every row's comment bytes concatenated, UTF-8)
  and ``ptr`` (int64, ``n_rows + 1``): row r's comment is ``data[ptr[r]:ptr[r+1]]``. One flat byte
  array instead of a variable-length string per row: HDF5 writes variable-length strings one Python
  object at a time, which costs more than parsing the row.

The writer receives rows in input order. Queries whose rows arrive in one contiguous run each (the
LETOR norm) are written straight through, with memory independent of the input size. When a query
comes back after another one started, the writer regroups at the end (stable within a query, queries
in order of first appearance) in as many sequential passes over the input-order file as the memory
budget requires; that costs one int per row of index in memory. Everything is written to a temporary
name and renamed only once complete, so an interrupted write never leaves a file that opens. A
resumable writer (``work_path``, ``resume``; used by ``convert``) names its partial file, commits
its state (:meth:`DatasetWriter.commit_state`: the query bookkeeping goes into the partial file's
``/_resume`` group, removed at close) and continues from a commit after checking the committed
rows against their digests.
"""

import hashlib
import json
import os
from array import array
from pathlib import Path

import h5py
import numba
import numpy as np

from streamrank._native import finite as _finite
from streamrank._native import numba_cache
from streamrank._version import __version__
from streamrank.errors import InputError, StreamrankError
from streamrank.faultpoints import faultpoint
from streamrank.io.atomic import (
    atomic_replace,
    check_not_input,
    discard_h5,
    ensure_space,
    fsync_file,
    remove_stale_temps,
    storage_error,
    temp_name,
)

FORMAT_NAME = "streamrank-dataset"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)  # version 1: the same layout without checksums

# Defaults chosen by tools/bench_chunking.py (docs/benchmarks-archive.md, "Storage defaults"): chunks of about 1 MB of
# rows; no compression, because float32 LETOR features barely compress (lzf saves ~10-20%, gzip
# ~30%) while both slow down every training pass, which is read many times.
DEFAULT_COMPRESSION = "none"
DEFAULT_CHUNK_BYTES = 1 << 20
COMPRESSIONS = ("none", "lzf", "gzip")
GZIP_LEVEL = 4

# HDF5's chunk cache of each dataset being written (X, y and the comments' two): it holds the
# partly filled chunks between appends
WRITER_CACHE_BYTES_EACH = 4 << 20
WRITER_CACHE_BYTES = 4 * WRITER_CACHE_BYTES_EACH

# Regrouping scattered queries: bytes of output rows assembled in memory per pass over the input.
DEFAULT_REGROUP_BYTES = 256 << 20


# the group of a partial file that holds what a resumed writer needs besides the rows
RESUME_GROUP = "_resume"


def _extend(g, name, tail, at):
    """Write ``tail`` (int64 or uint8) into dataset ``name`` of group ``g`` from element ``at``
    on, and cut the dataset there (what a killed commit wrote beyond its record goes)."""
    if name not in g:
        g.create_dataset(name, shape=(0,), maxshape=(None,), dtype=tail.dtype, chunks=(1 << 14,))
    d = g[name]
    d.resize((at + tail.shape[0],))
    if tail.shape[0]:
        d[at:] = tail


class ResumeError(StreamrankError):
    """A partly written file cannot be continued (it is then written again from the start)."""


class ContentHash:
    """The dataset fingerprint: sha256 over X, y, query_ptr and qid in file order.

    X and y are hashed by separate running digests, so the result does not depend on how the
    rows were split into blocks on the way.
    """

    def __init__(self):
        self._x = hashlib.sha256()
        self._y = hashlib.sha256()

    def update(self, X, y):
        self._x.update(np.ascontiguousarray(X, np.float32).data)
        self._y.update(np.ascontiguousarray(y, np.float32).data)

    def digests(self):
        """Hex digests of the X and y bytes so far (the running digests go on)."""
        return self._x.copy().hexdigest(), self._y.copy().hexdigest()

    def hexdigest(self, query_ptr, qid):
        """Combine with the index; ``qid`` int64 array or list of str."""
        h = hashlib.sha256(self._x.digest() + self._y.digest())
        h.update(np.asarray(query_ptr, np.int64).tobytes())
        if isinstance(qid, np.ndarray) and qid.dtype.kind in "iu":
            h.update(qid.astype(np.int64).tobytes())
        else:
            h.update("\0".join(str(q) for q in qid).encode())
        return h.hexdigest()


def index_digest(query_ptr, qid):
    """``index_sha256``: sha256 of query_ptr (int64) and the query ids (int64, or str joined by NUL)."""
    h = hashlib.sha256(np.ascontiguousarray(query_ptr, np.int64).tobytes())
    if isinstance(qid, np.ndarray) and qid.dtype.kind in "iu":
        h.update(qid.astype(np.int64).tobytes())
    else:
        h.update("\0".join(str(q) for q in qid).encode())
    return h.hexdigest()


def _compression_kwargs(compression):
    """Filters of every chunked dataset: the compression, then Fletcher-32 (format version 2)."""
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)}; got {compression!r}")
    if compression == "gzip":
        return {"compression": "gzip", "compression_opts": GZIP_LEVEL, "fletcher32": True}
    if compression == "lzf":
        return {"compression": "lzf", "fletcher32": True}
    return {"fletcher32": True}


def first_non_finite(X, y, row0=0, index_base=1):
    """None when every value of X and y is finite, else where the first non-finite one is:
    "row R, feature J: VALUE" (R counted from ``row0``, J numbered from ``index_base``)."""
    if all(a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable for a in (X, y)):
        # one vectorised pass over the bits, no temporaries (streamrank._native.finite)
        if _finite.first_non_finite(_finite.bits_of(X)) < 0 and _finite.first_non_finite(_finite.bits_of(y)) < 0:
            return None
    elif np.isfinite(X).all() and np.isfinite(y).all():
        return None
    bad_x = ~np.isfinite(X)
    rows_x = np.flatnonzero(bad_x.any(axis=1))
    rows_y = np.flatnonzero(~np.isfinite(y))
    r = min(rows_x[0] if rows_x.size else len(y), rows_y[0] if rows_y.size else len(y))
    if rows_y.size and rows_y[0] == r:
        return f"row {row0 + r}, label: {y[r]}"
    j = int(np.flatnonzero(bad_x[r])[0])
    return f"row {row0 + r}, feature {j + index_base}: {X[r, j]}"


@numba.njit(cache=True, nogil=True)
def _regroup_dest(run_start, run_query, run_len, query_ptr, dest):
    """dest[row] = the row's position grouped by query: runs in input order, each placed after
    the rows of its query placed before it (stable; one cursor per query, no per-run temporaries)."""
    cursor = query_ptr[:-1].copy()
    for r in range(run_start.shape[0]):
        q = run_query[r]
        at = cursor[q]
        s = run_start[r]
        for t in range(run_len[r]):
            dest[s + t] = at + t
        cursor[q] = at + run_len[r]


@numba.njit(cache=True, nogil=True)
def _copy_spans(src, src_start, lengths, dst, dst_start):
    """dst[dst_start[k]:+lengths[k]] = src[src_start[k]:+lengths[k]] for every k."""
    for k in range(lengths.shape[0]):
        s = src_start[k]
        d = dst_start[k]
        for t in range(lengths[k]):
            dst[d + t] = src[s + t]


class DatasetWriter:
    """Write a streamrank dataset row block by row block.

    Parameters
    ----------
    path : str or Path
        Final file name; nothing appears there until :meth:`close` succeeds.
    n_features : int, optional
        Width of X. With ``fixed_width=True`` wider rows are an error; otherwise X widens as
        wider blocks arrive (earlier rows read 0 in the new columns).
    compression : {"none", "lzf", "gzip"}
    chunk_bytes : int
        Target size of one HDF5 chunk of X (whole rows).
    index_base : {0, 1}
        How feature indices were numbered in the text (recorded, not used here).
    source : list of dict
        ``{"name": ..., "sha256": ...}`` per input.
    comments : bool
        Whether :meth:`append` receives per-row comments.
    regroup_bytes : int
        Memory for assembling regrouped rows when queries arrive scattered.
    extra : dict, optional
        JSON-serialisable provenance stored in the ``extra`` attribute.
    work_path : path, optional
        Where the file is written until :meth:`close` (default: a temporary name of this
        process); a resumable writer (:meth:`commit_state`) names it.
    resume : dict, optional
        A state of :meth:`commit_state`: reopen ``work_path``, drop whatever was appended after
        that commit, verify the committed rows against their digests, and go on from there.
    """

    def __init__(self, path, n_features=None, *, compression=DEFAULT_COMPRESSION,
                 chunk_bytes=DEFAULT_CHUNK_BYTES, index_base=1, source=(), comments=False,
                 fixed_width=False, regroup_bytes=DEFAULT_REGROUP_BYTES, extra=None, work_path=None, resume=None):
        self.path = Path(path)
        self.compression = compression
        self._ckw = _compression_kwargs(compression)
        self.chunk_bytes = int(chunk_bytes)
        self.index_base = int(index_base)
        self.source = list(source)
        self.comments = bool(comments)
        self.fixed_width = bool(fixed_width)
        self.regroup_bytes = int(regroup_bytes)
        self.extra = dict(extra or {})
        self.n_features = None if n_features is None else int(n_features)
        self.n_rows = 0
        self._widened = False
        check_not_input(self.path, "dataset")  # refused before any row is written (atomic_replace: again at the end)
        remove_stale_temps(self.path)  # what writers killed earlier left behind
        self._tmp = Path(work_path) if work_path is not None else temp_name(self.path)
        self._regroup_tmp().unlink(missing_ok=True)  # a killed close's copy: regrouping starts over
        try:
            self._file = h5py.File(self._tmp, "r+" if resume else "w", rdcc_nbytes=WRITER_CACHE_BYTES_EACH,
                                   rdcc_nslots=10007)
        except OSError as e:
            if resume:
                raise ResumeError(f"{self._tmp}: cannot be reopened ({e})") from None
            raise storage_error(self.path, e) from None
        self._file_path = self._tmp  # the file self._file writes (the regrouped copy at the end)
        self._logical_bytes = 0  # bytes of rows appended, on disk or still in HDF5's chunk cache
        self._X = None
        self._y = None
        self._cdata = None
        self._cptr = None
        self._n_cbytes = 0
        # query bookkeeping: key -> query index (first appearance), one entry per run of rows
        self._qid_kind = None
        self._key_index = {}
        self._keys = []
        self._run_start = array("q")
        self._run_query = array("q")
        self._scattered = False
        self._hash = ContentHash()
        self.keep_on_failure = False  # close(): keep the partial file for a resume if it fails
        # what commit_state has stored of the query bookkeeping in /_resume
        self._persisted = {"runs": 0, "keys": 0, "kind": None, "key_bytes": 0}
        # the comments' bytes and their lengths, by separate running digests (for resuming)
        self._chash = (hashlib.sha256(), hashlib.sha256())
        self._closed = False
        if resume:
            try:
                self._restore(resume)
            except BaseException:
                self._file.close()
                raise

    # -- context manager: commit on success, remove the temporary file on error --------------
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    def _create_X(self, width, first_rows, first_cbytes):
        # Chunks no larger than the first block: a tiny file does not allocate a 1 MB chunk
        # (uncompressed chunks take their full size on disk); large inputs arrive in large blocks.
        chunk_rows = max(1, min(self.chunk_bytes // (4 * max(width, 1)), first_rows))
        self.chunk_rows = chunk_rows
        self._X = self._file.create_dataset(
            "X", shape=(0, width), maxshape=(None, None), dtype=np.float32,
            chunks=(chunk_rows, max(width, 1)), **self._ckw)
        self._y = self._file.create_dataset(
            "y", shape=(0,), maxshape=(None,), dtype=np.float32, chunks=(min(1 << 15, first_rows),),
            **self._ckw)
        if self.comments:
            g = self._file.create_group("comment")
            self._cdata = g.create_dataset("data", shape=(0,), maxshape=(None,), dtype=np.uint8,
                                           chunks=(max(1, min(1 << 18, first_cbytes)),), **self._ckw)
            self._cptr = g.create_dataset("ptr", shape=(1,), maxshape=(None,), dtype=np.int64,
                                          chunks=(min(1 << 15, first_rows + 1),), **self._ckw)
            self._cptr[0] = 0
        self.n_features = width

    # -- appending ------------------------------------------------------------------------------
    def append(self, X, y, qid, comments=None):
        """Append rows in input order (see :meth:`_append`); a write the system refuses (a full
        disk) is a :class:`~streamrank.errors.StorageError` naming the output."""
        if np.ndim(X) != 2:
            raise ValueError(f"X must be a 2-D array of rows; got shape {np.shape(X)}")
        try:
            nbytes = 4 * np.shape(X)[0] * (max(np.shape(X)[1], self.n_features or 0) + 1) + \
                (int(comments[1][-1] - comments[1][0]) + 8 * np.shape(X)[0] if comments is not None else 0)
            ensure_space(self._file_path, self._unflushed() + nbytes, shown=self.path)
            self._append(X, y, qid, comments)
            self._logical_bytes += nbytes
            faultpoint("dataset-append")
        except (OSError, RuntimeError) as e:
            if isinstance(e, StreamrankError):
                raise
            raise storage_error(self.path, e) from None

    def _unflushed(self):
        """Bytes appended that may not be on disk yet (HDF5's chunk cache holds them)."""
        try:
            on_disk = os.stat(self._file_path).st_blocks * 512
        except OSError:
            on_disk = 0
        return max(0, self._logical_bytes - on_disk)

    def _append(self, X, y, qid, comments=None):
        """Append rows in input order.

        Parameters
        ----------
        X : float32 array (r, d), d <= n_features unless the width may grow
        y : float32 array (r,)
        qid : int64 array (r,) or bytes array (dtype ``S``) of query ids per row
        comments : (data uint8, ptr int64 (r + 1,)) or None
        """
        X = np.ascontiguousarray(X, dtype=np.float32)
        y = np.ascontiguousarray(y, dtype=np.float32)
        r = X.shape[0]
        if y.shape != (r,) or len(qid) != r:
            raise ValueError(f"X, y and qid disagree on the number of rows: {r}, {y.shape[0]}, {len(qid)}")
        if r == 0:
            return
        bad = first_non_finite(X, y, self.n_rows, self.index_base)
        if bad is not None:
            raise InputError(f"{self.path}: input {bad} is not a finite number; streamrank trains on finite "
                             f"values only (drop or impute the row)")
        if self._X is None:
            cbytes = int(comments[1][-1] - comments[1][0]) if self.comments else 0
            self._create_X(max(X.shape[1], self.n_features or 0), r, cbytes)
        width = X.shape[1]
        if width > self.n_features:
            if self.fixed_width:
                raise ValueError(f"row block has {width} features; the file was fixed at {self.n_features}")
            self._X.resize((self.n_rows, width))
            self.n_features = width
            self._widened = True
            # the running digest covers the rows at the width of the file (earlier rows read 0 in
            # the new columns): hash them again, once per widening (rare: without n_features only)
            self._rehash(self._file)
        elif width < self.n_features:
            Xw = np.zeros((r, self.n_features), np.float32)
            Xw[:, :width] = X
            X = Xw
        self._add_query_runs(qid)
        a, b = self.n_rows, self.n_rows + r
        self._X.resize((b, self.n_features))
        self._X[a:b] = X
        self._y.resize((b,))
        self._y[a:b] = y
        if self.comments:
            data, ptr = comments
            ptr = np.asarray(ptr, np.int64)
            nb = int(ptr[-1] - ptr[0])
            self._cdata.resize((self._n_cbytes + nb,))
            if nb:
                self._cdata[self._n_cbytes:self._n_cbytes + nb] = np.asarray(data, np.uint8)[ptr[0]:ptr[-1]]
            self._cptr.resize((b + 1,))
            self._cptr[a + 1:b + 1] = ptr[1:] - ptr[0] + self._n_cbytes
            self._n_cbytes += nb
        # the rows as appended (input order): the fingerprint unless the file is regrouped or
        # widened at the end (both hash again), and what a resumed writer checks its rows against
        self._hash.update(X, y)
        if self.comments:
            self._chash[0].update(np.ascontiguousarray(np.asarray(data, np.uint8)[ptr[0]:ptr[-1]]))
            self._chash[1].update(np.diff(ptr))  # each row's comment length
        self.n_rows = b

    def _add_query_runs(self, qid):
        qid = np.asarray(qid)
        if qid.dtype.kind in "iu":
            qid = qid.astype(np.int64, copy=False)
            kind = "int"
            if self._qid_kind == "str":
                qid = qid.astype("S20")
                kind = "str"
        elif qid.dtype.kind in "SUO":
            qid = qid.astype("S")
            kind = "str"
            if self._qid_kind == "int":
                # a non-integer id appeared: from now on every id is its text
                self._keys = [str(k).encode() for k in self._keys]
                self._key_index = {k: i for i, k in enumerate(self._keys)}
        else:
            raise ValueError(f"qid must be integers or bytes; got dtype {qid.dtype}")
        self._qid_kind = kind
        starts = np.concatenate(([0], np.flatnonzero(qid[1:] != qid[:-1]) + 1))
        last = self._run_query[-1] if len(self._run_query) else -1
        for s in starts.tolist():
            key = qid[s].item()
            qi = self._key_index.get(key)
            if qi is None:
                qi = len(self._keys)
                self._key_index[key] = qi
                self._keys.append(key)
            elif qi == last:
                continue  # the previous block's last query goes on
            else:
                self._scattered = True
            self._run_start.append(self.n_rows + s)
            self._run_query.append(qi)
            last = qi

    # -- resuming ---------------------------------------------------------------------------------
    def commit_state(self):
        """Flush everything appended so far to the disk and return the JSON-able state that
        ``DatasetWriter(..., work_path=, resume=state)`` continues from. The query bookkeeping
        (runs and keys) goes into the file's ``/_resume`` group, each commit appending what is new,
        so a commit costs what was appended since the last one, not the whole input's."""
        g = self._file.require_group(RESUME_GROUP)
        p = self._persisted
        _extend(g, "run_start", np.frombuffer(self._run_start, np.int64)[p["runs"]:], p["runs"])
        _extend(g, "run_query", np.frombuffer(self._run_query, np.int64)[p["runs"]:], p["runs"])
        p["runs"] = len(self._run_start)
        if self._qid_kind == "int":
            _extend(g, "keys_int", np.asarray(self._keys[p["keys"]:], np.int64), p["keys"])
        elif self._qid_kind == "str":
            # keys as bytes: their concatenation and each one's end (after a switch from integer
            # ids, every key is written again in this form)
            start = p["keys"] if p["kind"] == "str" else 0
            base = p["key_bytes"] if start else 0
            new = self._keys[start:]
            ends = base + np.cumsum(np.fromiter((len(k) for k in new), np.int64, len(new)))
            _extend(g, "keys_str_end", ends, start)
            _extend(g, "keys_str_data", np.frombuffer(b"".join(new), np.uint8), base)
            p["key_bytes"] = int(ends[-1]) if len(new) else base
        p["keys"], p["kind"] = len(self._keys), self._qid_kind
        self._file.flush()
        fsync_file(self._tmp)
        x, y = self._hash.digests()
        return {"n_rows": self.n_rows, "n_features": self.n_features, "widened": self._widened,
                "scattered": self._scattered, "logical_bytes": self._logical_bytes, "n_cbytes": self._n_cbytes,
                "qid_kind": self._qid_kind, "n_keys": len(self._keys), "n_runs": len(self._run_start),
                "key_bytes": self._persisted["key_bytes"],
                "x_sha256": x, "y_sha256": y, "comments_sha256": [h.hexdigest() for h in self._chash]}

    def _restore(self, st):
        """Go back to the committed state ``st``: shrink the datasets to its rows (appends after
        it are dropped) and check the rows it covers against its digests (ResumeError if not)."""
        f = self._file
        n = int(st["n_rows"])
        try:
            self._X, self._y = f["X"], f["y"]
            if self._X.shape[0] < n or self._y.shape[0] < n or self._X.shape[1] < st["n_features"]:
                raise ResumeError(f"{self._tmp} holds fewer rows than its progress record")
            for name in ("row", "query_ptr", "qid"):  # an index written by a close that was killed
                if name in f:
                    del f[name]
            self._X.resize((n, st["n_features"]))
            self._y.resize((n,))
            self.chunk_rows = self._X.chunks[0]
            if self.comments:
                self._cdata, self._cptr = f["comment/data"], f["comment/ptr"]
                self._cdata.resize((int(st["n_cbytes"]),))
                self._cptr.resize((n + 1,))
            # the committed rows must be exactly what was appended (the checksums of the chunks are
            # checked as they are read; the digests catch a file that lost or mixed up chunks)
            self.n_rows, self.n_features = n, int(st["n_features"])
            self._rehash(f)
            if self.comments:
                ptr = self._cptr[:]
                step = 1 << 16
                for a in range(0, n, step):
                    p = ptr[a:min(a + step, n) + 1]
                    self._chash[0].update(self._cdata[p[0]:p[-1]])
                    self._chash[1].update(np.diff(p))
        except (OSError, KeyError, ValueError, RuntimeError) as e:
            raise ResumeError(f"{self._tmp} cannot be read back ({e})") from None
        if self._hash.digests() != (st["x_sha256"], st["y_sha256"]):
            raise ResumeError(f"{self._tmp} does not hold the rows its progress record describes")
        if self.comments and [c.hexdigest() for c in self._chash] != st["comments_sha256"]:
            raise ResumeError(f"{self._tmp} does not hold the comments its progress record describes")
        self._widened, self._scattered = bool(st["widened"]), bool(st["scattered"])
        self._logical_bytes, self._n_cbytes = int(st["logical_bytes"]), int(st["n_cbytes"])
        self._qid_kind = st["qid_kind"]
        try:
            g = f[RESUME_GROUP]
            n_runs, n_keys = int(st["n_runs"]), int(st["n_keys"])
            self._run_start = array("q", g["run_start"][:n_runs].tobytes())
            self._run_query = array("q", g["run_query"][:n_runs].tobytes())
            if self._qid_kind == "int":
                self._keys = [int(k) for k in g["keys_int"][:n_keys]]
            elif n_keys:
                ends = g["keys_str_end"][:n_keys].tolist()
                data = g["keys_str_data"][:int(st["key_bytes"])].tobytes()
                self._keys = [data[a:b] for a, b in zip([0] + ends[:-1], ends)]
            else:
                self._keys = []
            if len(self._run_start) != n_runs or len(self._keys) != n_keys:
                raise ValueError("the query bookkeeping is shorter than its record")
        except (OSError, KeyError, ValueError, RuntimeError) as e:
            raise ResumeError(f"{self._tmp} cannot be read back ({e})") from None
        self._key_index = {k: i for i, k in enumerate(self._keys)}
        self._persisted = {"runs": n_runs, "keys": n_keys, "kind": self._qid_kind, "key_bytes": int(st["key_bytes"])}

    def suspend(self):
        """Close the file, keeping it at ``work_path`` for a later resume (an interrupted run)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._file.close()
        except Exception:
            pass

    # -- finishing --------------------------------------------------------------------------------
    def abort(self):
        """Drop everything written so far (also after a failed write: :func:`discard_h5`)."""
        if self._closed:
            return
        self._closed = True
        discard_h5(self._file, self._file_path)
        for p in (self._tmp, self._regroup_tmp()):
            p.unlink(missing_ok=True)

    def _regroup_tmp(self):
        return self._tmp.with_name(self._tmp.name + ".regroup")

    def close(self):
        """Write the index and attributes, then move the file to its final name."""
        if self._closed:
            return self.path
        try:
            if self.n_rows == 0:
                raise InputError(f"{self.path}: no rows to write")
            run_start = np.frombuffer(self._run_start, np.int64)
            run_query = np.frombuffer(self._run_query, np.int64)
            run_len = np.diff(np.append(run_start, self.n_rows))
            n_queries = len(self._keys)
            counts = np.bincount(run_query, weights=run_len, minlength=n_queries).astype(np.int64)
            query_ptr = np.zeros(n_queries + 1, np.int64)
            np.cumsum(counts, out=query_ptr[1:])
            # the index, /row (8 bytes a row) and what the chunk cache still holds; regrouping writes
            # a whole second copy beside the first
            index = 16 * (n_queries + 1) if self._qid_kind == "int" else \
                sum(len(k) for k in self._keys) + 80 * (n_queries + 1)  # variable-length strings: heap entries
            extra = 8 * self.n_rows + index + self._unflushed()
            ensure_space(self._file_path, extra + (self._logical_bytes if self._scattered else 0), shown=self.path)
            if self._scattered:
                self._file.close()
                target = self._regroup(run_start, run_query, run_len, query_ptr)
                f = h5py.File(target, "r+")
                self._file, self._file_path = f, target
            else:
                target = self._tmp
                f = self._file
                if RESUME_GROUP in f:
                    del f[RESUME_GROUP]
                self._write_rows(f, None)
            self._file = f
            self._write_index(f, query_ptr)
            f.close()
            faultpoint("dataset-close")
            atomic_replace(target, self.path)
            if target != self._tmp:  # after the rename: a kill in between leaves a partial to resume
                self._tmp.unlink()
            self._closed = True
            return self.path
        except (OSError, RuntimeError) as e:  # a full or read-only disk: h5py raises either
            self._fail(e)
            if isinstance(e, StreamrankError):
                raise
            raise storage_error(self.path, e) from None
        except BaseException as e:
            self._fail(e)
            raise

    def _fail(self, exc):
        """A close that failed: the partial file is kept for a resume when ``keep_on_failure`` is
        set and the input was not at fault, else dropped."""
        if self.keep_on_failure and not isinstance(exc, InputError):
            self.suspend()
            self._regroup_tmp().unlink(missing_ok=True)
        else:
            self.abort()

    def _write_rows(self, f, _unused):
        row = f.create_dataset("row", shape=(self.n_rows,), maxshape=(None,), dtype=np.int64,
                               chunks=self._y.chunks, **self._ckw)
        step = 1 << 22
        for a in range(0, self.n_rows, step):
            b = min(a + step, self.n_rows)
            row[a:b] = np.arange(a, b, dtype=np.int64)

    def _rehash(self, f):
        """The running digest again, from the first ``n_rows`` rows of X and y in ``f``."""
        X, y = f["X"], f["y"]
        step = max(1, (64 << 20) // (4 * max(self.n_features, 1)))
        h = ContentHash()
        for a in range(0, self.n_rows, step):
            b = min(a + step, self.n_rows)
            h.update(X[a:b], y[a:b])
        self._hash = h

    def _write_index(self, f, query_ptr):
        f.create_dataset("query_ptr", data=query_ptr, chunks=True, fletcher32=True)
        if self._qid_kind == "int":
            qid = np.asarray(self._keys, dtype=np.int64)
            f.create_dataset("qid", data=qid, chunks=True, fletcher32=True)
        else:  # HDF5 filters no variable-length strings: index_sha256 covers them
            qid = [k.decode("utf-8", "replace") for k in self._keys]
            f.create_dataset("qid", data=qid, dtype=h5py.string_dtype())
        a = f.attrs
        a["format"] = FORMAT_NAME
        a["version"] = FORMAT_VERSION
        a["n_rows"] = self.n_rows
        a["n_features"] = self.n_features
        a["n_queries"] = len(self._keys)
        a["index_base"] = self.index_base
        a["source"] = json.dumps(self.source)
        a["created_by"] = f"streamrank {__version__}"
        a["content_sha256"] = self._hash.hexdigest(query_ptr, qid)
        a["index_sha256"] = index_digest(query_ptr, qid)
        a["qid_kind"] = self._qid_kind
        a["compression"] = self.compression
        a["chunk_rows"] = int(self.chunk_rows)
        a["extra"] = json.dumps(self.extra)

    def _regroup(self, run_start, run_query, run_len, query_ptr):
        """Rewrite the input-order file grouped by query; return the new temporary file's path.

        ``dest[src_row]`` is the row's output position: queries in order of first appearance,
        runs of a query in input order (a stable regrouping). Output is assembled range by range
        within ``regroup_bytes``, each range from one sequential pass over the input-order file.
        """
        n, d = self.n_rows, self.n_features
        idx_dtype = np.uint32 if n < 2**32 else np.int64
        dest = np.empty(n, idx_dtype)
        _regroup_dest(run_start, run_query, run_len, query_ptr, dest)

        out_path = self._regroup_tmp()
        src = h5py.File(self._tmp, "r")
        out = h5py.File(out_path, "w", rdcc_nbytes=64 << 20)
        try:
            Xs, ys = src["X"], src["y"]
            # same chunking as the input-order file (maxshape None lets a chunk exceed a tiny file)
            Xo = out.create_dataset("X", shape=(n, d), maxshape=(None, None), dtype=np.float32,
                                    chunks=Xs.chunks, **self._ckw)
            yo = out.create_dataset("y", shape=(n,), maxshape=(None,), dtype=np.float32,
                                    chunks=ys.chunks, **self._ckw)
            ro = out.create_dataset("row", shape=(n,), maxshape=(None,), dtype=np.int64,
                                    chunks=ys.chunks, **self._ckw)
            if self.comments:
                cptr_src = src["comment/ptr"][:]
                cdata_src = src["comment/data"]
                clen_src = np.diff(cptr_src)
                g = out.create_group("comment")
                cdo = g.create_dataset("data", shape=(int(cptr_src[-1]),), maxshape=(None,), dtype=np.uint8,
                                       chunks=cdata_src.chunks, **self._ckw)
                cpo = g.create_dataset("ptr", shape=(n + 1,), maxshape=(None,), dtype=np.int64,
                                       chunks=src["comment/ptr"].chunks, **self._ckw)
                cpo[0] = 0
                out_cbytes = 0
            range_rows = max(1, self.regroup_bytes // (4 * d + 16))
            scan_rows = max(1, (32 << 20) // (4 * max(d, 1)))
            h = ContentHash()
            for a in range(0, n, range_rows):
                b = min(a + range_rows, n)
                Xbuf = np.empty((b - a, d), np.float32)
                ybuf = np.empty(b - a, np.float32)
                rbuf = np.empty(b - a, np.int64)
                if self.comments:
                    olen = np.empty(b - a, np.int64)
                    pieces = []
                for s0 in range(0, n, scan_rows):
                    s1 = min(s0 + scan_rows, n)
                    db = dest[s0:s1].astype(np.int64)
                    sel = np.flatnonzero((db >= a) & (db < b))
                    if sel.size == 0:
                        continue
                    pos = db[sel] - a
                    Xbuf[pos] = Xs[s0:s1][sel] if sel.size < s1 - s0 else Xs[s0:s1]
                    ybuf[pos] = ys[s0:s1][sel]
                    rbuf[pos] = s0 + sel
                    if self.comments:
                        olen[pos] = clen_src[s0 + sel]
                        pieces.append((s0, s1, sel, pos))
                Xo[a:b] = Xbuf
                yo[a:b] = ybuf
                ro[a:b] = rbuf
                h.update(Xbuf, ybuf)
                if self.comments:
                    optr = np.zeros(b - a + 1, np.int64)
                    np.cumsum(olen, out=optr[1:])
                    obuf = np.empty(int(optr[-1]), np.uint8)
                    for s0, s1, sel, pos in pieces:
                        base = int(cptr_src[s0])
                        blob = cdata_src[base:int(cptr_src[s1])]
                        _copy_spans(blob, cptr_src[s0 + sel] - base, clen_src[s0 + sel], obuf, optr[pos])
                    cdo[out_cbytes:out_cbytes + obuf.size] = obuf
                    cpo[a + 1:b + 1] = optr[1:] + out_cbytes
                    out_cbytes += obuf.size
            self._hash = h
        except BaseException:
            src.close()
            discard_h5(out, out_path)
            raise
        src.close()
        try:
            out.close()
        except (OSError, RuntimeError):
            discard_h5(out, out_path)
            raise
        return out_path


numba_cache.adopt(globals())  # last: every kernel above compiles and caches as streamrank's
