"""The RankSVM primal objective over a query-aligned block stream (DESIGN.md, "The objective").

    f(w) = 1/2 ||w||^2 + C * sum_q mu_q * sum_{(i,j) in P_q} lambda(y_i, y_j) * max(0, 1 - (z_i - z_j))^2

with z = Phi w (paper 000 eq. 22; paper 004 eq. 3.13 for Phi = the identity). In score space the
loss is block diagonal by query, so with query-aligned blocks

- ``fun`` + ``grad`` take ONE pass: z_q = Phi_q w, pair sweep on z_q, P[q] = Phi_q^T dz_q;
- ``hessp`` takes ONE pass: u_q = Phi_q s, t_q = (A^T D A)_q u_q with the active set of the last
  accepted point, P[q] = Phi_q^T t_q; H s = s + C * sum_q P[q].

Each query's rows are read once per pass (``_fused``), as float32 with the normalisation applied
on the fly. ``fun`` keeps the trial point's gradient and active sets aside; ``grad`` at the same
point commits them (TRON calls it only for accepted points), so a rejected trial never overwrites
the active set that ``hessp`` uses.

Every sum runs in an order fixed by the data, not by the blocks: per-row dot products, per-query
partial sums added in query order, per-query losses added in query order. fun, grad and hessp are
therefore bit-identical for any block size or memory budget, and so is the whole TRON trajectory.
"""

import threading
import time
from dataclasses import dataclass

import numpy as np

from streamrank._native import fused as fz
from streamrank._native import linalg as la
from streamrank._native import pairkernels as pk
from streamrank._native import parallel as par
from streamrank._native.blas import add_atb
from streamrank._native.memory import trimmer
from streamrank.execution.executor import Pass, executor_or_local
from streamrank.features.normalize import Normalizer
from streamrank.objectives.block_rows import block_phi as _phi

# Rows of Phi materialised at a time (float64, with L Phi beside them) when forming the dense
# Hessian: bounds that temporary memory to about 2 x 8 x HESSIAN_ROWS x m bytes.
HESSIAN_ROWS = 1 << 15

# a pass's start hands the heaps' free pages back once they have grown by this much since the
# last trim (the allocator's share of io.budget.STREAM_SLACK, 16 MB)
TRIM_GROWTH = 4 << 20
_trim = trimmer(TRIM_GROWTH)


@dataclass
class SourceBlock:
    """Whole queries q0:q1 as the objective needs them: float32 rows, label ranks, local
    query offsets, and the normalisation as (shift, scale, affine mode)."""

    X: np.ndarray
    rank: np.ndarray
    qptr: np.ndarray
    q0: int
    q1: int
    shift: np.ndarray
    scale: np.ndarray
    affine: int


class BlockSource:
    """The blocks of one pass: from memory when the rows fit in ``memory_bytes``, else re-read.

    The choice is made up front from the query index (no memory is filled and then dropped); the
    counted passes and rows are the same either way, and so are the values.
    """

    read_seconds = 0.0  # time inside the stream; subclasses that map rows do not count it
    accepts_buffer_pool = True  # its partitions on a worker share block buffers (execution.remote)

    def __init__(self, dataset, normalizer=None, *, block_bytes, memory_bytes, queries=None, levels=None,
                 partition_rows=None, buffer_pool=None):
        # how a worker makes its part of this source (streamrank.execution.dask_executor)
        self.spec = (BlockSource, dict(dataset=dataset, normalizer=normalizer, block_bytes=block_bytes,
                                       memory_bytes=memory_bytes, queries=queries, levels=levels,
                                       partition_rows=partition_rows))
        self.dataset = dataset
        self.normalizer = normalizer or Normalizer("none")
        q0, q1 = queries if queries is not None else (0, dataset.n_queries)
        n_rows = int(dataset.query_ptr[q1] - dataset.query_ptr[q0])
        # rows (float32) + label ranks (int32) + the per-query affine rows (2 x d float64)
        need = n_rows * (4 * dataset.n_features + 4) + (q1 - q0) * 16 * dataset.n_features
        self.in_memory = need <= memory_bytes
        # kept blocks get arrays of their own, read once; streamed ones reuse two buffers
        self.stream = dataset.stream(block_bytes=block_bytes, queries=(q0, q1), reuse_buffers=not self.in_memory,
                                     partition_rows=partition_rows, buffer_pool=buffer_pool)
        self.levels = np.asarray(levels, np.float64)
        self.passes = 0
        self.rows_read = 0
        self.read_seconds = 0.0  # inside the stream (file reads, decoding, preparing blocks)
        self.n_rows = self.stream.n_rows
        self.memory_bytes = need if self.in_memory else 0
        self._cache = None
        self._meta = None
        self._ranks = {}

    def _rank(self, k, block):
        """Label ranks of block k: computed on the first pass, kept (4 bytes a row) for the rest."""
        rank = self._ranks.get(k)
        if rank is None:
            rank = self._ranks[k] = np.searchsorted(self.levels, block.y).astype(np.int32)
        return rank

    def _prepare(self, block, k):
        rank = self._rank(k, block)
        shift, scale, mode = self.normalizer.affine(block.X, block.query_ptr)
        return SourceBlock(block.X, rank, block.query_ptr.copy(), block.q_start, block.q_stop, shift, scale, mode)

    def blocks_meta(self):
        """(rank, qptr, q0, q1) of every block without reading rows: for passes over scores
        held in memory (line searches). Ranks of streamed blocks are kept after the first pass."""
        if self._cache is not None:
            return [(b.rank, b.qptr, b.q0, b.q1) for b in self._cache]
        return self._meta

    def _items(self, first):
        """The SourceBlocks of one pass over the stream (subclasses map or cache them); the time
        spent reading and preparing them adds to ``read_seconds``."""
        it = iter(self.stream)
        k = 0
        while True:
            t = time.perf_counter()
            try:
                block, _, _ = next(it)
            except StopIteration:
                break
            item = self._prepare(block, k)
            self.read_seconds += time.perf_counter() - t
            k += 1
            yield item

    def _after_first_pass(self):
        """Hook: decisions that need the first pass's measurements."""

    def __iter__(self):
        # the last pass's freed buffers (active sets, partials) back to the system before this one
        # allocates: glibc keeps them in its heaps otherwise (_native.memory.trimmer)
        _trim()
        self.passes += 1
        self.rows_read += self.n_rows
        yield from self._blocks(first=self.passes == 1)

    def head(self):
        """The blocks of a pass, for work that stops after the first few (the preconditioner's
        sample): not counted as a pass; ``rows_read`` counts the blocks taken. Only after a
        first full pass."""
        if self.passes == 0:
            raise RuntimeError("head() needs a first full pass (the solver contract: fun before the rest)")
        for item in self._blocks(first=False):
            self.rows_read += item.X.shape[0]
            yield item

    def _blocks(self, first):
        if self._cache is not None:
            yield from self._cache
            return
        keep = [] if self.in_memory else None
        meta = []
        for item in self._items(first):
            meta.append((item.rank, item.qptr, item.q0, item.q1))
            if keep is not None:
                keep.append(item)
            yield item
        self._meta = meta
        if keep is not None:
            self._cache = keep
        elif first:
            self._after_first_pass()


class RankObjective:
    """fun / grad / hessp of the pairwise squared-hinge RankSVM over a :class:`BlockSource`.

    Parameters
    ----------
    source : BlockSource
    n_features : int
        Width of Phi (the solver's dimension).
    C : float
    cost : PairCost
        Label-pair costs lambda over label ranks.
    mu : float64 array (n_queries,)
        Query weights, indexed by the dataset's query number.
    """

    # f - 1/2 ||w||^2 is convex: f(w) - f* <= ||g||^2 / 2 (solvers.tron.relative_gap)
    strong_convexity = 1.0

    def __init__(self, source, n_features, *, C, cost, mu, keep_scores=True, executor=None, sketch=None):
        self.source = source
        # rows that are K(x, L) with phi = K P (a MappedSource's kernel rows): the passes take
        # P w and give K^T u, which the objective turns into P^T K^T u (None: the rows are phi)
        self.projection = getattr(source, "projection", None)
        # wide maps' preconditioner: a SharedSketch (one per map, for every C of a path)
        self.sketch = sketch
        self.executor = executor_or_local(executor)
        # the accepted scores, for Newton's line search (prepare_line / line): 8 bytes a row,
        # twice while a trial point is evaluated; TRON does not need them
        self.keep_scores = bool(keep_scores)
        self.n_features = int(n_features)
        self.C = float(C)
        self.cost = cost
        self.mu = np.asarray(mu, np.float64)
        self._states = None      # the accepted point's pass outputs, per block (active sets, scores)
        self._trial = None       # (w, f, grad, outputs, loss) of the last fun() call
        self._accepted = None    # the point of the last grad() call, whose outputs _states are
        self._line = None        # (w, s, outputs u per block) of prepare_line
        self.loss = None

    @property
    def passes(self):
        return self.source.passes

    def _cost_args(self):
        c = self.cost
        return c.lam, c.g, c.c0, c.lam_r, c.g_r, c.mode, c.eta

    def _to_rows(self, v):
        """The vector the rows multiply for phi . v: v, or P v for kernel rows (each entry summed
        in ``qprod.rows_dot``'s fixed order)."""
        if self.projection is None:
            return v
        from streamrank._native import qprod
        out = np.empty(self.projection.shape[0])
        qprod.rows_dot(self.projection, v, out)
        return out

    def _from_rows(self, u):
        """Phi^T of a pass's sum of rows^T: u itself, or P^T u for kernel rows (``qprod.add_cols``:
        each entry sums in row order, whatever the threads)."""
        if self.projection is None:
            return u
        from streamrank._native import qprod
        out = np.zeros(self.projection.shape[1])
        qprod.add_cols(self.projection, np.ascontiguousarray(u, np.float64), out)
        return out

    def _from_rows_2(self, M):
        """P^T M P for kernel rows (a pass's rows^T L rows), M itself for phi rows; on one BLAS
        thread, so the bits do not depend on the thread count."""
        if self.projection is None:
            return M
        from streamrank._native.blas import one_thread
        P = self.projection
        with one_thread():
            return P.T @ (M @ P)

    def fun(self, w):
        w = np.ascontiguousarray(w, np.float64)
        # one set of active sets alive, as the memory plan counts: the last trial's and the
        # accepted point's go before this pass makes new ones (hessp after a rejected trial makes
        # the accepted point's again: _accepted_states)
        prev = self._reusable(self._states if self._states is not None else (self._trial[3] if self._trial else None))
        self._trial = None
        self._states = None
        carry, kept = self._loss_grad(w, prev)
        loss, acc = carry["loss"], self._from_rows(carry["acc"])
        f = 0.5 * float(w @ w) + self.C * loss
        self._trial = (w.copy(), f, w + self.C * acc, kept, loss)
        return f

    def grad(self, w):
        if self._trial is None or not np.array_equal(self._trial[0], w):
            raise RuntimeError("grad(w) must follow fun(w) at the same point (solver contract)")
        tw, f, g, kept, loss = self._trial
        self._states = kept
        self._accepted = tw
        self.loss = loss
        return g.copy()

    def _accepted_states(self):
        """The accepted point's pass outputs (active sets, scores). A fun() at a trial point drops
        them, so that one set is alive at a time; after a rejected trial one pass at the accepted
        point makes them again, the same bits (a pass depends on the data and w alone)."""
        if self._states is None:
            if self._accepted is None:
                raise RuntimeError("hessp needs fun(w) and grad(w) at a point first (solver contract)")
            prev = self._reusable(self._trial[3] if self._trial else None)
            self._trial = None  # the rejected trial's sets go first (overwritten in place)
            _, self._states = self._loss_grad(self._accepted, prev)
        return self._states

    def _reusable(self, outputs):
        """The active sets of a fun pass's outputs per block (or None), for the next pass to reuse:
        their sort order starts its sort, and it overwrites them (no value depends on either).
        Without the outputs' kept scores, which go now (8 bytes a row; the memory plan counts one
        set of them alive).

        None on a remote executor: there kept outputs carry their lineage (the pass and the kept
        outputs it read, to remake them on a new worker), and each pass's would hold the last
        one's, a chain back to the first pass that a lost worker would replay."""
        if outputs is None or self.executor.remote:
            return None
        return [out[:1] for out in outputs]

    def _loss_grad(self, w, prev):
        """One fun + grad pass at w, reusing ``prev`` (:meth:`_reusable`) when given."""
        p = _LossGrad(self._to_rows(w), self.n_features, self._cost_args(), self.mu, self.keep_scores)
        if prev is None:
            return self.executor.run(p, self.source)
        return self.executor.run(p, self.source, kept=(prev,))

    def hessp(self, s):
        s = np.ascontiguousarray(s, np.float64)
        acc, _ = self.executor.run(_HessProd(self._to_rows(s), self.n_features, self._cost_args(), self.mu),
                                   self.source, kept=(self._accepted_states(),))
        return s + self.C * self._from_rows(acc)

    # -- Newton-Cholesky support: the dense Hessian and a line search on scores in memory ----------
    def hessian(self, max_rows=None):
        """H = I + C Phi^T (A^T D A) Phi at the accepted point (one pass; paper 001's Newton).

        ``max_rows``: stop after about that many rows (a partial H, to time the work).

        The pair kernel runs with an m-wide payload (L Phi for groups of whole queries of at most
        HESSIAN_ROWS rows), then BLAS-3 gives Phi_g^T (L Phi_g). Group sums are added in order;
        unlike fun/grad/hessp the product's rounding follows BLAS (not the data alone).
        """
        from contextlib import nullcontext

        from streamrank._native.blas import one_thread
        from streamrank.objectives.linear_precond import AUTO_WIDTH
        # narrow products: one BLAS thread (streamrank._native.blas; the preconditioner's reason)
        with one_thread() if self.n_features <= AUTO_WIDTH else nullcontext():
            carry, _ = self.executor.run(_Hessian(self.n_features, self.cost, self.mu, max_rows), self.source,
                                         kept=(self._accepted_states(),))
        H = self._from_rows_2(carry["H"])
        self.hessian_rows = carry["rows"]
        H *= self.C
        H[np.diag_indices_from(H)] += 1.0
        return H

    def preconditioner(self, sample_rows=None):
        """TRON's preconditioner at the accepted point.

        Up to ``linear_precond.AUTO_WIDTH`` columns, :mod:`streamrank.objectives.linear_precond`
        (a partial pass over the blocks that hold the sampled queries): M sums Phi_G^T (L Phi_G)
        over groups G of whole sampled queries fixed by the query index alone
        (``precondition.query_groups``), each one BLAS product on rows gathered into a group
        buffer (a group may span two blocks): the same products for any block layout, so the
        same bits, in memory bounded by the group size rather than the sample's.

        Wider (feature maps): :mod:`streamrank.objectives.sketch_precond`, the Nystrom
        preconditioner of one sketch of G(0), built by the first call (one pass) and shared
        through ``sketch`` by every C of a path.
        """
        from streamrank._native.blas import one_thread
        from streamrank.objectives import linear_precond as pc
        m = self.n_features
        if m > pc.AUTO_WIDTH:
            if self.sketch is None:
                from streamrank.objectives.sketch_precond import SharedSketch
                self.sketch = SharedSketch(seed=0)
            return self.sketch.get(self).preconditioner(self.C)  # (the sketch applies P itself)
        with one_thread():
            return self._build_preconditioner(sample_rows)

    def _build_preconditioner(self, sample_rows):
        from streamrank.objectives import linear_precond as pc
        m = self.n_features
        sample_rows = pc.sample_rows(m) if sample_rows is None else sample_rows
        qptr = self.source.dataset.query_ptr
        q_first = int(self.source.stream.bounds[0])
        base = int(qptr[q_first])
        # the sample lies in the first partition (streamrank.execution.partitions): one worker's rows
        q_part = int(self.source.stream.partitions[1])
        groups = pc.query_groups(qptr[q_first:q_part + 1] - base, sample_rows, pc.group_rows(m))  # local bounds
        n_s = int(qptr[q_first + int(groups[-1])]) - base
        carry, _ = self.executor.run(_PreconditionerSample(m, self.cost, self.mu, q_first, groups, qptr),
                                     self.source, kept=(self._accepted_states(),))
        M = self._from_rows_2(carry["M"])
        M *= self.C * (self.source.n_rows / n_s)
        M[np.diag_indices_from(M)] += 1.0
        return pc.DensePreconditioner(M)

    def prepare_line(self, w, s):
        """One pass: u = Phi s per block, kept with the accepted scores for :meth:`line`."""
        s = np.ascontiguousarray(s, np.float64)
        _, us = self.executor.run(_Scores(self._to_rows(s), keep=True), self.source)
        self._line = (np.array(w, np.float64), s, us)

    def line(self, t):
        """phi(t) = f(w + t s) and its first and (generalised) second derivative, from scores kept
        with the blocks (no pass over the data): z + t u goes through the pair kernels per block."""
        w, s, us = self._line
        if not self.keep_scores:
            raise RuntimeError("line() needs the accepted scores: make the objective with keep_scores=True")
        c, _ = self.executor.run(_Line(t, self.cost, self.mu), self.source, kept=(self._accepted_states(), us))
        loss, d1, d2 = c["loss"], c["d1"], c["d2"]
        wt = w + t * s
        return (0.5 * float(wt @ wt) + self.C * loss, float(wt @ s) + self.C * d1, float(s @ s) + self.C * d2)

    def scores(self, w):
        """z = Phi w for every row of the source, in its row order (one pass)."""
        _, out = self.executor.run(_Scores(self._to_rows(np.ascontiguousarray(w, np.float64))), self.source)
        return np.concatenate(out) if out else np.zeros(0)


def preconditioner_bytes(m):
    """Peak bytes of :meth:`RankObjective.preconditioner`'s temporaries for an m-wide Phi: the
    dense sampled M up to ``linear_precond.AUTO_WIDTH`` columns, the Nystrom sketch wider."""
    from streamrank.objectives import linear_precond, sketch_precond
    return linear_precond.temp_bytes(m) if m <= linear_precond.AUTO_WIDTH else sketch_precond.temp_bytes(m)


# -- the passes (streamrank.execution): what one block contributes, and how partitions add up -------


class _Pipelined(Pass):
    """A pass whose steps queue their groups of queries on one :class:`parallel.Pipeline`: with the
    blocks kept in memory (``blocks_persist``) a step returns while its last chunks still run, so
    no thread waits at a block's end, and :meth:`finish` waits for them; otherwise each step
    finishes its own (the stream reuses the block's buffer next)."""

    _pipe = None
    defers = True

    def _first_group(self):
        """The pipeline's index of this block's first group (buffer set: index mod GROUP_BUFFERS)."""
        return 0 if self._pipe is None else self._pipe.added

    def _run(self, kernel, groups, reduce):
        if self._pipe is None:
            self._pipe = par.Pipeline(kernel, depth=GROUP_BUFFERS)
        self._pipe.add(groups, reduce)
        if not self.blocks_persist:
            self.finish(None)

    def finish(self, carry):
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            pipe.finish()


class _LossGrad(_Pipelined):
    """fun + grad at w (one pass): per block the fused kernel gives per-query losses and gradient
    partials P[q] = Phi_q^T dz_q; the carry adds them in query order. Each block keeps its active
    sets (for hessp) and, with ``keep_scores``, its scores z = Phi w (for Newton's line search)."""

    def __init__(self, w, m, cost_args, mu, keep_scores):
        self.w, self.m, self.cost_args, self.mu, self.keep_scores = w, m, cost_args, mu, keep_scores

    def start(self):
        return {"acc": np.zeros(self.m), "loss": 0.0}

    def step(self, carry, b, prev=None):
        n = b.X.shape[0]
        # the previous pass's active sets of this block, when the objective hands them over, are
        # overwritten in place: their sort order starts this pass's sort (fused_loss_grad's warm)
        # and no second set is allocated (the memory plan counts one)
        warm = prev is not None and pk.is_state(prev[0], n, self.cost_args[6])
        st = prev[0] if warm else pk.state_arrays(n, self.cost_args[6])
        z = np.empty(n) if self.keep_scores else None
        groups = _query_groups(b, self.m, self._first_group())
        for g in groups:
            zg = z[g.r0:g.r1] if z is not None else g.z  # kept for line searches, or scratch
            g.args = (g.X, self.w, g.shift, g.scale, b.affine, g.qptr, g.rank, *self.cost_args,
                      self.mu[b.q0 + g.qa:b.q0 + g.qb], *g.state(st), g.loss, g.partials, zg, warm)

        def add(g):  # in query order
            carry["loss"] = la.sum_in_order(carry["loss"], g.loss)
            la.add_rows_in_order(carry["acc"], g.partials)

        self._run(fz.fused_loss_grad, groups, add)
        return st, z

    def merge(self, total, carry):
        return {"acc": total["acc"] + carry["acc"], "loss": total["loss"] + carry["loss"]}


class _HessProd(_Pipelined):
    """sum_q Phi_q^T (A^T D A)_q Phi_q s (one pass), with each block's kept active sets."""

    def __init__(self, s, m, cost_args, mu):
        self.s, self.m, self.cost_args, self.mu = s, m, cost_args, mu

    def start(self):
        return np.zeros(self.m)

    def step(self, acc, b, out):
        st = out[0]
        groups = _query_groups(b, self.m, self._first_group())
        for g in groups:
            g.args = (g.X, self.s, g.shift, g.scale, b.affine, g.qptr, g.rank, *self.cost_args,
                      self.mu[b.q0 + g.qa:b.q0 + g.qb], *g.state(st), g.partials)
        self._run(fz.fused_hess, groups, lambda g: la.add_rows_in_order(acc, g.partials))

    def merge(self, total, acc):
        return total + acc


# Rows of whole queries per kernel call of a fun or hessp pass: the call's temporaries (per-query
# gradient partials, 8 m bytes a query, and the scores, 8 bytes a row) are bounded by the group,
# not by the block. The per-query values and their order of addition are the same either way.
GROUP_ROWS = 1 << 16
# and at most this many bytes of partials (a wide feature map's queries of a few rows each made
# 8 m bytes a query of a 2^16-row group 131 MB at m = 2000)
GROUP_PARTIALS_BYTES = 2 << 20
# sets of those buffers: the threads start group k + 1 (of this block or the next) while group k's
# partials are added (parallel.Pipeline)
GROUP_BUFFERS = 2


class _Group:
    """Queries qa:qb of block b (whole, at most GROUP_ROWS rows or one query) as views for a
    kernel call: rows r0:r1, local query offsets, and reused buffers for the call's outputs.
    ``n`` and ``weights`` are its items (queries) and their rows, for parallel.Pipeline."""

    def __init__(self, b, qa, qb, buf):
        self.qa, self.qb, self.nq = qa, qb, qb - qa
        self.r0, self.r1 = int(b.qptr[qa]), int(b.qptr[qb])
        self.qptr = b.qptr[qa:qb + 1] - self.r0
        self.n, self.weights = self.nq, self.qptr
        self.X, self.rank = b.X[self.r0:self.r1], b.rank[self.r0:self.r1]
        per_query = b.affine == 2  # query_minmax: a (shift, scale) row per query
        self.shift = b.shift[qa:qb] if per_query else b.shift
        self.scale = b.scale[qa:qb] if per_query else b.scale
        self.loss = buf["loss"][:self.nq]
        self.partials = buf["partials"][:self.nq]
        self.z = buf["z"][:self.r1 - self.r0]

    def state(self, st):
        """The group's rows of the state arrays (the band's are empty for the squared hinge)."""
        return tuple(a[self.r0:self.r1] if a.shape[0] else a for a in st)


_buffers = threading.local()


def _group_buffers(most_q, most_r, m):
    """GROUP_BUFFERS sets of a pass's group buffers, kept by the thread for its next pass, grown
    when too small and never shrunk (blocks differ in their largest group), so that their pages
    are not mapped and faulted in again for every block. GROUP_BUFFERS x (GROUP_PARTIALS_BYTES +
    8 GROUP_ROWS) bytes at most (5 MB; more only for a query longer than GROUP_ROWS, 8 bytes a
    row), in the memory plan's slack (io.budget.STREAM_SLACK)."""
    have = getattr(_buffers, "sets", None)
    if have is not None and have[0]["partials"].shape[1] == m:
        if have[0]["loss"].shape[0] >= most_q and have[0]["z"].shape[0] >= most_r:
            return have
        most_q, most_r = max(most_q, have[0]["loss"].shape[0]), max(most_r, have[0]["z"].shape[0])  # grow only
    have = [{"loss": np.empty(most_q), "partials": np.empty((most_q, m)), "z": np.empty(most_r)}
            for _ in range(GROUP_BUFFERS)]
    _buffers.sets = have
    return have


def _query_groups(b, m, first=0):
    """The groups of block b in query order; group k uses buffer set (first + k) mod GROUP_BUFFERS
    (``first``: the pipeline's index of the block's first group)."""
    from streamrank.objectives.linear_precond import query_groups
    qp = b.qptr
    nq = b.q1 - b.q0
    max_q = max(1, GROUP_PARTIALS_BYTES // (8 * max(m, 1)))
    # whole queries, at most max_q of them, in groups of about equal rows (at most GROUP_ROWS, or
    # one query): a block's small last group made the next block's groups wait for its buffers
    rows = int(qp[nq] - qp[0]) if nq else 0
    per = -(-rows // max(1, -(-rows // GROUP_ROWS)))
    bounds = [int(k) for k in query_groups(qp[:nq + 1], rows, per, max_q)] if nq else [0]
    most_q = max((bounds[k + 1] - bounds[k] for k in range(len(bounds) - 1)), default=0)
    most_r = max((int(qp[bounds[k + 1]] - qp[bounds[k]]) for k in range(len(bounds) - 1)), default=0)
    bufs = _group_buffers(most_q, most_r, m)
    return [_Group(b, bounds[k], bounds[k + 1], bufs[(first + k) % GROUP_BUFFERS]) for k in range(len(bounds) - 1)]


class _Scores(Pass):
    """z = Phi w per block: returned to the caller, or with ``keep`` kept with the blocks."""

    def __init__(self, w, keep=False):
        self.w = w
        self.returns = not keep

    def step(self, carry, b):
        z = np.empty(b.X.shape[0])
        par.run(fz.fused_scores, b.q1 - b.q0, b.X, self.w, b.shift, b.scale, b.affine, b.qptr, z,
                weights=b.qptr)
        return z

    def merge(self, total, carry):
        return None


class _Line(Pass):
    """phi(t) = loss(z + t u) and its derivatives along u (Newton's line search) from each block's
    kept scores z (of the accepted point) and u = Phi s: no rows are read."""

    reads = "meta"

    def __init__(self, t, cost, mu):
        self.t, self.cost, self.mu = t, cost, mu

    def start(self):
        return {"loss": 0.0, "d1": 0.0, "d2": 0.0}

    def step(self, c, meta, out, u):
        rank, qptr, q0, q1 = meta
        mu = self.mu[q0:q1]
        zt = out[1] + self.t * u
        loss_q = np.empty(q1 - q0)
        _, dz, st = pk.loss_grad(zt, rank, qptr, self.cost, mu, loss_q=loss_q)
        c["loss"] = la.sum_in_order(c["loss"], loss_q)
        c["d1"] += float(dz @ u)
        c["d2"] += float(u @ pk.hess_prod(u, rank, qptr, self.cost, mu, st))

    def merge(self, total, c):
        return {k: total[k] + c[k] for k in total}


def _l_phi(b, st, r0, r1, q, cost, mu, phi=None, lphi=None):
    """(Phi, L Phi) of rows r0:r1 (whole queries q[0]:q[1] of block b) at the kept active sets,
    in the buffers ``phi`` and ``lphi`` when given (rows r1 - r0, C-contiguous)."""
    Phi = _phi(b, r0, r1, q, phi)
    local = b.qptr[q[0]:q[1] + 1] - r0
    state = pk.PairState.of(st, r0, r1, query_ptr=local)
    return Phi, pk.hess_prod(Phi, b.rank[r0:r1], local, cost, mu[b.q0 + q[0]:b.q0 + q[1]], state, out=lphi)


class _Hessian(Pass):
    """Phi^T L Phi (one pass, or its first ``max_rows`` rows): per group of whole queries of at
    most HESSIAN_ROWS rows, one BLAS-3 product, added in group order."""

    def __init__(self, m, cost, mu, max_rows):
        self.m, self.cost, self.mu, self.max_rows = m, cost, mu, max_rows

    def start(self):
        return {"H": np.zeros((self.m, self.m)), "rows": 0}

    def done(self, carry):
        return self.max_rows is not None and carry["rows"] >= self.max_rows  # a partial H (timing)

    def step(self, carry, b, out):
        st = out[0]
        qp, q, nq = b.qptr, 0, b.q1 - b.q0
        while q < nq and not self.done(carry):
            # a group of whole queries, at least one
            cap = HESSIAN_ROWS if self.max_rows is None else min(HESSIAN_ROWS, self.max_rows - carry["rows"])
            q_end = min(max(q + 1, int(np.searchsorted(qp, qp[q] + cap, side="right")) - 1), nq)
            r0, r1 = int(qp[q]), int(qp[q_end])
            Phi, LPhi = _l_phi(b, st, r0, r1, (q, q_end), self.cost, self.mu)
            add_atb(carry["H"], Phi, LPhi)  # the same bits on any number of threads
            carry["rows"] += r1 - r0
            q = q_end

    def merge(self, total, carry):
        return {"H": total["H"] + carry["H"], "rows": total["rows"] + carry["rows"]}


class _PreconditionerSample(Pass):
    """M's sum over the sampled queries (``linear_precond``): groups of whole queries fixed by the
    query index (``groups``, local to query ``q_first``), each one BLAS product on rows gathered
    into a group buffer. A group may span two blocks, so the pass is one partition, and it stops
    after the block that holds the sample's last query."""

    one_partition = True
    reads = "head"

    def __init__(self, m, cost, mu, q_first, groups, qptr):
        self.m, self.cost, self.mu, self.q_first, self.groups = m, cost, mu, q_first, groups
        self.q_end = q_first + int(groups[-1])
        self.width = int(np.max(np.diff(qptr[q_first + groups]))) if len(groups) > 1 else 0

    def start(self):
        return {"M": np.zeros((self.m, self.m)), "g": 0, "filled": 0, "past": False,
                "phi": np.empty((self.width, self.m)), "lphi": np.empty((self.width, self.m))}

    def done(self, carry):
        return carry["past"]

    def step(self, c, b, out):
        st = out[0]
        if b.q0 >= self.q_end:
            c["past"] = True
            return
        q = 0  # block-local query index
        while q < b.q1 - b.q0 and b.q0 + q < self.q_end:
            # the part of group g inside this block: queries q .. e (block-local)
            g_stop = self.q_first + int(self.groups[c["g"] + 1])
            e = min(g_stop, b.q1) - b.q0
            if e <= q:  # q advances every pass (at most b.q1 - b.q0 of them) unless blocks come out of order
                raise RuntimeError(f"preconditioner pass: block of queries {b.q0}:{b.q1} after group {c['g']} "
                                   f"(ending at query {g_stop}) was closed")
            r0, r1 = int(b.qptr[q]), int(b.qptr[e])
            f = c["filled"]
            _l_phi(b, st, r0, r1, (q, e), self.cost, self.mu, c["phi"][f:f + r1 - r0], c["lphi"][f:f + r1 - r0])
            c["filled"] = f + r1 - r0
            q = e
            if b.q0 + q == g_stop:  # group complete: one product
                add_atb(c["M"], c["phi"][:c["filled"]], c["lphi"][:c["filled"]])  # bits for any thread count
                c["g"], c["filled"] = c["g"] + 1, 0
        c["past"] = b.q1 >= self.q_end
        if c["past"]:  # the group buffers are done with (and a carry sent back holds only M)
            c["phi"] = c["lphi"] = None
