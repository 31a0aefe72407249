"""What a worker keeps between passes, and how objects travel to it (streamrank.execution.dask_executor).

A pass ships small things: the pass object (w or s, the costs), the recipe of the source it reads
(never its rows) and, back, the partition's carry. Both ways they are pickled here, so their bytes
are counted exactly (the executor reports bytes shipped per pass). Arrays of at least
:data:`RESIDENT_MIN_BYTES` inside them (query weights, a map's landmarks and matrices, a model's
normaliser) travel once per worker: they are replaced by their digest, and the worker keeps them
in :class:`Resident` (least recently used first out beyond :data:`RESIDENT_ARRAY_BYTES`). A worker
that lacks one raises :class:`Missing` and the executor sends it again, so nothing depends on
what a worker happens to hold: a replacement worker gets everything it needs on its first task.

The messages are pickles over the cluster's own connections, as dask's are; nothing here is written
to or read from a file.
"""

import hashlib
import io
import pickle
import threading
import weakref
from collections import OrderedDict

import numpy as np

from streamrank._native.memory import aligned_empty

# Arrays at least this large travel once per worker (by digest); smaller ones go with every message
# (w of a 220-feature model is 1.7 KB: cheaper to send than to look up) ...
RESIDENT_MIN_BYTES = 1 << 16
# ... except arrays of at least this size that an earlier message carried too (the same object: a
# query-weight vector every pass of a run holds, not this pass's w or s)
REUSED_MIN_BYTES = 1 << 12
_SENT = weakref.WeakValueDictionary()  # id -> array carried by an earlier message
# Bytes of such arrays a worker keeps for one run before dropping the least recently used.
RESIDENT_ARRAY_BYTES = 1 << 28


class Missing(Exception):
    """The worker lacks something the task needs: ``what`` is ``"arrays"`` (digests), ``"source"``
    (a partition's source), ``"outputs"`` (handle ids of kept outputs) or ``"misplaced"``."""

    def __init__(self, what, keys=()):
        super().__init__(what, tuple(keys))
        self.what, self.keys = what, tuple(keys)


def digest(a):
    a = np.ascontiguousarray(a)
    h = hashlib.blake2b(f"{a.dtype.str}{a.shape}".encode(), digest_size=16)
    h.update(a.reshape(-1).view(np.uint8).data if a.size else b"")
    return h.hexdigest()


class _Pickler(pickle.Pickler):
    def __init__(self, f, stash):
        super().__init__(f, protocol=5)
        self.stash = stash

    def persistent_id(self, obj):
        if self.stash is None or type(obj) is not np.ndarray or obj.nbytes < REUSED_MIN_BYTES \
                or obj.dtype.kind not in "biufc":
            return None
        again = _SENT.get(id(obj)) is obj
        _SENT[id(obj)] = obj
        if obj.nbytes < RESIDENT_MIN_BYTES and not again:
            return None
        key = digest(obj)  # by content: an array changed in place is a new one
        self.stash[key] = obj
        return ("array", key)


class _Unpickler(pickle.Unpickler):
    def __init__(self, f, arrays):
        super().__init__(f)
        self.arrays = arrays
        self.missing = []

    def persistent_load(self, pid):
        kind, key = pid
        a = self.arrays.get(key)
        if a is None:
            self.missing.append(key)
            return None
        return a


def dumps(obj, resident=True):
    """(bytes, {digest: array}) of ``obj`` with its large arrays replaced by their digests (with
    ``resident``; otherwise whole, and the dict is empty)."""
    stash = {} if resident else None
    f = io.BytesIO()
    _Pickler(f, stash).dump(obj)
    return f.getvalue(), stash or {}


def loads(data, arrays):
    """The object of :func:`dumps`, its arrays taken from ``arrays`` (a mapping); raises
    :class:`Missing` naming the digests it lacks."""
    u = _Unpickler(io.BytesIO(data), arrays)
    obj = u.load()
    if u.missing:
        raise Missing("arrays", u.missing)
    return obj


class ArrayStore:
    """Digest -> read-only array, least recently used dropped beyond ``cap`` bytes."""

    def __init__(self, cap=RESIDENT_ARRAY_BYTES):
        self.cap, self.bytes, self._d = cap, 0, OrderedDict()

    def get(self, key):
        a = self._d.get(key)
        if a is not None:
            self._d.move_to_end(key)
        return a

    def update(self, arrays):
        for key, a in arrays.items():
            if key in self._d:
                continue
            if not (a.flags.c_contiguous and a.flags.aligned):
                # dask hands arrays over at any byte offset, and numpy's matmul then skips BLAS for a
                # loop of its own (other bits, and slower)
                a = np.array(a, order="C")
            a.flags.writeable = False  # shared by every object that refers to it: nothing may change it
            self._d[key] = a
            self.bytes += a.nbytes
        while self.bytes > self.cap and len(self._d) > 1:
            _, old = self._d.popitem(last=False)
            self.bytes -= old.nbytes


class BufferPool:
    """Reused buffers shared by streams that never run at the same time (a worker's partitions of
    one source: one set of block buffers for all of them, not one each). ``array(key, shape)`` is
    a view of the pooled array of that key, grown when a larger one is asked for."""

    def __init__(self):
        self._arrays = {}

    def array(self, key, shape, dtype=np.float32):
        a = self._arrays.get(key)
        size = int(np.prod(shape))
        if a is None or a.size < size or a.dtype != dtype:
            a = self._arrays[key] = aligned_empty(size, dtype)
        return a[:size].reshape(shape)


class Resident:
    """One run's state on one worker: arrays, the partitions' sources, kept outputs."""

    def __init__(self):
        self.arrays = ArrayStore()
        self.sources = {}    # (source id, partition) -> source
        self.outputs = {}    # (handle id, partition) -> the partition's per-block outputs
        self.data_bytes = {}  # source id -> bytes of rows kept in memory by its partitions here
        # block buffers shared by every partition of every source here (a source released by the
        # client leaves nothing behind: buffers outliving their source by a pass would raise a
        # worker's peak well above its resident set after)
        self.pool = BufferPool()
        self.lock = threading.Lock()

    def drop(self, sources=(), handles=()):
        sources, handles = set(sources), set(handles)
        for key in [k for k in self.sources if k[0] in sources]:
            del self.sources[key]
        for sid in sources:
            self.data_bytes.pop(sid, None)
        for key in [k for k in self.outputs if k[0] in handles]:
            del self.outputs[key]
