"""The exact kernel RankSVM objective over beta (paper 004 eq. 3.13, appendix B).

With w = sum_i beta_i phi(x_i) (eq. 2.9) and z = Q beta, Q = K(X, X):

    f(beta) = 1/2 beta^T Q beta + C * loss(Q beta)                                  (3.13), (B.1)
    grad f  = Q beta + C Q dloss/dz = Q (beta + C dz)                               (B.2)
    H v     = Q v + C Q (2 A^T D A) Q v = Q (v + C L Q v),  L = 2 A^T D A            (B.3)

where loss, dz = d loss / d z and L (the generalised Hessian of the pair loss in score space,
block diagonal by query) come from the O(l log l) pair sweeps of :mod:`streamrank._native.pairkernels`
with the label-pair costs and query weights of the linear objective. Q is symmetric, so for
query-aligned row blocks Q_b (rows b, all columns) Q t = sum_b Q_b^T t_b, and

- ``fun`` (+ ``grad``) is ONE pass over the row blocks: z_b = Q_b beta, the sweep on z_b,
  accumulate Q_b^T (beta_b + C dz_b);
- ``hessp`` is ONE pass: u_b = Q_b v, t_b = v_b + C L_b u_b (active set of the accepted point),
  accumulate Q_b^T t_b (DESIGN.md, "Exact kernel RankSVM").

Inside a block both products run per group of whole queries small enough to stay in cache
(:data:`SUB_BYTES`), so Q is read from memory once per pass (``_qprod``). The sums run in
orders fixed by the data (``_qprod``'s lanes and row order, per-query losses added in query
order), so fun, grad, hessp and the whole TRON run are bit-identical for any block layout or
memory budget. Trial state is kept aside by ``fun`` and committed by ``grad`` exactly as in
:class:`~streamrank.objectives.rank_objective.RankObjective`, whose contract this class inherits.

Q is often singular, so beta is not unique: compare objectives, Q beta or predictions.
"""

import math
import time

import numpy as np

from streamrank._native import linalg as la
from streamrank._native import pairkernels as pk
from streamrank._native import parallel
from streamrank._native import qprod as qp
from streamrank.execution.executor import Pass
from streamrank.objectives.rank_objective import RankObjective

# Bytes of Q rows per sub-block (whole queries): the rows stay in the 1 MB L2 / 32 MB L3 between
# the two products (docs/design.md, "Measurements behind the code").
SUB_BYTES = 1 << 20
# Threads of a pass: the kernels start two parallel loops per sub-block, so a thread the OS
# starves (another process on its core; streamrank run under nice) stalls every one of them
# (docs/design.md, "Measurements behind the code"). The thread count never changes a result (each
# row and each column of the products is one thread's, in a fixed order), so passes are timed and
# the faster count is used; the other is tried again after PROBE_EVERY passes, an interval that
# doubles each time the probe loses. The first pass on several threads is not timed: it starts
# numba's threading layer, whose cost would hand the first comparison to one thread. A count is
# judged by the fastest of its last WINDOW timed passes: the pass after a preconditioner update
# shares the cores with BLAS threads still spinning, and one such time must not decide the rest
# of the run.
PROBE_EVERY = 16
WINDOW = 3


# the first pass of each kind in this process loads its kernels, and a load runs LLVM's code again
# (streamrank.io.budget.IDLE_LIBRARIES) back into the resident set: those pages are dropped
# once after each
_FIRST = set()


def _after_first(kind):
    if kind not in _FIRST:
        _FIRST.add(kind)
        from streamrank.io.budget import drop_idle_library_pages
        drop_idle_library_pages()


class _ThreadChooser:
    """Pick the thread count of the next pass from the measured times of earlier ones.

    The choices are one thread and the count in force in the thread that makes the chooser
    (:func:`streamrank._native.parallel.threads`: ``NUMBA_NUM_THREADS``, numba's default from the
    CPU affinity, or a lower ``numba.set_num_threads``). With one thread in force there is nothing
    to choose: every pass runs on one, none is a probe."""

    def __init__(self):
        top = max(1, int(parallel.threads()))
        self.options = [1, top] if top > 1 else [1]
        self.seconds = {}
        self.best = self.options[0]
        self.interval = PROBE_EVERY
        self.next_probe = PROBE_EVERY
        self.warm = {1}  # counts whose next pass is timed (one thread needs no warming up)

    def pick(self):
        if len(self.options) == 1:
            return self.best
        untried = [k for k in self.options if k not in self.seconds]
        if untried:
            return untried[0]
        self.next_probe -= 1
        if self.next_probe <= 0:
            return next(k for k in self.options if k != self.best)  # the one other option
        return self.best

    def record(self, k, seconds):
        if len(self.options) == 1:
            return
        if k not in self.warm:
            self.warm.add(k)
            return
        self.seconds[k] = (self.seconds.get(k, ()) + (seconds,))[-WINDOW:]
        if len(self.seconds) < len(self.options):
            return
        best = min(self.options, key=lambda o: min(self.seconds[o]))
        if k != self.best and self.next_probe <= 0:  # a probe: switch, or wait twice as long
            self.interval = PROBE_EVERY if best == k else 2 * self.interval
            self.next_probe = self.interval
        self.best = best


class KernelObjective(RankObjective):
    """fun / grad / hessp of (3.13) over beta, streaming the blocks of a KernelCache.

    Parameters
    ----------
    qcache : KernelCache
        Q in row blocks (iterating it is one counted pass).
    rank : int32 (l,)
        Label ranks of the rows of Q.
    C : float
    cost : PairCost
    mu : float64 (n_queries,)
        Query weights of the queries of Q.
    """

    # f(beta) is not strongly convex in beta (Q is often singular): a small ||g|| does not bound
    # the gap; TRON estimates it with its preconditioner instead (solvers.tron.relative_gap)
    strong_convexity = None

    def __init__(self, qcache, rank, *, C, cost, mu, sub_bytes=SUB_BYTES, jitter=None, executor=None, zero=None):
        super().__init__(qcache, qcache.l, C=C, cost=cost, mu=mu, executor=executor)
        # the pass at beta = 0 of the path's points (:class:`ZeroPoint`, shared by the objectives
        # of one Q and one pair cost), or None
        self._zero = zero
        self._trial_t = self._gpre = None  # beta + C dz of the last trial and of the accepted point
        self.rank = np.ascontiguousarray(rank, np.int32)
        self.query_ptr = qcache.query_ptr
        self.sub_rows = max(1, int(sub_bytes) // (4 * max(qcache.l, 1)))
        self.delta = float(qcache.jitter) if jitter is None else float(jitter)
        # the blocks hold float32(K - shift): Q' = blocks + shift 1 1^T + delta I (kernel_cache's
        # comment above JITTER_FACTOR). The shift adds shift (1^T beta) to every score, which no
        # pair margin sees, so the sweeps run on the blocks' scores as they are; it enters the
        # scores kept (z), beta^T Q' beta = beta . z and the products Q' t (shift (1^T t) 1)
        self.shift = float(getattr(qcache, "shift", 0.0))
        self._precond = None
        self._threads = _ThreadChooser()
        bq = qcache.block_queries
        # per block: rows a:b, queries qa:qb, local query offsets
        self._meta = [(int(self.query_ptr[qa]), int(self.query_ptr[qb]), int(qa), int(qb),
                       np.ascontiguousarray(self.query_ptr[qa:qb + 1] - self.query_ptr[qa]))
                      for qa, qb in zip(bq[:-1], bq[1:])]

    def _run(self, p, kept=()):
        """One pass of ``p`` over the blocks of Q through the executor, with the thread count
        :class:`_ThreadChooser` picks for the pass."""
        k_threads = self._threads.pick()
        t = time.perf_counter()
        try:
            with parallel.limit(k_threads):
                return self.executor.run(p, self.source, kept=kept)
        finally:
            self._threads.record(k_threads, time.perf_counter() - t)

    def fun(self, beta):
        beta = np.ascontiguousarray(beta, np.float64)
        self._trial = None  # the last trial's state goes before this pass makes a new one
        at_zero = self._zero is not None and self.cost.eta == 0 and not beta.any()
        known = self._zero.at(self.C) if at_zero else None
        if known is not None:
            acc, t, z, st, loss = known
        else:
            acc, t, z, st, loss = self._loss_grad_pass(beta)
            if at_zero:
                self._zero.keep(self.C, acc, t, z, st, loss)
        f = 0.5 * la.sum_in_order(0.0, beta * z) + self.C * loss  # beta^T Q' beta = beta . z
        self._trial = (beta.copy(), f, acc, st, loss, z)
        self._trial_t = t
        return f

    def _loss_grad_pass(self, beta):
        """(Q' t, t, z, the active sets, the loss) at beta: one pass over Q (module docstring)."""
        acc, kept = self._run(_KernelLossGrad(beta, self))
        _after_first("fun")
        z, t, loss_q = (np.concatenate([o[i] for o in kept]) if kept else np.zeros(0) for i in range(3))
        st = (tuple(np.concatenate([o[3][i] for o in kept]) for i in range(len(kept[0][3]))) if kept
              else pk.state_arrays(0, self.cost.eta))
        acc += self.delta * t  # the jitter's part of Q' t, after every row (block-independent order)
        if self.shift:  # the shift's rank-one part of Q' beta and Q' t
            z += self.shift * la.sum_in_order(0.0, beta)
            acc += self.shift * la.sum_in_order(0.0, t)
        return acc, t, z, st, la.sum_in_order(0.0, loss_q)

    def grad(self, beta):
        tw, f, g, st, loss, z = self._trial
        if not np.array_equal(tw, beta):
            raise RuntimeError("grad(beta) must follow fun(beta) at the same point (solver contract)")
        self._states, self._z, self.loss = st, z, loss
        self._gpre = self._trial_t  # Q'^-1 g = beta + C dz at the accepted point (fun)
        return g.copy()

    def hessp(self, v):
        return self.hessp_t(v)[0]

    def kernel_metric(self):
        """Q'^-1 g at the accepted point (g = Q' (beta + C dz)): TRON's CG in the RKHS norm (tron._trkcg)."""
        return self._gpre

    def hessp_t(self, v):
        """(H v = Q' t, t = v + C L Q' v): the CG of M = Q' keeps Q'^-1 H v = t."""
        v = np.ascontiguousarray(v, np.float64)
        per_block = [tuple(x[a:b] for x in self._states) for a, b, _, _, _ in self._meta]
        acc, ts = self._run(_KernelHessProd(v, self), kept=(per_block,))
        _after_first("hessp")
        t = np.concatenate(ts) if ts else np.zeros(0)
        acc += self.delta * t
        if self.shift:  # Q' t's rank-one part (fun's comment)
            acc += self.shift * la.sum_in_order(0.0, t)
        return acc, t

    def scores(self, beta=None):
        """z = Q beta at the accepted point (kept from its pass)."""
        return self._z.copy()

    def preconditioner(self):
        """TRON's preconditioner (``precondition`` hook) at the accepted point: what the one given
        to :meth:`set_preconditioner` makes of that point's active set
        (:meth:`~streamrank.objectives.kernel_precond.NystroemPreconditioner.at_point`); None without one."""
        P = self._precond
        if P is None or self._states is None:
            return P
        M = P.at_point(self.C, self.rank, self.query_ptr, self.cost, self.mu, self._states)
        _after_first("preconditioner")
        return M

    def set_preconditioner(self, P):
        self._precond = P
        return self

    def hessian(self, max_rows=None):
        raise NotImplementedError("exact kernel RankSVM does not form its l x l Hessian in beta "
                                  "(TRON and Newton-Yuan use products)")


class ZeroPoint:
    """fun's pass at beta = 0 for every C of a path (squared hinge), made once.

    TRON evaluates every warm-started point at beta = 0 too (its stopping rule's ||g(0)||). There
    z = 0 whatever C, so the sweep's loss, dz and active sets do not depend on C, and
    t = 0 + C dz, g = Q' t scale with C. When C / C0 is a power of two, every product and sum of
    the pass scales exactly (no rounding changes, away from float64's underflow and overflow), so
    r t0 and r g0 (r = C / C0) are the bits a pass at C would give; for any other ratio the pass
    is made. Shared by the objectives of one Q and one pair cost (training.exact._Gram)."""

    # scaled values must stay this far inside float64's normal range (2^-1022 to 2^1024) for the
    # scaling to be exact at every intermediate step of the pass (products with float32 entries
    # of Q as small as 2^-149, sums of l terms)
    SAFE_EXP = 700

    def __init__(self):
        self._kept = None

    def keep(self, C, acc, t, z, st, loss):
        if self._kept is None:
            self._kept = (float(C), acc.copy(), t.copy(), z.copy(), tuple(a.copy() for a in st), loss)

    def at(self, C):
        """(Q' t, t, z, active sets, loss) at beta = 0 for C, or None (no exact scaling known)."""
        if self._kept is None:
            return None
        C0, acc, t, z, st, loss = self._kept
        r = float(C) / C0
        mant, e = math.frexp(r)
        if mant != 0.5 or not all(_in_range(x, e - 1, self.SAFE_EXP) for x in (acc, t)):
            return None
        return r * acc, r * t, z.copy(), tuple(a.copy() for a in st), loss


def _in_range(x, shift, safe):
    """Whether the nonzero entries of x times 2^shift stay within 2^-safe .. 2^safe."""
    nz = np.abs(x[x != 0])
    if nz.size == 0:
        return True
    lo, hi = math.frexp(float(nz.min()))[1] + shift, math.frexp(float(nz.max()))[1] + shift
    return -safe < lo and hi < safe


# -- the passes over the row blocks of Q (streamrank.execution) -------------------------------------


class _KernelLossGrad(Pass):
    """(B.1), (B.2) for one row block Q_b (item (k, a, b, Q_b)): the carry accumulates Q_b^T t_b
    row by row (``qprod.fun_block``); the block returns z_b, t_b, its per-query losses and active sets."""

    returns = True

    def __init__(self, beta, obj):
        self.beta, self.meta, self.rank, self.mu = beta, obj._meta, obj.rank, obj.mu
        self.cost_args, self.C, self.delta, self.sub_rows = obj._cost_args(), obj.C, obj.delta, obj.sub_rows

    def start(self):
        return np.zeros(self.beta.shape[0])

    def step(self, acc, item):
        k, a, b, Qk = item
        _, _, qa, qb, lqp = self.meta[k]
        n = b - a
        z, dz, t, loss_q = np.empty(n), np.empty(n), np.empty(n), np.empty(qb - qa)
        st = pk.state_arrays(n, self.cost_args[6])
        qp.fun_block(Qk, self.beta, a, lqp, self.rank[a:b], *self.cost_args, self.mu[qa:qb], self.C, self.delta,
                     self.sub_rows, z, dz, t, *st, loss_q, acc)
        return z, t, loss_q, st

    def merge(self, total, acc):
        return total + acc


class _KernelHessProd(Pass):
    """(B.3) for one row block: u_b = Q_b v, t_b = v_b + C L_b u_b at the block's kept active sets;
    the carry accumulates Q_b^T t_b; the block returns t_b (for the jitter's part)."""

    returns = True

    def __init__(self, v, obj):
        self.v, self.meta, self.rank, self.mu = v, obj._meta, obj.rank, obj.mu
        self.cost_args, self.C, self.delta, self.sub_rows = obj._cost_args(), obj.C, obj.delta, obj.sub_rows

    def start(self):
        return np.zeros(self.v.shape[0])

    def step(self, acc, item, st):
        k, a, b, Qk = item
        _, _, qa, qb, lqp = self.meta[k]
        t = np.empty(b - a)
        qp.hess_block(Qk, self.v, a, lqp, self.rank[a:b], *self.cost_args, self.mu[qa:qb], self.C, self.delta,
                      self.sub_rows, *st, t, acc)
        return t

    def merge(self, total, acc):
        return total + acc


class _Counter:
    """Counts the products with Q = X X^T as passes (the interface of a block source)."""

    passes = 0


class LinearKernelObjective(RankObjective):
    """(3.13) for the linear kernel, Q = X X^T applied as X (X^T v) in float64 (paper 004 sec. 3.3).

    No Q is formed or stored: O(l d) per product, and beta^T Q beta = ||X^T beta||^2 >= 0 exactly,
    so the float32 rounding and the jitter of the general kernel path do not arise, and the
    optimum is the linear model's. One product counts as one pass.
    """

    strong_convexity = None  # as KernelObjective

    def __init__(self, Xn, rank, query_ptr, *, C, cost, mu):
        self.Xn = np.ascontiguousarray(Xn, np.float64)
        super().__init__(_Counter(), self.Xn.shape[0], C=C, cost=cost, mu=mu)
        self._trial_t = self._gpre = None  # (KernelObjective.grad's)
        self.rank = np.ascontiguousarray(rank, np.int32)
        self.query_ptr = np.ascontiguousarray(query_ptr, np.int64)
        self._precond = None

    def fun(self, beta):
        beta = np.ascontiguousarray(beta, np.float64)
        self.source.passes += 1
        p = self.Xn.T @ beta
        z = self.Xn @ p
        loss_q = np.empty(len(self.query_ptr) - 1)
        _, dz, st = pk.loss_grad(z, self.rank, self.query_ptr, self.cost, self.mu, loss_q=loss_q)
        loss = la.sum_in_order(0.0, loss_q)
        g = self.Xn @ (self.Xn.T @ (beta + self.C * dz))
        self._trial = (beta.copy(), 0.5 * float(p @ p) + self.C * loss, g, st, loss, z)
        return self._trial[1]

    def hessp(self, v):
        v = np.ascontiguousarray(v, np.float64)
        self.source.passes += 1
        u = self.Xn @ (self.Xn.T @ v)
        lu = pk.hess_prod(u, self.rank, self.query_ptr, self.cost, self.mu, self._states)
        return self.Xn @ (self.Xn.T @ (v + self.C * lu))

    grad = KernelObjective.grad
    scores = KernelObjective.scores
    preconditioner = KernelObjective.preconditioner
    set_preconditioner = KernelObjective.set_preconditioner
    hessian = KernelObjective.hessian
