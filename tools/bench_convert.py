"""Conversion speed against the disk (issue 34, target 2): ``streamrank convert`` of a generated
LETOR text file (the mslr30k preset at scale 0.55, 2.1 GB of text) in fresh processes: MB/s of
text, peak RSS, and the ratio to the disk's streaming rate measured in the same run
(tools/bench_limits.disk_rate), beside scikit-learn's load_svmlight_file(query_id=True) on a slice.

    python tools/bench_convert.py                          # the target's run (3 rounds, all threads)
    python tools/bench_convert.py --old /work/scratch/conv-old --threads 0,1   # before/after
    python tools/bench_convert.py --scale 0.1 --rounds 1 --disk-gb 0.25 --skip-sklearn   # a quick look

Each conversion runs in a fresh process, so "peak RSS" is that process's own maximum resident set.
The text file is generated first (and kept under --workdir for reuse); it is in the page cache
when converted (unless --cold), so the figures are parse speed, not disk speed; the disk's rate is
the bar the issue sets. With ``--old TREE`` (another checkout, e.g. ``git worktree add
/work/scratch/conv-old <commit>``) its conversions run interleaved with this tree's (A B B A over
the rounds) and each tree's first output is compared byte for byte with this tree's.
"""

import argparse
import filecmp
import json
import os
import statistics
import sys
from pathlib import Path

# the children's environment as this script found it: each child takes its own tree's process
# settings (the command line's: streamrank.configure() where the tree has it; older trees set them
# when imported), and none set here may reach the other tree's children
BASE_ENV = dict(os.environ)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import args_params, machine_facts, run_child, table_record  # noqa: E402
from bench_limits import SCRATCH, _drop_cache, disk_rate, summarize  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

CONVERT = """
import json, os
import streamrank
getattr(streamrank, "configure", lambda: None)()  # the command line's settings, as a run of it has
from streamrank.io.convert import convert
s = convert([{src!r}], {out!r}, quiet=True, compression={comp!r}, memory_budget={budget!r})
t = os.times()
s["cpu_s"] = t.user + t.system
print(json.dumps(s))
"""

SKLEARN = """
import json, os, time
from sklearn.datasets import load_svmlight_file
t = time.perf_counter()
X, y, q = load_svmlight_file({src!r}, query_id=True)
dt = time.perf_counter() - t
print(json.dumps({{"seconds": dt, "rows": X.shape[0], "text_bytes": os.path.getsize({src!r})}}))
"""


def make_slice(src, dst, nbytes):
    """The first ``nbytes`` of ``src``, cut at a line end."""
    with open(src, "rb") as f:
        data = f.read(nbytes)
    data = data[:data.rfind(b"\n") + 1]
    Path(dst).write_bytes(data)


def child_env(threads):
    """The environment of a conversion on ``threads`` threads (0: streamrank's default, every core)."""
    env = dict(BASE_ENV)
    env.pop("PYTHONPATH", None)  # each tree's streamrank comes from its own folder (run_child's cwd)
    if threads:
        env["NUMBA_NUM_THREADS"] = str(threads)
    else:
        env.pop("NUMBA_NUM_THREADS", None)
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="mslr30k")
    ap.add_argument("--scale", type=float, default=0.55)
    ap.add_argument("--rounds", type=int, default=3, help="conversions of the whole file per tree and thread count")
    ap.add_argument("--threads", default="0", help="comma-separated thread counts (0: every core, the default)")
    ap.add_argument("--old", default=None, help="another checkout whose conversions run interleaved with this one's")
    ap.add_argument("--memory-budget", default="2GB", help="convert's memory_budget (its default: 2GB)")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--cold", action="store_true", help="drop the text's pages from the page cache before each run")
    ap.add_argument("--disk-gb", type=float, default=2.0, help="size of the file disk_rate streams")
    ap.add_argument("--slice-mb", type=int, default=200, help="size of the slice scikit-learn reads")
    ap.add_argument("--skip-sklearn", action="store_true")
    ap.add_argument("--workdir", default=str(SCRATCH / "bench-convert"))
    ap.add_argument("--results-dir", default=None, help="where convert.jsonl is appended (default docs/results)")
    args = ap.parse_args()

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"{args.preset}-s{args.scale:g}.txt"
    if not src.exists():
        from streamrank.synthetic import write_text
        print(f"generating {src} ...", flush=True)
        write_text(src, preset=args.preset, scale=args.scale, seed=0)
    size = src.stat().st_size
    piece = work / f"{src.stem}-slice{args.slice_mb}.txt"
    if not piece.exists():
        make_slice(src, piece, args.slice_mb << 20)
    trees = [("this tree", REPO)] + ([("old tree", Path(args.old).resolve())] if args.old else [])
    threads = [int(t) for t in args.threads.split(",")]
    print(machine_facts())
    load0 = os.getloadavg()
    print(f"load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}", flush=True)

    disk = disk_rate(work, int(args.disk_gb * (1 << 30)), repeats=3)
    disk_mbs = summarize(disk)["disk_mbs"]
    print(f"disk streaming {disk_mbs:,.0f} MB/s (page cache dropped, best of 3), page cache "
          f"{summarize(disk)['page_cache_mbs']:,.0f} MB/s", flush=True)

    def convert(tree, n, path, out):
        out.unlink(missing_ok=True)
        if args.cold:
            _drop_cache(path)
        return run_child(CONVERT.format(src=str(path), out=str(out), comp=args.compression,
                                        budget=args.memory_budget), cwd=tree, env=child_env(n))

    # compile (or load) each tree's kernels once, outside the timed runs
    for name, tree in trees:
        for n in threads:
            convert(tree, n, piece, work / "warm.h5")
    (work / "warm.h5").unlink(missing_ok=True)
    runs = {(name, n): [] for name, _ in trees for n in threads}
    firsts = {}
    order = [(name, tree, n) for name, tree in trees for n in threads]
    for r in range(args.rounds):
        for name, tree, n in (order if r % 2 == 0 else order[::-1]):  # A B B A
            first = (name, n) not in firsts
            out = work / f"out-{'old' if name == 'old tree' else 'new'}-{n}{'' if first else '-again'}.h5"
            got = convert(tree, n, src, out)
            runs[name, n].append(got)
            print(f"  round {r + 1} {name} threads {n or 'all'}: {got['text_mb_per_s']:.1f} MB/s, "
                  f"{got['peak_rss_mb']:.0f} MB peak RSS", flush=True)
            if first:
                firsts[name, n] = out
            else:
                out.unlink(missing_ok=True)
    reference = firsts[trees[0][0], threads[0]]
    rows = []
    for (name, n), got in runs.items():
        mbs = [g["text_bytes"] / 1e6 / g["seconds"] for g in got]
        med = statistics.median(mbs)
        rows.append({"tool": "streamrank convert", "tree": name, "threads": n or os.cpu_count(),
                     "input": f"{src.name} ({size / 1e9:.2f} GB)", "mb": got[0]["text_bytes"] / 1e6,
                     "s": statistics.median(g["seconds"] for g in got), "mbs": med, "best_mbs": max(mbs),
                     "runs_mbs": [round(x, 1) for x in mbs], "cpu_s": statistics.median(g["cpu_s"] for g in got),
                     "rss": max(g["peak_rss_mb"] for g in got), "disk_mbs": disk_mbs, "ratio": med / disk_mbs,
                     "same_bytes": filecmp.cmp(firsts[name, n], reference, shallow=False)})
    for out in set(firsts.values()):
        out.unlink(missing_ok=True)
    if not args.skip_sklearn:
        r = run_child(SKLEARN.format(src=str(piece)))
        mbs = r["text_bytes"] / 1e6 / r["seconds"]
        rows.append({"tool": "sklearn load_svmlight_file", "tree": "", "threads": 1,
                     "input": f"slice ({piece.stat().st_size / 1e6:.0f} MB)", "mb": r["text_bytes"] / 1e6,
                     "s": r["seconds"], "mbs": mbs, "best_mbs": mbs, "rss": r["peak_rss_mb"], "disk_mbs": disk_mbs,
                     "ratio": mbs / disk_mbs})
    load1 = os.getloadavg()
    notes = [f"preset {args.preset} scale {args.scale:g} seed 0 ({size / 1e9:.2f} GB of text), compression "
             f"{args.compression}, memory_budget {args.memory_budget}; text {'dropped from' if args.cold else 'in'} "
             f"the page cache before each run; {args.rounds} rounds, trees and thread counts interleaved (A B B A)",
             f"disk: streaming read of a {args.disk_gb:g} GB file in {work}, the guest's page cache dropped before "
             f"each read (tools/bench_limits.disk_rate, best of 3): {disk_mbs:,.0f} MB/s; ratio = median MB/s / "
             f"disk MB/s",
             "same bytes: the tree's first output file is byte for byte this tree's (the first thread count's)",
             f"load average {load0[0]:.2f} at start, {load1[0]:.2f} at end (a shared 2-core machine)"]
    print()
    table_record("convert", "convert", rows,
                 [("tool", "tool", None), ("tree", "tree", None), ("threads", "threads", None),
                  ("input", "input", None), ("mb", "text MB", "{:,.0f}"), ("s", "median s", "{:.2f}"),
                  ("mbs", "MB/s (median)", "{:.1f}"), ("best_mbs", "MB/s (best)", "{:.1f}"),
                  ("runs_mbs", "each run MB/s", None), ("cpu_s", "CPU s", "{:.2f}"),
                  ("rss", "peak RSS MB", "{:,.0f}"), ("disk_mbs", "disk MB/s", "{:,.0f}"),
                  ("ratio", "x disk", "{:.3f}"), ("same_bytes", "same bytes", None)],
                 notes=notes, params={**args_params(args), "disk_mbs": disk_mbs, "disk_rows": disk},
                 results_dir=args.results_dir)
    for n in notes:
        print(n)
    print(machine_facts())


if __name__ == "__main__":
    main()
