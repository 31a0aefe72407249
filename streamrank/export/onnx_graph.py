"""Every streamrank model as an ONNX graph: raw float32 rows in, one float32 score per row out.

The graph computes what :meth:`LinearModel.decision_function
<streamrank.state.model.LinearModel.decision_function>` computes, in the same order and precision:

1. ``X`` float32 ``[N, input_width]`` (any N); a model trained on ``--features`` gathers its
   columns (Gather, axis 1);
2. Cast to float64: everything after this runs in float64, as streamrank's does (an rbf distance
   ||x||^2 + ||b||^2 - 2 x.b on raw features near 1e4 loses every digit in float32);
3. the normalisation: zscore (x - mean) * (1 / scale) with streamrank's own reciprocal;
   query_minmax (x - min_q) * (1 / (max_q - min_q)) per query, 0 for a feature constant within the
   query, from the second input ``query_id`` (Unique's inverse indices, then ScatterElements
   with reduction min / max, opset 18);
4. the map and the weights, in row chunks (a Scan over chunks of at most :func:`chunk_rows` rows,
   so the temporaries are bounded whatever N; a batch smaller than a chunk is one chunk of N rows):

   - primal: x . w (no chunks: nothing wider than the input);
   - Nystroem (paper 000 eq. 18): K(x, L) . (P w), float64 throughout: phi(x) . w = K(x, L) P w,
     so the projection is applied once to w (a constant) and never to a row, as streamrank does;
   - random Fourier features (paper 000 eq. 21): phi = float32(sqrt(2/m) cos(x Omega + b)) . w;
   - exact kernel (paper 004 eq. 2.9, 3.13): float32(K(x, S)) . beta over the support rows S;
   - CLSRRank (paper 002 theorem 1): K(x, B) . alpha over the basis rows B, float64 throughout;

   each float32(...) is a Cast to float and back: streamrank's maps hand float32 features to the
   weights, and the graph rounds them the same way, so the scores agree to float64 rounding;
   the kernels are streamrank's (:mod:`streamrank.features.kernels`): rbf from
   ||x||^2 + ||b||^2 + x.(-2 B^T), clipped at 0 (a Nystroem graph, scored in float64, fuses it:
   exp(2 gamma x.b - gamma ||b||^2 - gamma ||x||^2) from one product, :func:`_kernel`); laplacian
   from L1 distances over a (chunk, m, d) difference; poly (gamma x.b + coef0)^degree; sigmoid
   tanh(gamma x.b + coef0); linear x.b;
5. ``score`` float32 ``[N]``: the float64 score rounded once.

Standard operators only (opset :data:`OPSET`, IR version :data:`IR_VERSION`), checked with
``onnx.checker``; what each input and output means, the method, the settings, the source model's
content digest, the input width and the feature names are in the model's metadata_props.

Cost (docs/formats.md): a Nystroem graph does streamrank's flops, the kernel's float64 GEMM in
onnxruntime's MLAS; laplacian's difference is written and read once more than streamrank's numba
kernel does, within 32 MB a step.
"""

import json
import math

import numpy as np

from streamrank._version import __version__
from streamrank.errors import ParameterError
from streamrank.export.common import input_width, kind, map_kernel, model_digest, settings

# opset 18: ScatterElements' min / max reductions (query_minmax) and Pad, ReduceSum,
# ReduceSumSquare with their axes as inputs; IR version 8 is the oldest that carries opset 18
OPSET = 18
IR_VERSION = 8
INPUT = "X"
QUERY_INPUT = "query_id"
OUTPUT = "score"

# float64 temporaries per row chunk of the map (kernel values, their slices and the features):
# a chunk of 16 MB keeps the products large enough for onnxruntime's GEMM (a 400-row chunk for
# an m = 2,000 exact or CLSRRank basis) and the graph's memory independent of the batch
CHUNK_BYTES = 16 << 20
# a Nystroem graph's temporaries (kernel values, then their product with P w) per chunk: about 128
# rows at m = 2,000, whose values stay in the core's cache from one operator to the next
# (docs/design.md, "Measurements behind the code")
NYSTROEM_CHUNK_BYTES = 4 << 20
# laplacian's L1 distances are a (chunk, m, d) difference and its absolute value: at most this many
# bytes each, whatever the batch (the naive graph holds N x m x d doubles twice)
LAPLACIAN_CHUNK_BYTES = 32 << 20
MAX_CHUNK_ROWS = 4096
# a serialized ModelProto is one protobuf message, at most 2 GiB: the constants with room for the rest
MAX_CONSTANT_BYTES = (2 << 30) - (16 << 20)


def _onnx():
    try:
        import onnx
    except ImportError:  # the export extra is not installed
        raise ParameterError("format=onnx needs the onnx package; install it with: pip install 'streamrank[export]'") \
            from None
    return onnx


class _Graph:
    """Nodes and initializers of one graph under construction, with unique value names (a Scan
    body's nodes share the counter, so no name of the body shadows one of the outer graph)."""

    def __init__(self, helper, numpy_helper, counter=None):
        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes, self.inits = [], []
        self.counter = counter if counter is not None else [0, 0]  # names given, bytes of constants

    def name(self, base):
        self.counter[0] += 1
        return f"{base}_{self.counter[0]}"

    def const(self, value, base, dtype=np.float64):
        name = self.name(base)
        array = np.ascontiguousarray(np.asarray(value, dtype))
        self.counter[1] += array.nbytes
        self.inits.append(self.numpy_helper.from_array(array, name))
        return name

    def ints(self, values, base="i"):
        return self.const(np.asarray(values, np.int64).reshape(-1), base, np.int64)

    def op(self, op_type, inputs, base=None, outputs=1, **attrs):
        names = [self.name(base or op_type.lower()) for _ in range(outputs)]
        self.nodes.append(self.helper.make_node(op_type, list(inputs), names, name=self.name(f"n_{op_type}"),
                                                **attrs))
        return names[0] if outputs == 1 else names


def chunk_rows(model):
    """Rows of one Scan step of the map: its float64 temporaries within :data:`CHUNK_BYTES` (for
    laplacian, the (rows, m, d) difference within :data:`LAPLACIAN_CHUNK_BYTES`)."""
    fmap = model.fmap
    d, k = model.n_features, int(fmap.n_components_)
    m = _rows_of(model).shape[0] if model.method != "rff" else k
    if model.method == "nystroem":
        k = 0  # no features formed: K(x, L) . (P w)
    per_row = 8 * (2 * m + 3 * k + d)
    rows = (NYSTROEM_CHUNK_BYTES if model.method == "nystroem" else CHUNK_BYTES) // per_row
    if map_kernel(model)[0] == "laplacian" and model.method != "rff":
        rows = min(rows, LAPLACIAN_CHUNK_BYTES // (8 * m * d))
    return int(max(1, min(MAX_CHUNK_ROWS, rows)))


def _rows_of(model):
    """The rows the map's kernel is taken against: landmarks, support rows or basis rows."""
    fmap = model.fmap
    return {"nystroem": lambda: fmap.landmarks_, "exact": lambda: fmap.support_,
            "basis": lambda: fmap.basis_}[model.method]()


def _kernel(g, x, B, kernel, gamma, degree, coef0, fused=False):
    """K(x, B) (float64 (rows, m)) for the float64 rows ``x``, in streamrank's operation order
    (PreparedKernel.into). ``fused`` (rbf, for maps scored in float64: Nystroem): the exponent
    2 gamma x.b - gamma ||b||^2 - gamma ||x||^2 from one product of x with a ones column appended
    against [2 gamma B^T; -gamma ||b||^2], then one Add and the Exp: two passes over the (rows, m)
    values where streamrank's order takes five (each pass a memory sweep at this chunk size), the
    same values to float64 rounding of the exponent (no clip at 0: a distance that rounds below 0
    gives exp of a few ulps above 0, 1 + 1e-16)."""
    B = np.asarray(B, np.float64)
    if kernel == "rbf" and fused:
        W = np.vstack([2.0 * gamma * B.T, -gamma * np.einsum("ij,ij->i", B, B)[None, :]])
        shape = g.op("Shape", [x], "x_shape")
        ones = g.op("Expand", [g.const(np.ones((1, 1)), "one_col"),
                               g.op("Concat", [g.op("Slice", [shape, g.ints([0]), g.ints([1]), g.ints([0])], "x_rows"),
                                               g.ints([1], "one_i")], "ones_shape", axis=0)], "ones")
        xa = g.op("Concat", [x, ones], "x_aug", axis=1)
        e = g.op("MatMul", [xa, g.const(W, "basis_aug")], "xb_aug")
        xn = g.op("Mul", [g.op("ReduceSumSquare", [x, g.ints([1])], "xnorm", keepdims=1),
                          g.const(-gamma, "neg_gamma")], "xnorm_g")
        return g.op("Exp", [g.op("Add", [e, xn], "exponent")], "K")
    if kernel == "laplacian":
        # |x_i - b_j| summed over features: a (rows, m, d) difference, bounded by the chunk
        x3 = g.op("Unsqueeze", [x, g.ints([1])], "x3")
        diff = g.op("Sub", [x3, g.const(B[None, :, :], "basis3")], "diff")
        dist = g.op("ReduceSum", [g.op("Abs", [diff], "absdiff"), g.ints([2])], "l1", keepdims=0)
        return g.op("Exp", [g.op("Mul", [dist, g.const(-gamma, "neg_gamma")], "scaled")], "K")
    if kernel == "rbf":
        # -2 B^T: a power of two, so the product is exactly -2 x.b (PreparedKernel)
        xb = g.op("MatMul", [x, g.const(-2.0 * B.T, "basis_t_m2")], "xb")
        xn = g.op("ReduceSumSquare", [x, g.ints([1])], "xnorm", keepdims=1)
        d2 = g.op("Add", [g.op("Add", [xb, xn], "d2a"), g.const(np.einsum("ij,ij->i", B, B)[None, :], "bnorm")],
                  "d2")
        d2 = g.op("Max", [d2, g.const(0.0, "zero")], "d2c")  # rounding can make it slightly negative
        return g.op("Exp", [g.op("Mul", [d2, g.const(-gamma, "neg_gamma")], "scaled")], "K")
    xb = g.op("MatMul", [x, g.const(B.T, "basis_t")], "xb")
    if kernel == "linear":
        return xb
    t = g.op("Add", [g.op("Mul", [xb, g.const(gamma, "gamma")], "gxb"), g.const(coef0, "coef0")], "t")
    if kernel == "sigmoid":
        return g.op("Tanh", [t], "K")
    if kernel == "poly":
        return t if degree == 1 else g.op("Pow", [t, g.const(float(degree), "degree")], "K")
    raise ParameterError(f"format=onnx cannot express kernel {kernel!r}; use kernel=rbf, laplacian, poly, sigmoid "
                         f"or linear")


def _round32(g, v):
    """float32(v) as float64: the rounding streamrank's maps apply to the features."""
    onnx = _onnx()
    f = g.op("Cast", [v], "phi32", to=onnx.TensorProto.FLOAT)
    return g.op("Cast", [f], "phi", to=onnx.TensorProto.DOUBLE)


def _map_scores(g, x, model):
    """The score (float64 (rows, 1)) of the float64 normalised rows ``x`` for a model with a map."""
    fmap = model.fmap
    w = np.asarray(model.w, np.float64)
    kern, gamma, degree, coef0 = map_kernel(model)
    if model.method == "rff":
        z = g.op("Add", [g.op("MatMul", [x, g.const(fmap.omega_, "omega")], "xo"), g.const(fmap.offset_[None, :], "b")],
                 "z")
        phi = g.op("Mul", [g.op("Cos", [z], "cos"), g.const(math.sqrt(2.0 / fmap.n_components_), "rff_scale")], "phi64")
        return g.op("MatMul", [_round32(g, phi), g.const(w[:, None], "w")], "s")
    K = _kernel(g, x, _rows_of(model), kern, gamma, degree, coef0, fused=model.method == "nystroem")
    if model.method == "basis":  # CLSRRank: float64 kernel values
        return g.op("MatMul", [K, g.const(w[:, None], "w")], "s")
    if model.method == "exact":  # float32 kernel values, as the training matrix Q held them
        return g.op("MatMul", [_round32(g, K), g.const(w[:, None], "w")], "s")
    # Nystroem: phi(x) . w = K(x, L) . (P w), float64 (Nystroem.scores)
    return g.op("MatMul", [K, g.const(fmap.landmark_weights(w)[:, None], "landmark_weights")], "s")


def _query_minmax(g, x, onnx):
    """LETOR's QueryLevelNorm of the float64 rows ``x`` (N, d): (x - min_q) * (1 / (max_q - min_q))
    over the rows of x's query (equal ``query_id``), 0 for a feature constant within the query
    (Normalizer.affine). Queries are numbered by Unique's inverse indices; their minima and maxima
    are ScatterElements reductions onto a (queries, d) table filled with +inf / -inf."""
    ids, _, inverse, _ = g.op("Unique", [QUERY_INPUT], "q", outputs=4, sorted=1)
    shape_x = g.op("Shape", [x], "shape_x")
    width = g.op("Slice", [shape_x, g.ints([1]), g.ints([2]), g.ints([0])], "width")
    table = g.op("Concat", [g.op("Shape", [ids], "n_queries"), width], "table_shape", axis=0)
    idx = g.op("Expand", [g.op("Unsqueeze", [inverse, g.ints([1])], "inv2"), shape_x], "rows_query")
    lo = g.op("ScatterElements", [g.op("Expand", [g.const(np.inf, "inf"), table], "lo0"), idx, x], "lo",
              axis=0, reduction="min")
    hi = g.op("ScatterElements", [g.op("Expand", [g.const(-np.inf, "neg_inf"), table], "hi0"), idx, x], "hi",
              axis=0, reduction="max")
    span = g.op("Sub", [hi, lo], "span")
    # a constant feature (span 0) gets scale 0, streamrank's reciprocal of an infinite span
    scale = g.op("Where", [g.op("Equal", [span, g.const(0.0, "zero")], "flat"), g.const(0.0, "zero"),
                           g.op("Reciprocal", [span], "inv_span")], "qscale")
    shift_rows = g.op("Gather", [lo, inverse], "shift_rows", axis=0)
    scale_rows = g.op("Gather", [scale, inverse], "scale_rows", axis=0)
    return g.op("Mul", [g.op("Sub", [x, shift_rows], "centred"), scale_rows], "xn")


def _chunked(g, x, model, onnx):
    """The map's scores of the rows ``x`` (N, d) in a Scan over chunks of at most
    :func:`chunk_rows` rows (the last chunk padded with zero rows, their scores dropped): (N, 1)."""
    helper, T = onnx.helper, onnx.TensorProto
    C = chunk_rows(model)
    d = model.n_features
    n = g.op("Slice", [g.op("Shape", [x], "shape_n"), g.ints([0]), g.ints([1]), g.ints([0])], "n")
    # rows per chunk: min(N, C), at least 1; at least one chunk (onnxruntime's Scan refuses zero
    # iterations: an empty batch scores one zero row and keeps none of it)
    c = g.op("Max", [g.op("Min", [n, g.ints([C], "C")], "c0"), g.ints([1], "one")], "c")
    chunks = g.op("Div", [g.op("Add", [n, g.op("Sub", [c, g.ints([1], "one")], "c1")], "nc1"), c], "chunks0")
    chunks = g.op("Max", [chunks, g.ints([1], "one")], "chunks")
    pad = g.op("Sub", [g.op("Mul", [chunks, c], "padded"), n], "pad")
    pads = g.op("Concat", [g.ints([0, 0], "pad_begin"), pad, g.ints([0], "pad_col")], "pads", axis=0)
    xp = g.op("Pad", [x, pads], "x_padded")
    x3 = g.op("Reshape", [xp, g.op("Concat", [chunks, c, g.ints([d], "d")], "chunk_shape", axis=0)], "x_chunks",
              allowzero=1)
    body = _Graph(g.helper, g.numpy_helper, g.counter)
    xin = body.name("x_chunk")
    s = _map_scores(body, xin, model)
    sout = body.op("Identity", [s], "s_chunk")
    body_graph = helper.make_graph(body.nodes, "map_chunk", [helper.make_tensor_value_info(xin, T.DOUBLE, ["c", d])],
                                   [helper.make_tensor_value_info(sout, T.DOUBLE, ["c", 1])], body.inits)
    s3 = g.op("Scan", [x3], "s_chunks", body=body_graph, num_scan_inputs=1)
    flat = g.op("Reshape", [s3, g.ints([-1, 1], "flat_shape")], "s_padded")
    return g.op("Slice", [flat, g.ints([0], "zero_i"), n, g.ints([0], "axis0")], "s_rows")


def _check_float32_scores(model):
    """The graph's score is float32: a model whose weights pass float32's range, or whose score of
    a row of zeros does, would give inf for ordinary rows (predict's float64 scores stay finite),
    so it is refused."""
    limit = float(np.finfo(np.float32).max)
    w = np.abs(np.asarray(model.w, np.float64))
    s0 = model.decision_function(np.zeros((1, input_width(model)), np.float32), np.array([0, 1]))[0]
    what = (f"weight {float(w.max()):.3g}" if w.size and w.max() > limit else
            f"score of a row of zeros {float(s0):.3g}" if not abs(s0) <= limit else None)
    if what is not None:
        raise ParameterError(f"format=onnx scores in float32, and this model's {what} passes float32's range "
                             f"(3.4e38): its ONNX scores would be inf; use format=json, or score with streamrank "
                             f"predict (float64)")


def to_onnx(model, *, names, name="streamrank"):
    """The model as a serialized ONNX ModelProto (bytes); ``names``: the input features' names
    (:func:`streamrank.export.common.feature_names`), kept in the metadata."""
    onnx = _onnx()
    helper, T = onnx.helper, onnx.TensorProto
    from onnx import numpy_helper
    if model.fmap is not None and callable(getattr(model.fmap, "kernel", None)):
        raise ParameterError("format=onnx cannot hold a model with a callable kernel (a graph holds data, not "
                             "Python code); train with a named kernel (kernel=rbf, laplacian, poly, sigmoid or "
                             "linear) to export the model")
    if model.fmap is not None and model.method not in ("nystroem", "rff", "exact", "basis"):
        raise ParameterError(f"format=onnx does not know the feature map {model.method!r}; upgrade streamrank")
    _check_float32_scores(model)
    width = input_width(model)
    norm = model.normalizer.kind
    g = _Graph(helper, numpy_helper)
    x = INPUT
    if model.input_features is not None:
        x = g.op("Gather", [x, g.ints(model.input_features, "input_features")], "x_selected", axis=1)
    x = g.op("Cast", [x], "x64", to=T.DOUBLE)
    d = model.n_features
    if norm == "zscore":
        mean = np.asarray(model.normalizer.mean_[:d], np.float64)
        inv = 1.0 / np.asarray(model.normalizer.scale_[:d], np.float64)  # Normalizer.affine's reciprocal
        x = g.op("Mul", [g.op("Sub", [x, g.const(mean[None, :], "mean")], "centred"),
                         g.const(inv[None, :], "inv_scale")], "xn")
    elif norm == "query_minmax":
        x = _query_minmax(g, x, onnx)
    if model.fmap is None:
        s = g.op("MatMul", [x, g.const(np.asarray(model.w, np.float64)[:, None], "w")], "s_rows")
    else:
        s = _chunked(g, x, model, onnx)
    s = g.op("Reshape", [s, g.ints([-1], "score_shape")], "s64")
    if g.counter[1] > MAX_CONSTANT_BYTES:
        raise ParameterError(f"format=onnx: the model's arrays take {g.counter[1] / 2 ** 30:.2f} GiB in the graph, "
                             f"more than one ONNX file can hold (protobuf's 2 GiB); use format=json, or retrain with "
                             f"fewer landmarks or support rows (use components=N, N smaller)")
    g.nodes.append(helper.make_node("Cast", [s], [OUTPUT], name="n_score", to=T.FLOAT))

    inputs = [helper.make_tensor_value_info(INPUT, T.FLOAT, ["N", width])]
    inputs[0].doc_string = (f"raw feature rows, {width} features each (the model's input width), float32; any "
                            f"number of rows")
    if norm == "query_minmax":
        q = helper.make_tensor_value_info(QUERY_INPUT, T.INT64, ["N"])
        q.doc_string = ("the query of each row of X (rows with equal ids form one query, in any order): "
                        "normalize=query_minmax scales each feature by its range within the query")
        inputs.append(q)
    out = helper.make_tensor_value_info(OUTPUT, T.FLOAT, ["N"])
    out.doc_string = "the model's score of each row (higher ranks first)"
    graph = helper.make_graph(g.nodes, name, inputs, [out], g.inits)
    method = kind(model)
    graph.doc_string = f"streamrank {method} ranking model: raw rows in, one score per row out"
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
                              producer_name="streamrank", producer_version=__version__)
    proto.doc_string = graph.doc_string
    meta = {"method": method, "settings": json.dumps(settings(model), sort_keys=True),
            "content_sha256": model_digest(model), "input_width": str(width), "feature_names": json.dumps(list(names)),
            "normalize": norm, "inputs": json.dumps([i.name for i in inputs]), "output": OUTPUT,
            "row_chunk": str(chunk_rows(model)) if model.fmap is not None else "0"}
    helper.set_model_props(proto, meta)
    onnx.checker.check_model(proto, full_check=True)
    return proto.SerializeToString()
