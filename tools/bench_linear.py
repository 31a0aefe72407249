"""Linear RankSVM training: accuracy against a dense solver, speed and memory against LIBLINEAR's
ranksvm extension, and the MQ2008 results table.

    python tools/bench_linear.py                    # all three sections
    python tools/bench_linear.py --fold1-oracle     # MQ2008 Fold1, C=1, eps=1e-8: objective vs the
                                                    #   explicit-pair dense solver; w, one query per block vs whole file
    python tools/bench_linear.py --speed            # MQ2008 Fold1 and mslr30k at scale 0.5, eps 1e-3 and 1e-6,
                                                    #   memory budget above and below the size of X
    python tools/bench_linear.py --speed --scale 0.1    # a quick look
    python tools/bench_linear.py --mq2008-table     # 5 folds, C chosen on vali, letor4 metrics on test

MQ2008 is read from ``../shared/data/MQ2008`` beside the repository (``--data``); sections that need it
are skipped with a message when it is absent. Converted and generated HDF5 files are kept under
``--workdir`` (default bench-out/) and reused. Every timed training run happens in a fresh process,
so "peak RSS" is that process's own maximum resident set (VmHWM), interpreter and libraries included;
the "floor" is the peak of a process that only loads streamrank and its compiled kernels (by training
on a tiny generated set, as every timed child does before its clock starts).
Solver seconds are the time inside ``train_linear`` (labels, the first pass that reads the HDF5 file,
TRON), after the numba kernels are loaded; conversion and generation are not included. With the
budget above X the rows are read into memory once, during the first pass; that reading (its own
column) is what the reference's parsing is, so the verdict compares the time after it.
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import REPO, machine_facts, run_child, args_params, table, table_record  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared"
DEFAULT_DATA = SHARED / "data" / "MQ2008"
ORACLE = REPO / "tests" / "dense_oracle.py"

# LIBLINEAR ranksvm extension (C++, in memory, TRON with order-statistic trees), measured separately
# on a 1M x 136 set with C=1, eps=1e-3: solver seconds after parsing, and its resident memory.
REF_SOLVER_S = 1.5
REF_PARSE_S = 20.0
REF_RSS_GB = 2.3
TARGET_ABOVE = 1.5   # solver time within this factor of the reference, budget above X
TARGET_BELOW = 3.0   # ... budget below X (and peak RSS under the budget)

# Load every numba kernel training uses (from the on-disk cache, or compile it there) by training on
# a tiny generated set, in memory and streamed, before anything is timed.
WARM = """
import time, warnings
_t = time.perf_counter()
import streamrank
getattr(streamrank, "configure", lambda: None)()  # the command line's process settings
from streamrank.training.linear import train_linear
with streamrank.open_dataset({warm!r}) as _ds, warnings.catch_warnings():
    warnings.simplefilter("ignore")
    train_linear(_ds, C=[1.0], tol=1e-2)
    train_linear(_ds, C=[1.0], tol=1e-2, memory_budget="100KB")
warm_s = time.perf_counter() - _t
"""

FLOOR = WARM + """
import json
print(json.dumps({{"warm_s": warm_s}}))
"""

# seconds per GiB to touch freshly allocated memory (page faults), the first time and again
TOUCH = """
import json, time
import numpy as np
ts = []
for _ in range(2):
    t = time.perf_counter()
    a = np.ones(1 << 27)
    ts.append(time.perf_counter() - t)
    del a
print(json.dumps({"first": ts[0], "again": ts[1]}))
"""

TRAIN = WARM + """
import json, resource, time
import streamrank
getattr(streamrank, "configure", lambda: None)()  # the command line's process settings
from streamrank.training.linear import train_linear

with streamrank.open_dataset({path!r}) as ds:
    r0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    model, s = train_linear(ds, C=[{C!r}], tol={eps!r}, memory_budget={budget!r})
    dt, r1 = time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF)
c = s["candidates"][-1]
print(json.dumps({{"train_s": dt, "cpu_s": (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime),
                  "sys_s": r1.ru_stime - r0.ru_stime, "tron_s": c["seconds"], "iterations": c["iterations"], "cg": c["cg_steps"],
                  "passes": s["passes"], "objective": s["objective"], "grad_norm": s["grad_norm"],
                  "in_memory": s["in_memory"], "message": c["message"], "warm_s": warm_s,
                  "read_s": s["read_seconds"]}}))
"""

# Where one pass goes: reading, float64 copies, BLAS products, pair kernels; from memory and from disk.
BREAKDOWN = WARM + """
import json, resource, time
import numpy as np
import streamrank
getattr(streamrank, "configure", lambda: None)()  # the command line's process settings
from streamrank._native import pairkernels as pk
from streamrank.objectives.rank_objective import BlockSource, RankObjective
from streamrank.training.problem import read_labels, pair_cost_table
from streamrank.units import parse_size
from streamrank.io.query_stream import BLOCK_SHARE_OF_BUDGET

def best(f, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts)

R = {{}}
with streamrank.open_dataset({path!r}) as ds:
    d = ds.n_features
    block_bytes = int(parse_size({budget!r}) * BLOCK_SHARE_OF_BUDGET)
    y = read_labels(ds)
    levels = np.unique(y)
    cost = pk.pair_cost(pair_cost_table(None, levels))
    mu = np.ones(ds.n_queries)
    reps = {reps}
    # first, while the process is fresh: the pass that reads and keeps every block (float32)
    src = BlockSource(ds, None, block_bytes=block_bytes, memory_bytes=1 << 62, levels=levels)
    mem = RankObjective(src, d, C=1.0, cost=cost, mu=mu)
    r0, t = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    mem.fun(np.zeros(d))
    r1, R["memory_first"] = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t
    R["memory_first_sys"] = r1.ru_stime - r0.ru_stime
    blocks = list(src._cache)
    # a realistic point: pointwise least squares
    XtX = np.zeros((d, d)); Xty = np.zeros(d)
    for b in blocks:
        Xd = b.X.astype(np.float64)
        XtX += Xd.T @ Xd; Xty += Xd.T @ levels[b.rank]
    w = np.linalg.solve(XtX + 1e-3 * np.eye(d), Xty)
    s = np.random.default_rng(0).standard_normal(d)

    stream = ds.stream(block_bytes=block_bytes)
    def read_pass():
        for b, _, _ in stream:
            pass
    R["read"] = best(read_pass, 3)
    R["n_blocks"] = len(stream)
    disk = RankObjective(BlockSource(ds, None, block_bytes=block_bytes, memory_bytes=0, levels=levels), d,
                         C=1.0, cost=cost, mu=mu)
    for where, obj in (("disk", disk), ("memory", mem)):
        obj.fun(w)
        obj.grad(w)
        R[where + "_fun"] = best(lambda: obj.fun(w), reps)
        obj.grad(w)
        R[where + "_hessp"] = best(lambda: obj.hessp(s), reps)
    # the pieces of a pass from memory: numpy's float32 BLAS products (a lower bound for reading
    # the rows twice) and the pair kernels alone
    w32 = w.astype(np.float32)
    def mv():
        for b in blocks:
            b.X @ w32
    dzs = [np.ones(b.X.shape[0], np.float32) for b in blocks]
    def rmv():
        for b, dz in zip(blocks, dzs):
            b.X.T @ dz
    zs = [b.X.astype(np.float64) @ w for b in blocks]
    states = []
    def lg():
        states.clear()
        for b, z in zip(blocks, zs):
            states.append(pk.loss_grad(z, b.rank, b.qptr, cost, mu[b.q0:b.q1])[2])
    def hp():
        for b, z, st in zip(blocks, zs, states):
            pk.hess_prod(z, b.rank, b.qptr, cost, mu[b.q0:b.q1], st)
    R["Xw"] = best(mv, reps)
    R["XTv"] = best(rmv, reps)
    R["loss_grad"] = best(lg, reps)
    R["hess_prod"] = best(hp, reps)
print(json.dumps(R))
"""


# --------------------------------------------------------------------------------------------------
def fmt_bytes(n):
    from streamrank.units import format_size
    return format_size(n)


def mq2008_files(data, fold):
    d = Path(data) / f"Fold{fold}"
    return {part: d / f"{part}.txt.gz" for part in ("train", "vali", "test")}


def have_mq2008(data, folds=(1,)):
    missing = [p for f in folds for p in mq2008_files(data, f).values() if not p.exists()]
    if missing:
        print(f"MQ2008 not found ({missing[0]} is missing): section skipped. Pass --data DIR "
              f"(the folder holding Fold1..Fold5).")
        return False
    return True


def converted(work, data, fold, part):
    """The HDF5 conversion of MQ2008 FoldK/part.txt.gz under work/ (made once, then reused)."""
    from streamrank.io.convert import convert
    src = mq2008_files(data, fold)[part]
    out = Path(work) / "mq2008" / f"Fold{fold}" / f"{part}.h5"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        # train, vali and test must have the same width; MQ2008 has 46 features
        convert([src], out, quiet=True, n_features=46)
    return out


def generated(work, preset, scale):
    from streamrank.synthetic import write_hdf5
    out = Path(work) / f"{preset}-s{scale:g}.h5"
    if not out.exists():
        print(f"generating {out} (preset {preset}, scale {scale:g}, seed 0) ...", flush=True)
        t = time.perf_counter()
        write_hdf5(out, preset=preset, scale=scale, seed=0)
        print(f"  {time.perf_counter() - t:.1f} s", flush=True)
    return out


def shape_of(path):
    import streamrank
    streamrank.configure()  # the command line's process settings
    with streamrank.open_dataset(path) as ds:
        return ds.n_rows, ds.n_features, ds.n_queries


def rel(a, b):
    import numpy as np
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


# --------------------------------------------------------------------------------------------------
def section_oracle(args):
    print("\n== MQ2008 Fold1 train, C=1, eps=%g: streamrank vs the explicit-pair dense solver ==" % args.oracle_eps)
    print(machine_facts())
    if not have_mq2008(args.data):
        return None
    import importlib.util
    import warnings

    import numpy as np

    import streamrank
    streamrank.configure()  # the command line's process settings
    from streamrank.training.linear import train_linear
    spec = importlib.util.spec_from_file_location("dense_oracle", ORACLE)
    oracle = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(oracle)

    path = converted(args.work, args.data, 1, "train")
    rows = []
    with streamrank.open_dataset(path) as ds:
        X, y = ds.read(0, ds.n_rows)
        qp = ds.query_ptr
        t = time.perf_counter()
        dense = oracle.DenseRankSVM(X, y, qp, C=1.0)
        w_dense = dense.solve()
        t_dense = time.perf_counter() - t
        f_dense = dense.fun(w_dense)
        n_pairs = dense.A.shape[0]
        g_dense = float(np.linalg.norm(dense.grad(w_dense)))
        rows.append({"run": "dense oracle (explicit pairs, scipy, Newton)", "blocks": 1, "f": f_dense,
                     "gnorm": g_dense, "s": t_dense})
        runs = {}
        for name, bb in (("whole file", None), ("one query per block", 1)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # every query is "larger than the block budget" on purpose
                n_blocks = len(ds.stream(block_bytes=bb) if bb else ds.stream())  # default: 2GB budget
                t = time.perf_counter()
                model, s = train_linear(ds, C=[1.0], tol=args.oracle_eps, block_bytes=bb)
                dt = time.perf_counter() - t
            c = s["candidates"][-1]
            runs[name] = model.w
            # the objective evaluated by the dense solver at streamrank's w: same function, other code
            rows.append({"run": f"streamrank, {name}", "blocks": n_blocks, "f": s["objective"],
                         "f_dense_at_w": dense.fun(model.w), "gnorm": s["grad_norm"], "iter": c["iterations"],
                         "cg": c["cg_steps"], "passes": s["passes"], "s": dt,
                         "rel_f": abs(s["objective"] - f_dense) / abs(f_dense), "rel_w": rel(model.w, w_dense)})
    print(f"{ds.n_rows:,} rows, {ds.n_features} features, {ds.n_queries} queries, {n_pairs:,} preference pairs")
    table_record("linear", "oracle",
        rows, [("run", "run", None), ("blocks", "blocks", "{:,}"), ("f", "objective", "{:.10e}"),
                 ("f_dense_at_w", "dense f(w)", "{:.10e}"), ("gnorm", "|grad|", "{:.2e}"), ("iter", "iter", None),
                 ("cg", "CG", None), ("passes", "passes", None), ("s", "seconds", "{:.2f}"),
                 ("rel_f", "rel. diff f", "{:.2e}"), ("rel_w", "rel. diff w vs dense", "{:.2e}")], params=args_params(args))
    dw = rel(runs["one query per block"], runs["whole file"])
    df = abs(rows[2]["f"] - rows[1]["f"]) / abs(rows[1]["f"])
    print(f"objective, streamrank (whole file) vs dense: {rows[1]['rel_f']:.2e} relative (criterion 1e-6: "
          f"{'met' if rows[1]['rel_f'] <= 1e-6 else 'NOT met'})")
    print(f"w, one query per block vs whole file: {dw:.2e} relative (criterion 1e-6: "
          f"{'met' if dw <= 1e-6 else 'NOT met'}); objective {df:.2e} relative")
    print(f"(f is 1-strongly convex, so ||w - w*|| <= ||grad f(w)|| = {rows[1]['gnorm']:.1e}: a guaranteed "
          f"{rows[1]['gnorm'] / np.linalg.norm(w_dense):.1e} relative to ||w*|| = {np.linalg.norm(w_dense):.3g}; "
          f"measured against the dense solution: {rows[1]['rel_w']:.1e})")
    return {"rows": rows, "rel_w_blocks": dw}


# --------------------------------------------------------------------------------------------------
def section_speed(args):
    print(f"\n== Speed and memory: C=1, eps in {args.eps}, memory budget above and below the size of X ==")
    print(machine_facts())
    sets = []
    if have_mq2008(args.data):
        sets.append(("MQ2008 Fold1 train", converted(args.work, args.data, 1, "train")))
    sets.append((f"{args.preset} scale {args.scale:g}", generated(args.work, args.preset, args.scale)))
    from streamrank.units import parse_size
    warm = str(generated(args.work, "small", 1.0))
    floor = run_child(FLOOR.format(warm=warm))   # fills the numba cache on a first run; then the floor itself
    floor = run_child(FLOOR.format(warm=warm))
    touch = run_child(TOUCH)
    print(f"RSS floor (python, numpy, h5py, numba kernels loaded by a tiny training run): {floor['peak_rss_mb']:,.0f} MB; "
          f"kernel load {floor['warm_s']:.2f} s (done before timing)")
    print(f"fresh memory in a new process: {touch['first']:.2f} s per GiB to touch (page faults), "
          f"{touch['again']:.2f} s per GiB for a second allocation")
    rows, breakdown = [], []
    for name, path in sets:
        n, d, nq = shape_of(path)
        xbytes = n * d * 4
        above = parse_size(args.budget_above)
        below = parse_size(args.budget_below) if args.budget_below else max(xbytes // 2, 1)
        print(f"{name}: {n:,} rows x {d} features, {nq:,} queries; X (float32) = {fmt_bytes(xbytes)}, "
              f"float64 = {fmt_bytes(2 * xbytes)}; budgets: above {fmt_bytes(above)}, below {fmt_bytes(below)}",
              flush=True)
        for bname, budget in (("above X", above), ("below X", below)):
            for eps in args.eps:
                r = run_child(TRAIN.format(warm=warm, path=str(path), C=1.0, eps=eps, budget=budget), timeout=args.timeout)
                r.update(data=name, eps=eps, budget=f"{bname}: {fmt_bytes(budget)}", budget_b=budget,
                         over_floor=r["peak_rss_mb"] - floor["peak_rss_mb"],
                         rss_ok="yes" if r["peak_rss_mb"] * 1e6 <= budget else "no",
                         per_pass=r["train_s"] / max(r["passes"], 1), after_read=r["train_s"] - r["read_s"])
                rows.append(r)
                print(f"  {bname} eps={eps:g}: {r['train_s']:.2f} s, {r['iterations']} iterations, "
                      f"{r['passes']} passes, peak RSS {r['peak_rss_mb']:,.0f} MB", flush=True)
        if not args.no_breakdown:
            for bname, budget in (("above X", above), ("below X", below)):
                b = run_child(BREAKDOWN.format(warm=warm, path=str(path), budget=budget, reps=3), timeout=args.timeout)
                b.update(data=name, budget=f"{bname}: {fmt_bytes(budget)}")
                breakdown.append(b)
    print()
    table_record("linear", "speed", rows, [("data", "data", None), ("budget", "budget", None), ("eps", "eps", "{:g}"),
                 ("train_s", "solver s", "{:.2f}"), ("read_s", "reading s", "{:.2f}"),
                 ("after_read", "s - reading", "{:.2f}"), ("cpu_s", "CPU s", "{:.2f}"), ("sys_s", "sys s", "{:.2f}"),
                 ("iterations", "TRON iter", None), ("cg", "CG steps", None),
                 ("passes", "passes", None), ("per_pass", "s/pass", "{:.3f}"), ("objective", "objective", "{:.8e}"),
                 ("in_memory", "in memory", None), ("peak_rss_mb", "peak RSS MB", "{:,.0f}"),
                 ("over_floor", "- floor", "{:,.0f}"),
                 ("rss_ok", "RSS < budget", None)], params=args_params(args))
    print("solver s = wall time inside train_linear (labels, first read of the HDF5 file, TRON); reading s = "
          "its time inside the block stream (HDF5 reads, decoding, label ranks, the in-memory copy of X and its "
          "page faults): LIBLINEAR's parsing, which its 1.5 s excludes; CPU s = its "
          "user+system time over all threads, sys s = the system part (mostly page faults of fresh memory); kernels loaded beforehand; conversion / generation excluded. passes = full passes over the data "
          "(fun+grad = 1, Hessian product = 1).")
    if breakdown:
        print("\nWhere one pass goes (seconds per full pass, best of 3):")
        table_record("linear", "speed breakdown",
            breakdown, [("data", "data", None), ("budget", "budget", None), ("n_blocks", "blocks", None),
                          ("read", "read f32", "{:.3f}"),
                          ("memory_first", "1st pass", "{:.3f}"), ("memory_first_sys", "(sys)", "{:.3f}"), ("disk_fun", "fun disk", "{:.3f}"), ("disk_hessp", "hessp disk", "{:.3f}"),
                          ("memory_fun", "fun mem", "{:.3f}"), ("memory_hessp", "hessp mem", "{:.3f}"),
                          ("Xw", "f32 BLAS X@w", "{:.3f}"), ("XTv", "f32 BLAS X.T@v", "{:.3f}"),
                          ("loss_grad", "loss_grad", "{:.3f}"), ("hess_prod", "hess_prod", "{:.3f}")], params=args_params(args))
        print("read f32 = QueryStream pass (HDF5 in the page cache); 1st pass = the first fun(w) of a fresh "
              "process that keeps every block (float32) in memory (reads, copies, allocates), (sys) its system "
              "time; fun/hessp disk = streamed objective re-reading every block; mem = all blocks kept in memory "
              "(whatever the budget); both are fused passes reading each row once (streamrank._native.fused); "
              "f32 BLAS X@w, X.T@v = numpy's float32 products over the blocks in memory, for reference; "
              "loss_grad, hess_prod = the numba pair kernels of one pass alone.")
    print(f"\nReference: LIBLINEAR ranksvm extension (C++, in memory, TRON with order-statistic trees), measured "
          f"separately on a 1M x 136 set, C=1, eps=1e-3: {REF_SOLVER_S} s solver after {REF_PARSE_S:.0f} s "
          f"parsing, {REF_RSS_GB} GB resident.")
    print(f"Targets (eps=1e-3): solver within {TARGET_ABOVE}x ({TARGET_ABOVE * REF_SOLVER_S:.2f} s) with the "
          f"budget above X; within {TARGET_BELOW}x ({TARGET_BELOW * REF_SOLVER_S:.2f} s) with the budget below X "
          f"and peak RSS under the budget.")
    for r in rows:
        if r["eps"] == 1e-3 and r["data"].startswith(args.preset):
            is_above = r["budget"].startswith("above")
            lim = TARGET_ABOVE if is_above else TARGET_BELOW
            # above X the rows are read once into memory, as LIBLINEAR parses them before its clock
            # starts: compare the solve after that read; below X every pass reads, so compare all
            t = r["after_read"] if is_above else r["train_s"]
            ratio = t / REF_SOLVER_S
            verdict = "met" if ratio <= lim else f"NOT met, {ratio / lim:.1f}x over"
            line = (f"  {r['data']}, {r['budget']}: {t:.2f} s = {ratio:.1f}x the reference "
                    f"(target {lim}x: {verdict})")
            if is_above:
                line += (f" after reading the rows into memory in {r['read_s']:.2f} s ({r['train_s']:.2f} s "
                         f"in all = {r['train_s'] / REF_SOLVER_S:.1f}x)")
            if not is_above:
                line += (f"; peak RSS {r['peak_rss_mb']:,.0f} MB vs budget {fmt_bytes(r['budget_b'])} "
                         f"({'met' if r['rss_ok'] == 'yes' else 'NOT met'}; {r['over_floor']:,.0f} MB above the "
                         f"{floor['peak_rss_mb']:,.0f} MB floor)")
            else:
                line += f"; peak RSS {r['peak_rss_mb']:,.0f} MB (reference {REF_RSS_GB} GB)"
            print(line)
    print(f"(the generated set has {shape_of(sets[-1][1])[0] / 1e6:.3g}M rows, the reference's 1M; numbers are not "
          f"rescaled)")
    print("note: timings are wall-clock on a machine that may be shared; rerun when it is quiet")
    return {"runs": rows, "breakdown": breakdown, "floor_mb": floor["peak_rss_mb"]}


# --------------------------------------------------------------------------------------------------
def section_table(args):
    print(f"\n== MQ2008, 5 folds: C chosen on vali by MeanNDCG among {', '.join(map(fmt_c, args.C_grid))}; "
          f"letor4 metrics on test ==")
    print(machine_facts())
    folds = (1, 2, 3, 4, 5)
    if not have_mq2008(args.data, folds):
        return None
    import numpy as np

    import streamrank
    streamrank.configure()  # the command line's process settings
    from streamrank.evaluation.metrics import evaluate
    from streamrank.training.linear import train_linear
    from streamrank.training.problem import read_labels
    rows = []
    for k in folds:
        paths = {p: converted(args.work, args.data, k, p) for p in ("train", "vali", "test")}
        with streamrank.open_dataset(paths["train"]) as ds, streamrank.open_dataset(paths["vali"]) as vds, \
                streamrank.open_dataset(paths["test"]) as tds:
            t = time.perf_counter()
            model, s = train_linear(ds, valid=vds, C=args.C_grid, tol=args.tol, select_metric="meanndcg")
            dt = time.perf_counter() - t
            scores = model.predict_dataset(tds)          # input row order
            y = read_labels(tds)
            rep = evaluate(y, scores[tds.row], tds.query_ptr, convention="letor4", qid=tds.query_ids)
        m = rep.means
        best = next(c for c in s["candidates"] if c["C"] == s["C"])
        rows.append({"fold": f"Fold{k}", "C": fmt_c(s["C"]), "valid": best["valid_meanndcg"], "n1": m["NDCG@1"],
                     "n3": m["NDCG@3"], "n5": m["NDCG@5"], "n10": m["NDCG@10"], "mean": m["MeanNDCG"],
                     "map": m["MAP"], "s": dt})
    mean = {"fold": "mean"}
    for key in ("n1", "n3", "n5", "n10", "mean", "map"):
        mean[key] = float(np.mean([r[key] for r in rows]))
    rows.append(mean)
    table_record("linear", "table",
        rows, [("fold", "fold", None), ("C", "chosen C", None), ("valid", "vali MeanNDCG", "{:.4f}"),
                 ("n1", "NDCG@1", "{:.4f}"), ("n3", "NDCG@3", "{:.4f}"), ("n5", "NDCG@5", "{:.4f}"),
                 ("n10", "NDCG@10", "{:.4f}"), ("mean", "MeanNDCG", "{:.4f}"), ("map", "MAP", "{:.4f}"),
                 ("s", "train s", "{:.1f}")], params=args_params(args))
    cmd = ["python tools/bench_linear.py --mq2008-table"]
    if Path(args.data).resolve() != DEFAULT_DATA.resolve():
        cmd.append(f"--data {args.data}")
    cmd.append("--C-grid " + ",".join(map(fmt_c, args.C_grid)))
    cmd.append(f"--tol {args.tol:g}")
    print("linear RankSVM (squared hinge, TRON), normalize none (MQ2008 is QueryLevelNorm already), "
          f"tol {args.tol:g}; metrics: letor4 convention (Eval-Score-4.0.pl), means over all test queries")
    print("produced by: " + " ".join(cmd))
    grid = ",".join(repr(float(c)) for c in args.C_grid)
    print("per fold, the same with the command line tool:\n"
          f"  streamrank train FoldK/train.txt.gz --valid FoldK/vali.txt.gz --C {grid} --select-metric meanndcg "
          f"--tol {args.tol:g} -o model.h5\n"
          "  streamrank predict model.h5 FoldK/test.txt.gz -o scores.txt\n"
          "  streamrank eval FoldK/test.txt.gz scores.txt --convention letor4")
    return {"folds": rows}


# --------------------------------------------------------------------------------------------------
def fmt_c(c):
    """2^k for a power of two (exact), else the shortest exact decimal."""
    m, e = math.frexp(c)
    return f"2^{e - 1}" if m == 0.5 else repr(float(c))


def float_list(text):
    out = []
    for tok in text.split(","):
        tok = tok.strip()
        if "^" in tok:
            b, e = tok.split("^")
            out.append(float(b) ** float(e))
        else:
            out.append(float(tok))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fold1-oracle", action="store_true", help="objective vs the dense solver; block invariance")
    ap.add_argument("--speed", action="store_true", help="time, passes and peak RSS vs the LIBLINEAR reference")
    ap.add_argument("--mq2008-table", action="store_true", help="5-fold MQ2008 results table")
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="folder with MQ2008 Fold1..Fold5")
    ap.add_argument("--workdir", default="bench-out")
    ap.add_argument("--preset", default="mslr30k")
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--eps", type=float_list, default=[1e-3, 1e-6], help="comma-separated tolerances")
    ap.add_argument("--budget-above", default="4GB", help="memory budget above the size of X")
    ap.add_argument("--budget-below", default=None, help="memory budget below the size of X (default: half of "
                                                         "X's float32 bytes)")
    ap.add_argument("--no-breakdown", action="store_true", help="skip the per-pass breakdown")
    ap.add_argument("--oracle-eps", type=float, default=1e-8)
    ap.add_argument("--C-grid", type=float_list, default=[2.0 ** k for k in range(-16, 5, 2)],
                    help="C values for the MQ2008 table, e.g. 2^-16,2^-14,0.5 (default 2^-16,2^-14,...,2^4: "
                         "the MQ2008 folds choose 2^-14..2^-10)")
    ap.add_argument("--tol", type=float, default=1e-3, help="tolerance for the MQ2008 table")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds allowed for one child run")
    ap.add_argument("--json", action="store_true", help="print all results as one JSON line at the end")
    args = ap.parse_args()
    if not (args.fold1_oracle or args.speed or args.mq2008_table):
        args.fold1_oracle = args.speed = args.mq2008_table = True
    args.work = Path(args.workdir)
    args.work.mkdir(parents=True, exist_ok=True)
    out = {}
    if args.fold1_oracle:
        out["fold1_oracle"] = section_oracle(args)
    if args.speed:
        out["speed"] = section_speed(args)
    if args.mq2008_table:
        out["mq2008_table"] = section_table(args)
    if args.json:
        print(json.dumps(out, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


if __name__ == "__main__":
    main()
