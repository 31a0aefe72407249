"""Parquet and Arrow IPC (Feather v2) input: rows of ``(X, y, qid)`` in a defined order.

A source is one file, a directory of part files as Spark and pyarrow write them
(``part-*.parquet``, hive-style ``key=value`` folders), or a glob pattern naming parts. Part
files are read in lexicographic order of their path below the directory (of their path, for a
pattern), rows in file order, one row group (Parquet) or record
batch (Arrow) at a time, so a batch never holds more than a row group's rows. Files whose name
starts with ``_`` or ``.`` (``_SUCCESS``, ``.crc``) are not data, as for Spark. Hive partition
values live in folder names, not in the files, so they are never features.

Columns (:class:`Columns`): the label, the query id (integers, or text), and the features, which
are listed names, a range of names ``first:last`` in the file's column order, one list column
(a vector per row, every row of one length) or Spark ML's ``VectorUDT`` struct (``type``,
``size``, ``indices``, ``values``: dense and sparse), or by default every other numeric column.
Every value is converted as the text parser converts a token: ``float32(float(v))``; a null, a
value that is not finite or one past float32's range is refused, naming the file, its row and
the column. pyarrow is the ``parquet`` extra.
"""

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from streamrank.errors import InputError, ParameterError

PARQUET_MAGIC = b"PAR1"
ARROW_MAGIC = b"ARROW1"
# Spark's and pyarrow's bookkeeping files beside the parts
_NOT_DATA = ("_", ".")
# rows of one Arrow batch handed on at most: bounds the float32 copy of a huge record batch
MAX_BATCH_ROWS = 1 << 16


def pyarrow():
    """The pyarrow module, or ParameterError naming the extra that installs it."""
    try:
        import pyarrow as pa
        import pyarrow.ipc  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ParameterError("reading Parquet or Arrow needs pyarrow: pip install 'streamrank[parquet]'") from None
    return pa


def _fs(path):
    """(fsspec file system, its path) of a URL (:mod:`streamrank.io.urls`), or (None, path)."""
    from streamrank.io.urls import filesystem, is_url
    return filesystem(str(path)) if is_url(path) else (None, path)


def _open(path):
    """A binary file object of a local path or a URL."""
    fs, inner = _fs(path)
    return open(inner, "rb") if fs is None else fs.open(inner, "rb")


def _magic(path):
    from streamrank.io.urls import store_errors
    try:
        with _open(path) as fh:
            return fh.read(6)
    except store_errors():
        return b""


def is_pattern(path):
    """Whether ``path`` is a glob pattern naming parts (:func:`streamrank.io.urls.expand`) rather
    than a file or directory."""
    from streamrank.io.urls import _GLOB, is_url
    s = str(path)
    return bool(_GLOB.search(s.split("::")[-1])) and (is_url(path) or not os.path.exists(s))


def kind_of(path):
    """"parquet" or "arrow" for a file of that format (by its magic bytes), a directory (a URL
    prefix) or a glob pattern holding such parts, else None (text, HDF5, or nothing)."""
    if is_pattern(path):
        parts = part_files(path)
        return kind_of(parts[0]) if parts else None
    fs, inner = _fs(path)
    if fs.isdir(inner) if fs is not None else Path(path).is_dir():
        parts = part_files(path)
        return kind_of(parts[0]) if parts else None
    head = _magic(path)
    if head[:4] == PARQUET_MAGIC:
        return "parquet"
    if head == ARROW_MAGIC:
        return "arrow"
    return None


def _is_data(p):
    return _magic(p)[:4] == PARQUET_MAGIC or _magic(p) == ARROW_MAGIC


def part_files(path):
    """The data files of a source: ``[path]`` for a file, else every Parquet/Arrow file below the
    directory or URL prefix (hidden and ``_``-prefixed names skipped at every level) in
    lexicographic order of the path below it (URLs for a URL), or the Parquet/Arrow files a glob
    pattern matches, in lexicographic order."""
    if is_pattern(path):
        from streamrank.io.urls import expand
        return [p for p in expand([path]) if _is_data(p)]
    fs, inner = _fs(path)
    if fs is not None:
        if not fs.isdir(inner):
            return [str(path)]
        base = inner.rstrip("/")
        rel = sorted(p[len(base) + 1:] for p in fs.find(base))
        keep = [r for r in rel if not any(c.startswith(_NOT_DATA) for c in r.split("/"))]
        urls = [f"{str(path).rstrip('/')}/{r}" for r in keep]
        return [u for u in urls if _is_data(u)]
    path = Path(path)
    if not path.is_dir():
        return [path]
    found = []
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if not d.startswith(_NOT_DATA)]
        for f in files:
            p = Path(root) / f
            if not f.startswith(_NOT_DATA) and _is_data(p):
                found.append(p)
    return sorted(found, key=lambda p: p.relative_to(path).as_posix())


@dataclass(frozen=True)
class Columns:
    """Which columns hold the label, the query id and the features (module docstring)."""
    label: str = "label"
    qid: str = "qid"
    features: "str | Sequence[str] | None" = None

    def resolve(self, schema, name):
        """(feature column names, how they are read: "scalars", "list" or "vector") for the
        Arrow ``schema`` of file ``name``, or InputError naming what is missing."""
        pa = pyarrow()
        names = list(schema.names)
        for col, flag in ((self.label, "label_column"), (self.qid, "qid_column")):
            if col not in names:
                raise InputError(f"{name}: no column {col!r} (its columns: {_listed(names)}); name the "
                                 f"{'label' if flag == 'label_column' else 'query id'} column with {flag}=NAME")
        spec = self.features
        if spec is None:
            rest = [n for n in names if n not in (self.label, self.qid)]
            scalars = [n for n in rest if _numeric(pa, schema.field(n).type)]
            if scalars:
                return scalars, "scalars"
            vectors = [n for n in rest if _vector_kind(pa, schema.field(n).type)]
            if len(vectors) == 1:
                return vectors, _vector_kind(pa, schema.field(vectors[0]).type)
            raise InputError(f"{name}: no numeric feature columns besides {self.label!r} and {self.qid!r} "
                             f"(its columns: {_listed(names)}); name them with feature_columns=A,B or FIRST:LAST")
        chosen = _chosen(spec, names, name)
        for n in chosen:
            if n not in names:
                raise InputError(f"{name}: no column {n!r} (its columns: {_listed(names)}); fix feature_columns")
        if len(chosen) == 1 and _vector_kind(pa, schema.field(chosen[0]).type):
            return chosen, _vector_kind(pa, schema.field(chosen[0]).type)
        for n in chosen:
            if not _numeric(pa, schema.field(n).type):
                raise InputError(f"{name}: feature column {n!r} holds {schema.field(n).type}, not numbers; "
                                 f"leave it out of feature_columns (or give one list or vector column alone)")
        return chosen, "scalars"


def _listed(names, k=12):
    return ", ".join(repr(n) for n in names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")


def _chosen(spec, names, name):
    """Feature column names of ``spec``: a sequence of names, a name, "A,B,C" or "FIRST:LAST"."""
    if not isinstance(spec, str):
        return [str(s) for s in spec]
    if spec in names:
        return [spec]
    if ":" in spec and "," not in spec:
        first, last = spec.split(":", 1)
        for n in (first, last):
            if n not in names:
                raise InputError(f"{name}: no column {n!r} for the range {spec!r} (its columns: {_listed(names)}); "
                                 f"fix feature_columns")
        a, b = names.index(first), names.index(last)
        if a > b:
            raise InputError(f"{name}: the range {spec!r} runs backwards ({first!r} comes after {last!r}); "
                             f"give feature_columns={last}:{first}")
        return names[a:b + 1]
    return [s.strip() for s in spec.split(",") if s.strip()]


def _numeric(pa, t):
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t)


def _vector_kind(pa, t):
    """"list" for a list of numbers, "vector" for Spark ML's VectorUDT struct, else None."""
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) and \
            _numeric(pa, t.value_type):
        return "list"
    udt = {"type", "size", "indices", "values"}
    if pa.types.is_struct(t) and {t.field(i).name for i in range(t.num_fields)} >= udt:
        return "vector"
    return None


class TableSource:
    """The rows of a Parquet/Arrow source (a file or a directory of parts) as batches
    ``(X float32 (r, d), y float32 (r,), qid int64 or bytes (r,))``.

    ``files`` are the part files in reading order, ``n_rows`` the rows they hold (from their
    metadata, before a row is read), ``features`` the feature columns' names (of the first part;
    every part must have the same) or the vector column's. Rows are checked as they are read
    (module docstring); ``rows_read`` counts them.
    """

    def __init__(self, path, columns=Columns(), room=None):
        from streamrank.io.urls import location
        self.path = location(path)
        fs, inner = _fs(self.path)
        pattern = is_pattern(self.path)
        if not pattern and not (fs.exists(inner) if fs is not None else self.path.exists()):
            raise InputError(f"{self._shown(self.path)}: no such file or directory")
        self.files = part_files(self.path)
        if not self.files:
            raise InputError(f"{self._shown(self.path)}: no Parquet or Arrow files "
                             f"{'match this pattern' if pattern else 'in this directory'}")
        self.columns = columns
        self.kind = kind_of(self.files[0])
        pa = pyarrow()
        self._pa = pa
        self._metas = [self._meta(f) for f in self.files]
        self.features, self.layout = columns.resolve(self._metas[0][0], self._shown(self.files[0]))
        self.n_rows = sum(m[1] for m in self._metas)
        self.width = len(self.features) if self.layout == "scalars" else None  # a vector's: from its rows
        self.rows_read = 0
        # bytes per row alive for a batch: Arrow's values (8 per column) and their float32 copy
        row_bytes = 12 * (len(self.features) + 2) if self.layout == "scalars" else 12 * 1024
        self.batch_rows = MAX_BATCH_ROWS if room is None else max(1, min(MAX_BATCH_ROWS, room // (2 * row_bytes)))
        if room is not None:
            self._check_groups(room)

    def _check_groups(self, room):
        """Refuse a Parquet row group whose values alone take more than ``room`` bytes: pyarrow
        decodes a row group's column chunks whole, whatever the batch size."""
        from streamrank.units import format_size
        for f in self.files:
            if kind_of(f) != "parquet":
                continue
            meta = self._pa.parquet.ParquetFile(_open(f)).metadata
            names = [meta.schema.column(i).path.split(".")[0] for i in range(meta.num_columns)]
            used = [i for i, n in enumerate(names) if n in (self.columns.label, self.columns.qid, *self.features)]
            for g in range(meta.num_row_groups):
                size = sum(meta.row_group(g).column(i).total_uncompressed_size for i in used)
                if size > room:
                    raise InputError(f"{self._shown(f)}: row group {g} holds {format_size(size)} of values, more than "
                                     f"the {format_size(room)} memory_budget leaves for one; write the file with "
                                     f"smaller row groups, or give a larger memory_budget")

    def _shown(self, f):
        from streamrank.io.urls import is_url, shown
        if is_url(f):
            return shown(f)
        if f == self.path or is_pattern(self.path):
            return str(f)
        return f"{self.path}/{f.relative_to(self.path).as_posix()}"

    def _meta(self, f):
        """(schema, rows) of part file ``f``, or InputError naming it."""
        pa = self._pa
        try:
            if kind_of(f) == "parquet":
                pf = pa.parquet.ParquetFile(_open(f))
                return pf.schema_arrow, pf.metadata.num_rows
            with pa.ipc.open_file(_open(f)) as r:
                return r.schema, sum(r.get_batch(i).num_rows for i in range(r.num_record_batches))
        except (pa.ArrowException, OSError) as e:
            raise InputError(f"{self._shown(f)}: not a readable {kind_of(f) or 'Parquet/Arrow'} file ({e})") from None

    def __iter__(self):
        need = [self.columns.label, self.columns.qid, *self.features]
        for f in self.files:
            shown = self._shown(f)
            schema = self._metas[self.files.index(f)][0]
            missing = [n for n in need if n not in schema.names]
            if missing:
                raise InputError(f"{shown}: no column {missing[0]!r}, which {self._shown(self.files[0])} has; every "
                                 f"part must have the same columns")
            row = 0
            for batch in self._batches(f, need):
                X, y, qid = self._convert(batch, shown, row)
                row += len(y)
                self.rows_read += len(y)
                yield X, y, qid

    def _batches(self, f, need):
        pa = self._pa
        try:
            if kind_of(f) == "parquet":
                pf = pa.parquet.ParquetFile(_open(f))
                for g in range(pf.metadata.num_row_groups):  # one row group at a time
                    yield from pf.iter_batches(batch_size=self.batch_rows, row_groups=[g], columns=need,
                                               use_threads=False)
            else:
                with pa.ipc.open_file(_open(f)) as r:
                    for i in range(r.num_record_batches):
                        b = r.get_batch(i).select(need)
                        for a in range(0, b.num_rows, self.batch_rows):
                            yield b.slice(a, self.batch_rows)
        except (pa.ArrowException, OSError) as e:
            raise InputError(f"{self._shown(f)}: cannot be read ({e})") from None

    def _convert(self, batch, shown, row0):
        """(X, y, qid) of one Arrow batch, checked (module docstring)."""
        y = self._scalars(batch.column(self.columns.label), shown, row0, self.columns.label)
        qid = self._qid(batch.column(self.columns.qid), shown, row0)
        if self.layout == "scalars":
            X = np.empty((batch.num_rows, len(self.features)), np.float32)
            for j, n in enumerate(self.features):
                X[:, j] = self._scalars(batch.column(n), shown, row0, n)
        else:
            X = self._vectors(batch.column(self.features[0]), shown, row0)
        return X, y, qid

    def _scalars(self, col, shown, row0, name):
        """float32 values of a numeric column, or InputError at the first null or non-finite one."""
        pa = self._pa
        if col.null_count:
            r = int(np.flatnonzero(np.asarray(col.is_null()))[0])
            raise InputError(f"{shown}: row {row0 + r + 1}, column {name!r}: the value is missing (null); "
                             f"drop or impute the row")
        if pa.types.is_decimal(col.type) or pa.types.is_boolean(col.type):
            col = col.cast(pa.float64())
        v = np.asarray(col.to_numpy(zero_copy_only=False))
        with np.errstate(over="ignore", invalid="ignore"):  # past float32's range is inf: refused below
            out = v.astype(np.float32)
        if not np.isfinite(out).all():
            r = int(np.flatnonzero(~np.isfinite(out))[0])
            raise InputError(f"{shown}: row {row0 + r + 1}, column {name!r}: {v[r].item()!r} is not a finite float32 "
                             f"number; streamrank trains on finite values only (drop or impute the row)")
        return out

    def _qid(self, col, shown, row0):
        """int64 ids of an integer column, else the ids' UTF-8 bytes (as the text parser keeps
        ids that are not integers)."""
        pa = self._pa
        if col.null_count:
            r = int(np.flatnonzero(np.asarray(col.is_null()))[0])
            raise InputError(f"{shown}: row {row0 + r + 1}, column {self.columns.qid!r}: the query id is missing "
                             f"(null); drop the row or give it a query")
        t = col.type
        if pa.types.is_integer(t):
            return np.asarray(col.to_numpy(zero_copy_only=False)).astype(np.int64)
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return _text_ids([v.encode() for v in col.to_pylist()])
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return _text_ids(col.to_pylist())
        raise InputError(f"{shown}: the query id column {self.columns.qid!r} holds {t}; query ids are integers or "
                         f"text: name the right column with qid_column=NAME")

    def _vectors(self, col, shown, row0):
        """Dense float32 rows of a list column or a VectorUDT struct column."""
        pa = self._pa
        name = self.features[0]
        if col.null_count:
            r = int(np.flatnonzero(np.asarray(col.is_null()))[0])
            raise InputError(f"{shown}: row {row0 + r + 1}, column {name!r}: the vector is missing (null); "
                             f"drop the row")
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        if self.layout == "list":
            lengths = np.asarray(col.value_lengths().to_numpy(zero_copy_only=False)) if not \
                pa.types.is_fixed_size_list(col.type) else np.full(len(col), col.type.list_size)
            values = self._scalars(col.flatten(), shown, row0, name)
            width = self._vector_width(lengths, shown, row0, name)
            return values.reshape(len(col), width)
        return self._udt(col, shown, row0, name)

    def _vector_width(self, lengths, shown, row0, name):
        width = self.width if self.width is not None else int(lengths[0]) if len(lengths) else 0
        bad = np.flatnonzero(lengths != width)
        if bad.size:
            r = int(bad[0])
            raise InputError(f"{shown}: row {row0 + r + 1}, column {name!r}: a vector of {int(lengths[r])} values "
                             f"where the rows before have {width}; every row needs the same features")
        self.width = width
        return width

    def _udt(self, col, shown, row0, name):
        """Spark ML vectors: type 1 dense (``values``), type 0 sparse (``size``, 0-based
        ``indices``, ``values``)."""
        kinds = np.asarray(col.field("type").to_numpy(zero_copy_only=False))
        sizes = col.field("size")
        values_col = col.field("values")
        index_col = col.field("indices")
        n = len(col)
        n_values = np.asarray(values_col.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)).astype(np.int64)
        size = np.where(kinds == 1, n_values, np.asarray(sizes.fill_null(-1).to_numpy(zero_copy_only=False)))
        width = self._vector_width(size, shown, row0, name)
        X = np.zeros((n, width), np.float32)
        vals = self._scalars(values_col.flatten(), shown, row0, name)
        ptr = np.concatenate([[0], np.cumsum(n_values)]).astype(np.int64)
        idx_len = np.asarray(index_col.value_lengths().fill_null(0).to_numpy(zero_copy_only=False))
        iptr = np.concatenate([[0], np.cumsum(idx_len)]).astype(np.int64)
        idx = np.asarray(index_col.flatten().to_numpy(zero_copy_only=False)).astype(np.int64)
        dense = np.flatnonzero(kinds == 1)
        X[dense] = vals[ptr[dense][:, None] + np.arange(width)]
        sparse = np.flatnonzero(kinds != 1)
        bad = sparse[idx_len[sparse] != n_values[sparse]]
        cols = idx[_ranges(iptr[sparse], idx_len[sparse])]
        rows = np.repeat(sparse, idx_len[sparse])
        if bad.size == 0 and cols.size and (cols.min() < 0 or cols.max() >= width):
            bad = rows[(cols < 0) | (cols >= width)][:1]
        if bad.size:
            r = int(bad[0])
            ii = idx[iptr[r]:iptr[r + 1]]
            raise InputError(f"{shown}: row {row0 + r + 1}, column {name!r}: a sparse vector of size {width} with "
                             f"{ii.size} indices ({ii[:5].tolist()}...) for {int(n_values[r])} values; its indices "
                             f"must be 0 .. {width - 1}, one per value")
        X[rows, cols] = vals[_ranges(ptr[sparse], n_values[sparse])]
        return X


def _ranges(starts, lengths):
    """The indices starts[k] .. starts[k] + lengths[k] - 1 of every k, one after another."""
    lengths = np.asarray(lengths, np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    return np.repeat(np.asarray(starts, np.int64) - (ends - lengths), lengths) + np.arange(total)


def _text_ids(ids):
    """Query ids given as text (bytes): int64 when every one is an integer in its own decimal
    form, else the bytes, as the text parser keeps ``qid:`` tokens."""
    from streamrank.io._textparse import canonical_ints
    try:
        v = np.array([int(b) for b in ids], np.int64)
    except (ValueError, OverflowError):
        return np.array(ids, dtype="S")
    lengths = np.array([len(b) for b in ids])
    return v if canonical_ints(v, lengths) else np.array(ids, dtype="S")
