"""Files that appear whole or not at all: written under a temporary name beside the target (same
file system), fsynced, renamed over the target, and the directory fsynced. A crash at any instant
leaves the old file or the new one, never a part of the new one under the target's name; a
temporary name is hidden (a leading dot) and carries the writer's pid, and the temporary files of
writers that died are removed by the next write of the same target.

Only a regular file or a missing name is ever renamed over: a special file (``/dev/stdout``, a
pipe) is written in place where the caller allows it, and refused otherwise.
:func:`check_writable` tries a location before the work that will fill it starts.

No output is, or links to, an input (DESIGN.md, "Guarantees"): readers and commands register the
files this process reads (:func:`register_input`, :func:`reading`), and every path here that
creates or replaces a file (:func:`written`, :func:`write_atomically`, :func:`atomic_replace`,
:func:`check_writable`) refuses a target that is one of them, by resolved path or by device and
inode, so a symbolic or hard link to an input is refused too.
"""

import errno
import os
import re
import stat
import threading
from contextlib import contextmanager
from pathlib import Path

from streamrank.errors import InputError, StorageError
from streamrank.units import format_size

# the inputs of this process: token -> (resolved path, (st_dev, st_ino) or None, what, path as given)
_INPUTS = {}
_INPUTS_LOCK = threading.Lock()
_NEXT_TOKEN = [0]


def _identity(path):
    """(resolved path, (st_dev, st_ino) or None) of ``path``; character devices (a terminal,
    /dev/null), which no write destroys, have no identity."""
    resolved = os.path.realpath(os.path.abspath(os.fspath(path)))
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return resolved, None
    if stat.S_ISCHR(st.st_mode):
        return None, None
    return resolved, (st.st_dev, st.st_ino)


def register_input(path, what="input"):
    """Record ``path`` as a file this process reads (``what``: how messages call it, e.g. "DATA" or
    "--valid"): until :func:`forget_input` of the returned token, no output may be it or link to
    it. A directory registers nothing (its files are the inputs). Returns the token (None when
    nothing was registered)."""
    if path is None or str(path) in ("", "-"):
        return None
    if _is_url(path):  # an object in a store: the URL is its identity (no links there)
        resolved, ident = str(path), None
    elif os.path.isdir(path):
        return None
    else:
        resolved, ident = _identity(path)
    if resolved is None:
        return None
    with _INPUTS_LOCK:
        _NEXT_TOKEN[0] += 1
        token = _NEXT_TOKEN[0]
        _INPUTS[token] = (resolved, ident, what, str(path))
    return token


def forget_input(token):
    """End the registration :func:`register_input` returned ``token`` for (None: nothing)."""
    if token is not None:
        with _INPUTS_LOCK:
            _INPUTS.pop(token, None)


@contextmanager
def reading(*items):
    """``with reading((path, what), ...):`` the paths are registered inputs inside the block."""
    tokens = []
    try:
        for path, what in items:
            tokens.append(register_input(path, what))
        yield
    finally:
        for t in tokens:
            forget_input(t)


def registered_inputs():
    """[(path as given, what)] of the inputs registered now."""
    with _INPUTS_LOCK:
        return [(shown, what) for _, _, what, shown in _INPUTS.values()]


def input_of(path):
    """``(what, path as given, how)`` of the registered input that output ``path`` is or links to
    (``how``: "is", "is a symbolic link to" or "is a hard link to"), or None."""
    with _INPUTS_LOCK:
        entries = list(_INPUTS.values())
    if not entries:
        return None
    if _is_url(path):
        hit = [(what, shown) for in_resolved, _, what, shown in entries if in_resolved == str(path)]
        return (*hit[0], "is") if hit else None
    resolved, ident = _identity(path)
    if resolved is None:
        return None
    for in_resolved, in_ident, what, shown in entries:
        if resolved == in_resolved:
            return what, shown, "is a symbolic link to" if os.path.islink(path) else "is"
        # the same (device, inode) is a hard link only while the input still has it: a deleted
        # input's inode is free for a new file (a later output), and a replaced one's (still open
        # here, or freed) is not what its path names any more
        if ident is not None and ident == in_ident and _identity(in_resolved)[1] == in_ident:
            return what, shown, "is a hard link to"
    return None


def check_not_input(path, what="output", *, flag=None, within=None):
    """Refuse to write ``path`` when it is, or links to, a registered input (:func:`register_input`):
    writing it would destroy that input. ``flag``: the command-line option that named ``path``, or
    the directory ``within`` that holds it (messages then name it), else ``what`` names the output."""
    hit = input_of(path)
    if hit is None:
        return
    in_what, shown, how = hit
    if within is not None:
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(within))
        subject = f"{flag or 'the ' + what} {within} (its {rel})"
    else:
        subject = f"{flag} {path}" if flag else f"the {what} {path}"
    where = "" if os.path.normpath(shown) == os.path.normpath(str(path)) else f" ({shown})"
    raise InputError(f"{subject} {how} the input {in_what}{where}: writing it would destroy the input. "
                     f"Give {flag or 'the ' + what} another path")


def check_no_input_inside(directory, what="directory", *, flag=None, removes=True):
    """Refuse a ``directory`` the caller fills and may delete (a checkpoint, a cache) when a registered
    input lies inside it."""
    d = os.path.realpath(os.path.abspath(os.fspath(directory)))
    with _INPUTS_LOCK:
        entries = list(_INPUTS.values())
    for in_resolved, _, in_what, shown in entries:
        if in_resolved.startswith(d.rstrip(os.sep) + os.sep):
            subject = f"{flag} {directory}" if flag else f"the {what} {directory}"
            raise InputError(f"{subject} holds the input {in_what} ({shown}), which it would "
                             f"{'delete' if removes else 'overwrite'}: give {flag or 'the ' + what} another directory")


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
    if _is_url(path):
        check_not_input(path, what)
        _check_url_writable(str(path), what)
        return
    path = Path(path)
    check_not_input(path, what)
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
    """Bytes an unprivileged writer may still add on the file system that holds ``path`` (for a URL:
    the local temporary directory its file is written in before the upload)."""
    if _is_url(path):
        import tempfile
        path = Path(tempfile.gettempdir()) / "upload"
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
    later crashes the interpreter (a segmentation fault at exit after ENOSPC in a close),
    so every HDF5 writer of streamrank checks the room before it writes a block.
    """
    limit = file_size_limit()
    if limit is not None:
        try:
            size = os.stat(path).st_size
        except OSError:
            size = 0
        if size + nbytes + SPACE_MARGIN > limit:
            err = StorageError(f"{shown or path}: cannot be written "
                               f"(file too large: {format_size(size + nbytes)} would "
                               f"pass this process's file size limit of {format_size(limit)}, ulimit -f); nothing "
                               f"was left half-written. Raise the limit, then run again")
            err.errno = errno.EFBIG
            raise err
    free = free_bytes(path)
    if free < nbytes + SPACE_MARGIN:
        err = StorageError(f"{shown or path}: cannot be written "
                           f"(no space left on the device: {format_size(nbytes)} more "
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


def keep_mode(tmp, path):
    """Give ``tmp`` the permission bits of the regular file ``path`` it will replace (a new name
    keeps the umask's): a rewritten output keeps the mode its owner gave it (cp and editors do)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    if stat.S_ISREG(st.st_mode):
        try:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
        except OSError:  # pragma: no cover - not the owner: the umask's mode stays
            pass


def atomic_replace(tmp, path, *, durable=True):
    """fsync ``tmp`` then rename it over ``path`` (keeping ``path``'s mode, :func:`keep_mode`) and
    fsync the directory; a ``path`` that is, or links to, an input of this process is refused
    (``tmp`` is left to its writer's cleanup). ``durable=False``: the rename without the fsyncs,
    for files whose readers check a checksum before trusting them (a crash may leave such a file
    empty or partial under its name, never a reader that takes it as whole)."""
    check_not_input(path)
    keep_mode(tmp, path)
    if durable:
        fsync_file(tmp)
    os.replace(tmp, path)
    if durable:
        fsync_dir(os.path.dirname(os.path.abspath(path)))


@contextmanager
def written(path, *, special_ok=False, durable=True):
    """``with written(path) as tmp:`` write ``tmp``; on leaving the block it replaces ``path``
    (:func:`atomic_replace`, ``durable`` as there), or is deleted if the block raised. A special
    file (``/dev/stdout``) is written in place when ``special_ok`` (``tmp`` is ``path`` itself),
    refused otherwise."""
    if _is_url(path):
        check_not_input(path)
        with _uploaded(str(path)) as tmp:
            yield tmp
        return
    path = Path(path)
    check_not_input(path)
    if is_special(path):
        if not special_ok:
            raise InputError(f"{path}: must be a regular file (it is a device or a pipe)")
        yield path
        return
    remove_stale_temps(path)
    tmp = temp_name(path)
    try:
        yield tmp
        atomic_replace(tmp, path, durable=durable)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_atomically(path, data, *, special_ok=False):
    """Write ``data`` (str as UTF-8, or bytes) to ``path`` as a whole: a temporary name, then a
    rename (:func:`written`, ``special_ok`` as there), so a reader sees the old file or the new
    one, never a part."""
    with written(path, special_ok=special_ok) as tmp:
        Path(tmp).write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


# -- objects in a store (io.urls) --------------------------------------------------------------------
# A store has no rename: an object is published by one upload of a finished local file (a single
# PUT, or a multipart upload that is completed, or aborted when it fails), so a reader sees the
# old object or the new one, never a part.

def _is_url(path):
    from streamrank.io.urls import is_url
    return is_url(path)


def _check_url_writable(url, what):
    """Refuse, before any work, a URL whose file system cannot be had (a missing package) or whose
    bucket / container does not exist or cannot be reached."""
    from streamrank.io.urls import filesystem, shown, store_error, store_errors
    fs, path = filesystem(url)
    if path.endswith("/"):
        raise InputError(f"{shown(url)}: the {what} is a prefix (ends in /); give an object name, e.g. "
                         f"{shown(url)}out.h5")
    root = path.split("/", 1)[0]
    if "/" not in path.strip("/"):
        return
    try:
        fs.info(root)  # exists() says False for an unreachable store too
    except FileNotFoundError:
        raise InputError(f"{shown(url)}: the bucket {root} does not exist (or these credentials cannot see it); "
                         f"create it first") from None
    except store_errors() as e:
        raise store_error(url, e, "the store cannot be reached") from None


def publish(local, url):
    """Upload the finished local file ``local`` to ``url`` as one object (StorageError naming the
    URL when the store refuses: the object there, if any, is as it was). Interrupted (a signal's
    KeyboardInterrupt), the upload is stopped and a multipart upload it began is aborted before
    the interruption goes on (:func:`_put_interruptible`): no part is left behind in the store."""
    from streamrank.io.urls import filesystem, redact_urls, shown, store_errors
    check_not_input(url)
    fs, path = filesystem(url)
    try:
        _put_interruptible(fs, str(local), path)
    except store_errors() as e:
        raise StorageError(f"{shown(url)}: the upload failed ({type(e).__name__}: {redact_urls(str(e))[:200]}); the "
                           f"object there, if any, is as it was") from None


def _multipart_ids(fs, path):
    """The ids of the multipart uploads in progress for object ``path`` of S3 file system ``fs``."""
    bucket, key, _ = fs.split_path(path)
    out = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=key)
    return {u["UploadId"] for u in out.get("Uploads", ()) if u.get("Key") == key}


def _put_interruptible(fs, local, path):
    """``fs.put_file(local, path)``, stoppable. fsspec runs an async file system's upload on its
    own event loop thread, which a KeyboardInterrupt in this thread does not stop: the upload
    would go on, or die with the process and leave a multipart upload's parts in the store (S3
    keeps them, and bills them, until aborted). So the upload runs as a future of that loop; an
    interruption cancels it, then aborts every multipart upload of this object that was not in
    progress before this one began (s3fs aborts its own only on an Exception, and a cancellation
    is not one), then goes on."""
    import asyncio
    import concurrent.futures
    if not getattr(fs, "async_impl", False) or getattr(fs, "loop", None) is None:
        fs.put_file(local, path)
        return
    parts = hasattr(fs, "call_s3") and _in_parts(local)
    before = _multipart_ids(fs, path) if parts else set()
    fut = asyncio.run_coroutine_threadsafe(fs._put_file(local, path), fs.loop)
    try:
        while not fut.done():
            concurrent.futures.wait([fut], timeout=0.25)
    except BaseException:
        fut.cancel()  # the upload's task gets CancelledError at its await: no request after it
        if parts:
            bucket, key, _ = fs.split_path(path)
            for upload in _multipart_ids(fs, path) - before:
                fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload)
        raise
    fut.result()


def _in_parts(local):
    """Whether s3fs uploads the file ``local`` as a multipart upload (its rule: from twice its part
    size, 50 MiB by default; a smaller file is one PUT, which leaves nothing behind)."""
    try:
        from s3fs.core import calculate_chunksize
    except ImportError:
        return False
    size = os.path.getsize(local)
    return size >= min(5 << 30, 2 * calculate_chunksize(size))


@contextmanager
def _uploaded(url):
    """Yield a local temporary file; on leaving the block without an error, upload it to ``url``
    as one object (StorageError naming the URL when the store refuses); always remove it."""
    import tempfile
    name = url.split("?", 1)[0].rsplit("/", 1)[-1]
    fd, tmp = tempfile.mkstemp(prefix=".streamrank-upload-", suffix=f"-{name}")
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        publish(tmp, url)
    finally:
        if tmp.exists():
            tmp.unlink()
