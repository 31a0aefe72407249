"""The progress record of a conversion, so that a killed or interrupted ``convert`` continues
where it last committed instead of starting again.

Beside the output ``NAME`` a conversion writes ``.NAME.convert.h5`` (the dataset being written)
and, at each commit, ``.NAME.convert.json`` (JSON, written atomically): format name and version,
the inputs (absolute path, size, modification time; a query file's sha256), the settings that shape
the output, where the next chunk of text starts (input, text offset, line, and the anchor that proves
the text before it: a count of raw bytes and their sha256) and the writer's state
(``DatasetWriter.commit_state``: rows, query bookkeeping and the digests of the committed rows).
A ``.NAME.convert.lock`` file, locked while a conversion runs, keeps two conversions of one output
apart. The next conversion with the same inputs and settings resumes from the record; with others
it discards it. The files are removed when the output is complete.
"""

import fcntl
import hashlib
import json
import os
from pathlib import Path

from streamrank.errors import InputError
from streamrank.io.atomic import storage_error, written

FORMAT_NAME = "streamrank-convert-progress"
# 2: a commit proves the text it continues from (the position's anchor, the query files' sha256)
FORMAT_VERSION = 2
# the lock file may be replaced between our open and our lock (a conversion that ends removes it):
# a retry each time, as the feature cache's claim does, but not for ever
LOCK_ATTEMPTS = 100


def work_paths(output):
    """(partial dataset, progress record, lock) beside ``output``."""
    output = Path(output)
    stem = f".{output.name}.convert"
    return output.with_name(stem + ".h5"), output.with_name(stem + ".json"), output.with_name(stem + ".lock")


def identity(inputs, query_files, settings):
    """What a progress record must match to be continued: the inputs as they are now (the query
    files, which are small, by their content too) and the settings. The text inputs' bytes already
    read are proven where the record is continued (``convert._changed_input``)."""
    def stamp(p, content=False):
        from streamrank.io.urls import is_url, object_stamp
        if is_url(p):  # an object: its size and ETag / version (a changed object has another)
            return object_stamp(str(p))
        st = Path(p).stat()
        out = {"path": str(Path(p).resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        if content:
            out["sha256"] = hashlib.sha256(Path(p).read_bytes()).hexdigest()
        return out
    return {"inputs": [stamp(p) for p in inputs], "query_files": [stamp(p, True) for p in (query_files or [])],
            "settings": json.loads(json.dumps(settings, default=_plain))}


def _plain(v):
    """numpy scalars (``n_features=np.int64(46)``) as the JSON numbers they are."""
    if hasattr(v, "item"):
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON serialisable")


class Lock:
    """An exclusive lock on the lock file of one output, held while converting to it."""

    def __init__(self, path, output, wait=False):
        self.path = Path(path)
        for _ in range(LOCK_ATTEMPTS):
            try:
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise storage_error(output, e) from None
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(self.fd)
                raise InputError(f"{output}: another conversion is writing it now; wait for it to end") from None
            # the holder before us may have removed the file after we opened it: lock the one on disk
            try:
                if os.fstat(self.fd).st_ino == os.stat(self.path).st_ino:
                    return
            except FileNotFoundError:
                pass
            os.close(self.fd)
        self.fd = None
        raise InputError(f"{output}: its lock file {self.path} was replaced {LOCK_ATTEMPTS} times while this "
                         f"conversion waited for it: other conversions keep writing it; wait for them to end")

    def release(self, remove=False):
        if self.fd is None:
            return
        if remove:
            self.path.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = None


def load(record_path, ident):
    """The progress record at ``record_path`` if it continues a conversion of ``ident``, else None."""
    try:
        rec = json.loads(Path(record_path).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT_NAME or rec.get("version") != FORMAT_VERSION:
        return None
    return rec if rec.get("identity") == ident else None


def save(record_path, ident, position, writer_state, sources, parser_state):
    """Write the record of a commit atomically: ``position`` (where the next text starts), the
    writer's and the parser's state and the ``source`` entries of the inputs already complete."""
    rec = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "identity": ident, "position": position,
           "writer": writer_state, "sources": sources, "parser": parser_state}
    with written(record_path) as tmp:
        Path(tmp).write_text(json.dumps(rec))


def discard(*paths):
    for p in paths:
        Path(p).unlink(missing_ok=True)
