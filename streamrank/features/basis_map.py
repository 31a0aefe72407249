"""CLSRRank's scoring function as a feature map: phi(x) = K(x, B) over basis rows B (paper 002).

A CLSRRank model scores f(x) = sum_t alpha_t K(x, x_t) (paper 002, theorem 1) over its basis rows
x_t: all training rows (the paper's setting) or m of them drawn as the Nystroem landmarks are.
That is a linear model over phi(x) = K(x, B) with weights alpha, saved as the ordinary
``streamrank-model`` with a ``feature_map`` group of kind ``basis``: the basis as normalised
float64 model inputs, the kernel and its parameters.

Unlike the exact kernel RankSVM's map, K need not be symmetric or positive semi-definite (the
paper's point): every named kernel is accepted, sigmoid included, and in the Python API any
callable ``K(A, B) -> (len(A), len(B))`` array. A model with a callable kernel scores in memory
but cannot be saved: streamrank files hold data, never code (no pickle), so ``to_h5`` refuses it.

Kernel values stay float64 (no rounding to float32: the m x m system is solved directly, not by
CG over a stored matrix), computed per row tile by absolute row index like every map, so a row's
score does not depend on the block it is scored in.
"""

import numpy as np

from streamrank.errors import ParameterError
from streamrank.execution.executor import executor_or_local, partitioned_stream
from streamrank.features.kernels import PreparedKernel, check_kernel
from streamrank.features.maps import FeatureMap, _LandmarkDraw

# float64 kernel values K(x, B) held at a time while scoring
SCORE_CHUNK_BYTES = 32 << 20


def kernel_name(kernel):
    """How a kernel is recorded: its name, or ``callable:<qualified name>`` for a function."""
    return kernel if isinstance(kernel, str) else f"callable:{getattr(kernel, '__qualname__', type(kernel).__name__)}"


class KernelBasisMap(FeatureMap):
    """phi(x) = K(x, B) (float64) for basis rows B (normalised model inputs)."""

    kind = "basis"
    scores_in_chunks = True

    def __init__(self, basis=None, kernel="rbf", gamma=None, degree=3, coef0=1.0, basis_rows=None):
        super().__init__()
        self.kernel, self.gamma_, self.degree, self.coef0 = kernel, gamma, degree, coef0
        self.basis_ = None
        self.basis_rows_ = None
        self._prep = None
        if basis is not None:
            self._set_basis(np.asarray(basis, np.float64), basis_rows)

    def _set_basis(self, B, rows=None):
        if B.ndim != 2 or B.shape[0] == 0:
            raise ParameterError(f"the basis must be a non-empty 2-D array of rows; got shape {B.shape}")
        if callable(self.kernel):
            self.gamma_ = None
        else:
            self.kernel, self.gamma_, self.degree, self.coef0 = check_kernel(
                self.kernel, self.gamma_, self.degree, self.coef0, n_features=B.shape[1])
        self.basis_ = np.ascontiguousarray(B, np.float64)
        self.basis_rows_ = np.full(B.shape[0], -1, np.int64) if rows is None else np.asarray(rows, np.int64)
        self.n_features_ = B.shape[1]
        self.n_components_ = B.shape[0]
        self._prep = None

    # -- FeatureMap hooks ----------------------------------------------------------------------
    def _arrays(self):
        return {"basis": self.basis_, "basis_rows": self.basis_rows_}

    def _array_names(self):
        return ("basis", "basis_rows")

    def _config(self):
        return {"kernel": kernel_name(self.kernel), "gamma": self.gamma_, "degree": int(self.degree),
                "coef0": float(self.coef0)}

    def _map_tile(self, Xt, bufs, p, dest):
        if callable(self.kernel):
            K = np.asarray(self.kernel(Xt, self.basis_), np.float64)
            if K.shape != (Xt.shape[0], self.n_components_):
                raise ParameterError(f"the kernel callable returned shape {K.shape} for K(A, B) with A of "
                                     f"{Xt.shape[0]} rows and B of {self.n_components_}; it must return "
                                     f"(len(A), len(B))")
            dest[...] = K[p:p + len(dest)]
            return
        if self._prep is None:
            self._prep = PreparedKernel(self.basis_, self.kernel, self.gamma_, self.degree, self.coef0)
        self._prep.into(Xt, bufs[0])
        dest[...] = bufs[0][p:p + len(dest)]

    def to_h5(self, group):
        if callable(self.kernel):
            raise ParameterError(f"a model with a callable kernel ({kernel_name(self.kernel)}) cannot be saved: "
                                 f"streamrank files hold data, not code (no pickle); train with a named kernel "
                                 f"(kernel=rbf, laplacian, poly, sigmoid or linear) to save the model")
        super().to_h5(group)

    @classmethod
    def _from_params(cls, p):
        return cls(None, p["kernel"], p["gamma"], p["degree"], p["coef0"])

    def _set_arrays(self, p, arrays):
        self._set_basis(arrays["basis"], arrays["basis_rows"])

    # -- scoring ---------------------------------------------------------------------------------
    def scores(self, Xn, w, row0=0):
        """f(x) = sum_t w_t K(x, b_t) for the rows of Xn (float64 kernel values, in chunks:
        ``FeatureMap.chunked_scores``)."""
        return self.chunked_scores(Xn, w, row0, np.float64, SCORE_CHUNK_BYTES)


def clsr_plan(budget, resident, *, m, d, n_train, largest_query, all_rows=False, validating=False,
              chunk_bytes=32 << 20, store_copies=0):
    """Bytes of a raw block for CLSRRank with ``m`` basis rows inside ``budget`` (which bounds the
    whole process, ``resident`` included), or ParameterError with the smallest budget that works,
    before any pass. The run holds (training.clsr): the m x m system, its factor and a product
    (24 m^2) and the basis (8 m d; with every row as the basis, the rows too, 8 n d); the group
    buffer of centred kernel rows (``chunk_bytes``, or the largest query's 8 m a row); a transform's
    tiles, or with ``validating`` while the validation rows are scored the chunk of kernel values
    (SCORE_CHUNK_BYTES);
    and per raw block byte its read-ahead twin and its float64 normalised copy (4). A block holds
    the largest query whole."""
    from streamrank.features.kernels import tile_rows, tile_threads
    from streamrank.io.budget import BUFFERS, HEADROOM, STREAM_SLACK
    from streamrank.io.query_stream import BLOCK_SHARE_OF_BUDGET
    from streamrank.units import format_size
    system = 24 * m * m + 8 * m * d + (8 * n_train * d if all_rows else 0)
    group = max(chunk_bytes, 8 * m * largest_query)
    tiles = 8 * tile_rows(d + m) * (d + m) * tile_threads()
    scoring = max(tiles, SCORE_CHUNK_BYTES) if validating else tiles
    fixed = system + group + scoring
    per_byte = BUFFERS + 2 + store_copies  # a store's known-parts cache: one more copy (io.budget.remote_copies)
    qbytes = largest_query * (4 * d + 4)
    avail = (budget - resident - STREAM_SLACK) / HEADROOM - fixed
    if avail < per_byte * qbytes:
        need = -(-int(resident + STREAM_SLACK + HEADROOM * (fixed + per_byte * qbytes)) // 10**6)
        # the most basis rows that fit: 24 m^2 + 8 m (d + chunk rows) within what is left
        room = (budget - resident - STREAM_SLACK) / HEADROOM - scoring - chunk_bytes - per_byte * qbytes \
            - (8 * n_train * d if all_rows else 0)
        fit = int((-8 * d + ((8 * d) ** 2 + 96 * max(room, 0)) ** 0.5) / 48) if room > 0 else 0
        raise ParameterError(f"memory_budget {format_size(budget)} is too small for CLSRRank with {m:,} basis rows: "
                             f"with {format_size(resident)} resident, its {m:,} x {m:,} system"
                             f"{' and the training rows' if all_rows else ''} ({format_size(system)}), its buffers of "
                             f"kernel rows and a block holding the largest query ({largest_query:,} rows) need "
                             f"{need} MB; use memory_budget={need}MB"
                             + (f" or components={fit}" if fit >= 10 and fit < m else ""))
    return max(1, int(min(budget * BLOCK_SHARE_OF_BUDGET, avail / per_byte)))


def draw_basis(ds, m, seed, *, normalizer=None, queries=None, block_bytes=None, executor=None):
    """(rows (min(m, n), d) float64 normalised, their row indices): m training rows drawn uniformly
    by the seeded reservoir the Nystroem landmarks use (one streamed pass, which stops once no
    later row can be drawn)."""
    stream = partitioned_stream(ds, executor, block_bytes=block_bytes, queries=queries)
    n = stream.n_rows
    row0 = int(ds.query_ptr[stream.bounds[0]])
    carry, _ = executor_or_local(executor).run(_LandmarkDraw([(int(m), seed)], ds.n_features, normalizer, row0, n),
                                               stream)
    (res,), (L,) = carry["res"], carry["L"]
    k = min(int(m), n)
    return np.ascontiguousarray(L[:k]), res.slot_row[:k] + row0
