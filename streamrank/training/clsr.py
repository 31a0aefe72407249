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
from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, cho_factor, cho_solve

from streamrank import params
from streamrank._native.blas import add_atb, one_thread
from streamrank.cache.kernel_cache import read_rows
from streamrank.errors import FormatError, ParameterError
from streamrank.execution.executor import Pass, executor_or_local, partitioned_stream
from streamrank.features.basis_map import KernelBasisMap, clsr_plan, draw_basis, kernel_name
from streamrank.features.kernels import KERNELS
from streamrank.io.budget import remote_copies
from streamrank.objectives.linear_precond import query_groups
from streamrank.solvers.finite import numeric_error, vector_detail
from streamrank.state.model import LinearModel, settled_resident
from streamrank.training.path import report_grid_edges
from streamrank.training.problem import (
    SELECT_METRICS,
    attach_features,
    check_convention,
    check_data,
    check_queries,
    fit_normalizer,
    frozen,
    gamma_path,
    query_range,
    read_labels,
    validation_score,
    with_features,
)
from streamrank.units import budget_bytes, format_size

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
               queries=None, executor=None, features=None, checkpoint=None, resume=False, convention="letor4"):
    """Train CLSRRank on an open dataset; return (LinearModel with a KernelBasisMap, summary dict).

    ``lam``: one lambda or several (a path: one pass per gamma serves all of them; several points
    need ``valid``, where ``select_metric`` chooses). ``kernel``: a name (rbf, laplacian, poly,
    sigmoid, linear) or a callable ``K(A, B)`` (the model then cannot be saved). ``gamma``: one or
    several (None: 1 / n_features; ignored by a callable). ``components``: m basis rows drawn
    uniformly (seeded); None uses every training row, the paper's setting, when the m x m system
    fits the budget. ``checkpoint``: a directory where each gamma's candidates and solutions are
    kept once its pass is done; ``resume`` skips the gammas found there (the same model as an
    uninterrupted run: each gamma's system is built from the data alone). ``convention``: the gains
    of ``select_metric`` (letor4 or standard).
    """
    t_start = time.perf_counter()
    check_queries(ds, queries)
    ds, valid, feature_cols, input_width = with_features(ds, valid, features)
    settings = clsr_settings(valid, lam=lam, kernel=kernel, gamma=gamma, degree=degree, coef0=coef0,
                             normalize=normalize, components=components, memory_budget=memory_budget,
                             select_metric=select_metric, seed=seed, queries=queries, convention=convention)
    check_data(ds, valid, select_metric, settings["lambda_path"], settings["gamma_path"], "lambda")
    problem = clsr_problem(ds, valid, settings, query_range(ds, queries), block_bytes, executor,
                           kernel=kernel, degree=degree, coef0=coef0, seed=seed)
    path = ClsrPath(problem, settings)
    path.run(checkpoint, resume)
    model, summary = clsr_model(problem, settings, path, t_start)
    return attach_features(model, feature_cols, input_width), summary


def clsr_settings(valid, *, lam, kernel, gamma, degree, coef0, normalize, components, memory_budget, select_metric,
                  seed, queries, convention="letor4"):
    """The checked settings of a CLSRRank run, read-only: the config its model records (the
    kernel by name; ``gamma_path`` [None] for a callable kernel)."""
    lams = _lambda_path(lam)
    if not callable(kernel) and kernel not in KERNELS:
        raise ParameterError(f"kernel must be one of {', '.join(KERNELS)} or a callable K(A, B); got {kernel!r}. "
                             f"Use kernel=rbf")
    gammas = [None] if callable(kernel) else gamma_path(gamma)
    if select_metric not in SELECT_METRICS:
        raise ParameterError(f"select_metric must be one of {', '.join(SELECT_METRICS)}; got {select_metric!r}")
    if components is not None:
        components = params.check("components", components)
    return frozen({"method": "clsr", "lambda_path": lams, "kernel": kernel_name(kernel), "gamma_path": gammas,
                   "degree": params.check("degree", degree), "coef0": params.check("coef0", coef0),
                   "normalize": normalize, "components": components, "seed": params.check("seed", seed),
                   "select_metric": select_metric, **check_convention(convention),
                   "memory_budget": budget_bytes(memory_budget),
                   "queries": list(queries) if queries is not None else None,
                   "valid_fingerprint": valid.fingerprint if valid is not None else None})


def system_size(ds, settings, queries):
    """(m basis rows, the training rows, the resident bytes) of a run whose m x m system, its
    factor and a product (24 m^2 bytes), the basis and (all rows as the basis) the training rows
    fit SYSTEM_SHARE of the budget beside what the process holds; else ParameterError naming the
    components or the budget that fit."""
    q0, q1 = queries
    n_train, d, budget, components = (int(ds.query_ptr[q1] - ds.query_ptr[q0]), ds.n_features,
                                      settings["memory_budget"], settings["components"])
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
    return m, n_train, resident


@dataclass(frozen=True, eq=False)
class ClsrProblem:
    """A CLSRRank run's data and basis, prepared once: ``ds`` and ``valid`` (its labels
    ``valid_y``), the training ``queries`` (q0, q1) and their ``n_train`` rows, the fitted
    ``normalizer``; the ``m`` ``basis`` rows (normalised float64) and their dataset rows
    ``basis_rows``; ``Xn``, ``y``: the training rows and labels when they are the basis (else
    None), read in ``base_passes`` passes; the kernel as given (a name or a callable) with its
    ``degree`` and ``coef0``; ``raw_block``: bytes of a block read; ``rows_max``: rows of a group
    of queries summed by one product (:class:`_Sums`)."""

    ds: object
    valid: object
    valid_y: object
    queries: tuple
    n_train: int
    normalizer: object
    m: int
    basis: np.ndarray
    basis_rows: np.ndarray
    Xn: object
    y: object
    base_passes: int
    kernel: object
    degree: object
    coef0: object
    raw_block: int
    rows_max: int
    executor: object


def clsr_problem(ds, valid, settings, queries, block_bytes, executor, *, kernel, degree, coef0, seed):
    """The run's :class:`ClsrProblem`: its blocks inside the budget, the normaliser, the basis
    (every training row, read once and kept, or m rows drawn with ``seed``)."""
    q0, q1 = queries
    m, n_train, resident = system_size(ds, settings, queries)
    all_rows, d = settings["components"] is None, ds.n_features
    # the system, its factor, the basis, the groups' buffer (CHUNK_BYTES, a function of m alone, so
    # that the sums do not depend on the budget), the tiles and the validation's chunk beside the
    # blocks (features.basis_map.clsr_plan), or refused with the smallest budget that works
    raw_block = block_bytes or clsr_plan(settings["memory_budget"], resident, m=m, d=d, n_train=n_train,
                                         largest_query=int(np.diff(ds.query_ptr[q0:q1 + 1]).max(initial=0)),
                                         all_rows=all_rows, validating=valid is not None, chunk_bytes=CHUNK_BYTES,
                                         store_copies=remote_copies(ds))
    normalizer = fit_normalizer(ds, settings["normalize"], queries, raw_block, executor)
    t = time.perf_counter()
    if all_rows:
        Xn, y, _ = read_rows(ds, normalizer, queries, raw_block, executor=executor)
        basis, basis_rows = Xn, np.arange(int(ds.query_ptr[q0]), int(ds.query_ptr[q1]))
    else:
        basis, basis_rows = draw_basis(ds, m, seed, normalizer=normalizer, queries=queries, block_bytes=raw_block,
                                       executor=executor)
        Xn = y = None
    log.info("CLSRRank: %d basis rows (%s) of %d training rows, %d features; %s read in %.2f s", m,
             "all of them" if all_rows else f"drawn with seed {seed}", n_train, d,
             "the rows" if all_rows else "the basis", time.perf_counter() - t)
    return ClsrProblem(ds=ds, valid=valid, valid_y=read_labels(valid) if valid is not None else None, queries=queries,
                       n_train=n_train, normalizer=normalizer, m=m, basis=basis, basis_rows=basis_rows, Xn=Xn, y=y,
                       base_passes=1 if all_rows else 0, kernel=kernel, degree=degree, coef0=coef0,
                       raw_block=raw_block, rows_max=max(1, CHUNK_BYTES // (8 * m)), executor=executor)


class ClsrPath:
    """The (gamma, lambda) path of a CLSRRank run: per gamma one pass builds the m x m system
    (:class:`_Sums`), then every lambda is a direct solve (:func:`_solve`), scored on the
    validation data. ``candidates``, ``alphas`` and ``maps`` hold every point in path order;
    ``passes`` the passes over the data. With a checkpoint directory, each finished gamma is kept
    there, and a resumed run skips the gammas found."""

    def __init__(self, problem, settings):
        self.problem, self.settings = problem, settings
        self.candidates, self.alphas, self.maps, self.passes = [], [], [], problem.base_passes
        # what a checkpoint must match: the model does not depend on the budget
        self.ck_config = {k: v for k, v in settings.items() if k != "memory_budget"}

    def run(self, checkpoint, resume):
        done = self.resume(checkpoint) if checkpoint is not None and resume else 0
        p = self.problem
        for gi, g in enumerate(self.settings["gamma_path"]):
            fmap = KernelBasisMap(p.basis, p.kernel, g, p.degree, p.coef0, basis_rows=p.basis_rows)
            if gi < done:  # solved before the interruption: its candidates came from the checkpoint
                self.maps += [fmap] * len(self.settings["lambda_path"])
                continue
            self.solve_gamma(fmap)
            if checkpoint is not None:  # this gamma's pass and solves are kept
                self.save(checkpoint, gi)

    def resume(self, checkpoint):
        """The number of gammas the checkpoint in ``checkpoint`` holds done (their candidates and
        solutions taken from it), 0 without one."""
        from streamrank.state.checkpoint import read_checkpoint
        ck = read_checkpoint(checkpoint, config=self.ck_config, fingerprint=self.problem.ds.fingerprint,
                             warn=log.warning)
        if ck is None:
            return 0
        sc, n_gammas = ck["scalars"], len(self.settings["gamma_path"])
        # the gammas' passes of the earlier run (its read of the rows is this run's again)
        done, self.candidates = int(sc["gammas_done"]), list(sc["candidates"])
        self.passes += int(sc["gamma_passes"])
        self.alphas = [np.asarray(ck["extra"][f"alpha{i}"], np.float64) for i in range(len(self.candidates))]
        if not 0 <= done <= n_gammas or len(self.candidates) != done * len(self.settings["lambda_path"]) or \
                any(a.shape != (self.problem.m,) for a in self.alphas):
            raise FormatError(f"{checkpoint}: the CLSRRank checkpoint is inconsistent ({done} gammas done, "
                              f"{len(self.candidates)} candidates); start again with resume=False")
        log.info("resuming from %s: %d of %d gammas done", checkpoint, done, n_gammas)
        return done

    def system(self, fmap):
        """The sums G0, b0, c0, S of gamma ``fmap``: from the rows in memory, or one pass."""
        p = self.problem
        q0, q1 = p.queries
        qp_all = p.ds.query_ptr[q0:q1 + 1] - p.ds.query_ptr[q0]
        if p.Xn is not None:  # all rows as the basis: they are in memory already
            sums = _Sums(p.m, qp_all, p.rows_max)
            sums.add(fmap, p.Xn, p.y, 0, q1 - q0, int(p.ds.query_ptr[q0]))
        else:
            sums, _ = executor_or_local(p.executor).run(
                _System(fmap, p.normalizer, qp_all, q0, p.rows_max, p.n_train),
                partitioned_stream(p.ds, p.executor, block_bytes=p.raw_block, queries=p.queries))
            self.passes += 1
        return sums.system()

    def solve_gamma(self, fmap):
        """Every lambda of gamma ``fmap``'s system, each a candidate (scored on the validation data)."""
        p, metric, lams = self.problem, self.settings["select_metric"], self.settings["lambda_path"]
        t = time.perf_counter()
        system = self.system(fmap)
        secs = time.perf_counter() - t
        log.info("gamma %s: the %d x %d system from %d rows in %.2f s (%.0f rows/s)",
                 "callable" if callable(p.kernel) else f"{fmap.gamma_:g}", p.m, p.m, system["rows"], secs,
                 system["rows"] / max(secs, 1e-9))
        for lm in lams:
            alpha, obj = _solve(system, lm)
            cand = {"lambda": lm, "gamma": fmap.gamma_, "objective": obj, "passes": self.passes,
                    "seconds": secs / len(lams)}
            if p.valid is not None:
                model = LinearModel(alpha, p.normalizer, n_features=p.ds.n_features, fmap=fmap)
                cand["valid_" + metric] = validation_score(model, p.valid, p.valid_y, metric, block_bytes=p.raw_block,
                                                           executor=p.executor,
                                                           convention=self.settings.get("convention", "letor4"))
            log.info("  lambda=%g: objective %.6e%s", lm, obj,
                     f", validation {metric} {cand['valid_' + metric]:.4f}" if p.valid is not None else "")
            self.candidates.append(cand)
            self.alphas.append(alpha)
            self.maps.append(fmap)

    def save(self, checkpoint, gi):
        """The checkpoint after gamma ``gi``: its candidates and solutions, the passes of the
        gammas (the rows' read, when they are the basis, is a resumed run's own again)."""
        from streamrank.state.checkpoint import write_checkpoint
        write_checkpoint(checkpoint, config=self.ck_config, fingerprint=self.problem.ds.fingerprint,
                         scalars={"gammas_done": gi + 1, "candidates": self.candidates,
                                  "gamma_passes": self.passes - self.problem.base_passes},
                         w=np.zeros(0), g=np.zeros(0), extra={f"alpha{i}": a for i, a in enumerate(self.alphas)})

    def best(self):
        """The chosen point: the best on the validation data, else the last."""
        key = "valid_" + self.settings["select_metric"]
        if self.problem.valid is None:
            return len(self.candidates) - 1
        return max(range(len(self.candidates)), key=lambda i: self.candidates[i][key])


def clsr_model(problem, settings, path, t_start):
    """(the chosen point's LinearModel with its KernelBasisMap, the run's summary)."""
    best = path.best()
    chosen = path.candidates[best]
    summary = {"method": "clsr", "objective": chosen["objective"], "lambda": chosen["lambda"],
               "gamma": chosen["gamma"], "C": None, "passes": path.passes, "basis": problem.m,
               "candidates": path.candidates, "seconds": time.perf_counter() - t_start, "kernel": settings["kernel"],
               "iterations": 0, "grad_norm": 0.0}
    report_grid_edges(summary, settings["lambda_path"], settings["gamma_path"], c_name="lambda")
    model = LinearModel(path.alphas[best], problem.normalizer, n_features=problem.ds.n_features, fmap=path.maps[best],
                        config=settings, training=summary, fingerprint=problem.ds.fingerprint,
                        levels=np.unique(read_labels(problem.ds)).tolist())
    return model, summary
