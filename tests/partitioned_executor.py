"""The local executor in partitions of a few blocks, for tests: it merges the carries in partition
order, as a distributed executor does (DESIGN.md, "Data flow"), and records the passes it ran, so a
test can check that every pass of a training run went through it."""

from streamrank.execution.executor import LocalExecutor


class PartitionedExecutor(LocalExecutor):
    name = "partitioned (tests)"

    def __init__(self, per_partition=2):
        super().__init__(partition_blocks=int(per_partition))
        self.ran = []  # (pass class name, source type name, blocks, partitions)

    def record(self, p, source, blocks):
        parts = 1 if p.one_partition or not blocks else -(-blocks // self.partition_blocks)
        self.ran.append((type(p).__name__, type(source).__name__, blocks, parts))
