"""A run directory of ``grid`` and ``cv``: JSON records written atomically, and the settings check
that lets a rerun of the same command continue where a killed one stopped (and refuses a rerun
with other settings, which would mix two runs' results).

Every record carries ``format`` and ``version`` (docs/formats.md); nothing here is pickled.
"""

import json
import math
from pathlib import Path

from streamrank.errors import FormatError, InputError
from streamrank.io.atomic import write_atomically

RUN_FORMAT = "streamrank-run"
RUN_VERSION = 1
SETTINGS = "settings.json"


def write_json(path, record):
    """``record`` as JSON at ``path``, atomically (a temporary name, fsync, rename)."""
    write_atomically(path, json.dumps(_finite(record), indent=1, sort_keys=True) + "\n")


def read_json(path, kind=None, version=1):
    """The JSON record at ``path`` (None if there is none); ``kind``: its required ``format``, of at
    most ``version`` (a newer record is refused: this streamrank cannot know what it means)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise FormatError(f"{path}: not a JSON record of streamrank ({e}); remove it to recompute it") from None
    if kind is not None and (not isinstance(record, dict) or record.get("format") != kind):
        shown = record.get("format") if isinstance(record, dict) else None
        raise FormatError(f"{path}: not a {kind} record (format {shown!r})")
    if kind is not None and (not isinstance(record.get("version"), int) or record["version"] > version):
        raise FormatError(f"{path}: a {kind} record of version {record.get('version')!r}; this streamrank reads "
                          f"versions up to {version} (written by a newer streamrank?)")
    return record


def open_run(run_dir, kind, settings):
    """Create ``run_dir`` for a run of ``kind`` ("grid" or "cv") with ``settings`` (JSON values), or
    reopen it when a run with the same settings was started there (finished parts are kept).
    Returns True when an earlier run is continued."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(f"{run_dir}: the run directory is a file; give a directory")
    run_dir.mkdir(parents=True, exist_ok=True)
    record = {"format": RUN_FORMAT, "version": RUN_VERSION, "kind": kind, "settings": settings}
    old = read_json(run_dir / SETTINGS)
    if old is None:
        write_json(run_dir / SETTINGS, record)
        return False
    if old.get("format") != RUN_FORMAT or old.get("kind") != kind:
        raise InputError(f"{run_dir}: holds a {old.get('kind', 'foreign')} run, not a {kind} run; "
                         f"give another directory")
    if old.get("version", 0) > RUN_VERSION:
        raise FormatError(f"{run_dir / SETTINGS}: written by a newer streamrank (run format version "
                          f"{old['version']}); this one reads version {RUN_VERSION}")
    want = json.loads(json.dumps(_finite(settings), sort_keys=True))
    if old["settings"] != want:
        diff = sorted(k for k in set(old["settings"]) | set(want) if old["settings"].get(k) != want.get(k))
        shown = ", ".join(f"{k} was {old['settings'].get(k)!r}, now {want.get(k)!r}" for k in diff[:4])
        raise InputError(f"{run_dir}: holds a {kind} run with other settings ({shown}); rerun it with the same "
                         f"settings to continue it, or give another directory")
    return True


def _finite(v):
    """JSON has no inf or NaN: they are written as null."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        return _finite(v.item())
    return v
