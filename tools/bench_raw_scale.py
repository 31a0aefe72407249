"""Default kernel grids on raw-scale features (issue 31): on five generated folds whose columns
are scaled by 10^3..10^4 (as raw LETOR features are, before QueryLevelNorm), ``streamrank cv``
with each kernel method's default gamma grid, and where the chosen gamma sits in it.

    python tools/bench_raw_scale.py                       # nystroem, rff, exact, clsr; 5 folds
    python tools/bench_raw_scale.py --methods nystroem    # one method
    python tools/bench_raw_scale.py --normalize zscore    # the same data, z-scored

The default gamma grids are anchored on the data's gamma='scale' = 1 / (d Var X) rounded to a power
of two (streamrank.workflow.grid.DEFAULT_GAMMA_OFFSETS): the Done-when is that no kernel method's
chosen gamma sits at a grid edge on most folds. To keep the run short, the components are few
(METHOD_ARGS); the gamma, C and lambda grids are the default ones (``--gamma 2^-9:2^-3:2``: the
former fixed grid, for comparison). The table gives each fold's gamma='scale', its anchor, the
grid, the chosen gamma (as a power of two) and whether it is an edge.
"""

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchutil import REPO, machine_facts, args_params, table_record  # noqa: E402

# the data: LETOR-like generated folds (mq2007's 46 columns, query-level normalised), every column
# then multiplied by its own 10^U(3, 4): values up to about 1e4, as in the raw feature files
COLUMN_SCALES = (3.0, 4.0)


def column_factors(n_features, seed=0):
    """Each column's factor 10^U(lo, hi) (float32), fixed by ``seed``."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(31,)))
    return (10.0 ** rng.uniform(*COLUMN_SCALES, n_features)).astype(np.float32)


def write_raw(path, preset="mq2007", *, scale=0.05, seed=0, part="train", factors_seed=0):
    """A generated dataset (streamrank.synthetic) with every column scaled by column_factors."""
    from streamrank.io.hdf5_format import DatasetWriter
    from streamrank.synthetic import generate_batches, resolve
    p, _, _ = resolve(preset, scale)
    f = column_factors(p.n_features, factors_seed)
    with DatasetWriter(path, n_features=p.n_features,
                       source=[{"name": f"raw-scale {preset} seed={seed} part={part}", "sha256": ""}]) as w:
        for X, y, qid in generate_batches(preset, scale=scale, seed=seed, part=part):
            w.append(X * f, y, qid)
    return path


def write_folds(folder, n_folds=5, preset="mq2007", scale=0.05):
    """FoldK/{train,vali,test}.h5 for K = 1..n_folds (fold K: seed K; one relevance model per fold)."""
    folder = Path(folder)
    for k in range(1, n_folds + 1):
        (folder / f"Fold{k}").mkdir(parents=True, exist_ok=True)
        for part, name in (("train", "train"), ("valid", "vali"), ("test", "test")):
            target = folder / f"Fold{k}" / f"{name}.h5"
            if not target.exists():
                write_raw(target, preset, scale=scale, seed=k, part=part)
    return folder


# a short run per method: the C (lambda) and gamma grids are the default ones, the components few
METHOD_ARGS = {
    "nystroem": ["--components", "200"],
    "rff": ["--components", "300"],
    "exact": [],
    "clsr": ["--components", "300"],
}


def log2_text(v):
    e = math.log2(v)
    return f"2^{round(e)}" if abs(e - round(e)) < 1e-9 else f"{v:.4g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default="nystroem,rff,exact,clsr")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--scale", type=float, default=0.05, help="of the mq2007 preset (default 0.05: 51 queries, "
                    "2,108 rows a part)")
    ap.add_argument("--exact-scale", type=float, default=0.03, help="the exact method's data (it keeps Q = K(X, X))")
    ap.add_argument("--normalize", default="none")
    ap.add_argument("--gamma", default=None, help="a fixed gamma grid for every method (default: the default grids)")
    ap.add_argument("--workdir", default=None, help="keep the data and runs here (default: a temporary folder)")
    args = ap.parse_args()
    print(machine_facts())
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="raw-scale-"))
    rows = []
    for method in args.methods.split(","):
        scale = args.exact_scale if method == "exact" else args.scale
        folds = write_folds(work / f"folds-{scale:g}", args.folds, scale=scale)
        out = work / (f"run-{method}-{args.normalize}" + ("" if args.gamma is None else "-fixed"))
        cmd = [sys.executable, "-m", "streamrank", "cv", str(folds), "-o", str(out), "--method", method,
               "--normalize", args.normalize, "--quiet"] + METHOD_ARGS[method] + \
            (["--gamma", args.gamma] if args.gamma else [])
        t = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=REPO)
        secs = time.perf_counter() - t
        edges = 0
        for r in json.loads((out / "cv.json").read_text())["results"]:
            grid = json.loads((out / r["fold"] / method / "grid.json").read_text())
            cfg = grid["configs"][grid["best"]]
            gammas = cfg["config"]["gamma"]
            g = r["chosen"]["gamma"]
            edge = "smallest" if g <= min(gammas) else "largest" if g >= max(gammas) else ""
            edges += bool(edge)
            sc = grid.get("gamma_scale") or {}
            rows.append({"method": method, "fold": r["fold"], "anchor": log2_text(sc["anchor"]) if sc else "-",
                         "scale": sc["gamma_scale"] if sc else None,
                         "grid": ",".join(log2_text(v) for v in gammas), "chosen": log2_text(g),
                         "edge": edge or "-", "NDCG@10": r["means"]["NDCG@10"], "s": None})
        rows.append({"method": method, "fold": f"{edges} of {args.folds} at an edge", "s": secs})
        print(f"{method}: {' '.join(cmd[1:])}  ({secs:.0f} s)", flush=True)
    fmt = {"scale": "{:.3g}", "NDCG@10": "{:.4f}", "s": "{:.0f}"}
    cols = [(k, k, fmt.get(k)) for k in ("method", "fold", "scale", "anchor", "grid", "chosen", "edge", "NDCG@10", "s")]
    table_record("raw_scale", "raw scales", rows, cols, params=args_params(args))
    print(f"data and runs in {work}")


if __name__ == "__main__":
    main()
