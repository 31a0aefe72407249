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

import time
from dataclasses import dataclass

import numpy as np

from streamrank._native import fused as fz
from streamrank._native import linalg as la
from streamrank._native import pairkernels as pk
from streamrank.features.normalize import Normalizer

# Rows of Phi materialised at a time (float64, with L Phi beside them) when forming the dense
# Hessian: bounds that temporary memory to about 2 x 8 x HESSIAN_ROWS x m bytes.
HESSIAN_ROWS = 1 << 15


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

    def __init__(self, dataset, normalizer=None, *, block_bytes, memory_bytes, queries=None, levels=None):
        self.dataset = dataset
        self.normalizer = normalizer or Normalizer("none")
        q0, q1 = queries if queries is not None else (0, dataset.n_queries)
        n_rows = int(dataset.query_ptr[q1] - dataset.query_ptr[q0])
        # rows (float32) + label ranks (int32) + the per-query affine rows (2 x d float64)
        need = n_rows * (4 * dataset.n_features + 4) + (q1 - q0) * 16 * dataset.n_features
        self.in_memory = need <= memory_bytes
        # kept blocks get arrays of their own, read once; streamed ones reuse two buffers
        self.stream = dataset.stream(block_bytes=block_bytes, queries=(q0, q1), reuse_buffers=not self.in_memory)
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

    def __init__(self, source, n_features, *, C, cost, mu, keep_scores=True):
        self.source = source
        # the accepted scores, for Newton's line search (prepare_line / line): 8 bytes a row,
        # twice while a trial point is evaluated; TRON does not need them
        self.keep_scores = bool(keep_scores)
        self._zbuf = None
        self.n_features = int(n_features)
        self.C = float(C)
        self.cost = cost
        self.mu = np.asarray(mu, np.float64)
        self._states = None      # active sets of the accepted point, one per block
        self._z = None           # scores of the accepted point, one array per block
        self._trial = None       # (w, f, grad, states, loss, z) of the last fun() call
        self._line = None        # (w, s, u per block) of prepare_line
        self.loss = None

    @property
    def passes(self):
        return self.source.passes

    def _cost_args(self):
        c = self.cost
        return c.lam, c.g, c.c0, c.lam_r, c.g_r, c.mode

    def fun(self, w):
        w = np.ascontiguousarray(w, np.float64)
        acc = np.zeros(self.n_features)
        loss = 0.0
        states, zs = [], []
        for b in self.source:
            n, nq = b.X.shape[0], b.q1 - b.q0
            st = (np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, np.int32))
            loss_q = np.empty(nq)
            partials = np.empty((nq, self.n_features))
            if self.keep_scores:
                z = np.empty(n)
            else:  # written by the kernel, not kept: one scratch array for every block
                if self._zbuf is None or self._zbuf.shape[0] < n:
                    self._zbuf = np.empty(n)
                z = self._zbuf[:n]
            fz.fused_loss_grad(b.X, w, b.shift, b.scale, b.affine, b.qptr, b.rank, *self._cost_args(),
                               self.mu[b.q0:b.q1], *st, loss_q, partials, z)
            loss = la.sum_in_order(loss, loss_q)
            la.add_rows_in_order(acc, partials)
            states.append(st)
            zs.append(z if self.keep_scores else None)
        f = 0.5 * float(w @ w) + self.C * loss
        self._trial = (w.copy(), f, w + self.C * acc, states, loss, zs)
        return f

    def grad(self, w):
        tw, f, g, states, loss, zs = self._trial
        if not np.array_equal(tw, w):
            raise RuntimeError("grad(w) must follow fun(w) at the same point (solver contract)")
        self._states = states
        self._z = zs
        self.loss = loss
        return g.copy()

    def hessp(self, s):
        s = np.ascontiguousarray(s, np.float64)
        acc = np.zeros(self.n_features)
        for b, st in zip(self.source, self._states):
            partials = np.empty((b.q1 - b.q0, self.n_features))
            fz.fused_hess(b.X, s, b.shift, b.scale, b.affine, b.qptr, b.rank, *self._cost_args(),
                          self.mu[b.q0:b.q1], *st, partials)
            la.add_rows_in_order(acc, partials)
        return s + self.C * acc

    # -- Newton-Cholesky support: the dense Hessian and a line search on scores in memory ----------
    def _phi(self, b, r0, r1, q):
        """Rows r0:r1 (local to block b, whole queries) of Phi as float64."""
        X = b.X[r0:r1].astype(np.float64)
        if b.affine == 0:
            return X
        if b.affine == 1:
            return (X - b.shift[0]) * b.scale[0]
        sizes = np.diff(b.qptr[q[0]:q[1] + 1])
        return (X - np.repeat(b.shift[q[0]:q[1]], sizes, axis=0)) * np.repeat(b.scale[q[0]:q[1]], sizes, axis=0)

    def hessian(self, max_rows=None):
        """H = I + C Phi^T (A^T D A) Phi at the accepted point (one pass; paper 001's Newton).

        ``max_rows``: stop after about that many rows (a partial H, to time the work).

        The pair kernel runs with an m-wide payload (L Phi for groups of whole queries of at most
        HESSIAN_ROWS rows), then BLAS-3 gives Phi_g^T (L Phi_g). Group sums are added in order;
        unlike fun/grad/hessp the product's rounding follows BLAS (not the data alone).
        """
        m = self.n_features
        H = np.zeros((m, m))
        done = 0
        for b, st in zip(self.source, self._states):
            if max_rows is not None and done >= max_rows:
                break  # a partial Hessian (timing) need not read the remaining blocks
            qp = b.qptr
            q = 0
            nq = b.q1 - b.q0
            while q < nq and (max_rows is None or done < max_rows):
                # a group of whole queries, at least one
                cap = HESSIAN_ROWS if max_rows is None else min(HESSIAN_ROWS, max_rows - done)
                q_end = max(q + 1, int(np.searchsorted(qp, qp[q] + cap, side="right")) - 1)
                q_end = min(q_end, nq)
                r0, r1 = int(qp[q]), int(qp[q_end])
                Phi = self._phi(b, r0, r1, (q, q_end))
                local = qp[q:q_end + 1] - r0
                state = pk.PairState(st[0][r0:r1].copy(), st[1][r0:r1].copy(), st[2][r0:r1].copy(), query_ptr=local)
                LPhi = pk.hess_prod(Phi, b.rank[r0:r1], local, self.cost, self.mu[b.q0 + q:b.q0 + q_end], state)
                H += Phi.T @ LPhi
                q = q_end
                done += r1 - r0
        self.hessian_rows = done
        H *= self.C
        H[np.diag_indices_from(H)] += 1.0
        return H

    def preconditioner(self, sample_rows=None):
        """TRON's preconditioner at the accepted point: :mod:`streamrank.objectives.linear_precond` (a partial
        pass over the blocks that hold the sampled queries).

        M sums Phi_G^T (L Phi_G) over groups G of whole sampled queries fixed by the query index
        alone (``precondition.query_groups``), each one BLAS product on rows gathered into a
        group buffer (a group may span two blocks): the same products for any block layout, so
        the same bits, in memory bounded by the group size rather than the sample's.
        """
        from streamrank.objectives import linear_precond as pc
        from streamrank._native.blas import one_thread
        m = self.n_features
        if m > pc.MAX_WIDTH:
            return None
        if m > pc.AUTO_WIDTH:  # wide maps: products big enough to use every BLAS thread
            return self._build_preconditioner(sample_rows)
        with one_thread():
            return self._build_preconditioner(sample_rows)

    def _build_preconditioner(self, sample_rows):
        from streamrank.objectives import linear_precond as pc
        m = self.n_features
        sample_rows = pc.sample_rows(m) if sample_rows is None else sample_rows
        qptr = self.source.dataset.query_ptr
        q_first = int(self.source.stream.bounds[0])
        base = int(qptr[q_first])
        groups = pc.query_groups(qptr[q_first:] - base, sample_rows, pc.group_rows(m))  # local query bounds
        q_end = q_first + int(groups[-1])
        n_s = int(qptr[q_end]) - base
        width = int(np.max(np.diff(qptr[q_first + groups]))) if len(groups) > 1 else 0
        G_phi = np.empty((width, m))
        G_lphi = np.empty((width, m))
        M = np.zeros((m, m))
        g = 0            # the group being filled: queries groups[g]:groups[g + 1] (local)
        filled = 0       # its rows gathered so far
        for b, st in zip(self.source.head(), self._states):
            if b.q0 >= q_end:
                break
            q = 0        # block-local query index
            while q < b.q1 - b.q0 and b.q0 + q < q_end:
                # the part of group g inside this block: queries q .. e (block-local)
                e = min(q_first + int(groups[g + 1]), b.q1) - b.q0
                r0, r1 = int(b.qptr[q]), int(b.qptr[e])
                Phi = self._phi(b, r0, r1, (q, e))
                local = b.qptr[q:e + 1] - r0
                state = pk.PairState(st[0][r0:r1].copy(), st[1][r0:r1].copy(), st[2][r0:r1].copy(),
                                     query_ptr=local)
                G_phi[filled:filled + r1 - r0] = Phi
                G_lphi[filled:filled + r1 - r0] = pk.hess_prod(Phi, b.rank[r0:r1], local, self.cost,
                                                               self.mu[b.q0 + q:b.q0 + e], state)
                filled += r1 - r0
                q = e
                if b.q0 + q == q_first + int(groups[g + 1]):  # group complete: one product
                    M += G_phi[:filled].T @ G_lphi[:filled]
                    g, filled = g + 1, 0
        M *= self.C * (self.source.n_rows / n_s)
        M[np.diag_indices_from(M)] += 1.0
        return pc.DensePreconditioner(M)

    def prepare_line(self, w, s):
        """One pass: u = Phi s per block, kept with the accepted scores for :meth:`line`."""
        s = np.ascontiguousarray(s, np.float64)
        us = []
        for b in self.source:
            u = np.empty(b.X.shape[0])
            fz.fused_scores(b.X, s, b.shift, b.scale, b.affine, b.qptr, u)
            us.append(u)
        self._line = (np.array(w, np.float64), s, us)

    def line(self, t):
        """phi(t) = f(w + t s) and its first and (generalised) second derivative, from scores in
        memory (no pass over the data): z + t u goes through the pair kernels per block."""
        w, s, us = self._line
        if not self.keep_scores:
            raise RuntimeError("line() needs the accepted scores: make the objective with keep_scores=True")
        loss, d1, d2 = 0.0, 0.0, 0.0
        for b, z, u in zip(self.source.blocks_meta(), self._z, us):
            rank, qptr, q0, q1 = b
            mu = self.mu[q0:q1]
            zt = z + t * u
            loss_q = np.empty(q1 - q0)
            _, dz, st = pk.loss_grad(zt, rank, qptr, self.cost, mu, loss_q=loss_q)
            loss = la.sum_in_order(loss, loss_q)
            d1 += float(dz @ u)
            d2 += float(u @ pk.hess_prod(u, rank, qptr, self.cost, mu, st))
        wt = w + t * s
        return (0.5 * float(wt @ wt) + self.C * loss, float(wt @ s) + self.C * d1, float(s @ s) + self.C * d2)

    def scores(self, w):
        """z = Phi w for every row of the source, in its row order (one pass)."""
        w = np.ascontiguousarray(w, np.float64)
        out = []
        for b in self.source:
            z = np.empty(b.X.shape[0])
            fz.fused_scores(b.X, w, b.shift, b.scale, b.affine, b.qptr, z)
            out.append(z)
        return np.concatenate(out) if out else np.zeros(0)
