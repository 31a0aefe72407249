"""This checkout against an older commit, interleaved on one machine: the linear pass, the first use
(an empty numba cache) and a training on MQ2008 Fold1, through the command line and the Python API.

    python tools/bench_versions.py --old 36f4a8b                 # 5 rounds, every measure
    python tools/bench_versions.py --old 36f4a8b --rounds 3 --only cli,api

Checks ``--old`` out as a git worktree under ``--workdir`` and runs each measure in a fresh process
of each tree (PYTHONPATH = that tree), the trees alternating within a round, so that a busy moment
of the machine falls on both. Measures:

- ``pass``: the linear RankSVM's passes over in-memory rows (generated mslr30k at ``--pass-scale``,
  C = 1, zscore, TRON, as tools/bench_pass.py): the median seconds of a Hessian-vector pass and of a
  fun + grad pass, each kind's first pass (which reads the file and compiles) left out;
- ``cli``: ``streamrank train fold1.h5 --C 1`` on a warm numba cache, the process's wall seconds;
- ``api``: ``RankSVM().fit(*load_ranking(fold1.h5))`` in a fresh interpreter, import included; the
  new tree with and without ``streamrank.configure()`` where it has one;
- ``firstuse``: the ``cli`` run from an empty numba cache (each round a new one).

Prints and records (docs/results/versions.jsonl) the median and range of each over the rounds.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchutil import args_params, machine_facts, table_record  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MEASURES = ("pass", "cli", "api", "firstuse")

PASS_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[2])  # tools/: bench_pass's timing executor, the same in both trees
import streamrank
from bench_pass import timed_executor
from streamrank.training.linear import train_linear

ds = streamrank.open_dataset(sys.argv[1])
ex = timed_executor()
model, summary = train_linear(ds, C=(1.0,), tol=1e-3, normalize="zscore", memory_budget="4GB", executor=ex)
seen, times = set(), {}
for name, secs in ex.log:
    if name in seen:
        times.setdefault(name, []).append(secs)
    seen.add(name)
print(json.dumps({"hess": sorted(times.get("_HessProd", [])), "loss": sorted(times.get("_LossGrad", [])),
                  "w": model.w.tolist()[:3]}))
"""

API_CHILD = r"""
import sys, time
t0 = time.perf_counter()
import streamrank
if sys.argv[2] == "configure":
    streamrank.configure()
X, y, qid = streamrank.load_ranking(sys.argv[1])
streamrank.RankSVM(C=1.0).fit(X, y, qid)
print(time.perf_counter() - t0)
"""


def env_of(tree, cache):
    env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(cache))
    env.pop("STREAMRANK_NO_WARMUP", None)
    return env


def timed(argv, env, cwd):
    t = time.perf_counter()
    r = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=1800)
    secs = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed (rc {r.returncode}): {r.stderr[-2000:]}")
    return secs, r.stdout


def worktree(commit, where):
    where = Path(where)
    if not (where / "streamrank").exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), commit], check=True,
                       capture_output=True)
    return where


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the commit to compare against")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default=",".join(MEASURES), help=f"some of {', '.join(MEASURES)}")
    ap.add_argument("--pass-scale", type=float, default=0.2, help="mslr30k scale of the pass data (0.2: 454k rows)")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "MQ2008" / "Fold1" / "train.txt.gz"))
    ap.add_argument("--workdir", default="bench-out/versions")
    args = ap.parse_args(argv)
    only = [m.strip() for m in args.only.split(",") if m.strip()]
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    old = worktree(args.old, work / "old-tree")
    old_sha = subprocess.run(["git", "-C", str(old), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
    trees = {f"old {old_sha}": old, "new (this checkout)": ROOT}
    print(machine_facts())
    py = sys.executable
    fold1 = work / "fold1.h5"
    if not fold1.exists():
        timed([py, "-m", "streamrank", "convert", args.data, "-o", fold1, "--quiet"], env_of(ROOT, work / "nc-new"),
              work)
    pass_data = work / f"mslr30k_s{args.pass_scale:g}.h5"
    if "pass" in only and not pass_data.exists():
        timed([py, "-c", "import sys; from streamrank.synthetic import write_hdf5; "
               f"write_hdf5(sys.argv[1], 'mslr30k', scale={args.pass_scale}, seed=1, part='train')", pass_data],
              env_of(ROOT, work / "nc-new"), work)
    caches = {label: work / f"nc-{k}" for k, label in enumerate(trees)}
    for label, tree in trees.items():  # warm each tree's cache once, untimed
        timed([py, "-m", "streamrank", "train", fold1, "--C", "1", "-o", work / "warm.h5", "--quiet"],
              env_of(tree, caches[label]), work)
    results = {}

    def add(key, value):
        results.setdefault(key, []).append(value)

    for r in range(args.rounds):
        for label, tree in (list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]):
            env = env_of(tree, caches[label])
            has_configure = (tree / "streamrank" / "_native" / "process.py").exists()
            if "pass" in only:
                _, out = timed([py, "-c", PASS_CHILD, pass_data, Path(__file__).resolve().parent], env, work)
                got = json.loads(out.strip().splitlines()[-1])
                add((label, "pass: Hessian-vector (median s)"), statistics.median(got["hess"]))
                add((label, "pass: fun + grad (median s)"), statistics.median(got["loss"]))
            if "cli" in only:
                add((label, "cli: train Fold1 (s)"),
                    timed([py, "-m", "streamrank", "train", fold1, "--C", "1", "-o", work / "m.h5", "--quiet"], env,
                          work)[0])
            if "api" in only:
                add((label, "api: import + load_ranking + fit (s)"),
                    float(timed([py, "-c", API_CHILD, fold1, "plain"], env, work)[1].strip().splitlines()[-1]))
                if has_configure:
                    add((label, "api with streamrank.configure() (s)"),
                        float(timed([py, "-c", API_CHILD, fold1, "configure"], env, work)[1].strip().splitlines()[-1]))
            if "firstuse" in only:
                with tempfile.TemporaryDirectory(prefix="nc-first-", dir=work) as cold:
                    add((label, "firstuse: train Fold1, empty numba cache (s)"),
                        timed([py, "-m", "streamrank", "train", fold1, "--C", "1", "-o", work / "f.h5", "--quiet"],
                              env_of(tree, cold), work)[0])
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    rows = []
    for (label, what), vals in results.items():
        rows.append({"measure": what, "tree": label, "median_s": statistics.median(vals), "min_s": min(vals),
                     "max_s": max(vals), "runs": len(vals)})
    rows.sort(key=lambda row: (row["measure"], row["tree"]))
    cols = [("measure", "measure", None), ("tree", "tree", None), ("median_s", "median s", "{:.3f}"),
            ("min_s", "min s", "{:.3f}"), ("max_s", "max s", "{:.3f}"), ("runs", "runs", None)]
    note = (f"trees interleaved, {args.rounds} rounds; MQ2008 Fold1 train ({args.data}); pass data mslr30k "
            f"x{args.pass_scale:g} in memory; each process fresh; 'new' is this checkout")
    print(note)
    table_record("versions", f"this checkout against {old_sha}", rows, cols, notes=[note], params=args_params(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
