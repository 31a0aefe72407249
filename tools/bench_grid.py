"""What a grid costs against one fit (issue 16): 11 C values on one Nystroem map, MQ2008 Fold1.

    python tools/bench_grid.py                      # m = 2000, gamma = 2^-5, C = 2^-5..2^5, 3 repeats
    python tools/bench_grid.py --m 500 --C 2^-10:2^10:2

One fit is ``train_linear`` at one C (C = 1, and the C the grid chose) with its own map; the grid
is ``run_grid`` over the 11 C values (one map, C in increasing order with warm starts; its run
directory written, model saved). Both run in this process after a warm-up (numba compiled and the
data read once), interleaved: fit, grid, fit, grid, ... The grid's chosen model is checked against
``train_linear`` over the same C values (the model ``streamrank train`` selects): weights and map
equal bit for bit.
"""

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchutil import REPO, machine_facts, args_params, table_record  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "MQ2008"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="folder with Fold1 (LETOR text or HDF5)")
    ap.add_argument("--m", type=int, default=2000, help="Nystroem landmarks")
    ap.add_argument("--gamma", default="2^-5")
    ap.add_argument("--C", default="2^-5:2^5", help="the grid's C values (values grammar)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    import numpy as np

    from streamrank.io.data_files import open_data
    from streamrank.state.model import load
    from streamrank.training.linear import train_linear
    from streamrank.workflow.grid import run_grid
    from streamrank.workflow.values import parse_values
    fold = Path(args.data) / "Fold1"
    if not fold.exists():
        print(f"{fold} not found: pass --data DIR (MQ2008's folder)")
        return 1
    Cs = parse_values(args.C, "C")
    gamma = parse_values(args.gamma, "gamma")[0]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-grid-"))
    work.mkdir(parents=True, exist_ok=True)
    train_p = next(p for p in sorted(fold.iterdir()) if p.name.startswith("train"))
    vali_p = next(p for p in sorted(fold.iterdir()) if p.name.startswith("vali"))
    print(machine_facts())
    settings = {"tol": 1e-3, "seed": 0, "kernel": "rbf"}
    common = dict(method="nystroem", components=args.m, gamma=gamma, **settings)
    with open_data(train_p, work / "cache") as ds, open_data(vali_p, work / "cache") as vds:
        print(f"MQ2008 Fold1: {ds.n_rows:,} training rows, {vds.n_rows:,} validation rows, {ds.n_features} features; "
              f"Nystroem m = {args.m}, rbf gamma = {gamma:g}, C in {len(Cs)} values {Cs[0]:g}..{Cs[-1]:g}, tol 1e-3")
        train_linear(ds, valid=vds, C=[1.0], **common)  # warm-up: numba compiled, data read once
        times = {"fit C=1": [], "fit chosen C": [], "grid": []}
        record = None
        for r in range(args.repeats):
            t = time.perf_counter()
            train_linear(ds, valid=vds, C=[1.0], **common)
            times["fit C=1"].append(time.perf_counter() - t)
            shutil.rmtree(work / "run", ignore_errors=True)
            t = time.perf_counter()
            record = run_grid(ds, vds, work / "run", axes={"method": ["nystroem"], "components": [args.m],
                                                           "gamma": [gamma], "C": Cs},
                              settings=settings)
            times["grid"].append(time.perf_counter() - t)
            t = time.perf_counter()
            train_linear(ds, valid=vds, C=[record["chosen"]["C"]], **common)
            times["fit chosen C"].append(time.perf_counter() - t)
        model, s = train_linear(ds, valid=vds, C=Cs, **common)
    g = load(work / "run" / "model.h5")
    same = np.array_equal(g.w, model.w) and all(np.array_equal(v, model.fmap._arrays()[k])
                                                 for k, v in g.fmap._arrays().items())
    med = {k: statistics.median(v) for k, v in times.items()}
    cands = record["configs"][0]["summary"]["candidates"]
    rows = [{"what": k, "median": med[k], "runs": " ".join(f"{x:.2f}" for x in v), "runs_s": v,
             "ratio": med["grid"] / med[k] if k != "grid" else None} for k, v in times.items()]
    table_record("grid", "grid",
        rows, [("what", "run", None), ("median", "median s", "{:.2f}"), ("runs", "each run s", None),
                 ("ratio", "grid / this", "{:.2f}")], params=args_params(args))
    print(f"grid: {len(cands)} candidates, {sum(c['iterations'] for c in cands)} TRON iterations, "
          f"{record['configs'][0]['summary']['passes']} passes; chosen C = {record['chosen']['C']:g} "
          f"(valid MeanNDCG {record['chosen']['valid_meanndcg']:.4f}); train_linear over the same C chose "
          f"C = {s['C']:g}: model {'the same bit for bit' if same else 'DIFFERENT'}")
    print("produced by: python tools/bench_grid.py " + " ".join(sys.argv[1:]))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
