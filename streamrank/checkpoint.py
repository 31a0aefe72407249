"""Solver checkpoints: written atomically after every iteration, verified when read.

A checkpoint directory holds ``checkpoint.h5`` and the one before it, ``checkpoint.prev.h5``.
A write goes to a temporary file, is fsynced, the current file becomes the previous one and the
temporary file becomes current (each step an atomic rename). A sha256 over the payload detects a
damaged file; reading falls back to the previous checkpoint then.

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

from ._version import __version__
from .errors import FormatError, StreamrankError
from .h5format import atomic_replace

FORMAT_NAME = "streamrank-checkpoint"
FORMAT_VERSION = 1
CURRENT = "checkpoint.h5"
PREVIOUS = "checkpoint.prev.h5"
ABORT_ENV = "STREAMRANK_TEST_ABORT"
ABORT_EXIT_CODE = 77


def _abort_point():
    spec = os.environ.get(ABORT_ENV, "")
    if ":" not in spec:
        return None, None
    where, n = spec.split(":", 1)
    return where, int(n)


def _checksum(config, fingerprint, scalars, arrays):
    h = hashlib.sha256()
    h.update(json.dumps([config, fingerprint, scalars], sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode() + str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.data)
    return h.hexdigest()


class CheckpointMismatch(StreamrankError):
    """A checkpoint from other data or other settings."""


def write_checkpoint(directory, *, config, fingerprint, scalars, w, g, extra=None, number=None):
    """Write a checkpoint atomically into ``directory`` (kept: this one and the previous one)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    arrays = {"w": np.asarray(w, np.float64), "g": np.asarray(g, np.float64)}
    for k, v in (extra or {}).items():
        arrays[f"extra/{k}"] = np.asarray(v)
    tmp = d / f".{CURRENT}.{os.getpid()}.tmp"
    where, at = _abort_point()
    with h5py.File(tmp, "w") as f:
        f.attrs["format"] = FORMAT_NAME
        f.attrs["version"] = FORMAT_VERSION
        f.attrs["created_by"] = f"streamrank {__version__}"
        f.attrs["config"] = json.dumps(config, sort_keys=True)
        f.attrs["fingerprint"] = fingerprint
        f.attrs["scalars"] = json.dumps(scalars, sort_keys=True)
        for name, a in arrays.items():
            f.create_dataset(name, data=a)
            if where == "mid-checkpoint" and number == at:
                f.flush()
                os._exit(ABORT_EXIT_CODE)  # test hook: die with a half-written temporary file
        f.attrs["checksum"] = _checksum(config, fingerprint, scalars, arrays)
    if (d / CURRENT).exists():
        os.replace(d / CURRENT, d / PREVIOUS)
    atomic_replace(tmp, d / CURRENT)
    if where == "after-iteration" and number == at:
        os._exit(ABORT_EXIT_CODE)


def _read(path):
    with h5py.File(path, "r") as f:
        if f.attrs.get("format") != FORMAT_NAME:
            raise FormatError(f"{path}: not a streamrank checkpoint")
        version = int(f.attrs.get("version", -1))
        if version != FORMAT_VERSION:
            raise FormatError(f"{path}: checkpoint format version {version} is not supported "
                              f"(this streamrank reads {FORMAT_VERSION}); start without --resume")
        config = json.loads(f.attrs["config"])
        fingerprint = str(f.attrs["fingerprint"])
        scalars = json.loads(f.attrs["scalars"])
        arrays = {}
        f.visititems(lambda name, obj: arrays.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        stored = str(f.attrs.get("checksum", ""))
    if stored != _checksum(config, fingerprint, scalars, arrays):
        raise FormatError(f"{path}: checkpoint is damaged (checksum mismatch)")
    extra = {k[len("extra/"):]: v for k, v in arrays.items() if k.startswith("extra/")}
    return {"config": config, "fingerprint": fingerprint, "scalars": scalars, "w": arrays["w"],
            "g": arrays["g"], "extra": extra, "path": str(path)}


def read_checkpoint(directory, *, config=None, fingerprint=None, warn=None):
    """The newest intact checkpoint in ``directory``, or None when there is none.

    With ``config`` and ``fingerprint`` given, a checkpoint of other data or other settings is
    refused with a message saying which differs.
    """
    d = Path(directory)
    errors = []
    for name in (CURRENT, PREVIOUS):
        p = d / name
        if not p.exists():
            continue
        try:
            ck = _read(p)
        except (OSError, FormatError, KeyError, ValueError) as exc:
            errors.append(f"{p}: {exc}")
            if warn:
                warn(f"ignoring {p}: {exc}")
            continue
        if fingerprint is not None and ck["fingerprint"] != fingerprint:
            raise CheckpointMismatch(f"{p} was written for other data (dataset fingerprint "
                                     f"{ck['fingerprint'][:12]}..., this data {fingerprint[:12]}...); "
                                     f"use another --checkpoint directory or drop --resume")
        if config is not None and ck["config"] != config:
            old = ck["config"]
            diff = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
            what = ", ".join(f"{k}: {old.get(k)!r} there, {config.get(k)!r} now" for k in diff)
            raise CheckpointMismatch(f"{p} was written with other settings ({what}); use the same settings, "
                                     f"another --checkpoint directory, or drop --resume")
        return ck
    if errors:
        raise FormatError("no intact checkpoint: " + "; ".join(errors))
    return None
