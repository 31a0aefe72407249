"""Line-aligned chunks of decompressed text from plain, gzip, bzip2 or xz files: the one place
where text is decoded (DESIGN.md, "Guarantees": the text decoder).

Compression is recognised by the file's magic bytes, not its name. The sha256 of the file as
stored on disk is computed on the way (for the dataset's ``source`` attribute). Several gzip,
bzip2 or xz members concatenated in one file are read as one stream, like ``zcat`` does.

Every line end is one: LF, CRLF, or a CR alone (classic Mac text), as Python's universal newlines
count them. A lone CR becomes an LF in the chunk, and a UTF-8 byte-order mark at the start of the
text becomes three spaces: the text keeps its length, so offsets (a resumed conversion's) and line
numbers are those of the file. A CR before an LF stays (the parser takes it for white space). Text
in UTF-16 (its byte-order mark) or zstd-compressed is refused with the fix.
"""

import bz2
import collections
import hashlib
import lzma
import zlib

import numpy as np

from streamrank.errors import InputError

RAW_READ_BYTES = 4 << 20
# Text per chunk handed to the parser: a conversion holds about eight times this
# (io.convert.CONVERT_BYTES_PER_TEXT_BYTE). 8 MB: the smallest peak at the speed of larger chunks
# (docs/design.md, Measurements)
DEFAULT_CHUNK_BYTES = 8 << 20
# The longest line read: a LETOR/SVMlight line of 64 MiB holds over two million features of 25
# characters. Reading stops at end of file, and the text is held up to a line's end: without this
# a file with no newline (a device such as /dev/zero, a FIFO fed without one, or a small gzip member
# of zeros that decompresses to gigabytes) would be read into memory without end
MAX_LINE_BYTES = 64 << 20
# chunks whose anchor (TextChunks.anchor) is kept: the reader runs at most a few chunks ahead of
# the parser (a queue of two)
ANCHORS_KEPT = 8


# compression by the stream's first bytes
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"))
_REFUSED_MAGIC = ((b"\x28\xb5\x2f\xfd", "zstd-compressed; decompress it first (zstd -d FILE)"),)
UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
CR, LF = 13, 10
# text at a URL is read in requests of this many bytes (one round trip each)
URL_READ_BYTES = 8 << 20


def open_raw(path):
    """The file's bytes as a binary file object: a local file, or an object at a URL read through
    fsspec in large sequential requests (:mod:`streamrank.io.urls`)."""
    from streamrank.io.urls import filesystem, is_url, store_error, store_errors
    if not is_url(path):
        return open(path, "rb")
    fs, inner = filesystem(str(path))
    try:
        return _StoreReads(fs.open(inner, "rb", block_size=URL_READ_BYTES, cache_type="readahead"), str(path),
                           store_errors(), store_error)
    except FileNotFoundError:
        raise InputError(f"{path}: no such object") from None
    except store_errors() as e:
        raise store_error(path, e) from None


class _StoreReads:
    """A store's file object whose failed reads are InputError naming the URL."""

    def __init__(self, f, url, errors, error):
        self.f, self.url, self.errors, self.error = f, url, errors, error

    def read(self, n=-1):
        try:
            return self.f.read(n)
        except self.errors as e:
            raise self.error(self.url, e) from None

    def readinto(self, b):
        data = self.read(len(b))
        memoryview(b)[:len(data)] = data
        return len(data)

    def __iter__(self):  # lines, as a file's
        try:
            yield from self.f
        except self.errors as e:
            raise self.error(self.url, e) from None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()
        return False


def _sniff(path):
    with open_raw(path) as f:
        head = f.read(6)
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    for magic, what in _REFUSED_MAGIC:
        if head.startswith(magic):
            raise InputError(f"{path}: the file is {what}; streamrank reads plain, gzip, bzip2 or xz text")
    return "plain"


def _text_start(path, buf):
    """The first bytes of a file's text, in place: a UTF-8 byte-order mark becomes white space; a
    UTF-16 one is refused (``buf`` holds at least 3 bytes, or all the text)."""
    if buf[:3] == UTF8_BOM:
        buf[:3] = b"   "
    elif bytes(buf[:2]) in _UTF16_BOMS:
        raise InputError(f"{path}: the text is UTF-16 (it starts with a UTF-16 byte-order mark); save it as "
                         f"UTF-8 or ASCII (iconv -f UTF-16 -t UTF-8 FILE)")


def cr_line_ends(buf, a, b, final):
    """Turn every lone CR of ``buf[a:b]`` (a bytearray) into an LF, in place; return the position
    up to which the text is settled: ``b``, or ``b - 1`` when ``buf[b - 1]`` is a CR whose next
    byte has not been read yet (an LF may follow; ``final``: nothing follows, so it is a line end).
    Positions from ``b`` on are not looked at. One memchr when there is no CR (LF text)."""
    i = buf.find(b"\r", a, b)
    if i < 0:
        return b
    v = np.frombuffer(buf, np.uint8, count=b)
    at = i + np.flatnonzero(v[i:b] == CR)
    settled = b
    if not final and at[-1] == b - 1:
        at, settled = at[:-1], b - 1
    after = np.minimum(at + 1, b - 1)
    lone = at[(at + 1 == b) | (v[after] != LF)]
    v[lone] = LF
    del v
    return settled


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
        elif self.kind == "xz":
            self._d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        else:
            self._d = None

    def feed(self, data):
        if self._d is None:
            return data
        out = []
        while data:
            if self.kind == "xz" and not self.in_member:
                data = data.lstrip(b"\0")  # xz's stream padding between and after streams
                if not data:
                    break
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
        self._anchors = {}  # text offset at a chunk's end -> (raw bytes read, their sha256 object)
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
        settled = 0  # pending[:settled] has its line ends settled (cr_line_ends)
        line = self.first_line
        to_skip = self.skip
        started = self.skip > 0  # the text's start (a byte-order mark) is behind
        with open_raw(self.path) as f:
            while True:
                raw = f.read(RAW_READ_BYTES)
                if not raw:
                    break
                self.raw_bytes += len(raw)
                h.update(raw)
                try:
                    pending += dec.feed(raw)
                except (zlib.error, lzma.LZMAError, OSError, ValueError, EOFError) as e:
                    raise InputError(f"{self.path}: the {self.kind} data is damaged near byte {self.raw_bytes:,} "
                                     f"({e}); fetch or decompress the file again") from None
                if not started and len(pending) >= 3:
                    _text_start(self.path, pending)
                    started = True
                settled = cr_line_ends(pending, settled, len(pending), final=False)
                if to_skip:
                    n = min(to_skip, len(pending))
                    del pending[:n]
                    to_skip -= n
                    settled = max(0, settled - n)
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
                    settled -= cut
                    self.text_bytes += len(chunk)
                    item = self._item(np.frombuffer(chunk, np.uint8), line)
                    self._mark(h)
                    yield item
                    line += len(item[2]) if self.line_ends else chunk.count(b"\n")
                if len(pending) > max(MAX_LINE_BYTES, self.chunk_bytes):  # the loop above left part of one line
                    self._too_long(line)
        if dec._d is not None and dec.in_member and not dec._d.eof:
            raise InputError(f"{self.path}: the {self.kind} stream ends early after {self.raw_bytes:,} bytes (the file "
                             f"is truncated); fetch it again")
        if not started:
            _text_start(self.path, pending)
        cr_line_ends(pending, settled, len(pending), final=True)
        if pending:
            if pending[-1:] != b"\n":
                pending += b"\n"
            chunk = bytes(pending)
            self.text_bytes += len(chunk)
            self._mark(h)
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
        settled = 0  # buf[:settled] has its line ends settled (cr_line_ends)
        started = self.skip > 0  # the text's start (a byte-order mark) is behind
        with open_raw(self.path) as f:
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
                if not started and filled >= 3:
                    _text_start(self.path, buf)
                    started = True
                settled = cr_line_ends(buf, settled, filled, final=False)
                while filled >= cap:
                    cut = buf.rfind(b"\n", 0, cap) + 1 or buf.find(b"\n", cap, filled) + 1
                    if cut == 0:
                        break
                    tail = filled - cut
                    nxt = self._free.pop() if self._free and tail <= cap else bytearray(max(cap, tail))
                    nxt[:tail] = memoryview(buf)[cut:filled]
                    self.text_bytes += cut
                    item = self._item(np.frombuffer(buf, np.uint8, count=cut), line)
                    self._mark(h)
                    yield item
                    line += len(item[2]) if self.line_ends else buf.count(b"\n", 0, cut)
                    buf, filled, settled = nxt, tail, settled - cut
        if not started:  # fewer than three bytes of text: only a UTF-16 mark to refuse
            _text_start(self.path, buf[:filled])
        cr_line_ends(buf, settled, filled, final=True)
        if filled:
            if buf[filled - 1] != 10:
                if filled == len(buf):
                    buf = self._grown(buf, filled, filled + 1)
                buf[filled] = 10
                filled += 1
            self.text_bytes += filled
            self._mark(h)
            yield self._item(np.frombuffer(buf, np.uint8, count=filled), line)
        self.sha256 = h.hexdigest()

    def _mark(self, h):
        """Remember, for the chunk about to be handed out, the raw bytes read so far and their
        digest (:meth:`anchor`); the last few chunks' only."""
        self._anchors[self.text_bytes] = (self.raw_bytes, h.copy())
        while len(self._anchors) > ANCHORS_KEPT:
            del self._anchors[next(iter(self._anchors))]

    def anchor(self, text_offset):
        """``(raw_bytes, sha256)`` for the chunk handed out that ends at ``text_offset`` (bytes of
        text from the file's start): the first ``raw_bytes`` bytes of the file as stored, whose
        sha256 this is, determine its text up to ``text_offset`` (they were all read before the
        chunk was cut). A conversion records it at a commit, and :func:`prefix_digest` proves,
        before it resumes, that the file still begins with those bytes."""
        raw, h = self._anchors[text_offset]
        return raw, h.hexdigest()


def prefix_digest(path, raw_bytes):
    """sha256 of the first ``raw_bytes`` bytes of the file at ``path`` (None when it is shorter)."""
    h = hashlib.sha256()
    left = int(raw_bytes)
    with open_raw(path) as f:
        while left:
            b = f.read(min(left, RAW_READ_BYTES))
            if not b:
                return None
            h.update(b)
            left -= len(b)
    return h.hexdigest()
