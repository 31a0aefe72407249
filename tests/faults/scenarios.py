"""The commands of the crash harness (kill_harness.Scenario), on generated data. A new command or
method joins with one entry here."""

from pathlib import Path

import numpy as np

from kill_harness import Scenario
from streamrank.synthetic import write_hdf5


def make_inputs(d):
    """Text for convert, HDF5 train/valid sets, a model for predict (written by streamrank itself)."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    lines = []
    for i in range(6000):
        lines.append(f"{rng.integers(3)} qid:{i // 30} " + " ".join(f"{j + 1}:{v:.6f}" for j, v in
                                                                    enumerate(rng.random(20))))
    (d / "in.txt").write_text("\n".join(lines) + "\n")
    for part in ("train", "valid"):
        write_hdf5(d / f"{part}.h5", "small", seed=0, part=part, scale=0.3)
    for k in (1, 2):   # LETOR's fold layout for cv
        (d / "folds" / f"Fold{k}").mkdir(parents=True, exist_ok=True)
        for part, name in (("train", "train"), ("valid", "vali"), ("test", "test")):
            write_hdf5(d / "folds" / f"Fold{k}" / f"{name}.h5", "small", seed=k, part=part, scale=0.1)
    from streamrank.cli import main
    assert main(["train", str(d / "train.h5"), "-o", str(d / "model.h5"), "--quiet"]) == 0
    return d


COMMON = ["--C", "0.25,1", "--valid", "{w}/valid.h5", "--checkpoint", "{w}/ck", "--tol", "1e-6", "--quiet"]
# the exact kernel stops on its estimated gap (--tol does not apply to it): as many iterations as --tol 1e-6
EXACT = ["--C", "0.25,1", "--valid", "{w}/valid.h5", "--checkpoint", "{w}/ck", "--gap-tol", "1e-12", "--quiet"]

SCENARIOS = [
    Scenario("convert", ["convert", "{w}/in.txt", "-o", "{w}/d.h5", "--quiet"], ["d.h5"],
             points=[("dataset-append", 1), ("dataset-close", 1)]),
    # rows committed after every chunk of 256 KB: a killed conversion continues from its last commit
    Scenario("convert-resume", ["convert", "{w}/in.txt", "-o", "{w}/d.h5", "--quiet", "--commit-every", "0",
                                "--memory-budget", "1MB"], ["d.h5"],
             points=[("convert-commit", 2), ("dataset-append", 4), ("dataset-close", 1)]),
    Scenario("train-linear", ["train", "{w}/train.h5", "-o", "{w}/m.h5", *COMMON], ["m.h5"],
             again=["train", "{w}/train.h5", "-o", "{w}/m.h5", *COMMON, "--resume"],
             points=[("cg-step", 4), ("checkpoint-write", 3), ("model-write", 1)]),
    Scenario("train-nystroem", ["train", "{w}/train.h5", "-o", "{w}/m.h5", "--method", "nystroem", "--components",
                                "64", "--map-cache", "cache", "--cache-dir", "{w}/cache", "--memory-budget", "64MB",
                                *COMMON], ["m.h5"],
             again=["train", "{w}/train.h5", "-o", "{w}/m.h5", "--method", "nystroem", "--components", "64",
                    "--map-cache", "cache", "--cache-dir", "{w}/cache", "--memory-budget", "64MB", *COMMON, "--resume"],
             points=[("cache-write", 2), ("cg-step", 6)]),
    Scenario("train-exact", ["train", "{w}/train.h5", "-o", "{w}/m.h5", "--method", "exact", "--gamma", "0.05",
                             *EXACT], ["m.h5"],
             again=["train", "{w}/train.h5", "-o", "{w}/m.h5", "--method", "exact", "--gamma", "0.05", *EXACT,
                    "--resume"],
             points=[("cg-step", 9), ("checkpoint-write", 4)]),
    # a grid: finished configurations kept, the one it stopped in resumed at its last iteration
    Scenario("grid", ["grid", "{w}/train.h5", "--valid", "{w}/valid.h5", "-o", "{w}/run", "--method",
                      "primal,nystroem", "--components", "32", "--C", "0.25,1", "--tol", "1e-6", "--quiet"],
             ["run/model.h5", "run/candidates.csv"],
             points=[("checkpoint-write", 5), ("model-write", 2)]),
    # cv: finished folds kept, the grid it stopped in continued
    Scenario("cv", ["cv", "{w}/folds", "-o", "{w}/cvrun", "--method", "primal,nystroem", "--components", "16",
                    "--gamma", "0.1", "--C", "0.25,1", "--pair-cost", "none", "--tol", "1e-6", "--quiet"],
             ["cvrun/cv.csv"],
             points=[("checkpoint-write", 9), ("model-write", 3)]),
    Scenario("predict", ["predict", "{w}/model.h5", "{w}/valid.h5", "-o", "{w}/s.txt"], ["s.txt"],
             points=[("scores-write", 1)]),
]
