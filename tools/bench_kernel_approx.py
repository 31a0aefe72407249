"""Kernel approximation (Nystroem, random Fourier features): time, passes, objective, quality and
memory, on MQ2008, the generated ``mq2007`` preset and, out of core, the generated ``mslr30k`` preset.

    python tools/bench_kernel_approx.py                  # sections 1, 2, 3 and 5 (not the out-of-core one)
    python tools/bench_kernel_approx.py --fold1          # MQ2008 Fold1, C=1, gamma=2^-5, m=500 and 2,000:
                                                         #   map / train time, passes, objective, letor4 test
                                                         #   NDCG@10 / MeanNDCG / MAP, peak RSS
    python tools/bench_kernel_approx.py --solvers        # MQ2008 Fold1, Nystroem m=500, eps=1e-8:
                                                         #   newton_cholesky vs TRON objective
    python tools/bench_kernel_approx.py --mq2007         # generated mq2007 (seed 0), m=2,000, C=2^-2,
                                                         #   gamma=2^-5: HDF5 file -> saved model, per solver
    python tools/bench_kernel_approx.py --out-of-core    # generated mslr30k, m=1,024, --memory-budget 2GB,
                                                         #   mapped rows on disk: per-pass time vs its limits
    python tools/bench_kernel_approx.py --out-of-core --scale 0.1    # the same, smaller first
    python tools/bench_kernel_approx.py --mq2008-table   # 5 folds: linear, Nystroem, exact, LightGBM lambdarank;
                                                         #   hyperparameters on vali, letor4 metrics on test

MQ2008 is read from ``../shared/data/MQ2008`` beside the repository (``--data``); sections that need it
are skipped with a message when it is absent. Converted and generated HDF5 files are kept under
``--workdir`` (default bench-out/) and reused; the out-of-core section's feature cache lives in
``--workdir``/ooc-cache and is deleted at the end unless ``--keep``.

Every timed run happens in a fresh process whose numba kernels are loaded first by a tiny training
run (linear, Nystroem in memory and streamed, both solvers, random features) before any clock starts;
"peak RSS" is that process's own high-water mark (VmHWM) at the end of training, interpreter and
libraries included. Map and solver time are split by instrumenting the child (never the package):
"map fit" = the feature map's fit (landmark sampling, K(L, L), eigh), "map rows" = every
``transform`` of training rows (in the first pass, and in every pass when rows are recomputed),
"solver" = the rest of ``train_linear`` (HDF5 reads, pair sweeps, products, CG, line searches,
validation scoring). LightGBM (``pip install lightgbm``) is needed for its column of the table only.
"""

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import machine_facts, run_child, args_params, table, table_record  # noqa: E402
from _kernel_approx_child import RUN  # noqa: E402
from bench_linear import (DEFAULT_DATA, converted, float_list, fmt_bytes, fmt_c, generated,  # noqa: E402
                          have_mq2008, shape_of)

# paper 000, Table 2: Nystroem m=2,000 on MQ2007 fold 1, 16 cores
PAPER_MQ2007_S = 10.9
TARGET_MQ2007_S = 10.0
OOC_RSS_TARGET_GB = 2.5
OOC_MIN_MAPPED_GIB = 8.0
OOC_PASS_TARGET = 2.0     # TRON per-pass time within this factor of the faster way to get the rows
OOC_MIN_FREE_GB = 20.0



def child(args, params, timeout=None):
    code = RUN.replace("__WARM__", repr(str(args.warm))).replace("__PARAMS__", repr(json.dumps(params)))
    return run_child(code, timeout=timeout or args.timeout)


def loadavg():
    a = os.getloadavg()
    return f"load average {a[0]:.2f} / {a[1]:.2f} / {a[2]:.2f} (1 / 5 / 15 min) on {os.cpu_count()} cores"


_LOAD0 = [0.0]


def header(title):
    print(f"\n== {title} ==")
    print(machine_facts())
    _LOAD0[0] = os.getloadavg()[0]
    print(loadavg() + " before this section", flush=True)


def noisy_note():
    a = _LOAD0[0]
    if a > 0.5:
        print(f"note: the 1-minute load average was {a:.2f} on {os.cpu_count()} cores before this section started: "
              f"other work shares the machine, so wall times are noisy (rerun when it is quiet)")
    else:
        print("note: timings are wall-clock on a machine that may be shared; rerun when it is quiet")


def mq_paths(args, fold):
    return {p: converted(args.work, args.data, fold, p) for p in ("train", "vali", "test")}


def pass_stats(r):
    """(first pass s, mean s of the plain passes after the first, how many) from the child's timings."""
    first = [t for k, t in r.get("pass_times", []) if k == "first"]
    rest = [t for k, t in r.get("pass_times", []) if k == "pass"]
    return (first[0] if first else None), (sum(rest) / len(rest) if rest else None), len(rest)


MAP_COLUMNS = [("fit_s", "map fit s", "{:.2f}"), ("transform_s", "map rows s", "{:.2f}"),
               ("solver_s", "solver s", "{:.2f}"), ("train_s", "train s", "{:.2f}")]


# --------------------------------------------------------------------------------------------------
def section_fold1(args):
    header(f"MQ2008 Fold1: C=1, gamma=2^-5, m in {args.fold1_m}, solver tron, eps={args.tol:g}; letor4 on test")
    if not have_mq2008(args.data):
        return None
    paths = mq_paths(args, 1)
    rows = []
    runs = [("primal", None)] + [(meth, m) for meth in ("nystroem", "rff") for m in args.fold1_m]
    for method, m in runs:
        kw = {"C": [1.0], "tol": args.tol, "solver": "tron", "method": method}
        if method != "primal":
            kw.update(kernel="rbf", gamma=2.0 ** -5, components=m)
        r = child(args, {"train": str(paths["train"]), "test": str(paths["test"]), "kw": kw})
        r.update(method=method, m=m if m else "", k=r.get("components") or "")
        r.update({"n10": r["test"]["NDCG@10"], "meanndcg": r["test"]["MeanNDCG"], "map": r["test"]["MAP"]})
        rows.append(r)
        print(f"  {method} m={m}: train {r['train_s']:.2f} s, {r['passes']} passes, peak RSS "
              f"{r['peak_rss_mb']:,.0f} MB", flush=True)
    n, d, nq = shape_of(paths["train"])
    print(f"\nMQ2008 Fold1 train: {n:,} rows x {d} features, {nq} queries; test scored with the trained model")
    table_record("kernel_approx", "fold1",
        rows, [("method", "method", None), ("m", "m", None), ("k", "features", None)] + MAP_COLUMNS +
          [("iterations", "TRON iter", None), ("cg", "CG", None), ("passes", "passes", None),
           ("objective", "objective", "{:.8e}"), ("n10", "NDCG@10", "{:.4f}"), ("meanndcg", "MeanNDCG", "{:.4f}"),
           ("map", "MAP", "{:.4f}"), ("predict_s", "predict s", "{:.2f}"), ("peak_rss_mb", "peak RSS MB", "{:,.0f}")], params=args_params(args))
    print("map fit = landmark sampling + K(L, L) + eigh (Nystroem; random features draw Omega); map rows = "
          "transforming the 9,630 training rows (once: they are kept in memory); solver = the rest of "
          "train_linear; train = all of it; predict = mapping and scoring the test file; features = the map's "
          "output width (Nystroem drops eigenvalues below the floor); letor4 means over all test queries.")
    noisy_note()
    return {"rows": rows}


# --------------------------------------------------------------------------------------------------
def section_solvers(args):
    m = args.solvers_m
    header(f"MQ2008 Fold1: newton_cholesky vs TRON, Nystroem m={m}, C=1, gamma=2^-5, eps={args.oracle_eps:g}")
    if not have_mq2008(args.data):
        return None
    paths = mq_paths(args, 1)
    rows = []
    for solver in ("tron", "newton_cholesky"):
        kw = {"C": [1.0], "tol": args.oracle_eps, "solver": solver, "method": "nystroem", "kernel": "rbf",
              "gamma": 2.0 ** -5, "components": m}
        r = child(args, {"train": str(paths["train"]), "kw": kw})
        h = r["hess"]
        r.update(name=solver, n_hess=len(h), hess_each=(sum(x["s"] for x in h) / len(h)) if h else None,
                 hess_prod_each=r["hess_prod_s"] / len(h) if h else None, phi_each=r["phi_s"] / len(h) if h else None)
        if h:
            r["gemm_each"] = r["hess_each"] - r["hess_prod_each"] - r["phi_each"]
            r["hess_gflops"] = 2 * h[0]["rows"] * m * m / r["gemm_each"] / 1e9
        rows.append(r)
    f_t, f_n = rows[0]["objective"], rows[1]["objective"]
    rd = abs(f_n - f_t) / abs(f_t)
    for r in rows:
        r["rel"] = abs(r["objective"] - f_t) / abs(f_t)
    table_record("kernel_approx", "solvers",
        rows, [("name", "solver", None), ("objective", "objective", "{:.12e}"), ("rel", "rel. diff vs TRON", "{:.2e}"),
                 ("grad_norm", "|grad|", "{:.2e}"), ("iterations", "iter", None), ("cg", "CG / line evals", None),
                 ("passes", "passes", None), ("n_hess", "Hessians", None), ("hess_each", "s/Hessian", "{:.3f}"),
                 ("hess_prod_each", "(wide sweep)", "{:.3f}"), ("phi_each", "(Phi f64)", "{:.3f}"),
                 ("gemm_each", "(Phi^T LPhi etc)", "{:.3f}"), ("hess_gflops", "GF/s", "{:.1f}"), ("map_s", "map s", "{:.2f}"), ("solver_s", "solver s", "{:.2f}"),
                 ("train_s", "train s", "{:.2f}"), ("peak_rss_mb", "peak RSS MB", "{:,.0f}")], params=args_params(args))
    print(f"objective, newton_cholesky vs TRON: {rd:.2e} relative (criterion 1e-6 at eps = {args.oracle_eps:g}: "
          f"{'met' if rd <= 1e-6 else 'NOT met'})")
    print("CG / line evals: TRON's CG steps; for newton_cholesky the line-search evaluations (on scores in "
          "memory, no pass). s/Hessian = one dense Hessian (I + C Phi^T L Phi, one pass): (wide sweep) = the "
          f"pair kernel with {m}-wide payloads, (Phi f64) = float64 copies of the rows, the rest mostly the "
          "BLAS product Phi^T (L Phi); GF/s = its 2 n m^2 flops over that rest.")
    noisy_note()
    return {"rows": rows, "rel": rd}


# --------------------------------------------------------------------------------------------------
def section_mq2007(args):
    header(f"generated mq2007 (seed 0): Nystroem m={args.mq2007_m}, C=2^-2, gamma=2^-5, eps={args.tol:g}; "
           f"HDF5 file -> saved model")
    path = generated(args.work, "mq2007", 1.0)
    n, d, nq = shape_of(path)
    print(f"{path}: {n:,} rows x {d} features, {nq:,} queries")
    rows = []
    plan = [("tron", i) for i in range(args.repeat)] + [("newton_cholesky", 0), ("auto", 0)]
    for solver, rep in plan:
        kw = {"C": [0.25], "tol": args.tol, "solver": solver, "method": "nystroem", "kernel": "rbf",
              "gamma": 2.0 ** -5, "components": args.mq2007_m}
        out = args.work / f"mq2007-model-{solver}.h5"
        r = child(args, {"train": str(path), "kw": kw, "save": str(out)})
        ch = r["choose"][0] if r["choose"] else None
        r.update(run=solver + (f" #{rep + 1}" if args.repeat > 1 and solver == "tron" else ""),
                 chosen=r["solver"], choose_s=ch["s"] if ch else None,
                 map_share=r["map_s"] / r["total_s"], hess_n=len(r["hess"]),
                 hess_s=sum(x["s"] for x in r["hess"]) if r["hess"] else None)
        if ch:
            r["why"] = ch["why"]
        rows.append(r)
        print(f"  {r['run']}: {r['total_s']:.2f} s file -> model (map {r['map_s']:.2f} s), {r['passes']} passes, "
              f"load {r['load_end']:.2f}", flush=True)
    table_record("kernel_approx", "mq2007",
        rows, [("run", "--solver", None), ("chosen", "ran", None), ("total_s", "file->model s", "{:.2f}"),
                 ("open_s", "open s", "{:.3f}"), ("fit_s", "map fit s", "{:.2f}"), ("transform_s", "map rows s", "{:.2f}"),
                 ("choose_s", "auto s", "{:.2f}"), ("hess_n", "Hessians", None), ("hess_s", "Hessian s", "{:.2f}"),
                 ("solver_s", "solver s", "{:.2f}"), ("save_s", "save s", "{:.3f}"), ("map_share", "map share", "{:.0%}"),
                 ("iterations", "iter", None), ("cg", "CG/line", None), ("passes", "passes", None),
                 ("objective", "objective", "{:.8e}"), ("peak_rss_mb", "peak RSS MB", "{:,.0f}"),
                 ("warm_s", "kernel load s", "{:.2f}"), ("load_end", "load avg", "{:.2f}")], params=args_params(args))
    for r in rows:
        if r.get("why"):
            print(f"--solver auto chose {r['chosen']} in {r['choose_s']:.2f} s: {r['why']}")
    print("file->model = open the HDF5 file, train_linear (map fit, mapping the rows, solver), model.save; "
          "solver s includes --solver auto's measurement and the Hessians; auto s = choose_solver() (its fun() is the first pass, which maps the rows: map rows s is inside it); kernel load = numba kernels "
          "loaded from the on-disk cache before timing (not included).")
    tr = [r["total_s"] for r in rows if r["chosen"] == "tron" and not r["run"].startswith("auto")]
    best, med = min(tr), sorted(tr)[len(tr) // 2]
    print(f"paper 000 (Table 2): {PAPER_MQ2007_S} s for Nystroem m=2,000 on MQ2007 fold 1 with 16 cores; target "
          f"here: under {TARGET_MQ2007_S:g} s on {os.cpu_count()} cores with the default solver (tron): best "
          f"{best:.2f} s, median {med:.2f} s of {len(tr)} -> {'met' if med < TARGET_MQ2007_S else 'NOT met'} "
          f"(median){'' if (best < TARGET_MQ2007_S) == (med < TARGET_MQ2007_S) else '; best ' + ('met' if best < TARGET_MQ2007_S else 'NOT met')}")
    noisy_note()
    return {"rows": rows}


# --------------------------------------------------------------------------------------------------
def section_out_of_core(args):
    m = args.ooc_m
    header(f"Out of core: generated mslr30k scale {args.scale:g}, Nystroem m={m}, C=1, gamma=2^-5 "
           f"(rbf), --memory-budget {args.ooc_budget}, eps={args.tol:g}")
    free_gb = shutil.disk_usage(args.work).free / 1e9
    n_full = 2_270_296 * args.scale
    need_gb = n_full * 4 * m / 1e9
    print(f"free disk under {args.work}: {free_gb:.1f} GB; mapped rows will take about {need_gb:.1f} GB")
    if free_gb < OOC_MIN_FREE_GB and free_gb < 2 * need_gb + 2:
        print(f"less than {OOC_MIN_FREE_GB:g} GB free: section skipped (free space or pass --workdir on another disk)")
        return None
    path = generated(args.work, "mslr30k", args.scale)
    n, d, nq = shape_of(path)
    mapped = n * 4 * m
    print(f"{path}: {n:,} rows x {d} features, {nq:,} queries; X (float32) {fmt_bytes(n * d * 4)}; mapped rows "
          f"(float32, {m} wide) {fmt_bytes(mapped)} = {mapped / 2**30:.2f} GiB "
          f"({'>=' if mapped >= OOC_MIN_MAPPED_GIB * 2**30 else 'below'} the {OOC_MIN_MAPPED_GIB:g} GiB of the "
          f"criterion{'' if mapped >= OOC_MIN_MAPPED_GIB * 2**30 else ': run at --scale 1'})", flush=True)
    cache = args.work / "ooc-cache"
    base = {"C": [1.0], "tol": args.tol, "method": "nystroem", "kernel": "rbf", "gamma": 2.0 ** -5,
            "components": m, "memory_budget": args.ooc_budget, "cache_dir": str(cache)}
    # map_cache=auto decides from one block's read rate measured right after the cache was written,
    # which is noisy (measured: it chose recompute in one run, ~12x slower per pass, after choosing
    # the cache in others), so the full TRON run forces the cache and auto gets a short probe run
    auto_iter = args.ooc_auto_iter or None
    plan = [("tron", "auto", auto_iter, not auto_iter), ("tron", "cache", None, True)]
    if not args.ooc_quick:
        plan += ([("tron", "recompute", args.ooc_recompute_iter, True)] if args.ooc_recompute_iter > 0 else []) + [
            ("newton_cholesky", "cache", args.ooc_newton_iter, True),
            ("auto", "cache", 1, False)]
    rows, lim_rows = [], []
    try:
        for solver, mode, max_iter, limits in plan:
            kw = dict(base, solver=solver, map_cache=mode)
            if max_iter:
                kw["max_iter"] = max_iter
            t = time.perf_counter()
            r = child(args, {"train": str(path), "kw": kw, "limits": limits, "reps": 2}, timeout=args.timeout)
            first, per, n_rest = pass_stats(r)
            h = r["hess"]
            ch = r["choose"][0] if r["choose"] else None
            r.update(run=f"{solver}, map_cache={mode}" + (f", max_iter={max_iter}" if max_iter else ""),
                     first=first, per_pass=per, n_rest=n_rest, rss_gb=r["rss_train_mb"] / 1000,
                     per_pass_formula=((r["tron_s"] - (first or 0)) / max(r["passes"] - 1, 1)
                                       if solver == "tron" else None),
                     chosen=r["solver"], choose_s=ch["s"] if ch else None,
                     hess_s=h[0]["s"] if h else None)
            if ch:
                r["why"] = ch["why"]
            rows.append(r)
            print(f"  {r['run']}: {r['train_s']:.1f} s, {r['passes']} passes, storage {r['map_storage']}, "
                  f"peak RSS {r['rss_train_mb']:,.0f} MB, wall {time.perf_counter() - t:.0f} s; {r.get('reason', '')}",
                  flush=True)
            if "limits" in r:
                L = dict(r["limits"])
                L["run"] = r["run"]
                L["n"] = n
                if "read_s" in L:
                    L["read_gbs"] = L["read_bytes"] / L["read_s"] / 1e9
                    L["read_crc_gbs"] = L["read_bytes"] / L["read_crc_s"] / 1e9
                lim_rows.append((r, L))
    finally:
        if not args.keep and cache.exists():
            shutil.rmtree(cache, ignore_errors=True)
            print(f"deleted {cache} (pass --keep to keep it)")
    print()
    table_record("kernel_approx", "out of core",
        rows, [("run", "run", None), ("chosen", "ran", None), ("map_storage", "storage", None),
                 ("n_blocks", "blocks", None), ("fit_s", "map fit s", "{:.1f}"),
                 ("transform_s", "map rows s", "{:.1f}"), ("solver_s", "solver s", "{:.1f}"),
                 ("train_s", "train s", "{:.1f}"), ("iterations", "iter", None), ("cg", "CG", None),
                 ("passes", "passes", None), ("first", "1st pass s", "{:.1f}"), ("per_pass", "s/pass after", "{:.2f}"),
                 ("per_pass_formula", "(tron s - 1st) / (passes - 1)", "{:.2f}"),
                 ("hess_s", "Hessian s", "{:.1f}"), ("choose_s", "auto s", "{:.1f}"),
                 ("objective", "objective", "{:.8e}"), ("rss_fit_mb", "RSS after map fit MB", "{:,.0f}"),
                 ("rss_train_mb", "peak RSS MB", "{:,.0f}")], params=args_params(args))
    print("1st pass = mapping every row (and writing the cache; a run that finds the complete cache of an "
          "earlier run maps block 0 only, to time it, and reads the rest); s/pass after = mean wall time of the later "
          "full passes of the solver (fun+grad or a Hessian product), each timed from its first block to its "
          "last; Hessian s = one dense m x m Hessian pass of newton_cholesky; peak RSS = VmHWM at the end of "
          "training (before the limit measurements below); RSS after map fit = VmHWM right after the map's fit "
          "(its one pass over the raw rows); for the auto run the 1st pass is inside --solver auto's measurement.")
    for r in rows:
        if r.get("why"):
            print(f"--solver auto chose {r['chosen']} in {r['choose_s']:.1f} s: {r['why']}")
        print(f"  {r['run']}: {r.get('reason', '')}")
    ok_rss = all(r["rss_train_mb"] / 1000 < OOC_RSS_TARGET_GB for r in rows)
    worst = max(r["rss_train_mb"] for r in rows)
    print(f"peak RSS: largest {worst:,.0f} MB = {worst / 1000:.2f} GB vs the target {OOC_RSS_TARGET_GB} GB: "
          f"{'met' if ok_rss else 'NOT met'} (mapped rows {mapped / 1e9:.2f} GB)")
    if lim_rows:
        print("\nPer-pass limits measured in the same process after training:")
        out = []
        for r, L in lim_rows:
            read = L.get("read_crc_s")
            lim = min(x for x in (read, L["map_pass_s"]) if x is not None)
            row = {"run": r["run"], "per_pass": r["per_pass"], "read": L.get("read_s"), "read_crc": read,
                   "read_gbs": L.get("read_gbs"), "cold": L.get("cold_read_bps", 0) / 1e9 or None,
                   "map": L["map_pass_s"], "map_rps": L["map_rps"], "blas": L.get("blas_pass_s"),
                   "limit": lim, "ratio": (r["per_pass"] / lim) if r["per_pass"] else None,
                   "dgemm": L["dgemm_gflops"], "sgemm": L["sgemm_gflops"]}
            out.append(row)
        table_record("kernel_approx", "out of core passes",
            out, [("run", "run", None), ("per_pass", "TRON s/pass", "{:.2f}"), ("read", "(a) read s", "{:.2f}"),
                    ("read_crc", "(a) read+crc32 s", "{:.2f}"), ("read_gbs", "GB/s", "{:.2f}"),
                    ("cold", "cold GB/s", "{:.2f}"), ("map", "(b) map s", "{:.2f}"), ("map_rps", "rows/s", "{:,.0f}"),
                    ("blas", "(c) f32 BLAS s", "{:.2f}"), ("limit", "min(a, b)", "{:.2f}"),
                    ("ratio", "TRON / limit", "{:.2f}"), ("dgemm", "dgemm GF/s", "{:.1f}"),
                    ("sgemm", "sgemm GF/s", "{:.1f}")], params=args_params(args))
        print("(a) = reading every block file of the feature cache into one reused buffer (best of 2; the cache "
              "verifies crc32 on every read, so read+crc32 is what a cached pass must do, and is the limit used); "
              "cold = one block after dropping its pages (the disk); (b) = normalise + transform of "
              f"{min(32768, n):,} rows (best of 2) scaled to all rows; (c) = numpy's float32 Phi @ s and "
              "Phi.T @ t over one block, scaled to all rows (the products a pass cannot avoid); "
              "dgemm/sgemm = (4096 x 1024) @ (1024 x 1024).")
        for r, L in lim_rows:
            if r["chosen"] == "tron" and r["per_pass"]:
                read = L.get("read_crc_s")
                lim = min(x for x in (read, L["map_pass_s"]) if x is not None)
                ratio = r["per_pass"] / lim
                where = {"memory": "mapped rows held in memory: not an out-of-core pass",
                         "cache": "rows read from the feature cache", "recompute": "rows mapped again every pass"}
                print(f"{r['run']} ({where.get(r['map_storage'], r['map_storage'])}): target (TRON passes within "
                      f"{OOC_PASS_TARGET:g}x of the faster way to get the rows): {r['per_pass']:.2f} s per pass vs "
                      f"min(read {'n/a' if read is None else f'{read:.2f}'} s, map {L['map_pass_s']:.2f} s) = "
                      f"{lim:.2f} s -> {ratio:.2f}x: " + ("n/a (not out of core)" if r["map_storage"] == "memory" else
                                                          "met" if ratio <= OOC_PASS_TARGET else "NOT met"))
            if r["hess"]:
                h = r["hess"][0]
                flops = 2 * h["rows"] * m * m
                print(f"newton_cholesky: one Hessian over {h['rows']:,} rows took {h['s']:.1f} s = "
                      f"{flops / h['s'] / 1e9:.1f} GFlop/s for the 2 n m^2 = {flops / 1e12:.2f} TFlop of "
                      f"Phi^T (L Phi) (pieces: wide pair sweep {r['hess_prod_s']:.1f} s, float64 copies of Phi "
                      f"{r['phi_s']:.1f} s, the rest {h['s'] - r['hess_prod_s'] - r['phi_s']:.1f} s: the product "
                      f"and reading the rows) vs dgemm {L['dgemm_gflops']:.1f} GFlop/s, sgemm "
                      f"{L['sgemm_gflops']:.1f} GFlop/s measured here ({flops / h['s'] / 1e9 / L['dgemm_gflops']:.0%} "
                      f"of dgemm)")
    noisy_note()
    return {"rows": rows, "limits": [L for _, L in lim_rows]}


# --------------------------------------------------------------------------------------------------
def lgbm_fold(args, paths):
    """LightGBM lambdarank: grid on vali (early stopping on vali NDCG@10, chosen by vali letor4
    MeanNDCG), then test. Returns (test report means, chosen params, vali MeanNDCG, seconds)."""
    import warnings

    import lightgbm as lgb
    import numpy as np

    import streamrank
    streamrank.configure()  # the command line's process settings
    from streamrank.evaluation.metrics import evaluate
    data = {}
    for part, p in paths.items():
        with streamrank.open_dataset(p) as ds:
            X, y = ds.read(0, ds.n_rows)
            data[part] = (X, y, np.asarray(ds.query_ptr))
    Xtr, ytr, qtr = data["train"]
    Xva, yva, qva = data["vali"]
    t = time.perf_counter()
    best = None
    for leaves in args.lgbm_leaves:
        for lr in args.lgbm_lr:
            for mcs in args.lgbm_min_child:
                model = lgb.LGBMRanker(objective="lambdarank", n_estimators=args.lgbm_max_trees, learning_rate=lr,
                                       num_leaves=leaves, min_child_samples=mcs, n_jobs=os.cpu_count(),
                                       random_state=0, deterministic=True, force_row_wise=True, verbose=-1)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # 4.7 renames eval_set (eval_X, eval_y); older ones lack those
                    model.fit(Xtr, ytr, group=np.diff(qtr), eval_set=[(Xva, yva)], eval_group=[np.diff(qva)],
                              eval_at=[10], eval_metric="ndcg",
                              callbacks=[lgb.early_stopping(args.lgbm_patience, first_metric_only=True,
                                                            verbose=False)])
                v = evaluate(yva, model.predict(Xva, num_iteration=model.best_iteration_), qva,
                             convention="letor4").means["MeanNDCG"]
                if best is None or v > best[0]:
                    best = (v, model, {"num_leaves": leaves, "learning_rate": lr, "min_child_samples": mcs,
                                       "trees": model.best_iteration_})
    dt = time.perf_counter() - t
    v, model, params = best
    Xte, yte, qte = data["test"]
    rep = evaluate(yte, model.predict(Xte, num_iteration=model.best_iteration_), qte, convention="letor4")
    return rep.means, params, v, dt


def section_table(args):
    folds = args.folds
    header(f"MQ2008, folds {','.join(map(str, folds))}: linear, Nystroem, exact kernel and LightGBM lambdarank; hyperparameters "
           f"on vali (letor4 MeanNDCG), letor4 metrics on test")
    if not have_mq2008(args.data, folds):
        return None
    import numpy as np

    import streamrank
    streamrank.configure()  # the command line's process settings
    from streamrank.evaluation.metrics import evaluate
    from streamrank.training.linear import train_linear
    from streamrank.training.problem import read_labels
    try:
        import lightgbm
        lgbm_version = lightgbm.__version__
    except ImportError:
        lgbm_version = None
        print("lightgbm is not installed (pip install lightgbm): its column is skipped")
    keys = (("n1", "NDCG@1"), ("n3", "NDCG@3"), ("n5", "NDCG@5"), ("n10", "NDCG@10"), ("mean", "MeanNDCG"),
            ("map", "MAP"))
    res = {"linear": [], "nystroem": [], "exact": [], "lightgbm": []}

    def test_row(fold, model, tds, extra):
        scores = model.predict_dataset(tds)   # input row order
        rep = evaluate(read_labels(tds), scores[tds.row], tds.query_ptr, convention="letor4", qid=tds.query_ids)
        return dict({"fold": f"Fold{fold}"}, **{k: rep.means[n] for k, n in keys}, **extra)

    for k in folds:
        paths = mq_paths(args, k)
        with streamrank.open_dataset(paths["train"]) as ds, streamrank.open_dataset(paths["vali"]) as vds, \
                streamrank.open_dataset(paths["test"]) as tds:
            t = time.perf_counter()
            model, s = train_linear(ds, valid=vds, C=args.C_grid, tol=args.tol, select_metric="meanndcg")
            dt = time.perf_counter() - t
            best = next(c for c in s["candidates"] if c["C"] == s["C"])
            res["linear"].append(test_row(k, model, tds, {"C": fmt_c(s["C"]), "valid": best["valid_meanndcg"],
                                                           "s": dt, "edge": ",".join(s["grid_edge"]) or "-"}))
            print(f"  Fold{k} linear: C={fmt_c(s['C'])}, {dt:.1f} s", flush=True)
            chosen = None
            for m in args.kernel_m:
                t = time.perf_counter()
                model, s = train_linear(ds, valid=vds, C=args.kernel_C, gamma=args.kernel_gamma, method="nystroem",
                                        kernel="rbf", components=m, tol=args.tol, select_metric="meanndcg")
                dt = time.perf_counter() - t
                best = next(c for c in s["candidates"] if c["C"] == s["C"] and c["gamma"] == s["gamma"])
                print(f"  Fold{k} Nystroem m={m}: best gamma={fmt_c(s['gamma'])} C={fmt_c(s['C'])} vali "
                      f"{best['valid_meanndcg']:.4f}, {len(s['candidates'])} points, {dt:.1f} s, "
                      f"{s['passes']} passes", flush=True)
                if chosen is None or best["valid_meanndcg"] > chosen[0]:
                    chosen = (best["valid_meanndcg"], model, s, m)
                res.setdefault("_kernel_s", {}).setdefault(k, []).append(dt)
            v, model, s, m = chosen
            res["nystroem"].append(test_row(k, model, tds, {
                "C": fmt_c(s["C"]), "gamma": fmt_c(s["gamma"]), "m": m, "k": s["components"], "valid": v,
                "s": sum(res["_kernel_s"][k])}))
            if not args.no_exact:
                from streamrank.training.exact import train_exact
                t = time.perf_counter()
                model, s = train_exact(ds, valid=vds, C=args.exact_C, gamma=args.exact_gamma, kernel="rbf", tol=args.tol,
                                       select_metric="meanndcg", cache_dir=args.work / "exact-cache")
                dt = time.perf_counter() - t
                best = next(c for c in s["candidates"] if c["C"] == s["C"] and c["gamma"] == s["gamma"])
                res["exact"].append(test_row(k, model, tds, {"C": fmt_c(s["C"]), "gamma": fmt_c(s["gamma"]),
                                                              "valid": best["valid_meanndcg"], "s": dt,
                                                              "edge": ",".join(s["grid_edge"]) or "-"}))
                print(f"  Fold{k} exact: gamma={fmt_c(s['gamma'])} C={fmt_c(s['C'])} vali "
                      f"{best['valid_meanndcg']:.4f}, {len(s['candidates'])} points, {s['cg_steps']} CG steps, "
                      f"{dt:.1f} s", flush=True)
        if lgbm_version:
            means, params, v, dt = lgbm_fold(args, paths)
            res["lightgbm"].append(dict({"fold": f"Fold{k}"}, **{kk: means[n] for kk, n in keys},
                                        **{"valid": v, "s": dt, "leaves": params["num_leaves"],
                                           "lr": params["learning_rate"], "mcs": params["min_child_samples"],
                                           "trees": params["trees"]}))
            print(f"  Fold{k} LightGBM: {params}, vali {v:.4f}, {dt:.1f} s", flush=True)
    metric_cols = [("n1", "NDCG@1", "{:.4f}"), ("n3", "NDCG@3", "{:.4f}"), ("n5", "NDCG@5", "{:.4f}"),
                   ("n10", "NDCG@10", "{:.4f}"), ("mean", "MeanNDCG", "{:.4f}"), ("map", "MAP", "{:.4f}")]
    hp = {"linear": [("C", "chosen C", None), ("edge", "grid edge", None)],
          "exact": [("gamma", "gamma", None), ("C", "C", None), ("edge", "grid edge", None)],
          "nystroem": [("m", "m", None), ("k", "features", None), ("gamma", "gamma", None), ("C", "C", None)],
          "lightgbm": [("leaves", "leaves", None), ("lr", "lr", "{:g}"), ("mcs", "min child", None),
                       ("trees", "trees", None)]}
    summary = []
    for name in ("linear", "nystroem", "exact", "lightgbm"):
        rows = res[name]
        if not rows:
            continue
        mean = {"fold": "mean"}
        for key, _ in keys:
            mean[key] = float(np.mean([r[key] for r in rows]))
        mean["s"] = float(np.sum([r["s"] for r in rows]))
        print(f"\n{name}:")
        table_record("kernel_approx", f"table {name}",
            rows + [mean], [("fold", "fold", None)] + hp[name] + [("valid", "vali MeanNDCG", "{:.4f}")] +
              metric_cols + [("s", "tuning s", "{:.1f}")], params=args_params(args))
        summary.append(dict(mean, fold={"linear": "linear RankSVM", "nystroem": "Nystroem RankSVM (rbf)",
                                        "exact": "exact kernel RankSVM (rbf)",
                                        "lightgbm": f"LightGBM {lgbm_version} lambdarank"}[name]))
    print(f"\nmeans over folds {','.join(map(str, folds))} (letor4, all test queries):")
    table_record("kernel_approx", "table summary",
        summary, [("fold", "model", None)] + metric_cols + [("s", "tuning s (sum)", "{:.1f}")], params=args_params(args))
    gam = ",".join(fmt_c(g) for g in args.kernel_gamma)
    cs = ",".join(fmt_c(c) for c in args.kernel_C)
    print(f"linear: C in {','.join(map(fmt_c, args.C_grid))} (TRON, tol {args.tol:g}); Nystroem: m in "
          f"{','.join(map(str, args.kernel_m))} x gamma in {gam} x C in {cs} (tol {args.tol:g}; gammas and Cs "
          f"along train_linear's warm-started path per m); exact kernel: gamma in "
          f"{','.join(fmt_c(g) for g in args.exact_gamma)} x C in {','.join(fmt_c(c) for c in args.exact_C)} "
          f"(warm-started C path per gamma); all chosen by vali MeanNDCG. LightGBM: "
          f"LGBMRanker(objective='lambdarank'), num_leaves in {args.lgbm_leaves} x learning_rate in "
          f"{args.lgbm_lr} x min_child_samples in {args.lgbm_min_child}, up to {args.lgbm_max_trees} trees with "
          f"early stopping ({args.lgbm_patience} rounds) on vali NDCG@10 (LightGBM's own NDCG), the grid point "
          f"chosen by vali letor4 MeanNDCG. All test metrics: streamrank.evaluation.metrics.evaluate(convention='letor4').")
    cmd = ["python tools/bench_kernel_approx.py --mq2008-table"]
    if Path(args.data).resolve() != DEFAULT_DATA.resolve():
        cmd.append(f"--data {args.data}")
    print("produced by: " + " ".join(cmd) + f"   (pip install lightgbm=={lgbm_version or '4.7.0'})")
    cgrid = ",".join(repr(float(c)) for c in args.kernel_C)
    ggrid = ",".join(repr(float(g)) for g in args.kernel_gamma)
    print("per fold with the command line tool (Nystroem, one m; choose between m by the logged vali scores):\n"
          + "".join(f"  streamrank train FoldK/train.txt.gz --valid FoldK/vali.txt.gz --method nystroem --kernel rbf "
                    f"--components {m} --gamma {ggrid} --C {cgrid} --select-metric meanndcg --tol {args.tol:g} "
                    f"--json -o nys{m}.h5\n" for m in args.kernel_m)
          + "  streamrank predict nysM.h5 FoldK/test.txt.gz -o scores.txt\n"
            "  streamrank eval FoldK/test.txt.gz scores.txt --convention letor4")
    noisy_note()
    return {k: v for k, v in res.items() if not k.startswith("_")}


# --------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fold1", action="store_true", help="MQ2008 Fold1, m=500 and 2,000: time, passes, quality, RSS")
    ap.add_argument("--solvers", action="store_true", help="newton_cholesky vs TRON objective at eps=1e-8")
    ap.add_argument("--mq2007", action="store_true", help="generated mq2007, m=2,000: HDF5 file -> saved model")
    ap.add_argument("--out-of-core", action="store_true", help="generated mslr30k, m=1,024, 2GB budget (heavy: "
                                                               "~9.3 GB of mapped rows at --scale 1; opt-in)")
    ap.add_argument("--mq2008-table", action="store_true",
                    help="5-fold table: linear, Nystroem, exact kernel, LightGBM")
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="folder with MQ2008 Fold1..Fold5")
    ap.add_argument("--workdir", default="bench-out")
    ap.add_argument("--tol", type=float, default=1e-3, help="solver tolerance (sections 1, 3, 4, 5)")
    ap.add_argument("--oracle-eps", type=float, default=1e-8, help="tolerance of the solver comparison")
    ap.add_argument("--fold1-m", type=lambda s: [int(x) for x in s.split(",")], default=[500, 2000])
    ap.add_argument("--solvers-m", type=int, default=500)
    ap.add_argument("--mq2007-m", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3, help="tron runs of the mq2007 section (noise)")
    ap.add_argument("--scale", type=float, default=1.0, help="mslr30k scale of the out-of-core section")
    ap.add_argument("--ooc-m", type=int, default=1024)
    ap.add_argument("--ooc-budget", default="2GB")
    ap.add_argument("--ooc-quick", action="store_true", help="out of core: only the two tron runs (auto probe, cache)")
    ap.add_argument("--ooc-recompute-iter", type=int, default=1,
                    help="max_iter of the forced-recompute run (every pass maps all rows; 0 skips the run, "
                         "the map rate (b) below still bounds a recomputing pass)")
    ap.add_argument("--ooc-newton-iter", type=int, default=1, help="max_iter of the newton_cholesky run")
    ap.add_argument("--ooc-auto-iter", type=int, default=1,
                    help="max_iter of the map_cache=auto probe run (0: to convergence)")
    ap.add_argument("--keep", action="store_true", help="keep the out-of-core feature cache")
    ap.add_argument("--folds", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3, 4, 5])
    ap.add_argument("--C-grid", type=float_list, default=[2.0 ** k for k in range(-16, 5, 2)],
                    help="linear C values of the table (as bench_linear.py)")
    ap.add_argument("--kernel-m", type=lambda s: [int(x) for x in s.split(",")], default=[500, 2000])
    # the grid (gamma 2^-7..2^-3, C 2^-6..2^2) extended downwards: with it alone most folds chose
    # its smallest gamma and C (measured), i.e. the optimum lay outside
    ap.add_argument("--kernel-gamma", type=float_list, default=[2.0 ** -9, 2.0 ** -7, 2.0 ** -5, 2.0 ** -3])
    ap.add_argument("--kernel-C", type=float_list, default=[2.0 ** k for k in range(-12, 3, 2)])
    ap.add_argument("--exact-gamma", type=float_list, default=[2.0 ** -9, 2.0 ** -7, 2.0 ** -5])
    ap.add_argument("--exact-C", type=float_list, default=[2.0 ** k for k in range(-8, 3, 2)])
    ap.add_argument("--no-exact", action="store_true", help="table without the exact kernel column")
    ap.add_argument("--lgbm-leaves", type=lambda s: [int(x) for x in s.split(",")], default=[7, 15, 31])
    ap.add_argument("--lgbm-lr", type=float_list, default=[0.01, 0.02, 0.05, 0.1])
    ap.add_argument("--lgbm-min-child", type=lambda s: [int(x) for x in s.split(",")], default=[20, 50])
    ap.add_argument("--lgbm-max-trees", type=int, default=1000)
    ap.add_argument("--lgbm-patience", type=int, default=50)
    ap.add_argument("--timeout", type=float, default=7200, help="seconds allowed for one child run")
    ap.add_argument("--json", action="store_true", help="print all results as one JSON line at the end")
    args = ap.parse_args()
    if not (args.fold1 or args.solvers or args.mq2007 or args.out_of_core or args.mq2008_table):
        args.fold1 = args.solvers = args.mq2007 = args.mq2008_table = True
    args.work = Path(args.workdir)
    args.work.mkdir(parents=True, exist_ok=True)
    args.warm = generated(args.work, "small", 1.0)
    out = {}
    if args.fold1:
        out["fold1"] = section_fold1(args)
    if args.solvers:
        out["solvers"] = section_solvers(args)
    if args.mq2007:
        out["mq2007"] = section_mq2007(args)
    if args.out_of_core:
        out["out_of_core"] = section_out_of_core(args)
    if args.mq2008_table:
        out["mq2008_table"] = section_table(args)
    if args.json:
        print(json.dumps(out, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


if __name__ == "__main__":
    main()
