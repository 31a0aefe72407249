"""The rows of a prepared block as the objectives see them: Phi = (X - shift) * scale, the block's
normalisation applied on the fly (one affine row for all rows, or one per query). Shared by the
objective's passes (:mod:`~streamrank.objectives.rank_objective`) and the sketch preconditioner's
(:mod:`~streamrank.objectives.sketch_precond`), which otherwise know nothing of each other."""

import numpy as np


def block_phi(b, r0, r1, q, out=None):
    """Rows r0:r1 (local to block b, whole queries q[0]:q[1]) of Phi as float64 (in ``out``)."""
    X = b.X[r0:r1]
    Phi = np.empty(X.shape) if out is None else out
    Phi[...] = X  # float32 -> float64 is exact
    if b.affine == 1:
        Phi -= b.shift[0]
        Phi *= b.scale[0]
    elif b.affine == 2:
        sizes = np.diff(b.qptr[q[0]:q[1] + 1])
        Phi -= np.repeat(b.shift[q[0]:q[1]], sizes, axis=0)
        Phi *= np.repeat(b.scale[q[0]:q[1]], sizes, axis=0)
    return Phi
