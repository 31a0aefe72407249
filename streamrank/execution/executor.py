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
  a block is read);
- ``finish(carry)`` completes what ``step`` left running (its kernels may run on after it
  returns when the source keeps its blocks in memory, ``blocks_persist``); called before a carry
  is merged or returned, and before an error propagates.

:meth:`Executor.run` returns ``(carry, outputs)``: the merged carry and the list of the blocks'
outputs in block order (or, with ``collect``, hands each output to ``collect(k, output)`` in
block order and keeps none: predictions need not be held twice). ``kept`` passes outputs of an
earlier pass back to the blocks they came from: block k's step gets ``kept[0][k], kept[1][k], ...``.

**Order, and so the bits.** Partitions are runs of whole queries fixed by the query index
(:mod:`streamrank.execution.partitions`); no block straddles one. Inside a partition a carry sees
the blocks in row order, so its sums run in the order the data fixes (``_native.linalg``),
whatever the block size; partitions' carries are merged in partition order. Every executor does
exactly this (the local one in this process, :mod:`streamrank.execution.dask_executor` on
workers), so the result is fixed by the data and ``partition_rows`` alone: the same bits for the
local path and for any number of workers, whatever their timing.
"""


class Pass:
    """One pass over the blocks of a source (override ``step``; the rest have defaults).

    ``reads``: what the pass iterates: ``"rows"`` every block of the source (one counted pass),
    ``"head"`` the first blocks only (``source.head()``, stopped by ``done``), ``"meta"`` no rows at
    all, only each block's ``(rank, qptr, q0, q1)`` (``source.blocks_meta()``) with its kept
    outputs (a line search on scores kept with the blocks).
    ``returns``: the blocks' outputs are wanted by the caller (scores, rows); otherwise they stay
    where the blocks are (in a distributed run, on the worker) until a later pass takes them back
    as ``kept``.
    """

    one_partition = False
    reads = "rows"
    returns = False
    # attributes that stay with the caller when the pass runs elsewhere (callbacks that write the
    # caller's files); the caller then hears of the pass's progress through ``reached``
    local_only = ()

    def reached(self, carry, q_stop):
        """Hook, on the caller's side: ``carry`` holds every row before query ``q_stop`` (a pass
        that cannot be split: called by its own ``step`` after each block here, by a distributed
        executor after each partition)."""

    def start(self):
        return None

    def step(self, carry, item, *kept):
        raise NotImplementedError

    def merge(self, total, carry):
        raise NotImplementedError(f"{type(self).__name__} runs as one partition only")

    def done(self, carry):
        return False

    # set by run_blocks: the source's blocks stay valid after step returns (kept in memory), so a
    # step may leave its kernels running on them until finish
    blocks_persist = False
    # the pass's steps may leave work running (then run_blocks merges the partitions' carries after
    # one finish at the end, not a finish at every partition's end; carries small enough to keep)
    defers = False

    def finish(self, carry):
        """Hook: the work that ``step`` left running is done when this returns."""


def pass_items(p, source):
    """The items a pass iterates over ``source`` (see :attr:`Pass.reads`)."""
    if p.reads == "head":
        return source.head()
    if p.reads == "meta":
        return iter(source.blocks_meta())
    return iter(source)


def block_partition(source):
    """Partition index of each block of ``source`` (None: one partition)."""
    bp = getattr(source, "block_partition", None)
    if bp is None:
        stream = getattr(source, "stream", None)
        bp = getattr(stream, "block_partition", None)
    return bp


def run_blocks(p, source, kept=(), collect=None, carry=None, on_block=None):
    """One pass of ``p`` over ``source`` in this process: the carry of each partition (a run of
    blocks, :mod:`streamrank.execution.partitions`) starts afresh and is merged into the total in
    partition order (``carry``: the one to continue, for a pass that cannot be split;
    ``on_block(k)``: told after each block, for progress). Returns ``(carry, outputs, blocks)``."""
    parts = None if p.one_partition else block_partition(source)
    total, carry = None, (p.start() if carry is None else carry)
    outputs = None if collect is not None else []
    it = pass_items(p, source)
    p.blocks_persist = bool(getattr(source, "in_memory", False)) and p.reads == "rows"
    deferred = [] if p.defers and p.blocks_persist else None  # carries to merge after finish
    k = 0
    finished = False
    try:
        while not p.done(carry):
            try:
                item = next(it)
            except StopIteration:
                break
            if parts is not None and k and parts[k] != parts[k - 1]:  # a new partition
                if deferred is not None:
                    deferred.append(carry)
                else:
                    p.finish(carry)
                    total = carry if total is None else p.merge(total, carry)
                carry = p.start()
            out = p.step(carry, item, *(x[k] for x in kept))
            if collect is not None:
                collect(k, out)
            else:
                outputs.append(out)
            if on_block is not None:
                on_block(k)
            k += 1
        finished = True
        p.finish(carry)
        for c in deferred or ():  # in partition order, before the last
            total = c if total is None else p.merge(total, c)
    finally:
        if not finished:  # an error: the step's kernels stop before it propagates (theirs is lost)
            try:
                p.finish(carry)
            except BaseException:  # noqa: B036 - the first error is the one that propagates
                pass
        p.blocks_persist = False  # a step called later, outside this loop, finishes its own work
        close = getattr(it, "close", None)
        if close is not None:  # a generator stopped early releases its buffers and threads now
            close()
    return (carry if total is None else p.merge(total, carry)), outputs, k


class Executor:
    """Runs passes (see the module docstring). ``partition_rows``: the partition size that
    training code gives the sources it makes (:mod:`streamrank.execution.partitions`)."""

    name = "abstract"
    partition_rows = None
    remote = False  # passes run in other processes: sources are built where they are read

    def run(self, p, source, *, kept=(), collect=None):
        raise NotImplementedError

    def describe(self):
        """A dict for summaries and ``--json``."""
        return {"executor": self.name}


class LocalExecutor(Executor):
    """In this process: the blocks in order, a carry per partition merged in partition order
    (threads are the kernels' own)."""

    name = "local"

    def __init__(self, partition_rows=None):
        from streamrank.execution.partitions import check_partition_rows
        self.partition_rows = check_partition_rows(partition_rows)

    def run(self, p, source, *, kept=(), collect=None):
        from streamrank.execution.progress import PassBar
        bar = PassBar(p, source)
        try:
            carry, outputs, k = run_blocks(p, source, kept, collect, on_block=bar.step)
        finally:
            bar.close()
        self.record(p, source, k)
        return carry, outputs

    def record(self, p, source, blocks):
        """Hook: a pass of ``p`` over ``blocks`` blocks of ``source`` has run."""


LOCAL = LocalExecutor()


def partitioned_stream(dataset, executor, **kwargs):
    """``dataset.stream(**kwargs)`` in the partitions of ``executor`` (None: the local one)."""
    return dataset.stream(partition_rows=executor_or_local(executor).partition_rows, **kwargs)


def executor_or_local(executor):
    """``executor``, or the local one for None."""
    if executor is None:
        return LOCAL
    if not isinstance(executor, Executor):
        raise TypeError(f"executor must be an Executor (streamrank.execution.executor); got {type(executor).__name__}")
    return executor
