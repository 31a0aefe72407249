import numpy as np
import pytest

from streamrank.synthetic import generate_batches


@pytest.fixture(scope="module")
def rows():
    """(X, y, query_ptr) of a small generated set: the exact path's preconditioner tests' rows."""
    X, y, qid = next(generate_batches("small", scale=0.1, seed=3, batch_rows=1 << 20))
    qp = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1], True])
    return np.asarray(X, np.float64), np.asarray(y, np.float64), qp.astype(np.int64)
