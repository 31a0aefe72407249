"""Line-aligned chunks of decompressed text from plain, gzip or bzip2 files.

Compression is recognised by the file's magic bytes, not its name. The sha256 of the file as
stored on disk is computed on the way (for the dataset's ``source`` attribute). Several gzip or
bzip2 members concatenated in one file are read as one stream, like ``zcat`` does.
"""

import bz2
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
    """Iterate over ``(buf, first_line)``: uint8 arrays of whole lines, each ending in b'\\n'.

    ``first_line`` is the 0-based line number of the chunk's first line in the file. After the
    iteration ``sha256`` holds the digest of the stored file and ``text_bytes`` the decompressed size.
    """

    def __init__(self, path, chunk_bytes=DEFAULT_CHUNK_BYTES, skip=0, first_line=0):
        self.path = path
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
                    yield np.frombuffer(chunk, np.uint8), line
                    line += chunk.count(b"\n")
        if dec._d is not None and dec.in_member and not dec._d.eof:
            raise InputError(f"{self.path}: the {self.kind} stream ends early after {self.raw_bytes:,} bytes (the file "
                             f"is truncated); fetch it again")
        if pending:
            if pending[-1:] != b"\n":
                pending += b"\n"
            chunk = bytes(pending)
            self.text_bytes += len(chunk)
            yield np.frombuffer(chunk, np.uint8), line
        self.sha256 = h.hexdigest()
