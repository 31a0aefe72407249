"""The local executor with small partitions, for tests: it merges the carries in partition order,
as a distributed executor does (DESIGN.md, "Data flow"), and records the passes it ran, so a
test can check that every pass of a training run went through it."""

from streamrank.execution.executor import LocalExecutor, block_partition


class PartitionedExecutor(LocalExecutor):
    name = "partitioned (tests)"

    def __init__(self, partition_rows=300):
        super().__init__(partition_rows=partition_rows)
        self.ran = []  # (pass class name, source type name, blocks, partitions)

    def record(self, p, source, blocks):
        bp = block_partition(source)
        parts = 1 if p.one_partition or not blocks or bp is None else len(set(bp[:blocks].tolist()))
        self.ran.append((type(p).__name__, type(source).__name__, blocks, parts))
