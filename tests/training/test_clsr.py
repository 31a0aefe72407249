"""CLSRRank (paper 002): the closed form of theorem 1, a dense explicit-pair oracle on query data,
non-symmetric and non-PSD kernels, one pass, block layouts, the model file and the CLI."""

import json

import numpy as np
import pytest

import streamrank
from streamrank.cli import main
from streamrank.errors import ParameterError
from streamrank.features.kernels import kernel_matrix
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.training.clsr import train_clsr



def asymmetric(A, B):
    """K(a, b) = exp(-|a - b|^2 / 8) (1 + tanh(a_0 - b_0) / 2): neither symmetric nor PSD."""
    d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return np.exp(-d2 / 8.0) * (1.0 + 0.5 * np.tanh(A[:, None, 0] - B[None, :, 0]))


def write(path, X, y, qid):
    with DatasetWriter(path, n_features=X.shape[1]) as w:
        w.append(np.asarray(X, np.float32), np.asarray(y, np.float32), np.asarray(qid))
    return path


def kmat(kernel, A, B, gamma):
    return asymmetric(A, B) if callable(kernel) else kernel_matrix(A, B, kernel=kernel, gamma=gamma)


@pytest.mark.parametrize("kernel", ["rbf", "sigmoid", asymmetric])
def test_one_sample_is_the_papers_closed_form(tmp_path, kernel):
    """One query (one sample of m points), every row a basis point: alpha solves A alpha = B with A
    and B written out as eq. 6 and 7, sums over the K_x^i and Y^i included."""
    rng = np.random.default_rng(0)
    m, d, lam, gamma = 40, 5, 1e-3, 0.2
    X = rng.standard_normal((m, d)).astype(np.float32)
    y = rng.integers(0, 3, m).astype(np.float32)
    ds = streamrank.open_dataset(write(tmp_path / "one.h5", X, y, np.zeros(m, int)))
    model, s = train_clsr(ds, lam=lam, kernel=kernel, gamma=gamma)
    Xd = X.astype(np.float64)
    K = kmat(kernel, Xd, Xd, gamma)          # K_x = [K(x_i, x_j)]
    Y = y.astype(np.float64)
    A = (2.0 / m) * K.T @ K + lam * m * np.eye(m)
    B = (2.0 / m) * K.T @ Y
    for i in range(m):
        Ki = np.tile(K[i], (m, 1))           # K_x^i: column t constant K(x_i, x_t)
        Yi = np.full(m, Y[i])                # Y^i = (y_i, ..., y_i)^T
        A -= (Ki.T @ K + K.T @ Ki) / m ** 2
        B -= (Ki.T @ Y + K.T @ Yi) / m ** 2
    alpha = np.linalg.solve(A, B)
    np.testing.assert_allclose(model.w, alpha, rtol=1e-8, atol=1e-8 * np.abs(alpha).max())
    assert s["passes"] == 1 and s["basis"] == m
    # f(x) = sum_t alpha_t K(x, x_t)
    np.testing.assert_allclose(model.decision_function(X), K @ model.w, rtol=1e-10, atol=1e-12)


def dense_oracle(Phi, y, qp, lam):
    """Every ordered pair (j, k) of every query as a row: J = (1/S) ||t - D alpha||^2 + lambda m ||alpha||^2."""
    rows, t = [], []
    for a, b in zip(qp[:-1], qp[1:]):
        for j in range(a, b):
            for k in range(a, b):
                rows.append(Phi[j] - Phi[k])
                t.append(y[j] - y[k])
    D, t = np.array(rows), np.array(t)
    S = float(np.sum(np.diff(qp) ** 2))
    m = Phi.shape[1]
    alpha = np.linalg.solve(D.T @ D / S + lam * m * np.eye(m), D.T @ t / S)
    J = float(np.sum((t - D @ alpha) ** 2)) / S + lam * m * float(alpha @ alpha)
    return alpha, J


@pytest.mark.parametrize("components", [None, 25])
@pytest.mark.parametrize("kernel", ["rbf", "sigmoid"])
def test_streamed_system_equals_the_dense_pair_oracle(small, components, kernel):
    with streamrank.open_dataset(small / "train.h5") as ds:
        kw = dict(lam=3e-3, kernel=kernel, gamma=0.02, normalize="zscore", components=components, seed=4)
        model, s = train_clsr(ds, **kw)
        X, y = ds.read(0, ds.n_rows)
        Xn = model.normalizer.transform(X, ds.query_ptr)
        Phi = kmat(kernel, Xn, model.fmap.basis_, 0.02)
        alpha, J = dense_oracle(Phi, y.astype(np.float64), ds.query_ptr, 3e-3)
        np.testing.assert_allclose(model.w, alpha, rtol=1e-8, atol=1e-8 * np.abs(alpha).max())
        assert s["objective"] == pytest.approx(J, rel=1e-8)
        assert s["passes"] == 1 and s["basis"] == (ds.n_rows if components is None else 25)
        if components is not None:
            rows = model.fmap.basis_rows_
            np.testing.assert_array_equal(model.fmap.basis_, Xn[rows])


def test_block_size_and_budget_do_not_change_the_model(small, tmp_path):
    with streamrank.open_dataset(small / "train.h5") as ds, streamrank.open_dataset(small / "valid.h5") as v:
        kw = dict(lam=1e-2, kernel="rbf", gamma=0.02, components=30, normalize="zscore")
        a, _ = train_clsr(ds, **kw)
        b, _ = train_clsr(ds, block_bytes=60_000, **kw)
        c, _ = train_clsr(ds, memory_budget="8GB", **kw)  # another budget
        assert np.array_equal(a.w, b.w) and np.array_equal(a.w, c.w)  # sums over groups fixed by the queries
        assert np.array_equal(a.predict_dataset(v), b.predict_dataset(v))


def test_a_path_of_lambda_and_gamma_reads_the_data_once_per_gamma(small):
    with streamrank.open_dataset(small / "train.h5") as ds, streamrank.open_dataset(small / "valid.h5") as v:
        model, s = train_clsr(ds, valid=v, lam=[1e-4, 1e-2, 1.0], gamma=[0.01, 0.05], components=30)
        assert s["passes"] == 2 and len(s["candidates"]) == 6
        best = max(s["candidates"], key=lambda c: c["valid_meanndcg"])
        assert (s["lambda"], s["gamma"]) == (best["lambda"], best["gamma"])
        # each candidate is the lambda's own solution: the objective decreases as lambda does
        objs = [c["objective"] for c in s["candidates"][:3]]
        assert objs[0] < objs[1] < objs[2]


def test_model_file_round_trip_and_the_callable_kernel_refusal(small, tmp_path):
    with streamrank.open_dataset(small / "train.h5") as ds, streamrank.open_dataset(small / "valid.h5") as v:
        model, _ = train_clsr(ds, lam=1e-2, kernel="sigmoid", gamma=0.01, components=20)
        model.save(tmp_path / "m.h5")
        back = streamrank.load(tmp_path / "m.h5")
        assert back.model_.method == "basis" and back.model_.config["method"] == "clsr"
        assert np.array_equal(back.predict(v.path), model.predict_dataset(v))
        odd, _ = train_clsr(ds, lam=1e-2, kernel=asymmetric, components=20)
        assert np.all(np.isfinite(odd.predict_dataset(v)))
        with pytest.raises(ParameterError, match="callable kernel .* cannot be saved"):
            odd.save(tmp_path / "odd.h5")
        assert not (tmp_path / "odd.h5").exists() and not list(tmp_path.glob(".odd.h5*"))


def test_bad_settings_are_refused(small, monkeypatch):
    import streamrank.training.clsr as clsr
    monkeypatch.setattr(clsr, "settled_resident", lambda: 0)
    with streamrank.open_dataset(small / "train.h5") as ds:
        for kw, words in ((dict(lam=0.0), "lambda must be a finite number > 0"), (dict(lam=[1e-3, 1e-2]), "valid=DATA"),
                          (dict(kernel="cosine"), "kernel must be one of"),
                          (dict(memory_budget="1MB"), r"use components=176 .* or memory_budget=")):
            with pytest.raises(ParameterError, match=words):
                train_clsr(ds, **kw)


def test_cli_trains_and_predicts(small, tmp_path, capsys):
    out = tmp_path / "m.h5"
    rc = main(["train", str(small / "train.h5"), "-o", str(out), "--method", "clsr", "--kernel", "rbf",
               "--gamma", "0.02", "--lambda", "0.001,0.1", "--components", "30", "--valid", str(small / "valid.h5"),
               "--json", "--quiet"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["method"] == "clsr" and summary["passes"] == 1 and len(summary["candidates"]) == 2
    assert main(["predict", str(out), str(small / "valid.h5"), "-o", str(tmp_path / "s.txt")]) == 0
    for argv, words in ((["--lambda", "0.1"], "--method clsr"), (["--method", "clsr", "--C", "2"], "--lambda"),
                        (["--method", "clsr", "--loss", "smooth_hinge", "--solver", "newton_yuan"],
                         "--solver, --loss do not apply to --method clsr")):
        rc = main(["train", str(small / "train.h5"), "-o", str(tmp_path / "n.h5"), *argv])
        assert rc == 2 and words in capsys.readouterr().err


def test_estimator(small, tmp_path):
    est = streamrank.CLSRRank(lam=[1e-3, 1e-1], gamma=0.02, n_components=30, kernel="poly", degree=2, coef0=0.5,
                              features="3,1,2").fit(small / "train.h5", valid=small / "valid.h5")
    assert est.lambda_ in (1e-3, 1e-1) and est.model_.config["method"] == "clsr"
    est.save(tmp_path / "m.h5")
    back = streamrank.load(tmp_path / "m.h5")
    p = back.get_params()
    assert (p["gamma"], p["degree"], p["coef0"], p["features"], p["kernel"]) == (0.02, 2, 0.5, [3, 1, 2], "poly")
    again = streamrank.CLSRRank(**p).fit(small / "train.h5", valid=small / "valid.h5")
    assert np.array_equal(again.alpha_, est.alpha_)
    X, y = streamrank.open_dataset(small / "valid.h5").read(0, 10)
    assert est.predict(X).shape == (10,)


def test_killed_after_a_gamma_resumes_to_the_same_model(small, tmp_path, monkeypatch):
    import streamrank.training.clsr as clsr
    with streamrank.open_dataset(small / "train.h5") as ds, streamrank.open_dataset(small / "valid.h5") as v:
        kw = dict(valid=v, lam=[1e-4, 1e-2], gamma=[0.01, 0.05, 0.2], components=30)
        whole, sw = train_clsr(ds, **kw)
        real, calls = clsr._solve, [0]

        def dying(system, lam):
            calls[0] += 1
            if calls[0] == 5:  # the third gamma's first solve
                raise KeyboardInterrupt
            return real(system, lam)

        monkeypatch.setattr(clsr, "_solve", dying)
        with pytest.raises(KeyboardInterrupt):
            train_clsr(ds, checkpoint=tmp_path / "ck", **kw)
        monkeypatch.setattr(clsr, "_solve", real)
        again, sa = train_clsr(ds, checkpoint=tmp_path / "ck", resume=True, **kw)
        assert np.array_equal(again.w, whole.w) and sa["lambda"] == sw["lambda"] and sa["gamma"] == sw["gamma"]
        assert [c["objective"] for c in sa["candidates"]] == [c["objective"] for c in sw["candidates"]]
        assert sw["passes"] == sa["passes"] == 3  # one a gamma: two before the kill, one after it


def test_many_groups_across_blocks(small, monkeypatch):
    """Groups of about 50 rows (a small CHUNK_BYTES) that span the blocks of a small block size:
    the same bits as one block, and the dense oracle's solution."""
    import streamrank.training.clsr as clsr
    monkeypatch.setattr(clsr, "CHUNK_BYTES", 8 * 30 * 50)
    with streamrank.open_dataset(small / "train.h5") as ds:
        kw = dict(lam=1e-2, kernel="rbf", gamma=0.02, components=30)
        a, _ = train_clsr(ds, **kw)
        b, _ = train_clsr(ds, block_bytes=20_000, **kw)
        assert np.array_equal(a.w, b.w)
        X, y = ds.read(0, ds.n_rows)
        Phi = kernel_matrix(X.astype(np.float64), a.fmap.basis_, kernel="rbf", gamma=0.02)
        alpha, _ = dense_oracle(Phi, y.astype(np.float64), ds.query_ptr, 1e-2)
        np.testing.assert_allclose(a.w, alpha, rtol=1e-8, atol=1e-8 * np.abs(alpha).max())
