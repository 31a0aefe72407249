"""Quality by default: paper 001's cost-sensitive setting in grid's and cv's default search, the
``graded`` pair costs, one gain convention for every metric of a run, and grid-edge advice that
names its fold."""

import json
import logging
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from small_data import small_pair

from streamrank.cli import main
from streamrank.evaluation.metrics import evaluate
from streamrank.evaluation.score_files import evaluate_file
from streamrank.io.dataset import open_dataset
from streamrank.state.model import load
from streamrank.synthetic import write_hdf5
from streamrank.training.linear import train_linear
from streamrank.training.problem import graded_costs, pair_cost_table, read_labels
from streamrank.workflow.cv import run_cv
from streamrank.workflow.grid import configurations, run_grid

FAST = {"tol": 1e-3, "normalize": "zscore", "seed": 0}


# --- the graded rule ----------------------------------------------------------------------------

def test_graded_costs_are_paper001s_on_three_grades():
    lam = pair_cost_table("graded", [0.0, 1.0, 2.0])
    assert lam[0, 1] == lam[1, 0] == 1.0 and lam[1, 2] == lam[2, 1] == 1.3 and lam[0, 2] == lam[2, 0] == 2.0
    # a subset of the grades keeps the paper's values of its pairs
    assert pair_cost_table("graded", [0.0, 2.0])[0, 1] == 2.0
    assert pair_cost_table("graded", [1.0, 2.0])[0, 1] == 1.3


def test_graded_costs_beyond_three_grades_are_log2_of_one_plus_the_gain_difference():
    lam = graded_costs([0.0, 1.0, 2.0, 3.0, 4.0])
    for a in range(5):
        for b in range(5):
            if a != b:
                assert lam[a, b] == pytest.approx(math.log2(1 + abs(2 ** a - 2 ** b)), rel=1e-15)
    # the figure in docs/methods.md: 1 for 0-1, 2 for 0-2 (the paper's), 4 for 0-4
    assert (lam[0, 1], lam[0, 2], lam[0, 4]) == (1.0, 2.0, 4.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 12), min_size=2, max_size=8, unique=True))
def test_graded_costs_grow_with_the_gain_a_misorder_loses(labels):
    """Paper 001 sec. 4.4: lambda(a, c) > lambda(b, c) and lambda(a, c) > lambda(a, b) for a < b < c,
    symmetric, positive, on any set of grades."""
    levels = sorted(float(v) for v in labels)
    lam = graded_costs(levels)
    L = len(levels)
    assert np.array_equal(lam, lam.T) and np.all(lam[~np.eye(L, dtype=bool)] > 0)
    for a in range(L):
        for b in range(a + 1, L):
            for c in range(b + 1, L):
                assert lam[a, c] > lam[b, c] and lam[a, c] > lam[a, b]


# --- the default search ------------------------------------------------------------------------

def test_default_search_tries_each_ranksvm_configuration_plain_and_cost_sensitive():
    cfgs = configurations({"method": ["primal", "clsr"]})
    assert [c["label"] for c in cfgs] == ["00-primal", "01-primal-cs", "02-clsr-m2000"]
    assert [(c["pair_cost"], c["query_weight"]) for c in cfgs] == [("none", "none"), ("graded", "log_ratio"),
                                                                    (None, None)]
    # a given setting is every configuration's; the other keeps its default
    assert [(c["pair_cost"], c["query_weight"]) for c in configurations({"query_weight": "log_ratio"})] == \
        [("none", "log_ratio")]
    assert [c["label"] for c in configurations({"pair_cost": "none"})] == ["00-primal"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    ds, valid = small_pair(tmp_path_factory, "costs", 0.25)
    yield ds, valid
    ds.close()
    valid.close()


def test_the_cost_sensitive_candidate_is_train_with_paper001s_setting_and_chosen_on_valid(pair, tmp_path):
    ds, valid = pair
    Cs = [0.25, 1.0]
    rec = run_grid(ds, valid, tmp_path / "run", axes={"C": Cs}, settings=dict(FAST))
    assert [r["label"] for r in rec["configs"]] == ["00-primal", "01-primal-cs"]
    for r, costs in zip(rec["configs"], ({}, {"pair_cost": "graded", "query_weight": "log_ratio"})):
        model, s = train_linear(ds, valid=valid, C=Cs, **FAST, **costs)
        assert np.array_equal(load(tmp_path / "run" / "runs" / r["label"] / "model.h5").w, model.w)
        assert r["summary"]["C"] == s["C"]
    scores = [r["summary"]["candidates"] for r in rec["configs"]]
    best = [max(c["valid_meanndcg"] for c in cands) for cands in scores]
    # the oracle of the choice: the better on valid, but plain only when it beats paper 001's
    # setting by more than two standard errors of the per-query MeanNDCG differences
    per_query = []
    for r in rec["configs"]:
        m = load(tmp_path / "run" / "runs" / r["label"] / "model.h5")
        rep = evaluate(read_labels(valid), m.predict_dataset(valid)[valid.row], valid.query_ptr)
        per_query.append(rep.mean_ndcg)
    d = per_query[0] - per_query[1]
    significant = d.mean() > 2 * d.std(ddof=1) / np.sqrt(d.size)
    assert rec["best"] == (0 if best[0] >= best[1] and significant else 1)
    if best[0] >= best[1]:
        assert rec["cost_choice"]["kept"] == ("plain" if significant else "cost_sensitive")
        assert rec["cost_choice"]["difference"] == pytest.approx(d.mean(), rel=1e-12)
    chosen = rec["chosen"]
    assert (chosen["pair_cost"], chosen["query_weight"]) == (("graded", "log_ratio") if rec["best"] == 1
                                                              else ("none", "none"))
    csv = (tmp_path / "run" / "candidates.csv").read_text().splitlines()
    assert csv[0].startswith("config,method,loss,components,pair_cost,query_weight,")
    assert sum(",graded,log_ratio," in line for line in csv) == len(Cs)


def test_the_cli_shows_the_chosen_costs(pair, tmp_path, capsys):
    ds, valid = pair
    argv = ["grid", str(ds.path), "--valid", str(valid.path), "-o", str(tmp_path / "g"), "--C", "0.25,1",
            "--normalize", "zscore"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    rec = json.loads((tmp_path / "g" / "grid.json").read_text())
    assert "01-primal-cs" in out and "convention: letor4" in out
    if rec["best"] == 1:
        assert "chosen: 01-primal-cs (pair_cost=graded, query_weight=log_ratio, C=" in out
    # given, one configuration and no search
    assert main(argv[:4] + ["-o", str(tmp_path / "g2"), "--pair-cost", "graded"] + argv[6:]) == 0
    rec2 = json.loads((tmp_path / "g2" / "grid.json").read_text())
    assert [(r["label"], r["config"]["pair_cost"], r["config"]["query_weight"]) for r in rec2["configs"]] == \
        [("00-primal", "graded", "none")]


# --- grid-edge advice names its fold -----------------------------------------------------------

@pytest.fixture(scope="module")
def five_folds(tmp_path_factory):
    d = tmp_path_factory.mktemp("five")
    for k in range(1, 6):
        (d / f"Fold{k}").mkdir()
        for part, name in (("train", "train"), ("valid", "vali"), ("test", "test")):
            write_hdf5(d / f"Fold{k}" / f"{name}.h5", "small", seed=30 + k, part=part, scale=0.1)
    return d


def test_edge_messages_name_their_folds_one_per_fold_and_parameter_at_an_edge(five_folds, tmp_path, caplog):
    Cs = [2.0 ** -12, 1.0, 2.0 ** 12]
    gammas = [2.0 ** -6, 2.0 ** -4]
    with caplog.at_level(logging.WARNING):
        rec = run_cv(five_folds, tmp_path / "cv", methods=["nystroem"], axes={"C": Cs, "gamma": gammas,
                                                                              "components": [15]},
                     settings=dict(FAST, pair_cost="none"))
    # the oracle: each fold's chosen (C, gamma) against the grids given
    expected = []
    for r in rec["results"]:
        for name, grid, value in (("C", Cs, r["chosen"]["C"]), ("gamma", gammas, r["chosen"]["gamma"])):
            if value in (min(grid), max(grid)):
                expected.append((r["fold"], name, "smallest" if value == min(grid) else "largest"))
    told = [m.getMessage() for m in caplog.records if m.levelno == logging.WARNING]
    per_fold = [t for t in told if t.startswith("Fold")]
    assert len(per_fold) == len(expected) > 0
    for fold, name, side in expected:
        assert sum(t.startswith(f"{fold}, nystroem (") and f"the chosen {name}=" in t and f"the {side} value" in t
                   for t in per_fold) == 1
        assert "components=15" in next(t for t in per_fold if t.startswith(fold + ",") and f"chosen {name}=" in t)
    closing = [t for t in told if t.startswith("cv: ")]
    for name, side in dict.fromkeys((n, s) for _, n, s in expected):
        folds = [f.removeprefix("Fold") for f, n, s in expected if (n, s) == (name, side)]
        word = "upper" if side == "largest" else "lower"
        assert sum(t.startswith(f"cv: {name} at its {word} edge on fold{'s' if len(folds) > 1 else ''} "
                                f"{', '.join(folds)} (nystroem)") for t in closing) == 1
    assert len(closing) == len({(n, s) for _, n, s in expected})
    assert sorted((f, e["parameter"], e["side"]) for e in rec["edges"] for f in e["folds"]) == sorted(expected)


# --- one gain convention -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def graded_folds(tmp_path_factory):
    """One fold of data graded 0-4 (MSLR's shape, scaled down)."""
    d = tmp_path_factory.mktemp("graded")
    (d / "Fold1").mkdir()
    for part, name in (("train", "train"), ("valid", "vali"), ("test", "test")):
        write_hdf5(d / "Fold1" / f"{name}.h5", "mslr30k", seed=5, part=part, scale=0.0008)
    with open_dataset(d / "Fold1" / "test.h5") as te:
        assert read_labels(te).max() > 2
    return d


@pytest.mark.parametrize("convention", ["letor4", "standard"])
def test_cv_and_eval_give_the_same_ndcg_and_cv_says_its_convention(graded_folds, tmp_path, capsys, convention):
    out = tmp_path / "cv"
    argv = ["cv", str(graded_folds), "-o", str(out), "--C", "1", "--pair-cost", "none", "--json"]
    assert main(argv + ([] if convention == "letor4" else ["--convention", convention])) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["convention"] == convention
    noted = [n for n in line["notes"] if "labels outside {0, 1, 2} present" in n]
    assert bool(noted) == (convention == "letor4")
    # the chosen model's scores on test, written and evaluated by `streamrank eval`
    scores = tmp_path / "scores.txt"
    test = graded_folds / "Fold1" / "test.h5"
    assert main(["predict", str(out / "Fold1" / "primal" / "model.h5"), str(test), "-o", str(scores)]) == 0
    rep = evaluate_file(test, scores, convention=convention)
    row = line["rows"][0]
    for k in ("NDCG@10", "MAP", "MeanNDCG"):
        assert row[k] == rep.means[k], k
    assert set(rep.notes) <= set(line["notes"])
    md = (out / "cv.md").read_text()
    assert f"convention: {convention} (" in md and all(f"note: {n}" in md for n in line["notes"])
    assert main(["report", str(out), "-o", str(tmp_path / "r.html"), "--no-plots", "--quiet"]) == 0
    page = (tmp_path / "r.html").read_text()
    assert f"convention: {convention} (" in page and all(n.split(":")[0] in page for n in line["notes"])


def test_estimator_score_takes_the_convention(graded_folds):
    from streamrank import RankSVM
    train, test = graded_folds / "Fold1" / "train.h5", graded_folds / "Fold1" / "test.h5"
    for convention in ("letor4", "standard"):
        est = RankSVM(C=1.0, convention=convention).fit(str(train))
        with open_dataset(test) as te:
            s = est.model_.predict_dataset(te)[te.row]
            want = evaluate(read_labels(te), s, te.query_ptr, ks=(10,), convention=convention).means["NDCG@10"]
        assert est.score(str(test)) == want


def test_plain_is_kept_only_when_it_beats_paper001s_setting_beyond_the_validation_noise(pair, tmp_path, monkeypatch):
    """keep_cost_sensitive's rule against per-query differences given outright: a plain
    configuration chosen on valid keeps its place only when its per-query lead is more than two
    standard errors."""
    from streamrank.workflow import grid as gm
    ds, valid = pair
    rec = run_grid(ds, valid, tmp_path / "run", axes={"C": [1.0]}, settings=dict(FAST))
    results = rec["configs"]
    n = valid.n_queries
    for lead, noise, kept in ((0.01, 0.001, 0), (0.001, 0.05, 1), (-0.01, 0.001, 1)):
        values = iter([np.full(n, 0.5) + lead + noise * (np.arange(n) % 2 * 2 - 1), np.full(n, 0.5)])
        monkeypatch.setattr(gm, "per_query_metric", lambda rep, metric: next(values))
        got, record, _ = gm.keep_cost_sensitive(results, 0, tmp_path / "run", valid, "meanndcg", dict(FAST))
        assert got == kept and record["kept"] == ("plain" if kept == 0 else "cost_sensitive")
    # a cost-sensitive choice, or a grid without the search, is left as it is
    assert gm.keep_cost_sensitive(results, 1, tmp_path / "run", valid, "meanndcg", dict(FAST)) == (1, None, {})
    assert gm.keep_cost_sensitive(results[:1], 0, tmp_path / "run", valid, "meanndcg", dict(FAST)) == (0, None, {})
