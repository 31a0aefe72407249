"""``X, y, qid = streamrank.load_ranking(path)``: a whole dataset or LETOR/SVMlight text file in
memory, as the arrays ``fit(X, y, qid=qid)`` takes (scikit-learn's ``load_svmlight_file(f,
query_id=True)``, with one query id per row).

Rows come through the project's readers: a dataset's through :meth:`Dataset.read` (every value
checked to be finite, version 2's checksums), text through the converter's chunked source and
parser (:class:`~streamrank.io.text_source.TextChunks`, the numba kernels of ``_textparse``: the
same float32 values, errors with file and line). The arrays must fit ``memory_budget`` beside what
the process holds already; otherwise the call is refused before the rows are read (a dataset) or
as soon as the rows read pass it (text, whose row count is known only at its end), with the budget
that would do. Training on the file itself (``RankSVM().fit(path)``) streams it within any budget.

Names (per row and per query, so that they cannot be confused):

- ``qid`` here, and in ``fit`` / ``predict`` / ``score``: one query id per ROW (``n_rows``).
- ``Dataset.query_ids``: one id per QUERY (``n_queries``), in stored order;
  ``Dataset.row_query_ids()`` repeats them to one per row.
- ``Dataset.query_ptr``: ``n_queries + 1`` row offsets (query q is rows ``query_ptr[q]:query_ptr[q+1]``);
  ``Dataset.query_sizes``: rows per query (LightGBM's ``group``, XGBoost's ``set_group``).
"""

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from streamrank.errors import InputError, ParameterError
from streamrank.settings import DEFAULT_MEMORY_BUDGET
from streamrank.units import budget_bytes, format_size

if TYPE_CHECKING:
    from streamrank.io.dataset import Dataset

# rows of a dataset are read in blocks of about this many bytes when they are narrowed to some
# features or cast to another dtype (otherwise they are read straight into the returned X)
READ_BLOCK_BYTES = 16 << 20
# bytes of a per-row query id: int64, or a reference to a str shared by the query's rows
QID_BYTES = 8


def load_ranking(data: "str | os.PathLike[str] | Dataset", *, features: "str | Sequence[int] | None" = None,
                 dtype: "type | np.dtype" = np.float32, memory_budget: "int | str" = DEFAULT_MEMORY_BUDGET,
                 query_file: "str | os.PathLike[str] | None" = None, zero_based: bool = False,
                 n_features: "int | None" = None, label_column: "str | None" = None,
                 qid_column: "str | None" = None,
                 feature_columns: "str | Sequence[str] | None" = None) -> "tuple[np.ndarray, np.ndarray, np.ndarray]":
    """Read a dataset or a text file whole: ``X, y, qid`` with ONE QUERY ID PER ROW.

    ``RankSVM().fit(*streamrank.load_ranking("train.h5"))`` trains on it; so does
    ``fit(X, y, qid=qid)``.

    Parameters
    ----------
    data : path or :class:`~streamrank.io.dataset.Dataset`
        A streamrank HDF5 dataset, or LETOR / SVMlight text (plain, gzip or bzip2, recognised by
        content): ``label qid:Q idx:value ... [# comment]``.
    features : None, "3,7,12", "@FILE" or a sequence of int
        Keep only these features, in this order: ids 1-based, as in the text (as ``RankSVM``'s
        ``features`` and ``train --features`` take ids; a GAS file's ``gas.h5:K`` is theirs only).
        None: every feature.
    dtype : numpy.float32 or numpy.float64
        Of X and y; float32 by default, what the estimators keep (values are float32(float(token))
        either way, as a dataset stores them).
    memory_budget : str or int, e.g. "2GB"
        Bound on the whole process's memory once the arrays are held (units as ``512MB``, ``4GiB``).
    query_file : path, optional
        Text only: group sizes, one per line, for text without ``qid:`` (LightGBM's ``.query``;
        by default ``PATH.query`` beside such text, as the command line takes it).
    zero_based : bool
        Text only: feature indices start at 0.
    n_features : int, optional
        Text only: the width of X (train, validation and test files then agree); a wider index is
        an error.
    label_column, qid_column, feature_columns : str, optional
        Parquet / Arrow only (a file, a directory of parts as Spark writes them, or a glob pattern
        such as ``"s3://bkt/features/part-*.parquet"``): the columns
        of the label (default ``label``), the query id (default ``qid``) and the features
        (``"A,B,C"``, ``"FIRST:LAST"``, one list or Spark ML vector column; default every other
        numeric column), as ``streamrank convert`` takes them (:mod:`streamrank.io.table_source`).

    Returns
    -------
    X : ndarray (n_rows, n_features) of ``dtype``
    y : ndarray (n_rows,) of ``dtype``
    qid : ndarray (n_rows,)
        Each row's query id: int64, or str (object array) when the ids are not integers.

    Row order: a dataset's stored order (its queries whole, in order of first appearance, as
    :meth:`Dataset.read` gives them; ``Dataset.row`` maps them to input lines); text's line order
    (as ``load_svmlight_file``). ``fit`` groups rows by ``qid`` whatever their order.
    """
    from streamrank.io.dataset import Dataset
    dtype = _float_dtype(dtype)
    budget = budget_bytes(memory_budget)
    ids = _feature_ids(features)
    if isinstance(data, Dataset):
        _text_only(data.name, query_file, zero_based, n_features)
        return _from_dataset(data, ids, dtype, budget)
    if not isinstance(data, (str, os.PathLike)):
        raise ParameterError(f"data must be a path (a dataset or LETOR/SVMlight text) or a Dataset; got "
                             f"{type(data).__name__}. Use load_ranking(\"train.h5\")")
    from streamrank.io.table_source import Columns, kind_of
    from streamrank.io.urls import is_url
    if is_url(data):
        return _from_url(str(data), Columns(label_column or "label", qid_column or "qid", feature_columns), ids,
                         dtype, budget, (query_file, zero_based, n_features))
    path = Path(os.fspath(data))
    from streamrank.io.table_source import is_pattern
    if not path.exists() and not is_pattern(path):
        raise InputError(f"{path}: no such file")
    if kind_of(path):
        _text_only(path, query_file, zero_based, n_features)
        return _from_table(path, Columns(label_column or "label", qid_column or "qid", feature_columns), ids, dtype,
                           budget)
    if any(c is not None for c in (label_column, qid_column, feature_columns)):
        raise ParameterError(f"{path} is not Parquet or Arrow: label_column, qid_column and feature_columns apply "
                             f"to tables only")
    if path.is_dir():
        raise InputError(f"{path} is a directory; give a dataset file (.h5) or LETOR/SVMlight text")
    import h5py
    if h5py.is_hdf5(path):
        _text_only(path, query_file, zero_based, n_features)
        with Dataset(path) as ds:  # registered as an input while it is open
            return _from_dataset(ds, ids, dtype, budget)
    return _from_text(path, ids, dtype, budget, query_file, zero_based, n_features)


def _float_dtype(dtype):
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    # float32 holds every value exactly (they are float32 as read); float16 would round them or overflow
    if dt is None or dt not in (np.float32, np.float64):
        raise ParameterError(f"dtype must be numpy.float32 or numpy.float64 (a value read is a float32); got "
                             f"{dtype!r}. Use dtype=numpy.float32")
    return dt


def _text_only(name, query_file, zero_based, n_features):
    for key, value, unset in (("query_file", query_file, None), ("zero_based", zero_based, False),
                              ("n_features", n_features, None)):
        if value is not unset and value != unset:
            raise ParameterError(f"{name} is a dataset, which holds its queries and its width; {key} applies to "
                                 f"LETOR/SVMlight text only. Leave {key} out")


def _feature_ids(features):
    """1-based feature ids (int64 array) from ``features``, or None for every feature."""
    if features is None:
        return None
    if isinstance(features, (str, os.PathLike)):
        spec = os.fspath(features).strip()
        if ":" in spec and spec.rsplit(":", 1)[0].endswith((".h5", ".hdf5")):
            raise ParameterError(f"features {spec!r}: load_ranking takes feature ids (1-based), not a GAS file; "
                                 f"list the ids, e.g. features=3,7,12 (the selection's JSON lists "
                                 f"them), or train on the file: RankSVM(features={spec!r}).fit(path)")
        text = spec
        if spec.startswith("@"):
            from streamrank.io.urls import read_bytes
            try:
                text = read_bytes(spec[1:]).decode("utf-8-sig", "replace")
            except OSError as e:
                raise ParameterError(f"features {spec!r}: cannot read {spec[1:]} ({e.strerror})") from None
        tokens = text.replace(",", " ").split()
    else:
        spec = features
        tokens = list(np.ravel(np.asarray(features, dtype=object)))
    try:
        ids = [_whole(t) for t in tokens]
    except (TypeError, ValueError):
        raise ParameterError(f"features {spec!r}: feature ids are integers (1-based, as in the data); use "
                             f"features=3,7,12, features=@FILE or features=[3, 7, 12]") from None
    ids = np.asarray(ids, np.int64)
    if ids.size == 0:
        raise ParameterError(f"features {spec!r} names no feature; use features=1,2,3")
    if ids.min() < 1:
        raise ParameterError(f"features {spec!r}: ids are 1-based, as in the data; got {int(ids.min())}. "
                             f"Use features=1,2,3")
    if np.unique(ids).size != ids.size:
        raise ParameterError(f"features {spec!r} names a feature twice; use features=1,2,3 (each id once)")
    return ids


def _whole(token):
    if isinstance(token, (bool, np.bool_)):
        raise TypeError
    if isinstance(token, str):
        return int(token)
    if isinstance(token, (int, np.integer)):
        return int(token)
    if isinstance(token, (float, np.floating)) and float(token).is_integer():
        return int(token)
    raise TypeError


def _check_width(name, ids, width):
    if ids is not None and ids.max() > width:
        raise ParameterError(f"features: id {int(ids.max())} is beyond the {width} features of {name}; ids are "
                             f"1-based, in 1..{width}. Use features=1,2,3")


def _row_bytes(k, itemsize):
    """Bytes a returned row holds: k features and a label of ``itemsize``, and its query id."""
    return (k + 1) * itemsize + QID_BYTES


def _refuse(name, what, need, budget, resident, fix_more=""):
    from streamrank.io.budget import STREAM_SLACK
    need_mb = -(-int(need) // 10**6)
    base = resident + STREAM_SLACK
    if budget <= base:  # below what the process holds before any row: the budget alone
        raise ParameterError(f"{name}: memory_budget {format_size(budget)} is below the {format_size(base)} this "
                             f"process holds before reading a row; {what}. Use memory_budget={need_mb}MB{fix_more}")
    raise ParameterError(
        f"{name}: {what}; with the {format_size(resident)} this process holds that is {format_size(need)}, more than "
        f"memory_budget {format_size(budget)}. Use memory_budget={need_mb}MB{fix_more}, fewer features (features=...), "
        f"or train on the file, which streams it in blocks within the budget: RankSVM().fit({str(name)!r})")


def _from_dataset(ds, ids, dtype, budget):
    from streamrank.io.budget import STREAM_SLACK, resident_bytes
    from streamrank.io.feature_subset import take_columns
    n, d = ds.n_rows, ds.n_features
    _check_width(ds.name, ids, d)
    k = d if ids is None else ids.size
    cols = None if ids is None else ids - 1
    direct = cols is None and dtype == np.float32  # rows read straight into X
    block_rows = max(1, min(n, READ_BLOCK_BYTES // (4 * (d + 1))))
    work = 0 if direct else block_rows * 4 * (d + 1)
    held = n * _row_bytes(k, dtype.itemsize)
    resident = resident_bytes()  # the finite check's kernels loaded, as the read will
    need = resident + STREAM_SLACK + held + work
    if need > budget:
        _refuse(ds.name, f"its {n:,} rows of {k:,} features take {format_size(held)} in memory as {dtype.name} "
                         f"(X, y and qid)", need, budget, resident)
    X = np.empty((n, k), dtype)
    y = np.empty(n, dtype)
    if direct:
        ds.read(0, n, out=(X, y))
    else:
        for a in range(0, n, block_rows):
            b = min(n, a + block_rows)
            Xb, yb = ds.read(a, b)
            X[a:b] = Xb if cols is None else take_columns(Xb, cols)
            y[a:b] = yb
    return X, y, ds.row_query_ids()


def _from_url(url, columns, ids, dtype, budget, text_settings):
    """X, y, qid of a dataset or a Parquet/Arrow source at a URL (text there: convert it first)."""
    from streamrank.io.dataset import HDF5_SIGNATURE, Dataset
    from streamrank.io.table_source import kind_of
    from streamrank.io.text_source import open_raw
    from streamrank.io.urls import shown
    query_file, zero_based, n_features = text_settings
    if kind_of(url):
        _text_only(shown(url), query_file, zero_based, n_features)
        return _from_table(url, columns, ids, dtype, budget)
    with open_raw(url) as f:
        head = f.read(8)
    if head != HDF5_SIGNATURE:
        raise InputError(f"{shown(url)}: text at a URL is read by streamrank convert; convert it into a dataset "
                         f"(convert URL -o OUT.h5), then load that")
    _text_only(shown(url), query_file, zero_based, n_features)
    with Dataset(url) as ds:
        return _from_dataset(ds, ids, dtype, budget)


def _from_table(path, columns, ids, dtype, budget):
    """X, y, qid of a Parquet/Arrow source, its rows in order (:mod:`streamrank.io.table_source`)."""
    from streamrank.io.budget import STREAM_SLACK, resident_bytes
    from streamrank.io.feature_subset import take_columns
    from streamrank.io.table_source import TableSource
    resident = resident_bytes()
    src = TableSource(path, columns, room=max(budget - resident - STREAM_SLACK, 1 << 20) // 4)
    k = src.width if ids is None or src.width is None else ids.size
    if src.width is not None:
        _check_width(path, ids, src.width)
        need = resident + STREAM_SLACK + src.n_rows * _row_bytes(k, dtype.itemsize)
        if need > budget:
            _refuse(path, f"its {src.n_rows:,} rows of {k:,} features take {format_size(need - resident)} in memory "
                          f"as {dtype.name} (X, y and qid)", need, budget, resident)
    parts = []
    for X, y, qid in src:
        parts.append((X if ids is None else take_columns(X, ids - 1), y, qid))
    if not parts:
        raise InputError(f"{path}: no data rows")
    width = max(p[0].shape[1] for p in parts)
    if ids is None:
        _check_width(path, ids, width)
    X = np.concatenate([p[0] for p in parts]).astype(dtype, copy=False)
    y = np.concatenate([p[1] for p in parts]).astype(dtype, copy=False)
    return X, y, _join_qids([p[2] for p in parts])


def _from_text(path, ids, dtype, budget, query_file, zero_based, n_features):
    from streamrank import params
    from streamrank.io.atomic import reading
    from streamrank.io.budget import STREAM_SLACK, resident_bytes
    from streamrank.io.convert import _Parser, query_file_of, query_ids_of_rows, read_query_file
    from streamrank.io.feature_subset import take_columns
    from streamrank.io.text_source import TextChunks
    if n_features is not None:
        n_features = params.check("n_features", n_features)
        _check_width(path, ids, n_features)
    cols = None if ids is None else ids - 1
    qf = query_file_of(path, query_file)
    if qf is not None and not qf.exists():
        raise InputError(f"{qf}: no such file")
    chunk_bytes, work = text_plan(path)
    resident = resident_bytes()
    fixed = resident + STREAM_SLACK + work  # a chunk of text and its parse
    if fixed > budget:
        _refuse(path, f"parsing text takes {format_size(fixed - resident - STREAM_SLACK)} at a time (chunks of "
                      f"{format_size(chunk_bytes)} with their parse)", fixed, budget, resident)
    # a chunk whose dense rows alone would pass the budget (millions of features) is refused by the parser
    parser = _Parser(n_features, zero_based, keep_comments=False, room=max(budget - resident - STREAM_SLACK, 1 << 20))
    total_raw = max(path.stat().st_size, 1)
    parts = []  # (X float32 or dtype, y, qid) of each chunk, as parsed (X of the width then known)
    held = 0
    n = 0
    with reading((path, "data"), *(((qf, "query file"),) if qf is not None else ())):
        cum = None
        if qf is not None:
            cum = np.cumsum(read_query_file(qf))
        src = TextChunks(path, chunk_bytes, line_ends=True)
        for buf, first_line, ends in src:
            try:
                X, y, qid, _ = parser.parse(path, buf, first_line, qf is None, ends)
            except InputError as e:  # the converter's message, in this function's terms
                raise InputError(str(e).replace("use query_files=F", "use query_file=F")) from None
            r = X.shape[0]
            if qf is not None:
                qid = query_ids_of_rows(cum, n, r, qf, path)
            n += r
            if n >= 10000:
                parser.check_density(path)
            if r:
                Xk = X if cols is None else take_columns(X, cols)
                Xk = Xk.astype(dtype, copy=False)
                parts.append((Xk, y.astype(dtype, copy=False), qid))
                held += Xk.nbytes + r * (dtype.itemsize + QID_BYTES)
            # the chunks held and the arrays they are copied into at the end
            k = parser.width if ids is None else ids.size
            need = fixed + held + n * _row_bytes(k, dtype.itemsize)
            if need > budget:
                share = src.raw_bytes / total_raw
                if share < 1:  # the whole file's rows, in proportion to the share of its bytes read
                    need = fixed + (need - fixed) / max(share, 1e-9)
                _refuse(path, f"its first {n:,} rows (to line {first_line + len(ends):,}, {100 * share:.0f}% of the "
                              f"file) of {k:,} features take {format_size(held)} in memory as {dtype.name} (X, y and "
                              f"qid), and twice that while they are joined", need, budget, resident,
                        fix_more=" (about, for the whole file)" if share < 1 else "")
            src.recycle(buf)
        if n == 0:
            raise InputError(f"{path}: no data rows (the file is empty or holds only comments)")
        if cum is not None and n != cum[-1]:
            raise InputError(f"{qf}: the group sizes add up to {int(cum[-1])} rows but {path} has {n}")
        parser.check_density(path)
    width = parser.width
    _check_width(path, ids, width)
    k = width if ids is None else ids.size
    X = np.zeros((n, k), dtype)
    y = np.empty(n, dtype)
    a = 0
    qids = []
    while parts:  # each chunk is dropped once copied: the chunks and X are not held twice over
        Xc, yc, qc = parts.pop(0)
        b = a + Xc.shape[0]
        X[a:b, :Xc.shape[1]] = Xc  # a chunk parsed before a wider row came has fewer columns: 0
        y[a:b] = yc
        qids.append(qc)
        a = b
    return X, y, _join_qids(qids)


# Bytes alive while text is read, per byte of a chunk: the chunk's buffer and the next one, the
# parser's per-line arrays and the chunk's parsed rows; compressed text also holds what one raw read
# (text_source.RAW_READ_BYTES) decompresses to before it is cut into chunks. Each value bounds
# the peak RSS it stands for with a margin (docs/design.md, "Measurements behind the code").
TEXT_BYTES_PER_CHUNK_BYTE = {"plain": 6, "gzip": 12, "bzip2": 12}
# a compressed file's text is taken to be at most this many times its size when its chunks are
# sized (LETOR text compresses 3 to 8 times; a larger ratio only makes more chunks)
TEXT_RATIO = 8


def text_plan(path):
    """(bytes of text parsed at a time, bytes alive while reading): the converter's chunk, or the
    file's text when it is smaller (plain: its size; compressed: ``TEXT_RATIO`` times it)."""
    from streamrank.io import text_source
    kind = text_source.TextChunks(path).kind
    size = Path(path).stat().st_size
    chunk = max(1, min(text_source.DEFAULT_CHUNK_BYTES, size + 1 if kind == "plain" else TEXT_RATIO * size + 1))
    return chunk, TEXT_BYTES_PER_CHUNK_BYTE.get(kind, max(TEXT_BYTES_PER_CHUNK_BYTE.values())) * chunk


def _join_qids(parts):
    """One array of per-row ids from the chunks' (int64, or bytes where a chunk's ids are not all
    integers in their own decimal form): int64 when every chunk's are, else str (object array;
    an int chunk's ids are their own text, so nothing changes)."""
    if all(p.dtype.kind in "iu" for p in parts):
        return np.concatenate(parts).astype(np.int64, copy=False)
    text = np.concatenate([p.astype(str) if p.dtype.kind in "iu" else np.char.decode(p, "utf-8") for p in parts])
    unique, inverse = np.unique(text, return_inverse=True)
    return unique.astype(object)[inverse.ravel()]  # one str object per query, shared by its rows
