"""Opening what a user names as data: an HDF5 dataset as it is, LETOR/SVMlight text converted
once into a cache and reused while the text is unchanged."""

import hashlib
from pathlib import Path

import h5py

from streamrank.errors import InputError
from streamrank.io.dataset import open_dataset
from streamrank.settings import DEFAULT_MEMORY_BUDGET, default_cache_dir


def open_data(path, cache_dir=None, quiet=True, query_file=None, memory_budget=DEFAULT_MEMORY_BUDGET):
    """Open an HDF5 dataset, or convert LETOR/SVMlight text into ``cache_dir`` first (with the
    group sizes of ``query_file``, or of ``PATH.query`` beside it, for text without qid).

    The cached conversion is keyed by the text file's (and the query file's) absolute path, device,
    inode, size, modification time and status-change time, and reused while all stay the same. The
    status-change time is what makes the key a proof: a write, a replacement or a timestamp set back
    (``touch -d``, ``cp -p``, ``rsync -t``) all leave size and mtime as they were but move ctime,
    which no unprivileged process can set.
    """
    from streamrank.io.urls import is_url
    if is_url(path):
        return _open_url(str(path), query_file, cache_dir, quiet, memory_budget)
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    from streamrank.io.table_source import kind_of
    kind = kind_of(path)
    if kind:
        raise InputError(f"{path} is {'Parquet' if kind == 'parquet' else 'Arrow'}: convert it into a dataset first "
                         f"(streamrank.convert, with its label_column, qid_column and feature_columns), then give the "
                         f"dataset")
    if path.is_dir():
        raise InputError(f"{path} is a directory; give a dataset file (.h5) or LETOR/SVMlight text")
    if h5py.is_hdf5(path):
        if query_file is not None:
            raise InputError(f"{path} is a dataset file, which holds its queries; query_files applies to text")
        return open_dataset(path)
    from streamrank.io.convert import query_file_of  # text only: an HDF5 run imports no parser
    qf = query_file_of(path, query_file)
    stamp = ""
    for p in (path, qf) if qf is not None else (path,):
        if not p.exists():
            raise InputError(f"{p}: no such file")
        st = p.stat()
        stamp += f"{p.resolve()}\0{st.st_dev}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0"
    key = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / f"{path.name}.{key}.h5"
    _convert_once(path, target, qf, quiet, memory_budget)
    ds = open_dataset(target)
    ds.name = str(path)  # messages about its rows name the user's file, not the cache
    return ds


def _convert_once(source, target, qf, quiet, memory_budget):
    """Convert text ``source`` into ``target`` in the cache unless it is there; another command
    converting the same text into this cache is waited for, then its file used."""
    from streamrank.io.convert import convert
    if target.exists():
        return
    from streamrank.io.convert_progress import Lock
    waiting = Lock(target.parent / f".{target.name}.open.lock", target, wait=True)
    try:
        if not target.exists():
            convert([source], target, quiet=quiet, query_files=None if qf is None else [qf],
                    memory_budget=memory_budget)
    finally:
        waiting.release(remove=True)


def _open_url(url, query_file, cache_dir, quiet, memory_budget):
    """A dataset at a URL, read where it is (:class:`~streamrank.io.dataset.Dataset`); text at a
    URL is converted once into ``cache_dir``, keyed by the object's size and ETag (or version), so
    a changed object is converted again."""
    import json

    from streamrank.io.dataset import HDF5_SIGNATURE
    from streamrank.io.text_source import open_raw
    from streamrank.io.urls import Url, object_stamp, shown
    if query_file is not None:
        raise InputError(f"{shown(url)}: query_files applies to local text; give its qid: in the lines")
    with open_raw(url) as f:
        head = f.read(8)
    if head == HDF5_SIGNATURE:
        return open_dataset(url)
    key = hashlib.sha256(json.dumps(object_stamp(url), sort_keys=True).encode()).hexdigest()[:16]
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / f"{Url(url).name}.{key}.h5"
    _convert_once(url, target, None, quiet, memory_budget)
    ds = open_dataset(target)
    ds.name = shown(url)
    return ds
