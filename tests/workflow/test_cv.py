"""streamrank cv: the LETOR protocol over folds, against the grid + test evaluation done by hand,
its table, continuing a run, and MQ2008 Fold1 against the figures in docs/benchmarks.md."""

import json

import numpy as np
import pytest

from locations import MQ2008
from streamrank.cli import main
from streamrank.errors import InputError
from streamrank.evaluation.metrics import evaluate
from streamrank.io.dataset import open_dataset
from streamrank.synthetic import write_hdf5
from streamrank.training.linear import train_linear
from streamrank.training.problem import read_labels
from streamrank.workflow.cv import METRICS, find_folds, run_cv

SETTINGS = {"tol": 1e-3, "normalize": "zscore", "seed": 0, "kernel": "rbf",
            "pair_cost": "none"}  # one configuration per method (not the default search of two)
CS = [0.03125, 0.25, 2.0]


@pytest.fixture(scope="module")
def folds(tmp_path_factory):
    d = tmp_path_factory.mktemp("folds")
    for k in (1, 2, 3):
        (d / f"Fold{k}").mkdir()
        for part, name in (("train", "train"), ("valid", "vali"), ("test", "test")):
            write_hdf5(d / f"Fold{k}" / f"{name}.h5", "small", seed=10 + k, part=part, scale=0.2)
    return d


def test_each_fold_is_a_grid_on_train_chosen_on_vali_and_evaluated_on_test(folds, tmp_path):
    rec = run_cv(folds, tmp_path / "cv", methods=["primal"], axes={"C": CS}, settings=SETTINGS)
    assert [r["fold"] for r in rec["results"]] == ["Fold1", "Fold2", "Fold3"]
    for r in rec["results"]:
        f = folds / r["fold"]
        with open_dataset(f / "train.h5") as ds, open_dataset(f / "vali.h5") as va, open_dataset(f / "test.h5") as te:
            model, s = train_linear(ds, valid=va, C=CS, **SETTINGS)
            scores = model.predict_dataset(te)
            rep = evaluate(read_labels(te), scores[te.row], te.query_ptr, convention="letor4", qid=te.query_ids)
        assert r["chosen"]["C"] == s["C"]
        assert r["means"] == {k: rep.means[k] for k, _ in METRICS}
        assert len(r["per_query"]["ndcg@10"]) == te.n_queries
    rows = [t for t in rec["table"] if t["fold"].startswith("Fold")]
    mean = next(t for t in rec["table"] if t["fold"] == "mean")
    std = next(t for t in rec["table"] if t["fold"] == "std")
    vals = np.array([[t["MAP"], t["NDCG@10"]] for t in rows])
    assert np.allclose([mean["MAP"], mean["NDCG@10"]], vals.mean(0), rtol=0, atol=1e-15)
    assert np.allclose([std["MAP"], std["NDCG@10"]], vals.std(0, ddof=1), rtol=0, atol=1e-15)
    md = (tmp_path / "cv" / "cv.md").read_text()
    assert "| method | fold | NDCG@1 |" in md and md.count("\n") == 2 + 5 + 2  # a blank line, the convention
    assert (tmp_path / "cv" / "cv.csv").read_text().startswith("method,fold,NDCG@1,")


def test_methods_side_by_side_and_a_rerun_keeps_the_run(folds, tmp_path, capsys):
    argv = ["cv", str(folds), "-o", str(tmp_path / "cv"), "--folds", "1,2", "--method", "primal,nystroem",
            "--components", "20", "--gamma", "2^-4", "--C", "2^-3:2^1:2", "--normalize", "zscore"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "primal:" in out and "nystroem:" in out and "mean" in out and "std" in out
    csv = (tmp_path / "cv" / "cv.csv").read_bytes()
    assert main(argv + ["--json"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1  # one object on one line, the last of stdout
    rec = json.loads(out)
    assert isinstance(rec, dict) and rec["methods"] == ["primal", "nystroem"] and rec["folds"] == ["Fold1", "Fold2"]
    assert {(r["method"], r["fold"]) for r in rec["rows"]} == {(m, f) for m in ("primal", "nystroem")
                                                               for f in ("Fold1", "Fold2")}
    for m in ("primal", "nystroem"):
        vals = np.array([[r[k] for k in rec["metrics"]] for r in rec["rows"] if r["method"] == m])
        assert np.allclose(list(rec["mean"][m].values()), vals.mean(0), rtol=0, atol=1e-15)
        assert np.allclose(list(rec["std"][m].values()), vals.std(0, ddof=1), rtol=0, atol=1e-15)
        assert list(rec["mean"][m]) == rec["metrics"] == [k for k, _ in METRICS]
    assert (tmp_path / "cv" / "cv.csv").read_bytes() == csv
    assert main(argv[:-2] + ["--normalize", "none"]) == 2
    assert "other settings" in capsys.readouterr().err


def test_fold_layout_errors_name_the_folder(tmp_path):
    with pytest.raises(InputError, match="no Fold1"):
        find_folds(tmp_path)
    (tmp_path / "Fold1").mkdir()
    (tmp_path / "Fold1" / "train.txt").write_text("")
    with pytest.raises(InputError, match="Fold1: no vali file"):
        find_folds(tmp_path)


@pytest.mark.skipif(not (MQ2008 / "Fold1").exists(), reason="MQ2008 is not beside the checkout")
def test_mq2008_fold1_linear_reproduces_the_benchmark_log(tmp_path):
    """docs/benchmarks.md (bench_kernel_approx.py --mq2008-table): Fold1 linear, C 2^-16..2^4 by
    MeanNDCG on vali: C = 2^-12, test NDCG@10 / MeanNDCG / MAP 0.2099 / 0.4647 / 0.4488 (plain
    RankSVM; the default search's cost-sensitive candidates aside)."""
    rec = run_cv(MQ2008, tmp_path / "cv", methods=["primal"], axes={},
                 settings={"tol": 1e-3, "seed": 0, "pair_cost": "none"},
                 folds=[1], open_data=lambda p: _open(p, tmp_path / "cache"))
    (r,) = rec["results"]
    assert r["chosen"]["C"] == 2.0 ** -12
    assert [round(r["means"][k], 4) for k in ("NDCG@10", "MeanNDCG", "MAP")] == [0.2099, 0.4647, 0.4488]


def _open(p, cache):
    from streamrank.io.data_files import open_data
    return open_data(p, cache)


def test_a_rerun_over_changed_fold_data_is_refused(folds, tmp_path):
    import shutil
    d = tmp_path / "folds"
    shutil.copytree(folds, d)
    run_cv(d, tmp_path / "cv", methods=["primal"], axes={"C": [1.0]}, settings=SETTINGS, folds=[1])
    write_hdf5(d / "Fold1" / "test.h5", "small", seed=99, part="test", scale=0.2)
    with pytest.raises(InputError, match="other Fold1 data"):
        run_cv(d, tmp_path / "cv", methods=["primal"], axes={"C": [1.0]}, settings=SETTINGS, folds=[1])


def test_a_record_of_a_newer_version_is_refused(folds, tmp_path):
    from streamrank.errors import FormatError
    from streamrank.workflow.report import write_report
    run_cv(folds, tmp_path / "cv", methods=["primal"], axes={"C": [1.0]}, settings=SETTINGS, folds=[2])
    rec = json.loads((tmp_path / "cv" / "cv.json").read_text())
    (tmp_path / "cv" / "cv.json").write_text(json.dumps(dict(rec, version=2)))
    with pytest.raises(FormatError, match="version 2; this streamrank reads versions up to 1"):
        write_report(tmp_path / "cv", tmp_path / "r.html", plots=False)
