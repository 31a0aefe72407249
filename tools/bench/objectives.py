"""The data, parsed here, and the objectives and NDCG, all in float64: one function per problem,
applied to every tool's model file."""

import statistics

from .common import N_FEATURES


def read_letor(path, n_features=N_FEATURES):
    """(X float64 (n, d), y float64 (n,), qid int64 (n,)) of a LETOR / SVMlight text file with qid:."""
    import numpy as np
    ys, qs, rows, cols, vals = [], [], [], [], []
    with open(path) as f:
        for r, line in enumerate(f):
            t = line.split("#", 1)[0].split()
            if not t:
                continue
            ys.append(float(t[0]))
            if not t[1].startswith("qid:"):
                raise ValueError(f"{path}: line {r + 1} has no qid:")
            qs.append(int(t[1][4:]))
            for kv in t[2:]:
                k, v = kv.split(":")
                rows.append(len(ys) - 1)
                cols.append(int(k) - 1)
                vals.append(float(v))
    d = max(n_features, max(cols) + 1 if cols else 0)
    X = np.zeros((len(ys), d))
    X[np.array(rows, np.int64), np.array(cols, np.int64)] = vals
    return X, np.array(ys), np.array(qs, np.int64)


def pairs_of(y, qid):
    """(I, J): every pair of rows of the same query with y[I] > y[J]."""
    import numpy as np
    order = np.argsort(qid, kind="stable")
    bounds = np.flatnonzero(np.diff(qid[order])) + 1
    I, J = [], []
    for idx in np.split(order, bounds):
        a, b = np.nonzero(y[idx][:, None] > y[idx][None, :])
        I.append(idx[a])
        J.append(idx[b])
    return np.concatenate(I), np.concatenate(J)


def linear_objective(w, X, I, J, C, loss="squared"):
    """1/2||w||^2 + C sum over pairs of max(0, 1 - w.(x_i - x_j))^2 (loss="l1": not squared)."""
    import numpy as np
    w = np.asarray(w, np.float64)
    s = X @ w
    m = np.maximum(0.0, 1.0 - (s[I] - s[J]))
    return float(0.5 * w @ w + C * (np.sum(m * m) if loss == "squared" else np.sum(m)))


def _rbf_times(A, S, beta, gamma, block=1024):
    """K(A, S) @ beta for K(a, s) = exp(-gamma ||a - s||^2), in row blocks of A."""
    import numpy as np
    s2 = np.einsum("ij,ij->i", S, S)
    out = np.empty(A.shape[0])
    for r in range(0, A.shape[0], block):
        a = A[r:r + block]
        d2 = np.einsum("ij,ij->i", a, a)[:, None] + s2[None, :] - 2.0 * (a @ S.T)
        np.maximum(d2, 0.0, out=d2)
        d2 *= -gamma
        np.exp(d2, out=d2)
        out[r:r + block] = d2 @ beta
    return out


def kernel_objective(beta, S, gamma, X, I, J, C):
    """1/2 beta^T K(S, S) beta + C sum over pairs max(0, 1 - f_i + f_j)^2, f = K(X, S) beta (rbf)."""
    import numpy as np
    beta = np.asarray(beta, np.float64)
    f = _rbf_times(X, S, beta, gamma)
    reg = float(beta @ _rbf_times(S, S, beta, gamma))
    m = np.maximum(0.0, 1.0 - (f[I] - f[J]))
    return 0.5 * reg + C * float(np.sum(m * m))


def text_scores(path, W, n_features, block=64 << 20):
    """(S = X @ W float64 (n, k), y, qid) with X parsed here from the text file in float64, in blocks of
    lines with scikit-learn's SVMlight parser (never the whole X in memory)."""
    import io
    import numpy as np
    from sklearn.datasets import load_svmlight_file
    W = np.asarray(W, np.float64).reshape(n_features, -1)
    ss, ys, qs = [], [], []
    rest = b""
    with open(path, "rb") as f:
        while True:
            buf = f.read(block)
            data = rest + buf
            if buf:
                cut = data.rfind(b"\n") + 1
                chunk, rest = data[:cut], data[cut:]
            else:
                chunk, rest = data, b""
            if chunk.strip():
                X, y, q = load_svmlight_file(io.BytesIO(chunk), n_features=n_features, query_id=True,
                                             zero_based=False, dtype=np.float64)
                ss.append(np.asarray(X @ W))
                ys.append(y)
                qs.append(q)
            if not buf:
                break
    return np.concatenate(ss), np.concatenate(ys), np.concatenate(qs).astype(np.int64)


def query_runs(qid):
    """(order or None, starts, ends) of the queries: rows in file order when each query's rows are
    contiguous (no sort), else a stable sort by qid."""
    import numpy as np
    starts = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1]]) if qid.size else np.zeros(0, np.int64)
    order = None
    if starts.size != np.unique(qid).size:
        order = np.argsort(qid, kind="stable")
        q = qid[order]
        starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
    return order, starts, np.r_[starts[1:], qid.size].astype(np.int64)


def pair_hinge_sums(S, y, qid):
    """(sum over pairs of max(0, 1 - (s_i - s_j))^2 for every column of S, number of pairs): per
    query, a dense n_q x n_q margin matrix (LETOR queries have ~10^2 rows), never the list of pairs."""
    import numpy as np
    S = np.asarray(S, np.float64)
    S = S.reshape(S.shape[0], -1)
    order, starts, ends = query_runs(qid)
    if order is not None:
        S, y = S[order], y[order]
    tot, n_pairs = np.zeros(S.shape[1]), 0
    for a, b in zip(starts, ends):
        yy = y[a:b]
        mask = yy[:, None] > yy[None, :]
        k = int(np.count_nonzero(mask))
        if not k:
            continue
        n_pairs += k
        s = S[a:b]
        m = 1.0 - (s[:, None, :] - s[None, :, :])[mask]  # (pairs, columns)
        np.maximum(m, 0.0, out=m)
        tot += np.einsum("pk,pk->k", m, m)
    return tot, n_pairs


def ndcg_at(scores, y, qid, k=10):
    """Mean NDCG@k over queries as LETOR 4.0's Eval-Score-4.0.pl computes it: gain 2^rel - 1;
    positions 1 and 2 undiscounted, position i >= 3 weighted 1/log2(i); ties in file order (a
    stable sort by descending score); NDCG@k = 0 for a query with fewer than k documents (the
    script has no NDCG beyond a query's length) and for a query without a relevant document; the
    mean over all queries."""
    import numpy as np
    scores, y = np.asarray(scores, np.float64), np.asarray(y, np.float64)
    order, starts, ends = query_runs(qid)
    if order is not None:
        scores, y = scores[order], y[order]
    disc = np.r_[1.0, 1.0, 1.0 / np.log2(np.arange(3, k + 1))][:k]
    vals = []
    for a, b in zip(starts, ends):
        rel, s = y[a:b], scores[a:b]
        if rel.size < k:
            vals.append(0.0)
            continue
        top = rel[np.argsort(-s, kind="stable")[:k]]
        ideal = np.sort(rel)[::-1][:k]
        idcg = float((2.0 ** ideal - 1.0) @ disc)
        vals.append(0.0 if idcg <= 0 else float((2.0 ** top - 1.0) @ disc) / idcg)
    return float(np.mean(vals)) if vals else float("nan")


def rbf_matrix(A, S, gamma, block=2048):
    """K(A, S) float64 for K(a, s) = exp(-gamma ||a - s||^2)."""
    import numpy as np
    s2 = np.einsum("ij,ij->i", S, S)
    out = np.empty((A.shape[0], S.shape[0]))
    for r in range(0, A.shape[0], block):
        a = A[r:r + block]
        d2 = np.einsum("ij,ij->i", a, a)[:, None] + s2[None, :] - 2.0 * (a @ S.T)
        np.maximum(d2, 0.0, out=d2)
        out[r:r + block] = np.exp(-gamma * d2)
    return out


def settle_objectives(rows, objs):
    """Each row's objective, the median over its rounds (``objs``: id(row) -> values), and ``rel``,
    its distance above the lowest objective of the rows, relative to it."""
    for row in rows:
        if id(row) in objs:
            row["objective"] = statistics.median(objs[id(row)])
    have = [r["objective"] for r in rows if r.get("objective") is not None]
    if not have:
        return
    low = min(have)
    for r in rows:
        if r.get("objective") is not None:
            r["rel"] = (r["objective"] - low) / abs(low)
