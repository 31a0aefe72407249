"""Every pass on dask.distributed against the local path (issue 15).

    python tools/bench_distributed.py                       # mslr30k preset at --scale 0.5 (1.1M rows)
    python tools/bench_distributed.py --scale 0.1 --repeats 1   # a quick look
    python tools/bench_distributed.py --kill-workers 20         # every worker killed, 20 tries (MQ2008)

One linear RankSVM training (C = 1, eps = 1e-3, TRON, zscore) on the generated ``mslr30k`` preset,
larger than one worker's ``--budget``, by

- ``local``: every pass in this process (``LocalExecutor``, numba on every core);
- ``dask 1``: a LocalCluster of one single-threaded worker process (numba and BLAS on every core);
- ``dask 2``: two worker processes, each with ``cores / 2`` threads;

each in a fresh process, configurations interleaved ``--repeats`` times (a 2-core machine is
noisy: compare within a run). Per run: the training's wall time (the cluster's start apart), its
passes and seconds a pass, the seconds a pass per million rows, bytes shipped a pass (both ways,
the exact message sizes; the solver's passes: loss + gradient and Hessian products), the peak RSS
of the driver and of each worker (VmHWM; a worker's resident size at the end beside it), and whether
the model equals the local one bit for bit.
A pass's time is the median Hessian-vector product (one read of every row; the first passes also
decide where rows live and load compiled kernels). The scaling line gives local / dask 2 and
dask 1 / dask 2 per pass. Everything printed comes from
this run, with the machine's facts; docs/benchmarks-archive.md keeps the logs and docs/design.md's cluster
section its extrapolation.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import machine_facts, run_child, args_params, table_record  # noqa: E402

CHILD = r"""
import json, os, statistics, time, numpy as np, logging
import streamrank
getattr(streamrank, "configure", lambda: None)()  # the command line's process settings
from streamrank.training.linear import train_linear
from streamrank.execution.executor import LocalExecutor
logging.getLogger("distributed").setLevel(logging.CRITICAL)
cfg = json.loads({cfg!r})
ds = streamrank.open_dataset(cfg["data"])
out = {{}}
class Timed(LocalExecutor):
    def __init__(self):
        super().__init__()
        self.pass_log = []
    def run(self, p, source, **kw):
        t = time.perf_counter()
        out = super().run(p, source, **kw)
        self.pass_log.append((type(p).__name__, 1, 0, time.perf_counter() - t))
        return out
ex, client, cluster = Timed(), None, None
if cfg["workers"]:
    from streamrank.execution.dask_executor import DaskExecutor, start_cluster
    t = time.perf_counter()
    client, cluster = start_cluster(workers=cfg["workers"])
    ex = DaskExecutor(client)
    out["start_s"] = time.perf_counter() - t
t = time.perf_counter()
model, s = train_linear(ds, C=(1.0,), tol=1e-3, normalize="zscore", memory_budget=cfg["budget"], executor=ex)
out["train_s"] = time.perf_counter() - t
out["passes"] = s["passes"]
out["objective"] = s["objective"]
out["rows"] = ds.n_rows
out["in_memory"] = s["in_memory"]
np.save(cfg["model"], model.w)
# a pass once warm: the median Hessian-vector product (the first passes read, decide and compile)
out["hess_pass_s"] = statistics.median(t for name, p, b, t in ex.pass_log if name == "_HessProd")
out["hess_passes"] = sum(1 for name, *_ in ex.pass_log if name == "_HessProd")
if cfg["workers"]:
    solver = [(p, b) for name, p, b, t in ex.pass_log if name in ("_LossGrad", "_HessProd")]
    out["bytes_per_pass"] = statistics.median(b for p, b in solver)
    out["bytes_per_partition"] = statistics.median(b / p for p, b in solver)
    out["partitions"] = max(p for _, p, _, _ in ex.pass_log)
    d = ex.describe()
    out["bytes_all"] = d["bytes_shipped"]
    out["all_passes"] = d["passes"]
    def mem(dask_worker=None):  # (peak, now) resident bytes of a worker process
        st = {{l.split(":")[0]: int(l.split()[1]) * 1024 for l in open("/proc/self/status")
               if l.startswith(("VmHWM", "VmRSS"))}}
        return st["VmHWM"], st["VmRSS"]
    got = sorted(client.run(mem).values())
    out["worker_rss_mb"] = [p / 1e6 for p, _ in got]
    out["worker_end_mb"] = [n / 1e6 for _, n in got]
    ex.close(); client.close(); cluster.close()
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=0.5, help="of the mslr30k preset (2.27M rows at 1.0)")
    ap.add_argument("--budget", default="400MB", help="--memory-budget of the driver and of each worker")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/streamrank-bench-distributed")
    ap.add_argument("--kill-workers", type=int, default=0, metavar="N",
                    help="instead: N tries of a 2-worker run whose workers are all killed at once (tools/_worker_loss.py)")
    ap.add_argument("--data", default=None, help="with --kill-workers: the folder with MQ2008's Fold1")
    ap.add_argument("--hang-limit", type=float, default=120.0, help="with --kill-workers: seconds after which a run hangs")
    ap.add_argument("--seed", type=int, default=0, help="with --kill-workers: of the kill times")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    if args.kill_workers:
        return kill_workers(args, work)
    data = work / f"mslr30k_s{args.scale:g}.h5"
    if not data.exists():
        from streamrank.synthetic import write_hdf5
        print(f"generating {data} ...", flush=True)
        write_hdf5(data, "mslr30k", scale=args.scale, seed=1, part="train")
    import streamrank
    streamrank.configure()  # the command line's process settings
    with streamrank.open_dataset(data) as ds:
        rows, d = ds.n_rows, ds.n_features
    print(machine_facts())
    print(f"data: {data.name}, {rows:,} rows x {d} features ({rows * (4 * d + 4) / 1e6:.0f} MB of rows); "
          f"budget {args.budget} for the driver and for each worker")
    configs = [("local", 0), ("dask 1", 1), ("dask 2", 2)]
    runs = {name: [] for name, _ in configs}
    for rep in range(args.repeats):
        for name, workers in configs:
            cfg = {"data": str(data), "workers": workers, "budget": args.budget,
                   "model": str(work / f"w_{workers}_{rep}.npy")}
            r = run_child(CHILD.format(cfg=json.dumps(cfg)))
            r["w"] = str(work / f"w_{workers}_{rep}.npy")
            runs[name].append(r)
            print(f"  {name} run {rep + 1}: {r['train_s']:.1f} s, {r['passes']} passes", flush=True)
    import numpy as np
    ref = np.load(runs["local"][0]["w"])
    rows_out = []
    for name, _ in configs:
        rs = runs[name]
        same = all(np.array_equal(np.load(r["w"]), ref) for r in rs)
        t = statistics.median(r["train_s"] for r in rs)
        per_pass = statistics.median(r["hess_pass_s"] for r in rs)
        r0 = rs[0]
        rows_out.append({
            "config": name, "start": r0.get("start_s"), "train": t, "passes": r0["passes"], "per_pass": per_pass,
            "per_mrow": per_pass / (rows / 1e6), "bytes": r0.get("bytes_per_pass"), "partitions": r0.get("partitions"),
            "driver_rss": statistics.median(r["peak_rss_mb"] for r in rs),
            "workers_rss": " / ".join(f"{v:.0f}" for v in r0.get("worker_rss_mb", [])) or None,
            "workers_end": " / ".join(f"{v:.0f}" for v in r0.get("worker_end_mb", [])) or None,
            "workers_rss_mb": r0.get("worker_rss_mb"), "workers_end_mb": r0.get("worker_end_mb"),  # the numbers
            "same": "yes" if same else "NO"})
    print()
    table_record("distributed", "executors",
        rows_out, [("config", "executor", None), ("start", "cluster start s", "{:.1f}"),
                     ("train", "training s", "{:.1f}"), ("passes", "passes", None),
                     ("per_pass", "s / Hessian pass", "{:.3f}"), ("per_mrow", "s / pass / M rows", "{:.3f}"),
                     ("partitions", "partitions", None), ("bytes", "bytes / solver pass", "{:,.0f}"),
                     ("driver_rss", "driver peak MB", "{:.0f}"), ("workers_rss", "worker peak MB", None),
                     ("workers_end", "worker MB at end", None),
                     ("same", "model = local", None)], params=args_params(args))
    p = {r["config"]: r["per_pass"] for r in rows_out}
    print(f"\nscaling per pass: local / dask 2 = {p['local'] / p['dask 2']:.2f}, dask 1 / dask 2 = "
          f"{p['dask 1'] / p['dask 2']:.2f}; bytes a solver pass per partition: "
          f"{runs['dask 2'][0]['bytes_per_partition']:,.0f}")
    print(json.dumps({"rows": rows, "features": d, "budget": args.budget, "table": rows_out}))


def kill_workers(args, work):
    import _worker_loss
    from bench_linear import DEFAULT_DATA, converted, have_mq2008
    folder = args.data or str(DEFAULT_DATA)
    if not have_mq2008(folder):
        return
    print(machine_facts())
    _worker_loss.run(args, converted(work, folder, 1, "train"), converted(work, folder, 1, "vali"))


if __name__ == "__main__":
    main()
