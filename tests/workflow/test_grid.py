"""streamrank grid: configurations, the same choice and model as train, continuing a run, refusals."""

import json

import numpy as np
import pytest

from small_data import small_pair
from streamrank.cli import main
from streamrank.errors import InputError, ParameterError
from streamrank.state.model import load
from streamrank.training.linear import train_linear
from streamrank.workflow.grid import configurations, run_grid

SETTINGS = {"tol": 1e-3, "normalize": "zscore", "seed": 0, "kernel": "rbf",
            "pair_cost": "none"}  # one configuration per method (not the default search of two)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    ds, valid = small_pair(tmp_path_factory, "grid", 0.25)
    yield ds, valid
    ds.close()
    valid.close()


def same_model(a, b):
    ma, mb = load(a) if not hasattr(a, "w") else a, load(b) if not hasattr(b, "w") else b
    assert np.array_equal(ma.w, mb.w)
    if ma.fmap is not None:
        for k, v in ma.fmap._arrays().items():
            assert np.array_equal(v, mb.fmap._arrays()[k]), k


def test_one_configuration_chooses_what_train_chooses(pair, tmp_path):
    ds, valid = pair
    axes = {"method": ["nystroem"], "components": [40], "gamma": [2.0 ** -5, 2.0 ** -3], "C": [0.25, 1.0, 4.0]}
    rec = run_grid(ds, valid, tmp_path / "run", axes=axes, settings=SETTINGS)
    model, s = train_linear(ds, valid=valid, method="nystroem", components=40, gamma=[2.0 ** -5, 2.0 ** -3],
                            C=[0.25, 1.0, 4.0], **SETTINGS)
    assert (rec["chosen"]["C"], rec["chosen"]["gamma"]) == (s["C"], s["gamma"])
    same_model(tmp_path / "run" / "model.h5", model)
    assert len(rec["configs"][0]["summary"]["candidates"]) == 6
    # every candidate carries its per-iteration trace: objective falls, passes rise, validation recorded
    for c in rec["configs"][0]["summary"]["candidates"]:
        tr = np.array([[np.nan if v is None else v for v in row] for row in c["trace"]], float)
        assert len(tr) == c["iterations"] and np.all(np.diff(tr[:, 3]) <= 0) and np.all(np.diff(tr[:, 2]) > 0)
        assert np.all(np.isfinite(tr[:, 5]))


def test_the_best_configuration_is_chosen_and_inapplicable_axes_collapse(pair, tmp_path):
    ds, valid = pair
    axes = {"method": ["primal", "nystroem"], "components": [20, 60], "gamma": [2.0 ** -4], "C": [0.5, 2.0]}
    rec = run_grid(ds, valid, tmp_path / "run", axes=axes, settings=SETTINGS, select_metric="ndcg@10")
    labels = [r["label"] for r in rec["configs"]]
    assert labels == ["00-primal", "01-nystroem-m20", "02-nystroem-m60"]
    primal = rec["configs"][0]["summary"]["candidates"]
    assert [c["gamma"] for c in primal] == [None, None]     # gamma does not apply to primal
    scores = [max(c["valid_ndcg@10"] for c in r["summary"]["candidates"]) for r in rec["configs"]]
    assert len(set(scores)) > 1, "the configurations must differ for the test to choose"
    assert rec["best"] == int(np.argmax(scores))
    same_model(tmp_path / "run" / "model.h5", tmp_path / "run" / "runs" / labels[rec["best"]] / "model.h5")
    csv = (tmp_path / "run" / "candidates.csv").read_text().splitlines()
    assert len(csv) == 1 + 2 + 2 + 2 and "seconds" not in csv[0]


def test_exact_clsr_and_smooth_hinge_configurations(pair, tmp_path):
    ds, valid = pair
    axes = {"method": ["exact", "clsr"], "gamma": [2.0 ** -4], "C": [1.0], "lam": [1e-4, 1e-2], "components": [50]}
    rec = run_grid(ds, valid, tmp_path / "run", axes=axes, settings=SETTINGS)
    assert [r["label"] for r in rec["configs"]] == ["00-exact", "01-clsr-m50"]
    assert [c["lambda"] for c in rec["configs"][1]["summary"]["candidates"]] == [1e-4, 1e-2]
    cfgs = configurations({"method": ["primal"], "loss": ["squared_hinge", "smooth_hinge"], "eta": [0.1, 0.3],
                           "pair_cost": "none"})
    assert [(c["loss"], c["eta"]) for c in cfgs] == [("squared_hinge", None), ("smooth_hinge", 0.1),
                                                     ("smooth_hinge", 0.3)]


def test_axes_that_apply_to_no_chosen_method_are_refused():
    with pytest.raises(ParameterError, match="components applies to"):
        configurations({"method": ["primal"], "components": [50]})
    with pytest.raises(ParameterError, match="lam applies to"):
        configurations({"method": ["primal", "exact"], "lam": [1e-3]})
    with pytest.raises(ParameterError, match="smooth hinge"):
        configurations({"method": ["primal"], "eta": [0.1]})
    # the default grids behind the README's MQ2008 table
    p, cs = configurations({"method": ["primal"]})  # plain and paper 001's costs (test_cost_search.py)
    assert p["C"] == cs["C"] == [2.0 ** k for k in range(-16, 5, 2)]


def test_a_rerun_keeps_the_run_and_other_settings_are_refused(pair, tmp_path):
    ds, valid = pair
    axes = {"method": ["primal"], "C": [0.5, 2.0]}
    first = run_grid(ds, valid, tmp_path / "run", axes=axes, settings=SETTINGS)
    csv = (tmp_path / "run" / "candidates.csv").read_bytes()
    again = run_grid(ds, valid, tmp_path / "run", axes=axes, settings=dict(SETTINGS, memory_budget="64MB"),
                     neutral=("memory_budget",))
    assert again["continued"] and not first["continued"]
    assert (tmp_path / "run" / "candidates.csv").read_bytes() == csv
    with pytest.raises(InputError, match="other settings"):
        run_grid(ds, valid, tmp_path / "run", axes={"method": ["primal"], "C": [0.5, 4.0]}, settings=SETTINGS)


def test_the_command(pair, tmp_path, capsys):
    ds, valid = pair
    run = tmp_path / "run"
    assert main(["grid", ds.path, "--valid", valid.path, "-o", str(run), "--method", "primal,nystroem",
                 "--components", "30", "--gamma", "2^-4", "--C", "2^-2:2^2:2", "--normalize", "zscore",
                 "--pair-cost", "none"]) == 0
    out = capsys.readouterr().out
    assert "chosen:" in out and "01-nystroem-m30" in out
    assert main(["grid", ds.path, "--valid", valid.path, "-o", str(run), "--method", "primal,nystroem",
                 "--components", "30", "--gamma", "2^-4", "--C", "2^-2:2^2:2", "--normalize", "zscore",
                 "--pair-cost", "none", "--json"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("\n") and out.count("\n") == 1  # one object on one line, the last of stdout
    chosen = json.loads(out)
    assert isinstance(chosen, dict) and chosen["label"] in ("00-primal", "01-nystroem-m30")
    assert main(["grid", ds.path, "--valid", valid.path, "-o", str(tmp_path / "r2"), "--components", "30"]) == 2
    assert "pass --method nystroem" in capsys.readouterr().err
