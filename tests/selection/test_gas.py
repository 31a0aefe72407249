"""GAS (paper 003): importance and similarity against scipy's tau-b and the letor4 evaluator per
feature, the greedy selection against exhaustive search, the file, feature subsets and the CLI."""

import contextlib
import itertools
import json

import numpy as np
import pytest
import tie_oracle
from scipy.stats import kendalltau

import streamrank
from streamrank.cli import main
from streamrank.errors import FormatError, ParameterError
from streamrank.evaluation.metrics import pairwise_accuracy_counts
from streamrank.io.convert import convert
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.selection.gas import GasResult, gas_greedy, gas_scores, parse_features



def brute(X, y, qp, kind, signed):
    """Importance by the expected letor4 measure over the orders of each feature's ties (or pooled
    pairwise accuracy), similarity by scipy.stats.kendalltau per query, mean over the queries where
    it is defined."""
    d = X.shape[1]
    imp = np.empty((2, d))
    for f in range(d):
        for o, s in enumerate((X[:, f], -X[:, f])):
            s = s.astype(np.float64)
            if kind == "pairwise":
                pairs = correct = 0.0
                for a, b in zip(qp[:-1], qp[1:]):
                    p, c = pairwise_accuracy_counts(y[a:b], s[a:b])
                    pairs, correct = pairs + p, correct + c
                imp[o, f] = 1.0 / max(1.0 - correct / pairs, 1.0 / (2 * pairs))
            else:  # ties at their expected value: the twin, itself checked against every order of the ties
                imp[o, f] = np.mean([tie_oracle.expected_measure(s[a:b], y[a:b], kind, 10)
                                     for a, b in zip(qp[:-1], qp[1:])])
    sign = np.where(signed & (imp[1] > imp[0]), -1, 1)
    w = np.where(sign > 0, imp[0], imp[1]) if signed else imp[0]
    E = np.full((d, d), np.nan)
    for i in range(d):
        for j in range(d):
            vals = []
            for a, b in zip(qp[:-1], qp[1:]):
                if b - a < 2:
                    continue
                t = kendalltau(X[a:b, i], X[a:b, j]).statistic
                if not np.isnan(t):
                    vals.append(t)
            if vals:
                E[i, j] = np.mean(vals) * sign[i] * sign[j]
    return w, sign, E


@pytest.fixture(scope="module")
def fold1_subset(tmp_path_factory, request):
    from locations import MQ2008
    if not MQ2008.exists():
        pytest.skip("../shared/data/MQ2008 is not available")
    d = tmp_path_factory.mktemp("gas")
    convert([MQ2008 / "Fold1" / "train.txt.gz"], d / "t.h5", quiet=True)
    ds = streamrank.open_dataset(d / "t.h5")
    yield ds, d
    ds.close()


@pytest.mark.parametrize("kind, signed", [("map", False), ("ndcg@10", True), ("pairwise", True)])
def test_mq2008_subset_equals_brute_force(fold1_subset, kind, signed):
    """50 queries x the first 12 features of MQ2008 Fold1 (MQ2008 has constant features on many
    queries: tau-b is undefined there and left out)."""
    ds, d = fold1_subset
    nq, nf = 50, 12
    n = int(ds.query_ptr[nq])
    X, y = ds.read(0, n)
    X = np.ascontiguousarray(X[:, :nf])
    path = d / f"sub-{kind}.h5"
    with DatasetWriter(path, n_features=nf) as w:
        w.append(X, y, np.repeat(np.arange(nq), np.diff(ds.query_ptr[:nq + 1])))
    with streamrank.open_dataset(path) as sub:
        res = gas_scores(sub, importance=kind, signed=signed, block_bytes=20_000)  # many blocks
    w_ref, s_ref, E_ref = brute(X, y.astype(np.float64), ds.query_ptr[:nq + 1], kind.split("@")[0], signed)
    np.testing.assert_allclose(res.importance, w_ref, rtol=1e-12)
    np.testing.assert_array_equal(res.sign, s_ref)
    np.testing.assert_array_equal(np.isnan(res.similarity), np.isnan(E_ref))
    np.testing.assert_allclose(res.similarity, E_ref, rtol=1e-12, atol=1e-14)
    assert np.isnan(res.similarity).any() or (np.abs(res.similarity) < 1).any()


def exhaustive(w, E, c, t):
    E0 = np.nan_to_num(E)
    best, best_set = -np.inf, None
    for S in itertools.combinations(range(len(w)), t):
        S = list(S)
        v = w[S].sum() - c * (E0[np.ix_(S, S)].sum() - np.trace(E0[np.ix_(S, S)]))
        if v > best + 1e-12:
            best, best_set = v, set(S)
    return best_set


def test_greedy_equals_exhaustive_search_when_theorem_1_applies():
    """On random instances whose optimal sets are nested (theorem 1's condition), the greedy first t
    are the optimal t for every t; on others the greedy value is never above the optimum."""
    rng = np.random.default_rng(5)
    nested_cases = 0
    for trial in range(60):
        d = 7
        w = rng.uniform(0, 1, d)
        A = rng.uniform(-1, 1, (d, d))
        E = (A + A.T) / 2
        np.fill_diagonal(E, 1.0)
        c = float(rng.choice([0.02, 0.1, 0.3]))
        opt = [exhaustive(w, E, c, t) for t in range(1, d + 1)]
        if all(opt[t] <= opt[t + 1] for t in range(d - 1)):
            nested_cases += 1
            order, _ = gas_greedy(w, E, c, d)
            for t in range(1, d + 1):
                assert set(order[:t].tolist()) == opt[t - 1], (trial, t)
    assert nested_cases >= 10


def test_greedy_details():
    w = np.array([0.5, 0.9, 0.8, 0.1])
    E = np.array([[1, 0.2, 0.9, 0], [0.2, 1, 0.95, 0], [0.9, 0.95, 1, 0], [0, 0, 0, 1.0]])
    order, maxsim = gas_greedy(w, E, 0.0, 4)   # c = 0: importance alone
    assert order.tolist() == [1, 2, 0, 3] and np.isnan(maxsim[0]) and maxsim[1] == 0.95
    order, _ = gas_greedy(w, E, 0.5, 2)        # 0.8 - 0.95 < 0.5 - 0.2: the redundant one goes
    assert order.tolist() == [1, 0]
    with pytest.raises(ParameterError, match="0..4"):
        gas_greedy(w, E, 0.5, 5)


@contextlib.contextmanager
def killed_at_block(monkeypatch, n):
    """GAS's tau-b raises KeyboardInterrupt (as Ctrl-C would) at its n-th block, then is restored."""
    import streamrank.selection.gas as gas
    real, calls = gas._GasPass.tau_b, [0]

    def dying(self, *args):
        calls[0] += 1
        if calls[0] == n:
            raise KeyboardInterrupt
        return real(self, *args)

    monkeypatch.setattr(gas._GasPass, "tau_b", dying)
    try:
        yield
    finally:
        monkeypatch.setattr(gas._GasPass, "tau_b", real)


def generated(tmp_path, n_queries=30, seed=0):
    """Features of different importance, two of them near copies (redundant), one constant."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 25, n_queries)
    n = sizes.sum()
    rel = rng.standard_normal(n)
    y = np.digitize(rel, [0.3, 1.2]).astype(np.float32)
    X = np.column_stack([rel + 0.3 * rng.standard_normal(n), rel + 0.31 * rng.standard_normal(n),
                         rel + 2.0 * rng.standard_normal(n), rng.standard_normal(n), np.full(n, 7.0),
                         -rel + 0.5 * rng.standard_normal(n)]).astype(np.float32)
    p = tmp_path / "g.h5"
    with DatasetWriter(p, n_features=X.shape[1]) as w:
        w.append(X, y, np.repeat(np.arange(n_queries), sizes))
    return p


def test_block_layout_file_round_trip_and_redundancy(tmp_path):
    p = generated(tmp_path)
    with streamrank.open_dataset(p) as ds:
        a = gas_scores(ds, importance="map", signed=True, tradeoff=0.5)
        b = gas_scores(ds, importance="map", signed=True, tradeoff=0.5, block_bytes=6000)
    assert np.array_equal(a.importance, b.importance) and np.array_equal(a.similarity, b.similarity, equal_nan=True)
    assert a.sign[5] == -1 and np.all(np.isnan(a.similarity[4]))  # a reversed feature; a constant one
    order, _ = a.greedy(3)
    assert order[0] in (0, 1) and order[1] not in (0, 1)  # the near copy is redundant at c = 0.5
    a.save(tmp_path / "gas.h5")
    back = GasResult.load(tmp_path / "gas.h5")
    assert np.array_equal(back.greedy()[0], a.greedy()[0]) and back.tradeoff == 0.5
    assert parse_features(f"{tmp_path / 'gas.h5'}:3", 6).tolist() == order.tolist()
    raw = bytearray((tmp_path / "gas.h5").read_bytes())
    raw[-200] ^= 0xFF
    (tmp_path / "bad.h5").write_bytes(bytes(raw))
    with pytest.raises(FormatError):
        GasResult.load(tmp_path / "bad.h5")


def test_parse_features(tmp_path):
    assert parse_features("3,7,12", 46).tolist() == [2, 6, 11]
    (tmp_path / "f.txt").write_text("5\n1 2\n")
    assert parse_features(f"@{tmp_path / 'f.txt'}", 46).tolist() == [4, 0, 1]
    for spec, words in (("0,3", "1..46"), ("47", "1..46"), ("3,3", "twice"), ("a,b", "integers"), ("", "no feature")):
        with pytest.raises(ParameterError, match=words):
            parse_features(spec, 46)


def test_cli_select_features(tmp_path, capsys):
    p = generated(tmp_path)
    rc = main(["select-features", str(p), "-k", "3", "--importance", "pairwise", "--tradeoff", "0.5", "--signed",
               "-o", str(tmp_path / "gas.h5"), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(out["selected"]) == 3 and out["selected"][0]["feature"] in (1, 2)
    rc = main(["select-features", str(p), "-k", "3"])
    text = capsys.readouterr().out
    assert rc == 0 and "importance" in text and "similarity" in text
    rc = main(["select-features", str(p), "-k", "9"])
    assert rc == 2 and "-k must be in 1..6" in capsys.readouterr().err


@pytest.mark.parametrize("method", ["primal", "nystroem", "exact", "clsr"])
def test_training_on_a_subset_equals_training_on_the_subset_file(tmp_path, method):
    """--features 6,1,3 trains the model a file holding only those columns (in that order) trains, and
    the model applies the subset to full-width rows; its file is version 3 and loads again."""
    from streamrank.training.clsr import train_clsr
    from streamrank.training.exact import train_exact
    from streamrank.training.linear import train_linear
    p = generated(tmp_path, n_queries=20)
    cols = np.array([5, 0, 2])
    with streamrank.open_dataset(p) as ds:
        X, y = ds.read(0, ds.n_rows)
        qid = np.repeat(np.arange(ds.n_queries), np.diff(ds.query_ptr))
        q = tmp_path / "sub.h5"
        with DatasetWriter(q, n_features=3) as w:
            w.append(np.ascontiguousarray(X[:, cols]), y, qid)
        train = {"primal": train_linear, "nystroem": train_linear, "exact": train_exact, "clsr": train_clsr}[method]
        kw = {"primal": dict(C=0.5, tol=1e-8), "nystroem": dict(C=0.5, method="nystroem", gamma=0.3, components=20),
              "exact": dict(C=0.5, gamma=0.3, tol=1e-8), "clsr": dict(lam=1e-2, gamma=0.3, components=20)}[method]
        full, s_full = train(ds, features="6,1,3", **kw)
        with streamrank.open_dataset(q) as sub:
            ref, s_ref = train(sub, **kw)
            assert np.array_equal(full.w, ref.w)
            assert np.array_equal(full.decision_function(X), ref.decision_function(X[:, cols]))
            assert np.array_equal(full.predict_dataset(ds), ref.predict_dataset(sub))
        full.save(tmp_path / "m.h5")
        back = streamrank.load(tmp_path / "m.h5")
        assert back.model_.input_features.tolist() == cols.tolist() and back.model_.config["features"] == [6, 1, 3]
        assert np.array_equal(back.predict(p), full.predict_dataset(ds))
        import h5py
        with h5py.File(tmp_path / "m.h5", "r") as f:
            assert f.attrs["version"] == 3


def test_cli_trains_on_the_gas_selection(tmp_path, capsys):
    p = generated(tmp_path)
    assert main(["select-features", str(p), "-k", "2", "-o", str(tmp_path / "gas.h5"), "--quiet"]) == 0
    chosen = GasResult.load(tmp_path / "gas.h5").greedy(2)[0]
    rc = main(["train", str(p), "-o", str(tmp_path / "m.h5"), "--features", f"{tmp_path / 'gas.h5'}:2", "--json",
               "--quiet"])
    assert rc == 0
    back = streamrank.load(tmp_path / "m.h5")
    assert back.model_.input_features.tolist() == chosen.tolist()
    assert main(["predict", str(tmp_path / "m.h5"), str(p), "-o", str(tmp_path / "s.txt")]) == 0
    rc = main(["train", str(p), "-o", str(tmp_path / "n.h5"), "--features", "9"])
    assert rc == 2 and "--features" in capsys.readouterr().err


def test_a_killed_pass_resumes_from_its_checkpoint_to_the_same_result(tmp_path, monkeypatch):
    p = generated(tmp_path, n_queries=40)
    with streamrank.open_dataset(p) as ds:
        whole = gas_scores(ds, importance="ndcg@10", signed=True, block_bytes=4000)
        with killed_at_block(monkeypatch, 3), pytest.raises(KeyboardInterrupt):
            gas_scores(ds, importance="ndcg@10", signed=True, block_bytes=4000, checkpoint=tmp_path / "ck",
                       commit_seconds=0)
        assert (tmp_path / "ck" / "checkpoint.h5").exists()
        again = gas_scores(ds, importance="ndcg@10", signed=True, block_bytes=9000, checkpoint=tmp_path / "ck",
                           resume=True)
        assert again.n_queries == whole.n_queries
        assert np.array_equal(again.importance, whole.importance)
        assert np.array_equal(again.similarity, whole.similarity, equal_nan=True)
        with pytest.raises(streamrank.errors.CheckpointMismatch):
            gas_scores(ds, importance="map", checkpoint=tmp_path / "ck", resume=True)


def test_cli_checkpoint_and_resume(tmp_path, capsys, monkeypatch):
    import streamrank.io.budget as budget
    monkeypatch.setattr(budget, "resident_bytes", lambda: 0)  # a 64 KB budget then holds the sums
    p = generated(tmp_path)
    rc = main(["select-features", str(p), "-k", "3", "--checkpoint", str(tmp_path / "ck"), "--commit-every", "0",
               "--memory-budget", "64KB", "--json"])  # small blocks: a checkpoint after each
    first = capsys.readouterr().out.strip().splitlines()[-1]
    assert rc == 0 and (tmp_path / "ck" / "checkpoint.h5").exists()
    rc = main(["select-features", str(p), "-k", "3", "--checkpoint", str(tmp_path / "ck"), "--resume", "--json"])
    assert rc == 0 and capsys.readouterr().out.strip().splitlines()[-1] == first
    assert main(["select-features", str(p), "--resume"]) == 2
    assert "--resume needs --checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["map", "pairwise"])
def test_blocks_of_rows_on_disk_equal_one_pass(tmp_path, kind, monkeypatch):
    """A budget too small for the d x d sums: passes over blocks of rows of the similarity matrix,
    kept on disk, give the same importance, similarity and selection as one pass."""
    import streamrank.io.budget as budget
    from streamrank.selection.gas import StoredSimilarity, pair_rows
    p = generated(tmp_path)
    with streamrank.open_dataset(p) as ds:
        one = gas_scores(ds, importance=kind, signed=True, tradeoff=0.3)
        monkeypatch.setattr(budget, "resident_bytes", lambda: 0)
        assert pair_rows(6, 400, 0) == 1 and pair_rows(6, 900, 0) == 6
        many = gas_scores(ds, importance=kind, signed=True, tradeoff=0.3, memory_budget="600B",
                          block_bytes=6000)  # 2 rows of the matrix a pass
    assert isinstance(many.similarity, StoredSimilarity)
    assert np.array_equal(many.importance, one.importance) and np.array_equal(many.sign, one.sign)
    assert np.array_equal(many.similarity[:], one.similarity, equal_nan=True)
    assert np.array_equal(many.greedy()[0], one.greedy()[0])
    many.save(tmp_path / "gas.h5")
    assert np.array_equal(GasResult.load(tmp_path / "gas.h5").similarity, one.similarity, equal_nan=True)
    path = many.similarity.path
    del many
    import gc
    gc.collect()
    assert not path.exists()  # the temporary store goes with its result


def test_blocks_of_rows_killed_and_resumed(tmp_path, monkeypatch):
    p = generated(tmp_path, n_queries=40)
    with streamrank.open_dataset(p) as ds:
        whole = gas_scores(ds, importance="map", signed=True, block_bytes=4000)
        with killed_at_block(monkeypatch, 7), pytest.raises(KeyboardInterrupt):
            gas_scores(ds, importance="map", signed=True, block_bytes=4000, checkpoint=tmp_path / "ck",
                       commit_seconds=0, rows_per_pass=2)
        # resumed as a user would: the checkpoint keeps its blocks of rows, whatever the budget says now
        again = gas_scores(ds, importance="map", signed=True, block_bytes=9000, checkpoint=tmp_path / "ck",
                           resume=True)
        assert np.array_equal(again.importance, whole.importance)
        assert np.array_equal(again.similarity[:], whole.similarity, equal_nan=True)
        with pytest.raises(ParameterError, match="similarity_file="):
            gas_scores(ds, importance="map", signed=True, checkpoint=tmp_path / "ck", resume=True,
                       similarity_file=tmp_path / "elsewhere.h5")


def test_a_blocked_resume_without_its_rows_is_refused(tmp_path, monkeypatch):
    p = generated(tmp_path, n_queries=40)
    with streamrank.open_dataset(p) as ds:
        with killed_at_block(monkeypatch, 7), pytest.raises(KeyboardInterrupt):
            gas_scores(ds, block_bytes=4000, checkpoint=tmp_path / "ck", commit_seconds=0, rows_per_pass=2)
        (tmp_path / "ck" / "similarity.h5").unlink()
        with pytest.raises(FormatError, match="finished blocks .* are gone"):
            gas_scores(ds, block_bytes=4000, checkpoint=tmp_path / "ck", resume=True)


def test_a_blocked_resume_over_damaged_rows_is_refused(tmp_path, monkeypatch):
    """The finished blocks' similarity rows are checked against the sha256 the checkpoint recorded."""
    import h5py
    p = generated(tmp_path, n_queries=40)
    with streamrank.open_dataset(p) as ds:
        with killed_at_block(monkeypatch, 7), pytest.raises(KeyboardInterrupt):
            gas_scores(ds, block_bytes=4000, checkpoint=tmp_path / "ck", commit_seconds=0, rows_per_pass=2)
        with h5py.File(tmp_path / "ck" / "similarity.h5", "r+") as f:
            assert f.attrs["format"] == "streamrank-gas-similarity" and f.attrs["version"] == 1
            f["similarity"][0, 1] += 1e-9
        with pytest.raises(FormatError, match="rows 0..1 differ from those the checkpoint"):
            gas_scores(ds, block_bytes=4000, checkpoint=tmp_path / "ck", resume=True)


def test_tau_kernel_chunks_ranges_and_blocks_of_rows_change_no_bit():
    """kendall.block_tau_b_pairs: the sums over queries in chunks of 1, 7 or all rows, over the
    pairs in 1, 2 or 5 ranges (pair_ranges), and over the matrix's rows in blocks, equal each other
    bit for bit and scipy's tau-b per query (ties, a constant column, queries of 0, 1 and 2 rows)."""
    from streamrank._native.kendall import block_tau_b_pairs, pair_ranges
    rng = np.random.default_rng(8)
    sizes = np.array([5, 0, 1, 2, 9, 3, 12, 4])
    qp = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    X = np.round(rng.standard_normal((qp[-1], 5)) * 1.5).astype(np.float32)
    X[:, 3] = 2.0
    d = X.shape[1]
    want_sum, want_count = np.zeros((d, d)), np.zeros((d, d), np.int64)
    for a, b in zip(qp[:-1], qp[1:]):
        for i in range(d):
            for j in range(d):
                t = kendalltau(X[a:b, i], X[a:b, j]).statistic if b - a >= 2 else np.nan
                if not np.isnan(t):
                    want_sum[i, j] += t
                    want_count[i, j] += 1
    got = []
    for chunk in (1, 7, 10_000):
        for parts in (1, 2, 5):
            for rows in ((0, d), (0, 2), (2, 4), (4, 5)):
                r = rows[1] - rows[0]
                s, c = np.zeros((r, d)), np.zeros((r, d), np.int64)
                ranges = pair_ranges(r, d, parts)
                assert ranges[0][0] == 0 and ranges[-1][1] == r * d
                assert all(a1 == b0 for (_, a1), (b0, _) in zip(ranges, ranges[1:]))
                for k0, k1 in ranges:
                    block_tau_b_pairs(X, qp, rows[0], rows[1], k0, k1, chunk, s, c)
                got.append((rows, s, c))
    whole = got[-1][1] if got[-1][0] == (0, d) else [g for g in got if g[0] == (0, d)][-1][1]
    for (i0, i1), s, c in got:
        assert np.array_equal(s, whole[i0:i1]), i0
        np.testing.assert_array_equal(c, want_count[i0:i1])
        np.testing.assert_allclose(s, want_sum[i0:i1], rtol=1e-12, atol=1e-15)
    assert np.all(want_count[3] == 0)


def test_steps_of_queries_change_no_bit(tmp_path, monkeypatch):
    """The tau-b of a block in steps of one query each (what bounds a Ctrl-C's wait) sums the same
    bits as the whole block at once, in one thread or several."""
    import numba
    import streamrank.selection.gas as gas
    p = generated(tmp_path)
    with streamrank.open_dataset(p) as ds:
        whole = gas_scores(ds, importance="map", signed=True)
        monkeypatch.setattr(gas, "TAU_STEP_PAIR_ROWS", 1)
        for threads in (1, 2):
            monkeypatch.setattr(gas, "_threads", lambda n=threads: n)
            steps = gas_scores(ds, importance="map", signed=True)
            assert np.array_equal(steps.similarity, whole.similarity, equal_nan=True), threads
    assert numba.get_num_threads() >= 1
