"""Issue 34, target 1: the linear RankSVM's passes over in-memory rows against the time to read X
once at the bandwidth measured in the same run.

    python tools/bench_pass.py                       # generated mslr30k x0.5 (1.1M x 136), 3 trainings
    python tools/bench_pass.py --scale 0.05 --repeats 1   # a quick look

Generates (once, in --workdir) the mslr30k preset of streamrank.synthetic at --scale (seed 1,
part train: 1,135,148 rows x 136 at 0.5, X 617 MB), trains the linear RankSVM on it in memory (C = 1,
tol 1e-3, zscore, TRON, a --memory-budget that holds the rows) through an executor that times every
pass, --repeats times, and prints per pass kind the median seconds of the passes after each
training's first (the first reads the file and compiles), X's bytes, the bound (X's bytes / the
float32 X @ v bandwidth of tools/bench_limits.py, measured in this run on a matrix of the same
shape) and the ratio: the target is a Hessian pass (and fun+grad) at most 3x the bound. A third
row times the rows alone (u = Phi s, a scores pass over the same blocks): the first half of both
passes; the rest of a pass is its pair sweep (and fun's sort) and the X^T product. The model's
weights are checked equal over the repeats (bits). Recorded in docs/results/pass.jsonl.

streamrank's kernels are cached under the settings that compiled them (SLP vectorisation on or
off, streamrank._native.numba_cache), so a cache filled by another process measures the same;
an empty one (``NUMBA_CACHE_DIR=$(mktemp -d) python tools/bench_pass.py``) still keeps a source
change's stale callees out (numba keys a function by its own bytecode only).
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchutil import machine_facts, table_record  # noqa: E402

TARGET = 3.0  # issue 34: a pass over in-memory rows at most 3x the time to read X once


def timed_executor():
    """A LocalExecutor that logs (pass name, seconds) of every run."""
    from streamrank.execution.executor import LocalExecutor

    class Timed(LocalExecutor):
        def __init__(self):
            super().__init__()
            self.log = []

        def run(self, p, source, **kw):
            self.source = source
            t = time.perf_counter()
            out = super().run(p, source, **kw)
            self.log.append((type(p).__name__, time.perf_counter() - t))
            return out
    return Timed()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=0.5, help="mslr30k preset scale (default 0.5: 1.1M rows)")
    ap.add_argument("--repeats", type=int, default=3, help="trainings (default 3)")
    ap.add_argument("--memory-budget", default="4GB", help="must hold the rows (default 4GB)")
    ap.add_argument("--workdir", default=None, help="where the data is generated and kept (default: a temporary "
                                                    "directory, removed at the end)")
    ap.add_argument("--no-configure", action="store_true",
                    help="run with the library's defaults, without streamrank.configure() (the program's settings)")
    args = ap.parse_args(argv)
    if args.repeats < 1 or not args.scale > 0:
        ap.error("--repeats must be >= 1 and --scale > 0")
    import streamrank
    if not args.no_configure:
        streamrank.configure()  # the command line's process settings, before numpy loads
    import numpy as np
    from streamrank.synthetic import write_hdf5
    from streamrank.objectives.rank_objective import _Scores
    from streamrank.training.linear import train_linear
    from bench_limits import memory_bandwidth, read_seconds, summarize
    print(machine_facts())
    tmp = None if args.workdir else tempfile.TemporaryDirectory(prefix="bench-pass-")
    work = Path(args.workdir or tmp.name)
    work.mkdir(parents=True, exist_ok=True)
    try:
        path = work / f"mslr30k_s{args.scale:g}.h5"
        if not path.exists():
            write_hdf5(path, "mslr30k", scale=args.scale, seed=1, part="train")
        ds = streamrank.open_dataset(path)
        xbytes = 4 * ds.n_rows * ds.n_features
        times, ws = {}, []
        for _ in range(args.repeats):
            ex = timed_executor()
            model, summary = train_linear(ds, C=(1.0,), tol=1e-3, normalize="zscore",
                                          memory_budget=args.memory_budget, executor=ex)
            if not summary["in_memory"]:
                sys.exit(f"the rows did not stay in memory at --memory-budget {args.memory_budget}; give more")
            seen = set()
            for name, secs in ex.log:
                if name in seen:  # each kind's first pass reads the file (and compiles): left out
                    times.setdefault(name, []).append(secs)
                seen.add(name)
            ws.append(model.w)
            # where a pass goes: the rows alone (u = Phi s, the first half of a Hessian pass and
            # of fun + grad; the rest is the pair sweep and Phi^T t), on the same blocks
            scores_pass = _Scores(np.random.default_rng(0).standard_normal(ds.n_features))
            for _ in range(5):
                t = time.perf_counter()
                ex.run(scores_pass, ex.source)
                times.setdefault("_Scores", []).append(time.perf_counter() - t)
        same = all(np.array_equal(ws[0], w) for w in ws[1:])
        bw = memory_bandwidth(rows=ds.n_rows, cols=ds.n_features, repeats=7, threads=(2,), float64=False)
        limits = summarize(bw)
        bound = read_seconds(xbytes, limits)
        rows = []
        for name, label in (("_HessProd", "Hessian-vector pass"), ("_LossGrad", "fun + grad pass"),
                            ("_Scores", "of which the rows: u = Phi s alone (a scores pass)")):
            secs = times.get(name, [])
            med = statistics.median(secs) if secs else None
            part = name == "_Scores"  # a part of the passes above: no target of its own
            rows.append({"pass": label, "passes": len(secs), "median_s": med, "x_mb": xbytes / 1e6, "bound_s": bound,
                         "ratio": None if med is None else med / bound, "target": None if part else TARGET,
                         "met": None if med is None or part else bool(med / bound <= TARGET)})
        cols = [("pass", "pass", None), ("passes", "passes timed", None), ("median_s", "median s", "{:.4f}"),
                ("x_mb", "X MB", "{:,.0f}"), ("bound_s", "X once s", "{:.4f}"), ("ratio", "x the bound", "{:.2f}"),
                ("target", "target", "{:.0f}x"), ("met", "met", None)]
        note = (f"{ds.n_rows:,} x {ds.n_features} rows in memory (mslr30k x{args.scale:g}, seed 1), C = 1, tol 1e-3, "
                f"zscore, TRON, {args.repeats} trainings; bound = X's bytes / float32 X @ v at "
                f"{limits['bandwidth_gbs']:.1f} GB/s (2 threads, this run); weights equal over the trainings: {same}"
                f"{'; without streamrank.configure()' if args.no_configure else ''}")
        print(note)
        table_record("pass", "linear passes in memory", rows, cols, notes=[note],
                     params={"scale": args.scale, "repeats": args.repeats, "memory_budget": args.memory_budget,
                             "configure": not args.no_configure,
                             "bandwidth_gbs": limits["bandwidth_gbs"]})
        ds.close()
        return 0 if same else 1
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
