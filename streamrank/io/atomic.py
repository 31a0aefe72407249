"""Files that appear whole or not at all: written under a temporary name beside the target (same
file system), fsynced, renamed over the target, and the directory fsynced. A crash at any instant
leaves the old file or the new one, never a part of the new one under the target's name; a
temporary name is hidden (a leading dot) and carries the writer's pid, and the temporary files of
writers that died are removed by the next write of the same target.

Only a regular file or a missing name is ever renamed over: a special file (``/dev/stdout``, a
pipe) is written in place where the caller allows it, and refused otherwise.
:func:`check_writable` tries a location before the work that will fill it starts.
"""

import errno
import os
import re
from contextlib import contextmanager
from pathlib import Path

from streamrank.errors import InputError, StorageError
from streamrank.units import format_size


def temp_name(path):
    """A hidden name beside ``path``: same file system, so the final rename is atomic."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def remove_stale_temps(path):
    """Delete the temporary files beside ``path`` (``.NAME.PID.tmp`` and what follows from it) whose
    writer process is gone: what a killed writer left. Returns the names removed."""
    path = Path(path)
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.(\d+)\.(tmp(\..*)?|probe)$")
    removed = []
    try:
        names = os.listdir(path.parent if str(path.parent) else ".")
    except OSError:
        return removed
    for name in names:
        m = pattern.match(name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            try:
                (path.parent / name).unlink()
                removed.append(name)
            except OSError:  # pragma: no cover - removed meanwhile, or not ours
                pass
    return removed


def is_special(path):
    """True for an existing path that is not a regular file or directory (a device, a pipe; symlinks followed)."""
    path = Path(path)
    return path.exists() and not path.is_file() and not path.is_dir()


def check_writable(path, what="output", *, special_ok=False):
    """Refuse, before any work, a ``path`` that cannot take the file: a directory, a special file
    (unless ``special_ok``: then it is written in place), a missing or read-only directory, a full
    disk. Probes by creating and removing the temporary name beside it; removes stale temporary
    files of dead writers."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: the {what} is a directory; give a file name, e.g. {path / 'out.h5'}")
    if is_special(path):
        if special_ok:
            return
        raise InputError(f"{path}: the {what} must be a regular file (it is a device or a pipe)")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise InputError(f"{path}: the directory {parent} does not exist; create it first (mkdir -p {parent})")
    if not parent.is_dir():
        raise InputError(f"{path}: {parent} is not a directory")
    remove_stale_temps(path)
    probe = path.with_name(f".{path.name}.{os.getpid()}.probe")  # never a writer's temporary name
    created = False
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        created = True
        try:
            os.write(fd, b"\0" * 4096)  # a full disk refuses a page, if not the name
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise InputError(f"{path}: the {what} cannot be written there ({why(e)}); choose another location") from None
    finally:
        if created:
            try:
                probe.unlink()
            except OSError:
                pass


def _errno_of(e):
    """The errno of an OSError, or the one HDF5 writes into its messages (``errno = 28``)."""
    code = getattr(e, "errno", None)
    if code is None:
        m = re.search(r"errno = (\d+)", str(e))
        code = int(m.group(1)) if m else None
    return code


def why(e):
    """The cause of an OSError (or of h5py's RuntimeError from a failed flush) in a few words."""
    code = _errno_of(e)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on the device"
    if code == errno.EFBIG:
        return "file too large for this process's file size limit (ulimit -f)"
    if code == errno.EROFS:
        return "read-only file system"
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return getattr(e, "strerror", None) or str(e).splitlines()[0][:200]


def storage_error(path, e):
    """A :class:`StorageError` for a write of ``path`` that failed with ``e`` (an OSError, or the
    RuntimeError h5py raises when a flush fails)."""
    err = StorageError(f"{path}: cannot be written ({why(e)}); nothing was left half-written. Free space or "
                       f"choose another location, then run again")
    err.errno = _errno_of(e)
    return err


# room kept free beyond what a write will add: HDF5's own metadata (object headers, chunk indexes,
# the free-space bookkeeping) of the files streamrank writes stays well under this
SPACE_MARGIN = 64 << 10


def free_bytes(path):
    """Bytes an unprivileged writer may still add on the file system that holds ``path``."""
    st = os.statvfs(Path(path).parent if str(Path(path).parent) else ".")
    return st.f_bavail * st.f_frsize


def file_size_limit():
    """This process's file size limit in bytes (RLIMIT_FSIZE, ``ulimit -f``), or None without one."""
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def ensure_space(path, nbytes, shown=None):
    """Raise :class:`StorageError` unless ``nbytes`` (and :data:`SPACE_MARGIN`) fit beside ``path``
    and inside the process's file size limit (where a write past it raises EFBIG, or kills the
    process with SIGXFSZ unless that signal is ignored). Messages name ``shown`` (the user's
    output, when ``path`` is the hidden file being written), else ``path``.

    HDF5 must never meet a full disk itself: a flush that fails leaves its file in a state that
    later crashes the interpreter (measured: a segmentation fault at exit after ENOSPC in a close),
    so every HDF5 writer of streamrank checks the room before it writes a block.
    """
    limit = file_size_limit()
    if limit is not None:
        try:
            size = os.stat(path).st_size
        except OSError:
            size = 0
        if size + nbytes + SPACE_MARGIN > limit:
            err = StorageError(f"{shown or path}: cannot be written (file too large: {format_size(size + nbytes)} would "
                               f"pass this process's file size limit of {format_size(limit)}, ulimit -f); nothing "
                               f"was left half-written. Raise the limit, then run again")
            err.errno = errno.EFBIG
            raise err
    free = free_bytes(path)
    if free < nbytes + SPACE_MARGIN:
        err = StorageError(f"{shown or path}: cannot be written (no space left on the device: {format_size(nbytes)} more "
                           f"to write, {format_size(free)} free); nothing was left half-written. Free space or "
                           f"choose another location, then run again")
        err.errno = errno.ENOSPC
        raise err


def discard_h5(f, tmp):
    """Close an h5py File being written to the temporary ``tmp`` and remove ``tmp`` (a failed or
    abandoned write). A close that fails is not retried: removing the file is what matters."""
    try:
        f.close()
    except Exception:  # h5py raises RuntimeError or OSError when the last flush fails
        pass
    try:
        os.unlink(tmp)
    except OSError:
        pass


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
def written(path, *, special_ok=False):
    """``with written(path) as tmp:`` write ``tmp``; on leaving the block it replaces ``path``
    (:func:`atomic_replace`), or is deleted if the block raised. A special file (``/dev/stdout``)
    is written in place when ``special_ok`` (``tmp`` is ``path`` itself), refused otherwise."""
    path = Path(path)
    if is_special(path):
        if not special_ok:
            raise InputError(f"{path}: must be a regular file (it is a device or a pipe)")
        yield path
        return
    remove_stale_temps(path)
    tmp = temp_name(path)
    try:
        yield tmp
        atomic_replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_atomically(path, data, *, special_ok=False):
    """Write ``data`` (str as UTF-8, or bytes) to ``path`` as a whole: a temporary name, then a
    rename (:func:`written`, ``special_ok`` as there), so a reader sees the old file or the new
    one, never a part."""
    with written(path, special_ok=special_ok) as tmp:
        Path(tmp).write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
