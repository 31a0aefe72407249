"""Coefficient-based least-squares ranking, CLSRRank (paper 002), over the query stream.

The scoring function is f(x) = sum_t alpha_t K(x, x_t) over m basis rows x_t (paper 002, eq. 4 and
theorem 1): all training rows, as in the paper, or m rows drawn as the Nystroem landmarks are
(``components``). K need not be symmetric or positive semi-definite.

The objective. The paper's empirical error (eq. 5) is over one sample of m points with ordered
pairs (j, k), j = k included. For data in queries, pairs are formed within each query:

    J(alpha) = (1 / S) sum_q sum_{j,k in q} (y_j - y_k - (f(x_j) - f(x_k)))^2 + lambda m ||alpha||^2,

with S = sum_q l_q^2 (l_q the query's rows). One query holding every row, with all rows as the
basis, is eq. 5 exactly.

Within a query, with r = y - Phi alpha (Phi = K(X, B)) and ~ the centring over the query,
sum_{j,k} (r_j - r_k)^2 = 2 l_q ||r~_q||^2. So

    J(alpha) = (2 / S) (c0 - 2 b0^T alpha + alpha^T G0 alpha) + lambda m ||alpha||^2,
    G0 = sum_q l_q Phi~_q^T Phi~_q,   b0 = sum_q l_q Phi~_q^T y~_q,   c0 = sum_q l_q ||y~_q||^2.

Its minimiser solves ((2 / S) G0 + lambda m I) alpha = (2 / S) b0: for one query this is A alpha = B
of eq. 6-8, whose sums over K^i collapse to K^T 1 1^T K / m^2. For lambda > 0 the matrix is
symmetric positive definite whatever K is (G0 is a sum of Gram matrices), so Cholesky solves it.

Cost. ONE streamed pass accumulates G0, b0 and c0 with BLAS-3 (centred kernel rows scaled by
sqrt(l_q)). Every lambda of the path reuses them. The pass is needed once per (kernel, gamma,
basis), plus the basis draw. With all rows as the basis, the rows are read once and the system is
built from them in memory.

Memory: the m x m system, its factor and a product (24 m^2 bytes), the basis (8 m d), and chunks of kernel
rows of at most CHUNK_BYTES.
"""

import logging
import math
import time

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve

from streamrank.cache.kernel_cache import read_rows
from streamrank._native.blas import add_atb, one_thread
from streamrank import params
from streamrank.errors import FormatError, ParameterError
from streamrank.solvers.finite import numeric_error, vector_detail
from streamrank.execution.executor import Pass, executor_or_local, partitioned_stream
from streamrank.features.basis_map import KernelBasisMap, clsr_plan, draw_basis, kernel_name
from streamrank.features.kernels import KERNELS
from streamrank.features.normalize import Normalizer
from streamrank.objectives.linear_precond import query_groups
from streamrank.state.model import LinearModel, settled_resident
from streamrank.training.path import report_grid_edges
from streamrank.training.problem import (SELECT_METRICS, attach_features, check_has_features, check_queries,
                                        check_validation_labels, check_valid_width, gamma_path, grid_points, read_labels, validation_score,
                                        with_features)
from streamrank.units import format_size, parse_size

log = logging.getLogger("streamrank.training.clsr")

# kernel rows (float64, whole queries, at least one) centred and multiplied at a time
CHUNK_BYTES = 32 << 20
# share of the memory budget the m x m system and its factor may take
SYSTEM_SHARE = 0.75
# a progress line at most this often during a pass
PROGRESS_SECONDS = 10.0


def _centred(fmap, X, y, qp, row0, out, yout):
    """Into ``out`` and ``yout``: the kernel rows K(X, B) and labels of whole queries (local offsets
    ``qp``; the first row is row ``row0`` of the dataset), each query centred and scaled by
    sqrt(l_q), so that Psi^T Psi adds l_q Phi~_q^T Phi~_q per query (module docstring). Each query's
    rows depend on that query alone; centred in place, query by query."""
    Phi = fmap.transform(X, np.float64, out=out, row0=row0)
    yout[:] = y
    for a, b in zip(qp[:-1], qp[1:]):
        a, b = int(a), int(b)
        if b > a:
            P = Phi[a:b]
            P -= P.mean(axis=0)
            P *= np.sqrt(b - a)
            yq = yout[a:b]
            yq -= yq.mean()
            yq *= np.sqrt(b - a)


class _Sums:
    """G0, b0, c0 and S summed over GROUPS of whole queries fixed by the query index alone (at most
    ``rows_max`` rows each, or one larger query): each group's rows are gathered in one buffer and
    added by one product, in group order, so the sums (and the model) are the same bits for any
    block size or memory budget. A group that spans two blocks waits in the buffer."""

    def __init__(self, m, qp_all, rows_max):
        self.qp = np.asarray(qp_all, np.int64)        # the training queries' offsets, from 0
        self.groups = query_groups(self.qp, int(self.qp[-1]), rows_max)
        width = int(np.max(np.diff(self.qp[self.groups]))) if len(self.groups) > 1 else 0
        self.buf, self.ybuf = np.empty((width, m)), np.empty(width)
        self.g, self.filled = 0, 0
        self.G, self.b, self.c, self.S, self.rows = np.zeros((m, m)), np.zeros(m), 0.0, 0.0, 0

    def add(self, fmap, X, y, qa, qb, row0):
        """Queries qa:qb (indices into the training queries) with their rows X, y; ``row0`` is the
        dataset row of X's first."""
        q = qa
        base = int(self.qp[qa])
        while q < qb:  # q advances every pass (to e > q, below), so at most qb - qa passes
            g_end = int(self.groups[self.g + 1])
            e = min(g_end, qb)
            if e <= q:  # blocks out of order: the group that holds q was closed already
                raise RuntimeError(f"CLSRRank sums: queries {qa}:{qb} arrived after group {self.g} "
                                   f"(ending at query {g_end}) was closed")
            r0, r1 = int(self.qp[q]) - base, int(self.qp[e]) - base
            f = self.filled  # the kernel rows go straight into the group's buffer
            _centred(fmap, X[r0:r1], y[r0:r1], self.qp[q:e + 1] - self.qp[q], row0 + r0,
                     self.buf[f:f + r1 - r0], self.ybuf[f:f + r1 - r0])
            self.filled = f + r1 - r0
            q = e
            if q == g_end:  # the group is complete: one product
                B, yb = self.buf[:self.filled], self.ybuf[:self.filled]
                add_atb(self.G, B, B)  # the same bits on any number of threads (a worker's or this process's)
                add_atb(self.b[:, None], B, yb[:, None])
                self.c += float(yb @ yb)
                sz = np.diff(self.qp[self.groups[self.g]:g_end + 1]).astype(np.float64)
                self.S += float(np.sum(sz ** 2))
                self.rows += self.filled
                self.g, self.filled = self.g + 1, 0

    def system(self):
        return {"G": self.G, "b": self.b, "c": self.c, "S": self.S, "rows": self.rows}


class _System(Pass):
    """The one pass of a (kernel, gamma, basis): the sums of :class:`_Sums` over the blocks of the
    stream, in row order (one partition)."""

    one_partition = True

    def __init__(self, fmap, normalizer, qp_all, q0, rows_max, n_rows=0):
        self.fmap, self.normalizer, self.qp_all, self.q0 = fmap, normalizer, qp_all, q0
        self.rows_max, self.n_rows = rows_max, n_rows
        self.t0 = self.shown = time.perf_counter()

    def start(self):
        return _Sums(self.fmap.n_components_, self.qp_all, self.rows_max)

    def step(self, sums, item):
        block, start, stop = item
        X = np.asarray(self.normalizer.transform(block.X, block.query_ptr), np.float64)
        sums.add(self.fmap, X, block.y, block.q_start - self.q0, block.q_stop - self.q0, start)
        now = time.perf_counter()
        if now - self.shown >= PROGRESS_SECONDS:  # a long pass says how far it is
            self.shown = now
            log.info("  %d of %d rows, %.0f rows/s", sums.rows, self.n_rows, sums.rows / max(now - self.t0, 1e-9))


def _solve(system, lam):
    """alpha for one lambda: ((2 / S) G0 + lambda m I) alpha = (2 / S) b0, and J(alpha).

    A direct solve (no loop). A system, solution or objective that is not finite, or a matrix that
    is not positive definite in float64 (lambda m I lost against G0's scale), raises NumericError
    (solvers.finite: the same attributes as the iterative solvers', where = "direct solve")."""
    G, b, c, S = system["G"], system["b"], system["c"], system["S"]
    m = G.shape[0]
    if S == 0:
        raise ParameterError("the training data have no query with documents; there is nothing to fit")
    for name, v in (("G0", G), ("b0", b), ("c0", c)):  # sums of the kernel rows and labels of the data
        if not np.all(np.isfinite(v)):
            raise numeric_error("CLSRRank's system", "direct solve",
                                detail=f"lambda={lam:g}: {name}: {vector_detail(np.ravel(v))}")
    A = (2.0 / S) * G
    A[np.diag_indices_from(A)] += lam * m
    try:
        # on one BLAS thread: the factor's bits (and alpha's) then do not depend on the thread count
        with one_thread():
            alpha = cho_solve(cho_factor(A, check_finite=False, overwrite_a=True), (2.0 / S) * b, check_finite=False)
            quad = float(alpha @ (G @ alpha))
    except LinAlgError:
        raise numeric_error("CLSRRank's system (2 / S) G0 + lambda m I", "direct solve",
                            state="not positive definite in float64",
                            detail=f"lambda={lam:g}: lambda m = {lam * m:.3g} is lost against max |G0| (2 / S) = "
                                   f"{float(np.max(np.abs(G))) * 2.0 / S:.3g}") from None
    objective = (2.0 / S) * (c - 2.0 * float(b @ alpha) + quad) + lam * m * float(alpha @ alpha)
    if not (np.all(np.isfinite(alpha)) and math.isfinite(objective)):
        raise numeric_error("CLSRRank's solution", "direct solve", objective,
                            detail=f"lambda={lam:g}: alpha: {vector_detail(alpha)}" if not np.all(np.isfinite(alpha))
                            else f"lambda={lam:g}: the objective overflows")
    return alpha, objective


def _lambda_path(lam):
    """The lambda values of a path, each a finite number > 0 (the system is then positive definite
    whatever the kernel; streamrank.params)."""
    from streamrank import params
    return sorted(params.check_all("lam", lam, shown="lambda"))


def train_clsr(ds, *, valid=None, lam=(1e-3,), kernel="rbf", gamma=None, degree=3, coef0=1.0, normalize="none",
               components=None, memory_budget="2GB", select_metric="meanndcg", seed=0, block_bytes=None,
               queries=None, executor=None, features=None, checkpoint=None, resume=False):
    """Train CLSRRank on an open dataset; return (LinearModel with a KernelBasisMap, summary dict).

    ``lam``: one lambda or several (a path: one pass per gamma serves all of them; several points
    need ``valid``, where ``select_metric`` chooses). ``kernel``: a name (rbf, laplacian, poly,
    sigmoid, linear) or a callable ``K(A, B)`` (the model then cannot be saved). ``gamma``: one or
    several (None: 1 / n_features; ignored by a callable). ``components``: m basis rows drawn
    uniformly (seeded); None uses every training row, the paper's setting, when the m x m system
    fits the budget. ``checkpoint``: a directory where each gamma's candidates and solutions are
    kept once its pass is done; ``resume`` skips the gammas found there (the same model as an
    uninterrupted run: each gamma's system is built from the data alone).
    """
    t_start = time.perf_counter()
    check_queries(ds, queries)
    ds, valid, feature_cols, input_width = with_features(ds, valid, features)
    lams = _lambda_path(lam)
    if not callable(kernel) and kernel not in KERNELS:
        raise ParameterError(f"kernel must be one of {', '.join(KERNELS)} or a callable K(A, B); got {kernel!r}. "
                             f"Use kernel=rbf")
    gammas = [None] if callable(kernel) else gamma_path(gamma)
    if select_metric not in SELECT_METRICS:
        raise ParameterError(f"select_metric must be one of {', '.join(SELECT_METRICS)}; got {select_metric!r}")
    if components is not None:
        components = params.check("components", components)
    check_has_features(ds)
    check_valid_width(ds, valid)
    check_validation_labels(valid, select_metric)
    grid_points(lams, gammas, valid, "lambda")
    budget = parse_size(memory_budget)
    q0, q1 = queries if queries is not None else (0, ds.n_queries)
    n_train = int(ds.query_ptr[q1] - ds.query_ptr[q0])
    d = ds.n_features
    m = n_train if components is None else min(int(components), n_train)
    need = 24 * m * m + 8 * m * d + (8 * n_train * d if components is None else 0)  # G0, its factor, a product
    resident = settled_resident()
    room = max(0.0, (budget - resident) * SYSTEM_SHARE)
    if need > room:
        fit = int((room / 24) ** 0.5)
        budget_fix = f"memory_budget={format_size(int(need / SYSTEM_SHARE) + resident)}"
        raise ParameterError(f"CLSRRank with {m:,} basis rows needs {format_size(need)} for its {m:,} x {m:,} system"
                             f"{' and the training rows' if components is None else ''}, more than the memory budget "
                             f"{format_size(budget)} leaves beside the {format_size(resident)} resident; use "
                             + (f"components={fit} (basis rows drawn from the data) or {budget_fix}" if fit >= 10
                                else budget_fix))
    cfg = {"method": "clsr", "lambda_path": lams, "kernel": kernel_name(kernel), "gamma_path": gammas,
           "degree": params.check("degree", degree), "coef0": params.check("coef0", coef0), "normalize": normalize,
           "components": components, "seed": params.check("seed", seed), "select_metric": select_metric, "memory_budget": budget,
           "queries": list(queries) if queries is not None else None,
           "valid_fingerprint": valid.fingerprint if valid is not None else None}
    # the groups' buffer and its kernel rows: CHUNK_BYTES each (a function of m alone, so that the
    # sums do not depend on the budget); blocks get the rest (their prefetch buffers and float64
    # normalised copy, 2 + 2 bytes per raw byte)
    # the system, its factor, the basis, the groups' buffer, the tiles and the validation's chunk
    # beside the blocks (features.basis_map.clsr_plan), or refused with the smallest budget that works
    raw_block = block_bytes or clsr_plan(budget, resident, m=m, d=d, n_train=n_train,
                                         largest_query=int(np.diff(ds.query_ptr[q0:q1 + 1]).max(initial=0)),
                                         all_rows=components is None, validating=valid is not None,
                                         chunk_bytes=CHUNK_BYTES)
    normalizer = Normalizer(normalize)
    if normalize == "zscore":
        normalizer.fit(partitioned_stream(ds, executor, block_bytes=raw_block, queries=(q0, q1)), d, executor=executor)
    rows_max = max(1, CHUNK_BYTES // (8 * m))
    passes = 0

    # -- the basis: every training row (read once, kept) or m drawn rows ------------------------------
    t = time.perf_counter()
    if components is None:
        Xn, y, _ = read_rows(ds, normalizer, (q0, q1), raw_block, executor=executor)
        basis, basis_rows = Xn, np.arange(int(ds.query_ptr[q0]), int(ds.query_ptr[q1]))
        passes += 1
    else:
        basis, basis_rows = draw_basis(ds, m, seed, normalizer=normalizer, queries=(q0, q1), block_bytes=raw_block,
                                       executor=executor)
        Xn = None
    log.info("CLSRRank: %d basis rows (%s) of %d training rows, %d features; %s read in %.2f s", m,
             "all of them" if components is None else f"drawn with seed {seed}", n_train, d,
             "the rows" if components is None else "the basis", time.perf_counter() - t)

    valid_y = read_labels(valid) if valid is not None else None
    candidates, alphas, maps = [], [], []
    ck_config = {k: v for k, v in cfg.items() if k != "memory_budget"}  # the model does not depend on it
    done = 0
    if checkpoint is not None and resume:
        from streamrank.state.checkpoint import read_checkpoint
        ck = read_checkpoint(checkpoint, config=ck_config, fingerprint=ds.fingerprint, warn=log.warning)
        if ck is not None:
            sc = ck["scalars"]
            # the gammas' passes of the earlier run (its read of the rows is this run's again)
            done, candidates, passes = int(sc["gammas_done"]), list(sc["candidates"]), passes + int(sc["gamma_passes"])
            alphas = [np.asarray(ck["extra"][f"alpha{i}"], np.float64) for i in range(len(candidates))]
            if not 0 <= done <= len(gammas) or len(candidates) != done * len(lams) or \
                    any(a.shape != (m,) for a in alphas):
                raise FormatError(f"{checkpoint}: the CLSRRank checkpoint is inconsistent ({done} gammas done, "
                                  f"{len(candidates)} candidates); start again with resume=False")
            log.info("resuming from %s: %d of %d gammas done", checkpoint, done, len(gammas))
    for gi, g in enumerate(gammas):
        fmap = KernelBasisMap(basis, kernel, g, degree, coef0, basis_rows=basis_rows)
        if gi < done:  # solved before the interruption: its candidates came from the checkpoint
            maps += [fmap] * len(lams)
            continue
        t = time.perf_counter()
        qp_all = ds.query_ptr[q0:q1 + 1] - ds.query_ptr[q0]
        if Xn is not None:  # all rows as the basis: they are in memory already
            sums = _Sums(m, qp_all, rows_max)
            sums.add(fmap, Xn, y, 0, q1 - q0, int(ds.query_ptr[q0]))
        else:
            sums, _ = executor_or_local(executor).run(
                _System(fmap, normalizer, qp_all, q0, rows_max, n_train),
                partitioned_stream(ds, executor, block_bytes=raw_block, queries=(q0, q1)))
            passes += 1
        system = sums.system()
        secs = time.perf_counter() - t
        log.info("gamma %s: the %d x %d system from %d rows in %.2f s (%.0f rows/s)",
                 "callable" if callable(kernel) else f"{fmap.gamma_:g}", m, m, system["rows"], secs,
                 system["rows"] / max(secs, 1e-9))
        for lm in lams:
            alpha, obj = _solve(system, lm)
            cand = {"lambda": lm, "gamma": fmap.gamma_, "objective": obj, "passes": passes,
                    "seconds": secs / len(lams)}
            if valid is not None:
                model = LinearModel(alpha, normalizer, n_features=d, fmap=fmap)
                cand["valid_" + select_metric] = validation_score(model, valid, valid_y, select_metric,
                                                                  block_bytes=raw_block, executor=executor)
            log.info("  lambda=%g: objective %.6e%s", lm, obj,
                     f", validation {select_metric} {cand['valid_' + select_metric]:.4f}" if valid is not None else "")
            candidates.append(cand)
            alphas.append(alpha)
            maps.append(fmap)
        if checkpoint is not None:  # this gamma's pass and solves are kept
            from streamrank.state.checkpoint import write_checkpoint
            write_checkpoint(checkpoint, config=ck_config, fingerprint=ds.fingerprint,
                             scalars={"gammas_done": gi + 1, "candidates": candidates,
                                      "gamma_passes": passes - (1 if components is None else 0)},
                             w=np.zeros(0), g=np.zeros(0), extra={f"alpha{i}": a for i, a in enumerate(alphas)})
    key = "valid_" + select_metric
    best = max(range(len(candidates)), key=lambda i: candidates[i][key]) if valid is not None else len(candidates) - 1
    chosen = candidates[best]
    summary = {"method": "clsr", "objective": chosen["objective"], "lambda": chosen["lambda"],
               "gamma": chosen["gamma"], "C": None, "passes": passes, "basis": m, "candidates": candidates,
               "seconds": time.perf_counter() - t_start, "kernel": kernel_name(kernel), "iterations": 0,
               "grad_norm": 0.0}
    report_grid_edges(summary, lams, gammas, c_name="lambda")
    model = LinearModel(alphas[best], normalizer, n_features=d, fmap=maps[best], config=cfg, training=summary,
                        fingerprint=ds.fingerprint, levels=np.unique(read_labels(ds)).tolist())
    return attach_features(model, feature_cols, input_width), summary
