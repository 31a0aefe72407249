"""The papers' experiments, reproduced on MQ2008 with streamrank's implementations.

    python tools/bench_papers.py --cs-srsvm      # paper 001 (cs-sRSVM): quality table and time vs rows
    python tools/bench_papers.py --clsr --gas    # papers 002 (CLSRRank) and 003 (GAS): see _papers_clsr_gas.py

``--cs-srsvm`` has two parts.

1. **Quality** (paper 001's tables 3-5 shape). Five folds of MQ2008; per fold C is chosen on vali
   by AvgNDCG with the paper's two-stage rule (1e-5..1e-1 by decades, then 0.6, 0.8, 1.2, 1.4 x the
   best); test AvgNDCG, AvgPrec, MAP and NDCG@10 (letor4 conventions; AvgNDCG / AvgPrec are the
   means over k = 1..20) of
   - RankSVM: squared hinge, every pair cost 1, no query weights;
   - cost-sensitive RankSVM: squared hinge, lambda (0,1)=1, (1,2)=1.3, (0,2)=2, mu = log_ratio;
   - cs-sRSVM: the same costs and weights with paper 001's smooth hinge, eta by the paper's rule.
   The paper's gains and relevance rules differ from letor4's and its data are LETOR 3.0's: its
   figures are context, not digit targets.
2. **Training time against training rows** (the shape of paper 001's table 6): nested subsets S1,
   S1+S2, ..., S1..S5 of MQ2008 (S_i = the part that is some fold's test file: S1 = Fold2/test,
   S2 = Fold3/test, S3 = Fold4/test, S4 = Fold5/test, S5 = Fold1/test), the costs and weights above,
   C = ``--time-C``; solver time only (the solver's own clock, from its first function evaluation to
   its last iteration, less the time inside the row stream: the first pass reads the rows into
   memory, the others use them there), the median of ``--repeats`` runs interleaved by
   configuration, for
   the squared hinge with TRON and cs-sRSVM with TRON and with Newton-Yuan; with ``--liblinear BIN``
   also the LIBLINEAR ranksvm extension (``BIN -s 8 -c C -e 0.001``, the whole process: parsing
   included). Targets: cs-sRSVM within 1.5x of the squared-hinge TRON solve at every size, and
   time per row within +-30% from the smallest to the largest subset. Paper 001 reports 1.14 s for
   2,570 OHSUMED rows to 9.75 s for 16,140 (other data, other machine): context only.

3. **Out of core** (``--only out-of-core``): the generated ``mslr30k`` preset at ``--ooc-scale``
   (larger than ``--ooc-budget``) trained with ``--loss smooth_hinge`` from the command line twice, at
   the budget and with 16GB (rows kept in memory), each in a fresh process: peak RSS (VmHWM) and
   wall time of each, and whether the two model files hold the same weights, bit for bit.

Every number is printed by this script with the machine's facts; the README quotes its tables.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import machine_facts, args_params, table_record  # noqa: E402
from bench_linear import DEFAULT_DATA, converted, have_mq2008  # noqa: E402

COSTS = "0-1:1,1-2:1.3,0-2:2"
MODELS = {  # name: training settings beyond C
    "RankSVM": dict(loss="squared_hinge"),
    "cs-RankSVM": dict(loss="squared_hinge", pair_cost=COSTS, query_weight="log_ratio"),
    "cs-sRSVM": dict(loss="smooth_hinge", pair_cost=COSTS, query_weight="log_ratio"),
}
TIMED = {  # name: (model settings, solver)
    "squared hinge, TRON": (MODELS["cs-RankSVM"], "tron"),
    "cs-sRSVM, TRON": (MODELS["cs-sRSVM"], "tron"),
    "cs-sRSVM, Newton-Yuan": (MODELS["cs-sRSVM"], "newton_yuan"),
}
# S_i: the MQ2008 part that is this fold's test file (LETOR 4.0's rotation)
PARTS = {1: 2, 2: 3, 3: 4, 4: 5, 5: 1}
TARGET_SMOOTH_RATIO = 1.5
TARGET_PER_ROW_SPREAD = 0.30
TOL = 1e-3


def quality(args):
    import numpy as np
    import streamrank
    streamrank.configure()  # the command line's process settings
    from streamrank.evaluation.metrics import evaluate
    from streamrank.training.linear import train_linear
    from streamrank.training.problem import read_labels
    folds = [int(f) for f in args.folds.split(",")]
    if not have_mq2008(args.data, folds):
        return
    print("\n== cs-sRSVM (paper 001) on MQ2008: C by the two-stage rule on vali (AvgNDCG), letor4 test ==")
    rows = []
    for fold in folds:
        paths = {p: converted(args.workdir, args.data, fold, p) for p in ("train", "vali", "test")}
        with streamrank.open_dataset(paths["train"]) as ds, streamrank.open_dataset(paths["vali"]) as vds, \
                streamrank.open_dataset(paths["test"]) as tds:
            y_test = read_labels(tds)
            for name, kw in MODELS.items():
                t = time.perf_counter()
                model, s = train_linear(ds, valid=vds, C="two-stage", select_metric="avgndcg", tol=TOL, **kw)
                wall = time.perf_counter() - t
                sc = model.predict_dataset(tds)
                m = evaluate(y_test, sc[tds.row], tds.query_ptr, convention="letor4", qid=tds.qid).means
                rows.append({"fold": fold, "model": name, "C": s["C"], "eta": s.get("eta"), "AvgNDCG": m["AvgNDCG"],
                             "AvgPrec": m["AvgPrec"], "MAP": m["MAP"], "NDCG@10": m["NDCG@10"],
                             "seconds": wall})
                print(f"  Fold{fold} {name}: C={s['C']:g}" + (f" eta={s['eta']:.3g}" if "eta" in s else "")
                      + f" AvgNDCG {m['AvgNDCG']:.4f} MAP {m['MAP']:.4f} ({wall:.1f} s, 9 candidates)", flush=True)
    for name in MODELS:
        mine = [r for r in rows if r["model"] == name]
        mean = {k: float(np.mean([r[k] for r in mine])) for k in ("AvgNDCG", "AvgPrec", "MAP", "NDCG@10")}
        std = {k: float(np.std([r[k] for r in mine])) for k in mean}
        rows.append({"fold": "mean", "model": name, **mean, "std": std})
    cols = [("fold", "fold", None), ("model", "model", None), ("C", "C", "{:g}"), ("eta", "eta", "{:.3g}"),
            ("AvgNDCG", "AvgNDCG", "{:.4f}"), ("AvgPrec", "AvgPrec", "{:.4f}"), ("MAP", "MAP", "{:.4f}"),
            ("NDCG@10", "NDCG@10", "{:.4f}")]
    print()
    table_record("papers", "quality", rows, cols, params=args_params(args))
    print("\nmean +- std over the folds:")
    for r in rows:
        if r["fold"] == "mean":
            print(f"  {r['model']:<12} " + "  ".join(f"{k} {r[k]:.4f}+-{r['std'][k]:.4f}"
                                                   for k in ("AvgNDCG", "AvgPrec", "MAP", "NDCG@10")))
    if args.json:
        print(json.dumps({"quality": [{k: v for k, v in r.items()} for r in rows]}))


def subsets(args):
    """HDF5 files of S1, S1+S2, ..., S1..S5 under the work folder (converted once)."""
    from streamrank.io.convert import convert
    files = [Path(args.data) / f"Fold{PARTS[i]}" / "test.txt.gz" for i in range(1, 6)]
    out = []
    for k in range(1, 6):
        p = Path(args.workdir) / "mq2008" / f"S1-S{k}.h5"
        if not p.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
            convert(files[:k], p, quiet=True, n_features=46)
        out.append(p)
    return out


def liblinear_seconds(binary, text_files, C, workdir):
    """Wall seconds of LIBLINEAR's ranksvm extension on the concatenated text (whole process)."""
    import gzip
    txt = Path(workdir) / "mq2008" / f"liblinear-{len(text_files)}.txt"
    if not txt.exists():
        with open(txt, "wb") as out:
            for f in text_files:
                out.write(gzip.open(f).read())
    t = time.perf_counter()
    p = subprocess.run([binary, "-s", "8", "-c", repr(C), "-e", repr(TOL), "-q", str(txt), str(txt) + ".model"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{binary} failed: {p.stderr[-500:]}")
    return time.perf_counter() - t


def timing(args):
    import streamrank
    streamrank.configure()  # the command line's process settings
    from streamrank.training.linear import train_linear
    if not have_mq2008(args.data, (1, 2, 3, 4, 5)):
        return
    print(f"\n== training time against training rows (paper 001 table 6's shape): C={args.time_C:g}, eps={TOL}, "
          f"solver only, data in memory, median of {args.repeats} interleaved runs ==")
    paths = subsets(args)
    text = [Path(args.data) / f"Fold{PARTS[i]}" / "test.txt.gz" for i in range(1, 6)]
    with streamrank.open_dataset(paths[0]) as ds:  # load every kernel before any clock starts
        for name, (kw, solver) in TIMED.items():
            train_linear(ds, C=args.time_C, tol=TOL, solver=solver, **kw)
    times = {(k, name): [] for k in range(5) for name in TIMED}
    info = {}
    names = list(TIMED)
    for rep in range(args.repeats):
        for k, p in enumerate(paths):
            with streamrank.open_dataset(p) as ds:
                for name in names[rep % 3:] + names[:rep % 3]:  # each configuration first in turn
                    kw, solver = TIMED[name]
                    _, s = train_linear(ds, C=args.time_C, tol=TOL, solver=solver, **kw)
                    # the solver's own clock (its first fun/grad to its last iteration) less the
                    # time inside the row stream (the first pass reads the rows into memory)
                    times[(k, name)].append(s["candidates"][0]["seconds"] - s["read_seconds"])
                    info[(k, name)] = (ds.n_rows, s["iterations"], s["passes"], s["objective"], s.get("eta"))
    rows = []
    for k in range(5):
        n = info[(k, "squared hinge, TRON")][0]
        row = {"subset": f"S1..S{k + 1}", "rows": n}
        for name in TIMED:
            row[name] = statistics.median(times[(k, name)])
            row[name + " it"] = info[(k, name)][1]
        row["ratio"] = row["cs-sRSVM, TRON"] / row["squared hinge, TRON"]
        row["ratio_ny"] = row["cs-sRSVM, Newton-Yuan"] / row["squared hinge, TRON"]
        if args.liblinear:
            row["liblinear"] = statistics.median(liblinear_seconds(args.liblinear, text[:k + 1], args.time_C,
                                                                   args.workdir) for _ in range(args.repeats))
        rows.append(row)
        f_sq, f_sm = info[(k, "squared hinge, TRON")][3], info[(k, "cs-sRSVM, TRON")][3]
        f_ny = info[(k, "cs-sRSVM, Newton-Yuan")][3]
        print(f"  S1..S{k + 1}: {n} rows; eta {info[(k, 'cs-sRSVM, TRON')][4]:.3g}; objectives squared {f_sq:.10g}, "
              f"smooth TRON {f_sm:.10g}, smooth Newton-Yuan {f_ny:.10g} (rel. diff {abs(f_ny - f_sm) / f_sm:.1e})")
    cols = [("subset", "subset", None), ("rows", "rows", "{:,}")]
    for name in TIMED:
        cols += [(name, name + " s", "{:.3f}"), (name + " it", "iter", None)]
    cols += [("ratio", "sRSVM/sq", "{:.2f}"), ("ratio_ny", "NY/sq", "{:.2f}")]
    if args.liblinear:
        cols.append(("liblinear", "LIBLINEAR s (whole run)", "{:.3f}"))
    print()
    table_record("papers", "timing", rows, cols, params=args_params(args))
    per_row = {name: [r[name] / r["rows"] for r in rows] for name in TIMED}
    print()
    for name in TIMED:
        spread = per_row[name][-1] / per_row[name][0] - 1
        # per row and pass: the subsets need different numbers of iterations (and passes)
        pp = [r[name] / (r["rows"] * info[(k, name)][2]) for k, r in enumerate(rows)]
        print(f"  {name}: {1e6 * per_row[name][0]:.1f} us/row at S1, {1e6 * per_row[name][-1]:.1f} us/row at S1..S5 "
              f"({spread:+.0%}; target within +-{TARGET_PER_ROW_SPREAD:.0%}); per row and pass "
              f"{1e9 * pp[0]:.0f} ns at S1, {1e9 * pp[-1]:.0f} ns at S1..S5 ({pp[-1] / pp[0] - 1:+.0%}; passes "
              f"{info[(0, name)][2]} and {info[(4, name)][2]})")
    import numpy as np
    n = np.array([r["rows"] for r in rows], float)
    for name in TIMED:
        t = np.array([r[name] for r in rows])
        b, a = np.polyfit(n, t, 1)  # t ~ a + b rows
        dev = np.abs(a + b * n - t).max() / t.max()
        print(f"  {name}: t ~ {1e3 * a:.1f} ms + {1e6 * b:.2f} us x rows (largest deviation {dev:.0%} of the "
              f"largest time)")
    print("  (the intercept: per-pass and per-iteration costs that do not grow with the rows -- Python and thread "
          "start-up per pass, an m x m factor per iteration -- so the time per row falls with size)")
    worst = max(r["ratio"] for r in rows)
    print(f"  cs-sRSVM (TRON) / squared hinge (TRON): at most {worst:.2f}x (target <= {TARGET_SMOOTH_RATIO}x)")
    print("  paper 001 (OHSUMED, other machine): 1.14 s for 2,570 rows to 9.75 s for 16,140 rows; context only")
    if args.json:
        print(json.dumps({"timing": rows}))


def out_of_core(args):
    import h5py
    import numpy as np
    from _rss import cli_peak_rss
    from streamrank.synthetic import write_hdf5
    from streamrank.units import parse_size
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"mslr30k-{args.ooc_scale:g}.h5"
    if not data.exists():
        write_hdf5(data, "mslr30k", scale=args.ooc_scale, seed=0)
    size = data.stat().st_size
    import streamrank
    streamrank.configure()  # the command line's process settings
    with streamrank.open_dataset(data) as ds:
        x_bytes, n_rows = 4 * ds.n_rows * ds.n_features, ds.n_rows
    print(f"\n== out of core: cs-sRSVM on generated mslr30k x{args.ooc_scale:g} ({n_rows:,} rows, X {x_bytes / 1e6:.0f} MB "
          f"as float32, {size / 1e6:.0f} MB of compressed HDF5), "
          f"C={args.time_C:g}, eta 0.1, costs and log_ratio weights ==")
    rows = []
    for budget in (args.ooc_budget, "16GB"):
        out = work / f"ooc-{budget}.h5"
        peak, wall, rc, err = cli_peak_rss(["train", data, "-o", out, "--loss", "smooth_hinge", "--eta", "0.1",
                                            "--pair-cost", COSTS, "--query-weight", "log_ratio", "--C",
                                            repr(args.time_C), "--memory-budget", budget, "--quiet"])
        if rc != 0:
            raise RuntimeError(f"training at {budget} failed:\n{err[-2000:]}")
        with h5py.File(out, "r") as f:
            w = f["w"][:]
        rows.append({"budget": budget, "peak": peak, "wall": wall, "w": w,
                     "under": peak <= parse_size(budget) / 1e6})
    same = np.array_equal(rows[0]["w"], rows[1]["w"])
    table_record("papers", "out of core", rows, [("budget", "--memory-budget", None), ("peak", "peak RSS MB", "{:.0f}"),
                 ("wall", "wall s", "{:.1f}"), ("under", "under budget", None)], params=args_params(args))
    print(f"  X ({x_bytes / 1e6:.0f} MB) > --memory-budget {args.ooc_budget}: "
          f"{'the same weights, bit for bit' if same else 'WEIGHTS DIFFER'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cs-srsvm", action="store_true", help="paper 001: quality table and time against rows")
    ap.add_argument("--clsr", action="store_true", help="paper 002: CLSRRank against RankSVM")
    ap.add_argument("--gas", action="store_true", help="paper 003: RankSVM on GAS-selected features")
    ap.add_argument("--only", choices=["quality", "timing", "out-of-core", "gas-topk"],
                    help="one part of each paper chosen (gas-topk: only --gas's RankSVM on the top 5 and 10 features)")
    ap.add_argument("--gas-ooc-scale", type=float, default=45.0, help="mq2007 scale of GAS's out-of-core part")
    ap.add_argument("--ooc-scale", type=float, default=0.5, help="mslr30k scale of the out-of-core part")
    ap.add_argument("--ooc-budget", default="320MB", help="--memory-budget of the out-of-core part")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the folder holding Fold1..Fold5 of MQ2008")
    ap.add_argument("--workdir", type=Path, default=Path("bench-out"))
    ap.add_argument("--folds", default="1,2,3,4,5")
    ap.add_argument("--time-C", type=float, default=0.01, help="C of the timed runs (default 0.01)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--liblinear", metavar="BIN", help="LIBLINEAR ranksvm extension's train binary")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not (args.cs_srsvm or args.clsr or args.gas):
        ap.error("choose a paper: --cs-srsvm, --clsr, --gas")
    import _papers_clsr_gas as p23
    print(machine_facts())
    t = time.perf_counter()
    if args.cs_srsvm:
        if args.only in (None, "quality"):
            quality(args)
        if args.only in (None, "timing"):
            timing(args)
        if args.only in (None, "out-of-core"):
            out_of_core(args)
    if args.clsr and args.only in (None, "quality"):
        p23.clsr_quality(args, converted, have_mq2008)
    if args.gas and args.only in (None, "quality"):
        p23.gas_quality(args, converted, have_mq2008)
        p23.gas_check(args, converted, have_mq2008)
    if args.gas and args.only in (None, "quality", "gas-topk"):
        p23.gas_topk(args, converted, have_mq2008)
    if (args.clsr or args.gas) and args.only in (None, "timing"):
        p23.timing(args, subsets)
    if (args.clsr or args.gas) and args.only in (None, "out-of-core"):
        p23.out_of_core(args)
    print(f"\n(bench_papers.py ran {time.perf_counter() - t:.0f} s)")


if __name__ == "__main__":
    main()
