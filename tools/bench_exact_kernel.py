"""Exact kernel RankSVM (paper 004): MQ2008 Fold1 against libsvm-ranksvm, the dense optimum, the
preconditioner's CG steps, and the generated mq2007 set out of core.

    python tools/bench_exact_kernel.py --fold1       # rbf 2^-5, C=1, eps=1e-3: build, solver, TRON,
                                                     #   passes, objective, peak RSS, letor4 test metrics
    python tools/bench_exact_kernel.py --precond     # CG steps to reach the same objectives, with and
                                                     #   without the Nystroem preconditioner
    python tools/bench_exact_kernel.py --oracle      # all of Fold1 solved tight vs a dense in-memory
                                                     #   generalised Newton on the same Q' (1e-6 rel)
    python tools/bench_exact_kernel.py --mq2007      # generated mq2007 (seed 0, 42,158 rows, Q = 7.1 GB),
                                                     #   --memory-budget 2GB, Q on disk under --workdir; the
                                                     #   time split per TRON iteration (Q passes, preconditioner
                                                     #   updates, CG's M^-1 r) and the median pass against the
                                                     #   Q-pass floor (disk rate, memory bandwidth: bench_limits)
    python tools/bench_exact_kernel.py --clustered   # generated clustered rows (a 1,000-document query
                                                     #   with 700 near-duplicates, raw scales): TRON with
                                                     #   plain CG, M's diagonal as one mean, per row
    python tools/bench_exact_kernel.py --cv          # `streamrank cv MQ2008 --method exact`, its default
                                                     #   grid, five folds (--cv-folds N: the first N): wall,
                                                     #   CPU, peak RSS, page faults, each fold's choice and
                                                     #   test NDCG@10, and every candidate's TRON iterations,
                                                     #   CG steps and solver seconds

Every timed run is a fresh process (peak RSS = its VmHWM) that first loads the numba kernels by
training on a tiny generated set (not timed). "total" is the time inside ``train_exact``: reading
the rows, building Q (and the preconditioner), TRON. MQ2008 is read from ../shared/data/MQ2008.
"""

import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import REPO, args_params, machine_facts, run_child, table_record  # noqa: E402
from bench_linear import DEFAULT_DATA, converted, have_mq2008  # noqa: E402

# libsvm-ranksvm (C++, OpenMP, whole Q cached in 740 MB), measured separately on this machine
# (the issue's figures); "objective": the primal objective of the model it ends with at eps = 1e-3,
# computed in float64 from its model file, for a build of its source (libsvm-ranksvm-3.20) run
# separately here with the whole of Q cached: the lowest of three runs (27961.6, 27982.9 and
# 28097.1: OpenMP sums change the path)
REF = {"seconds": 46.0, "iterations": 22, "cg": 360, "objective": 27961.6}
GAMMA, C, EPS = 2.0 ** -5, 1.0, 1e-3

WARM = """
import time, warnings, tempfile, pathlib
import numpy as np
import streamrank
getattr(streamrank, "configure", lambda: None)()  # the command line's process settings
from streamrank.synthetic import write_hdf5
from streamrank.training.exact import train_exact
_d = pathlib.Path(tempfile.mkdtemp())
write_hdf5(_d / "w.h5", "small", seed=0, scale=0.1)
with streamrank.open_dataset(_d / "w.h5") as _ds, warnings.catch_warnings():
    warnings.simplefilter("ignore")
    train_exact(_ds, C=1.0, tol=1e-2, landmarks=50)
    train_exact(_ds, C=1.0, tol=1e-2, landmarks=50, memory_budget="4MB", cache_dir=_d)
"""

TRAIN = WARM + """
import json, resource
P = json.loads({params!r})
with streamrank.open_dataset(P["train"]) as ds:
    t = time.perf_counter()
    model, s = train_exact(ds, **P["kw"])
    total = time.perf_counter() - t
R = {{k: v for k, v in s.items() if k != "candidates"}}
R.update(total_s=total, tron_s=s["candidates"][-1]["seconds"], message=s["candidates"][-1]["message"])
R["hwm_train_mb"] = int([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]) * 1024 / 1e6
if P.get("test"):
    from tools._benchutil import test_metrics
    R["predict_s"], R["test"] = test_metrics(model, P["test"])
print(json.dumps(R))
"""

# TRAIN with the time of every Q pass, preconditioner update (at_point) and CG step's use of M
# (solve, mdot) taken around the library's own calls (no change to them), and iteration bounds
# from grad (called once per accepted point): the per-iteration split of --mq2007
TRAIN_SPLIT = WARM + """
import json, threading
from streamrank.cache.kernel_cache import KernelCache
from streamrank.objectives import kernel_objective as ko, kernel_precond as kp
P = json.loads({params!r})
EV, CACHE = [], []

def timed(owner, name, kind):
    f = getattr(owner, name)
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            EV.append((kind, t, time.perf_counter() - t))
    setattr(owner, name, g)

timed(ko.KernelObjective, "_run", "pass")
timed(ko.KernelObjective, "preconditioner", "precond")
timed(kp._DiagLowRank, "solve", "cg_m")
timed(kp._DiagLowRank, "mdot", "cg_m")
timed(ko.KernelObjective, "grad", "grad")
_build = KernelCache.build
def build(self):
    CACHE.append(self)
    return _build(self)
KernelCache.build = build
EV.clear()
with streamrank.open_dataset(P["train"]) as ds:
    t0 = time.perf_counter()
    model, s = train_exact(ds, **P["kw"])
    t_end = time.perf_counter()
R = {{k: v for k, v in s.items() if k != "candidates"}}
R.update(total_s=t_end - t0, tron_s=s["candidates"][-1]["seconds"], message=s["candidates"][-1]["message"])
c = CACHE[-1]
R.update(q_bytes=4 * c.l * c.l, q_memory_bytes=int(c.memory_nbytes))
# iterations: from one accepted point's grad to the next; the last "iteration" is the final gap's update
marks = [t for kind, t, _ in EV if kind == "grad"] + [t_end]
its = []
for i in range(len(marks) - 1):
    a, b = marks[i], marks[i + 1]
    ev = [(kind, d) for kind, t, d in EV if a <= t < b and kind != "grad"]
    passes = [d for kind, d in ev if kind == "pass"]
    row = {{"iteration": i + 1 if i + 2 < len(marks) else "end", "seconds": b - a, "passes": len(passes),
           "pass_s": sum(passes), "precond_s": sum(d for kind, d in ev if kind == "precond"),
           "cg_m_s": sum(d for kind, d in ev if kind == "cg_m")}}
    row["other_s"] = row["seconds"] - row["pass_s"] - row["precond_s"] - row["cg_m_s"]
    its.append(row)
R["split"] = its
P_all = sorted(d for kind, _, d in EV if kind == "pass")
R["pass_median_s"] = P_all[len(P_all) // 2] if P_all else None
R["hwm_train_mb"] = int([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]) * 1024 / 1e6
print(json.dumps(R))
"""

# Fold1's rows, labels, costs and Q (all in memory) for the low-level runs below
SETUP = WARM + """
import json, scipy.linalg
from streamrank._native import pairkernels as pk
from streamrank.cache.kernel_cache import KernelCache, read_rows
from streamrank.objectives.kernel_objective import KernelObjective
from streamrank.objectives.kernel_precond import NystroemPreconditioner, auto_landmarks
from streamrank.features.normalize import Normalizer
from streamrank.solvers.tron import tron
P = json.loads({params!r})
with streamrank.open_dataset(P["train"]) as ds:
    Xn, y, qp = read_rows(ds, Normalizer("none"), (0, ds.n_queries), 1 << 26)
    levels = np.unique(y)
    rank = np.searchsorted(levels, y).astype(np.int32)
    cost = pk.pair_cost(np.ones((len(levels),) * 2))
    mu = np.ones(len(qp) - 1)
    kc = KernelCache(Xn, qp, kernel="rbf", gamma=P["gamma"], key_material={{"dataset": ds.fingerprint}},
                     block_bytes=64 << 20, memory_bytes=1 << 40)
    kc.build()
"""

# TRON's trajectory with and without the preconditioner: CG steps until f first reaches a target
PRECOND = SETUP + """
    R = {{"jitter": kc.jitter, "runs": []}}
    for setting in P["settings"]:
        obj = KernelObjective(kc, rank, C=P["C"], cost=cost, mu=mu)
        t = time.perf_counter()
        m = setting["landmarks"]
        if m:
            obj.set_preconditioner(NystroemPreconditioner(Xn, kernel="rbf", gamma=P["gamma"], landmarks=m,
                                                          select=setting["select"], loss_term=setting["loss_term"],
                                                          ridge=kc.jitter))
        tp = time.perf_counter() - t
        st = tron(obj, np.zeros(len(y)), eps=P["eps"], max_iter=P["max_iter"], precondition=bool(m))
        cg, traj = 0, []
        for it, f, gn, steps, acc in st.history:
            cg += steps
            traj.append((cg, f))
        R["runs"].append({{**setting, "precond_s": tp, "seconds": time.perf_counter() - t, "f": st.f,
                          "iterations": st.iteration, "cg": st.n_cg, "message": st.message, "traj": traj,
                          "eps1e-3_cg": next((int(c) for c, (i, f, gn, s_, a) in zip(np.cumsum([h[3] for h in st.history]),
                                               st.history) if gn <= 1e-3 * st.gnorm0 and a), None)}})
        print(json.dumps(R["runs"][-1]), file=__import__("sys").stderr, flush=True)
print(json.dumps(R))
"""

# All of Fold1 to a tight tolerance, then the dense in-memory generalised Newton on the same Q'
# (float32(K) + jitter I as a float64 array): d = -(I + C L Q')^-1 (beta + C dz) solves H d = -g for
# H = Q'(I + C L Q'), with L Q' from the pair sweep with an l-wide payload, an LU solve, and
# backtracking on f. It starts from streamrank's beta (any start reaches the same minimum; this one
# needs a few steps of 6e11 flops each, not tens) and stops when f no longer moves in float64.
ORACLE = SETUP + """
    obj = KernelObjective(kc, rank, C=P["C"], cost=cost, mu=mu)
    m = auto_landmarks(len(y)) if P["landmarks"] == "auto" else P["landmarks"]
    obj.set_preconditioner(NystroemPreconditioner(Xn, kernel="rbf", gamma=P["gamma"], landmarks=m, ridge=kc.jitter))
    t = time.perf_counter()
    st = tron(obj, np.zeros(len(y)), eps=P["tol"], max_iter=500, precondition=True)
    R = {{"streamrank_f": st.f, "streamrank_s": time.perf_counter() - t, "iterations": st.iteration, "cg": st.n_cg,
          "jitter": kc.jitter, "message": st.message}}
Q = np.vstack([Qk for _, _, _, Qk in kc.blocks()]).astype(np.float64)
Q[np.diag_indices_from(Q)] += kc.jitter
kc.close()
t = time.perf_counter()

def fgrad(b):
    z = Q @ b
    loss, dz, state = pk.loss_grad(z, rank, qp, cost, mu)
    return 0.5 * b @ z + P["C"] * loss, dz, state

b = st.w.copy()
f, dz, state = fgrad(b)
R["f_start_dense"] = f
for it in range(30):
    A = pk.hess_prod(Q, rank, qp, cost, mu, state)   # L Q' with an l-wide payload
    A *= P["C"]
    A[np.diag_indices_from(A)] += 1.0
    d = -scipy.linalg.solve(A, b + P["C"] * dz, overwrite_a=True, check_finite=False)
    del A
    gd = float((Q @ (b + P["C"] * dz)) @ d)
    step = 1.0
    while True:
        f1, dz1, state1 = fgrad(b + step * d)
        if f1 <= f + 1e-4 * step * gd or step < 1e-12:
            break
        step *= 0.5
    moved = f - f1
    if f1 <= f:
        b, f, dz, state = b + step * d, f1, dz1, state1
    if moved <= 1e-15 * abs(f):
        break
R.update(dense_f=f, dense_newton_steps=it + 1, dense_s=time.perf_counter() - t)
R["rel"] = (R["streamrank_f"] - f) / abs(f)
print(json.dumps(R))
"""


def header(title):
    print(f"\n== {title} ==", flush=True)


def train_row(params, timeout=3600):
    return run_child(TRAIN.format(params=json.dumps(params)), timeout=timeout)


def section_fold1(args):
    header(f"MQ2008 Fold1: rbf gamma=2^-5, C={C:g}, eps={EPS:g} (libsvm-ranksvm: {REF['seconds']:.0f} s, "
           f"{REF['iterations']} iterations, {REF['cg']} CG steps)")
    train = converted(args.work, args.data, 1, "train")
    test = converted(args.work, args.data, 1, "test")
    rows = []
    for m, eps in ((args.landmarks, EPS), (0, EPS), (args.landmarks, args.fold1_loose_eps)):
        kw = {"C": C, "kernel": "rbf", "gamma": GAMMA, "tol": eps, "gap_tol": None, "landmarks": m}
        r = train_row({"train": str(train), "test": str(test), "kw": kw})
        r["setting"] = f"{r['landmarks']} landmarks" if m else "plain CG"
        r["eps"] = eps
        r.update({k: r["test"][k] for k in ("NDCG@10", "MAP", "MeanNDCG")})
        rows.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "test"}), flush=True)
    table_record("exact_kernel", "fold1",
        rows, [("setting", "preconditioner", None), ("eps", "eps", "{:g}"), ("total_s", "total s", "{:.2f}"),
                 ("kernel_seconds", "Q build s", "{:.2f}"), ("precondition_seconds", "precond s", "{:.2f}"),
                 ("tron_s", "solver s", "{:.2f}"), ("iterations", "TRON it", "{}"), ("cg_steps", "CG", "{}"),
                 ("passes", "passes", "{}"), ("objective", "objective", "{:.6f}"), ("peak_rss_mb", "peak RSS MB", "{:.0f}"),
                 ("NDCG@10", "NDCG@10", "{:.4f}"), ("MAP", "MAP", "{:.4f}"), ("MeanNDCG", "MeanNDCG", "{:.4f}")], params=args_params(args))
    print("test metrics: letor4 convention on Fold1 test; peak RSS includes the interpreter and libraries")
    lim = REF["seconds"] / 3
    for r in rows:
        ok = r["total_s"] < lim and r["objective"] <= REF["objective"]
        print(f"  {r['setting']}, eps={r['eps']:g}: {r['total_s']:.2f} s, f = {r['objective']:.2f} against "
              f"libsvm-ranksvm's {REF['seconds']:.0f} s and f = {REF['objective']:.4g}: "
              f"{'met' if ok else 'NOT met'} (target: under {lim:.1f} s at an objective no higher)")


def section_precond(args):
    header(f"CG steps with and without the Nystroem preconditioner (Fold1, rbf 2^-5, C={C:g}, run to "
           f"eps={args.precond_eps:g})")
    train = converted(args.work, args.data, 1, "train")
    settings = [{"landmarks": 0, "select": None, "loss_term": False}]
    for item in args.precond_settings.split(","):
        kind, m = item.split(":")
        select, part = kind.split("-")
        settings.append({"landmarks": int(m), "select": select, "loss_term": part == "H"})
    r = run_child(PRECOND.format(params=json.dumps({"train": str(train), "gamma": GAMMA, "C": C,
                                                    "eps": args.precond_eps, "max_iter": 300,
                                                    "settings": settings})), timeout=7200)
    runs = r["runs"]
    best = min(x["f"] for x in runs)
    plain = runs[0]
    targets = [plain["f"]] + [best * (1 + e) for e in (1e-3, 1e-4, 1e-5, 1e-6)]
    names = ["f(plain CG at eps)"] + [f"f* (1 + {e:g})" for e in (1e-3, 1e-4, 1e-5, 1e-6)]
    out = []
    for x in runs:
        row = {"setting": (f"{x['select']} {x['landmarks']}, M ~ {'H' if x['loss_term'] else 'Q'}"
                           if x["landmarks"] else "plain CG"), "f": x["f"],
               "it": x["iterations"], "cg": x["cg"], "s": x["seconds"], "cg_eps3": x["eps1e-3_cg"]}
        for name, tgt in zip(names, targets):
            row[name] = next((c for c, f in x["traj"] if f <= tgt), None)
        out.append(row)
    table_record("exact_kernel", "precond",
        out, [("setting", "preconditioner", None), ("cg_eps3", "CG to eps=1e-3", "{}")]
          + [(n, "CG to " + n, "{}") for n in names]
          + [("cg", f"CG to eps={args.precond_eps:g}", "{}"), ("f", "f reached", "{:.8f}"), ("s", "seconds", "{:.1f}")], params=args_params(args))
    print(f"f* = the lowest objective of these runs ({best:.8f}); blank: not reached. uniform: landmarks drawn "
          f"uniformly (session 2's default); rpcholesky: randomly pivoted Cholesky (the default). M ~ Q: "
          f"D + U U^T; M ~ H: D + U (I + C U^T L U) U^T rebuilt at each accepted point (the default), D per row "
          f"(kernel_precond)")


def section_oracle(args):
    header(f"Fold1 objective vs a dense in-memory generalised Newton on the same Q' (rbf 2^-5, C={C:g})")
    train = converted(args.work, args.data, 1, "train")
    r = run_child(ORACLE.format(params=json.dumps({"train": str(train), "gamma": GAMMA, "C": C, "tol": args.oracle_tol,
                                                   "landmarks": args.landmarks})), timeout=7200)
    print(json.dumps(r))
    print(f"streamrank (eps={args.oracle_tol:g}): {r['streamrank_f']:.10f} in {r['streamrank_s']:.1f} s "
          f"({r['iterations']} iterations, {r['cg']} CG); dense Newton: {r['dense_f']:.10f} "
          f"({r['dense_newton_steps']} steps, {r['dense_s']:.0f} s); relative difference {r['rel']:.2e}")


def machine_limits(args):
    """The disk's streaming rate and the page cache's (MB/s) and the memory bandwidth (GB/s) measured
    now (tools/bench_limits.py), for the Q pass's floor."""
    import bench_limits as bl
    rows = bl.disk_rate(args.work, size_bytes=args.disk_bytes) + bl.memory_bandwidth(repeats=3, float64=False)
    lim = bl.summarize(rows)
    print(f"limits: disk {lim['disk_mbs']:,.0f} MB/s (pages dropped), page cache {lim['page_cache_mbs']:,.0f} MB/s, "
          f"memory {lim['bandwidth_gbs']:.1f} GB/s (float32 X @ v)", flush=True)
    return lim


def section_mq2007(args):
    from bench_linear import generated
    header(f"generated mq2007 (seed 0{f', scale {args.scale:g}' if args.scale != 1 else ''}): rbf gamma=2^-5, "
           f"C={C:g}, eps={EPS:g}, --memory-budget {args.budget}")
    path = generated(args.work, "mq2007", args.scale)
    lim = machine_limits(args)
    kw = {"C": C, "kernel": "rbf", "gamma": GAMMA, "tol": EPS, "gap_tol": None, "memory_budget": args.budget,
          "cache_dir": str(Path(args.work) / "exact-cache"), "landmarks": args.mq2007_landmarks}
    r = run_child(TRAIN_SPLIT.format(params=json.dumps({"train": str(path), "kw": kw})), timeout=7200)
    r["setting"] = f"{r['landmarks']} landmarks" if args.mq2007_landmarks else "plain CG"
    # the Q pass's floor: the bytes of Q not in memory read from the cache at the disk's streaming
    # rate, the rest at memory bandwidth; and the same with the page cache's rate (a cache file that
    # was read recently is in the page cache when the machine's memory holds it)
    disk_b, mem_b = r["q_bytes"] - r["q_memory_bytes"], r["q_memory_bytes"]
    mem_s = mem_b / (lim["bandwidth_gbs"] * 1e9)
    r["floor_disk_s"] = disk_b / (lim["disk_mbs"] * 1e6) + mem_s
    r["floor_cache_s"] = disk_b / (lim["page_cache_mbs"] * 1e6) + mem_s
    r["pass_to_floor"] = r["pass_median_s"] / r["floor_disk_s"]
    r["pass_to_cache_floor"] = r["pass_median_s"] / r["floor_cache_s"]
    r.update(disk_mbs=lim["disk_mbs"], page_cache_mbs=lim["page_cache_mbs"], bandwidth_gbs=lim["bandwidth_gbs"])
    split = r.pop("split")
    print(json.dumps(r), flush=True)
    notes = (f"Q {r['q_bytes'] / 1e9:.2f} GB, {r['q_memory_bytes'] / 1e9:.2f} GB of it in memory; limits measured in "
             f"this run: disk {lim['disk_mbs']:,.0f} MB/s, page cache {lim['page_cache_mbs']:,.0f} MB/s, memory "
             f"{lim['bandwidth_gbs']:.1f} GB/s",
             f"Q-pass floor: {r['floor_disk_s']:.2f} s at the disk's rate ({disk_b / 1e9:.2f} GB) + memory "
             f"({mem_b / 1e9:.2f} GB); {r['floor_cache_s']:.2f} s at the page cache's rate; median pass "
             f"{r['pass_median_s']:.2f} s = {r['pass_to_floor']:.2f}x the disk floor, "
             f"{r['pass_to_cache_floor']:.2f}x the page-cache floor",
             "targets (issue 34): at most 120 s in all, peak RSS within the budget")
    table_record("exact_kernel", "mq2007", [r], [("setting", "preconditioner", None), ("total_s", "total s", "{:.1f}"),
                ("kernel_seconds", "Q build s", "{:.1f}"), ("precondition_seconds", "precond s", "{:.1f}"),
                ("tron_s", "solver s", "{:.1f}"), ("iterations", "TRON it", "{}"), ("cg_steps", "CG", "{}"),
                ("passes", "passes", "{}"), ("pass_median_s", "pass s", "{:.2f}"),
                ("floor_disk_s", "floor s (disk)", "{:.2f}"), ("pass_to_floor", "pass / floor", "{:.2f}"),
                ("floor_cache_s", "floor s (page cache)", "{:.2f}"), ("pass_to_cache_floor", "pass / cache floor", "{:.2f}"),
                ("objective", "objective", "{:.6f}"), ("in_memory", "Q in memory", "{}"),
                ("peak_rss_mb", "peak RSS MB", "{:.0f}")], notes=notes, params=args_params(args))
    for line in notes:
        print(line)
    table_record("exact_kernel", "mq2007_split", split,
                 [("iteration", "iteration", "{}"), ("seconds", "s", "{:.1f}"), ("passes", "Q passes", "{}"),
                  ("pass_s", "Q passes s", "{:.1f}"), ("precond_s", "precond update s", "{:.1f}"),
                  ("cg_m_s", "CG M^-1 r, M-norms s", "{:.1f}"), ("other_s", "other s", "{:.1f}")],
                 notes=("per TRON iteration, from one accepted point's gradient to the next (a rejected step's "
                        "passes count in the iteration that follows it); 'end': the final gap estimate's "
                        "preconditioner update; other: vector updates and the solver's own arithmetic",),
                 params=args_params(args))
    ok = r["total_s"] <= 120 and r["peak_rss_mb"] <= parse_budget_mb(args.budget)
    print(f"  {r['total_s']:.1f} s in all, peak RSS {r['peak_rss_mb']:.0f} MB: {'met' if ok else 'NOT met'} "
          f"(target: at most 120 s, peak RSS within {args.budget})")


def parse_budget_mb(text):
    from streamrank.units import parse_size
    return parse_size(text) / 1e6


# the clustered shape of issue 10: TRON to eps=1e-8 (at most 400 iterations) per setting and C
CLUSTERED = WARM + """
import json
from streamrank._native import pairkernels as pk
from streamrank.cache.kernel_cache import KernelCache
from streamrank.objectives.kernel_objective import KernelObjective
from streamrank.objectives.kernel_precond import NystroemPreconditioner
from streamrank.features.normalize import Normalizer
from streamrank.synthetic import clustered_rows
from streamrank.solvers.tron import tron
P = json.loads({params!r})
X, y, qp = clustered_rows()
Xn = Normalizer("zscore").fit([X], X.shape[1]).transform(X)
kc = KernelCache(Xn, qp, kernel="rbf", gamma=P["gamma"], key_material={{"clustered": 0}}, block_bytes=64 << 20,
                 memory_bytes=1 << 40)
kc.build()
rank = np.searchsorted(np.unique(y), y).astype(np.int32)
runs = []
for C in P["C"]:
    for setting in ("plain CG", "mean", "rows"):
        obj = KernelObjective(kc, rank, C=C, cost=pk.pair_cost(np.ones((3, 3))), mu=np.ones(len(qp) - 1))
        t = time.perf_counter()
        if setting != "plain CG":
            obj.set_preconditioner(NystroemPreconditioner(Xn, kernel="rbf", gamma=P["gamma"], landmarks=P["landmarks"],
                                                          ridge=kc.jitter, diagonal=setting))
        st = tron(obj, np.zeros(len(y)), eps=1e-8, max_iter=400, precondition=setting != "plain CG")
        runs.append({{"C": C, "setting": setting, "iterations": st.iteration,
                     "rejected": sum(1 for h in st.history if not h[4]), "cg": st.n_cg, "f": st.f,
                     "seconds": time.perf_counter() - t, "message": st.message}})
        print(json.dumps(runs[-1]), file=__import__("sys").stderr, flush=True)
print(json.dumps({{"runs": runs}}))
"""


def section_clustered(args):
    header("generated clustered rows (1,600 rows; one query of 1,000 with 700 near-duplicates; zscore), rbf 2^-5, "
           "TRON eps=1e-8, at most 400 iterations")
    import numpy as np
    runs = run_child(CLUSTERED.format(params=json.dumps({"gamma": GAMMA, "C": [2.0 ** -6, 2.0 ** -2, 2.0 ** 2],
                                                         "landmarks": 500})), timeout=7200)["runs"]
    best = {}
    for r in runs:
        best[r["C"]] = min(best.get(r["C"], np.inf), r["f"])
    for r in runs:
        r["gap"] = (r["f"] - best[r["C"]]) / best[r["C"]]
        r["C_"] = f"2^{np.log2(r['C']):.0f}"
    table_record("exact_kernel", "clustered",
        runs, [("C_", "C", None), ("setting", "preconditioner", None), ("iterations", "TRON it", "{}"),
                 ("rejected", "rejected", "{}"), ("cg", "CG", "{}"), ("f", "objective", "{:.6f}"),
                 ("gap", "above best", "{:.1e}"), ("seconds", "seconds", "{:.1f}"), ("message", "stop", None)], params=args_params(args))
    print("mean: M = mean(diag(R)) I + U A U^T (session 3); rows: M = D + U A U^T, D = diag(R) + jitter + "
          "C diag(L) diag(R)^2 (the default); 500 landmarks (randomly pivoted Cholesky)")


CV_WARM = """
import os, subprocess, sys
# the command's numba kernels loaded (compiled if need be) by a tiny cv first, not timed
subprocess.run([sys.executable, "-m", "streamrank", "cv", {data!r}, "--method", "exact", "--folds", "1",
                "--C", "1", "--gamma", "2^-5", "-o", {out!r}, "--quiet"], check=True)
"""


def _cv_candidates(out, folds):
    """Every candidate of a cv run's folds (runs/*/result.json): fold, configuration, gamma, C,
    iterations, CG steps, solver seconds, objective, validation MeanNDCG."""
    rows = []
    for k in range(1, folds + 1):
        for res in sorted((Path(out) / f"Fold{k}" / "exact" / "runs").glob("*/result.json")):
            for c in json.loads(res.read_text())["summary"]["candidates"]:
                rows.append({"fold": k, "config": "cs" if res.parent.name.endswith("-cs") else "plain",
                             "log2_gamma": round(math.log2(c["gamma"])), "log2_C": round(math.log2(c["C"])),
                             **{key: c[key] for key in ("iterations", "cg_steps", "seconds", "objective",
                                                         "valid_meanndcg")}})
    return rows


def section_cv(args):
    folds = args.cv_folds
    header(f"streamrank cv {args.data} --method exact, default grid, {folds} fold(s): a fresh process")
    out = Path(args.work) / "cv-exact"
    shutil.rmtree(out, ignore_errors=True)
    warm = Path(args.work) / "cv-warm"
    shutil.rmtree(warm, ignore_errors=True)
    subprocess.run([sys.executable, "-c", CV_WARM.format(data=str(args.data), out=str(warm))], check=True,
                   cwd=REPO, capture_output=True)
    argv = [sys.executable, "-m", "streamrank", "cv", str(args.data), "--method", "exact", "-o", str(out), "--quiet"]
    argv += ["--folds", ",".join(str(k) for k in range(1, folds + 1))] if folds != 5 else []
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"cv failed:\n{err[-3000:]}")
    cands = _cv_candidates(out, folds)
    test = {r["fold"]: r for r in csv.DictReader(open(out / "cv.csv")) if r.get("fold", "").startswith("Fold")}
    run = {"folds": folds, "wall_s": wall, "user_s": ru.ru_utime, "sys_s": ru.ru_stime,
           "peak_rss_mb": ru.ru_maxrss * 1024 / 1e6, "minor_faults": ru.ru_minflt,
           "candidates": len(cands), "iterations": sum(c["iterations"] for c in cands),
           "cg_steps": sum(c["cg_steps"] for c in cands), "solver_s": sum(c["seconds"] for c in cands)}
    table_record("exact_kernel", "cv", [run], [
        ("folds", "folds", "{}"), ("wall_s", "wall s", "{:.1f}"), ("user_s", "user s", "{:.1f}"),
        ("sys_s", "sys s", "{:.1f}"), ("peak_rss_mb", "peak RSS MB", "{:.0f}"), ("minor_faults", "minor faults", "{:,}"),
        ("candidates", "candidates", "{}"), ("iterations", "TRON it", "{}"), ("cg_steps", "CG", "{}"),
        ("solver_s", "solver s (sum)", "{:.1f}")], params=args_params(args))
    chosen = []
    for f, r in sorted(test.items()):
        mine = [c for c in cands if f"Fold{c['fold']}" == f]
        chosen.append({"fold": f, "chosen": r["chosen"], "NDCG@10": float(r["NDCG@10"]), "MAP": float(r["MAP"]),
                       "iterations": sum(c["iterations"] for c in mine), "cg_steps": sum(c["cg_steps"] for c in mine),
                       "solver_s": sum(c["seconds"] for c in mine)})
    table_record("exact_kernel", "cv_folds", chosen, [
        ("fold", "fold", None), ("chosen", "chosen on vali", None), ("NDCG@10", "test NDCG@10", "{:.4f}"),
        ("MAP", "MAP", "{:.4f}"), ("iterations", "TRON it", "{}"), ("cg_steps", "CG", "{}"),
        ("solver_s", "solver s", "{:.1f}")], params=args_params(args))
    table_record("exact_kernel", "cv_candidates", [c for c in cands if c["fold"] == 1], [
        ("config", "config", None), ("log2_gamma", "log2 gamma", "{}"), ("log2_C", "log2 C", "{}"),
        ("iterations", "TRON it", "{}"), ("cg_steps", "CG", "{}"), ("seconds", "solver s", "{:.1f}"),
        ("objective", "objective", "{:.9g}"), ("valid_meanndcg", "valid MeanNDCG", "{:.4f}")],
        notes=["Fold 1's candidates; every fold's are in the run directory (runs/*/result.json)"],
        params=args_params(args))
    print(f"wall {wall:.1f} s, CPU {ru.ru_utime + ru.ru_stime:.1f} s (user {ru.ru_utime:.1f}, sys {ru.ru_stime:.1f})")


def landmarks_arg(text):
    return text if text == "auto" else int(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fold1", action="store_true")
    ap.add_argument("--precond", action="store_true")
    ap.add_argument("--oracle", action="store_true")
    ap.add_argument("--mq2007", action="store_true")
    ap.add_argument("--clustered", action="store_true")
    ap.add_argument("--cv", action="store_true")
    ap.add_argument("--cv-folds", type=int, default=5, help="--cv: the first N folds")
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--workdir", dest="work", default="bench-out")
    ap.add_argument("--landmarks", type=landmarks_arg, default="auto", help="preconditioner size for --fold1")
    ap.add_argument("--precond-settings", default="uniform-Q:1000,rpcholesky-Q:1000,rpcholesky-H:1000,"
                                                   "rpcholesky-H:2000",
                    help="preconditioners to compare with plain CG: SELECT-PART:LANDMARKS, SELECT uniform or "
                         "rpcholesky, PART Q (M ~ Q) or H (M ~ H)")
    ap.add_argument("--precond-eps", type=float, default=1e-4)
    ap.add_argument("--fold1-loose-eps", type=float, default=0.1,
                    help="--fold1 also runs the default preconditioner to this eps (time to libsvm-ranksvm's f)")
    ap.add_argument("--oracle-tol", type=float, default=1e-6)
    ap.add_argument("--budget", default="2GB")
    ap.add_argument("--mq2007-landmarks", type=landmarks_arg, default="auto")
    ap.add_argument("--scale", type=float, default=1.0, help="--mq2007's rows as a share of mq2007's (a smaller trial)")
    ap.add_argument("--disk-bytes", type=int, default=2 << 30, help="size of the file --mq2007 streams for the disk's rate")
    args = ap.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    if not (args.fold1 or args.precond or args.oracle or args.mq2007 or args.clustered or args.cv):
        args.fold1 = args.precond = args.oracle = True
    print(machine_facts())
    if (args.fold1 or args.precond or args.oracle or args.cv) and not have_mq2008(args.data):
        args.fold1 = args.precond = args.oracle = args.cv = False
    for flag, fn in (("fold1", section_fold1), ("precond", section_precond), ("oracle", section_oracle),
                     ("mq2007", section_mq2007), ("clustered", section_clustered), ("cv", section_cv)):
        if getattr(args, flag):
            fn(args)


if __name__ == "__main__":
    main()
