"""An executor with several partitions, for tests only: it runs the blocks of a pass in runs of
``per_partition`` consecutive blocks, each from its own ``start()`` carry, and merges the carries in
partition order, as a distributed executor does (DESIGN.md, "Data flow"). Passes that a
distributed executor could not split (``one_partition``) run as one partition. It records the
passes it ran, so a test can check that every pass of a training run went through it."""

from streamrank.execution.executor import Executor


class PartitionedExecutor(Executor):
    name = "partitioned (tests)"

    def __init__(self, per_partition=2):
        self.per_partition = int(per_partition)
        self.ran = []  # (pass class name, source type name, blocks, partitions)

    def run(self, p, source, *, kept=(), collect=None):
        size = 10 ** 18 if p.one_partition else self.per_partition
        total, carry, outputs = None, p.start(), None if collect is not None else []
        parts, k = 0, 0
        it = iter(source)
        try:
            while not p.done(carry):
                try:
                    item = next(it)
                except StopIteration:
                    break
                if k and k % size == 0:  # a new partition: the previous carry is merged
                    total = carry if total is None else p.merge(total, carry)
                    carry, parts = p.start(), parts + 1
                out = p.step(carry, item, *(x[k] for x in kept))
                if collect is not None:
                    collect(k, out)
                else:
                    outputs.append(out)
                k += 1
        finally:
            getattr(it, "close", lambda: None)()
        total = carry if total is None else p.merge(total, carry)
        self.ran.append((type(p).__name__, type(source).__name__, k, parts + 1))
        return total, outputs
