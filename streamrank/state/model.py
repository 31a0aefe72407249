"""The model file (HDF5 format ``streamrank-model`` version 2) and prediction.

Layout: root attrs ``format``, ``version``, ``created_by``, ``method``, ``n_features`` (input
width), ``config`` (JSON: every training setting used), ``training`` (JSON: objective,
gradient norm, iterations, passes, seconds, chosen C, every candidate's validation score),
``fingerprint`` (the training data's), ``levels`` (JSON label levels); dataset ``w`` (float64);
group ``normalize`` (attr ``kind``; ``mean``, ``scale`` for zscore); group ``feature_map``
(attr ``kind``: ``identity`` for the linear model, ``nystroem`` or ``rff`` with their fitted
arrays and parameters, written by the map's ``to_h5``); ``content_sha256``
(:mod:`streamrank.io.h5digest`: every attribute and dataset, checked when the file loads).
Version 1 is the same without ``content_sha256`` and still loads. Version 3 adds
``input_features`` (JSON, 1-based ids of the input columns the model reads, in order) and
``input_width``; only a model trained on a subset of the features (``--features``) writes it.
"""

import json
import logging
from pathlib import Path

import h5py
import numpy as np

from streamrank._version import __version__
from streamrank.errors import FormatError, InputError, ParameterError
from streamrank.execution.executor import Pass, executor_or_local, partitioned_stream
from streamrank.faultpoints import faultpoint
from streamrank.features.normalize import Normalizer
from streamrank.io.atomic import ensure_space, written
from streamrank.io.budget import BUFFERS, remote_copies
from streamrank.io.h5digest import DIGEST_ATTR, declared_bytes, file_digest
from streamrank.settings import DEFAULT_MEMORY_BUDGET
from streamrank.state.model_checks import check_model

log = logging.getLogger("streamrank.state.model")

# per row scored: its score (float64), kept for the input's row order
SCORE_BYTES_PER_ROW = 8
# per byte of a raw float32 block being scored: the block and the one read ahead, and its float64
# normalised copy (2); a feature map adds its float32 output
SCORE_BYTES_PER_BLOCK_BYTE = BUFFERS + 2

FORMAT_NAME = "streamrank-model"
FORMAT_VERSION = 2
# version 3: version 2 plus ``input_features`` (1-based ids, JSON) and ``input_width``, written only
# by a model that reads a subset of its input columns (train --features)
SUBSET_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)  # version 1: the same layout without content_sha256


def settled_resident():
    """The resident set a plan starts from, once what it need not hold is let go (io.budget): freed
    arrays above MMAP_THRESHOLD go back to the system from now on, and what the allocator keeps of
    earlier phases (a grid's or cv's previous runs) is released; the kernels' runtime is loaded and
    LLVM's code pages, touched when numba was imported, are dropped (the first call of each kernel
    brings a part back: STREAM_SLACK holds it)."""
    from streamrank.io import budget as io_budget
    io_budget.tune_allocator()
    io_budget.release_freed()
    io_budget.load_kernel_runtime()
    io_budget.drop_idle_library_pages()
    return io_budget.resident_bytes()


class _ModelScores(Pass):
    """The model's scores of one block of a dataset stream (item (block, start, stop))."""

    returns = True

    def __init__(self, model):
        self.model = model

    def step(self, carry, item):
        block, a, b = item
        return a, b, self.model.decision_function(block.X, block.query_ptr, row0=a, extra="ignore")

    def merge(self, total, carry):
        return None


class LinearModel:
    """A trained scoring function s(x) = phi(normalize(x)) . w, phi the feature map (identity for
    the linear model; Nystroem or random Fourier features, whose float32 output training used)."""

    def __init__(self, w, normalizer, *, n_features, fmap=None, config=None, training=None, fingerprint="",
                 levels=(), input_features=None, input_width=None):
        self.w = np.asarray(w, np.float64)
        # the input columns the model reads (0-based, in order; ``train --features``), of inputs
        # ``input_width`` wide; None: every column
        self.input_features = None if input_features is None else np.asarray(input_features, np.int64)
        self.input_width = None if input_features is None else int(input_width)
        self.normalizer = normalizer
        self.fmap = fmap if fmap is not None and fmap.kind != "identity" else None
        self.n_features = int(n_features)
        self.config = dict(config or {})
        self.training = dict(training or {})
        self.fingerprint = fingerprint
        self.levels = [float(v) for v in levels]
        self.content_sha256 = None  # the file's digest, once loaded from one (export names its source)

    # -- scoring --------------------------------------------------------------------------------
    @property
    def input_columns(self):
        """Features of the rows the model reads: its training data's width (``input_width`` for a
        model trained on a subset of them)."""
        return self.n_features if self.input_features is None else self.input_width

    def _width_error(self, where, d, n):
        """Arrays of another width are refused, as scikit-learn's estimators refuse them (a
        dataset's rows follow SVMlight's rule instead: :meth:`score_stream`)."""
        fix = (f"pass X[:, :{n}] if the others are not the model's, or retrain on all {d}" if d > n else
               f"pad X with zero columns to {n} if the missing features are 0 (SVMlight's rule for trailing "
               f"features), or retrain on {d}")
        # scikit-learn's words (its estimator checks match "X has 1 features, but \w+ is expecting 4")
        return InputError(f"{where} has {d} features, but {type(self).__name__} is expecting {n} features as input; "
                          f"{fix}")

    def _pad(self, X, where="X", extra="error"):
        """``X`` as rows of the model's width. ``extra="error"`` (arrays): any other width is an
        error; ``"ignore"`` (a dataset's blocks, whose width the caller checked): SVMlight's
        rule, missing trailing features are 0 and features past the model's are not read."""
        X = np.asarray(X)
        if X.ndim != 2:
            raise InputError(f"{where} must be a 2-D array of rows; got shape {X.shape}")
        d = X.shape[1]
        if d != self.n_features and extra != "ignore":
            raise self._width_error(where, d, self.n_features)
        if d > self.n_features:
            return X[:, :self.n_features]
        if d < self.n_features:  # missing trailing features are zeros, as in SVMlight
            Xp = np.zeros((X.shape[0], self.n_features), X.dtype if X.dtype.kind == "f" else np.float64)
            Xp[:, :d] = X
            return Xp
        return X

    @property
    def method(self):
        return "primal" if self.fmap is None else self.fmap.kind

    def decision_function(self, X, query_ptr=None, row0=0, extra="error"):
        """Scores of the rows of X. ``row0`` is the index of X's first row in its dataset: a
        feature map computes the row with index r in the tile that holds r, so a row's score is
        the same bits whichever block it is scored in (:mod:`streamrank.features.kernels`, "Row
        independence"); 0 for an array on its own."""
        if self.input_features is not None:
            from streamrank.io.feature_subset import take_columns
            X = np.asarray(X)
            if X.ndim != 2:
                raise InputError(f"X must be a 2-D array of rows; got shape {X.shape}")
            if X.shape[1] != self.input_width and extra != "ignore":
                raise self._width_error("X", X.shape[1], self.input_width)
            X = take_columns(X, self.input_features)
        X = self._pad(X, extra=extra)
        if self._scores_raw_rows(X):
            # x.w straight from the float32 rows: the float64 copy would hold the same values, and
            # rows_dot converts each entry exactly as it multiplies (same bits, a third of the memory)
            out = np.empty(X.shape[0])
            from streamrank._native import qprod
            qprod.rows_dot(X, self.w, out)
            return out
        if self.fmap is not None and hasattr(self.fmap, "scores"):  # scores by tiles or chunks itself (kernel maps)
            return self.fmap.scores(self.normalizer.transform(X, query_ptr), self.w, row0=row0)
        return self.dot_features(self._features(X, query_ptr, row0))

    def dot_features(self, F):
        """Scores of rows ``F`` already normalised and mapped (:meth:`mapped_rows`): F . v in a
        fixed order per row (a BLAS gemv sums a row differently by the call's row count), v the
        map's weights for those rows (``score_weights``: w, or a Nystroem map's P w)."""
        out = np.empty(F.shape[0])
        from streamrank._native import qprod
        qprod.rows_dot(F, self.w if self.fmap is None else self.fmap.score_weights(self.w), out)
        return out

    def _features(self, X, query_ptr, row0):
        Xn = self.normalizer.transform(X, query_ptr)
        if self.fmap is not None:  # the rows the map's scores multiply (``score_rows``)
            Xn = self.fmap.score_rows(Xn, row0=row0)
        return Xn

    def mapped_rows(self, X, query_ptr=None, row0=0, extra="error", wide=False):
        """The rows of X as the scores' products read them (normalised and mapped: float32 phi, or
        a Nystroem map's float64 K(x, L)), for scoring the same rows with many weights
        (:meth:`dot_features` gives the bits of :meth:`decision_function`); only for models with a
        feature map that maps rows on its own. The exact kernel's or CLSRRank's rows are as wide
        as their support: only with ``wide`` (the caller has planned their memory)."""
        if self.fmap is None or (self.fmap.scores_in_chunks and not wide) or self.input_features is not None:
            raise ValueError("mapped_rows is for models with a row feature map and no input subset")
        return self._features(self._pad(X, extra=extra), query_ptr, row0)

    def _scores_raw_rows(self, X=None):
        """Whether rows are scored as they are read (no normalisation, no map, C-ordered float32)."""
        return (self.fmap is None and self.normalizer.kind == "none"
                and (X is None or (X.dtype == np.float32 and X.flags.c_contiguous)))

    def predict_dataset(self, ds, *, memory_budget=DEFAULT_MEMORY_BUDGET, executor=None, row_bytes=0):
        """Scores of every row of ``ds`` in the input's row order (streamed, in blocks that keep
        the process inside ``memory_budget``, :meth:`score_block_bytes`; ``row_bytes``: what the
        caller keeps per row beside the scores, planned with them)."""
        out = np.empty(ds.n_rows)
        row = ds.row

        def put(k, item):
            a, b, s = item
            out[row[a:b]] = s

        # the scores in input order beside those of the stream, and the rows' input positions (int64)
        self.score_stream(ds, block_bytes=self.score_block_bytes(ds, memory_budget, row_bytes + 16), executor=executor,
                          collect=put)
        return out

    def score_block_bytes(self, ds, memory_budget, row_bytes=0):
        """Bytes of a raw block for scoring ``ds`` inside ``memory_budget``, besides what is
        resident (the model's arrays among it), the map's tiles, the scores of every row (and the
        caller's ``row_bytes`` per row: an evaluation's labels and sorted copies) and the block's
        copies (io.budget); ParameterError with the smallest budget that works, before any
        block is read, when a block holding the largest query cannot fit."""
        from streamrank.io import budget as io_budget
        from streamrank.io.query_stream import BLOCK_SHARE_OF_BUDGET
        from streamrank.units import budget_bytes, format_size
        budget = budget_bytes(memory_budget)
        per_byte = BUFFERS if self._scores_raw_rows() else SCORE_BYTES_PER_BLOCK_BYTE
        per_byte += remote_copies(ds)
        extra = 0
        if self.fmap is not None:
            extra = self.fmap.work_bytes()  # one transform's tiles (or the exact map's chunk of kernel rows)
            if not hasattr(self.fmap, "scores"):
                per_byte += self.w.size / max(ds.n_features, 1)  # the map's float32 columns per raw one
            elif self.fmap.scores_in_chunks:  # the chunk of kernel values chunked_scores holds (exact, CLSRRank)
                import sys
                extra += getattr(sys.modules[type(self.fmap).__module__], "SCORE_CHUNK_BYTES", 0)
        resident = settled_resident()
        sizes = np.diff(ds.query_ptr)
        qmax = int(sizes.max()) if sizes.size else 0
        raw_row = 4 * ds.n_features + 4
        need = resident + io_budget.STREAM_SLACK + io_budget.HEADROOM * (
            ds.n_rows * (SCORE_BYTES_PER_ROW + row_bytes) + extra + per_byte * qmax * raw_row)
        if need > budget:
            need = -(-int(need) // 10**6)
            if budget >= resident + io_budget.STREAM_SLACK:
                raise ParameterError(f"memory_budget {format_size(budget)} is too small to score {ds.name}: with "
                                     f"{format_size(resident)} resident, the scores of its {ds.n_rows:,} rows and a "
                                     f"block holding its largest query ({qmax:,} rows) need {need} MB; use "
                                     f"memory_budget={need}MB")
            # below what the process holds before any work no plan can keep the budget: the
            # smallest blocks (tests use such budgets for many blocks), and the budget that works
            log.warning("memory budget %s is below the %s this process holds before any work: peak RSS will "
                        "exceed it; use memory_budget=%dMB", format_size(budget),
                        format_size(resident + io_budget.STREAM_SLACK), need)
            return max(1, int(budget * BLOCK_SHARE_OF_BUDGET))
        return io_budget.block_bytes(budget, ds.n_rows, per_row=SCORE_BYTES_PER_ROW + row_bytes,
                                     per_block_byte=per_byte, extra=extra, resident=resident)

    def score_stream(self, ds, *, block_bytes=None, memory_budget=None, executor=None, collect=None,
                     quiet_width=False):
        """Scores of every row of ``ds`` in its stored (query-grouped) order, one streamed pass
        through the executor; with ``collect``, each block's (start, stop, scores) is handed to
        ``collect(k, item)`` instead and None is returned. A dataset of another width is read by
        SVMlight's rule (:meth:`width_note`), said in one log line unless ``quiet_width`` (the
        caller said it; the CLI refuses an HDF5 dataset of another width without --pad-features)."""
        note = None if quiet_width else self.width_note(ds)
        if note:
            log.warning("%s", note)
        out = None
        if collect is None:
            out = np.empty(ds.n_rows)

            def collect(k, item):
                a, b, s = item
                out[a:b] = s

        executor_or_local(executor).run(_ModelScores(self), partitioned_stream(ds, executor, block_bytes=block_bytes,
                                                                      memory_budget=memory_budget), collect=collect)
        return out

    def width_note(self, ds, name=None):
        """One line on how rows of ``ds`` of another width are read, or None when the widths agree:
        SVMlight's rule, missing trailing features are 0, and features past the model's width are
        not read (SVMlight's classifier drops them too: no weight)."""
        width, d, name = self.input_columns, ds.n_features, name or ds.name
        if d == width:
            return None
        if d > width:
            return (f"{name} has {d} features, the model {width}: features {width + 1} to {d} are not in the model "
                    f"and are ignored (SVMlight's rule)")
        return (f"{name} has {d} features, the model {width}: features {d + 1} to {width} are read as 0 "
                f"(SVMlight's rule: missing trailing features are 0)")

    # -- file ---------------------------------------------------------------------------------------
    def save(self, path):
        """Write atomically (temporary name, fsync, rename; a URL: one upload of the finished file),
        with a sha256 over the whole content."""
        from streamrank.io.urls import location
        path = location(path)
        if not np.all(np.isfinite(self.w)):
            raise InputError(f"{path}: the model's weights are not all finite numbers; it is not written "
                             f"(training diverged: check the data for extreme values, or use normalize=zscore)")
        arrays = [self.w] + [getattr(self.normalizer, k) for k in ("mean_", "scale_")] + \
            (list(self.fmap._arrays().values()) if self.fmap is not None else [])
        ensure_space(path, sum(np.asarray(a).nbytes for a in arrays if a is not None) +
                     len(json.dumps(self.config)) + len(json.dumps(self.training)))
        with written(path) as tmp, h5py.File(tmp, "w") as f:
            self._write(f)
            f.flush()
            faultpoint("model-write")
        return path

    def content_digest(self):
        """The ``content_sha256`` the model's file would carry (written to an in-memory HDF5 image)."""
        import uuid
        with h5py.File(f"streamrank-digest-{uuid.uuid4().hex}.h5", "w", driver="core", backing_store=False) as f:
            self._write(f)
            return str(f.attrs[DIGEST_ATTR])

    def _write(self, f):
        """The model's attributes and datasets into an open, empty HDF5 file, its digest last."""
        a = f.attrs
        a["format"] = FORMAT_NAME
        # version 3 only when the model reads a subset of its inputs: a reader of version 2
        # would ignore the subset and score other columns
        a["version"] = FORMAT_VERSION if self.input_features is None else SUBSET_VERSION
        if self.input_features is not None:
            a["input_features"] = json.dumps([int(c) + 1 for c in self.input_features])
            a["input_width"] = self.input_width
        a["created_by"] = f"streamrank {__version__}"
        a["method"] = self.method
        a["n_features"] = self.n_features
        a["config"] = json.dumps(self.config, sort_keys=True)
        a["training"] = json.dumps(self.training, sort_keys=True)
        a["fingerprint"] = self.fingerprint
        a["levels"] = json.dumps(self.levels)
        f.create_dataset("w", data=self.w)
        self.normalizer.to_h5(f.create_group("normalize"))
        if self.fmap is None:
            f.create_group("feature_map").attrs["kind"] = "identity"
        else:
            self.fmap.to_h5(f.create_group("feature_map"))
        a[DIGEST_ATTR] = file_digest(f)


def _model_source(path):
    """(what h5py opens, what messages call the model, its size in bytes) of a local path, or of
    a URL (:mod:`streamrank.io.urls`), whose object is fetched whole: a model is small."""
    from streamrank.io.urls import is_url, read_bytes, shown
    if is_url(path):
        import io
        data = read_bytes(str(path))
        if not data.startswith(b"\x89HDF\r\n\x1a\n"):
            raise FormatError(f"{shown(path)}: not an HDF5 file, so not a streamrank model; train one with "
                              f"streamrank train")
        return io.BytesIO(data), shown(path), len(data)
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if not h5py.is_hdf5(path):
        raise FormatError(f"{path}: not an HDF5 file, so not a streamrank model; train one with streamrank train")
    return path, path, path.stat().st_size


def load(path):
    """Read a model file written by :meth:`LinearModel.save` (or ``RankSVM.save``): a path, or a
    URL (``s3://...``: :mod:`streamrank.io.urls`)."""
    source, path, size = _model_source(path)
    try:
        f = h5py.File(source, "r")
    except OSError as exc:
        raise FormatError(f"{path}: cannot be read as a streamrank model ({exc}); the file is damaged, "
                          f"train the model again") from None
    with f:
        try:
            version = _check_model_format(f, path)
            # sizes first: a file whose datasets claim more bytes than it has is refused unread
            if declared_bytes(f) > size:
                raise FormatError(f"{path}: the model file's datasets declare {declared_bytes(f):,} bytes, more "
                                  f"than the file's {size:,}; it is damaged, train the model again")
            if version >= 2 and file_digest(f) != f.attrs.get(DIGEST_ATTR):
                raise FormatError(f"{path}: the model file's content does not match its sha256 (damaged or "
                                  f"changed after it was written); train the model again")
            from streamrank.features.map_files import load_map
            fmap = load_map(f["feature_map"])
            n_features = f.attrs["n_features"]
            if not isinstance(n_features, (int, np.integer)) or not 0 < n_features < 2 ** 40:
                raise FormatError(f"{path}: the model's n_features is {n_features!r}; train the model again")
            n_features = int(n_features)
            width = n_features if fmap.kind == "identity" else int(fmap.n_components_)
            map_width = getattr(fmap, "n_features_", None) or n_features  # the identity map keeps none
            if f["w"].shape != (width,) or map_width != n_features:
                raise FormatError(f"{path}: the model file is inconsistent (w has shape {f['w'].shape}, n_features "
                                  f"is {n_features}, the feature map takes {map_width}); train the model again")
            w = f["w"][:]
            if not np.all(np.isfinite(w)):
                raise FormatError(f"{path}: the model's weights are not all finite; train the model again")
            cols, width = None, None
            if version >= SUBSET_VERSION:
                cols = np.asarray(json.loads(f.attrs["input_features"]), np.int64) - 1
                width = int(f.attrs["input_width"])
                if cols.shape != (n_features,) or cols.min() < 0 or cols.max() >= width:
                    raise FormatError(f"{path}: the model's input features {list(cols + 1)} do not fit its "
                                      f"{n_features} features of {width}-feature rows; train the model again")
            model = LinearModel(w, Normalizer.from_h5(f["normalize"]), fmap=fmap,
                                n_features=n_features, config=json.loads(f.attrs["config"]),
                                training=json.loads(f.attrs["training"]), fingerprint=str(f.attrs["fingerprint"]),
                                levels=json.loads(f.attrs["levels"]), input_features=cols, input_width=width)
            # finite arrays, positive divisors, consistent shapes, finite scores on finite rows
            check_model(model, path)
            # the file's digest (version 1 files carry none), for exports that name their source
            model.content_sha256 = str(f.attrs[DIGEST_ATTR]) if DIGEST_ATTR in f.attrs else None
            return model
        except FormatError:
            raise
        except (KeyError, OSError, ValueError, TypeError, RuntimeError) as exc:
            raise FormatError(f"{path}: the model file is incomplete or damaged ({exc}); train the model again") \
                from None


def _check_model_format(f, path):
    """The model file's format version, after its format attribute is checked."""
    fmt = f.attrs.get("format")
    if isinstance(fmt, bytes):
        fmt = fmt.decode("utf-8", "replace")
    if fmt != FORMAT_NAME:
        what = "a streamrank dataset, not a model" if fmt == "streamrank-dataset" else f"format {fmt!r}"
        raise FormatError(f"{path}: not a streamrank model ({what}); train one with streamrank train")
    version = f.attrs.get("version", -1)
    version = int(version) if isinstance(version, (int, np.integer)) else -1
    if version not in READABLE_VERSIONS:
        fix = ("it was written by a newer streamrank; upgrade with: pip install -U streamrank"
               if version > FORMAT_VERSION else "train the model again with this streamrank")
        raise FormatError(f"{path}: model format version {version} is not supported (this streamrank reads "
                          f"{', '.join(map(str, READABLE_VERSIONS))}); {fix}")
    return version
