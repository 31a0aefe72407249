"""The RankSVM primal objective over a query-aligned block stream (DESIGN.md, "The objective").

    f(w) = 1/2 ||w||^2 + C * sum_q mu_q * sum_{(i,j) in P_q} lambda(y_i, y_j) * max(0, 1 - (z_i - z_j))^2

with z = Phi w (paper 000 eq. 22; paper 004 eq. 3.13 for Phi = the identity). In score space the
loss is block diagonal by query, so with query-aligned blocks

- ``fun`` + ``grad`` take ONE pass: z_b = Phi_b w, pair kernel on z_b, accumulate Phi_b^T dz_b;
- ``hessp`` takes ONE pass: u_b = Phi_b s, t_b = (A^T D A)_b u_b with the active set of the last
  accepted point, accumulate Phi_b^T t_b; H s = s + C * sum_b Phi_b^T t_b.

``fun`` keeps the trial point's gradient and active sets aside; ``grad`` at the same point
commits them (TRON calls it only for accepted points), so a rejected trial never overwrites the
active set that ``hessp`` uses.

Every sum runs in an order fixed by the data, not by the blocks (``_linalg``): per-row dot
products, per-query partial sums added in query order, per-query losses added in query order.
fun, grad and hessp are therefore bit-identical for any block size or memory budget, and so is
the whole TRON trajectory and the model.
"""

import numpy as np

from . import _linalg as la
from . import _pairkernels as pk


class BlockSource:
    """The blocks of one pass: from memory when they fit in ``memory_bytes``, else re-read.

    ``transform(block) -> float64 (rows, m)`` maps raw rows to the model's features (identity
    with normalisation for the linear model). Cached blocks are stored mapped, in float64, so a
    pass from memory is pure BLAS; counted passes and rows are the same either way.
    """

    def __init__(self, dataset, transform, *, block_bytes, memory_bytes, queries=None, levels=None):
        self.dataset = dataset
        self.transform = transform
        self.stream = dataset.stream(block_bytes=block_bytes, queries=queries)
        self.levels = levels
        self.passes = 0
        self.rows_read = 0
        self.n_rows = self.stream.n_rows
        self._cache = None
        self.memory_bytes = memory_bytes

    def _prepare(self, block):
        Phi = self.transform(block)
        rank = np.searchsorted(self.levels, block.y).astype(np.int32)
        return Phi, rank, block.query_ptr.copy(), block.q_start, block.q_stop

    def __iter__(self):
        self.passes += 1
        self.rows_read += self.n_rows
        if self._cache is not None:
            yield from self._cache
            return
        keep = []
        used = 0
        for block, _, _ in self.stream:
            item = self._prepare(block)
            if keep is not None:
                used += item[0].nbytes + item[1].nbytes * 4
                keep = keep + [item] if used <= self.memory_bytes else None
            yield item
        if keep is not None:
            self._cache = keep

    @property
    def in_memory(self):
        return self._cache is not None


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

    def __init__(self, source, n_features, *, C, cost, mu):
        self.source = source
        self.n_features = int(n_features)
        self.C = float(C)
        self.cost = cost
        self.mu = np.asarray(mu, np.float64)
        self._states = None      # active sets of the accepted point, one per block
        self._trial = None       # (w, f, grad, states) of the last fun() call
        self.loss = None

    @property
    def passes(self):
        return self.source.passes

    def fun(self, w):
        w = np.asarray(w, np.float64)
        acc = np.zeros(self.n_features)
        loss = 0.0
        states = []
        for Phi, rank, qptr, q0, q1 in self.source:
            z = la.matvec(Phi, w)
            loss_q = np.empty(q1 - q0)
            _, dz, st = pk.loss_grad(z, rank, qptr, self.cost, self.mu[q0:q1], loss_q=loss_q)
            loss = la.sum_in_order(loss, loss_q)
            la.rmatvec_add(acc, Phi, dz, qptr)
            states.append(st)
        f = 0.5 * float(w @ w) + self.C * loss
        self._trial = (w.copy(), f, w + self.C * acc, states, loss)
        return f

    def grad(self, w):
        tw, f, g, states, loss = self._trial
        if not np.array_equal(tw, w):
            raise RuntimeError("grad(w) must follow fun(w) at the same point (solver contract)")
        self._states = states
        self.loss = loss
        return g.copy()

    def hessp(self, s):
        s = np.asarray(s, np.float64)
        acc = np.zeros(self.n_features)
        for (Phi, rank, qptr, q0, q1), st in zip(self.source, self._states):
            t = pk.hess_prod(la.matvec(Phi, s), rank, qptr, self.cost, self.mu[q0:q1], st)
            la.rmatvec_add(acc, Phi, t, qptr)
        return s + self.C * acc

    def scores(self, w):
        """z = Phi w for every row of the source, in its row order (one pass)."""
        return np.concatenate([la.matvec(Phi, w) for Phi, *_ in self.source]) if self.source.n_rows else np.zeros(0)
