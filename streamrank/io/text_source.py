"""Line-aligned chunks of decompressed text from plain, gzip or bzip2 files.

Compression is recognised by the file's magic bytes, not its name. The sha256 of the file as
stored on disk is computed on the way (for the dataset's ``source`` attribute). Several gzip or
bzip2 members concatenated in one file are read as one stream, like ``zcat`` does.
"""

import bz2
import collections
import hashlib
import zlib

import numpy as np

from streamrank.errors import InputError

RAW_READ_BYTES = 4 << 20
# Text per chunk handed to the parser: a conversion holds about eight times this
# (io.convert.CONVERT_BYTES_PER_TEXT_BYTE). Measured on 1.7 GB of generated MSLR-like text (two
# cores, interleaved): 16 MB chunks 8.0-8.5 s and 359 MB peak, 8 MB 8.1-8.3 s and 293 MB, 6 MB
# 9.9-10.4 s (slower, by a cause not yet profiled)
DEFAULT_CHUNK_BYTES = 8 << 20
# The longest line read: a LETOR/SVMlight line of 64 MiB holds over two million features of 25
# characters. Reading stops at end of file, and the text is held up to a line's end: without this
# a file with no newline (a device such as /dev/zero, a FIFO fed without one, or a small gzip member
# of zeros that decompresses to gigabytes) would be read into memory without end
MAX_LINE_BYTES = 64 << 20


def _sniff(path):
    with open(path, "rb") as f:
        head = f.read(3)
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head == b"BZh":
        return "bzip2"
    return "plain"


class _Decoder:
    """Incremental decompressor across concatenated members."""

    def __init__(self, kind):
        self.kind = kind
        self._new()

    def _new(self):
        self.in_member = False
        if self.kind == "gzip":
            self._d = zlib.decompressobj(wbits=31)
        elif self.kind == "bzip2":
            self._d = bz2.BZ2Decompressor()
        else:
            self._d = None

    def feed(self, data):
        if self._d is None:
            return data
        out = []
        while data:
            self.in_member = True
            out.append(self._d.decompress(data))
            if not self._d.eof:
                break
            data = self._d.unused_data
            self._new()
        return b"".join(out)


class TextChunks:
    """Iterate over ``(buf, first_line)``: uint8 arrays of whole lines, each ending in b'\\n'
    (``(buf, first_line, ends)`` with ``line_ends``).

    ``first_line`` is the 0-based line number of the chunk's first line in the file. After the
    iteration ``sha256`` holds the digest of the stored file and ``text_bytes`` the decompressed size.
    """

    def __init__(self, path, chunk_bytes=DEFAULT_CHUNK_BYTES, skip=0, first_line=0, line_ends=False):
        self.path = path
        # with line_ends, items are (buf, first_line, ends): the positions of buf's newlines, found
        # here, in the reading thread, instead of by the parsing one (a conversion's critical path)
        self.line_ends = bool(line_ends)
        self._free = collections.deque()  # plain text's chunk buffers handed back (recycle)
        self.chunk_bytes = int(chunk_bytes)
        # resuming: the first ``skip`` bytes of text (whole lines, ``first_line`` of them) are read
        # and hashed but not handed out
        self.skip = int(skip)
        self.first_line = int(first_line)
        self.kind = _sniff(path)
        self.sha256 = None
        self.raw_bytes = 0
        self.text_bytes = 0

    def __iter__(self):
        if self.kind == "plain":
            yield from self._plain()
            return
        h = hashlib.sha256()
        dec = _Decoder(self.kind)
        pending = bytearray()
        line = self.first_line
        to_skip = self.skip
        with open(self.path, "rb") as f:
            while True:
                raw = f.read(RAW_READ_BYTES)
                if not raw:
                    break
                self.raw_bytes += len(raw)
                h.update(raw)
                try:
                    pending += dec.feed(raw)
                except (zlib.error, OSError, ValueError, EOFError) as e:
                    raise InputError(f"{self.path}: the {self.kind} data is damaged near byte {self.raw_bytes:,} "
                                     f"({e}); fetch or decompress the file again") from None
                if to_skip:
                    n = min(to_skip, len(pending))
                    del pending[:n]
                    to_skip -= n
                    self.text_bytes += n
                while len(pending) >= self.chunk_bytes:
                    # whole lines of at most chunk_bytes (a longer line is a chunk of its own)
                    cut = pending.rfind(b"\n", 0, self.chunk_bytes) + 1 or pending.find(b"\n", self.chunk_bytes) + 1
                    if cut == 0:
                        break
                    view = memoryview(pending)
                    chunk = bytes(view[:cut])  # one copy (pending[:cut] would copy twice)
                    view.release()
                    del pending[:cut]
                    self.text_bytes += len(chunk)
                    item = self._item(np.frombuffer(chunk, np.uint8), line)
                    yield item
                    line += len(item[2]) if self.line_ends else chunk.count(b"\n")
                if len(pending) > max(MAX_LINE_BYTES, self.chunk_bytes):  # the loop above left part of one line
                    self._too_long(line)
        if dec._d is not None and dec.in_member and not dec._d.eof:
            raise InputError(f"{self.path}: the {self.kind} stream ends early after {self.raw_bytes:,} bytes (the file "
                             f"is truncated); fetch it again")
        if pending:
            if pending[-1:] != b"\n":
                pending += b"\n"
            chunk = bytes(pending)
            self.text_bytes += len(chunk)
            yield self._item(np.frombuffer(chunk, np.uint8), line)
        self.sha256 = h.hexdigest()

    def recycle(self, buf):
        """Hand back a chunk of plain text once nothing refers to its bytes any more: its buffer
        takes a later chunk (no new pages to fault in and clear, 8 MB a chunk)."""
        base = buf.base if isinstance(buf, np.ndarray) else None
        base = base.obj if isinstance(base, memoryview) else base
        if isinstance(base, bytearray) and len(base) == max(1, self.chunk_bytes) and len(self._free) < 4:
            self._free.append(base)

    @staticmethod
    def _grown(buf, filled, size):
        """A new buffer of ``size`` bytes holding buf's first ``filled``. Not ``buf.extend``: buf
        may be a recycled chunk whose array the consumer has not dropped yet, and a bytearray
        with an export cannot be resized (BufferError, found with 64-byte chunks)."""
        out = bytearray(size)
        out[:filled] = memoryview(buf)[:filled]
        return out

    def _too_long(self, line):
        raise InputError(f"{self.path}:{line + 1}: the line is longer than {MAX_LINE_BYTES >> 20} MiB without a "
                         f"line end (read {self.text_bytes:,} bytes of text before it): not LETOR/SVMlight text, "
                         f"or a device or pipe that does not end")

    def _item(self, buf, line):
        # read-only, as the decompressing path's arrays over bytes are: one numba specialisation
        # of the parser (the first-use lists in _native/warm_manifest.py record it)
        buf.flags.writeable = False
        if not self.line_ends:
            return buf, line
        return buf, line, np.flatnonzero(buf == 10)

    def _plain(self):
        """Plain text, read straight into each chunk's own buffer: one copy from the page cache
        (the decompressing path above copies every byte three times: into the pending text, out
        as the chunk, and by counting); only a partial last line moves to the next buffer. The
        same chunks as that path: the longest run of whole lines of at most ``chunk_bytes``, or
        one longer line alone."""
        h = hashlib.sha256()
        cap = max(1, self.chunk_bytes)
        line = self.first_line
        buf, filled = bytearray(cap), 0
        with open(self.path, "rb") as f:
            to_skip = self.skip  # resuming: read and hashed, not handed out (whole lines)
            while to_skip:
                n = f.readinto(memoryview(buf)[:min(cap, to_skip)])
                if not n:
                    break
                h.update(memoryview(buf)[:n])
                self.raw_bytes += n
                self.text_bytes += n
                to_skip -= n
            while True:
                if filled == len(buf):  # one line longer than a chunk: room for more of it
                    if filled > MAX_LINE_BYTES:  # buf holds part of one line alone (no newline in it)
                        self._too_long(line)
                    buf = self._grown(buf, filled, 2 * len(buf))
                n = f.readinto(memoryview(buf)[filled:filled + min(RAW_READ_BYTES, len(buf) - filled)])
                if not n:
                    break
                h.update(memoryview(buf)[filled:filled + n])
                self.raw_bytes += n
                filled += n
                while filled >= cap:
                    cut = buf.rfind(b"\n", 0, cap) + 1 or buf.find(b"\n", cap, filled) + 1
                    if cut == 0:
                        break
                    tail = filled - cut
                    nxt = self._free.pop() if self._free and tail <= cap else bytearray(max(cap, tail))
                    nxt[:tail] = memoryview(buf)[cut:filled]
                    self.text_bytes += cut
                    item = self._item(np.frombuffer(buf, np.uint8, count=cut), line)
                    yield item
                    line += len(item[2]) if self.line_ends else buf.count(b"\n", 0, cut)
                    buf, filled = nxt, tail
        if filled:
            if buf[filled - 1] != 10:
                if filled == len(buf):
                    buf = self._grown(buf, filled, filled + 1)
                buf[filled] = 10
                filled += 1
            self.text_bytes += filled
            yield self._item(np.frombuffer(buf, np.uint8, count=filled), line)
        self.sha256 = h.hexdigest()
