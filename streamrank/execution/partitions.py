"""Partitions: runs of whole queries fixed by the query index (DESIGN.md, "Data flow").

A pass over the data is a sum of per-partition partial sums added in partition order. The
partitions depend on the query index and on ``partition_rows`` only (never on the block size,
the memory budget, the number of workers or their timing), so every executor, the local one
included, adds the same partial sums in the same order and gives the same bits. Blocks never
straddle a partition boundary (:func:`streamrank.io.query_stream.plan_blocks` breaks there), so a
partition is a run of query-aligned blocks that one worker reads on its own.
"""

import numpy as np

# Rows of one partition (whole queries; a query larger than this is a partition of its own).
# Large enough that a pass ships a few vectors per 2^18 rows (w out, a partial sum back: for 220
# features ~3.5 KB against ~230 MB of rows read), small enough that MSLR-WEB30K's 3.8M rows make
# 15 partitions to spread over workers. Data under 2^18 rows is one partition: the local bits of
# every small dataset are those of a single in-order pass.
PARTITION_ROWS = 1 << 18


def check_partition_rows(partition_rows):
    """``partition_rows`` as an int in its range (streamrank.params; None: :data:`PARTITION_ROWS`)."""
    from streamrank import params
    if partition_rows is None:
        return PARTITION_ROWS
    return params.check("partition_rows", partition_rows)


def partition_bounds(query_ptr, q0, q1, partition_rows=None):
    """Query indices [q0, ..., q1] at partition boundaries of queries q0:q1.

    Greedy from q0 over whole queries: a partition ends at the last query boundary within
    ``partition_rows`` rows of its start (at least one query). Rows are counted from q0, so the
    partitions of a query range are the same whatever else the dataset holds.
    """
    rows = check_partition_rows(partition_rows)
    qp = np.asarray(query_ptr)
    bounds = [int(q0)]
    q = int(q0)
    while q < q1:
        nxt = int(np.searchsorted(qp, qp[q] + rows, side="right")) - 1
        q = min(max(nxt, q + 1), int(q1))
        bounds.append(q)
    return np.asarray(bounds, np.int64)


def block_partitions(block_bounds, bounds):
    """Partition index of each block (blocks given by their query bounds; none straddles)."""
    return np.searchsorted(np.asarray(bounds), np.asarray(block_bounds)[:-1], side="right") - 1
