"""TextChunks hands plain text's chunk buffers back for later chunks (recycle): a recycled buffer
must never be resized while the consumer's array over it is alive (found by the conversion tests
with 64-byte chunks: BufferError, now and then, from the reading thread)."""

import numpy as np

from streamrank.io.text_source import TextChunks


def test_lines_longer_than_a_recycled_chunk(tmp_path):
    rng = np.random.default_rng(3)
    lines = [b"1 qid:1 " + b" ".join(b"%d:0.5" % j for j in range(1, int(rng.integers(0, 30)) + 1))
             for _ in range(500)]
    text = b"\n".join(lines)  # no newline at the end: the last line gets one
    path = tmp_path / "t.txt"
    path.write_bytes(text)
    for chunk in (16, 64, 100):
        src = TextChunks(path, chunk)
        got, alive = [], []
        for buf, first_line in src:
            assert buf[-1] == 10 and first_line == sum(c.count(b"\n") for c in got)
            got.append(buf.tobytes())
            src.recycle(buf)
            # arrays over recycled buffers stay alive a while (convert's reading thread runs ahead
            # of the parsing one, whose last chunk's array lives until the next is taken)
            alive = (alive + [buf])[-3:]
        assert b"".join(got) == text + b"\n"
        assert all(len(c) <= chunk or c.count(b"\n") == 1 for c in got)
