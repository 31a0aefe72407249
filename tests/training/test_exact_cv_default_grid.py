"""`streamrank cv --method exact` with its default grid (gamma 2^-9 .. 2^-5, C 2^-8 .. 2^2) completes on
query-level-normalised rows in [0, 1] with many exact duplicates (issue 30: gamma 2^-9 crashed the
first fold with "Hessian product is not positive definite" on a held-out LETOR set)."""

import json
import sys
from pathlib import Path

import numpy as np

from streamrank.cli import main
from streamrank.workflow.grid import DEFAULT_GAMMA_OFFSETS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "objectives"))
from test_exact_oracle_grid import rows  # noqa: E402


def write_letor(path, X, y, qp, qid0):
    with open(path, "w") as f:
        for q, (a, b) in enumerate(zip(qp[:-1], qp[1:])):
            for i in range(a, b):
                feats = " ".join(f"{k + 1}:{v:.6g}" for k, v in enumerate(X[i]))
                f.write(f"{int(y[i])} qid:{qid0 + q} {feats}\n")


def test_cv_exact_with_the_default_grid_completes_on_unit_rows_with_duplicates(tmp_path):
    # the gamma that crashed (2^-9 on [0, 1] features) is in the grid: its anchor 1 / (d Var X) is about
    # 2^-1 on these rows, and the grid runs down to the anchor x 2^-9
    assert min(DEFAULT_GAMMA_OFFSETS["exact"]) <= -7
    folds = tmp_path / "folds"
    for k in (1, 2):
        (folds / f"Fold{k}").mkdir(parents=True)
        for n, part in enumerate(("train", "vali", "test")):
            X, y, qp = rows("unit", seed=10 * k + n, n_queries=6)
            write_letor(folds / f"Fold{k}" / f"{part}.txt", X, y, qp, 1000 * n)
    out = tmp_path / "run"
    # the default gamma and C grids (the pair weights are not this test's: one of them)
    assert main(["cv", str(folds), "--method", "exact", "-o", str(out), "--quiet", "--pair-cost", "none"]) == 0
    rec = json.loads((out / "cv.json").read_text())
    assert [r["fold"] for r in rec["results"]] == ["Fold1", "Fold2"]
    for r in rec["results"]:
        assert np.isfinite(r["means"]["MAP"])
