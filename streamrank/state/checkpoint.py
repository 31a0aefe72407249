"""Solver checkpoints: written atomically after every iteration, verified when read.

A checkpoint directory holds ``checkpoint.h5`` and the one before it, ``checkpoint.prev.h5``.
A write goes to a temporary file, is fsynced, the current file becomes the previous one and the
temporary file becomes current (each step an atomic rename). A sha256 over the payload detects a
damaged file; reading falls back to the previous checkpoint then (and moves the damaged one
aside as ``checkpoint.damaged.h5``, so the next write keeps the intact one as the previous).

File format ``streamrank-checkpoint`` version 1 (HDF5, no pickle): attrs ``format``, ``version``,
``created_by``, ``config`` (JSON of every training setting), ``fingerprint`` (the dataset's),
``scalars`` (JSON of the solver's scalar state), ``checksum``; datasets ``w``, ``g`` and any
extra arrays of the caller under ``/extra``.

Test hook: ``STREAMRANK_TEST_ABORT=after-iteration:N`` ends the process right after checkpoint N
is written; ``STREAMRANK_TEST_ABORT=mid-checkpoint:N`` ends it half-way through writing
checkpoint N (the temporary file exists, the rename has not happened).
"""

import hashlib
import json
import os
from pathlib import Path

import h5py
import numpy as np

from streamrank._version import __version__
from streamrank.errors import CheckpointMismatch, FormatError
from streamrank.faultpoints import faultpoint
from streamrank.io.atomic import check_not_input, ensure_space, fsync_dir, fsync_file

FORMAT_NAME = "streamrank-checkpoint"
FORMAT_VERSION = 1
CURRENT = "checkpoint.h5"
PREVIOUS = "checkpoint.prev.h5"
DAMAGED = "checkpoint.damaged.h5"  # a damaged current checkpoint, moved aside when resuming from the previous
ABORT_ENV = "STREAMRANK_TEST_ABORT"
ABORT_EXIT_CODE = 77
# an interrupted write leaves ``.checkpoint.h5.<pid>.tmp``: never read as a checkpoint
TEMP_PREFIX = f".{CURRENT}."
TEMP_SUFFIX = ".tmp"


def files(directory):
    """The files a checkpoint directory's writes and reads may create or replace (none of them may
    be an input of the run)."""
    from streamrank.io.urls import is_url
    if is_url(directory):
        base = str(directory).rstrip("/")
        return [f"{base}/{CURRENT}", f"{base}/{PREVIOUS}"]
    d = Path(directory)
    return [d / CURRENT, d / PREVIOUS, d / DAMAGED]


def _abort_point():
    spec = os.environ.get(ABORT_ENV, "")
    if ":" not in spec:
        return None, None
    where, n = spec.split(":", 1)
    if where not in ("after-iteration", "mid-checkpoint") or not n.strip().isdigit():
        raise ValueError(f"{ABORT_ENV}={spec!r}: expected after-iteration:N or mid-checkpoint:N")
    return where, int(n)


def _encoded(config, scalars):
    """The attributes' JSON text of ``config`` and ``scalars`` (keys sorted)."""
    return json.dumps(config, sort_keys=True), json.dumps(scalars, sort_keys=True)


def _checksum(config_text, fingerprint, scalars_text, arrays):
    """sha256 of the JSON text of [config, fingerprint, scalars] (keys sorted) and every array.
    The text is assembled from the attributes' own encodings, which is the text
    ``json.dumps([config, fingerprint, scalars], sort_keys=True)`` gives: one encoding per write
    (the scalars hold every finished point's trace, so a long grid's checkpoints are not cheap)."""
    h = hashlib.sha256()
    h.update(f"[{config_text}, {json.dumps(fingerprint)}, {scalars_text}]".encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode() + str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.data)
    return h.hexdigest()


def write_checkpoint(directory, *, config, fingerprint, scalars, w, g, extra=None, number=None):
    """Write a checkpoint atomically into ``directory`` (kept: this one and the previous one).

    Order: the temporary file is written and fsynced, then the current checkpoint becomes the
    previous one and the temporary file becomes current (renames), then the directory is
    fsynced. At every instant ``checkpoint.h5`` or ``checkpoint.prev.h5`` is a complete file.
    A directory named by URL (``s3://bkt/ck``) is written as a local mirror (:func:`mirror`), then
    the object ``checkpoint.h5`` is copied to ``checkpoint.prev.h5`` in the store and the new one
    uploaded over it (each object is put whole: at every instant one of the two is complete).
    """
    from streamrank.io.urls import is_url
    if is_url(directory):
        local = mirror(directory)
        where, at = _abort_point()
        write_checkpoint(local, config=config, fingerprint=fingerprint, scalars=scalars, w=w, g=g, extra=extra,
                         number=number if where == "mid-checkpoint" else None)
        _upload(local, str(directory))
        if where == "after-iteration" and number == at:
            os._exit(ABORT_EXIT_CODE)  # test hook: die once the checkpoint is stored
        return
    d = Path(directory)
    for p in (d / CURRENT, d / PREVIOUS):  # each is renamed over: never an input of this run
        check_not_input(p, "checkpoint")
    d.mkdir(parents=True, exist_ok=True)
    arrays = {"w": np.asarray(w, np.float64), "g": np.asarray(g, np.float64)}
    for k, v in (extra or {}).items():
        arrays[f"extra/{k}"] = np.asarray(v)
    tmp = d / f"{TEMP_PREFIX}{os.getpid()}{TEMP_SUFFIX}"
    # the new checkpoint must fit beside the two kept ones: a full disk is refused before HDF5 meets it
    config_text, scalars_text = _encoded(config, scalars)
    ensure_space(tmp, sum(a.nbytes for a in arrays.values()) + len(config_text) + len(scalars_text))
    where, at = _abort_point()
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT_NAME
            f.attrs["version"] = FORMAT_VERSION
            f.attrs["created_by"] = f"streamrank {__version__}"
            f.attrs["config"] = config_text
            f.attrs["fingerprint"] = fingerprint
            f.attrs["scalars"] = scalars_text
            for name, a in arrays.items():
                f.create_dataset(name, data=a)
                faultpoint("checkpoint-write")
                if where == "mid-checkpoint" and number == at:
                    f.flush()
                    os._exit(ABORT_EXIT_CODE)  # test hook: die with a half-written temporary file
            f.attrs["checksum"] = _checksum(config_text, fingerprint, scalars_text, arrays)
        fsync_file(tmp)
        if (d / CURRENT).exists():
            os.replace(d / CURRENT, d / PREVIOUS)
        os.replace(tmp, d / CURRENT)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise
    fsync_dir(d)
    for stale in d.glob(f"{TEMP_PREFIX}*{TEMP_SUFFIX}"):
        try:  # temporary files of interrupted writes by earlier processes
            stale.unlink()
        except OSError:  # pragma: no cover - removed meanwhile, or not ours to remove
            pass
    if where == "after-iteration" and number == at:
        os._exit(ABORT_EXIT_CODE)


def _read(path):
    with h5py.File(path, "r") as f:
        if f.attrs.get("format") != FORMAT_NAME:
            raise FormatError(f"{path}: not a streamrank checkpoint")
        version = int(f.attrs.get("version", -1))
        if version != FORMAT_VERSION:
            raise FormatError(f"{path}: checkpoint format version {version} is not supported "
                              f"(this streamrank reads {FORMAT_VERSION}); start again with resume=False")
        created_by = str(f.attrs.get("created_by", ""))
        config = json.loads(f.attrs["config"])
        fingerprint = str(f.attrs["fingerprint"])
        scalars = json.loads(f.attrs["scalars"])
        arrays = {}
        f.visititems(lambda name, obj: arrays.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        stored = str(f.attrs.get("checksum", ""))
    config_text, scalars_text = _encoded(config, scalars)
    if stored != _checksum(config_text, fingerprint, scalars_text, arrays):
        raise FormatError(f"{path}: checkpoint is damaged (checksum mismatch)")
    extra = {k[len("extra/"):]: v for k, v in arrays.items() if k.startswith("extra/")}
    return {"config": config, "fingerprint": fingerprint, "scalars": scalars, "w": arrays["w"],
            "g": arrays["g"], "extra": extra, "path": str(path), "created_by": created_by}


def read_checkpoint(directory, *, config=None, fingerprint=None, warn=None):
    """The newest intact checkpoint in ``directory``, or None when there is none.

    With ``config`` and ``fingerprint`` given, a checkpoint of other data or other settings is
    refused with a message saying which differs.
    """
    from streamrank.io.urls import is_url
    if is_url(directory):
        ck = read_checkpoint(_download(str(directory)), config=config, fingerprint=fingerprint, warn=warn)
        return ck if ck is None else {**ck, "path": f"{str(directory).rstrip('/')}/{Path(ck['path']).name}"}
    d = Path(directory)
    errors = []
    for name in (CURRENT, PREVIOUS):
        p = d / name
        if not p.exists():
            continue
        try:
            ck = _read(p)
        except Exception as exc:  # noqa: BLE001 - any damage (h5py raises many kinds): try the previous one
            msg = str(exc) if str(p) in str(exc) else f"{p}: {exc}"
            errors.append(msg)
            if warn:
                warn(f"ignoring a damaged checkpoint: {msg}"
                     + ("; trying the previous one" if name == CURRENT else ""))
            continue
        if fingerprint is not None and ck["fingerprint"] != fingerprint:
            raise CheckpointMismatch(f"{p} was written for other data (dataset fingerprint "
                                     f"{ck['fingerprint'][:12]}..., this data {fingerprint[:12]}...); "
                                     f"use another directory (checkpoint=DIR), or start again with resume=False")
        if config is not None and ck["config"] != config:
            old = ck["config"]
            diff = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
            what = ", ".join(f"{k}: {old.get(k)!r} there, {config.get(k)!r} now" for k in diff)
            raise CheckpointMismatch(f"{p} was written with other settings ({what}); use the same settings, "
                                     f"another directory (checkpoint=DIR), or start again with resume=False")
        if name == PREVIOUS and errors and (d / CURRENT).exists():
            # keep the damaged file for inspection, out of the rotation: the next write must not
            # turn it into the previous checkpoint in place of this intact one
            check_not_input(d / DAMAGED, "checkpoint")
            os.replace(d / CURRENT, d / DAMAGED)
        if warn and ck["created_by"] != f"streamrank {__version__}":
            warn(f"{p} was written by {ck['created_by'] or 'an unknown version'}, this is streamrank "
                 f"{__version__}; resuming, but the result may differ from an uninterrupted run")
        return ck
    if errors:
        which = "both checkpoints are damaged" if len(errors) == 2 else "the only checkpoint is damaged"
        raise FormatError(f"no intact checkpoint in {d}: {which} ({'; '.join(errors)}); "
                          f"start again with resume=False")
    return None


# -- a checkpoint directory in a store (io.urls) ----------------------------------------------------
def mirror(url):
    """The local directory that mirrors checkpoint directory ``url`` (in the cache directory,
    named from the URL, so a resumed run in this machine finds it again)."""
    import hashlib

    from streamrank.settings import default_cache_dir
    d = Path(default_cache_dir()) / "checkpoints" / hashlib.sha256(str(url).rstrip("/").encode()).hexdigest()[:16]
    d.mkdir(parents=True, exist_ok=True)
    return d


def _objects(url):
    from streamrank.io.urls import filesystem
    fs, base = filesystem(url)
    return fs, base.rstrip("/")


def _upload(local, url):
    """The mirror's current checkpoint to the store: the object there becomes the previous one
    (a copy in the store), then the new one is put whole."""
    from streamrank.io.urls import store_error, store_errors
    fs, base = _objects(url)
    try:
        if fs.exists(f"{base}/{CURRENT}"):
            fs.copy(f"{base}/{CURRENT}", f"{base}/{PREVIOUS}")
        fs.put_file(str(local / CURRENT), f"{base}/{CURRENT}")
    except store_errors() as e:
        raise store_error(url, e, "the checkpoint could not be stored (the last one stored is intact)") from None


def _download(url):
    """The mirror of ``url`` holding the store's checkpoints (the local ones replaced: the store's
    are the run's)."""
    from streamrank.io.urls import store_error, store_errors
    fs, base = _objects(url)
    local = mirror(url)
    for name in (CURRENT, PREVIOUS):
        target = local / name
        try:
            if fs.exists(f"{base}/{name}"):
                fs.get_file(f"{base}/{name}", str(target) + ".part")
                os.replace(str(target) + ".part", target)
            elif target.exists():
                target.unlink()
        except store_errors() as e:
            raise store_error(url, e, "the checkpoint cannot be read") from None
    return local
