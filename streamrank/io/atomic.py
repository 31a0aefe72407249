"""Files that appear whole or not at all: written under a temporary name beside the target (same
file system), fsynced, renamed over the target, and the directory fsynced. A crash at any instant
leaves the old file or the new one, never a part of the new one under the target's name; a
temporary name is hidden (a leading dot) and carries the writer's pid."""

import os
from contextlib import contextmanager
from pathlib import Path


def temp_name(path):
    """A hidden name beside ``path``: same file system, so the final rename is atomic."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def fsync_file(path):
    """Flush ``path``'s data to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory):
    """Flush a directory's entries (renames, new names) to the disk, where the platform can."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_replace(tmp, path):
    """fsync ``tmp`` then rename it over ``path`` and fsync the directory."""
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


@contextmanager
def written(path):
    """``with written(path) as tmp:`` write ``tmp``; on leaving the block it replaces ``path``
    (:func:`atomic_replace`), or is deleted if the block raised."""
    path = Path(path)
    tmp = temp_name(path)
    try:
        yield tmp
        atomic_replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
