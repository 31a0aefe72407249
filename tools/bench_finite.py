"""What the block stream's finiteness check costs (issue 30, Build 3: at most 3% of a linear pass).

    python tools/bench_finite.py                          # mslr30k preset at --scale 0.5 (1.1M rows x 136)
    python tools/bench_finite.py --scale 0.1 --repeats 3  # a quick look on a loaded machine

Every value of a dataset is checked to be finite on the first read of its rows in a process
(``Dataset.read``: X read in chunk-aligned pieces of ``PIECE_BYTES``, each scanned by
``streamrank._native.finite`` as soon as it lands, while in cache). Three ways to read, each in a
fresh process, interleaved ``--repeats`` times:

- ``none``: the first read without any check of the values (this tree, the check taken out: one
  HDF5 call per block, checksums only, as the parent commit read a format version 2 file);
- ``fused``: the code as it is;
- ``after``: one HDF5 call per block, then the block scanned (the check not fused: a block larger
  than the caches is scanned from memory);
- ``parent``: the parent commit itself (``--parent``, default the commit before the check's first
  commit 7afeb52), run from an archive of its tree in the work directory.

Per process, one of two jobs:

- ``read``: one pass over every block (the stream at ``--budget``, no prefetch, so the reading
  thread's CPU seconds are the pass's), the first read of every row in the process;
- ``train``: a linear RankSVM training (C = 1, eps = 1e-3, TRON, normalize none, rows kept in
  memory at ``--budget``) with each pass timed: its first pass (the one that reads the rows) and
  the median Hessian-vector product (in-memory rows: the hot pass, which the check never enters:
  a row range checked once is not scanned again).

The cost of the check is the median over rounds of the per-round difference (``fused`` - ``none``,
and ``fused`` - ``parent``) of the read pass and of the training's first pass. The verdict is
against 3% of the linear pass the check is fused into: the training's first pass, the one that
reads the rows. The check's share of one Hessian pass over rows already in memory is printed too;
the check never enters such a pass (a row range checked once is not scanned again), and a scan of
every value cannot cost 3% of a pass that itself reads every value once. CPU seconds are printed
beside wall seconds: on a machine shared with other work the wall clock counts other processes'
time. Each row is a median over the rounds.
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import machine_facts, run_child, args_params, table_record  # noqa: E402

TARGET = 0.03  # of a linear pass

CHILD = r"""
import json, statistics, time, warnings
import numpy as np
import streamrank
getattr(streamrank, "configure", lambda: None)()  # the command line's process settings
from streamrank.io import dataset as dsmod
cfg = json.loads({cfg!r})
mode = cfg["mode"]
if mode != "parent":  # the parent commit's tree has no such module
    from streamrank._native import finite
if mode in ("none", "after"):
    def _read(self, X, y, start, stop):
        self._read_raw(self._ry, y, start, stop)
        self._read_raw(self._rx, X, start, stop)
        if mode == "after" and (finite.first_non_finite(finite.bits_of(X)) >= 0
                                or finite.first_non_finite(finite.bits_of(y)) >= 0):
            raise ValueError("not finite")
    dsmod.Dataset._read_checked = _read
if cfg["piece_bytes"]:
    dsmod.PIECE_BYTES = cfg["piece_bytes"]
out = {{}}
if cfg["kind"] == "read":
    if mode != "parent":
        finite.first_non_finite(np.zeros(4, np.uint32))  # the kernel loaded before the clock
    ds = streamrank.open_dataset(cfg["data"])
    ds.fingerprint
    t, c = time.perf_counter(), time.thread_time()
    for _ in ds.stream(memory_budget=cfg["budget"], prefetch=False):
        pass
    out["read_s"], out["read_cpu_s"] = time.perf_counter() - t, time.thread_time() - c
else:
    from streamrank.execution.executor import LocalExecutor
    from streamrank.training.linear import train_linear
    with streamrank.open_dataset(cfg["warm"]) as w, warnings.catch_warnings():  # kernels loaded first
        warnings.simplefilter("ignore")
        train_linear(w, C=[1.0], tol=1e-2)
    class Timed(LocalExecutor):
        def __init__(self):
            super().__init__()
            self.log = []
        def run(self, p, source, **kw):
            t, c = time.perf_counter(), time.process_time()
            r = super().run(p, source, **kw)
            self.log.append((type(p).__name__, time.perf_counter() - t, time.process_time() - c))
            return r
    ex = Timed()
    ds = streamrank.open_dataset(cfg["data"])
    ds.fingerprint
    t = time.perf_counter()
    model, s = train_linear(ds, C=(1.0,), tol=1e-3, memory_budget=cfg["budget"], executor=ex)
    out["train_s"] = time.perf_counter() - t
    out["in_memory"] = s["in_memory"]
    out["passes"] = len(ex.log)
    out["first_pass"], out["first_s"], out["first_cpu_s"] = ex.log[0]
    hess = [(w, c) for name, w, c in ex.log if name == "_HessProd"]
    out["hess_s"] = statistics.median(w for w, _ in hess)
    out["hess_cpu_s"] = statistics.median(c for _, c in hess)
    out["objective"] = s["objective"]
print(json.dumps(out))
"""

MODES = ("none", "fused", "after")
# the commit before 7afeb52 (the check's first commit): its read of a version 2 file, one HDF5 call
# per block, checksums only; run from an archive of its tree in the work directory
PARENT = "7afeb52^"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.5, help="of the mslr30k preset (0.5: 1,135,148 rows x 136)")
    ap.add_argument("--budget", default="2GB", help="--memory-budget of the read pass and the training")
    ap.add_argument("--repeats", type=int, default=5, help="rounds; each runs every mode once per job")
    ap.add_argument("--workdir", default="/tmp/streamrank-bench-finite")
    ap.add_argument("--no-train", action="store_true", help="the read pass only")
    ap.add_argument("--piece-mb", type=float, default=0, help="pieces of the fused check (default: the code's, "
                                                              "streamrank.io.dataset.PIECE_BYTES)")
    ap.add_argument("--parent", default=PARENT, metavar="REV",
                    help=f"also run the read pass and the training from this commit's tree (mode 'parent'; "
                         f"default {PARENT}, the commit before the check); 'none' to skip")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data, warm = work / f"mslr30k_s{args.scale:g}.h5", work / "small.h5"
    from streamrank.synthetic import write_hdf5
    if not data.exists():
        print(f"generating {data} ...", flush=True)
        write_hdf5(data, "mslr30k", scale=args.scale, seed=1, part="train")
    if not warm.exists():
        write_hdf5(warm, "small", scale=1.0, seed=0)
    import streamrank
    streamrank.configure()  # the command line's process settings
    from streamrank.io import dataset as dsmod
    with streamrank.open_dataset(data) as ds:
        rows, d, chunk = ds.n_rows, ds.n_features, ds._X.chunks
    print(machine_facts())
    print(f"data: {data.name}, {rows:,} rows x {d} features ({rows * (4 * d + 4) / 1e6:.0f} MB of rows, chunks of "
          f"{chunk[0]:,} rows); budget {args.budget}; pieces of {args.piece_mb or dsmod.PIECE_BYTES / 2**20:g} MiB; "
          f"{args.repeats} rounds")
    jobs = ["read"] + ([] if args.no_train else ["train"])
    modes, parent_tree = MODES, None
    if args.parent != "none":
        import subprocess
        sha = subprocess.run(["git", "rev-parse", args.parent], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parents[1]).stdout.strip()
        parent_tree = work / f"tree-{sha[:12]}"
        if not (parent_tree / "streamrank").exists():
            parent_tree.mkdir(parents=True, exist_ok=True)
            archive = subprocess.run(["git", "archive", sha], capture_output=True, check=True,
                                     cwd=Path(__file__).resolve().parents[1]).stdout
            subprocess.run(["tar", "-x", "-C", str(parent_tree)], input=archive, check=True)
        print(f"mode parent: the tree of {args.parent} = {sha[:12]} ({parent_tree})")
        modes = MODES + ("parent",)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = str(parent_tree)
    runs = {(j, m): [] for j in jobs for m in modes}
    for rep in range(args.repeats):
        for job in jobs:
            # each round changes the order of the modes, so none is always first after the other job
            k = rep % len(modes)
            for mode in modes[k:] + modes[:k]:
                cfg = {"data": str(data), "warm": str(warm), "mode": mode, "kind": job, "budget": args.budget,
                       "piece_bytes": int(args.piece_mb * 2**20)}
                r = (run_child(CHILD.format(cfg=json.dumps(cfg)), cwd=parent_tree, env=env) if mode == "parent"
                     else run_child(CHILD.format(cfg=json.dumps(cfg))))
                runs[job, mode].append(r)
                say = (f"read {r['read_s'] * 1e3:.0f} ms (cpu {r['read_cpu_s'] * 1e3:.0f})" if job == "read" else
                       f"training {r['train_s']:.2f} s, first pass {r['first_s'] * 1e3:.0f} ms, Hessian pass "
                       f"{r['hess_s'] * 1e3:.1f} ms")
                print(f"  round {rep + 1} {job:5s} {mode:5s}: {say}", flush=True)

    def med(job, mode, key):
        rs = runs.get((job, mode))
        return statistics.median(r[key] for r in rs) if rs else None

    rows_out = []
    for mode in modes:
        rows_out.append({
            "mode": mode, "read": med("read", mode, "read_s"), "read_cpu": med("read", mode, "read_cpu_s"),
            "train": med("train", mode, "train_s"), "first": med("train", mode, "first_s"),
            "first_cpu": med("train", mode, "first_cpu_s"), "hess": med("train", mode, "hess_s"),
            "hess_cpu": med("train", mode, "hess_cpu_s"),
            "peak": statistics.median(r["peak_rss_mb"] for r in runs["read", mode])})
    print()
    ms = "{:.1f}"
    table_record("finite", "finite check",
        [{k: (v * 1e3 if isinstance(v, float) and k not in ("train", "peak") else v) for k, v in r.items()}
           for r in rows_out],
          [("mode", "check", None), ("read", "read pass ms", ms), ("read_cpu", "read cpu ms", ms),
           ("peak", "read peak MB", "{:.0f}"), ("train", "training s", "{:.2f}"),
           ("first", "first pass ms", ms), ("first_cpu", "first pass cpu ms", ms),
           ("hess", "Hessian pass ms", ms), ("hess_cpu", "Hessian cpu ms", ms)], params=args_params(args))

    def cost(job, mode, key, base="none"):  # median over rounds of the per-round difference
        return statistics.median(a[key] - b[key] for a, b in zip(runs[job, mode], runs[job, base]))

    hess = med("train", "none", "hess_s")
    print()
    bases = ["none"] + (["parent"] if "parent" in modes else [])
    for base in bases:
        for mode in ("fused", "after"):
            c, cc = cost("read", mode, "read_s", base), cost("read", mode, "read_cpu_s", base)
            r0 = med("read", base, "read_s")
            line = f"check {mode} vs {base}: read pass +{c * 1e3:.1f} ms wall (+{cc * 1e3:.1f} ms cpu) of {r0 * 1e3:.0f} ms " \
                   f"({c / r0:+.1%})"
            if hess:
                f, f0 = cost("train", mode, "first_s", base), med("train", base, "first_s")
                line += f"; first training pass +{f * 1e3:.1f} ms of {f0 * 1e3:.0f} ms ({f / f0:+.1%})"
            print(line)
    if hess:
        c = cost("read", "fused", "read_s")
        train, passes = med("train", "none", "train_s"), med("train", "none", "passes")
        print(f"a training of {passes:.0f} passes ({train:.2f} s) pays it once: {c / train:.2%} of the training, "
              f"{c / passes / hess:.2%} of a pass on average; {c / hess:.1%} of one Hessian pass over rows already "
              f"in memory ({hess * 1e3:.1f} ms), a pass the check never enters")
        worst = max(cost("train", "fused", "first_s", b) / med("train", b, "first_s") for b in bases)
        print(f"verdict: the check adds {worst:+.1%} (the larger of vs {' and vs '.join(bases)}) to the linear pass it "
              f"is fused into, the training's first pass, which reads the rows; target {TARGET:.0%}: "
              f"{'met' if worst <= TARGET else 'NOT met'}")
    print(json.dumps({"rows": rows, "features": d, "budget": args.budget, "repeats": args.repeats,
                      "table": rows_out}))


if __name__ == "__main__":
    main()
