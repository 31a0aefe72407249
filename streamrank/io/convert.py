"""``streamrank convert``: LETOR / SVMlight text to the HDF5 dataset format, streaming.

Three stages overlap: a thread reads and decompresses line-aligned chunks (and finds their line
ends), the calling thread parses each chunk with the numba kernels of ``_textparse`` in pieces of
about equal bytes side by side on streamrank's threads (:mod:`streamrank._native.parallel`, numba's
thread count; GIL released; chunks in order), and a thread appends parsed rows to the
:class:`~streamrank.io.hdf5_format.DatasetWriter`. Queues of one or two
chunks between the stages bound the memory whatever the input size (the chunks are sized from the
memory budget, :func:`_plan`).

Every ``commit_seconds`` the rows written so far are committed (:mod:`streamrank.io.convert_progress`):
a conversion killed or interrupted after a commit continues from it when run again, and writes
the same file as an uninterrupted one.
"""

import hashlib
import logging
import os
import queue
import threading
import time
from pathlib import Path

import numpy as np

from streamrank import params
from streamrank._native import parallel
from streamrank._native.memory import trimmer
from streamrank._native.threads import background
from streamrank.errors import InputError, ParameterError
from streamrank.execution.progress import PlainBar
from streamrank.execution.progress import bar as progress_bar
from streamrank.faultpoints import faultpoint
from streamrank.io import _textparse as tp
from streamrank.io import convert_progress as progress
from streamrank.io.budget import HEADROOM, STREAM_SLACK, resident_bytes
from streamrank.io.hdf5_format import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_COMPRESSION,
    WRITER_CACHE_BYTES,
    DatasetWriter,
    ResumeError,
    _copy_spans,
)
from streamrank.io.text_source import DEFAULT_CHUNK_BYTES as TEXT_CHUNK_BYTES
from streamrank.io.text_source import TextChunks
from streamrank.io.urls import Url, is_url, location, size_of
from streamrank.io.urls import shown as shown_url
from streamrank.units import budget_bytes

log = logging.getLogger("streamrank.io.convert")

# a conversion commits what it wrote when this many seconds have passed since its last commit (a
# flush and fsync of the partial file and one small JSON write; shorter inputs never commit)
DEFAULT_COMMIT_SECONDS = 60.0

_MESSAGES = {
    tp.E_LABEL: "the label is not a number",
    tp.E_NAN_INF: "NaN or infinity is not allowed",
    tp.E_MISSING_QID: "missing 'qid:' (the second token must be qid:<id>; for files without "
                      "query ids use query_files=F with the group sizes)",
    tp.E_BAD_QID: "empty query id after 'qid:'",
    tp.E_QID_WITH_QUERY_FILE: "the line has 'qid:' but query_files also gives the groups of this "
                              "input; use one or the other",
    tp.E_TOKEN: "expected index:value",
    tp.E_INDEX: "the feature index is not a non-negative integer",
    tp.E_INDEX_ZERO: "feature index 0 in one-based mode; use zero_based=True if indices start at 0",
    tp.E_DUPLICATE: "the feature index appears twice on this line",
    tp.E_BEYOND: "the feature index is beyond n_features={n_features}",
    tp.E_VALUE: "the feature value is not a number",
}

# Dense storage refuses text that is mostly absent features (DESIGN.md, "Dataset file").
SPARSE_MIN_FEATURES = 1000
SPARSE_MIN_FILL = 0.05
_F32_MAX = float(np.finfo(np.float32).max)


def query_ids_of_rows(cum, first, r, query_file, path):
    """Group numbers (0-based) of rows ``first .. first + r - 1`` of ``path`` from the cumulative
    group sizes ``cum`` of its ``query_file`` (LightGBM's layout); InputError when the rows run
    past the sizes' sum."""
    rows = first + np.arange(r, dtype=np.int64)
    if r and rows[-1] >= cum[-1]:
        raise InputError(f"{query_file}: the group sizes add up to {int(cum[-1])} rows but {path} has more rows "
                         f"than that")
    return np.searchsorted(cum, rows, side="right")


def shown(raw, limit=200):
    """Bytes of the input as a message shows them: UTF-8 text as it is, every character that is
    not printable (ESC, NUL, a tab) escaped as Python's repr escapes it, and a byte that is not
    UTF-8 as ``\\xNN``; at most ``limit`` characters. A message never carries a raw control byte
    to the terminal."""
    text = bytes(raw).decode("utf-8", "backslashreplace")
    cut = len(text) > limit
    text = text[:limit]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text + (" ..." if cut else "")


def _line_text(buf, ls, le, limit=200):
    raw = bytes(buf[ls:le]).rstrip(b"\r\n")
    return shown(raw, limit)



class _WriterThread:
    """Appends parsed chunks to a DatasetWriter in a thread (HDF5 writes overlap parsing)."""

    def __init__(self, writer, trim=False):
        self.writer = writer
        # a tight budget: hand freed heap pages back after every append (it costs conversion time,
        # the pages being faulted in again, so only where memory is short)
        self._trim = trimmer() if trim else (lambda: None)
        self.q = queue.Queue(maxsize=1)
        self.error = None
        self.th = threading.Thread(target=self._run, daemon=True, name="streamrank-writer")
        self.th.start()

    def _run(self):
        while True:
            item = self.q.get()
            if item is None:
                self.q.task_done()
                return
            if self.error is None:
                try:
                    self.writer.append(*item)
                    del item
                    self._trim()
                except BaseException as exc:
                    self.error = exc
            self.q.task_done()

    def put(self, item):
        if self.error is not None:
            raise self.error
        self.q.put(item)

    def drain(self):
        """Wait until every chunk put so far is appended."""
        self.q.join()
        if self.error is not None:
            raise self.error

    def finish(self):
        self.q.put(None)
        self.th.join()
        if self.error is not None:
            raise self.error


def read_query_file(path):
    """Group sizes, one positive integer per line (LightGBM's ``.query`` files), read by the text
    decoder (any line end, a byte-order mark, compression)."""
    sizes = []
    for buf, first in TextChunks(path, chunk_bytes=1 << 20):
        for k, raw in enumerate(bytes(buf).split(b"\n")[:-1], first + 1):
            s = raw.strip()
            if not s:
                continue
            try:
                v = int(s)
            except ValueError:
                raise InputError(f"{path}:{k}: group size '{shown(s)}' is not an integer") from None
            if v <= 0:
                raise InputError(f"{path}:{k}: group size must be > 0; got {v}")
            sizes.append(v)
    if not sizes:
        raise InputError(f"{path}: the query file lists no groups")
    return np.asarray(sizes, np.int64)


def query_file_of(path, query_file=None):
    """The group-size file of text ``path``, the one rule every reader of text follows: ``query_file``
    as given, else ``PATH.query`` beside it when the text's first data line has no ``qid:``
    (LightGBM's layout), else None (the text's own ``qid:``)."""
    if query_file is not None:
        return Path(os.fspath(query_file))
    sibling = Path(str(path) + ".query")
    if not sibling.is_file():
        return None
    for buf, _ in TextChunks(path, chunk_bytes=1 << 16):
        for line in bytes(buf).split(b"\n"):
            tokens = line.split(b"#", 1)[0].split()
            if tokens:
                return None if len(tokens) > 1 and tokens[1].startswith(b"qid:") else sibling
    return None


# text below which a chunk is parsed in one piece: handing a piece to another thread costs about 20 us,
# and the parser reads about 1 MB a millisecond on one core (generated mslr30k text)
PIECE_BYTES = 256 << 10


def _query_ids(buf, qid_int, qisint, qs, qe):
    """The rows' query ids: int64 when every one is a canonical integer, else their bytes
    buf[qs:qe] as a fixed-width bytes array."""
    if qisint.all() and tp.canonical_ints(qid_int, qe - qs):
        return qid_int
    n, width = qs.shape[0], int((qe - qs).max())
    out = np.zeros((n, width), np.uint8)
    parallel.run(tp.gather_qid_bytes, n, buf, qs, qe, out)
    return out.view(f"S{width}").ravel()


def _comments(buf, cs, ce):
    """(blob, ptr): the comments buf[cs:ce] one after another, row r's at blob[ptr[r]:ptr[r + 1]]."""
    lens = ce - cs
    ptr = np.zeros(cs.shape[0] + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    blob = np.empty(int(ptr[-1]), np.uint8)
    _copy_spans(buf, cs, lens, blob, ptr[:-1])
    return blob, ptr


class _Parser:
    """Parses chunks of one conversion; keeps the width and the query-id mode across chunks."""

    def __init__(self, n_features, zero_based, keep_comments, room=None):
        self.room = room  # bytes the parsed rows of one chunk may take (None: no limit)
        self.fixed = n_features is not None
        self.width = int(n_features) if n_features is not None else 0
        self.n_features = n_features
        self.base = 0 if zero_based else 1
        self.keep_comments = keep_comments
        self.nnz = 0
        self.rows = 0

    def state(self):
        """What a resumed conversion needs of the parser (JSON-able)."""
        return {"width": self.width, "nnz": self.nnz, "rows": self.rows}

    def restore(self, st):
        self.width, self.nnz, self.rows = int(st["width"]), int(st["nnz"]), int(st["rows"])

    def parse(self, path, buf, first_line, want_qid, ends=None):
        if ends is None:  # (TextChunks(line_ends=True) finds them in its own thread)
            ends = np.flatnonzero(buf == 10)
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        n_lines = ends.shape[0]
        # the lines are parsed in pieces of about equal bytes side by side (every line writes only
        # its own outputs, so the pieces never change a value); below PIECE_BYTES of text, one piece
        text_at = np.empty(n_lines + 1, np.int64)
        text_at[:-1] = starts
        text_at[-1] = buf.shape[0]
        is_data = np.empty(n_lines, np.bool_)
        parallel.run(tp.data_lines, n_lines, buf, starts, ends, is_data)
        row_of_line = np.cumsum(is_data) - 1
        row_of_line[~is_data] = -1
        n = int(row_of_line.max(initial=-1)) + 1
        data = np.flatnonzero(is_data)
        while True:
            self._check_room(path, n, first_line)
            X = np.zeros((n, self.width), np.float32)
            y = np.empty(n, np.float32)
            # per line: the qid's value and span, the comment's span, the error's span, the count of
            # features (rows of one array: each a contiguous vector, as the kernel takes them)
            qid_int, qs, qe, cs, ce, es, ee, nnz = np.zeros((8, n_lines), np.int64)
            qisint = np.ones(n_lines, np.uint8)
            err = np.zeros(n_lines, np.int32)
            slow = np.zeros(n_lines, np.uint8)
            maxcol = np.full(n_lines, -1, np.int64)
            parallel.run(tp.parse_lines, n_lines, buf, starts, ends, row_of_line, self.base, self.width,
                         self.fixed, want_qid, X, y, qid_int, qs, qe, qisint, cs, ce, err, es, ee, slow, nnz, maxcol,
                         weights=text_at, item_cost=parallel.SERIAL_WORK / PIECE_BYTES)
            mc = int(maxcol.max(initial=-1))
            if self.fixed or mc < self.width:
                break
            # wider rows than seen so far: widen and parse the chunk again, unless the new width
            # would make the dense rows mostly absent features (refused before X is allocated)
            self._refuse_sparse(path, mc + 1, self.rows + n, self.nnz + int(nnz.sum()), buf, starts, ends, maxcol,
                                first_line)
            self.width = mc + 1
        bad = np.flatnonzero(err)
        first_bad = int(bad[0]) if bad.size else n_lines
        # slow tokens (Python's float) of the lines before the first error come first: the error
        # reported is the first bad line's, whichever path found it
        for k in np.flatnonzero(slow[:first_bad]).tolist():
            self._parse_slow(path, buf, first_line, k, starts[k], ends[k], int(row_of_line[k]), X, y, want_qid)
        if bad.size:
            k = first_bad
            msg = _MESSAGES[int(err[k])].format(n_features=self.n_features)
            raise InputError(f"{path}:{first_line + k + 1}: {msg}: '{shown(buf[es[k]:ee[k]])}'\n"
                             f"    line: {_line_text(buf, starts[k], ends[k])}")
        self.nnz += int(nnz.sum())
        self.rows += n
        qid = _query_ids(buf, qid_int[data], qisint[data], qs[data], qe[data]) if want_qid else None
        comments = _comments(buf, cs[data], ce[data]) if self.keep_comments else None
        return X, y, qid, comments

    def _parse_slow(self, path, buf, first_line, k, ls, le, row, X, y, want_qid):
        """Tokens the fast path left as NaN: Python's correctly rounded float, then float32."""
        text = bytes(buf[ls:le]).split(b"#", 1)[0].split()
        where = f"{path}:{first_line + k + 1}"

        def f32(tok):
            with np.errstate(over="ignore"):
                v = np.float32(float(tok))
            if not np.isfinite(v):
                raise InputError(f"{where}: the value is out of float32 range: '{shown(tok)}'\n"
                                 f"    line: {_line_text(buf, ls, le)}")
            return v

        if np.isnan(y[row]):
            y[row] = f32(text[0])
        for tok in text[2 if want_qid else 1:]:
            idx, val = tok.split(b":", 1)
            col = int(idx) - self.base
            if np.isnan(X[row, col]):
                X[row, col] = f32(val)

    def _check_room(self, path, n, first_line):
        """Refuse, before X is allocated, a chunk whose dense rows would not fit the budget's room
        (a width given by n_features, or met in the data, of millions of features)."""
        need = 4 * n * max(self.width, 1)
        if self.room is not None and need > self.room:
            from streamrank.units import format_size
            raise ParameterError(
                f"{path}: the {n:,} rows from line {first_line + 1} hold {self.width:,} features each "
                f"({format_size(4 * self.width)} a row, stored densely): {format_size(need)} in one chunk, more than "
                f"memory_budget leaves for parsed rows ({format_size(self.room)}). streamrank is made for "
                f"LETOR-style data with tens to hundreds of features"
                + (f"; use n_features={max(1, int(self.room // (4 * max(n, 1))))} or fewer, or a larger memory_budget"
                   if self.fixed else "; reduce the features first (e.g. feature hashing or selection)"))

    def _refuse_sparse(self, path, width, rows, nnz, buf, starts, ends, maxcol, first_line):
        if width >= SPARSE_MIN_FEATURES and nnz < SPARSE_MIN_FILL * rows * width:
            k = int(np.argmax(maxcol))
            raise InputError(
                f"{path}:{first_line + k + 1}: feature index {int(maxcol[k]) + self.base} makes {width:,} features "
                f"with only {100 * nnz / (rows * width):.2g}% of the values present; streamrank stores features "
                f"densely ({width:,} x 4 bytes per row) and is made for LETOR-style data with tens to hundreds of "
                f"features. Reduce the features first (e.g. feature hashing or selection)\n"
                f"    line: {_line_text(buf, starts[k], ends[k])}")

    def check_density(self, path):
        if self.width >= SPARSE_MIN_FEATURES and self.rows:
            fill = self.nnz / (self.rows * self.width)
            if fill < SPARSE_MIN_FILL:
                raise InputError(
                    f"{path}: {self.width} features but only {100 * fill:.2f}% of the values are present; "
                    f"streamrank stores features densely ({self.width} x 4 bytes per row) and is made for "
                    f"LETOR-style data with tens to hundreds of features. Reduce the features first "
                    f"(e.g. feature hashing or selection).")


# bytes alive per byte of a text chunk: the reader's queue of two, the chunk it fills and the copy
# it cuts off (4); the chunk being parsed with its per-line arrays (2); parsed rows queued for and
# inside the writer (2); where the budget makes chunks smaller than asked, the writer also trims
# glibc's heaps after each append (_native.memory.trimmer)
CONVERT_BYTES_PER_TEXT_BYTE = 8
MIN_TEXT_CHUNK_BYTES = 256 << 10
MIN_REGROUP_BYTES = 4 << 20


def _plan(budget, given_chunk):
    """(bytes of a text chunk, bytes for regrouping scattered queries, bytes the parsed rows of a
    chunk may take at most) inside ``budget``, besides
    what is resident and HDF5's chunk caches; the chunk size never changes the file written."""
    avail = (budget - resident_bytes() - STREAM_SLACK - WRITER_CACHE_BYTES) / HEADROOM
    chunk = int(min(given_chunk, max(MIN_TEXT_CHUNK_BYTES, avail / CONVERT_BYTES_PER_TEXT_BYTE)))
    # regrouping runs after the pipeline has ended; beside the rows it assembles it keeps an index
    # entry per row and per run, scan copies and HDF5's caches of two files: a quarter of what is left
    return chunk, int(max(MIN_REGROUP_BYTES, avail / 4)), int(max(avail, MIN_TEXT_CHUNK_BYTES))


def convert(inputs, output, *, query_files=None, zero_based=False, n_features=None,
            compression=DEFAULT_COMPRESSION, chunk_bytes=DEFAULT_CHUNK_BYTES, keep_comments=True,
            memory_budget="2GB", text_chunk_bytes=TEXT_CHUNK_BYTES, quiet=False,
            commit_seconds=DEFAULT_COMMIT_SECONDS, label_column=None, qid_column=None, feature_columns=None):
    """Convert LETOR/SVMlight text files, or Parquet / Arrow IPC tables, into one streamrank HDF5
    dataset.

    Parameters
    ----------
    inputs : list of path
        Plain, gzip, bzip2 or xz text (LF, CRLF or CR line ends, a UTF-8 byte-order mark;
        :mod:`streamrank.io.text_source`), concatenated in order (one qid in several inputs is one
        query). Local paths or URLs; a glob pattern (``s3://bkt/parts/part-*.txt.gz``) stands for
        the files it matches, in lexicographic order (:func:`streamrank.io.urls.expand`).
    output : path
        The .h5 file; written under a hidden name and renamed when complete.
    query_files : list of path, optional
        One group-size file per input, for inputs without ``qid:``; by default ``IN.query`` beside
        each input whose first data line has no ``qid:`` (LightGBM's layout, :func:`query_file_of`).
    zero_based : bool
        Feature indices start at 0 instead of 1.
    n_features : int, optional
        Fix the width of X (train, vali and test must agree); wider indices are errors.
    commit_seconds : float
        Commit the rows written so far (:mod:`streamrank.io.convert_progress`) when this many
        seconds have passed since the last commit, at the end of a chunk of text. A conversion
        killed or interrupted later continues from its last commit when run again with the same
        inputs and settings, once the bytes it read are proven unchanged (their sha256); the
        file it writes is the same either way.

    label_column, qid_column, feature_columns : str, optional
        Parquet / Arrow inputs only (a file, or a directory of parts as Spark writes them:
        :mod:`streamrank.io.table_source`): the label's column (default ``label``), the query
        id's (default ``qid``) and the features': ``"A,B,C"``, a range ``"FIRST:LAST"`` in the
        file's column order, one list or Spark ML vector column, or by default every other
        numeric column. Such a conversion is not resumed: killed, it starts again.

    Returns
    -------
    dict
        rows, queries, features, bytes read, seconds and rates, and ``resumed_rows``.
    """
    from streamrank.io import table_source
    from streamrank.io.urls import expand, is_url
    inputs = expand([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)
    if is_url(output):
        return _to_url(output, lambda local: convert(
            inputs, local, query_files=query_files, zero_based=zero_based, n_features=n_features,
            compression=compression, chunk_bytes=chunk_bytes, keep_comments=keep_comments,
            memory_budget=memory_budget, text_chunk_bytes=text_chunk_bytes, quiet=quiet, commit_seconds=commit_seconds,
            label_column=label_column, qid_column=qid_column, feature_columns=feature_columns))
    columns = (label_column, qid_column, feature_columns)
    if n_features is not None:
        n_features = params.check("n_features", n_features)
    kinds = _table_kinds(inputs)
    if any(kinds):
        return _convert_tables(inputs, output, kinds, table_source.Columns(
            label_column or "label", qid_column or "qid", feature_columns), query_files=query_files,
            zero_based=zero_based, n_features=n_features, compression=compression, chunk_bytes=chunk_bytes,
            memory_budget=memory_budget, quiet=quiet)
    if any(c is not None for c in columns):
        raise ParameterError("label_column, qid_column and feature_columns apply to Parquet and Arrow inputs; "
                             "text names its label and qid: by position")
    inputs, query_files = _inputs(inputs, query_files)
    sizes = [_size(p) for p in inputs + (query_files or [])]
    budget = budget_bytes(memory_budget)
    given_chunk = text_chunk_bytes
    text_chunk_bytes, regroup_bytes, room = _plan(budget, text_chunk_bytes)
    parser = _Parser(n_features, zero_based, keep_comments, room=room)
    t0 = time.perf_counter()
    total_raw = sum(sizes[:len(inputs)])
    work, record, lock_path = progress.work_paths(output)
    ident = progress.identity(inputs, query_files, {
        "zero_based": bool(zero_based), "n_features": n_features, "compression": compression,
        "chunk_bytes": int(chunk_bytes), "keep_comments": bool(keep_comments)})
    commit_seconds = params.check("commit_seconds", commit_seconds)
    lock = progress.Lock(lock_path, output)
    try:
        writer, pos = _open_writer(output, work, record, ident, parser, dict(
            n_features=n_features, compression=compression, chunk_bytes=chunk_bytes, index_base=parser.base,
            comments=keep_comments, fixed_width=n_features is not None, regroup_bytes=regroup_bytes))
        writer.keep_on_failure = pos["input"] > 0 or pos["text_offset"] > 0  # resumed: there is a commit
    except BaseException:
        lock.release(remove=True)
        raise
    resumed_rows = writer.n_rows
    # a bar on a terminal (or with the CLI's --progress), a plain line now and then in a log (execution.progress)
    bar = (PlainBar(total_raw, "convert", "B", silent=True) if quiet
           else progress_bar(total_raw, "convert", "B", own=True))
    run = _Run(parser, writer, pos, bar, record, ident, commit_seconds, t0)
    try:
        wt = _WriterThread(writer, trim=text_chunk_bytes < given_chunk)
        try:
            for i, path in enumerate(inputs):
                if i >= pos["input"]:
                    run.input(i, path, None if query_files is None else query_files[i], wt, text_chunk_bytes)
        finally:
            wt.finish()
        writer.close()
        progress.discard(record)
        lock.release(remove=True)
    except BaseException as exc:
        lock.release(remove=not _stop(writer, exc, work, record, output))
        raise
    finally:
        bar.close()
    seconds = time.perf_counter() - t0
    return {
        "output": str(output), "rows": writer.n_rows, "queries": len(writer._keys),
        "features": writer.n_features, "text_bytes": run.text_bytes, "raw_bytes": total_raw,
        "seconds": seconds, "text_mb_per_s": run.text_bytes / 1e6 / seconds,
        "rows_per_s": writer.n_rows / seconds, "regrouped": writer._scattered, "resumed_rows": resumed_rows,
    }


def _table_kinds(inputs):
    """Each input's table kind ("parquet", "arrow") or None (text, or a missing file)."""
    from streamrank.io.table_source import kind_of
    paths = [location(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)]
    return [kind_of(p) if is_url(p) or p.exists() else None for p in paths]


def _convert_tables(inputs, output, kinds, columns, *, query_files, zero_based, n_features, compression,
                    chunk_bytes, memory_budget, quiet):
    """:func:`convert` of Parquet / Arrow inputs (every input one): their rows in order, queries
    regrouped where they are scattered (over parts or row groups), as text's are."""
    from streamrank.io.table_source import TableSource
    from streamrank.io.text_source import prefix_digest
    inputs = [location(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)]
    if not all(kinds):
        k = kinds.index(None)
        raise InputError(f"{inputs[k]} is not Parquet or Arrow, but {inputs[kinds.index(next(filter(None, kinds)))]} "
                         f"is; convert text and tables separately")
    if query_files or zero_based:
        raise ParameterError("query_files and zero_based apply to text; a table names its query id column "
                             "(qid_column=NAME) and its features by name")
    budget = budget_bytes(memory_budget)
    _, regroup_bytes, room = _plan(budget, TEXT_CHUNK_BYTES)
    t0 = time.perf_counter()
    sources = [TableSource(p, columns, room=room) for p in inputs]
    _, _, lock_path = progress.work_paths(output)
    lock = progress.Lock(lock_path, output)
    total = sum(src.n_rows for src in sources)
    bar = PlainBar(total, "convert", "rows", silent=True) if quiet else progress_bar(total, "convert", "rows", own=True)
    writer = None
    try:
        writer = DatasetWriter(output, n_features=n_features, compression=compression, chunk_bytes=chunk_bytes,
                               comments=False, fixed_width=n_features is not None, regroup_bytes=regroup_bytes)
        raw = 0
        for src in sources:
            for X, y, qid in src:
                writer.append(X, y, qid)
                bar.update(len(y))
            if src.rows_read == 0:
                raise InputError(f"{src.path}: no data rows")
            sizes = [_size(location(f)) for f in src.files]
            raw += sum(sizes)
            digest = hashlib.sha256(b"".join(prefix_digest(f, n).encode() for f, n in zip(src.files, sizes)))
            writer.source.append({"name": _name(src.path), "sha256": digest.hexdigest(), "rows": src.rows_read,
                                  "parts": len(src.files)})
        writer.close()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    finally:
        lock.release(remove=True)
        bar.close()
    seconds = time.perf_counter() - t0
    return {"output": str(output), "rows": writer.n_rows, "queries": len(writer._keys),
            "features": writer.n_features, "text_bytes": 0, "raw_bytes": raw, "seconds": seconds,
            "text_mb_per_s": raw / 1e6 / seconds, "rows_per_s": writer.n_rows / seconds,
            "regrouped": writer._scattered, "resumed_rows": 0}


def _size(p):
    """Bytes of input ``p`` (a path or a URL), or InputError when there is none."""
    if is_url(p):
        return size_of(p)
    if not p.exists():
        raise InputError(f"{p}: no such file")
    return p.stat().st_size


def _name(p):
    """The last part of an input's name (a URL's without its query string)."""
    return Url(p).name if is_url(p) else p.name


def _to_url(url, run):
    """Convert (``run(local_path)``) into a local file of the cache directory, then upload it to
    ``url`` as one object. The local file's name is a function of the URL, so a conversion
    killed before the upload continues from its last commit when run again."""
    import hashlib as _h

    from streamrank.io.atomic import check_writable, publish
    from streamrank.settings import default_cache_dir
    check_writable(url, "output")
    local = Path(default_cache_dir()) / "uploads" / f"{_h.sha256(url.encode()).hexdigest()[:16]}.{Url(url).name}"
    local.parent.mkdir(parents=True, exist_ok=True)
    stats = run(local)
    publish(local, url)
    local.unlink()
    return {**stats, "output": shown_url(url)}


def _inputs(inputs, query_files):
    """(inputs, query files) of :func:`convert` as lists of paths (query files None when no input
    has one), or ParameterError."""
    inputs = [location(p) for p in ([inputs] if isinstance(inputs, (str, os.PathLike)) else inputs)]
    if not inputs:
        raise ParameterError("convert needs at least one input file")
    if query_files is not None:
        query_files = [location(p) for p in query_files]
        if len(query_files) != len(inputs):
            raise ParameterError(f"query_files must be given once per input: {len(inputs)} inputs, "
                                 f"{len(query_files)} query files")
    else:
        query_files = _query_files_beside(inputs)
    return inputs, query_files


class _Run:
    """A conversion's position past its inputs (from ``pos``, the start or the last commit): the
    text and raw bytes of the finished inputs, the group numbers they used and the time of the
    last commit."""

    def __init__(self, parser, writer, pos, bar, record, ident, commit_seconds, t0):
        self.parser, self.writer, self.pos, self.bar = parser, writer, pos, bar
        self.record, self.ident, self.commit_seconds, self.t0 = record, ident, commit_seconds, t0
        self.text_bytes, self.raw_done, self.group_base = pos["text_bytes"], pos["raw_done"], pos["group_base"]
        self.last_commit = time.perf_counter()

    def input(self, i, path, query_file, wt, chunk_bytes):
        """Parse input i (from the commit's position when it is the input the commit stopped in)
        and queue its rows to the writer thread ``wt``; ``query_file``: its group sizes, or None
        when the lines carry ``qid:``."""
        pos, parser = self.pos, self.parser
        here = i == pos["input"]
        offset, line = (pos["text_offset"], pos["line"]) if here else (0, 0)
        rows_in_file = pos["rows_in_file"] if here else 0
        src = TextChunks(path, chunk_bytes, skip=offset, first_line=line, line_ends=True)
        if query_file is not None:
            sizes = read_query_file(query_file)
            cum = np.cumsum(sizes)
        for buf, first_line, ends in background(src, depth=2, name="streamrank-reader"):
            X, y, qid, comments = parser.parse(path, buf, first_line, query_file is None, ends)
            r = X.shape[0]
            if query_file is not None:
                qid = query_ids_of_rows(cum, rows_in_file, r, query_file, path) + self.group_base
            rows_in_file += r
            if rows_in_file >= 10000 or r == 0:
                parser.check_density(path)
            if r:
                wt.put((X, y, qid, comments))
            offset += buf.shape[0]
            src.recycle(buf)  # parsed: rows, ids and comments are copies
            self.bar.update(src.raw_bytes - (self.bar.n - self.raw_done))
            self.bar.set_postfix_str(f"{parser.rows / max(time.perf_counter() - self.t0, 1e-9):,.0f} rows/s",
                                     refresh=False)
            if time.perf_counter() - self.last_commit >= self.commit_seconds:
                wt.drain()
                _commit(self.record, self.ident, self.writer, parser, {
                    "input": i, "text_offset": offset, "line": first_line + len(ends),
                    "rows_in_file": rows_in_file, "group_base": self.group_base, "text_bytes": self.text_bytes,
                    "raw_done": self.raw_done, "anchor": list(src.anchor(offset))})
                self.writer.keep_on_failure = True  # a failure from now on keeps the partial
                self.last_commit = time.perf_counter()
        if rows_in_file == 0:
            raise InputError(f"{path}: no data rows (the file is empty or holds only comments)")
        if query_file is not None:
            if rows_in_file != cum[-1]:
                raise InputError(f"{query_file}: the group sizes add up to {int(cum[-1])} rows "
                                 f"but {path} has {rows_in_file}")
            self.group_base += len(sizes)
        parser.check_density(path)
        self.raw_done += src.raw_bytes
        self.text_bytes += src.text_bytes
        self.writer.source.append({"name": _name(path), "sha256": src.sha256, "rows": rows_in_file,
                                   **({"query_file": query_file.name} if query_file is not None else {})})


def _query_files_beside(inputs):
    """Each input's ``IN.query`` (query_file_of's rule), or None when no input has one; inputs
    with and inputs without group sizes cannot be joined (group numbers and qids would mix)."""
    found = [None if is_url(p) else query_file_of(p) if p.exists() else None for p in inputs]
    if all(q is None for q in found):
        return None
    k = next(i for i, q in enumerate(found) if q is None) if None in found else None
    if k is not None:
        j = next(i for i, q in enumerate(found) if q is not None)
        raise InputError(f"{inputs[j]} takes its groups from {found[j]} but {inputs[k]} has no such file beside it; "
                         f"convert them separately, or use query_files=F once per input")
    return found


def _open_writer(output, work, record, ident, parser, kwargs):
    """A writer that continues the committed conversion of ``record`` (when it matches ``ident``
    and its partial file checks out), else a fresh one; and the position to read on from."""
    start = {"input": 0, "text_offset": 0, "line": 0, "rows_in_file": 0, "group_base": 0, "text_bytes": 0,
             "raw_done": 0}
    rec = progress.load(record, ident)
    changed = rec is not None and work.exists() and _changed_input(rec, ident)
    if changed:
        log.warning("%s: %s is not the text converted before (its bytes differ from those committed, whatever its "
                    "size and modification time say); starting again", output, changed)
    elif rec is not None and work.exists():
        try:
            writer = DatasetWriter(output, work_path=work, resume=rec["writer"], **kwargs)
        except ResumeError as e:
            log.warning("%s: the conversion committed earlier cannot be continued (%s); starting again", output, e)
        else:
            writer.source = list(rec["sources"])
            parser.restore(rec["parser"])
            p = rec["position"]
            log.info("%s: continuing the conversion committed earlier: %d rows written, from line %d of %s",
                     output, writer.n_rows, p["line"] + 1, Path(ident["inputs"][p["input"]]["path"]).name)
            return writer, p
    elif rec is None and (work.exists() or record.exists()):
        log.info("%s: a conversion of other inputs or settings was left unfinished; starting again", output)
    progress.discard(work, record)
    return DatasetWriter(output, work_path=work, **kwargs), start


def _changed_input(rec, ident):
    """The first input whose bytes differ from those a committed conversion read, else None: each
    input done must still have its recorded sha256, and the input being read must still begin
    with the bytes whose digest the commit recorded (TextChunks.anchor). Size and modification
    time alone do not prove it (``cp -p`` or ``rsync -t`` of an edited file of the same size keep
    both). Costs one read of those bytes (sha256, about 1.7 GB/s on one core)."""
    from streamrank.io.text_source import prefix_digest
    p = rec["position"]
    paths = [location(x["path"]) for x in ident["inputs"]]
    try:
        for i in range(p["input"]):
            size = ident["inputs"][i]["size"]
            if prefix_digest(paths[i], size) != rec["sources"][i]["sha256"]:
                return paths[i]
        raw, digest = p["anchor"]
        if prefix_digest(paths[p["input"]], raw) != digest:
            return paths[p["input"]]
    except (KeyError, IndexError, TypeError, ValueError):  # a record without the digests: start again
        return paths[min(int(p.get("input", 0)), len(paths) - 1)]
    return None


def _commit(record, ident, writer, parser, position):
    """Flush the rows appended so far and record where the text goes on (one atomic JSON write)."""
    progress.save(record, ident, position, writer.commit_state(), writer.source, parser.state())
    faultpoint("convert-commit")


def _stop(writer, exc, work, record, output):
    """After a failure: bad input discards the partial file; anything else (a full disk, an
    interrupt) keeps what was committed, for the next run to continue. Returns whether it kept it."""
    if writer.keep_on_failure and not isinstance(exc, InputError):
        writer.suspend()
        if work.exists():
            log.warning("%s: the rows committed so far are kept in %s; run the same command again to continue",
                        output, work)
            return True
    writer.abort()
    progress.discard(work, record)
    return False
