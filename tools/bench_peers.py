"""Side by side with the published peers (issue 17): start-up, linear RankSVM and exact kernel
RankSVM on MQ2008 Fold1, each tool as a whole process, with one independent objective for all.

    python tools/bench_peers.py                          # all three sections, 3 rounds
    python tools/bench_peers.py --repeats 1 --only startup,linear
    python tools/bench_peers.py --liblinear DIR/train --libsvm-ranksvm DIR/svm-train \\
        --svmrank DIR/svm_rank_learn                     # peers built by tools/peers/build.sh

Rows (every timed run is a fresh process; the rows of a section run interleaved over --repeats
rounds: tool A, tool B, ..., then again):

* startup: ``python -c pass`` (the interpreter), ``python -c "import numpy, numba"`` (the import
  floor), ``python -c "import streamrank"``, ``python -m streamrank --help``.
* linear (MQ2008 Fold1 train, C = 1, eps = 1e-3): ``streamrank train fold1.h5`` (converted once
  beforehand), streamrank from the text file (``convert`` then ``train``, two processes: seconds
  summed, peak RSS the larger), the LIBLINEAR ranksvm extension (``train -s 8``) on the text file,
  and SVMrank (``svm_rank_learn -c C*n_queries``) on it. SVMrank minimises a different function
  (L1 hinge, 1/2||w||^2 + C'/n_queries sum over pairs of max(0, 1 - w.(x_i - x_j))): its own
  objective is reported in a column of its own and is not comparable.
* exact (rbf, gamma = 2^-5, C = 1, eps = 1e-3): ``streamrank train --method exact`` against
  libsvm-ranksvm (``svm-train -s 0 -t 2``, OMP_NUM_THREADS=2, its kernel cache large enough for
  the whole of Q unless --libsvm-cache-mb says otherwise: with libsvm's default 100 MB it
  recomputes most of Q every Hessian product and takes well over ten times as long).

Seconds are wall-clock medians; peak RSS is the child's maximum resident set (``/usr/bin/time -f
%M``, else ``os.wait4``'s rusage), the largest over the rounds, in MB = 10^6 bytes. streamrank's
numba cache is warmed by one untimed run of each command first. The objectives are computed here,
after all timed runs, by one float64 function per problem from each tool's model file over the
explicit pairs of the text file (parsed here): the squared-hinge primal 1/2||w||^2 + C sum
max(0, 1 - w.(x_i - x_j))^2, and for the kernel models 1/2 beta^T K beta + C sum max(0, 1 -
(K beta)_i + (K beta)_j)^2 with K from the model's support rows, so "faster" can be read as "to the
same objective or lower". MQ2008 is read from ../shared/data/MQ2008 beside the repository
(--data); the peers are looked for in ../peers/ (tools/peers/build.sh's output) unless given.
"""

import argparse
import gzip
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _benchutil import REPO, machine_facts, table  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "MQ2008"
PEERS = REPO.parent / "peers"
DEFAULT_PEERS = {"liblinear": PEERS / "liblinear-ranksvm" / "train",
                 "libsvm_ranksvm": PEERS / "libsvm-ranksvm" / "svm-train",
                 "svmrank": PEERS / "svm_rank" / "svm_rank_learn"}
PEER_NAMES = {"liblinear": "LIBLINEAR ranksvm", "libsvm_ranksvm": "libsvm-ranksvm", "svmrank": "SVMrank"}
SECTIONS = ("startup", "linear", "exact")
C, EPS, GAMMA = 1.0, 1e-3, 2.0 ** -5
N_FEATURES = 46
GNU_TIME = "/usr/bin/time"


# --------------------------------------------------------------------------------------------------
# running one child: wall seconds and its own peak RSS

def _find_gnu_time():
    """/usr/bin/time when it is GNU time (-f %M -o FILE works), else None."""
    if not os.access(GNU_TIME, os.X_OK):
        return None
    try:
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "m"
            p = subprocess.run([GNU_TIME, "-f", "%M", "-o", str(f), "true"], capture_output=True, timeout=20)
            int(f.read_text().split()[-1])
        return GNU_TIME if p.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


TIME = _find_gnu_time()


def run_timed(cmd, log, env=None, timeout=1800.0):
    """Run ``cmd`` (a list) once, stdout and stderr to LOG.out / LOG.err.

    Returns {"wall_s", "rss_mb", "rc", "error", "out", "err"}; ``error`` is None when the command
    exited with 0 within ``timeout`` seconds, else a short reason. Never raises for the child.
    """
    log = Path(log)
    out, err, rssf = (log.with_name(log.name + s) for s in (".out", ".err", ".rss"))
    rssf.unlink(missing_ok=True)
    full = [TIME, "-f", "%M", "-o", str(rssf), *map(str, cmd)] if TIME else [*map(str, cmd)]
    timed_out = []

    def kill(p):
        timed_out.append(True)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    rss_kb = None
    with open(out, "w") as fo, open(err, "w") as fe:
        t0 = time.perf_counter()
        try:
            p = subprocess.Popen(full, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, cwd=REPO, env=env,
                                 start_new_session=True)
        except OSError as exc:
            return {"wall_s": None, "rss_mb": None, "rc": None, "error": f"cannot start: {exc}", "out": out,
                    "err": err}
        timer = threading.Timer(timeout, kill, (p,))
        timer.start()
        try:
            if TIME:
                rc = p.wait()
            else:
                # the bench process is small when children run (objectives come after), and a fresh
                # child's ru_maxrss is its own peak from exec on, plus at most that of the fork
                _, status, ru = os.wait4(p.pid, 0)
                rc = p.returncode = os.waitstatus_to_exitcode(status)
                rss_kb = ru.ru_maxrss
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
    if TIME:
        try:
            rss_kb = int(rssf.read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            rss_kb = None
    error = None
    if timed_out:
        error = f"timed out after {timeout:.0f} s"
    elif rc != 0:
        tail = [ln for ln in err.read_text(errors="replace").splitlines() if ln.strip()]
        error = f"exit status {rc}" + (f": {tail[-1][:160]}" if tail else "")
    return {"wall_s": wall, "rss_mb": None if rss_kb is None else rss_kb * 1024 / 1e6, "rc": rc, "error": error,
            "out": out, "err": err}


def run_steps(steps, log, timeout):
    """Run (name, cmd, env) steps in order as one measurement: seconds summed, peak RSS the largest."""
    total, rss, res = 0.0, 0.0, None
    for name, cmd, env in steps:
        res = run_timed(cmd, f"{log}.{name}", env=env, timeout=timeout)
        if res["error"]:
            res["error"] = f"{name}: {res['error']}"
            return res
        total += res["wall_s"]
        rss = max(rss, res["rss_mb"] or 0.0)
    return dict(res, wall_s=total, rss_mb=rss or None)


def last_json(path):
    """The last line of a file that parses as a JSON object, or None."""
    try:
        for ln in reversed(Path(path).read_text(errors="replace").splitlines()):
            if ln.startswith("{"):
                return json.loads(ln)
    except (OSError, ValueError):
        pass
    return None


# --------------------------------------------------------------------------------------------------
# the data, parsed here, and the objectives, all in float64

def read_letor(path, n_features=N_FEATURES):
    """(X float64 (n, d), y float64 (n,), qid int64 (n,)) of a LETOR / SVMlight text file with qid:."""
    import numpy as np
    ys, qs, rows, cols, vals = [], [], [], [], []
    with open(path) as f:
        for r, line in enumerate(f):
            t = line.split("#", 1)[0].split()
            if not t:
                continue
            ys.append(float(t[0]))
            if not t[1].startswith("qid:"):
                raise ValueError(f"{path}: line {r + 1} has no qid:")
            qs.append(int(t[1][4:]))
            for kv in t[2:]:
                k, v = kv.split(":")
                rows.append(len(ys) - 1)
                cols.append(int(k) - 1)
                vals.append(float(v))
    d = max(n_features, max(cols) + 1 if cols else 0)
    X = np.zeros((len(ys), d))
    X[np.array(rows, np.int64), np.array(cols, np.int64)] = vals
    return X, np.array(ys), np.array(qs, np.int64)


def pairs_of(y, qid):
    """(I, J): every pair of rows of the same query with y[I] > y[J]."""
    import numpy as np
    order = np.argsort(qid, kind="stable")
    bounds = np.flatnonzero(np.diff(qid[order])) + 1
    I, J = [], []
    for idx in np.split(order, bounds):
        a, b = np.nonzero(y[idx][:, None] > y[idx][None, :])
        I.append(idx[a])
        J.append(idx[b])
    return np.concatenate(I), np.concatenate(J)


def linear_objective(w, X, I, J, C, loss="squared"):
    """1/2||w||^2 + C sum over pairs of max(0, 1 - w.(x_i - x_j))^2 (loss="l1": not squared)."""
    import numpy as np
    w = np.asarray(w, np.float64)
    s = X @ w
    m = np.maximum(0.0, 1.0 - (s[I] - s[J]))
    return float(0.5 * w @ w + C * (np.sum(m * m) if loss == "squared" else np.sum(m)))


def _rbf_times(A, S, beta, gamma, block=1024):
    """K(A, S) @ beta for K(a, s) = exp(-gamma ||a - s||^2), in row blocks of A."""
    import numpy as np
    s2 = np.einsum("ij,ij->i", S, S)
    out = np.empty(A.shape[0])
    for r in range(0, A.shape[0], block):
        a = A[r:r + block]
        d2 = np.einsum("ij,ij->i", a, a)[:, None] + s2[None, :] - 2.0 * (a @ S.T)
        np.maximum(d2, 0.0, out=d2)
        d2 *= -gamma
        np.exp(d2, out=d2)
        out[r:r + block] = d2 @ beta
    return out


def kernel_objective(beta, S, gamma, X, I, J, C):
    """1/2 beta^T K(S, S) beta + C sum over pairs max(0, 1 - f_i + f_j)^2, f = K(X, S) beta (rbf)."""
    import numpy as np
    beta = np.asarray(beta, np.float64)
    f = _rbf_times(X, S, beta, gamma)
    reg = float(beta @ _rbf_times(S, S, beta, gamma))
    m = np.maximum(0.0, 1.0 - (f[I] - f[J]))
    return 0.5 * reg + C * float(np.sum(m * m))


# --------------------------------------------------------------------------------------------------
# the models, read here

def read_streamrank_model(path, expect):
    """(w or beta, support rows or None, params) of a streamrank model file, read with h5py."""
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        norm = f["normalize"].attrs.get("kind", "none")
        norm = norm.decode() if isinstance(norm, bytes) else str(norm)
        if norm != "none":
            raise ValueError(f"{path}: normalize = {norm}, the bench expects none")
        if "input_features" in f.attrs:
            raise ValueError(f"{path}: a feature-subset model, the bench expects all features")
        fm = f["feature_map"]
        kind = fm.attrs["kind"]
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind != expect:
            raise ValueError(f"{path}: feature map {kind}, expected {expect}")
        w = f["w"][:].astype(np.float64)
        if kind == "identity":
            return w, None, {}
        params = json.loads(fm.attrs["params"])
        return w, fm["support"][:].astype(np.float64), params


def _sparse_line(tokens, d):
    import numpy as np
    x = np.zeros(d)
    for kv in tokens:
        k, v = kv.split(":")
        if int(k) >= 1:
            x[int(k) - 1] = float(v)
    return x


def read_liblinear_model(path, d):
    import numpy as np
    text = Path(path).read_text()
    head, _, body = text.partition("\nw\n")
    if "solver_type L2R_L2LOSS_RANKSVM" not in head or not body:
        raise ValueError(f"{path}: not a LIBLINEAR -s 8 model")
    bias = [float(ln.split()[1]) for ln in head.splitlines() if ln.startswith("bias ")]
    if bias and bias[0] >= 0:
        raise ValueError(f"{path}: the model has a bias term (-B {bias[0]:g})")
    w = np.array([float(v) for v in body.split()])
    return np.pad(w, (0, max(0, d - w.size)))[:max(d, w.size)]


def read_svmrank_model(path, d):
    last = [ln for ln in Path(path).read_text().splitlines() if ln.strip()][-1]
    return _sparse_line(last.split("#", 1)[0].split()[1:], d)


def read_libsvm_model(path, d):
    """(coef, SV rows, gamma) of a libsvm-ranksvm rbf model: f(x) = sum coef K(x, sv)."""
    import numpy as np
    text = Path(path).read_text()
    head, _, body = text.partition("\nSV\n")
    h = dict(ln.split(None, 1) for ln in head.splitlines() if ln.strip())
    if h.get("kernel_type", "").strip() != "rbf":
        raise ValueError(f"{path}: kernel_type {h.get('kernel_type')}, expected rbf")
    coef, S = [], []
    for ln in body.splitlines():
        t = ln.split()
        if t:
            coef.append(float(t[0]))
            S.append(_sparse_line(t[1:], d))
    return np.array(coef), np.array(S).reshape(len(S), d), float(h["gamma"])


# --------------------------------------------------------------------------------------------------

def peer_path(given, key):
    """(path or None, reason when None)."""
    p = Path(given) if given else DEFAULT_PEERS[key]
    if not given and not p.exists():
        return None, f"not available ({p} not found; pass --{key.replace('_', '-')} PATH)"
    if not p.is_file() or not os.access(p, os.X_OK):
        return None, f"not available ({p} is not an executable file)"
    return p, None


def peer_version(path):
    v = path.parent / "VERSION"
    try:
        return [ln.strip() for ln in v.read_text(errors="replace").splitlines()[:2]]
    except OSError:
        return [f"(no VERSION file beside {path})"]


def find_text(fold, stem):
    for name in (f"{stem}.txt", f"{stem}.txt.gz"):
        if (fold / name).is_file():
            return fold / name
    return None


def plain_copy(src, dst):
    """``src`` (text or .gz) written uncompressed to ``dst``, for the peers (and streamrank's text row)."""
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rb") as fi, open(dst, "wb") as fo:
        shutil.copyfileobj(fi, fo, 1 << 20)
    return dst


def summarise(row, results):
    ok = [r for r in results if not r["error"]]
    bad = [r for r in results if r["error"]]
    if ok:
        walls = [r["wall_s"] for r in ok]
        row["median"] = statistics.median(walls)
        row["runs"] = " ".join(f"{x:.2f}" for x in walls)
        rss = [r["rss_mb"] for r in ok if r["rss_mb"] is not None]
        row["rss"] = max(rss) if rss else None
    if bad:
        note = f"{len(bad)} of {len(results)} runs failed: {bad[-1]['error']}"
        row["note"] = f"{row['note']}; {note}" if row.get("note") else note
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help="MQ2008's folder (Fold1/train.txt[.gz])")
    ap.add_argument("--liblinear", default=None, help="the LIBLINEAR ranksvm extension's train binary "
                                                      f"(default {DEFAULT_PEERS['liblinear']} if present)")
    ap.add_argument("--libsvm-ranksvm", dest="libsvm_ranksvm", default=None,
                    help=f"libsvm-ranksvm's svm-train (default {DEFAULT_PEERS['libsvm_ranksvm']} if present)")
    ap.add_argument("--svmrank", default=None, help=f"SVMrank's svm_rank_learn (default {DEFAULT_PEERS['svmrank']} "
                                                    "if present)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated subset of startup,linear,exact")
    ap.add_argument("--workdir", default=None, help="where data copies, models and logs go (default: a temporary "
                                                    "directory, removed at the end)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed for one child (default 1800)")
    ap.add_argument("--libsvm-cache-mb", default="whole",
                    help="libsvm-ranksvm's -m: 'whole' (default: enough for all of Q, as streamrank keeps it) or MB")
    ap.add_argument("--omp-threads", type=int, default=2, help="OMP_NUM_THREADS for libsvm-ranksvm (default 2)")
    args = ap.parse_args()
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in only if s not in SECTIONS]
    if unknown or not only:
        ap.error(f"--only takes a comma-separated subset of {','.join(SECTIONS)} (got {args.only!r})")
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")

    import numpy as np

    py = sys.executable
    print(machine_facts())
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores); peak RSS by "
          f"{TIME + ' -f %M' if TIME else 'os.wait4 rusage'}"
          + ("; PYTHONDONTWRITEBYTECODE is set (start-up reads existing .pyc files only)"
             if os.environ.get("PYTHONDONTWRITEBYTECODE") else ""))
    peers = {}
    for key in DEFAULT_PEERS:
        path, why = peer_path(getattr(args, key), key)
        peers[key] = (path, why)
        print(f"{PEER_NAMES[key]}: " + (f"{path}: " + "; ".join(peer_version(path)) if path else why))

    keep = args.workdir is not None
    work = Path(args.workdir) if keep else Path(tempfile.mkdtemp(prefix="bench-peers-"))
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    models = work / "models"
    for d in (logs, models):
        d.mkdir(exist_ok=True)
    rows, notes, status = [], [], 0
    env = dict(os.environ)

    # ---------------------------------------------------------------- start-up
    if "startup" in only:
        cmds = [("python -c pass", [py, "-c", "pass"]),
                ('python -c "import numpy, numba" (floor)', [py, "-c", "import numpy, numba"]),
                ('python -c "import streamrank"', [py, "-c", "import streamrank"]),
                ("python -m streamrank --help", [py, "-m", "streamrank", "--help"])]
        for n, (_, cmd) in enumerate(cmds):  # untimed: page cache, numba's own first-import work
            run_timed(cmd, logs / f"startup{n}.warm", env=env, timeout=args.timeout)
        res = {n: [] for n in range(len(cmds))}
        for r in range(args.repeats):
            for n, (_, cmd) in enumerate(cmds):
                res[n].append(run_timed(cmd, logs / f"startup{n}.r{r}", env=env, timeout=args.timeout))
        for n, (what, _) in enumerate(cmds):
            row = {"section": "startup", "tool": what}
            summarise(row, res[n])
            rows.append(row)

    # ---------------------------------------------------------------- MQ2008
    data = None
    if "linear" in only or "exact" in only:
        fold = Path(args.data) / "Fold1"
        src = find_text(fold, "train") if fold.is_dir() else None
        if src is None:
            msg = (f"MQ2008 not found: no {fold}/train.txt or train.txt.gz (LETOR 4.0 text); pass --data DIR, "
                   f"the folder holding Fold1..Fold5")
            print(msg)
            status = 2
            for sec in ("linear", "exact"):
                if sec in only:
                    rows.append({"section": sec, "tool": "(all)", "note": "skipped: MQ2008 not found"})
        else:
            ddir = work / "data"
            ddir.mkdir(exist_ok=True)
            text = plain_copy(src, ddir / "train.txt")
            h5 = ddir / "fold1.h5"
            h5.unlink(missing_ok=True)
            conv = run_timed([py, "-m", "streamrank", "convert", text, "-o", h5, "--json"], logs / "convert.once",
                             env=env, timeout=args.timeout)
            if conv["error"]:
                print(f"streamrank convert of {text} failed ({conv['error']}); streamrank rows will fail too")
            X, y, qid = read_letor(text)
            I, J = pairs_of(y, qid)
            n_q = len(np.unique(qid))
            data = {"text": text, "h5": h5, "X": X, "I": I, "J": J, "n_q": n_q}
            print(f"MQ2008 Fold1 train ({src}): {X.shape[0]:,} rows, {n_q} queries, {X.shape[1]} features, "
                  f"{I.size:,} pairs; copied uncompressed to {text}")
            del X, y, qid, I, J

    def sr_train(h5_path, model, extra=()):
        return [py, "-m", "streamrank", "train", h5_path, "-o", model, "--C", f"{C:g}", "--tol", f"{EPS:g}",
                *extra, "--json"]

    # each tool: (row label, key, steps(r) -> [(name, cmd, env)], model path(r), note, kind)
    def run_section(section, tools):
        res = {t[0]: [] for t in tools}
        for r in range(args.repeats):
            for label, key, steps, model_of, _, _ in tools:
                if steps is None:
                    continue
                for f in (model_of(r),):
                    Path(f).unlink(missing_ok=True)
                res[label].append(run_steps(steps(r), logs / f"{section}.{key}.r{r}", args.timeout))
                res[label][-1]["model"] = model_of(r)
        out = []
        for label, key, steps, model_of, note, kind in tools:
            row = {"section": section, "tool": label, "note": note, "key": key, "kind": kind}
            if steps is None:
                out.append(row)
                continue
            row["ok"] = summarise(row, res[label])
            out.append(row)
        return out

    # ---------------------------------------------------------------- linear
    if "linear" in only and data:
        text, h5 = data["text"], data["h5"]
        # untimed: numba's cache loaded (or written) once, as every timed child then finds it
        w = run_timed(sr_train(h5, models / "linear.warm.h5"), logs / "linear.warm", env=env, timeout=args.timeout)
        if w["error"]:
            print(f"streamrank's untimed warm-up run failed: {w['error']}")
        conv_h5 = work / "data" / "converted.h5"

        def text_steps(r):
            conv_h5.unlink(missing_ok=True)  # a fresh conversion every round (convert resumes otherwise)
            return [("convert", [py, "-m", "streamrank", "convert", text, "-o", conv_h5, "--json"], env),
                    ("train", sr_train(conv_h5, models / f"sr_text.r{r}.h5"), env)]

        tools = [("streamrank (HDF5)", "sr_h5", lambda r: [("train", sr_train(h5, models / f"sr_h5.r{r}.h5"), env)],
                  lambda r: models / f"sr_h5.r{r}.h5", "", "streamrank"),
                 ("streamrank (text: convert + train)", "sr_text", text_steps,
                  lambda r: models / f"sr_text.r{r}.h5", "", "streamrank")]
        ll, why = peers["liblinear"]
        tools.append(("LIBLINEAR ranksvm -s 8", "liblinear",
                      (lambda r: [("train", [ll, "-s", "8", "-c", f"{C:g}", "-e", f"{EPS:g}", text,
                                             models / f"liblinear.r{r}.model"], env)]) if ll else None,
                      lambda r: models / f"liblinear.r{r}.model", why or "", "liblinear"))
        sr, why = peers["svmrank"]
        c_sr = C * data["n_q"]
        tools.append((f"SVMrank -c {c_sr:g} (C x queries)", "svmrank",
                      (lambda r: [("learn", [sr, "-c", f"{c_sr:g}", text, models / f"svmrank.r{r}.model"], env)])
                      if sr else None,
                      lambda r: models / f"svmrank.r{r}.model",
                      why or "L1 hinge: a different objective, not comparable", "svmrank"))
        rows.extend(run_section("linear", tools))

    # ---------------------------------------------------------------- exact
    if "exact" in only and data:
        h5, text = data["h5"], data["text"]
        exact = ("--method", "exact", "--kernel", "rbf", "--gamma", f"{GAMMA:g}")
        w = run_timed(sr_train(h5, models / "exact.warm.h5", exact), logs / "exact.warm", env=env,
                      timeout=args.timeout)
        if w["error"]:
            print(f"streamrank's untimed exact warm-up run failed: {w['error']}")
        n = data["X"].shape[0]
        cache_mb = (math.ceil(8.0 * n * n / 2 ** 20) + 1 if args.libsvm_cache_mb == "whole"
                    else float(args.libsvm_cache_mb))
        tools = [("streamrank --method exact", "sr_exact",
                  lambda r: [("train", sr_train(h5, models / f"sr_exact.r{r}.h5", exact), env)],
                  lambda r: models / f"sr_exact.r{r}.h5", "", "streamrank")]
        ls, why = peers["libsvm_ranksvm"]
        omp_env = dict(env, OMP_NUM_THREADS=str(args.omp_threads))
        tools.append((f"libsvm-ranksvm -m {cache_mb:g} (OMP {args.omp_threads})", "libsvm",
                      (lambda r: [("train", [ls, "-s", "0", "-t", "2", "-g", f"{GAMMA:g}", "-c", f"{C:g}", "-e",
                                             f"{EPS:g}", "-m", f"{cache_mb:g}", text,
                                             models / f"libsvm.r{r}.model"], omp_env)]) if ls else None,
                      lambda r: models / f"libsvm.r{r}.model", why or "", "libsvm"))
        rows.extend(run_section("exact", tools))

    # ---------------------------------------------------------------- objectives, after every timed run
    if data:
        X, I, J = data["X"], data["I"], data["J"]
        d = X.shape[1]
        for row in rows:
            if not row.get("ok"):
                continue
            objs, own, l1 = [], [], []
            for res in row["ok"]:
                try:
                    if row["kind"] == "streamrank":
                        expect = "exact" if row["section"] == "exact" else "identity"
                        w, S, params = read_streamrank_model(res["model"], expect)
                        if row["section"] == "exact":
                            if params.get("kernel") != "rbf" or not math.isclose(params.get("gamma"), GAMMA):
                                raise ValueError(f"{res['model']}: kernel {params.get('kernel')} gamma "
                                                 f"{params.get('gamma')}")
                            objs.append(kernel_objective(w, S, GAMMA, X, I, J, C))
                        else:
                            objs.append(linear_objective(w, X, I, J, C))
                        j = last_json(res["out"])
                        if j and "objective" in j:
                            own.append(j["objective"])
                    elif row["kind"] == "liblinear":
                        objs.append(linear_objective(read_liblinear_model(res["model"], d), X, I, J, C))
                    elif row["kind"] == "svmrank":
                        l1.append(linear_objective(read_svmrank_model(res["model"], d), X, I, J, C, loss="l1"))
                    elif row["kind"] == "libsvm":
                        coef, S, g = read_libsvm_model(res["model"], d)
                        if not math.isclose(g, GAMMA):
                            raise ValueError(f"{res['model']}: gamma {g}")
                        objs.append(kernel_objective(coef, S, GAMMA, X, I, J, C))
                except (OSError, ValueError, KeyError, IndexError) as exc:
                    row["note"] = (row.get("note", "") + "; " if row.get("note") else "") + f"model unreadable: {exc}"
            if objs:
                row["objective"] = statistics.median(objs)
                if max(objs) - min(objs) > 1e-12 * abs(row["objective"]):
                    notes.append(f"{row['tool']}: the objective changed between rounds: "
                                 + ", ".join(f"{o:.6f}" for o in objs) + " (the table shows the median)")
            if l1:
                row["l1"] = statistics.median(l1)
            if own:
                rel = abs(own[-1] - objs[-1]) / abs(objs[-1])
                why = (" (its data are float32 in HDF5, the text's are read here in float64)"
                       if row["section"] == "linear" else
                       " (it reports the function it minimises, with Q' = float32(K) + jitter I in place of K: "
                       "streamrank/cache/kernel_cache.py)")
                notes.append(f"{row['tool']}: its own reported objective {own[-1]:.6f}, this bench's "
                             f"{objs[-1]:.6f}, relative difference {rel:.1e}{why}")
        for sec in ("linear", "exact"):
            comp = [r for r in rows if r["section"] == sec and r.get("objective") is not None]
            if comp:
                low = min(r["objective"] for r in comp)
                for r in comp:
                    r["rel"] = (r["objective"] - low) / abs(low)
            timed = [r for r in rows if r["section"] == sec and r.get("median") is not None
                     and r.get("kind") != "svmrank"]
            if timed:
                fastest = min(r["median"] for r in timed)
                for r in timed:
                    r["x_fastest"] = r["median"] / fastest
    for r in rows:
        if r.get("median") is None and not r.get("note"):
            r["note"] = "no result"

    print()
    table(rows, [("section", "section", None), ("tool", "tool", None), ("median", "median s", "{:.2f}"),
                 ("runs", "each run s", None), ("x_fastest", "x fastest", "{:.2f}"), ("rss", "peak RSS MB", "{:,.0f}"),
                 ("objective", "sq-hinge primal objective", "{:.4f}"), ("rel", "rel. to lowest", "{:.2e}"),
                 ("l1", "L1-hinge objective (own loss)", "{:.4f}"), ("note", "note", None)])
    print()
    if "linear" in only and data:
        print(f"linear: MQ2008 Fold1 train, C = {C:g}, eps = {EPS:g} (||g|| <= eps ||g(0)||); streamrank: train "
              f"DATA -o MODEL --C {C:g} --tol {EPS:g} --json (DATA converted once, untimed, or, in the text row, "
              f"convert TEXT -o DATA then train: two processes, seconds summed, peak RSS the larger); LIBLINEAR: "
              f"train -s 8 -c {C:g} -e {EPS:g} TEXT MODEL; SVMrank: svm_rank_learn -c {C * data['n_q']:g} TEXT "
              f"MODEL, which minimises 1/2||w||^2 + (C'/{data['n_q']} queries) sum of L1 hinges = the L1-hinge "
              f"objective at C = {C:g}: a different function, so it has no squared-hinge objective here")
    if "exact" in only and data:
        print(f"exact: rbf gamma = {GAMMA:g}, C = {C:g}, eps = {EPS:g}; streamrank: train DATA --method exact --kernel "
              f"rbf --gamma {GAMMA:g}; libsvm-ranksvm: svm-train -s 0 -t 2 -g {GAMMA:g} -c {C:g} -e {EPS:g} -m MB "
              f"TEXT MODEL with OMP_NUM_THREADS={args.omp_threads}; objective 1/2 beta^T K beta + C sum max(0, 1 - "
              f"(K beta)_i + (K beta)_j)^2 from each model's coefficients and support rows (K in float64)")
    if data:
        print("objectives: computed by this bench in float64 from each model file over the explicit pairs of the "
              "text file; rel. to lowest = (f - lowest f of the section) / lowest f")
    for n in notes:
        print("note: " + n)
    print(f"seconds: wall-clock medians of {args.repeats} round(s), interleaved; peak RSS: the largest over the "
          f"rounds, MB = 10^6 bytes; x fastest: median over the section's fastest (SVMrank left out); the machine "
          f"may be shared: rerun when it is quiet")
    if keep:
        print(f"models and logs kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print("produced by: python tools/bench_peers.py " + " ".join(sys.argv[1:]))
    return status


if __name__ == "__main__":
    sys.exit(main())
