"""Are the models of this checkout bit-identical to those of an older commit? (issue 11)

    python tools/check_bit_identity.py --old b04272a               # fixtures + MQ2008 Fold1
    python tools/check_bit_identity.py --old b04272a --no-mq2008   # fixtures only (a minute)
    python tools/check_bit_identity.py --threads                   # this tree: 2 threads vs 1
    python tools/check_bit_identity.py --threads --taskset         # 2 threads vs taskset -c 0

Checks out ``--old`` as a git worktree under ``--workdir``, then, for every case below, runs the
``streamrank`` CLI of each tree in a fresh process (PYTHONPATH = that tree) on the same inputs:
convert (MQ2008 text -> HDF5), train (linear TRON and Newton-Cholesky, Nystroem, RFF, exact with
and without the preconditioner, a C path chosen on validation data, and a run killed by
``--max-iter`` and continued with ``--resume``), and predict. A case passes when every dataset in
the two model (or converted data) files has the same bytes and the two score files are equal byte
for byte. Attributes are compared too, except the ones that record time, version or the path of
the inputs. Prints one line per case and the machine facts; exits 1 if any case differs.

``--threads`` compares this tree with itself instead: numba and BLAS on 2 threads
(NUMBA_NUM_THREADS, OPENBLAS_NUM_THREADS, OMP_NUM_THREADS) against 1, or with ``--taskset``
against the default counts under ``taskset -c 0`` (numba and OpenBLAS take theirs from the CPU
affinity): thread counts never change a model (docs/design.md).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np

# the environment as the user started this script: each tree's command line decides its process
# settings itself (OPENBLAS_THREAD_TIMEOUT, OMP_WAIT_POLICY; older trees also NUMBA_SLP_VECTORIZE,
# which they set when imported), so nothing set in this process may reach the other tree
BASE_ENV = dict(os.environ)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from _benchutil import machine_facts  # noqa: E402

# attributes that legitimately differ between two runs of the same code (times, versions, paths)
VOLATILE = ("seconds", "created", "time", "version", "created_by", "source", "path", "read_seconds")

FIXTURE = ROOT / "tests" / "data" / "dataset_v1.h5"
NUMBA_CACHE = Path("numba-cache")  # set under --workdir by main
# (name, train args); DATA, VALID and CK are replaced by paths
CASES = [
    ("linear tron", ["--C", "0.5"]),
    ("linear newton_cholesky", ["--C", "0.5", "--solver", "newton_cholesky"]),
    ("linear zscore C path", ["--C", "0.01,0.1,1", "--valid", "VALID", "--normalize", "zscore"]),
    ("nystroem", ["--method", "nystroem", "--components", "64", "--gamma", "0.05", "--C", "0.5"]),
    ("rff", ["--method", "rff", "--components", "64", "--gamma", "0.05", "--C", "0.5"]),
    ("exact precond", ["--method", "exact", "--gamma", "0.05", "--C", "0.5"]),
    ("exact plain", ["--method", "exact", "--gamma", "0.05", "--C", "0.5", "--precondition", "off"]),
    ("exact gamma x C path", ["--method", "exact", "--gamma", "0.02,0.05", "--C", "0.1,1", "--valid", "VALID"]),
]
# killed after 2 iterations (--max-iter), then resumed: compared with the old tree's resumed run
RESUMED = [
    ("linear resumed", ["--C", "0.5", "--tol", "1e-6"]),
    ("exact resumed", ["--method", "exact", "--gamma", "0.05", "--C", "0.5", "--tol", "1e-6"]),
]


def cli(tree, args, log):
    """Run ``streamrank ARGS`` with ``tree``'s package (numba's cache kept per tree under the work
    directory, so each tree compiles once); raise with its log on failure. ``tree`` may be a
    (path, extra environment, command prefix) triple (``--threads``)."""
    tree, extra, prefix = tree if isinstance(tree, tuple) else (tree, {}, [])
    env = dict(BASE_ENV, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(NUMBA_CACHE / Path(tree).name), **extra)
    code = "import sys; from streamrank.cli import main; sys.exit(main(sys.argv[1:]))"
    with open(log, "a") as fh:
        r = subprocess.run([*prefix, sys.executable, "-c", code, *map(str, args)], env=env, stdout=fh, stderr=fh,
                           cwd=tree)
    if r.returncode != 0:
        raise RuntimeError(f"{tree}: streamrank {' '.join(map(str, args))} failed (rc {r.returncode}); see {log}")


# attributes a later format version added (present in the new file only): reported, not a difference
ADDED_BY_FORMAT = ("index_sha256", "content_sha256")


def h5_differences(a, b):
    """Names of datasets or attributes whose bytes differ between HDF5 files a (old) and b (new).
    A model's content_sha256 covers its training log (times), so it is not compared; attributes
    that only the new file has and a newer format added (ADDED_BY_FORMAT) are not differences."""
    out = []

    def attrs(x, y, name):
        model = x.file.attrs.get("format") == "streamrank-model"
        for k in sorted(set(x.attrs) | set(y.attrs)):
            if any(v in k for v in VOLATILE) or (model and k == "content_sha256"):
                continue
            if k not in x.attrs and k in ADDED_BY_FORMAT:
                continue
            if k not in x.attrs or k not in y.attrs:
                out.append(f"{name}@{k} (only in one)")
                continue
            u, v = x.attrs[k], y.attrs[k]
            if isinstance(u, (str, bytes)) and k in ("training", "config", "summary"):
                u, v = _strip_volatile(u), _strip_volatile(v)
            if not np.array_equal(np.asarray(u), np.asarray(v)):
                out.append(f"{name}@{k}")

    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        attrs(fa, fb, "/")
        names_a, names_b = set(), set()
        fa.visit(names_a.add)
        fb.visit(names_b.add)
        for n in sorted(names_a ^ names_b):
            out.append(f"{n} (only in one)")
        for n in sorted(names_a & names_b):
            x, y = fa[n], fb[n]
            attrs(x, y, n)
            if isinstance(x, h5py.Dataset):
                u, v = x[()], y[()]
                if u.dtype != v.dtype or u.shape != v.shape or np.asarray(u).tobytes() != np.asarray(v).tobytes():
                    out.append(n + _size(u, v))
    return out


def _size(u, v):
    """' (max rel 1.2e-15)': the largest difference of two float arrays of one shape relative to the
    old one's largest magnitude (a stated change of summation order is measured by it); '' else."""
    u, v = np.asarray(u), np.asarray(v)
    if u.shape != v.shape or u.dtype.kind != "f" or v.dtype.kind != "f" or not u.size:
        return ""
    top = float(np.max(np.abs(u)))
    gap = float(np.max(np.abs(u.astype(np.float64) - v.astype(np.float64))))
    return f" (max rel {gap / top:.1e})" if top > 0 else f" (max abs {gap:.1e})"


def _strip_volatile(text):
    """A JSON attribute without its volatile keys (at any depth)."""
    try:
        obj = json.loads(text)
    except (TypeError, ValueError):
        return text

    def strip(o):
        if isinstance(o, dict):
            # a candidate's trace rows are (iteration, seconds, passes, objective, grad_norm, valid)
            # (training.path.TRACE_COLUMNS): the seconds column is dropped, the rest compared
            return {k: ([[x for j, x in enumerate(row) if j != 1] for row in v] if k == "trace" else strip(v))
                    for k, v in o.items() if not any(t in k for t in VOLATILE)}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o
    return json.dumps(strip(obj), sort_keys=True)


def run_case(trees, work, name, args, data, valid, resumed=False):
    """Train and predict with both trees; return the list of differences (empty: identical)."""
    outs = []
    for label, tree in trees.items():
        d = work / label / name.replace(" ", "_")
        d.mkdir(parents=True, exist_ok=True)
        log = d / "log.txt"
        model, scores = d / "model.h5", d / "scores.txt"
        a = [str(valid) if x == "VALID" else x for x in args]
        train = ["train", data, "-o", model, "--quiet", *a]
        if resumed:
            ck = d / "ck"
            cli(tree, [*train, "--checkpoint", ck, "--max-iter", "2"], log)
            cli(tree, [*train, "--checkpoint", ck, "--resume"], log)
        else:
            cli(tree, train, log)
        cli(tree, ["predict", model, data, "-o", scores], log)
        outs.append((model, scores))
    (m_old, s_old), (m_new, s_new) = outs
    diffs = h5_differences(m_old, m_new)
    if s_old.read_bytes() != s_new.read_bytes():
        try:
            size = _size(np.loadtxt(s_old, ndmin=1), np.loadtxt(s_new, ndmin=1))
        except ValueError:
            size = ""
        diffs.append("scores" + size)
    return diffs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", help="the commit to compare against")
    ap.add_argument("--threads", action="store_true", help="compare this tree on 2 threads against 1")
    ap.add_argument("--taskset", action="store_true", help="with --threads: the 1-thread side under taskset -c 0")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "MQ2008"), help="MQ2008 folder")
    ap.add_argument("--no-mq2008", action="store_true")
    ap.add_argument("--workdir", default="bench-out/bit-identity")
    args = ap.parse_args()
    if (args.old is None) == (not args.threads):
        ap.error("give --old COMMIT or --threads (one of them)")
    work = Path(args.workdir).resolve()
    global NUMBA_CACHE
    NUMBA_CACHE = work / "numba-cache"
    old = work / "old-tree"
    work.mkdir(parents=True, exist_ok=True)
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(machine_facts())
    if args.threads:
        two = {k: "2" for k in ("NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
        one = {} if args.taskset else {k: "1" for k in two}
        trees = {"old": (ROOT, two, []), "new": (ROOT, one, ["taskset", "-c", "0"] if args.taskset else [])}
        print(f"{rev.stdout.strip()} (working tree): 2 threads against "
              f"{'taskset -c 0' if args.taskset else 'NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1'}")
    else:
        if old.exists():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(old), args.old],
                       check=True, capture_output=True)
        trees = {"old": old, "new": ROOT}
        print(f"old: {args.old}; new: {rev.stdout.strip()} (working tree)")

    inputs = [("fixture", FIXTURE, FIXTURE)]
    failed = 0
    if not args.no_mq2008:
        fold = Path(args.data) / "Fold1"
        if not (fold / "train.txt.gz").exists():
            print(f"MQ2008 not found under {args.data}: Fold1 cases skipped (pass --data)")
        else:
            conv = {}
            for part in ("train", "vali"):
                for label, tree in trees.items():
                    out = work / label / f"mq2008-{part}.h5"
                    out.parent.mkdir(parents=True, exist_ok=True)
                    if out.exists():
                        out.unlink()
                    cli(tree, ["convert", fold / f"{part}.txt.gz", "-o", out, "--n-features", "46", "--quiet"],
                        work / label / "convert-log.txt")
                    conv[label, part] = out
                diffs = h5_differences(conv["old", part], conv["new", part])
                failed += bool(diffs)
                print(f"{'differs' if diffs else 'same':8s} convert MQ2008 Fold1 {part}" + (f": {diffs}" if diffs else ""))
            inputs.append(("Fold1", conv["new", "train"], conv["new", "vali"]))
    for where, data, valid in inputs:
        for name, a in CASES + RESUMED:
            t = time.perf_counter()
            diffs = run_case(trees, work / where, name, a, data, valid, resumed=(name, a) in RESUMED)
            failed += bool(diffs)
            line = f"{'differs' if diffs else 'same':8s} {where:8s} {name:24s} {time.perf_counter() - t:6.1f} s"
            print(line + (f": {', '.join(diffs[:6])}" if diffs else ""), flush=True)
    print(f"{failed} case(s) differ" if failed else "every model, score file and conversion is bit-identical")
    if not args.threads:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
