"""Tests of streamrank.evaluation.metrics.

The acceptance test reproduces, to the printed digit, the official LETOR 4.0 script
(Eval-Score-4.0.pl, per-query mode) on MQ2008 Fold1 test for two score files (see
tests/data/letor4_eval/README.md). The ``standard`` convention and pairwise accuracy are checked
against brute force on small random queries.
"""

import gzip
import itertools
import json
import math

import numpy as np
import pytest

from streamrank.evaluation.metrics import _count_inversions, evaluate, pairwise_accuracy_counts

from locations import DATA as _DATA, SHARED as _SHARED  # noqa: E402

DATA = _DATA / "letor4_eval"
SHARED = _SHARED / "data"
SHARED_TEST = SHARED / "MQ2008" / "Fold1" / "test.txt.gz"


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------

def read_letor(path):
    """Tiny LETOR reader (independent of the project's converter).

    Returns a list of (label, qid, {index: value}, comment) in line order.
    """
    rows = []
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            body, _, comment = line.partition("#")
            tok = body.split()
            if not tok:
                continue
            assert tok[1].startswith("qid:")
            feats = {int(i): float(v) for i, v in (t.split(":") for t in tok[2:])}
            rows.append((float(tok[0]), tok[1][4:], feats, comment.strip()))
    return rows


def group(qids):
    """query_ptr and one qid per query for contiguous runs of qids (MQ2008 test is contiguous)."""
    qids = np.asarray(qids)
    starts = np.flatnonzero(np.r_[True, qids[1:] != qids[:-1]])
    assert len(set(qids[starts])) == len(starts), "queries not contiguous"
    return np.r_[starts, qids.size].astype(np.int64), qids[starts]


def bundled_labels():
    qid, lab = zip(*(line.split() for line in (DATA / "mq2008_fold1_test.qid_label.txt").open()))
    return np.array(lab, dtype=float), np.array(qid)


def shared_labels():
    if not SHARED_TEST.exists():
        pytest.skip(f"{SHARED_TEST} not present (the shared data directory beside the repository)")
    rows = read_letor(SHARED_TEST)
    return np.array([r[0] for r in rows]), np.array([r[1] for r in rows])


def parse_perl_output(path):
    """The two tables of Eval-Score-4.0.pl's per-query output.

    Returns [(header, [(qid, [str, ...]), ...], [avg str, ...]), ...] for the P/MAP table and the
    NDCG/MeanNDCG table, numbers kept as printed.
    """
    tables = []
    for block in path.read_text().split("\n\n"):
        lines = [ln for ln in block.split("\n") if ln]
        if not lines:
            continue
        header = lines[0].split("\t")
        rows = [(ln.split("\t")[0], ln.split("\t")[1:]) for ln in lines[1:]]
        assert rows[-1][0] == "Average"
        tables.append((header, rows[:-1], rows[-1][1]))
    assert len(tables) == 2
    return tables


# --------------------------------------------------------------------------------------------
# the oracle: LETOR 4.0's Eval-Score-4.0.pl
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("source", ["bundled", "shared"])
@pytest.mark.parametrize("name", ["ties", "fine"])
def test_letor4_reproduces_official_script(name, source):
    y, qids = bundled_labels() if source == "bundled" else shared_labels()
    scores = np.loadtxt(DATA / f"scores_{name}.txt")
    assert scores.shape == y.shape == (2874,)
    ptr, qid = group(qids)
    rep = evaluate(y, scores, ptr, convention="letor4", qid=qid)
    (h1, rows1, avg1), (h2, rows2, avg2) = parse_perl_output(DATA / f"scores_{name}.perl_output.txt")

    assert h1 == ["qid"] + [f"P@{k}" for k in range(1, 11)] + ["MAP"]
    assert h2 == ["qid"] + [f"NDCG@{k}" for k in range(1, 11)] + ["MeanNDCG"]
    # The script prints queries in ascending numeric qid order ("sort {$a <=> $b}") and so do we.
    order = [str(rep.qid[q]) for q in rep.order]
    assert [r[0] for r in rows1] == order == [r[0] for r in rows2]
    assert len(order) == rep.n_queries == 156

    # Compare every printed number as the formatted string: '%.4f' in Python and Perl's sprintf
    # both round the exact binary value, ties to even (e.g. MeanNDCG of qid 18531 is exactly
    # 0.59375 = 19/32 and prints as 0.5938 in both).
    pos = {str(rep.qid[q]): q for q in range(rep.n_queries)}
    n_checked = 0
    for qid_s, vals in rows1:
        q = pos[qid_s]
        ours = ["%.4f" % v for v in rep.precision[q]] + ["%.4f" % rep.average_precision[q]]
        assert ours == vals, f"P/MAP of qid {qid_s}"
        n_checked += len(vals)
    for qid_s, vals in rows2:
        q = pos[qid_s]
        ours = ["%.4f" % v for v in rep.ndcg[q]] + ["%.4f" % rep.mean_ndcg[q]]
        assert ours == vals, f"NDCG/MeanNDCG of qid {qid_s}"
        n_checked += len(vals)
    m = rep.means
    assert ["%.4f" % m[f"P@{k}"] for k in range(1, 11)] + ["%.4f" % m["MAP"]] == avg1
    assert ["%.4f" % m[f"NDCG@{k}"] for k in range(1, 11)] + ["%.4f" % m["MeanNDCG"]] == avg2
    assert n_checked + 22 == 2 * 157 * 11

    # The per-query text is the script's output byte for byte (after our '#' comment lines).
    text = rep.format(per_query=True)
    body = "".join(ln for ln in text.splitlines(True) if not ln.startswith("#"))
    assert body.startswith((DATA / f"scores_{name}.perl_output.txt").read_text())
    assert "# convention: letor4" in text
    assert rep.notes == ()  # MQ2008 labels are 0/1/2


def test_ties_file_decides_tie_order():
    """The tie-heavy oracle would catch another tie rule: the pessimistic order (standard
    convention's rule) changes many printed letor4 numbers."""
    y, qids = bundled_labels()
    scores = np.loadtxt(DATA / "scores_ties.txt")
    ptr, qid = group(qids)
    rep = evaluate(y, scores, ptr, qid=qid)
    # reorder each query pessimistically and score by strictly decreasing position
    perm = np.concatenate([a + np.lexsort((y[a:b], -scores[a:b])) for a, b in zip(ptr[:-1], ptr[1:])])
    rep2 = evaluate(y[perm], -np.arange(y.size, dtype=float), ptr, qid=qid)
    differ = np.sum(np.char.mod("%.4f", rep.ndcg) != np.char.mod("%.4f", rep2.ndcg))
    assert differ > 50


def test_bundled_labels_match_letor_text():
    y, qids = shared_labels()
    yb, qb = bundled_labels()
    assert np.array_equal(y, yb) and np.array_equal(qids, qb)
    for name in ("ties", "fine"):
        shared = SHARED / "letor4_eval" / f"scores_{name}.txt"
        if shared.exists():
            assert shared.read_bytes() == (DATA / f"scores_{name}.txt").read_bytes()


# --------------------------------------------------------------------------------------------
# letor4 on random data against a plain transliteration of the Perl script
# --------------------------------------------------------------------------------------------

def perl_like_query(labels, preds, top_n):
    """Eval-Score-4.0.pl's EvalQuery for one query, transliterated with Python loops.

    Gains 2^y - 1 (the script's table on 0/1/2, this project's choice beyond). Returns
    (P@1..top_n, MAP, NDCG@1..top_n with 0 where the Perl array is undefined, MeanNDCG).
    """
    n = len(labels)
    docs = sorted(range(n), key=lambda i: -preds[i])       # Python's sort is stable, like Perl's
    rates = [labels[i] for i in docs]
    gain = lambda r: 2.0 ** r - 1.0
    prec, num_rel = [], 0
    for i in range(top_n):
        r = rates[i] if i < n else 0
        num_rel += r >= 1
        prec.append(num_rel / (i + 1))
    num_rel, avg_p = 0, 0.0
    for i in range(n):
        if rates[i] >= 1:
            num_rel += 1
            avg_p += num_rel / (i + 1)
    map_q = avg_p / num_rel if num_rel else 0.0

    def dcg(rs):
        out = [gain(rs[0])]
        for i in range(1, n):
            out.append(out[-1] + (gain(rs[i]) if i < 2 else gain(rs[i]) * math.log(2.0) / math.log(i + 1.0)))
        return out

    d, best = dcg(rates), dcg(sorted(rates, key=gain, reverse=True))
    ndcg = [d[i] / best[i] if best[i] != 0 else 0 for i in range(n)]
    mean_ndcg = sum(ndcg) / n
    ndcg_top = [ndcg[i] if i < n else 0.0 for i in range(top_n)]
    return prec, map_q, ndcg_top, mean_ndcg


def random_queries(rng, n_queries, max_len, n_labels=3, n_score_levels=4):
    sizes = rng.integers(1, max_len + 1, n_queries)
    ptr = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    y = rng.integers(0, n_labels, ptr[-1]).astype(float)
    s = rng.integers(0, n_score_levels, ptr[-1]) / 2.0 - 1.0   # many ties
    return y, s, ptr


@pytest.mark.parametrize("n_labels", [3, 5])
def test_letor4_matches_transliteration(n_labels):
    rng = np.random.default_rng(1)
    y, s, ptr = random_queries(rng, 300, 14, n_labels=n_labels)
    ks = range(1, 21)
    rep = evaluate(y, s, ptr, convention="letor4", ks=ks)
    for q in range(len(ptr) - 1):
        a, b = ptr[q], ptr[q + 1]
        prec, map_q, ndcg, mean_ndcg = perl_like_query(list(y[a:b]), list(s[a:b]), 20)
        np.testing.assert_allclose(rep.precision[q], prec, rtol=0, atol=1e-12)
        np.testing.assert_allclose(rep.ndcg[q], ndcg, rtol=0, atol=1e-12)
        assert rep.average_precision[q] == pytest.approx(map_q, abs=1e-12)
        assert rep.mean_ndcg[q] == pytest.approx(mean_ndcg, abs=1e-12)
    assert (n_labels > 3) == bool(rep.notes)


def test_letor4_conventions_on_a_small_case():
    # one query of 3 documents (labels in input order 0, 2, 1; all scores tied), one without
    # relevant documents
    y = np.array([0, 2, 1, 0, 0], float)
    s = np.array([1, 1, 1, 5, 3], float)
    ptr = np.array([0, 3, 5])
    rep = evaluate(y, s, ptr, ks=[1, 2, 3, 4], qid=np.array([7, 3]))
    # ties in input order: ranking 0, 2, 1 -> DCG 0, 3, 3 + 1/log2(3); ideal 3, 4, 4
    dcg3 = 3 + 1 / math.log2(3)
    np.testing.assert_allclose(rep.ndcg[0], [0, 3 / 4, dcg3 / 4, 0])       # NDCG@4 beyond n: 0
    np.testing.assert_allclose(rep.precision[0], [0, 1 / 2, 2 / 3, 2 / 4])  # P@4 over 4
    assert rep.average_precision[0] == pytest.approx((1 / 2 + 2 / 3) / 2)
    assert rep.mean_ndcg[0] == pytest.approx((0 + 3 / 4 + dcg3 / 4) / 3)
    # the query without relevant documents scores 0 and stays in the average
    assert rep.n_queries_without_relevant == 1 and rep.n_queries_averaged == 2
    assert np.all(rep.ndcg[1] == 0) and rep.average_precision[1] == 0 and rep.mean_ndcg[1] == 0
    assert rep.means["NDCG@2"] == pytest.approx(3 / 8)
    assert list(rep.order) == [1, 0]            # qid 3 before qid 7
    # pairwise: (2>0), (1>0), (2>1) all tied -> 1/2
    assert rep.pairwise_accuracy[0] == 0.5 and np.isnan(rep.pairwise_accuracy[1])


def test_letor4_labels_above_two_are_noted():
    y = np.array([0, 3, 4, 1], float)
    s = np.array([4, 3, 2, 1], float)
    rep = evaluate(y, s, np.array([0, 4]), ks=[1, 2, 3])
    assert rep.notes and "outside {0, 1, 2}" in rep.notes[0] and "3, 4" in rep.notes[0]
    assert "note: labels outside" in rep.format()
    # gains 0, 7, 15, 1; ideal 15, 7, 1 (1/log2 3), 0
    assert rep.ndcg[0, 1] == pytest.approx(7 / 22)
    assert rep.precision[0, 2] == pytest.approx(2 / 3)
    assert evaluate(y, s, np.array([0, 4]), convention="standard").notes == ()


# --------------------------------------------------------------------------------------------
# standard convention against brute force over tie orders
# --------------------------------------------------------------------------------------------

def brute_standard(y, s, ks):
    """Worst value of each metric over every order consistent with descending scores."""
    n = len(y)
    levels = sorted(set(s), reverse=True)
    groups = [[i for i in range(n) if s[i] == v] for v in levels]
    ideal = sorted(y, reverse=True)

    def dcg(labels, k):
        return sum((2.0 ** labels[i] - 1) / math.log2(i + 2) for i in range(min(k, n)))

    best = None
    for parts in itertools.product(*(itertools.permutations(g) for g in groups)):
        order = [i for p in parts for i in p]
        lab = [y[i] for i in order]
        ndcg = [dcg(lab, k) / dcg(ideal, k) for k in ks]
        prec = [sum(v > 0 for v in lab[:min(k, n)]) / min(k, n) for k in ks]
        hits = [i for i in range(n) if lab[i] > 0]
        ap = sum((j + 1) / (i + 1) for j, i in enumerate(hits)) / len(hits)
        mean_ndcg = sum(dcg(lab, k) / dcg(ideal, k) for k in range(1, n + 1)) / n
        vals = np.array(ndcg + prec + [ap, mean_ndcg])
        best = vals if best is None else np.minimum(best, vals)
    return best


def test_standard_matches_brute_force():
    rng = np.random.default_rng(2)
    y, s, ptr = random_queries(rng, 150, 6, n_labels=4, n_score_levels=3)
    ks = (1, 2, 3, 5, 8)
    rep = evaluate(y, s, ptr, convention="standard", ks=ks)
    n_skipped = 0
    for q in range(len(ptr) - 1):
        a, b = ptr[q], ptr[q + 1]
        yq, sq = list(y[a:b]), list(s[a:b])
        if max(yq) == 0:
            n_skipped += 1
            assert np.isnan(rep.ndcg[q]).all() and np.isnan(rep.average_precision[q])
            continue
        ours = np.r_[rep.ndcg[q], rep.precision[q], rep.average_precision[q], rep.mean_ndcg[q]]
        np.testing.assert_allclose(ours, brute_standard(yq, sq, ks), rtol=0, atol=1e-12)
    assert n_skipped == rep.n_queries_without_relevant > 0
    assert rep.n_queries_averaged == rep.n_queries - n_skipped
    # means skip the queries without relevant documents
    keep = rep.has_relevant
    assert rep.means["MAP"] == pytest.approx(rep.average_precision[keep].mean())
    assert rep.means["NDCG@8"] == pytest.approx(rep.ndcg[keep, 4].mean())


def test_standard_k_cut_and_skip():
    y = np.array([1, 0, 0, 0], float)
    s = np.array([0, 1, 2, 3], float)           # the relevant document is last
    rep = evaluate(y, s, np.array([0, 2, 4]), convention="standard", ks=[1, 2, 5])
    # query 0: relevant at position 2 -> DCG 1/log2(3), ideal 1
    np.testing.assert_allclose(rep.ndcg[0], [0, 1 / math.log2(3), 1 / math.log2(3)])
    np.testing.assert_allclose(rep.precision[0], [0, 1 / 2, 1 / 2])    # k cut at n = 2
    assert np.isnan(rep.ndcg[1]).all() and rep.n_queries_without_relevant == 1
    assert rep.means["NDCG@5"] == pytest.approx(1 / math.log2(3))
    assert "skipped" in rep.format()


# --------------------------------------------------------------------------------------------
# pairwise accuracy against an explicit pair loop
# --------------------------------------------------------------------------------------------

def brute_pairs(y, s):
    n_pairs, correct = 0, 0.0
    for i in range(len(y)):
        for j in range(len(y)):
            if y[i] > y[j]:
                n_pairs += 1
                correct += 1.0 if s[i] > s[j] else 0.5 if s[i] == s[j] else 0.0
    return n_pairs, correct


@pytest.mark.parametrize("label_kind", ["levels", "continuous"])
def test_pairwise_accuracy_matches_pair_loop(label_kind):
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(0, 40))
        if label_kind == "levels":
            y = rng.integers(0, rng.integers(1, 6), n).astype(float)
        else:
            y = rng.random(n).round(2)
        s = rng.integers(0, rng.integers(1, 30), n).astype(float) * 0.1
        assert pairwise_accuracy_counts(y, s) == brute_pairs(y, s)


def test_count_inversions_matches_brute_force():
    rng = np.random.default_rng(4)
    for _ in range(300):
        n = int(rng.integers(0, 50))
        r = rng.integers(0, rng.integers(1, 70), n)
        expected = sum(int(r[p] > r[q]) for p in range(n) for q in range(p + 1, n))
        assert _count_inversions(r) == expected


def test_pairwise_accuracy_large_query_is_fast():
    rng = np.random.default_rng(5)
    n = 100_000
    y = rng.integers(0, 5, n).astype(float)
    s = y + rng.normal(0, 2, n)
    n_pairs, correct = pairwise_accuracy_counts(y, s)   # ~4e9 pairs, never formed
    counts = np.bincount(y.astype(int))
    assert n_pairs == (n * n - (counts ** 2).sum()) // 2
    assert 0.5 < correct / n_pairs < 1.0
    assert pairwise_accuracy_counts(y, y) == (n_pairs, float(n_pairs))
    assert pairwise_accuracy_counts(y, -y) == (n_pairs, 0.0)


def test_report_pairwise_means():
    rng = np.random.default_rng(6)
    y, s, ptr = random_queries(rng, 40, 9)
    rep = evaluate(y, s, ptr, convention="standard")
    tot_pairs = tot_correct = 0
    accs = []
    for q in range(len(ptr) - 1):
        p, c = brute_pairs(y[ptr[q]:ptr[q + 1]], s[ptr[q]:ptr[q + 1]])
        assert rep.n_pairs[q] == p
        if p:
            accs.append(c / p)
            assert rep.pairwise_accuracy[q] == pytest.approx(c / p)
        tot_pairs += p
        tot_correct += c
    assert rep.means["pairwise_accuracy"] == pytest.approx(np.mean(accs))
    assert rep.means["pairwise_accuracy_micro"] == pytest.approx(tot_correct / tot_pairs)


# --------------------------------------------------------------------------------------------
# report output and argument checks
# --------------------------------------------------------------------------------------------

def test_to_dict_is_json_and_format_names_convention():
    y = np.array([0, 1, 0, 0, 2, 1], float)
    s = np.array([0.3, 0.1, 0.2, 0.5, 0.5, 0.1])
    ptr = np.array([0, 2, 3, 6])
    qid = np.array([b"b", b"a", b"c"])             # non-numeric: query order kept
    for conv in ("letor4", "standard"):
        rep = evaluate(y, s, ptr, convention=conv, qid=qid)
        d = json.loads(json.dumps(rep.to_dict(per_query=True), allow_nan=False))
        assert d["convention"] == conv and d["n_queries"] == 3
        assert d["n_queries_without_relevant"] == 1
        assert [r["qid"] for r in d["per_query"]] == ["b", "a", "c"]
        assert set(d["means"]) >= {"P@10", "MAP", "NDCG@1", "MeanNDCG", "pairwise_accuracy"}
        assert f"convention: {conv}" in rep.format()
        text = rep.format(per_query=True)
        assert f"# convention: {conv}" in text and "qid\tNDCG@1" in text and "\nAverage\t" in text
    assert d["per_query"][1]["NDCG@1"] is None     # standard: skipped query shows as null
    assert "a\t-\t-" in text


def test_rejects_bad_input():
    y = np.array([0, 1, 2], float)
    s = np.array([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="convention"):
        evaluate(y, s, [0, 3], convention="trec")
    with pytest.raises(ValueError, match="NaN"):
        evaluate(y, np.array([0.1, np.nan, 0.3]), [0, 3])
    with pytest.raises(ValueError, match="labels must be finite"):
        evaluate(np.array([0, -1, 2.0]), s, [0, 3])
    with pytest.raises(ValueError, match="no rows"):
        evaluate(y, s, [0, 0, 3])
    with pytest.raises(ValueError, match="query_ptr"):
        evaluate(y, s, [0, 2])
    with pytest.raises(ValueError, match="one score per row"):
        evaluate(y, s[:2], [0, 3])
    with pytest.raises(ValueError, match="ks"):
        evaluate(y, s, [0, 3], ks=[0, 1])


def test_pair_counts_in_parts_are_the_counts_of_the_whole(monkeypatch):
    """Counting pairs over runs of whole queries (bounded memory) changes no query's counts,
    whether a part holds many queries or a query is longer than a part."""
    from streamrank.evaluation import metrics as m
    rng = np.random.default_rng(3)
    sizes = np.concatenate([rng.integers(1, 12, 50), [40], rng.integers(1, 12, 20)])
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    y = rng.integers(0, 3, ptr[-1]).astype(np.float64)
    s = np.round(rng.standard_normal(ptr[-1]), 1)  # ties
    whole = m._pairwise_by_query(y, s, ptr)
    for part in (1, 7, 33, 10 ** 6):
        monkeypatch.setattr(m, "PAIRWISE_PART_ROWS", part)
        got = m._pairwise_in_parts(y, s, ptr)
        np.testing.assert_array_equal(got[0], whole[0])
        np.testing.assert_array_equal(got[1], whole[1])


@pytest.mark.parametrize("convention", ["letor4", "standard"])
def test_avg_ndcg_and_avg_prec_are_means_over_k_1_to_20(convention):
    """Paper 001's AvgNDCG / AvgPrec: per query, the mean of NDCG@1..20 and P@1..20 (the
    transliterated official script's values under letor4), whatever ks the report shows."""
    rng = np.random.default_rng(12)
    y, s, ptr = random_queries(rng, 200, 30, n_labels=3)
    rep = evaluate(y, s, ptr, convention=convention, ks=(1, 3, 5))
    full = evaluate(y, s, ptr, convention=convention, ks=range(1, 21))
    for q in range(len(ptr) - 1):
        if convention == "letor4":
            prec, _, ndcg, _ = perl_like_query(list(y[ptr[q]:ptr[q + 1]]), list(s[ptr[q]:ptr[q + 1]]), 20)
            assert rep.avg_ndcg[q] == pytest.approx(sum(ndcg) / 20, abs=1e-12)
            assert rep.avg_precision[q] == pytest.approx(sum(prec) / 20, abs=1e-12)
        np.testing.assert_allclose(rep.avg_ndcg[q], np.mean(full.ndcg[q]), rtol=0, atol=1e-15)
        np.testing.assert_allclose(rep.avg_precision[q], np.mean(full.precision[q]), rtol=0, atol=1e-15)
    assert rep.means["AvgNDCG"] == pytest.approx(np.nanmean(full.ndcg.mean(axis=1)), abs=1e-12)
    assert rep.means["AvgPrec"] == pytest.approx(np.nanmean(full.precision.mean(axis=1)), abs=1e-12)
    assert rep.ks == (1, 3, 5) and rep.ndcg.shape[1] == 3
    d = rep.to_dict(per_query=True)
    assert "AvgNDCG" in d["means"] and "AvgPrec" in d["per_query"][0]
    assert "AvgNDCG" in rep.format()
