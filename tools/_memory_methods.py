"""Peak RSS of every training method, predict, grid and cv against --memory-budget (issue 30,
Build item 6): one function per method runs the CLI in a fresh process with a budget and returns
its row (method, budget, data size, peak RSS, ratio, exit code, the last log line).

    python tools/_memory_methods.py DATA.h5 --valid VALID.h5 --budget 256MB --budget 1GB
    python tools/_memory_methods.py DATA.h5 --only nystroem --only clsr --budget 300MB

Peak RSS is the child's VmHWM (its own process image's high-water mark; tools/_rss.py), in MB =
10^6 bytes, the unit of --memory-budget. A run the memory plan refuses exits 2 before any work
with the smallest budget that works: its row says "refused" and the message, and counts as within
the budget (it did not run over). The exact kernel path is measured elsewhere (section_memory and
tools/bench_exact_kernel.py).
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _rss import cli_peak_rss  # noqa: E402

# few iterations: the peak is reached in the first passes (blocks, tiers and factors are all sized
# before the first iteration); the solver's O(n) vectors are alive from the first one on
MAX_ITER = "1"


def _row(method, args, data, budget, timeout=3600):
    from streamrank.units import parse_size
    peak, wall, rc, err = cli_peak_rss([*map(str, args), "--memory-budget", budget], timeout=timeout)
    b = parse_size(budget) / 1e6
    size = sum(Path(p).stat().st_size for p in ([data] if not isinstance(data, (list, tuple)) else data)) / 1e6
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("@@rss_kb")]
    return {"method": method, "budget": budget, "budget_mb": b, "data_mb": size, "peak_mb": peak,
            "ratio": peak / b, "rc": rc, "s": wall, "within": peak <= b,
            "refused": rc == 2 and any("memory_budget" in ln or "--memory-budget" in ln for ln in lines[-3:]),
            "last": lines[-1][:200] if lines else ""}


def peak_linear(data, budget, work, max_iter=MAX_ITER):
    """train --method primal (TRON over the raw rows)."""
    return _row("linear", ["train", data, "-o", Path(work) / "m-linear.h5", "--max-iter", max_iter, "--C", "0.1"],
                data, budget)


def peak_nystroem(data, budget, work, components=1000, max_iter=MAX_ITER):
    """train --method nystroem (its m x m landmark kernel, the mapped rows cached or recomputed)."""
    return _row("nystroem", ["train", data, "-o", Path(work) / "m-nys.h5", "--method", "nystroem",
                             "--components", components, "--gamma", "0.01", "--max-iter", max_iter, "--C", "0.1",
                             "--cache-dir", Path(work) / "cache"], data, budget)


def peak_rff(data, budget, work, components=1000, max_iter=MAX_ITER):
    """train --method rff (random Fourier features)."""
    return _row("rff", ["train", data, "-o", Path(work) / "m-rff.h5", "--method", "rff", "--components", components,
                        "--gamma", "0.01", "--max-iter", max_iter, "--C", "0.1", "--cache-dir", Path(work) / "cache"],
                data, budget)


def peak_clsr(data, budget, work, components=1000):
    """train --method clsr (CLSRRank: one pass builds its m x m system, then a direct solve)."""
    return _row("clsr", ["train", data, "-o", Path(work) / "m-clsr.h5", "--method", "clsr", "--components",
                         components, "--gamma", "0.01"], data, budget)


def peak_gas(data, budget, work):
    """select-features (GAS: one pass builds the d x d similarity of mean Kendall tau)."""
    return _row("gas", ["select-features", data, "-o", Path(work) / "gas.h5", "--quiet"], data, budget)


def peak_predict(data, budget, work, model=None):
    """predict with a linear model (trained on the first 2 MB of rows when none is given)."""
    model = model or _small_model(data, work)
    return _row("predict", ["predict", model, data, "-o", Path(work) / "scores.txt"], data, budget)


def peak_predict_nystroem(data, budget, work, model=None):
    """predict with a Nystroem model (every block mapped through its landmarks)."""
    model = model or _small_model(data, work, ["--method", "nystroem", "--components", "1000", "--gamma", "0.01"])
    return _row("predict nystroem", ["predict", model, data, "-o", Path(work) / "scores.txt"], data, budget)


def peak_grid(data, budget, work, valid, max_iter=MAX_ITER):
    """grid over primal and nystroem with two C each, chosen on valid."""
    run = Path(work) / "grid-run"
    _clear(run)
    return _row("grid", ["grid", data, "--valid", valid, "-o", run, "--method", "primal,nystroem", "--C", "0.1,1",
                         "--gamma", "0.01", "--components", "500", "--max-iter", max_iter, "--quiet"],
                [data, valid], budget)


def peak_cv(data, budget, work, valid, max_iter=MAX_ITER):
    """cv on one fold whose train is data and whose vali and test are valid (links)."""
    folds = Path(work) / "folds"
    f1 = folds / "Fold1"
    f1.mkdir(parents=True, exist_ok=True)
    for name, src in (("train.h5", data), ("vali.h5", valid), ("test.h5", valid)):
        if not (f1 / name).exists():
            os.symlink(Path(src).resolve(), f1 / name)
    run = Path(work) / "cv-run"
    _clear(run)
    return _row("cv", ["cv", folds, "-o", run, "--method", "primal", "--C", "0.1,1", "--max-iter", max_iter,
                       "--quiet"], [data, valid, valid], budget)


METHODS = {"linear": peak_linear, "nystroem": peak_nystroem, "rff": peak_rff, "clsr": peak_clsr, "gas": peak_gas,
           "predict": peak_predict, "predict_nystroem": peak_predict_nystroem, "grid": peak_grid, "cv": peak_cv}
NEEDS_VALID = {"grid", "cv"}


def _clear(path):
    import shutil
    if Path(path).exists():
        shutil.rmtree(path)


def _small_model(data, work, extra=()):
    """A model trained on a small generated set of data's width (the model's size does not grow with the data)."""
    import h5py
    from streamrank.synthetic import write_hdf5
    with h5py.File(data, "r") as f:
        d = int(f["X"].shape[1])
    name = "nys" if extra else "lin"
    model = Path(work) / f"model-{name}-{d}.h5"
    if not model.exists():
        small = Path(work) / f"small-{d}.h5"
        if not small.exists():
            write_hdf5(small, "mslr30k" if d == 136 else "mq2007", scale=0.002 if d == 136 else 0.05, seed=1)
        cli_peak_rss(["train", small, "-o", model, "--quiet", *extra])
    return model


def measure(methods, data, budgets, work, valid=None):
    rows = []
    for b in budgets:
        for name in methods:
            fn = METHODS[name]
            row = fn(data, b, work, valid) if name in NEEDS_VALID else fn(data, b, work)
            rows.append(row)
            print(f"  {row['method']:<17} {b:>6} {row['data_mb']:>8,.0f} MB  peak {row['peak_mb']:>7,.0f} MB  "
                  f"{row['ratio']:.2f}x  rc {row['rc']}  {row['s']:.0f} s  {'' if row['rc'] == 0 else row['last']}",
                  file=sys.stderr, flush=True)
    return rows


def print_table(rows):
    print("| method | budget | data MB | peak RSS MB | peak / budget | exit | s |")
    print("|---|---|---:|---:|---:|---|---:|")
    for r in rows:
        ex = "refused" if r["refused"] else str(r["rc"])
        print(f"| {r['method']} | {r['budget']} | {r['data_mb']:,.0f} | {r['peak_mb']:,.0f} | {r['ratio']:.2f} | "
              f"{ex} | {r['s']:.0f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data")
    ap.add_argument("--valid", help="validation data for grid and cv")
    ap.add_argument("--budget", action="append", help="--memory-budget values (default 256MB)")
    ap.add_argument("--only", action="append", choices=list(METHODS))
    ap.add_argument("--work", help="work directory (default: a temporary one)")
    a = ap.parse_args()
    methods = a.only or [m for m in METHODS if m not in NEEDS_VALID or a.valid]
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="streamrank-mem-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = measure(methods, a.data, a.budget or ["256MB"], work, a.valid)
    print_table(rows)
    return 0 if all(r["within"] or r["refused"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
