"""The model files the peers' own scoring programs read: SVMrank's ``svm_rank_classify`` (an
SVM-light model file) and the LIBLINEAR ranksvm extension's ``predict`` (a LIBLINEAR model file).

Both hold one linear function s(x) = x . v over the raw input features (ids 1..d, as in the
SVMlight text the programs read), from :func:`streamrank.export.common.linear_weights`: zscore
folded into v, a ``--features`` subset scattered into the full width, linear-kernel maps folded.
The constant c of ``x . v + c`` is dropped (LIBLINEAR ``bias -1``, SVM-light threshold ``b 0``): a
constant changes no ranking, and neither file can hold one without a bias feature in every row.
So the peers' scores are streamrank's minus c, exactly in real arithmetic.

Layouts, as the peers write and read them (sources: docs/formats.md):

- LIBLINEAR (``save_model`` / ``load_model`` in linear.cpp of liblinear-ranksvm 2.11): the header
  lines ``solver_type L2R_L2LOSS_RANKSVM``, ``nr_class 2``, ``nr_feature d``, ``bias -1``, ``w``,
  then one weight per line followed by a space. A ranksvm model has no ``label`` line (``train``
  leaves ``model->label`` NULL and ``save_model`` writes the line only when it is set), and
  ``predict`` prints the decision value w . x itself for this solver (``predict_values``), so a
  higher value ranks higher, as streamrank's score. ``save_model`` writes ``%.16g``, which does
  not always give back the same double; here ``%.17g`` (``load_model`` reads ``%lf``), so the
  file holds v exactly.
- SVM-light (``write_model`` / ``read_model`` in svm_light/svm_common.c, SVMrank V1.00's
  SVM-light V6.20): the version line (``read_model`` refuses any other version), kernel type 0
  (linear), the kernel parameters (unused by a linear kernel; ``svm_rank_learn``'s defaults), the
  highest feature index d, the number of training documents (not read by ``svm_rank_classify``),
  ``2`` support vectors plus 1, threshold ``b`` 0, and one support vector line ``1 j:v_j ... #``
  (alpha*y = 1, every nonzero weight in increasing j): ``svm_rank_learn``'s own layout for a linear
  kernel, which compacts its support vectors into one weight vector. ``svm_rank_classify`` scores
  sum_j v_j x_j - b (``classify_example_linear``), a higher value ranking higher.
  SVM-light keeps feature values as C ``float`` (FVAL), so the program reads each weight rounded
  to float32 (a relative 6e-8 per weight) whatever the digits written; they are written in full
  (``%.17g``) all the same, and weights outside float32's range are refused.
"""

import numpy as np

from streamrank.errors import ParameterError
from streamrank.export.common import input_width, linear_weights

# SVM-light's VERSION in svm_light/svm_common.h of SVMrank V1.00: read_model compares it verbatim
SVMLIGHT_VERSION = "V6.20"
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _g17(x):
    """x with 17 significant digits (C's %.17g): enough for any double to read back as itself."""
    return format(float(x) + 0.0, ".17g")  # + 0.0: -0.0 is written as 0


def _weights(model, fmt):
    v, _c = linear_weights(model, fmt)  # the constant is dropped: see the module docstring
    return np.asarray(v, np.float64)


def to_liblinear(model, *, names=None, name=None):
    """The LIBLINEAR ranksvm model file (text) of ``model``: ``predict MODEL`` scores a row x as
    x . v, streamrank's score minus a constant. ``names`` and ``name`` are not used: the format
    has no place for them (``load_model`` refuses any other line)."""
    v = _weights(model, "liblinear")
    lines = ["solver_type L2R_L2LOSS_RANKSVM", "nr_class 2", f"nr_feature {input_width(model)}", "bias -1", "w"]
    lines += [_g17(x) + " " for x in v]  # save_model's "%.16g " per weight, at 17 digits
    return "\n".join(lines) + "\n"


def to_svmrank(model, *, names=None, name=None):
    """The SVM-light model file (text) of ``model`` that ``svm_rank_classify`` reads: it scores a
    row x as x . v (v in float32), streamrank's score minus a constant. ``names`` and ``name``
    are not used (SVM-light has feature ids only)."""
    v = _weights(model, "svmrank")
    big = np.flatnonzero(np.abs(v) > _FLOAT32_MAX)
    if big.size:
        j = int(big[0])
        raise ParameterError(f"format=svmrank: feature {j + 1}'s weight {float(v[j])!r} is beyond float32's range, in "
                             f"which SVM-light reads every weight; use format=liblinear or format=onnx, or retrain "
                             f"with normalize=zscore")
    n_docs = int(model.training.get("n_rows", 0) or 0) if isinstance(model.training, dict) else 0
    sv = " ".join(f"{j + 1}:{_g17(v[j])}" for j in np.flatnonzero(v))
    lines = [f"SVM-light Version {SVMLIGHT_VERSION}",
             "0 # kernel type",
             "3 # kernel parameter -d ",
             "1 # kernel parameter -g ",
             "1 # kernel parameter -s ",
             "1 # kernel parameter -r ",
             "empty# kernel parameter -u ",
             f"{input_width(model)} # highest feature index ",
             f"{n_docs} # number of training documents ",
             "2 # number of support vectors plus 1 ",
             "0 # threshold b, each following line is a SV (starting with alpha*y)",
             f"1 {sv} #" if sv else "1 #"]
    return "\n".join(lines) + "\n"
