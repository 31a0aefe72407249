"""GAS-E with ties (issue 31): importance is the expected measure over every order of the documents a
feature ties (brute force over itertools.permutations), the same for any row order within the
queries, and features constant within every query are never selected."""

import itertools
import json
import math

import numpy as np
import pytest
import tie_oracle

import streamrank
from streamrank._native import feature_measures as fm
from streamrank.cli import main
from streamrank.evaluation.metrics import _log_table, evaluate
from streamrank.io.hdf5_format import DatasetWriter
from streamrank.selection.gas import GasResult, gas_scores

KIND = {"map": fm.AP, "ndcg": fm.NDCG, "p": fm.PRECISION}


def kernel(x, y, kind, k=1, negate=False):
    """The kernel on one query (feature x and, with negate, -x)."""
    n = len(x)
    out = np.zeros((2, 1))
    fm.block_measures(np.asarray(x, np.float32).reshape(n, 1), np.asarray(y, np.float64),
                      np.array([0, n], np.int64), k, KIND[kind], negate, _log_table(n + 2), out)
    return out[:, 0]


def tied_query(rng, sizes, labels):
    """A query whose feature has tie groups of the given sizes (values in random row order)."""
    x = np.repeat(rng.permutation(len(sizes)).astype(np.float64), sizes)
    perm = rng.permutation(x.size)
    return x[perm], rng.choice(labels, x.size).astype(np.float64)


def cases():
    """Tie groups of sizes 1..5 in every combination that keeps the orders to at most 2,880,
    labels 0..2 and binary."""
    rng = np.random.default_rng(31)
    out = []
    for sizes in [(5,), (1, 5), (5, 1), (2, 3), (3, 2, 1), (1, 4, 2), (4, 1, 1, 3), (2, 2, 2, 2), (5, 4),
                  (1, 1, 1, 1), (3, 1, 5), (2, 5, 1, 1)]:
        for labels in ((0, 1, 2), (0, 1)):
            for _ in range(3):
                out.append(tied_query(rng, sizes, labels))
    return out


CASES = cases()


# P@k's expected value takes the same tie sums as NDCG@k's: the slow tier
@pytest.mark.parametrize("kind", ["map", "ndcg", pytest.param("p", marks=pytest.mark.slow)])
def test_kernel_and_twin_equal_the_mean_over_every_order_of_the_ties(kind):
    """Every k from 1 to n + 1 (so k straddles each tie group somewhere, and passes the query's end),
    and the feature negated (the groups in the other order)."""
    checked = 0
    for x, y in CASES:
        n = x.size
        for k in (range(1, n + 2) if kind != "map" else (1,)):
            for negate in (False, True):
                xx = -x if negate else x
                want = tie_oracle.brute_force(xx, y, kind, k if kind != "map" else None)
                twin = tie_oracle.expected_measure(xx, y, kind, k)
                got = kernel(x, y, kind, k, negate=True)[1 if negate else 0]
                assert twin == pytest.approx(want, rel=1e-12, abs=1e-15), (kind, x, y, k, negate)
                assert got == pytest.approx(want, rel=1e-12, abs=1e-15), (kind, x, y, k, negate)
                checked += 1
    assert checked > 100


def test_a_straddling_tie_group_by_hand():
    """Labels (2, 0, 1, 1, 0) in one tie of 5: P@2 = 2 positions x mean relevance 3/5 over 2; NDCG@2 =
    (1 + 1) x mean gain (3 + 0 + 1 + 1 + 0) / 5 over the ideal 3 + 1; AP = E[precision at a relevant
    document's rank] = (1 / 5) sum_j (1 + (j - 1) / 2) / j over j = 1..5."""
    x, y = np.zeros(5), np.array([2.0, 0, 1, 1, 0])
    assert kernel(x, y, "p", 2)[0] == pytest.approx(0.6, rel=1e-15)
    assert kernel(x, y, "ndcg", 2)[0] == pytest.approx(2 * 1.0 / 4, rel=1e-15)
    assert kernel(x, y, "map")[0] == pytest.approx(sum((1 + (j - 1) / 2) / j for j in range(1, 6)) / 5, rel=1e-15)


def test_without_ties_each_value_is_letor4s_to_the_last_bit():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 30))
        x, y = rng.permutation(n).astype(np.float64), rng.integers(0, 3, n).astype(np.float64)
        for kind, k in (("map", 1), ("ndcg", 1), ("ndcg", 10), ("p", 3), ("p", 10)):
            r = evaluate(y, x, np.array([0, n]), convention="letor4", ks=(k,)).means
            want = {"map": r["MAP"], "ndcg": r[f"NDCG@{k}"], "p": r[f"P@{k}"]}[kind]
            assert kernel(x, y, kind, k)[0] == want


def quantised(tmp_path, n_queries=40, seed=0, name="q.h5", order=None):
    """Features with many ties (a few values each), one 0 everywhere, one query-level; the rows of
    each query in the order ``order(q, n)`` gives (default: as generated)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 16, n_queries)
    rows = []
    for q, n in enumerate(sizes):
        rel = rng.standard_normal(n)
        y = np.digitize(rel, [0.2, 1.0]).astype(np.float32)
        X = np.column_stack([np.round(rel + 0.5 * rng.standard_normal(n)), np.round(rng.standard_normal(n)),
                             (rel > 0) + rng.integers(0, 2, n), np.zeros(n), np.full(n, rng.uniform(1, 5)),
                             np.round(2 * rel + rng.standard_normal(n))]).astype(np.float32)
        rows.append((X, y))
    p = tmp_path / name
    with DatasetWriter(p, n_features=6) as w:
        for q, (X, y) in enumerate(rows):
            perm = np.arange(len(y)) if order is None else order(q, X, y)
            w.append(X[perm], y[perm], np.full(len(y), q))
    return p


@pytest.mark.parametrize("kind", ["map", "ndcg@3", "p@5", "pairwise"])
def test_shuffling_rows_within_queries_changes_nothing(tmp_path, kind):
    """Importance, similarity and the selection, bit for bit, for three row orders: as generated,
    shuffled, and sorted by decreasing label (the order that flatters a feature's ties most)."""
    shuffle = np.random.default_rng(9)
    files = [quantised(tmp_path, name="a.h5"),
             quantised(tmp_path, name="b.h5", order=lambda q, X, y: shuffle.permutation(len(y))),
             quantised(tmp_path, name="c.h5", order=lambda q, X, y: np.argsort(-y, kind="stable"))]
    res = []
    for p in files:
        with streamrank.open_dataset(p) as ds:
            res.append(gas_scores(ds, importance=kind, signed=True, tradeoff=0.5, block_bytes=3000))
    for r in res[1:]:
        assert np.array_equal(r.importance, res[0].importance), kind
        assert np.array_equal(r.sign, res[0].sign)
        assert np.array_equal(r.similarity, res[0].similarity, equal_nan=True)
        assert np.array_equal(r.greedy()[0], res[0].greedy()[0])


def test_importance_is_the_twin_averaged_over_queries(tmp_path):
    p = quantised(tmp_path, n_queries=25, seed=4)
    with streamrank.open_dataset(p) as ds:
        X, y = ds.read(0, ds.n_rows)
        qp = ds.query_ptr[:]
        for kind, k in (("map", None), ("ndcg", 5), ("p", 3)):
            res = gas_scores(ds, importance=kind if k is None else f"{kind}@{k}", signed=True, block_bytes=2000)
            for f in range(X.shape[1]):
                both = [np.mean([tie_oracle.expected_measure(s * X[a:b, f], y[a:b], kind, k)
                                 for a, b in zip(qp[:-1], qp[1:])]) for s in (1, -1)]
                want = both[1] if res.sign[f] < 0 else both[0]
                assert res.importance[f] == pytest.approx(want, rel=1e-12), (kind, f)


def test_constant_within_every_query_is_never_selected(tmp_path, capsys):
    """Rows sorted by decreasing label: ranking by a constant in file order would score a perfect
    MAP (the ideal one), above every real feature; both constant features (0 everywhere, and query-level) are
    listed apart, with their reasons, and never selected, whatever k and the tradeoff."""
    p = quantised(tmp_path, order=lambda q, X, y: np.argsort(-y, kind="stable"))
    with streamrank.open_dataset(p) as ds:
        X, y = ds.read(0, ds.n_rows)
        qp = ds.query_ptr[:]
        ideal = evaluate(y, y, qp, convention="letor4").means["MAP"]  # queries without relevant rows score 0
        for f in (3, 4):  # the input order's MAP of the constants: the best any order scores
            assert evaluate(y, X[:, f], qp, convention="letor4").means["MAP"] == ideal
        for kind in ("map", "ndcg@10", "p@3", "pairwise"):
            for c in (0.0, 0.5, 5.0):
                res = gas_scores(ds, importance=kind, signed=True, tradeoff=c)
                if kind == "map":
                    assert ideal > max(res.importance)
                assert res.constant.tolist() == [False, False, False, True, True, False]
                order, _ = res.greedy()
                assert sorted(order.tolist()) == [0, 1, 2, 5]
                if kind == "pairwise":  # ties count one half: an error rate of 1/2
                    assert res.importance[3] == res.importance[4] == 2.0
                assert np.all(np.isnan(res.similarity[3])) and np.all(np.isnan(res.similarity[:, 4]))
    assert main(["select-features", str(p), "-k", "4", "--signed", "--json", "-o", str(tmp_path / "g.h5")]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sorted(r["feature"] for r in out["selected"]) == [1, 2, 3, 6]
    const = {c["feature"]: c["reason"] for c in out["constant_within_queries"]}
    assert list(const) == [4, 5] and const[4] == "the same value (0) on every row"
    assert "varies only across queries" in const[5]
    back = GasResult.load(tmp_path / "g.h5")
    assert back.constant.tolist() == [False, False, False, True, True, False] and back.feature_max[3] == 0
    assert main(["select-features", str(p), "-k", "5"]) == 2
    assert "-k must be in 1..4: 2 of the 6 features" in capsys.readouterr().err
    assert main(["select-features", str(p)]) == 0
    text = capsys.readouterr().out
    assert "4 of the 4 features that vary within a query (of 6)" in text
    assert "never selected, constant within every query" in text and "feature    5: constant within every" in text


def test_a_pair_undefined_on_every_query_has_no_similarity(tmp_path, capsys):
    """Features 1 and 2 never vary in the same query: their tau-b is undefined on every query, the
    pair has no similarity (NaN), the second's weight is not lowered by the first (feature 3, a near
    copy of 1, is), and the text and JSON outputs say so."""
    rng = np.random.default_rng(2)
    qid, Xs, ys = [], [], []
    for q in range(20):
        n = 6
        y = rng.integers(0, 3, n).astype(np.float32)
        a = y + rng.integers(0, 2, n) if q % 2 == 0 else np.zeros(n)
        b = np.zeros(n) if q % 2 == 0 else y + rng.integers(0, 2, n)
        copy = a + 0.1 * rng.standard_normal(n) if q % 2 == 0 else np.zeros(n)  # a near copy of the first
        Xs.append(np.column_stack([a, b, copy]).astype(np.float32))
        ys.append(y)
        qid.append(np.full(n, q))
    p = tmp_path / "u.h5"
    with DatasetWriter(p, n_features=3) as w:
        w.append(np.concatenate(Xs), np.concatenate(ys), np.concatenate(qid))
    with streamrank.open_dataset(p) as ds:
        res = gas_scores(ds, importance="map", tradeoff=10.0)
    assert np.isnan(res.similarity[0, 1]) and not np.isnan(res.similarity[0, 0])
    order, maxsim = res.greedy(3)
    # feature 2 and one of 1 and 3 come first whatever c: none lowers the other; the near copy comes last
    assert 1 in order[:2] and {0, 2} & set(order[:2].tolist()) and np.isnan(maxsim[1]) and maxsim[2] > 0.5
    assert res.greedy(2)[0].tolist() == res.greedy(2, tradeoff=0.0)[0].tolist()
    assert main(["select-features", str(p), "-k", "2", "--tradeoff", "10", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["selected"][1]["similarity_undefined_with"] == [out["selected"][0]["feature"]]
    assert out["selected"][1]["max_similarity_to_chosen"] is None
    assert main(["select-features", str(p), "-k", "2", "--tradeoff", "10"]) == 0
    text = capsys.readouterr().out
    assert "undefined *" in text and "tau-b is undefined on every query and its weight was not lowered" in text


def test_a_version_1_file_loads_and_its_constant_features_are_not_selected():
    """tests/data/gas_v1.h5 (written by the code before format 2, whose selection put the constant
    feature 5 second): the constant features are those whose similarity with themselves is undefined."""
    from locations import DATA
    res = GasResult.load(DATA / "gas_v1.h5")
    assert res.constant.tolist() == [False, False, False, False, True, False]
    order, _ = res.greedy()
    assert 4 not in order.tolist() and len(order) == 5
    assert "version 1" in res.to_dict(2)["constant_within_queries"][0]["reason"]


def test_mq2008_fold1_selects_none_of_its_zero_features(tmp_path, capsys):
    """MQ2008 Fold1's features 6-10 and 43 are 0 on every training row: -k 10 never takes them (it
    put them at ranks 2-7 before)."""
    from locations import MQ2008
    if not MQ2008.exists():
        pytest.skip("../shared/data/MQ2008 is not available")
    from streamrank.io.convert import convert
    convert([MQ2008 / "Fold1" / "train.txt.gz"], tmp_path / "mq.h5", quiet=True)
    for extra in ([], ["--signed"], ["--importance", "ndcg@10"]):
        assert main(["select-features", str(tmp_path / "mq.h5"), "-k", "10", "--importance", "map", "--tradeoff",
                     "0.5", "--json", *extra]) == 0
        out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        chosen = {r["feature"] for r in out["selected"]}
        assert len(chosen) == 10 and not chosen & {6, 7, 8, 9, 10, 43}, extra
        assert [c["feature"] for c in out["constant_within_queries"]] == [6, 7, 8, 9, 10, 43]
