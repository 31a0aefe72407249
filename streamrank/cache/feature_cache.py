"""Mapped feature blocks kept on disk (and partly in memory) so later passes read instead of map.

DESIGN.md, "Feature maps" (cache or recompute) and "Rules that keep it fast and safe".

Layout of ``--cache-dir``::

    <cache_dir>/.features.lock              flock: held exclusively while writing or evicting
    <cache_dir>/features-<key16>/           one cache = one (data, map, block layout) combination
        lock                                flock: held shared by every process using this cache
        manifest.json                       written atomically after every block
        block-00000.bin ...                 raw little-endian arrays, C order (rows, width)

The key is the sha256 of a canonical JSON (sorted keys, no whitespace) of the format name and
version, the caller's key material (dataset fingerprint, map parameters, a digest of the fitted
map's arrays: see :func:`array_digest`), the block layout (``[start, stop)`` row ranges), the dtype
and the width. Nothing that only changes the solver (C, tolerance, ...) belongs in the key: the same
cache serves every C on the same map. The manifest repeats the whole key material; a manifest that
is unreadable, truncated, of another format or version, written for another key, or whose own
checksum fails is discarded and the cache rebuilt from nothing (its block files are deleted), never
trusted.

Blocks
    One file per block, written to a temporary name, renamed, then listed in the manifest
    (rewritten atomically, fsynced). Block files are not fsynced: a crash can leave a listed
    block empty or partial, and its CRC, checked on its first read in every process, finds it.
    A block is complete exactly when the manifest lists it; files the manifest does not list (a
    crash between the rename and the manifest write) are deleted when the cache is opened. Reads
    are explicit (``readinto`` a caller-provided or fresh array), never ``np.memmap``: pages of a
    mapped file count in RSS, and HDF5 would hold a global lock. A cache with some blocks missing
    is usable for the blocks it has.

Checksums
    CRC-32 (``zlib.crc32``, stdlib) of each block's bytes, checked on every read from disk. It
    detects damage (flipped bits, truncation, stale files), which is what is needed here; it is not
    meant to resist someone forging blocks, and it is the fastest check in the standard library
    (docs/design.md, Measurements); xxhash would be faster but is not a dependency. A block that
    fails (or whose file is missing or has the wrong size) is logged, dropped from the manifest and
    deleted; :meth:`FeatureCache.get` returns None and the caller recomputes and :meth:`put`\\s it.
    ``verify="once"`` checks a block's CRC on its first read in this process only and afterwards
    trusts the file while its inode, size and mtime are unchanged (every rewrite here is a rename,
    i.e. a new inode; an in-place edit changes the mtime); bit rot under an unchanged mtime would
    then go unseen, so the default is ``"always"``. Training's passes
    (:class:`~streamrank.objectives.mapped_source.MappedSource`) use ``"once"``, as the kernel
    cache does: a pass re-reads every block, and a CRC on every read cost about 40% of the pass.

In-memory tier
    Up to ``memory_bytes`` of blocks are kept in memory once read or put. Admission is first come,
    and nothing is evicted: every pass visits the blocks in the same cyclic order, and for a cyclic
    scan LRU is the worst policy (when the tier holds n-1 of n blocks, each pass evicts exactly the
    block needed next, so no pass ever hits), while keeping a fixed set hits ``capacity / n`` of
    every pass. Blocks returned from the tier are read-only arrays (no copy); with ``out`` they are
    copied into ``out``.

Size cap and eviction
    ``size_cap`` bounds the bytes of all ``features-*`` caches in ``cache_dir`` (file sizes; other
    files such as converted datasets are not counted and never removed). When a put would exceed it,
    whole other caches are evicted, least recently used first (``last_used`` in their manifest,
    updated whenever a cache is opened or written; caches without a readable manifest go first).
    A cache in use by any process is never evicted: every open :class:`FeatureCache` holds a shared
    ``flock`` on its ``lock`` file (released by the kernel when the process ends, so no stale
    markers), and the evictor only removes a cache whose lock it can take exclusively without
    waiting. If the cap still cannot be met, the block is not stored (``put`` returns False, logged
    once): the caller recomputes that block on later passes rather than exceed the cap. Where
    ``fcntl`` is unavailable, other caches are never evicted.

Full disk
    ENOSPC or EDQUOT while writing a block or the manifest (or too little free space measured
    before writing) removes the temporary file and any block file not yet listed, leaves the
    manifest as it was (that block absent) and raises :class:`CacheDiskFull`, naming the
    directory, the bytes needed and the fixes. A full disk ends the run with that message rather
    than degrading silently: the same disk usually holds the checkpoint and the model file, whose
    writes would fail next. A caller that prefers to continue can catch it and recompute (results
    are identical either way).

Cache or recompute
    :func:`choose` compares the measured cost of reading a mapped row (``row_bytes`` / bytes per
    second, from :meth:`FeatureCache.measure_read`) with that of mapping one (1 / rows per second,
    from :func:`measure_map_rate`), returns the decision and a sentence to log, and obeys ``force``.
    Blocks are stored exactly as the map returned them (the dtype must match; nothing is
    converted), so the choice never changes a result.
"""

import errno
import hashlib
import json
import logging
import math
import os
import shutil
import threading
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from streamrank._version import __version__
from streamrank.errors import InputError, ParameterError, StreamrankError
from streamrank.faultpoints import faultpoint
from streamrank.io.atomic import check_no_input_inside, written
from streamrank.units import format_size, parse_size

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no locking, hence no eviction of other caches
    fcntl = None

log = logging.getLogger("streamrank.cache.feature_cache")

FORMAT_NAME = "streamrank-feature-cache"
FORMAT_VERSION = 1
DIR_PREFIX = "features-"
KEY_CHARS = 16
MANIFEST = "manifest.json"
LOCK = "lock"
GLOBAL_LOCK = ".features.lock"
EVICTING_PREFIX = ".evicting-"
VERIFY_MODES = ("always", "once")
CHOICES = ("cache", "recompute")
_DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class FeatureCacheError(StreamrankError):
    """The feature cache cannot be written (the message names the path and the fix)."""


class CacheDiskFull(FeatureCacheError):
    """No space left (or quota exceeded) for a feature cache block."""


# ---------------------------------------------------------------------------------------------
# key material


def _json_default(o):
    if isinstance(o, np.ndarray):
        raise TypeError("arrays do not belong in the key material; pass array_digest(a) instead")
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"{type(o).__name__} is not JSON-serialisable")


def canonical_json(obj):
    """The one JSON text of ``obj`` that is hashed: sorted keys, no spaces, no NaN."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False, default=_json_default)


def array_digest(*arrays):
    """sha256 (hex) over dtype, shape and bytes of ``arrays``: put a fitted map's arrays in a key."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def block_name(k):
    return f"block-{k:05d}.bin"


def _bytes_view(a):
    return memoryview(a.reshape(-1).view(np.uint8))


def _crc32(a):
    return zlib.crc32(_bytes_view(a))


# ---------------------------------------------------------------------------------------------
# low-level I/O (module functions so tests can simulate a full disk)


def _write_all(f, data):
    mv = memoryview(data)
    while len(mv):
        n = f.write(mv)
        if not n:  # a raw write that takes nothing would loop for ever: the file system refused it
            raise OSError(errno.EIO, f"{getattr(f, 'name', 'a cache block')}: the write took no bytes")
        mv = mv[n:]


def _read_into(f, mv):
    got = 0
    while got < len(mv):
        n = f.readinto(mv[got:])
        if not n:
            break
        got += n
    return got


def _free_bytes(path):
    return shutil.disk_usage(path).free


def _write_file(path, data, durable=True):
    """Write ``data`` to a temporary name beside ``path``, fsync (``durable``), rename; no temporary
    file survives."""
    with written(path, durable=durable) as tmp, open(tmp, "wb", buffering=0) as f:
        _write_all(f, data)
        faultpoint("cache-write")


class _Flock:
    """An flock on ``path`` (created if needed) for the life of the object or ``with`` block."""

    def __init__(self, path, shared=False, blocking=True):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is None:  # pragma: no cover
            return
        op = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            fcntl.flock(self.fd, op if blocking else op | fcntl.LOCK_NB)
        except BaseException:
            os.close(self.fd)
            self.fd = None
            raise

    def release(self):
        if self.fd is not None:
            os.close(self.fd)  # closing releases the lock
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


# ---------------------------------------------------------------------------------------------


@dataclass
class CacheStats:
    """Counters of one :class:`FeatureCache` object (this process only)."""

    memory_hits: int = 0
    disk_reads: int = 0
    misses: int = 0          # get() found nothing usable (absent or damaged): the caller maps
    damaged: int = 0         # blocks dropped because their file failed the check
    puts: int = 0            # blocks written to disk
    refused: int = 0         # puts not stored on disk because of the size cap
    evicted_caches: int = 0  # other caches removed to make room
    bytes_read: int = 0
    bytes_written: int = 0
    read_seconds: float = 0.0
    write_seconds: float = 0.0

    def as_dict(self):
        return asdict(self)


class FeatureCache:
    """Mapped row blocks of one (dataset, feature map, block layout), on disk and in memory.

    Parameters
    ----------
    cache_dir : str, Path or None
        The ``--cache-dir``; the cache lives in ``cache_dir/features-<key16>/``. None: memory only.
    key_material : dict
        JSON-serialisable description of what the blocks are: the dataset fingerprint, the map's
        parameters and :func:`array_digest` of its fitted arrays. Not C or other solver settings.
    layout : sequence of (start, stop)
        Row range of every block; block ``k`` has shape ``(stop - start, width)``.
    width : int
        Columns of a mapped block.
    dtype : numpy dtype
        Of the mapped blocks (float32 by default); stored little-endian.
    memory_bytes : int or str
        Bytes of blocks kept in memory (0: none).
    size_cap : int, str or None
        Bytes for all feature caches in ``cache_dir`` together (None: no cap).
    verify : {"always", "once"}
        When a block read from disk has its CRC checked (module docstring).
    """

    def __init__(self, cache_dir, key_material, layout, width, dtype=np.float32, *, memory_bytes=0,
                 size_cap=None, verify="always"):
        self.dtype = np.dtype(dtype).newbyteorder("<")
        self.width = int(width)
        if self.width < 0:
            raise ParameterError(f"width must be >= 0; got {width!r}")
        self.layout = [(int(a), int(b)) for a, b in layout]
        for k, (a, b) in enumerate(self.layout):
            if not 0 <= a <= b:
                raise ParameterError(f"block {k} of the layout has rows {a}:{b}; need 0 <= start <= stop")
        if verify not in VERIFY_MODES:
            raise ParameterError(f"verify must be one of {', '.join(VERIFY_MODES)}; got {verify!r}")
        self.verify = verify
        self.memory_bytes = 0 if not memory_bytes else parse_size(memory_bytes, "memory_bytes")
        self.size_cap = None if size_cap is None else parse_size(size_cap, "size_cap")
        user = json.loads(canonical_json(key_material))  # normalised (numpy scalars -> Python)
        self.material = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "key_material": user,
                         "layout": [list(r) for r in self.layout], "dtype": self.dtype.str,
                         "width": self.width}
        self.key = hashlib.sha256(canonical_json(self.material).encode()).hexdigest()
        self.stats = CacheStats()
        self._state = threading.RLock()
        self._mem = {}
        self._mem_bytes = 0
        self._blocks = {}      # k -> manifest entry, blocks complete on disk
        self._dropped = set()  # blocks this process found damaged: not taken back from a stale manifest
        self._verified = {}    # k -> (inode, size, mtime_ns) at the last CRC check (verify="once")
        self._refusal_logged = False
        self._lock = None
        self.root = None if cache_dir is None else Path(cache_dir)
        self.dir = None if cache_dir is None else self.root / f"{DIR_PREFIX}{self.key[:KEY_CHARS]}"
        if self.root is not None:
            try:
                self._open()
            except OSError as exc:
                self.close()
                if exc.errno in _DISK_FULL:
                    raise CacheDiskFull(f"feature cache {self.dir}: no space for its manifest "
                                        f"({os.strerror(exc.errno)}). Free space there, use cache_dir=DIR on "
                                        f"another disk, or force recompute (no feature cache)") from exc
                raise FeatureCacheError(f"cannot open feature cache {self.dir}: {exc}; pass another "
                                        f"cache_dir=DIR or force recompute (no feature cache)") from exc

    # -- public ---------------------------------------------------------------------------------

    @property
    def n_blocks(self):
        return len(self.layout)

    @property
    def present(self):
        """Indices of the blocks stored on disk (as far as this process knows)."""
        with self._state:
            return sorted(self._blocks)

    @property
    def complete(self):
        with self._state:
            return len(self._blocks) == len(self.layout)

    @property
    def nbytes(self):
        """Bytes of this cache's blocks on disk."""
        with self._state:
            return sum(e["bytes"] for e in self._blocks.values())

    @property
    def memory_nbytes(self):
        with self._state:
            return self._mem_bytes

    def rows(self, k):
        if not 0 <= k < len(self.layout):
            raise IndexError(f"block {k} out of range (the layout has {len(self.layout)} blocks)")
        a, b = self.layout[k]
        return b - a

    def get(self, k, out=None):
        """Block ``k`` from memory or disk, or None when it is absent or damaged (then map it).

        With ``out`` (C-contiguous, the cache's dtype, shape ``(rows, width)``) the block is read
        or copied into ``out`` and ``out`` is returned; its content is undefined after None.
        Without it a fresh array is returned, or the in-memory tier's own read-only array.
        Pass a buffer reused across passes: a fresh array costs page faults, which take the get
        to about a third of its speed into a reused ``out`` (warm page cache).
        """
        rows = self.rows(k)
        shape = (rows, self.width)
        if out is not None:
            if out.dtype != self.dtype or out.shape != shape or not out.flags.c_contiguous \
                    or not out.flags.writeable:
                raise ValueError(f"out must be a writeable C-contiguous {self.dtype} array of shape {shape}; "
                                 f"got {out.dtype} {out.shape}")
        with self._state:
            a = self._mem.get(k)
            entry = self._blocks.get(k)
        if a is not None:
            self.stats.memory_hits += 1
            if out is None:
                return a
            np.copyto(out, a)
            return out
        if entry is None:
            self.stats.misses += 1
            return None
        dst = np.empty(shape, self.dtype) if out is None else out
        t0 = time.perf_counter()
        problem = self._read_block(k, entry, dst)
        if problem:
            self._drop_damaged(k, problem)
            self.stats.misses += 1
            return None
        self.stats.read_seconds += time.perf_counter() - t0
        self.stats.disk_reads += 1
        self.stats.bytes_read += dst.nbytes
        self._admit(k, dst, copy=out is not None)
        return dst

    def put(self, k, array, take=False):
        """Store block ``k`` (exactly as mapped: same dtype, shape ``(rows, width)``).

        ``take``: the caller hands ``array`` over (it never writes to it again), so the in-memory
        tier keeps it rather than a copy (a block of Q is tens of MB).
        Returns True when the block is on disk afterwards, False when it is not (memory-only cache,
        or the size cap could not be met). Raises :class:`CacheDiskFull` on a full disk.
        """
        shape = (self.rows(k), self.width)
        a = np.asarray(array)
        if a.dtype != self.dtype or a.shape != shape:
            raise ValueError(f"block {k} must be {self.dtype} of shape {shape} (as mapped; nothing is "
                             f"converted so cached and recomputed results are identical); got {a.dtype} {a.shape}")
        c = np.ascontiguousarray(a)
        # the tier copies only an array the caller keeps (a contiguous copy made here is its own)
        self._admit(k, c, copy=c is a and not take)
        a = c
        if self.dir is None:
            return False
        with self._state:
            if k in self._blocks:
                return True
        crc = _crc32(a)
        path = self.dir / block_name(k)
        t0 = time.perf_counter()
        with _Flock(self.root / GLOBAL_LOCK):
            if not self._make_room(a.nbytes):
                self.stats.refused += 1
                if not self._refusal_logged:
                    self._refusal_logged = True
                    log.info(f"feature cache {self.dir}: size cap {format_size(self.size_cap)} reached and no "
                             f"unused cache to evict; blocks beyond it are recomputed on every pass")
                return False
            free = _free_bytes(self.dir)
            if free < a.nbytes:
                raise self._disk_full(a.nbytes, f"{format_size(free)} free")
            listed = False
            try:
                # a block is not fsynced: its CRC is checked on its first read in every process, so
                # a block a crash left partial is found and mapped again, while the fsyncs held the
                # first pass to the disk (docs/design.md, "Measurements behind the code")
                _write_file(path, _bytes_view(a), durable=False)
                entry = {"file": block_name(k), "rows": shape[0], "bytes": a.nbytes, "crc32": crc}
                with self._state:
                    self._blocks[k] = entry
                    self._dropped.discard(k)
                self._write_manifest()
                listed = True
            except OSError as exc:
                with self._state:
                    self._blocks.pop(k, None)
                if not listed:
                    try:
                        path.unlink()  # renamed in place but not listed: not part of the cache
                    except FileNotFoundError:
                        pass
                if exc.errno in _DISK_FULL:
                    raise self._disk_full(a.nbytes, os.strerror(exc.errno)) from exc
                raise FeatureCacheError(f"cannot write feature cache block {path}: {exc}; use another "
                                        f"cache_dir=DIR or force recompute") from exc
        self.stats.write_seconds += time.perf_counter() - t0
        self.stats.puts += 1
        self.stats.bytes_written += a.nbytes
        return True

    def measure_read(self, k=None, out=None, cold=False):
        """Bytes per second of reading (and checking) stored block ``k`` (default: the largest).

        The first use of a just-written block finds it in the page cache (``cold=False``): right
        when the cache fits in free memory. ``cold=True`` first asks the kernel to drop the file's
        cached pages (``posix_fadvise(DONTNEED)``, Linux), which measures the disk: right when the
        cache is larger than free memory. Not counted in :attr:`stats`. None if nothing is stored.
        """
        with self._state:
            if k is None:
                if not self._blocks:
                    return None
                k = max(self._blocks, key=lambda j: self._blocks[j]["bytes"])
            entry = self._blocks.get(k)
        if entry is None:
            return None
        dst = np.empty((self.rows(k), self.width), self.dtype) if out is None else out
        if cold and hasattr(os, "posix_fadvise"):
            fd = os.open(self.dir / entry["file"], os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        t0 = time.perf_counter()
        problem = self._read_block(k, entry, dst, force_verify=True)
        dt = time.perf_counter() - t0
        if problem:
            self._drop_damaged(k, problem)
            return None
        return dst.nbytes / max(dt, 1e-9)

    def close(self):
        """Release this process's claim on the cache (it may then be evicted by others)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self):
        where = self.dir if self.dir is not None else "memory only"
        return (f"FeatureCache({where}, {len(self._blocks)}/{len(self.layout)} blocks on disk, "
                f"{self._mem_bytes} bytes in memory)")

    # -- opening ----------------------------------------------------------------------------------

    def _open(self):
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = self._claim()
        with _Flock(self.root / GLOBAL_LOCK):
            manifest, problem = self._load_manifest()
            keep = {LOCK, MANIFEST}
            if manifest is None:
                leftovers = [p for p in self.dir.iterdir() if p.name not in keep]
                if problem != "no manifest" or leftovers:
                    log.warning(f"feature cache {self.dir}: {problem}; rebuilding it (nothing in it is used)")
                self._blocks = {}
            else:
                self._blocks = manifest
            keep |= {e["file"] for e in self._blocks.values()}
            for p in self.dir.iterdir():
                if p.name not in keep:  # unlisted blocks, temporary files of interrupted writes
                    _remove(p)
            self._write_manifest(merge=False)  # records last_used (and a fresh manifest after a rebuild)

    def _claim(self):
        """A shared lock on ``lock`` inside this cache's directory, which must still be in place."""
        for _ in range(100):
            self.dir.mkdir(parents=True, exist_ok=True)
            try:
                lk = _Flock(self.dir / LOCK, shared=True)
            except FileNotFoundError:  # the directory was evicted between mkdir and open
                continue
            try:
                same = os.path.samestat(os.fstat(lk.fd), os.stat(self.dir / LOCK))
            except FileNotFoundError:
                same = False
            if same:
                return lk
            lk.release()  # evicted while we waited for the lock: start over in a fresh directory
        raise FeatureCacheError(f"cannot claim feature cache {self.dir}: it keeps being evicted")

    def _load_manifest(self):
        """({k: entry}, None) for a manifest this cache can trust, else (None, why not)."""
        p = self.dir / MANIFEST
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None, "no manifest"
        except (OSError, UnicodeDecodeError) as exc:
            return None, f"unreadable manifest ({exc})"
        try:
            m = json.loads(text)
        except ValueError:
            return None, "the manifest is not valid JSON (truncated or damaged)"
        if not isinstance(m, dict) or m.get("format") != FORMAT_NAME:
            return None, f"{MANIFEST} is not a {FORMAT_NAME} manifest"
        if m.get("version") != FORMAT_VERSION:
            return None, (f"format version {m.get('version')!r} is not supported "
                          f"(this streamrank reads {FORMAT_VERSION})")
        stored = m.pop("checksum", None)
        if stored != zlib.crc32(canonical_json(m).encode()):
            return None, "the manifest's checksum does not match (damaged)"
        if m.get("key") != self.key or m.get("key_material") != self.material:
            return None, "the manifest was written for other data, map or block layout (foreign key)"
        blocks = {}
        try:
            for ks, e in m["blocks"].items():
                k = int(ks)
                rows = self.rows(k)
                if (e["file"] != block_name(k) or e["rows"] != rows
                        or e["bytes"] != rows * self.width * self.dtype.itemsize or not isinstance(e["crc32"], int)):
                    raise ValueError(ks)
                blocks[k] = {"file": e["file"], "rows": rows, "bytes": e["bytes"], "crc32": e["crc32"]}
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            return None, "the manifest's block list does not match the block layout (damaged)"
        return blocks, None

    def _write_manifest(self, merge=True):
        """Rewrite the manifest atomically (caller holds the global lock).

        With ``merge``, blocks another process listed meanwhile are kept (same key, same bytes).
        """
        if merge:
            theirs, _ = self._load_manifest()
            with self._state:
                for k, e in (theirs or {}).items():
                    if k not in self._blocks and k not in self._dropped:
                        self._blocks[k] = e
        with self._state:
            blocks = {str(k): dict(e) for k, e in sorted(self._blocks.items())}
        body = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "created_by": f"streamrank {__version__}",
                "key": self.key, "key_material": self.material, "last_used": time.time(),
                "n_blocks": len(self.layout), "complete": len(blocks) == len(self.layout),
                "nbytes": sum(e["bytes"] for e in blocks.values()), "blocks": blocks}
        body["checksum"] = zlib.crc32(canonical_json(body).encode())
        _write_file(self.dir / MANIFEST, json.dumps(body, indent=1, sort_keys=True).encode())

    # -- reading ----------------------------------------------------------------------------------

    def _read_block(self, k, entry, dst, force_verify=False):
        """Read block ``k`` into ``dst``; None when it checks out, else what is wrong."""
        path = self.dir / entry["file"]
        try:
            with open(path, "rb", buffering=0) as f:
                st = os.fstat(f.fileno())
                if st.st_size != entry["bytes"]:
                    return f"has {st.st_size} bytes, the manifest says {entry['bytes']}"
                got = _read_into(f, _bytes_view(dst))
        except FileNotFoundError:
            return "the block file is missing"
        except OSError as exc:
            return f"cannot be read ({exc})"
        if got != entry["bytes"]:
            return f"ended after {got} of {entry['bytes']} bytes"
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        if not force_verify and self.verify == "once" and self._verified.get(k) == sig:
            return None
        if _crc32(dst) != entry["crc32"]:
            return "its checksum does not match (damaged)"
        self._verified[k] = sig
        return None

    def _drop_damaged(self, k, problem):
        path = self.dir / block_name(k)
        log.warning(f"feature cache block {path} {problem}; it will be recomputed")
        self.stats.damaged += 1
        with self._state:
            self._blocks.pop(k, None)
            self._dropped.add(k)
            self._verified.pop(k, None)
        with _Flock(self.root / GLOBAL_LOCK):
            _remove(path)
            try:
                self._write_manifest()
            except OSError as exc:  # the block is out of our view; the stale entry fails its check again
                log.warning(f"feature cache {self.dir}: cannot update the manifest ({exc})")

    def _admit(self, k, a, copy):
        with self._state:
            if k in self._mem or self._mem_bytes + a.nbytes > self.memory_bytes:
                return False
            if copy:
                a = a.copy()
            a.setflags(write=False)
            self._mem[k] = a
            self._mem_bytes += a.nbytes
            return True

    # -- size cap ---------------------------------------------------------------------------------

    def _make_room(self, nbytes):
        """True when ``nbytes`` more fit under the cap, evicting unused other caches if needed."""
        if self.size_cap is None:
            return True
        usage = _usage(self.root)
        total = sum(usage.values())
        if total + nbytes <= self.size_cap:
            return True
        if fcntl is None:  # pragma: no cover - cannot tell which caches are in use
            return False
        others = [name for name in usage if name != self.dir.name]
        for name in sorted(others, key=lambda n: _last_used(self.root / n)):
            if _evict(self.root / name):
                self.stats.evicted_caches += 1
                log.info(f"feature cache: evicted {self.root / name} ({format_size(usage[name])}, least "
                         f"recently used) to stay within {format_size(self.size_cap)}")
                total -= usage[name]
                if total + nbytes <= self.size_cap:
                    return True
        return False

    def _disk_full(self, nbytes, what):
        return CacheDiskFull(
            f"feature cache {self.dir}: no space for a block of {format_size(nbytes)} ({what}); nothing "
            f"damaged, the cache keeps the blocks written so far. Free space there, use cache_dir=DIR on "
            f"another disk, or force recompute (no feature cache)")


def _remove(p):
    try:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink()
    except FileNotFoundError:
        pass


def _usage(root):
    """{cache directory name: bytes of its files}; removes leftovers of interrupted evictions.

    Called with the global lock held, so no eviction is under way.
    """
    usage = {}
    for entry in os.scandir(root):
        if not entry.is_dir(follow_symlinks=False):
            continue
        if entry.name.startswith(EVICTING_PREFIX):
            shutil.rmtree(entry.path, ignore_errors=True)
        elif entry.name.startswith(DIR_PREFIX):
            total = 0
            try:
                for f in os.scandir(entry.path):
                    if f.is_file(follow_symlinks=False):
                        total += f.stat(follow_symlinks=False).st_size
            except FileNotFoundError:  # pragma: no cover - removed meanwhile
                continue
            usage[entry.name] = total
    return usage


def _last_used(d):
    try:
        return float(json.loads((d / MANIFEST).read_text(encoding="utf-8"))["last_used"])
    except Exception:  # noqa: BLE001 - no readable manifest: oldest of all
        return float("-inf")


def _evict(d):
    """Remove cache directory ``d`` unless some process holds its lock. True when removed."""
    try:
        lk = _Flock(d / LOCK, shared=False, blocking=False)
    except BlockingIOError:
        return False  # in use
    except FileNotFoundError:  # pragma: no cover - gone meanwhile
        return False
    try:
        try:  # a cache directory holding an input of this process is never removed (io.atomic)
            check_no_input_inside(d, "feature cache")
        except InputError:
            return False
        trash = d.with_name(f"{EVICTING_PREFIX}{d.name}-{os.getpid()}")
        os.replace(d, trash)  # from here on, openers that waited for the lock see it is gone
        shutil.rmtree(trash, ignore_errors=True)
    finally:
        lk.release()
    return True


# ---------------------------------------------------------------------------------------------
# cache or recompute


def measure_map_rate(map_fn, X, min_seconds=0.0):
    """(rows per second of ``map_fn(X)``, the first result): time the mapping of one block.

    The mapped result is returned so the measurement costs no extra work; with ``min_seconds``
    the call is repeated until that much time has passed (for tiny blocks).
    """
    n = len(X)
    t0 = time.perf_counter()
    result = map_fn(X)
    calls = 1
    while time.perf_counter() - t0 < min_seconds:
        map_fn(X)
        calls += 1
    dt = time.perf_counter() - t0
    return (math.inf if dt <= 0 else n * calls / dt), result


def _rate_text(x, unit):
    if math.isinf(x):
        return f"unbounded {unit}"
    for div, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")):
        if x >= div:
            return f"{x / div:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def choose(read_bytes_per_s, map_rows_per_s, row_bytes, force=None):
    """("cache" or "recompute", a sentence saying why): whichever makes a row cheaper to get.

    Reading costs ``row_bytes / read_bytes_per_s`` seconds per row, mapping ``1 / map_rows_per_s``.
    The cache is chosen only when reading is strictly cheaper (a tie recomputes: no disk used).
    ``force`` ("cache" or "recompute"; None or "auto" to decide) overrides the measurement.
    """
    if force not in (None, "auto"):
        if force not in CHOICES:
            raise ParameterError(f"force must be one of cache, recompute, auto; got {force!r}")
        return force, f"{force} (forced)"
    for name, v in (("read_bytes_per_s", read_bytes_per_s), ("map_rows_per_s", map_rows_per_s),
                    ("row_bytes", row_bytes)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v) or v <= 0:
            raise ParameterError(f"{name} must be a positive number; got {v!r}")
    read_s = row_bytes / read_bytes_per_s
    map_s = 1.0 / map_rows_per_s
    facts = (f"reading a mapped row ({row_bytes:g} B at {_rate_text(read_bytes_per_s, 'B/s')}) takes "
             f"{read_s * 1e6:.3g} us, mapping one ({_rate_text(map_rows_per_s, 'rows/s')}) {map_s * 1e6:.3g} us")
    if read_s < map_s:
        ratio = "" if read_s == 0 else f"; reading is {map_s / read_s:.3g}x cheaper"
        return "cache", f"cache: {facts}{ratio}"
    if read_s == map_s:
        return "recompute", f"recompute: {facts} (a tie: no disk used)"
    ratio = "" if map_s == 0 else f"; mapping is {read_s / map_s:.3g}x cheaper"
    return "recompute", f"recompute: {facts}{ratio}"
