"""A read-only file object over an object in a store, for h5py: the parts a block needs fetched
at once, concurrently, and everything else through a small block cache.

h5py reads a file object one call at a time, so a pass that let it fetch each chunk itself would
wait for one round trip per chunk (13.8 MB/s through fsspec without a cache on a local S3
server, against 1.5 GB/s from a local disk). The reader knows which chunks a block of rows is
made of (their byte ranges: ``get_chunk_info``), so it hands them to :meth:`RemoteFile.prefetch`
first, which fetches them together (``fs.cat_ranges``: concurrent requests, neighbouring ranges
merged) into the *known-parts cache*; h5py's reads of those chunks are then served from memory.
The cache holds one block's chunks at a time (dropped at the next prefetch), so the memory plan
counts it as one more raw block. Reads outside known parts (HDF5's superblock, B-trees, the
index arrays) go through the *block cache*: aligned blocks of ``BLOCK`` bytes, at most
``BLOCKS`` of them, least recently used dropped first.
"""

import bisect
import io
from collections import OrderedDict

from streamrank.errors import InputError
from streamrank.io.urls import shown, store_error, store_errors

# the block cache: 1 MiB blocks (HDF5's metadata of a dataset file is a few of them), 16 at most
BLOCK = 1 << 20
BLOCKS = 16
# ranges of one prefetch closer than this are fetched as one range (the gap's bytes are read too)
MERGE_GAP = 64 << 10
# a range is fetched in concurrent requests of at most this many bytes: a block's whole range is
# one request (moto's test server copies the whole object for every range it serves, so 8 MiB
# pieces ran at 19 MB/s against 41 MB/s for one request a block; a real store's concurrency
# is next session's measurement)
PART = 64 << 20


class RemoteFile(io.RawIOBase):
    """``fs``'s object ``path`` of ``size`` bytes as a seekable read-only raw file; ``requests``
    and ``fetched`` count what it asked the store for."""

    def __init__(self, fs, path, size, url=None):
        super().__init__()
        self.fs, self.path, self.size = fs, path, int(size)
        self.url = url or path
        self._pos = 0
        # known parts: (sorted starts, their bytes), replaced whole (one assignment): a prefetch
        # for another block, from another thread, never pairs one block's starts with another's bytes
        self._known = ([], [])
        self._blocks = OrderedDict()
        self.requests = 0
        self.fetched = 0

    # -- io protocol ---------------------------------------------------------------------------
    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + int(offset))
        return self._pos

    def readinto(self, b):
        view = memoryview(b).cast("B")
        n = min(len(view), max(0, self.size - self._pos))
        if n:
            view[:n] = self._bytes(self._pos, self._pos + n)
        self._pos += n
        return n

    # -- the caches ----------------------------------------------------------------------------
    def prefetch(self, ranges):
        """Fetch the byte ranges ``[(start, end), ...]`` together into the known-parts cache,
        which then holds exactly them (the earlier ones are dropped)."""
        merged = []
        for a, b in sorted((int(a), int(b)) for a, b in ranges if b > a):
            if merged and a - merged[-1][1] <= MERGE_GAP:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        if not merged:
            self._known = ([], [])
            return
        # one merged range in pieces of PART bytes, fetched concurrently, then joined (a block's
        # chunks are one range when the file is written in row order)
        pieces = []
        for a, b in merged:
            pieces += [(x, min(b, x + PART)) for x in range(a, b, PART)]
        data = self._fetch([a for a, _ in pieces], [b for _, b in pieces])
        starts, parts, k = [], [], 0
        for a, b in merged:
            n = -(-(b - a) // PART)
            starts.append(a)
            parts.append(data[k] if n == 1 else b"".join(data[k:k + n]))
            k += n
        self._known = (starts, parts)

    def drop(self):
        """Empty the known-parts cache."""
        self._known = ([], [])

    def _bytes(self, a, b):
        starts, parts = self._known
        k = bisect.bisect_right(starts, a) - 1
        if k >= 0 and b <= starts[k] + len(parts[k]):
            s = starts[k]
            return parts[k][a - s:b - s]
        if b - a >= 4 * BLOCK:  # a large read no block cache would keep: one request for it
            return self._fetch([a], [b])[0]
        out = bytearray()
        for blk in range(a // BLOCK, (b - 1) // BLOCK + 1):
            data = self._block(blk)
            lo, hi = max(a, blk * BLOCK) - blk * BLOCK, min(b, (blk + 1) * BLOCK) - blk * BLOCK
            out += data[lo:hi]
        return bytes(out)

    def _block(self, k):
        data = self._blocks.get(k)
        if data is None:
            data = self._fetch([k * BLOCK], [min(self.size, (k + 1) * BLOCK)])[0]
            self._blocks[k] = data
            if len(self._blocks) > BLOCKS:
                self._blocks.popitem(last=False)
        else:
            self._blocks.move_to_end(k)
        return data

    def _fetch(self, starts, ends):
        """The bytes of each range, fetched concurrently; StoreError naming the URL when the store
        refuses or does not answer in time (InputError when the object is gone)."""
        try:
            out = self.fs.cat_ranges([self.path] * len(starts), starts, ends, on_error="raise")
        except FileNotFoundError:
            raise InputError(f"{shown(self.url)}: the object is gone (deleted while it was read)") from None
        except store_errors() as e:
            raise store_error(self.url, e, f"the store did not give bytes {starts[0]}-{ends[-1]}") from None
        for data, a, b in zip(out, starts, ends):
            if len(data) > b - a:  # the whole object for a range: an HTTP server without Range support
                raise InputError(f"{shown(self.url)}: the server ignores byte ranges (HTTP Range): it sent "
                                 f"{len(data)} bytes for {b - a}; a dataset is read in parts, so download the file "
                                 f"and give the local copy")
            if len(data) != b - a:
                raise InputError(f"{shown(self.url)}: the store gave {len(data)} bytes for the {b - a} of bytes "
                                 f"{a}-{b} (the object changed while it was read?)")
        self.requests += len(starts)
        self.fetched += sum(b - a for a, b in zip(starts, ends))
        return out
