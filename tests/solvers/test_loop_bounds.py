"""Loops outside the solvers that had no bound they could not pass (issue 30, build item 1; the
table is docs/loops.md): a text line without an end (a device, a pipe, a gzip member of zeros),
a lock file replaced at every attempt, a Fenwick insert at a rank below 0, a tile of no rows, and
CLSRRank's group sums fed blocks out of order. Each now ends with an error that says why."""

import gzip
import os
import types

import numpy as np
import pytest

from streamrank.errors import InputError
from streamrank.io import convert_progress, text_source
from streamrank.io.text_source import TextChunks


@pytest.fixture
def short_lines(monkeypatch):
    """A 1 MiB line limit, so that the tests read a few MiB, not 64."""
    monkeypatch.setattr(text_source, "MAX_LINE_BYTES", 1 << 20)
    return 1 << 20


@pytest.mark.parametrize("kind", ["plain", "gzip"])
def test_a_line_without_an_end_is_refused_at_the_limit(tmp_path, short_lines, kind):
    head = b"1 qid:1 1:0.5\n" * 3
    body = head + b"7" * (3 * short_lines)  # line 4 never ends
    path = tmp_path / f"long.{kind}"
    path.write_bytes(gzip.compress(body, 1) if kind == "gzip" else body)
    chunks = []
    with pytest.raises(InputError, match=r"long\.\w+:4: the line is longer than 1 MiB without a line end"):
        for c in TextChunks(path, chunk_bytes=1 << 16):
            chunks.append(c)
    assert sum(len(c[0]) for c in chunks) <= len(head)  # the whole lines before it were handed out


def test_a_device_that_never_ends_is_refused_not_read_for_ever(short_lines):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    with pytest.raises(InputError, match=r"/dev/zero:1: the line is longer than 1 MiB"):
        for _ in TextChunks("/dev/zero", chunk_bytes=1 << 16):
            pass


def test_a_long_line_below_the_limit_is_still_read(tmp_path, short_lines):
    body = b"1 qid:1 " + b"1:0.5 " * (short_lines // 8) + b"\n2 qid:1 1:1\n"
    path = tmp_path / "ok.txt"
    path.write_bytes(body)
    got = b"".join(bytes(c[0]) for c in TextChunks(path, chunk_bytes=1 << 16))
    assert got == body


def test_a_lock_file_replaced_at_every_attempt_ends_the_wait(tmp_path, monkeypatch):
    class ReplacedEveryTime:
        """os, except that the lock file on disk is never the one just opened."""

        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def stat(p):
            return types.SimpleNamespace(st_ino=os.stat(p).st_ino + 1)
    monkeypatch.setattr(convert_progress, "os", ReplacedEveryTime())
    with pytest.raises(InputError, match=f"replaced {convert_progress.LOCK_ATTEMPTS} times"):
        convert_progress.Lock(tmp_path / "x.lock", tmp_path / "x.h5", wait=True)


def test_a_fenwick_insert_below_rank_zero_ends():
    """n = rank + 1 = 0 has lowbit 0: the insert loop never moved (a hang on any rank < 0)."""
    from streamrank._native import pairkernels as pk
    tree = np.zeros((5, 2))
    pk._fenwick_add(tree, -1, np.ones(2))
    pk._fenwick_add(tree, -3, np.ones(2))
    assert not tree.any()
    mom = np.zeros((5, 3))
    pk._mom_fenwick_push(mom, -1, 1.0, 2.0)
    assert not mom.any()
    pk._fenwick_add(tree, 0, np.ones(2))  # rank 0 still reaches nodes 1, 2, 4
    assert tree[:, 0].tolist() == [0.0, 1.0, 1.0, 0.0, 1.0]


def test_row_tiles_refuses_a_tile_of_no_rows():
    from streamrank.features.kernels import row_tiles
    assert list(row_tiles(5, 3, 4)) == [(0, 1, 3), (1, 5, 0)]
    with pytest.raises(ValueError, match="tile must be >= 1"):
        list(row_tiles(5, 0, 0))


def test_clsr_sums_refuse_blocks_out_of_order():
    from streamrank.training.clsr import _Sums

    class Identity:
        def transform(self, X, dtype, out, row0):
            out[:] = X
            return out
    qp = np.array([0, 2, 4, 6])
    s = _Sums(3, qp, rows_max=2)  # one group per query
    X, y = np.arange(18.0).reshape(6, 3), np.arange(6.0)
    with pytest.raises(RuntimeError, match="arrived after group 0"):
        s.add(Identity(), X[4:6], y[4:6], 2, 3, 4)  # query 2 before queries 0 and 1
    s = _Sums(3, qp, rows_max=2)
    s.add(Identity(), X, y, 0, 3, 0)  # in order: every group summed
    assert s.rows == 6 and s.g == 3
