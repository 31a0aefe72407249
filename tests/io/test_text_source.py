"""Line-aligned text chunks: plain text read straight into the chunks' buffers gives the chunks,
line numbers and byte counts of the decompressing path (here, the same text gzip-compressed),
for any chunk and read size, resumed or not, with or without a final newline."""

import gzip
import hashlib

import numpy as np
import pytest

from streamrank.io import text_source as ts


@pytest.mark.parametrize("seed", range(6))
def test_plain_chunks_equal_the_decompressing_paths(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    for trial in range(60):
        lines = [b"x" * int(rng.integers(0, 60)) for _ in range(int(rng.integers(0, 40)))]
        text = b"\n".join(lines) + (b"\n" if lines and rng.random() < 0.7 else b"")
        (tmp_path / "t.txt").write_bytes(text)
        (tmp_path / "t.gz").write_bytes(gzip.compress(text))
        chunk = int(rng.integers(1, 80))
        monkeypatch.setattr(ts, "RAW_READ_BYTES", int(rng.integers(1, 50)))
        ends = [i + 1 for i, c in enumerate(text) if c == 10]
        k = int(rng.integers(0, len(ends) + 1)) if ends else 0  # resume after k whole lines
        skip = ends[k - 1] if k else 0
        plain = ts.TextChunks(tmp_path / "t.txt", chunk, skip=skip, first_line=k)
        packed = ts.TextChunks(tmp_path / "t.gz", chunk, skip=skip, first_line=k)
        assert plain.kind == "plain" and packed.kind == "gzip"
        got = [(bytes(b), n) for b, n in plain]
        want = [(bytes(b), n) for b, n in packed]
        assert got == want, (trial, chunk)
        assert plain.text_bytes == packed.text_bytes == len(text) + (0 if not text or text.endswith(b"\n") else 1)
        assert plain.raw_bytes == len(text)
        # with the newlines found by the reading thread, and each chunk handed back once read
        src = ts.TextChunks(tmp_path / "t.txt", chunk, skip=skip, first_line=k, line_ends=True)
        seen = []
        for b, n, ends in src:
            seen.append((bytes(b), n))
            assert np.array_equal(ends, np.flatnonzero(np.frombuffer(bytes(b), np.uint8) == 10))
            src.recycle(b)
        assert seen == want
        assert plain.sha256 == hashlib.sha256(text).hexdigest()
