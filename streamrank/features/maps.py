"""Feature maps phi: model-input rows -> the rows the linear RankSVM is trained on (paper 000).

The protocol (every map):

- ``fit(data, *, queries=None, block_bytes=None, memory_budget=None, normalizer=None)``: ``data``
  is a :class:`~streamrank.Dataset` (ONE streamed pass; ``normalizer`` maps its raw float32
  rows to model inputs first, ``queries`` limits the pass to a range of queries) or a 2-D array
  of model-input rows. Returns self.
- ``transform(X, dtype=np.float32, out=None, row0=0)``: phi of every row of X, computed in
  float64 and returned in ``dtype``; ``row0`` is the index of X's first row in its dataset
  (0 for an array on its own). Rows map independently and bit-identically: the row with index r
  gets the same features whichever block it arrives in, because its products are always
  computed in the tile of :func:`~streamrank.features.kernels.tile_rows` rows that holds r, at position
  r mod T (see :mod:`streamrank.features.kernels`, "Row independence"). The temporaries are one tile's
  whatever the size of X (:meth:`work_bytes`).
- ``n_features_`` (input width), ``n_components_`` (output width), ``params()`` (JSON-able:
  everything that defines the map, with a sha256 of the fitted arrays, for cache keys and
  model files), ``to_h5(group)`` and :func:`streamrank.features.map_files.load_map` (``kind``
  attribute dispatch). No pickle.

Maps:

- :class:`IdentityMap`: phi(x) = x (the linear model).
- :class:`Nystroem` (paper 000 eq. 16-18, Algorithm 1): m landmark rows drawn uniformly from the
  stream by seeded reservoir sampling; W = K(L, L) = U S U^T; phi(x) = K(x, L) U_k S_k^{-1/2}
  (times a fixed rotation that makes the projection triangular: see the class).
- :class:`RandomFourier` (paper 000 eq. 21, Algorithm 2): phi(x) = sqrt(2/m) cos(x Omega + b).
"""

import hashlib
import json
import math

import numpy as np

from streamrank._native.blas import one_thread
from streamrank.errors import InputError, ParameterError
from streamrank.execution.executor import Pass, executor_or_local, partitioned_stream
from streamrank.features.kernels import (
    ROW_ALIGN,
    SHIFT_INVARIANT,
    PreparedKernel,
    aligned_empty,
    check_kernel,
    check_row0,
    parallel_tiles,
    tile_rows,
    tile_threads,
)
from streamrank.settings import DEFAULT_COMPONENTS

FORMAT_VERSION = 1

# Rows drawn beside the landmarks, by a reservoir of their own (seed stream CHECK_STREAM), on which
# Nystroem.kernel_rows_error measures the rounding of kernel rows: landmark rows lie in the span of
# W and underestimate it (MQ2008 Fold1, gamma 2^-2: 5e-6 on the landmarks, 1.6e-5 on other rows)
CHECK_ROWS = 512
CHECK_STREAM = 0x4B52

# Output columns per block of the Nystroem projection product (see Nystroem._prepare).
PROJECTION_BLOCK_COLS = 160


def _int_param(value, name, lo, example):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ParameterError(f"{name} must be an integer >= {lo}; got {value!r}. Use {name}={example}")
    return int(value)


def _sha256(arrays):
    h = hashlib.sha256()
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.data)
    return h.hexdigest()


class _LandmarkDraw(Pass):
    """The reservoirs' pass (item (block, start, stop)): the sampled rows of each block, normalised,
    into their slots, for each sample ``(k, seed)`` of ``samples`` (the landmarks; the rows that
    check the precision of kernel rows, :meth:`Nystroem.kernel_rows_error`). One partition (the
    draws follow the rows in order); it stops once no later row can be drawn."""

    one_partition = True

    def __init__(self, samples, d, normalizer, row0, n):
        self.samples, self.d, self.normalizer, self.row0, self.n = samples, d, normalizer, row0, n

    def start(self):
        return {"res": [Reservoir(k, seed) for k, seed in self.samples],
                "L": [np.zeros((k, self.d)) for k, _ in self.samples]}

    def done(self, carry):
        return all(res.next >= self.n for res in carry["res"])  # no later row can be drawn: skip the rest

    def step(self, carry, item):
        for res, L in zip(carry["res"], carry["L"]):
            self._draw(res, L, item)

    def _draw(self, res, L, item):
        block, start, stop = item
        a, b = start - self.row0, stop - self.row0
        if res.next >= b:  # no row of this sample in this block: it need not be normalised
            res.accept(b)
            return
        rows, slots = res.accept(b)
        if self.normalizer is None:
            for r, s in zip(rows, slots):  # in row order: a later row replaces an earlier one
                L[s] = block.X[r - a]
            return
        # only the queries that hold a drawn row are normalised (a query_minmax row needs its
        # query; the others are row by row, so the values are the same bits as the whole block's):
        # a float64 copy of the whole block would take twice its bytes beside the stream's buffers
        qp = np.asarray(block.query_ptr, np.int64)
        local = np.asarray(rows, np.int64) - a
        qs = np.searchsorted(qp, local, side="right") - 1
        done_q, Xq = -1, None
        for r, s, q in zip(local.tolist(), slots, qs.tolist()):
            if q != done_q:
                qa, qb = int(qp[q]), int(qp[q + 1])
                Xq = self.normalizer.transform(block.X[qa:qb], np.array([0, qb - qa], np.int64))
                done_q = q
            L[s] = Xq[r - qa]


class Reservoir:
    """Uniform sample of ``k`` rows of a stream, drawn by Algorithm L (Li 1994) from one numpy
    Generator.

    Rows are consumed in row order; the random draws happen per accepted row (slot, then the
    weight update, then the skip length), so the sample depends on (seed, k, number of rows)
    only, never on how the rows were split into blocks. Expected draws: O(k (1 + log(n / k))).
    The first k rows fill slots 0..k-1; with fewer than k rows, all rows are the sample.
    """

    def __init__(self, k, seed):
        self.k = int(k)
        self.rng = np.random.default_rng(seed)
        self.n_seen = 0
        self.next = 0  # index of the next accepted row
        self._w = 1.0
        self.slot_row = np.full(self.k, -1, np.int64)

    def _u(self):
        return 1.0 - self.rng.random()  # in (0, 1]: log is finite

    def _advance(self):
        """Compute the next accepted row after an acceptance at ``self.next``."""
        if self.next < self.k - 1:
            self.next += 1
            return
        self._w *= math.exp(math.log(self._u()) / self.k)
        lu = math.log(self._u())
        if self._w >= 1.0:
            skip = 0.0
        elif self._w <= 0.0:
            skip = math.inf
        else:
            skip = math.floor(lu / math.log1p(-self._w))
        self.next = self.next + 1 + int(skip) if skip < 2.0**62 else 2**62

    def accept(self, stop):
        """(rows, slots) accepted among the rows ``n_seen:stop`` in order; consumes them."""
        rows, slots = [], []
        while self.next < stop:
            r = self.next
            s = r if r < self.k else int(self.rng.integers(self.k))
            self.slot_row[s] = r
            rows.append(r)
            slots.append(s)
            self._advance()
        self.n_seen = max(self.n_seen, stop)
        return rows, slots


class FeatureMap:
    """Base class: the shared transform loop, checks and HDF5 plumbing (see the module doc)."""

    kind = None
    # scores in chunks of kernel values as wide as the support (exact kernel, CLSRRank): no row
    # of mapped features on its own (LinearModel.mapped_rows)
    scores_in_chunks = False

    def __init__(self):
        self.n_features_ = None
        self.n_components_ = None

    # -- to override -----------------------------------------------------------------------------
    def _arrays(self):
        """The fitted arrays, in a fixed order (hashed, saved)."""
        return {}

    def _config(self):
        return {}

    def _widths(self):
        """Columns of the float64 work buffers per row (besides the input copy)."""
        return [self.n_components_]

    def _map_tile(self, Xt, bufs, p, dest):
        """Map the tile ``Xt`` (float64, zero rows around the data); write its rows
        p:p + len(dest) into ``dest``."""
        raise NotImplementedError

    # -- protocol --------------------------------------------------------------------------------
    @property
    def fitted(self):
        return self.n_components_ is not None

    def _check_fitted(self):
        if not self.fitted:
            raise RuntimeError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def params(self):
        """JSON-able dict of everything that defines the map (sha256 None before fit)."""
        p = {"kind": self.kind, **self._config(), "n_features": self.n_features_,
             "output_dim": self.n_components_}
        p["sha256"] = _sha256(self._arrays()) if self.fitted else None
        return p

    def _check_X(self, X):
        self._check_fitted()
        X = np.asarray(X)
        if X.ndim != 2:
            raise InputError(f"X must be a 2-D array of rows; got shape {X.shape}")
        if X.shape[1] != self.n_features_:
            raise InputError(f"X has {X.shape[1]} features, but the {self.kind} feature map is expecting "
                             f"{self.n_features_} features as input (the rows it was fitted on); give rows of "
                             f"{self.n_features_} features")
        return X

    def chunk_rows(self):
        """Rows per transform tile (:func:`~streamrank.features.kernels.tile_rows` of the map's widths)."""
        return tile_rows(self.n_features_ + sum(self._widths()))

    def work_bytes(self, n_rows=None):
        """Peak bytes of float64 temporaries of one transform call (output not included): one
        tile per tile thread, whatever the number of rows (none for no rows)."""
        self._check_fitted()
        if n_rows == 0:
            return 0
        return 8 * self.chunk_rows() * (self.n_features_ + sum(self._widths())) * tile_threads()

    def transform(self, X, dtype=np.float32, out=None, row0=0):
        """phi(X) as ``dtype`` ``(len(X), n_components_)`` (into ``out`` when given); ``row0`` is
        the index of X's first row in its dataset (module docstring)."""
        X = self._check_X(X)
        row0 = check_row0(row0)
        n, k = X.shape[0], self.n_components_
        if out is None:
            out = np.empty((n, k), dtype)
        elif out.shape != (n, k):
            raise ValueError(f"out has shape {out.shape}, expected {(n, k)}")
        if n == 0:
            return out
        T = self.chunk_rows()
        widths = self._widths()
        parallel_tiles(X, row0, T, lambda Xt, s, e, p, bufs: self._map_tile(Xt, bufs, p, out[s:e]),
                       lambda: [aligned_empty((T, w)) for w in widths])
        return out

    def chunked_scores(self, Xn, w, row0, dtype, chunk_bytes, read_only=False):
        """sum_j w_j phi_j(x) for the rows of Xn: phi in ``dtype`` computed in chunks of at most
        ``chunk_bytes`` (whole transform tiles, chunk edges on tile edges of the absolute rows, so
        no tile is computed twice), each row's sum in ``_qprod.rows_dot``'s fixed order;
        ``read_only``: hand the chunks over read-only (the specialisation training compiled)."""
        from streamrank._native import qprod as _qprod
        Xn = self._check_X(Xn)
        row0 = check_row0(row0)
        w = np.ascontiguousarray(w, np.float64)
        n = Xn.shape[0]
        out = np.empty(n)
        T = self.chunk_rows()
        rows = max(T, chunk_bytes // (np.dtype(dtype).itemsize * max(self.n_components_, 1)) // T * T)
        K = np.empty((min(rows, n), self.n_components_), dtype)
        s = 0
        while s < n:
            e = min(n, s + rows - (row0 + s) % rows)
            Kc = self.transform(Xn[s:e], dtype, out=K[:e - s], row0=row0 + s)
            Kc.flags.writeable = not read_only
            _qprod.rows_dot(Kc, w, out[s:e])
            Kc.flags.writeable = True
            s = e
        return out

    def score_rows(self, Xn, row0=0):
        """The rows a model's scores multiply by :meth:`score_weights`: phi(Xn) in float32, the
        features training saw (a Nystroem map: its float64 kernel rows)."""
        return self.transform(Xn, np.float32, row0=row0)

    def score_weights(self, w):
        """The weights :meth:`score_rows` are multiplied by: w itself (Nystroem: P w)."""
        return np.asarray(w, np.float64)

    def fit_transform(self, X, dtype=np.float32):
        return self.fit(X).transform(X, dtype)

    def to_h5(self, group):
        """Write the map into an (empty) HDF5 group: attrs ``kind``, ``version``, ``params``
        (JSON of :meth:`params`) and one dataset per fitted array."""
        self._check_fitted()
        group.attrs["kind"] = self.kind
        group.attrs["version"] = FORMAT_VERSION
        group.attrs["params"] = json.dumps(self.params(), sort_keys=True)
        for name, a in self._arrays().items():
            group.create_dataset(name, data=a)

    @classmethod
    def from_h5(cls, group):
        version = int(group.attrs.get("version", FORMAT_VERSION))
        kind = _attr_str(group.attrs.get("kind"))
        if kind != cls.kind or version != FORMAT_VERSION:
            raise _format_error(group, f"feature map kind {kind!r} version {version} cannot be read as "
                                       f"{cls.kind!r} version {FORMAT_VERSION}")
        p = json.loads(_attr_str(group.attrs["params"]))
        m = cls._from_params(p)
        arrays = {}
        for name in m._array_names():
            if name not in group:
                raise _format_error(group, f"feature map dataset {name!r} is missing")
            arrays[name] = group[name][()]
        try:
            m._set_arrays(p, arrays)
        except (ValueError, KeyError, IndexError) as e:
            raise _format_error(group, f"feature map is inconsistent ({e})") from None
        if _sha256(m._arrays()) != p["sha256"]:
            raise _format_error(group, "feature map arrays do not match their recorded sha256 (corrupted)")
        return m

    def _array_names(self):
        return ()

    def __repr__(self):
        cfg = ", ".join(f"{k}={v!r}" for k, v in self._config().items() if k != "kind")
        return f"{type(self).__name__}({cfg})"

    # -- fitting helpers -------------------------------------------------------------------------
    @staticmethod
    def _n_features_of(data):
        if isinstance(data, (int, np.integer)) and not isinstance(data, bool):
            return int(data)
        if hasattr(data, "n_features") and hasattr(data, "stream"):
            return int(data.n_features)
        X = np.asarray(data)
        if X.ndim != 2:
            raise InputError(f"data must be a Dataset or a 2-D array of rows; got shape {X.shape}")
        return X.shape[1]


def plan_bytes(method, n_features, n_components):
    """(fit, kept) bytes of a ``method`` map's float64 arrays on ``n_features`` inputs, known
    before its fit (the memory plan asks here): ``fit`` the peak while it is fitted, ``kept`` its
    fitted arrays and one transform's tiles (:meth:`FeatureMap.work_bytes`) for the passes.

    Nystroem (m landmarks, k <= m kept eigenpairs): the landmarks and the kernel's copy of them
    (2 m d), and eigh's peak: W, numpy's working copy of it, LAPACK's dsyevd workspace (1 + 6 m +
    2 m^2) and the eigenvectors, 5 m^2, counted as 5.5 x 8 m^2 bytes with the allocator's slack
    (docs/design.md, "Measurements behind the code"); then the projection and its column blocks
    (at most 2 m k). RFF: Omega as drawn (m x d) and transposed (d x m), then Omega and b."""
    d, m = int(n_features), int(n_components)
    if method == "nystroem":
        fit, kept, widths = 8 * (2 * m * d) + 44 * m * m, 8 * (2 * m * d + 2 * m * m + m), 2 * m
    elif method == "rff":
        fit, kept, widths = 8 * (2 * m * d + m), 8 * (m * d + m), m
    else:
        return 0, 0
    w = d + widths
    return fit, kept + 8 * tile_rows(w) * w * tile_threads()


def _attr_str(v):
    return v.decode() if isinstance(v, bytes) else (None if v is None else str(v))


def _format_error(group, what):
    from streamrank.errors import FormatError
    where = f"{group.file.filename}:{group.name}" if hasattr(group, "file") else "feature map"
    return FormatError(f"{where}: {what}; train the model again")


# -- identity ------------------------------------------------------------------------------------
class IdentityMap(FeatureMap):
    """phi(x) = x: the linear model. transform returns X itself when it already has ``dtype``."""

    kind = "identity"

    def fit(self, data, *, queries=None, block_bytes=None, memory_budget=None, normalizer=None, executor=None):
        self.n_features_ = self.n_components_ = self._n_features_of(data)
        return self

    def transform(self, X, dtype=np.float32, out=None, row0=0):
        X = self._check_X(X)
        check_row0(row0)
        if out is None:
            return np.asarray(X, dtype=dtype)
        out[...] = X
        return out

    def work_bytes(self, n_rows=None):
        return 0

    @classmethod
    def _from_params(cls, p):
        return cls()

    def _set_arrays(self, p, arrays):
        self.n_features_ = self.n_components_ = p["n_features"]


# -- Nystroem ------------------------------------------------------------------------------------
def projection_blocks(P):
    """(j0, j1, r0): the output column blocks [j0, j1) of x P, each read from rows r0: of P. Block
    [j0, j1) needs only rows j0: of a lower-trapezoidal projection (r0 = j0), so the product costs
    about (1 + 1/blocks) / 2 of a dense one; any other projection is read from row 0. (BLAS trmm
    would do the same in one call, but scipy's trmm lives in a second OpenBLAS whose thread pool
    spins against numpy's when calls alternate.) Only the features are formed this way (transform,
    phi training rows): scores never form them (:meth:`Nystroem.scores`)."""
    k = P.shape[1]
    triangular = not np.any(np.triu(P, 1))
    n_blocks = max(1, min(16, -(-k // PROJECTION_BLOCK_COLS)))
    inner = (np.linspace(0, k, n_blocks + 1)[1:-1].astype(np.int64) // ROW_ALIGN) * ROW_ALIGN
    edges = np.unique(np.r_[0, inner, k])
    return [(int(j0), int(j1), int(j0) if triangular else 0) for j0, j1 in zip(edges[:-1], edges[1:])]


class Nystroem(FeatureMap):
    """Nystroem features (paper 000 eq. 16-18, Algorithm 1).

    Parameters
    ----------
    kernel : rbf | laplacian | poly | sigmoid | linear
    gamma : float or None (1 / n_features); degree, coef0 : poly / sigmoid parameters
    n_components : int
        m, the number of landmark rows (all rows when the data has fewer).
    rank : int or None
        Keep at most this many eigenpairs of W (default: all above the floor).
    seed : int
        Seeds the reservoir sample of landmarks.

    Fitted attributes: ``landmarks_`` float64 (m, d) (model-input rows), ``landmark_rows_``
    (their row numbers in the dataset, or in the array), ``eigenvalues_`` (the kept ones,
    descending), ``projection_`` float64 (m, k), ``n_components_`` = k; phi(x) = K(x, L) projection_.

    The projection is U_k S_k^{-1/2} Q, eq. 18 followed by a fixed rotation: Q is the orthogonal
    factor of the QR decomposition (U_k S_k^{-1/2})^T = Q R, so ``projection_`` = R^T is lower
    trapezoidal. phi(x).phi(y) = K(x, L) W_k^+ K(L, y) is unchanged (Q Q^T = I), and so is an
    L2-regularised linear model on phi (w -> Q^T w keeps scores and ||w||). What changes is the
    cost: the product with a triangular matrix takes about half the flops of a dense one, and it
    is the dominant cost of the map (2 n m k flops dense).

    The eigenvalue floor: eigenpairs with lambda <= max|lambda| * m * eps64 are dropped. ``eigh``
    is backward stable, i.e. it returns the exact eigenpairs of W + E with ||E||_2 of the order of
    m * eps * ||W||_2; eigenvalues below that are indistinguishable from 0 (W is PSD in exact
    arithmetic, so they are rounding noise, often negative), and their S^{-1/2} would amplify
    noise by up to 1/sqrt(eps) in phi. It is the tolerance numpy's ``matrix_rank`` and ``pinv``
    use. Duplicate landmarks (common in LETOR data) give exact zeros that this removes.

    sigmoid is not PSD: W may have negative eigenvalues, which the floor drops, so phi(x).phi(y)
    approximates the positive part of the kernel (Nystroem needs S^{-1/2}).
    """

    kind = "nystroem"

    def __init__(self, kernel="rbf", gamma=None, degree=3, coef0=1.0, n_components=DEFAULT_COMPONENTS, rank=None,
                 seed=0):
        super().__init__()
        check_kernel(kernel, 1.0 if gamma is None else gamma, degree, coef0)
        self.kernel, self.gamma, self.degree, self.coef0 = kernel, gamma, degree, coef0
        self.n_components = _int_param(n_components, "n_components", 1, 1000)
        if rank is not None:
            rank = _int_param(rank, "rank", 1, min(self.n_components, 1000))
            if rank > self.n_components:
                raise ParameterError(f"rank must be <= the number of components ({self.n_components}); got "
                                     f"{rank}. Use rank={self.n_components} or rank=None")
        self.rank = rank
        self.seed = _int_param(seed, "seed", 0, 0)
        self.gamma_ = None
        self.landmarks_ = self.landmark_rows_ = self.eigenvalues_ = self.projection_ = None
        self.check_rows_ = None  # drawn by fit, not saved (kernel_rows_error)
        self._kernel = self._blocks = self._row0 = None

    def _config(self):
        return {"kernel": self.kernel, "gamma": self.gamma_ if self.gamma_ is not None else self.gamma,
                "degree": int(self.degree), "coef0": float(self.coef0), "n_components": self.n_components,
                "rank": self.rank, "seed": self.seed,
                "n_landmarks": None if self.landmarks_ is None else int(self.landmarks_.shape[0])}

    def _array_names(self):
        return ("landmarks", "landmark_rows", "eigenvalues", "projection")

    def _arrays(self):
        if self.landmarks_ is None:
            return {}
        return {"landmarks": self.landmarks_, "landmark_rows": self.landmark_rows_,
                "eigenvalues": self.eigenvalues_, "projection": self.projection_}

    # -- fit -------------------------------------------------------------------------------------
    def fit(self, data, *, queries=None, block_bytes=None, memory_budget=None, normalizer=None, executor=None):
        """Draw the landmarks in one pass over ``data`` (Dataset or 2-D array; a Dataset's pass runs
        through ``executor``), then W, eigh."""
        d = self._n_features_of(data)
        _, gamma, degree, coef0 = check_kernel(self.kernel, self.gamma, self.degree, self.coef0, n_features=d)
        samples = [(self.n_components, self.seed), (CHECK_ROWS, [self.seed, CHECK_STREAM])]
        if hasattr(data, "stream"):
            stream = partitioned_stream(data, executor, block_bytes=block_bytes, memory_budget=memory_budget,
                                        queries=queries)
            n = stream.n_rows
            row0 = int(data.query_ptr[stream.bounds[0]])
            carry, _ = executor_or_local(executor).run(_LandmarkDraw(samples, d, normalizer, row0, n), stream)
            (res, check), (L, C) = carry["res"], carry["L"]
        else:
            if normalizer is not None:
                raise ValueError("normalizer applies to a Dataset's raw rows; pass arrays already normalised")
            X = np.asarray(data)
            n, row0 = X.shape[0], 0
            res, check = (Reservoir(k, seed) for k, seed in samples)
            L, C = np.zeros((self.n_components, d)), np.zeros((CHECK_ROWS, d))
            for r_, out in ((res, L), (check, C)):
                rows, slots = r_.accept(n)
                for r, s in zip(rows, slots):
                    out[s] = X[r]
        self.check_rows_ = np.ascontiguousarray(C[:min(CHECK_ROWS, n)])
        m = min(self.n_components, n)  # the first min(m, n) rows fill the slots
        if m == 0:
            raise InputError("cannot fit a Nystroem map on no rows (the data or the query range is empty)")
        self.n_features_ = d
        self.gamma_, self.degree, self.coef0 = gamma, degree, coef0
        self._set_landmarks(np.ascontiguousarray(L[:m]), res.slot_row[:m] + row0)
        return self

    def _set_landmarks(self, L, rows):
        self.landmarks_ = L
        self.landmark_rows_ = np.asarray(rows, np.int64)
        W = PreparedKernel(L, self.kernel, self.gamma_, self.degree, self.coef0)(L)
        # LAPACK's factorisations on one BLAS thread: with two, eigh's and qr's bits (and so the
        # map's) depend on the thread count
        with one_thread():
            lam, U = np.linalg.eigh(W)  # ascending; reads the lower triangle
        del W  # each m x m matrix is dropped once used: the fit's peak is eigh's (fit_bytes)
        lam, U = lam[::-1], U[:, ::-1]
        m = L.shape[0]
        floor = float(np.abs(lam).max()) * m * np.finfo(np.float64).eps
        k = int(np.count_nonzero(lam > floor))  # a prefix: lam is descending
        if self.rank is not None:
            k = min(k, self.rank)
        if k == 0:
            raise InputError(f"Nystroem: the {m} x {m} landmark kernel matrix has no eigenvalue above the "
                             f"floor {floor:.3g} (all landmark rows alike, or a kernel that vanishes on "
                             f"them); change kernel or gamma, or the data")
        P = U[:, :k] / np.sqrt(lam[:k])  # paper 000 eq. 18: phi(x) = K(x, L) U_k S_k^{-1/2}
        del U
        # Rotate by the orthogonal Q of P^T = Q R: P Q = R^T is lower trapezoidal, and the
        # product with it costs half the flops of a dense one (module docstring of Nystroem).
        with one_thread():
            R = np.linalg.qr(P.T, mode="r")
        del P
        self.eigenvalues_ = np.ascontiguousarray(lam[:k])
        self.projection_ = np.ascontiguousarray(R.T)
        del R
        self.n_components_ = k
        self._prepare()

    def _prepare(self):
        L, P = self.landmarks_, self.projection_
        self._kernel = PreparedKernel(L, self.kernel, self.gamma_, self.degree, self.coef0)
        spans = projection_blocks(P)
        self._blocks = [(j0, j1, np.ascontiguousarray(P[r0:, j0:j1])) for j0, j1, r0 in spans]
        self._row0 = [r0 for _, _, r0 in spans]

    # -- transform -------------------------------------------------------------------------------
    def _widths(self):
        return [self.landmarks_.shape[0], max(j1 - j0 for j0, j1, _ in self._blocks)]

    def _map_tile(self, Xt, bufs, p, dest):
        Kc, zbuf = bufs
        self._kernel.into(Xt, Kc)
        T, r = Xt.shape[0], dest.shape[0]
        for (j0, j1, Pj), i0 in zip(self._blocks, self._row0):
            Z = zbuf.reshape(-1)[:T * (j1 - j0)].reshape(T, j1 - j0)  # starts where zbuf does: aligned
            np.matmul(Kc[:, i0:], Pj, out=Z)
            with np.errstate(over="ignore"):  # past float32's range is inf: the score writer refuses it
                dest[:, j0:j1] = Z[p:p + r]

    # -- scoring ---------------------------------------------------------------------------------
    def landmark_weights(self, w):
        """v = P w (float64, one weight per landmark): phi(x) . w = K(x, L) P w = K(x, L) . v, so a
        model scores a row with one m-vector product and never forms phi (eq. 18 with the weights
        moved onto the landmarks). Each v_i is summed in ``_qprod.rows_dot``'s fixed order."""
        from streamrank._native import qprod as _qprod
        self._check_fitted()
        w = np.ascontiguousarray(w, np.float64)
        if w.shape != (self.n_components_,):
            raise ValueError(f"w has shape {w.shape}, expected ({self.n_components_},)")
        v = np.empty(self.projection_.shape[0])
        _qprod.rows_dot(self.projection_, w, v)
        return v

    def score_weights(self, w):
        return self.landmark_weights(w)

    def score_rows(self, Xn, row0=0):
        return self.kernel_rows(Xn, row0)

    def kernel_rows(self, Xn, row0=0, out=None):
        """K(x, L) ``(len(Xn), m)``, float64 (or into ``out``, whose dtype rounds them): the values
        :meth:`scores` multiplies by P w, each row computed in its transform tile (module
        docstring), so the same bits in any block."""
        Xn = self._check_X(Xn)
        row0 = check_row0(row0)
        m = self.landmarks_.shape[0]
        if out is None:
            out = np.empty((Xn.shape[0], m))
        elif out.shape != (Xn.shape[0], m):
            raise ValueError(f"out has shape {out.shape}, expected {(Xn.shape[0], m)}")

        def put(K, s, e):
            out[s:e] = K
        self._kernel_tiles(Xn, row0, put)
        return out

    def _kernel_tiles(self, Xn, row0, use):
        """``use(K, s, e)`` with K(x, L) (float64) of the rows s:e of the checked Xn, per transform
        tile (the tile that holds each row's dataset index, so the same bits in any block), the
        tiles side by side on :func:`~streamrank.features.kernels.parallel_tiles`' threads."""
        if Xn.shape[0]:
            T, m = self.chunk_rows(), self.landmarks_.shape[0]

            def body(Xt, s, e, p, bufs):
                self._kernel.into(Xt, bufs[0])
                use(bufs[0][p:p + e - s], s, e)
            parallel_tiles(Xn, row0, T, body, lambda: [aligned_empty((T, m))])

    def kernel_rows_error(self, seed=0):
        """(scores, sums): the relative rounding error of training on float32 kernel rows K32 with
        the projection applied to vectors, K32 (P w) and P^T (K32^T v), against the float64 oracle
        (K P) w and (K P)^T v, for a seeded random w and v, measured on ``check_rows_`` (a uniform
        sample of the training rows drawn with the landmarks; the landmarks themselves for a map
        loaded from a file) as ||error||_2 / ||oracle||_2. Rounding K to float32 errs by
        2^-24 of each value, and P carries that error into phi amplified by up to ||P|| ||K|| /
        ||K P||, which grows as W's smallest kept eigenvalue shrinks (||P||^2 = 1 / lambda_min):
        float32 phi itself errs by 2^-24 of phi."""
        k = self.n_components_
        rows = self.check_rows_ if self.check_rows_ is not None and len(self.check_rows_) else self.landmarks_
        K = self.kernel_rows(rows)
        rng = np.random.default_rng([int(seed), CHECK_STREAM])  # w and v: the check rows' stream, reused
        w, v = rng.standard_normal(k), rng.standard_normal(K.shape[0])
        K32 = K.astype(np.float32).astype(np.float64)
        P = self.projection_
        with one_thread():
            s64, g64 = K @ (P @ w), P.T @ (K.T @ v)
            s32, g32 = K32 @ (P @ w), P.T @ (K32.T @ v)
        rel = [float(np.linalg.norm(a - b) / max(np.linalg.norm(b), np.finfo(float).tiny))
               for a, b in ((s32, s64), (g32, g64))]
        return rel[0], rel[1]

    def scores(self, Xn, w, row0=0):
        """phi(x) . w = K(x, L) . (P w) for the rows of Xn, in float64 throughout (phi is not formed,
        so not rounded to float32): per transform tile, K(x, L) then each row's product with
        :meth:`landmark_weights` in ``_qprod.rows_dot``'s order; the bits of
        ``rows_dot(kernel_rows(Xn), landmark_weights(w))`` in any block. Costs K(x, L) and 2 m
        flops a row (the projection, 2 m k flops a row dense, is applied once to w)."""
        from streamrank._native import qprod as _qprod
        Xn = self._check_X(Xn)
        row0 = check_row0(row0)
        v = self.landmark_weights(w)
        out = np.empty(Xn.shape[0])
        self._kernel_tiles(Xn, row0, lambda K, s, e: _qprod.rows_dot_here(K, v, out[s:e]))
        return out

    # -- h5 --------------------------------------------------------------------------------------
    @classmethod
    def _from_params(cls, p):
        return cls(kernel=p["kernel"], gamma=p["gamma"], degree=p["degree"], coef0=p["coef0"],
                   n_components=p["n_components"], rank=p["rank"], seed=p["seed"])

    def _set_arrays(self, p, arrays):
        self.n_features_ = p["n_features"]
        self.gamma_ = float(p["gamma"])
        self.landmarks_ = np.ascontiguousarray(arrays["landmarks"], np.float64)
        self.landmark_rows_ = np.asarray(arrays["landmark_rows"], np.int64)
        self.eigenvalues_ = np.ascontiguousarray(arrays["eigenvalues"], np.float64)
        self.projection_ = np.ascontiguousarray(arrays["projection"], np.float64)
        self.n_components_ = self.projection_.shape[1]
        if self.projection_.shape[0] != self.landmarks_.shape[0]:
            raise ValueError("feature map projection and landmarks disagree in shape")
        self._prepare()


# -- random Fourier features ---------------------------------------------------------------------
class RandomFourier(FeatureMap):
    """Random Fourier features (paper 000 eq. 21, Algorithm 2): phi(x) = sqrt(2/m) cos(x Omega + b).

    rbf exp(-gamma ||x - y||^2): the columns of Omega (d x m) ~ N(0, 2 gamma I) (the Fourier
    transform of the kernel); laplacian exp(-gamma ||x - y||_1): independent Cauchy(0, gamma)
    coordinates (the kernel is a product of exp(-gamma |t|), whose transform is Cauchy with scale
    gamma). b ~ U[0, 2 pi). Omega and b come from two independent streams spawned from ``seed``,
    drawn one component at a time, so a map with m components uses the first m (omega_j, b_j) of
    a map with more (nested: convergence in m can be measured on one draw).

    ``fit`` needs only the number of features (no pass over the data); it accepts a Dataset, an
    array or an int.
    """

    kind = "rff"

    def __init__(self, kernel="rbf", gamma=None, n_components=DEFAULT_COMPONENTS, seed=0):
        super().__init__()
        if kernel not in SHIFT_INVARIANT:
            raise ParameterError(f"random Fourier features need a shift-invariant kernel (rbf or laplacian); "
                                 f"got {kernel!r}. Use kernel=rbf, or method=nystroem for {kernel}")
        check_kernel(kernel, 1.0 if gamma is None else gamma)
        self.kernel, self.gamma = kernel, gamma
        self.n_components = _int_param(n_components, "n_components", 1, 1000)
        self.seed = _int_param(seed, "seed", 0, 0)
        self.gamma_ = None
        self.omega_ = self.offset_ = None

    def _config(self):
        return {"kernel": self.kernel, "gamma": self.gamma_ if self.gamma_ is not None else self.gamma,
                "n_components": self.n_components, "seed": self.seed}

    def _array_names(self):
        return ("omega", "b")

    def _arrays(self):
        if self.omega_ is None:
            return {}
        return {"omega": self.omega_, "b": self.offset_}

    def fit(self, data, *, queries=None, block_bytes=None, memory_budget=None, normalizer=None, executor=None):
        d = self._n_features_of(data)
        _, gamma, _, _ = check_kernel(self.kernel, self.gamma, n_features=d)
        m = self.n_components
        s_omega, s_b = np.random.SeedSequence(self.seed).spawn(2)
        r_omega, r_b = np.random.default_rng(s_omega), np.random.default_rng(s_b)
        if self.kernel == "rbf":
            omega = r_omega.standard_normal((m, d)) * math.sqrt(2.0 * gamma)
        else:
            omega = r_omega.standard_cauchy((m, d)) * gamma
        self.omega_ = np.ascontiguousarray(omega.T)  # (d, m): component j is column j
        self.offset_ = r_b.uniform(0.0, 2.0 * math.pi, m)
        self.n_features_, self.n_components_, self.gamma_ = d, m, gamma
        return self

    def _map_tile(self, Xt, bufs, p, dest):
        (Z,) = bufs
        np.matmul(Xt, self.omega_, out=Z)
        Z += self.offset_
        np.cos(Z, out=Z)
        Z *= math.sqrt(2.0 / self.n_components_)
        dest[...] = Z[p:p + dest.shape[0]]

    @classmethod
    def _from_params(cls, p):
        return cls(kernel=p["kernel"], gamma=p["gamma"], n_components=p["n_components"], seed=p["seed"])

    def _set_arrays(self, p, arrays):
        self.n_features_ = p["n_features"]
        self.gamma_ = float(p["gamma"])
        self.omega_ = np.ascontiguousarray(arrays["omega"], np.float64)
        self.offset_ = np.ascontiguousarray(arrays["b"], np.float64)
        self.n_components_ = self.omega_.shape[1]


def make_map(method, *, kernel="rbf", gamma=None, degree=3, coef0=1.0, n_components=DEFAULT_COMPONENTS, rank=None,
             seed=0):
    """The map for a ``--method``: primal -> identity, nystroem, rff."""
    if method in ("primal", "linear", "identity"):
        return IdentityMap()
    if method == "nystroem":
        return Nystroem(kernel, gamma, degree, coef0, n_components, rank, seed)
    if method == "rff":
        return RandomFourier(kernel, gamma, n_components, seed)
    raise ParameterError(f"method must be primal, nystroem or rff for a feature map; got {method!r}. "
                         f"Use method=nystroem")
