"""A query larger than a block (issue 31: "1 query is larger than the block budget of 2.2 MB ...
pass --memory-budget 18.4MB", seen at a 2 GB budget): the advice names a value that works, in the
terms of whoever sized the block, and a training plan's block holds the largest query whenever the
plan accepts the budget."""

import warnings

import numpy as np
import pytest

import streamrank
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.training.linear import mapped_block_row_bytes, plan_blocks
from streamrank.units import parse_size

D = 20


def write(path, sizes):
    rng = np.random.default_rng(0)
    n = int(sum(sizes))
    with DatasetWriter(path, n_features=D, source=[{"name": "sizes", "sha256": ""}]) as w:
        w.append(rng.random((n, D), dtype=np.float32), rng.integers(0, 3, n).astype(np.float32),
                 np.repeat(np.arange(len(sizes)), sizes))
    return path


def no_warning(make):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return make()


def test_a_streams_own_block_names_the_budget_that_holds_the_query(tmp_path):
    with streamrank.open_dataset(write(tmp_path / "d.h5", [10, 400, 10])) as ds:
        largest = 400 * (4 * D + 4)  # 33.6 KB: its 1/8 share needs a 268.8 KB budget
        with pytest.warns(RuntimeWarning, match=r"larger than the block budget of 12.5 KB \(e.g. query 1 with 400 "
                          r"rows, 33.6 KB\); each is read whole, beyond the block: this stream's block is 1/8 of "
                          r"the memory budget 100.0 KB; use memory_budget=1MB or more"):
            ds.stream(memory_budget="100KB")
        assert no_warning(lambda: ds.stream(memory_budget="1MB")).block_bytes >= largest


def test_a_planned_block_names_the_block_size_that_holds_the_query(tmp_path):
    with streamrank.open_dataset(write(tmp_path / "d.h5", [10, 400, 10])) as ds:
        with pytest.warns(RuntimeWarning, match=r"the plan that chose the block did not count it; use "
                          r"block_bytes=33600 or more"):
            ds.stream(block_bytes=10_000)
        no_warning(lambda: ds.stream(block_bytes=33_600))


def test_a_mapped_plan_gives_a_block_holding_the_largest_query(tmp_path):
    """Nystroem with m = 1,000 at 2 GB: a block's share of the budget (1/8, two buffers) holds
    budget / 4 / (bytes a mapped row costs) = 59,577 rows; the largest query has 64,000, and the
    budget holds it: the plan's block holds it too, so its stream reads no block past the plan."""
    m, sizes = 1000, [100, 64_000, 100]
    budget = parse_size("2GB")
    assert budget / 4 / mapped_block_row_bytes(D, m) < max(sizes)  # the share alone would not hold it
    with streamrank.open_dataset(write(tmp_path / "big.h5", sizes)) as ds:
        fixed, block, resident = plan_blocks(budget, ds, ds.n_rows, None, "nystroem", m, 0, "squared_hinge")
        assert block >= max(sizes) * (4 * D + 4)
        stream = no_warning(lambda: ds.stream(block_bytes=block))
        assert stream.max_block_rows == max(sizes)
