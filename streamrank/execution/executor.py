"""The executor seam: how one pass over the data is run (DESIGN.md, "Data flow").

Every pass of training and prediction (a loss and gradient, a Hessian product, scores, the
preconditioner's sample, the normaliser's statistics) is a :class:`Pass`, handed with the block
source it reads to :meth:`Executor.run`. Objectives and solvers never loop over blocks
themselves, so another executor (dask.distributed) can run the same passes without touching them.

A pass has four parts:

- ``start()`` a fresh accumulator (the *carry*) for one partition: a run of consecutive blocks;
- ``step(carry, item, *kept)`` the work of one block, done where the block is: it updates the
  carry in place and returns what the block keeps for later passes (its active sets, its scores),
  or None;
- ``merge(total, carry)`` returns ``total`` with a later partition's carry added (partition
  order); a pass whose carry cannot be split (``one_partition``) runs as one partition anywhere;
- ``done(carry)`` True when the rest of the blocks are not needed (partial passes; checked before
  a block is read).

:meth:`Executor.run` returns ``(carry, outputs)``: the merged carry and the list of the blocks'
outputs in block order (or, with ``collect``, hands each output to ``collect(k, output)`` in
block order and keeps none: predictions need not be held twice). ``kept`` passes outputs of an
earlier pass back to the blocks they came from: block k's step gets ``kept[0][k], kept[1][k], ...``.

**Order, and so the bits.** The local executor runs every block in order as ONE partition: a carry
sees the blocks in row order, so its sums run in the order the data fixes (``_native.linalg``),
whatever the block size. An executor with several partitions merges their carries in partition
order, so its result is fixed by the partitioning (chosen from the query index), not by the
number of workers or their timing; it may differ from the local result in the last bits.
"""


class Pass:
    """One pass over the blocks of a source (override ``step``; the rest have defaults)."""

    one_partition = False

    def start(self):
        return None

    def step(self, carry, item, *kept):
        raise NotImplementedError

    def merge(self, total, carry):
        raise NotImplementedError(f"{type(self).__name__} runs as one partition only")

    def done(self, carry):
        return False


class Executor:
    """Runs passes (see the module docstring)."""

    name = "abstract"

    def run(self, p, source, *, kept=(), collect=None):
        raise NotImplementedError


class LocalExecutor(Executor):
    """In this process: every block in order (threads are the kernels' own), as one partition, or
    in partitions of ``partition_blocks`` consecutive blocks merged in order, as a distributed
    executor would (the tests prove each pass's ``merge`` that way). ``one_partition`` passes are
    never split."""

    name = "local"

    def __init__(self, partition_blocks=None):
        self.partition_blocks = partition_blocks

    def run(self, p, source, *, kept=(), collect=None):
        size = None if p.one_partition else self.partition_blocks
        total, carry = None, p.start()
        outputs = None if collect is not None else []
        it = iter(source)
        k = 0
        try:
            while not p.done(carry):
                try:
                    item = next(it)
                except StopIteration:
                    break
                if size and k and k % size == 0:  # a new partition: the previous carry is merged
                    total = carry if total is None else p.merge(total, carry)
                    carry = p.start()
                out = p.step(carry, item, *(x[k] for x in kept))
                if collect is not None:
                    collect(k, out)
                else:
                    outputs.append(out)
                k += 1
        finally:
            close = getattr(it, "close", None)
            if close is not None:  # a generator stopped early releases its buffers and threads now
                close()
        self.record(p, source, k)
        return (carry if total is None else p.merge(total, carry)), outputs

    def record(self, p, source, blocks):
        """Hook: a pass of ``p`` over ``blocks`` blocks of ``source`` has run."""


LOCAL = LocalExecutor()


def executor_or_local(executor):
    """``executor``, or the local one for None."""
    if executor is None:
        return LOCAL
    if not isinstance(executor, Executor):
        raise TypeError(f"executor must be an Executor (streamrank.execution.executor); got {type(executor).__name__}")
    return executor
