"""Side by side with the published peers (issue 17): start-up, linear RankSVM and exact kernel
RankSVM on MQ2008 Fold1, linear RankSVM on a generated 1M-row MSLR-like set, conversion speed,
Nystroem pipelines and gradient-boosted trees, each tool as a whole process, with one independent
objective per problem.

    python tools/bench_peers.py                          # startup,linear,exact (the default), 3 rounds
    python tools/bench_peers.py --repeats 1 --only startup,linear
    python tools/bench_peers.py --only startup,linear,exact,big,convert,nystroem,gbdt   # everything
    python tools/bench_peers.py --only big,convert,nystroem,gbdt --big-scale 0.044 --repeats 1
                                                         # the new sections, quickly (~100k rows)
    python tools/bench_peers.py --liblinear DIR/train --libsvm-ranksvm DIR/svm-train \\
        --svmrank DIR/svm_rank_learn                     # peers built by tools/peers/build.sh

The default --only stays startup,linear,exact; big, convert, nystroem and gbdt run when named. Pass
--workdir DIR to keep (and reuse) the generated data: big, convert and gbdt share one text file,
generated once (~1.7 GB at the default --big-scale) and converted once.

Rows (every timed run is a fresh process; the rows of a section run interleaved over --repeats
rounds: tool A, tool B, ..., then again; a peer not found is a row saying "not available"):

* startup: ``python -c pass`` (the interpreter), ``python -c "import numpy, numba"`` (the import
  floor), ``python -c "import streamrank"``, ``python -m streamrank --help``.
* firstuse: a new venv (``python -m venv``, then ``pip install`` of this checkout, timed once; kept
  in --workdir and reused), then in every round, each run with an empty numba cache of its own
  (``NUMBA_CACHE_DIR``): ``streamrank demo``, ``streamrank train fold1.h5 --C 1`` and ``streamrank
  select-features fold1.h5 -k 10 --importance map --tradeoff 0.5`` (MQ2008 Fold1, converted
  beforehand; ``--firstuse-commands`` picks some of demo, train, select), as a user's first run after installing (numba compiles every kernel the
  command needs; the first-use helper, ``streamrank/_native/warmup.py``, compiles half of them in
  a second process), the same with the helper off (``STREAMRANK_NO_WARMUP=1``), and a second run
  on the now warm cache.
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
* big (a generated MSLR-WEB30K-like text set: streamrank.io.synthetic's ``mslr30k`` preset, seed 0,
  scale --big-scale, default 0.4405 = 1,000,065 rows x 136 features, 8,334 queries; C = 1, eps =
  1e-3): ``streamrank train big.h5`` (converted once beforehand; the solver's own seconds, --json
  ``seconds``, beside the whole process), the same with ``--memory-budget`` half the size of X in
  the HDF5 file, streamrank from the text (convert + train), and LIBLINEAR ``train -s 8`` on the
  text, a whole run. Ratios printed: streamrank's solve (and whole train process) over LIBLINEAR's
  whole run, text-to-model over LIBLINEAR's whole run, and the peak RSS ratios.
* convert: ``streamrank convert big.txt -o x.h5`` on the big text and on its first --slice-mb MB
  (cut at a query boundary), against scikit-learn's ``load_svmlight_file(..., query_id=True)`` in
  a process of its own on the same head, and on the whole file only when that is at most 4 times
  the head and the head's time and RSS, scaled, stay under 3 minutes and 4 GB (--sklearn-full yes
  forces it: at the default size it took 766 s and 2.3 GB, its time growing faster than the file);
  MB/s of text and peak RSS.
* nystroem (MQ2008 Fold1, rbf gamma = 2^-5, m = 2000 landmarks, C = 1, eps = 1e-3, end to end):
  ``streamrank train fold1.h5 --method nystroem --components 2000`` against scikit-learn's
  ``Nystroem(kernel="rbf", gamma=2^-5, n_components=2000, random_state=0)`` fitted on the training
  rows, the mapped rows written with qid by ``dump_svmlight_file`` (one process), then LIBLINEAR
  ``train -s 8`` on that file: the two timed apart and summed. Each tool's objective is on its own
  feature map (not comparable); the comparable figure is the test NDCG@10 on Fold1's test.txt
  (streamrank: ``streamrank predict``; scikit-learn: its transform times LIBLINEAR's w).
* gbdt: LightGBM ``LGBMRanker`` (lambdarank, 100 trees, num_threads=2) and XGBoost ``XGBRanker``
  (rank:ndcg, 100 trees, n_jobs=2), defaults otherwise, each a process reading the big set's HDF5
  with h5py (or its first --gbdt-rows rows), fitting and scoring a held-out generated test set
  (same preset, seed 0, part ``test``: other queries of the same relevance model; --test-scale,
  default 0.05 = 113,515 rows), beside streamrank linear (``train``) on the same rows: time, peak
  RSS and test NDCG@10.

Seconds are wall-clock medians; peak RSS is the child's maximum resident set (``/usr/bin/time -f
%M``, else ``os.wait4``'s rusage), the largest over the rounds, in MB = 10^6 bytes. streamrank's
numba cache is warmed by one untimed run of each command first (big, convert and gbdt: on a small
set of the same preset). The objectives are computed here, after the section's timed runs, by one
float64 function per problem from each tool's model file: the squared-hinge primal 1/2||w||^2 + C
sum max(0, 1 - w.(x_i - x_j))^2, and for the kernel models 1/2 beta^T K beta + C sum max(0, 1 -
(K beta)_i + (K beta)_j)^2 with K from the model's support rows, so "faster" can be read as "to the
same objective or lower". MQ2008's are over the explicit pairs of the text file (parsed here);
big's from the text parsed in float64 in 64 MB blocks (scikit-learn's parser) and a dense margin
matrix per query (a few hundred rows at most), never the list of pairs; nystroem's with each
model's own phi. NDCG@10 is one function here, LETOR 4.0's Eval-Score-4.0.pl: gain 2^rel - 1,
positions 1-2 undiscounted then 1/log2(i), ties in file order, 0 for a query with fewer than 10
documents or without a relevant one (it agrees with streamrank's ``letor4`` evaluation to the last
bits). MQ2008 is read from ../shared/data/MQ2008 beside the repository (--data); the peers are
looked for in ../peers/ (tools/peers/build.sh's output) unless given.
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
SECTIONS = ("startup", "firstuse", "linear", "exact", "big", "convert", "nystroem", "gbdt", "export")
DEFAULT_ONLY = ("startup", "firstuse", "linear", "exact")  # the others on request: --only big,convert,...
BIG_PRESET, BIG_D = "mslr30k", 136  # streamrank.io.synthetic's MSLR-WEB30K-like preset
BIG_SCALE = 0.4405  # 1,000,065 rows, 8,334 queries, ~1.7 GB of text
NYS_M = 2000  # Nystroem landmarks
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
    """Run (name, cmd, env) steps in order as one measurement: seconds summed, peak RSS the largest.

    ``steps`` of the result: {name: (wall seconds, peak RSS MB, its stdout file)} of every step.
    """
    total, rss, res, parts = 0.0, 0.0, None, {}
    for name, cmd, env in steps:
        res = run_timed(cmd, f"{log}.{name}", env=env, timeout=timeout)
        if res["error"]:
            res["error"] = f"{name}: {res['error']}"
            return res
        parts[name] = (res["wall_s"], res["rss_mb"], res["out"])
        total += res["wall_s"]
        rss = max(rss, res["rss_mb"] or 0.0)
    return dict(res, wall_s=total, rss_mb=rss or None, steps=parts)


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


def solver_trace(err_path):
    """(f, seconds since the solve began) of every solver iteration line in a log."""
    import re
    out = []
    try:
        for ln in Path(err_path).read_text(errors="replace").splitlines():
            m = re.search(r"iter\s+\d+ f ([-+0-9.eE]+) .* ([0-9.]+)s$", ln)
            if m:
                out.append((float(m[1]), float(m[2])))
    except OSError:
        pass
    return out


def first_time_at(trace, target, setup):
    """Process seconds when the trace's objective first was at most ``target`` (the log's
    seconds are since the solve began: ``setup`` is added); None if never."""
    for f, t in trace:
        if f <= target:
            return setup + t
    return None


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


# --------------------------------------------------------------------------------------------------
# the sections on generated data (big, convert, gbdt) and nystroem: helpers

def generated_text(path, preset, scale, part="train"):
    """Write ``path`` with streamrank.io.synthetic (seed 0) unless it is there; returns (path, bytes)."""
    path = Path(path)
    if not path.exists():
        from streamrank.io.synthetic import write_text
        print(f"generating {path} ({preset}, scale {scale:g}, seed 0, part {part}) ...", flush=True)
        t = time.perf_counter()
        write_text(path, preset=preset, scale=scale, seed=0, part=part)
        print(f"  {path.stat().st_size / 1e6:,.0f} MB in {time.perf_counter() - t:.1f} s", flush=True)
    return path, path.stat().st_size


def head_lines(src, dst, nbytes=None, rows=None):
    """The first ``nbytes`` bytes (cut at a line end) or the first ``rows`` lines of ``src`` written to
    ``dst``, cut further back to the last query boundary (qid runs are contiguous in generated data)."""
    dst = Path(dst)
    if dst.exists():
        return dst
    with open(src, "rb") as f:
        if nbytes is not None:
            data = f.read(nbytes)
            lines = data[:data.rfind(b"\n") + 1].splitlines(keepends=True)
        else:
            lines = []
            for ln in f:
                lines.append(ln)
                if len(lines) >= rows:
                    break
    if lines:
        nxt = None
        with open(src, "rb") as f:  # the line after the cut: is the last query complete?
            f.seek(sum(map(len, lines)))
            nxt = f.readline()
        last_q = lines[-1].split()[1]
        if nxt and nxt.split()[1] == last_q:
            while lines and lines[-1].split()[1] == last_q:
                lines.pop()
    tmp = dst.with_name(dst.name + ".tmp")
    with open(tmp, "wb") as fo:
        fo.writelines(lines)
    tmp.rename(dst)
    return dst


def text_scores(path, W, n_features, block=64 << 20):
    """(S = X @ W float64 (n, k), y, qid) with X parsed here from the text file in float64, in blocks of
    lines with scikit-learn's SVMlight parser (never the whole X in memory)."""
    import io
    import numpy as np
    from sklearn.datasets import load_svmlight_file
    W = np.asarray(W, np.float64).reshape(n_features, -1)
    ss, ys, qs = [], [], []
    rest = b""
    with open(path, "rb") as f:
        while True:
            buf = f.read(block)
            data = rest + buf
            if buf:
                cut = data.rfind(b"\n") + 1
                chunk, rest = data[:cut], data[cut:]
            else:
                chunk, rest = data, b""
            if chunk.strip():
                X, y, q = load_svmlight_file(io.BytesIO(chunk), n_features=n_features, query_id=True,
                                             zero_based=False, dtype=np.float64)
                ss.append(np.asarray(X @ W))
                ys.append(y)
                qs.append(q)
            if not buf:
                break
    return np.concatenate(ss), np.concatenate(ys), np.concatenate(qs).astype(np.int64)


def query_runs(qid):
    """(order or None, starts, ends) of the queries: rows in file order when each query's rows are
    contiguous (no sort), else a stable sort by qid."""
    import numpy as np
    starts = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1]]) if qid.size else np.zeros(0, np.int64)
    order = None
    if starts.size != np.unique(qid).size:
        order = np.argsort(qid, kind="stable")
        q = qid[order]
        starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
    return order, starts, np.r_[starts[1:], qid.size].astype(np.int64)


def pair_hinge_sums(S, y, qid):
    """(sum over pairs of max(0, 1 - (s_i - s_j))^2 for every column of S, number of pairs): per
    query, a dense n_q x n_q margin matrix (LETOR queries have ~10^2 rows), never the list of pairs."""
    import numpy as np
    S = np.asarray(S, np.float64)
    S = S.reshape(S.shape[0], -1)
    order, starts, ends = query_runs(qid)
    if order is not None:
        S, y = S[order], y[order]
    tot, n_pairs = np.zeros(S.shape[1]), 0
    for a, b in zip(starts, ends):
        yy = y[a:b]
        mask = yy[:, None] > yy[None, :]
        k = int(np.count_nonzero(mask))
        if not k:
            continue
        n_pairs += k
        s = S[a:b]
        m = 1.0 - (s[:, None, :] - s[None, :, :])[mask]  # (pairs, columns)
        np.maximum(m, 0.0, out=m)
        tot += np.einsum("pk,pk->k", m, m)
    return tot, n_pairs


def ndcg_at(scores, y, qid, k=10):
    """Mean NDCG@k over queries as LETOR 4.0's Eval-Score-4.0.pl computes it: gain 2^rel - 1;
    positions 1 and 2 undiscounted, position i >= 3 weighted 1/log2(i); ties in file order (a
    stable sort by descending score); NDCG@k = 0 for a query with fewer than k documents (the
    script has no NDCG beyond a query's length) and for a query without a relevant document; the
    mean over all queries."""
    import numpy as np
    scores, y = np.asarray(scores, np.float64), np.asarray(y, np.float64)
    order, starts, ends = query_runs(qid)
    if order is not None:
        scores, y = scores[order], y[order]
    disc = np.r_[1.0, 1.0, 1.0 / np.log2(np.arange(3, k + 1))][:k]
    vals = []
    for a, b in zip(starts, ends):
        rel, s = y[a:b], scores[a:b]
        if rel.size < k:
            vals.append(0.0)
            continue
        top = rel[np.argsort(-s, kind="stable")[:k]]
        ideal = np.sort(rel)[::-1][:k]
        idcg = float((2.0 ** ideal - 1.0) @ disc)
        vals.append(0.0 if idcg <= 0 else float((2.0 ** top - 1.0) @ disc) / idcg)
    return float(np.mean(vals)) if vals else float("nan")


def rbf_matrix(A, S, gamma, block=2048):
    """K(A, S) float64 for K(a, s) = exp(-gamma ||a - s||^2)."""
    import numpy as np
    s2 = np.einsum("ij,ij->i", S, S)
    out = np.empty((A.shape[0], S.shape[0]))
    for r in range(0, A.shape[0], block):
        a = A[r:r + block]
        d2 = np.einsum("ij,ij->i", a, a)[:, None] + s2[None, :] - 2.0 * (a @ S.T)
        np.maximum(d2, 0.0, out=d2)
        out[r:r + block] = np.exp(-gamma * d2)
    return out


def read_nystroem_model(path):
    """(w, landmarks float64 (m, d), projection float64 (m, k), gamma) of a streamrank Nystroem model:
    phi(x) = K(x, landmarks) projection, score = phi(x).w (read with h5py)."""
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        norm = f["normalize"].attrs.get("kind", "none")
        norm = norm.decode() if isinstance(norm, bytes) else str(norm)
        if norm != "none":
            raise ValueError(f"{path}: normalize = {norm}, the bench expects none")
        fm = f["feature_map"]
        kind = fm.attrs["kind"]
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        params = json.loads(fm.attrs["params"])
        if kind != "nystroem" or params.get("kernel") != "rbf":
            raise ValueError(f"{path}: feature map {kind} kernel {params.get('kernel')}, expected nystroem rbf")
        return (f["w"][:].astype(np.float64), fm["landmarks"][:].astype(np.float64),
                fm["projection"][:].astype(np.float64), float(params["gamma"]))


def h5_x_bytes(path):
    """Bytes of the row matrix X of a streamrank HDF5 dataset (its in-memory size, uncompressed)."""
    import h5py
    with h5py.File(path, "r") as f:
        return int(f["X"].size * f["X"].dtype.itemsize), int(f["X"].shape[0])


def read_scores(path):
    import numpy as np
    return np.loadtxt(path, dtype=np.float64, ndmin=1)


# children of the nystroem and gbdt sections (each run as ``python -c CODE ARGS``)
SKLEARN_LOAD = r"""
import json, os, sys, time
from sklearn.datasets import load_svmlight_file
t = time.perf_counter()
X, y, q = load_svmlight_file(sys.argv[1], query_id=True)
print(json.dumps({"seconds": time.perf_counter() - t, "rows": X.shape[0], "bytes": os.path.getsize(sys.argv[1])}))
"""

SKLEARN_NYSTROEM = r"""
import json, sys, time
import numpy as np
from sklearn.datasets import dump_svmlight_file, load_svmlight_file
from sklearn.kernel_approximation import Nystroem
src, out, arrays = sys.argv[1], sys.argv[2], sys.argv[3]
gamma, m, d = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
t = time.perf_counter()
X, y, q = load_svmlight_file(src, query_id=True, n_features=d, zero_based=False)
t_load = time.perf_counter() - t
nys = Nystroem(kernel="rbf", gamma=gamma, n_components=m, random_state=0).fit(X)
Z = nys.transform(X)
t_map = time.perf_counter() - t - t_load
dump_svmlight_file(Z, y, out, zero_based=False, query_id=q)
# the fitted map as plain arrays (no pickle): transform(X) = K(X, components) normalization^T
np.savez(arrays, components=np.asarray(nys.components_.toarray() if hasattr(nys.components_, "toarray")
                                       else nys.components_, np.float64), normalization=nys.normalization_)
t_write = time.perf_counter() - t - t_load - t_map
print(json.dumps({"load_seconds": t_load, "map_seconds": t_map, "write_seconds": t_write,
                  "components": int(Z.shape[1])}))
"""

GBDT = r"""
import json, sys, time
import h5py
import numpy as np
from sklearn.datasets import load_svmlight_file
tool, train_h5, test_txt, scores_out, d = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
t = time.perf_counter()
with h5py.File(train_h5, "r") as f:  # streamrank's converted file: X float32 (n, d), y (n,), query_ptr
    X, y, ptr = f["X"][:], f["y"][:], f["query_ptr"][:]
groups = np.diff(ptr)
t_load = time.perf_counter() - t
t = time.perf_counter()
if tool == "lightgbm":
    import lightgbm as lgb
    model = lgb.LGBMRanker(n_estimators=100, num_threads=2, verbose=-1).fit(X, y, group=groups)
    version = lgb.__version__
else:
    import xgboost as xgb
    model = xgb.XGBRanker(n_estimators=100, objective="rank:ndcg", n_jobs=2).fit(
        X, y, qid=np.repeat(np.arange(groups.size), groups))
    version = xgb.__version__
t_fit = time.perf_counter() - t
Xt, yt, qt = load_svmlight_file(test_txt, query_id=True, n_features=d, zero_based=False)
np.savetxt(scores_out, model.predict(Xt.toarray().astype(np.float32)), fmt="%.17g")
print(json.dumps({"load_seconds": t_load, "fit_seconds": t_fit, "version": version, "rows": int(X.shape[0])}))
"""


def median_of(results, key):
    vals = [r[key] for r in results if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def new_row(section, tool, note=""):
    return {"section": section, "tool": tool, "note": note}


def add_note(row, text):
    row["note"] = f"{row['note']}; {text}" if row.get("note") else text


def mark_empty(rows):
    """Rows without a time and without a note say "no result"."""
    for r in rows:
        if r.get("median") is None and not r.get("note"):
            r["note"] = "no result"


def run_extra_sections(args, only, work, logs, models, env, peers, data, fold, run_section, sr_train):
    """The sections big, convert, nystroem and gbdt: each runs its tools (``run_section``'s interleaved
    rounds, or its own loop), then computes its figures; returns {"status", "print": the tables}."""
    import numpy as np
    py = sys.executable
    out = {"status": 0}
    printers = []
    out["print"] = lambda: [p() for p in printers]
    todo = [s for s in ("big", "convert", "nystroem", "gbdt") if s in only]
    if not todo:
        return out
    ll, ll_why = peers["liblinear"]

    def sr_convert(src, dst, extra=()):
        return [py, "-m", "streamrank", "convert", src, "-o", dst, *extra, "--json"]

    def convert_once(src, dst, extra=()):
        """An untimed conversion (a file left by a failed or killed one is made again)."""
        dst = Path(dst)
        ok = dst.with_name(dst.name + ".done")
        if dst.exists() and ok.exists():
            return True
        dst.unlink(missing_ok=True)
        res = run_timed(sr_convert(src, dst, extra), logs / f"convert.{dst.stem}", env=env, timeout=args.timeout)
        if res["error"]:
            print(f"streamrank convert of {src} failed ({res['error']}); rows using {dst} will fail")
            return False
        ok.write_text("")
        return True

    def json_value(res, key, step=None):
        f = res["steps"][step][2] if step else res["out"]
        j = last_json(f)
        return j.get(key) if j else None

    def fmt_runs(results):
        return " ".join(f"{r['wall_s']:.2f}" for r in results)

    # ------------------------------------------------------------ the generated set (big, convert, gbdt)
    big = None
    if {"big", "convert", "gbdt"} & set(todo):
        bdir = work / "big"
        bdir.mkdir(exist_ok=True)
        stem = f"{BIG_PRESET}-s{args.big_scale:g}"
        btext, bbytes = generated_text(bdir / f"{stem}-train.txt", BIG_PRESET, args.big_scale)
        bh5 = bdir / f"{stem}-train.h5"
        # untimed: a small set of the same preset converted and trained once (numba's cache)
        wtext, _ = generated_text(bdir / f"{BIG_PRESET}-warm.txt", BIG_PRESET, 0.002)
        wh5 = bdir / f"{BIG_PRESET}-warm.h5"
        wh5.unlink(missing_ok=True)
        run_timed(sr_convert(wtext, wh5), logs / "big.warm.convert", env=env, timeout=args.timeout)
        run_timed(sr_train(wh5, models / "big.warm.h5"), logs / "big.warm.train", env=env, timeout=args.timeout)
        if convert_once(btext, bh5):
            x_bytes, n_rows = h5_x_bytes(bh5)
            big = {"text": btext, "bytes": bbytes, "h5": bh5, "x_bytes": x_bytes, "rows": n_rows, "dir": bdir,
                   "stem": stem}
            print(f"big: {btext}: {n_rows:,} rows, {BIG_D} features, {bbytes / 1e6:,.0f} MB of text ({BIG_PRESET} "
                  f"preset, scale {args.big_scale:g}, seed 0); {bh5}: X {x_bytes / 1e6:,.0f} MB (float32)")
        else:
            out["status"] = 2

    # ------------------------------------------------------------ big
    if "big" in only and big:
        bh5, btext = big["h5"], big["text"]
        budget = f"{big['x_bytes'] / 2 / 1e6:.0f}MB"
        conv_h5 = big["dir"] / "big.converted.h5"

        def text_steps(r):
            conv_h5.unlink(missing_ok=True)  # a fresh conversion every round (convert resumes otherwise)
            return [("convert", sr_convert(btext, conv_h5), env),
                    ("train", sr_train(conv_h5, models / f"big.sr_text.r{r}.h5"), env)]

        tools = [("streamrank (HDF5)", "sr_h5",
                  lambda r: [("train", sr_train(bh5, models / f"big.sr_h5.r{r}.h5"), env)],
                  lambda r: models / f"big.sr_h5.r{r}.h5", "", "streamrank"),
                 (f"streamrank (HDF5, --memory-budget {budget} = X/2)", "sr_budget",
                  lambda r: [("train", sr_train(bh5, models / f"big.sr_budget.r{r}.h5", ("--memory-budget", budget)),
                              env)],
                  lambda r: models / f"big.sr_budget.r{r}.h5", "", "streamrank"),
                 ("streamrank (text: convert + train)", "sr_text", text_steps,
                  lambda r: models / f"big.sr_text.r{r}.h5", "", "streamrank"),
                 ("LIBLINEAR ranksvm -s 8 (whole run)", "liblinear",
                  (lambda r: [("train", [ll, "-s", "8", "-c", f"{C:g}", "-e", f"{EPS:g}", btext,
                                         models / f"big.liblinear.r{r}.model"], env)]) if ll else None,
                  lambda r: models / f"big.liblinear.r{r}.model", ll_why or "", "liblinear")]
        brows = run_section("big", tools)
        conv_h5.unlink(missing_ok=True)
        # objectives: every model's scores from one float64 pass over the text, then per query
        cols, W = [], []
        for row in brows:
            for res in row.get("ok", []):
                try:
                    if row["kind"] == "streamrank":
                        w = read_streamrank_model(res["model"], "identity")[0]
                    else:
                        w = read_liblinear_model(res["model"], BIG_D)
                    if w.size != BIG_D:
                        raise ValueError(f"{res['model']}: {w.size} weights, expected {BIG_D}")
                    cols.append((row, res))
                    W.append(w)
                except (OSError, ValueError, KeyError, IndexError) as exc:
                    add_note(row, f"model unreadable: {exc}")
            if row.get("ok"):
                if row["kind"] == "streamrank":
                    row["solve"] = statistics.median([s for s in (json_value(r, "seconds") for r in row["ok"])
                                                      if s is not None] or [float("nan")])
                if row["key"] == "sr_text":
                    row["conv"] = statistics.median(r["steps"]["convert"][0] for r in row["ok"])
        if W:
            t = time.perf_counter()
            Wm = np.stack(W, axis=1)
            S, y, qid = text_scores(btext, Wm, BIG_D)
            tot, n_pairs = pair_hinge_sums(S, y, qid)
            objs = {}
            for k, (row, res) in enumerate(cols):
                objs.setdefault(id(row), []).append(0.5 * float(Wm[:, k] @ Wm[:, k]) + C * float(tot[k]))
                j = last_json(res["out"])
                if row["kind"] == "streamrank" and j and "objective" in j:
                    row["own"] = j["objective"]
            for row in brows:
                if id(row) in objs:
                    row["objective"] = statistics.median(objs[id(row)])
            low = min(r["objective"] for r in brows if r.get("objective") is not None)
            for r in brows:
                if r.get("objective") is not None:
                    r["rel"] = (r["objective"] - low) / abs(low)
            big["pairs"], big["obj_s"] = n_pairs, time.perf_counter() - t
            del S
        by = {r["key"]: r for r in brows}
        lib = by["liblinear"].get("median")
        ratios = []
        if lib:
            for key, what, val in (("sr_h5", "streamrank solve (HDF5, its --json seconds) / LIBLINEAR whole run",
                                    by["sr_h5"].get("solve")),
                                   ("sr_h5", "streamrank train (HDF5, whole process) / LIBLINEAR whole run",
                                    by["sr_h5"].get("median")),
                                   ("sr_budget", "streamrank train (HDF5, --memory-budget X/2, whole process) / "
                                    "LIBLINEAR whole run", by["sr_budget"].get("median")),
                                   ("sr_text", "streamrank text to model (convert + train) / LIBLINEAR whole run",
                                    by["sr_text"].get("median"))):
                if val is not None and not math.isnan(val):
                    ratios.append(f"{what}: {val:.2f} / {lib:.2f} = {val / lib:.2f}")
            lrss = by["liblinear"].get("rss")
            for key in ("sr_h5", "sr_budget", "sr_text"):
                if lrss and by[key].get("rss"):
                    ratios.append(f"peak RSS {by[key]['tool']} / LIBLINEAR: {by[key]['rss']:,.0f} / {lrss:,.0f} MB = "
                                  f"{by[key]['rss'] / lrss:.2f}")
        mark_empty(brows)

        took = f"; took {big['obj_s']:.0f} s" if "obj_s" in big else ""

        def print_big():
            print()
            table(brows, [("section", "section", None), ("tool", "tool", None),
                          ("median", "median s (whole process)", "{:.2f}"), ("solve", "solver s (--json)", "{:.2f}"),
                          ("conv", "convert s", "{:.2f}"), ("runs", "each run s", None),
                          ("rss", "peak RSS MB", "{:,.0f}"), ("objective", "sq-hinge primal objective", "{:.4f}"),
                          ("rel", "rel. to lowest", "{:.2e}"), ("own", "its own reported objective", "{:.4f}"),
                          ("note", "note", None)])
            print()
            print(f"big: {big['text']} ({big['rows']:,} rows, {BIG_D} features, {big['bytes'] / 1e6:,.0f} MB, "
                  f"{big.get('pairs', 0):,} pairs), C = {C:g}, eps = {EPS:g}; streamrank: train {big['h5'].name} "
                  f"--C {C:g} --tol {EPS:g} --json (converted once, untimed; X in HDF5 {big['x_bytes'] / 1e6:,.0f} MB)"
                  f", then with --memory-budget {budget}, and from the text (convert + train: two processes, seconds "
                  f"summed, peak RSS the larger); LIBLINEAR: train -s 8 -c {C:g} -e {EPS:g} TEXT MODEL")
            print(f"big objectives: 1/2||w||^2 + C sum over pairs max(0, 1 - w.(x_i - x_j))^2 in float64, X parsed "
                  f"here from the text (scikit-learn's parser, 64 MB blocks), per query with a dense margin matrix "
                  f"(no list of pairs){took}")
            for ln in ratios:
                print("big ratio: " + ln)
        printers.append(print_big)

    # ------------------------------------------------------------ convert
    if "convert" in only and big:
        btext = big["text"]
        piece = head_lines(btext, big["dir"] / f"{big['stem']}-head{args.slice_mb}MB.txt",
                           nbytes=args.slice_mb * 10 ** 6)
        pbytes = piece.stat().st_size
        dst = big["dir"] / "convert.out.h5"
        whole = pbytes >= big["bytes"]
        inputs = [("whole", btext, big["bytes"])] + ([] if whole else [("head", piece, pbytes)])
        res = {k: [] for k in ("sr.whole", "sr.head", "sk.head", "sk.whole")}
        for r in range(args.repeats):
            for name, src, _ in inputs:
                dst.unlink(missing_ok=True)
                res[f"sr.{name}"].append(run_timed(sr_convert(src, dst), logs / f"convert.sr.{name}.r{r}", env=env,
                                                   timeout=args.timeout))
            res["sk.head"].append(run_timed([py, "-c", SKLEARN_LOAD, piece], logs / f"convert.sk.head.r{r}", env=env,
                                            timeout=args.timeout))
        dst.unlink(missing_ok=True)
        sk_note = ""
        ok = [x for x in res["sk.head"] if not x["error"]]
        if not whole and ok and args.sklearn_full != "no":
            f = big["bytes"] / pbytes
            est_s = statistics.median(x["wall_s"] for x in ok) * f
            est_mb = max(x["rss_mb"] or 0 for x in ok) * f
            # its time grows faster than the file (measured: 9.2 s for the first 200 MB, 766 s for all
            # 1,693 MB, 7.5 min of it system time), so only a short extrapolation is trusted
            if args.sklearn_full == "yes" or (f <= 4 and est_s < 180 and est_mb < 4000):
                for r in range(args.repeats):
                    res["sk.whole"].append(run_timed([py, "-c", SKLEARN_LOAD, btext], logs / f"convert.sk.whole.r{r}",
                                                     env=env, timeout=args.timeout))
            else:
                sk_note = (f"the whole file not run (--sklearn-full yes runs it): {f:.1f} times the head, whose "
                           f"figures scaled by {f:.1f} give ~{est_s:.0f} s and ~{est_mb:,.0f} MB; the time is a lower "
                           f"bound: it grows faster than the file (766 s for 1,693 MB, 9.2 s for 200 MB, measured)")
        crows = []
        for key, tool, inp, nbytes in (("sr.whole", "streamrank convert", "whole", big["bytes"]),
                                       ("sr.head", "streamrank convert", f"first {args.slice_mb} MB", pbytes),
                                       ("sk.whole", "scikit-learn load_svmlight_file(query_id=True)", "whole",
                                        big["bytes"]),
                                       ("sk.head", "scikit-learn load_svmlight_file(query_id=True)",
                                        f"first {args.slice_mb} MB" if not whole else "whole", pbytes)):
            if not res[key] and not (key == "sk.whole" and sk_note):
                continue
            row = new_row("convert", tool)
            row["input"] = inp
            row["mb"] = nbytes / 1e6
            okr = summarise(row, res[key]) if res[key] else []
            if key == "sk.whole" and sk_note:
                add_note(row, sk_note)
            if okr:
                row["mbs"] = row["mb"] / row["median"]
                own = [json_value(x, "seconds") for x in okr]
                own = [s for s in own if s]
                if own:
                    row["own_s"] = statistics.median(own)
                    row["own_mbs"] = row["mb"] / row["own_s"]
            crows.append(row)

        def print_convert():
            print()
            table(crows, [("section", "section", None), ("tool", "tool", None), ("input", "input", None),
                          ("mb", "text MB", "{:,.0f}"), ("median", "median s (whole process)", "{:.2f}"),
                          ("mbs", "MB/s (whole process)", "{:.1f}"), ("own_s", "parse s (its own clock)", "{:.2f}"),
                          ("own_mbs", "MB/s (its own clock)", "{:.1f}"), ("runs", "each run s", None),
                          ("rss", "peak RSS MB", "{:,.0f}"), ("note", "note", None)])
            print()
            print(f"convert: {big['text'].name} ({big['bytes'] / 1e6:,.0f} MB) and its first {args.slice_mb} MB cut at "
                  f"a query boundary ({pbytes / 1e6:,.0f} MB), in the page cache; streamrank: convert IN -o OUT.h5 "
                  f"--json "
                  f"(a fresh OUT every round; its own clock: the --json seconds); scikit-learn: load_svmlight_file(IN, "
                  f"query_id=True) in a process of its own (its own clock: the call alone, without the imports); "
                  f"MB/s = text MB / seconds")
        printers.append(print_convert)

    # ------------------------------------------------------------ nystroem
    if "nystroem" in only and data:
        h5, text = data["h5"], data["text"]
        ddir = Path(text).parent
        tsrc = find_text(fold, "test")
        nrows = []
        if tsrc is None:
            nrows.append(dict(new_row("nystroem", "(all)", f"skipped: no {fold}/test.txt[.gz]")))
        else:
            ttext = plain_copy(tsrc, ddir / "test.txt")
            th5 = ddir / "fold1.test.h5"
            convert_once(ttext, th5, ("--n-features", str(N_FEATURES)))
            nys = ("--method", "nystroem", "--kernel", "rbf", "--components", str(NYS_M), "--gamma", f"{GAMMA:g}")
            w = run_timed(sr_train(h5, models / "nys.warm.h5", nys), logs / "nystroem.warm", env=env,
                          timeout=args.timeout)
            if w["error"]:
                print(f"streamrank's untimed nystroem warm-up run failed: {w['error']}")
            svm = ddir / "nystroem.mapped.svm"
            tools = [(f"streamrank --method nystroem --components {NYS_M}", "sr_nys",
                      lambda r: [("train", sr_train(h5, models / f"nys.sr.r{r}.h5", nys), env)],
                      lambda r: models / f"nys.sr.r{r}.h5", "", "streamrank"),
                     (f"scikit-learn Nystroem({NYS_M}) + write SVMlight + LIBLINEAR -s 8", "sk_nys",
                      (lambda r: [("map", [py, "-c", SKLEARN_NYSTROEM, text, svm, models / f"nys.sk.r{r}.npz",
                                           repr(GAMMA), str(NYS_M), str(N_FEATURES)], env),
                                  ("liblinear", [ll, "-s", "8", "-c", f"{C:g}", "-e", f"{EPS:g}", svm,
                                                 models / f"nys.ll.r{r}.model"], env)]) if ll else None,
                      lambda r: models / f"nys.ll.r{r}.model", ll_why or "", "sklearn")]
            nrows = run_section("nystroem", tools)
            svm_mb = svm.stat().st_size / 1e6 if svm.exists() else None
            svm.unlink(missing_ok=True)
            X, I, J = data["X"], data["I"], data["J"]
            Xt, yt, qt = read_letor(ttext)
            for row in nrows:
                objs, nd, own, diff = [], [], [], []
                for n_r, res in enumerate(row.get("ok", [])):
                    try:
                        if row["kind"] == "streamrank":
                            w, L, P, g = read_nystroem_model(res["model"])
                            if not math.isclose(g, GAMMA):
                                raise ValueError(f"{res['model']}: gamma {g}")
                            objs.append(linear_objective(w, rbf_matrix(X, L, g) @ P, I, J, C))
                            sc = models / f"nys.sr.r{n_r}.test.scores"
                            p = run_timed([py, "-m", "streamrank", "predict", res["model"], th5, "-o", sc],
                                          logs / f"nystroem.predict.r{n_r}", env=env, timeout=args.timeout)
                            if p["error"]:
                                raise ValueError(f"streamrank predict failed: {p['error']}")
                            s_pred = read_scores(sc)
                            s_here = rbf_matrix(Xt, L, g) @ P @ w
                            diff.append(float(np.max(np.abs(s_pred - s_here))))
                            nd.append(ndcg_at(s_pred, yt, qt))
                            j = last_json(res["out"])
                            if j and "objective" in j:
                                own.append(j["objective"])
                        else:
                            m = Path(res["model"])  # nys.ll.rR.model -> its round's nys.sk.rR.npz
                            m = m.with_name(m.name.replace("nys.ll.", "nys.sk.").replace(".model", ".npz"))
                            with np.load(m, allow_pickle=False) as a:
                                Lsk, Nsk = a["components"], a["normalization"]
                            Z = rbf_matrix(X, Lsk, GAMMA) @ Nsk.T
                            w = read_liblinear_model(res["model"], Z.shape[1])[:Z.shape[1]]
                            objs.append(linear_objective(w, Z, I, J, C))
                            nd.append(ndcg_at((rbf_matrix(Xt, Lsk, GAMMA) @ Nsk.T) @ w, yt, qt))
                    except (OSError, ValueError, KeyError, IndexError) as exc:
                        add_note(row, f"model unreadable: {exc}")
                if row.get("ok") and row["kind"] == "sklearn":
                    row["map_s"] = statistics.median(r["steps"]["map"][0] for r in row["ok"])
                    row["ll_s"] = statistics.median(r["steps"]["liblinear"][0] for r in row["ok"])
                    if svm_mb:
                        add_note(row, f"mapped file {svm_mb:,.0f} MB")
                if objs:
                    row["objective"] = statistics.median(objs)
                if nd:
                    row["ndcg"] = statistics.median(nd)
                if own:
                    row["own"] = own[-1]
                if diff:
                    add_note(row, f"predict's test scores vs this bench's from the model file: max |diff| "
                                  f"{max(diff):.1e}")
                mark_empty([row])

        def print_nys():
            print()
            table(nrows, [("section", "section", None), ("tool", "tool", None),
                          ("median", "median s (end to end)", "{:.2f}"), ("map_s", "map + write s", "{:.2f}"),
                          ("ll_s", "LIBLINEAR s", "{:.2f}"), ("runs", "each run s", None),
                          ("rss", "peak RSS MB", "{:,.0f}"),
                          ("objective", "objective on its own map (not comparable)", "{:.4f}"),
                          ("own", "its own reported objective", "{:.4f}"), ("ndcg", "test NDCG@10", "{:.4f}"),
                          ("note", "note", None)])
            print()
            print(f"nystroem: MQ2008 Fold1 train, rbf gamma = {GAMMA:g}, m = {NYS_M} landmarks, C = {C:g}, eps = "
                  f"{EPS:g}; streamrank: train fold1.h5 --method nystroem --kernel rbf --components {NYS_M} --gamma "
                  f"{GAMMA:g} --C {C:g} --tol {EPS:g} (HDF5 in, model out); scikit-learn: load_svmlight_file, "
                  f"Nystroem(kernel='rbf', gamma={GAMMA:g}, n_components={NYS_M}, random_state=0) fitted on the "
                  f"training rows, dump_svmlight_file with qid (one process: 'map + write s'), then LIBLINEAR train -s "
                  f"8 -c {C:g} -e {EPS:g} on it ('LIBLINEAR s'); end to end = the sum; peak RSS the larger")
            print("nystroem objectives: 1/2||w||^2 + C sum over pairs max(0, 1 - w.(phi(x_i) - phi(x_j)))^2 in float64 "
                  "with each tool's own phi (streamrank: K(x, landmarks) projection from its model file; scikit-learn: "
                  "its Nystroem's transform, from the fitted arrays): two different maps, so the figures are not comparable. Test "
                  "NDCG@10 on Fold1 test.txt: streamrank predict's scores, scikit-learn's transform times LIBLINEAR's "
                  "w; NDCG@10 as LETOR 4.0's Eval-Score-4.0.pl computes it (gain 2^rel - 1, positions 1-2 undiscounted "
                  "then 1/log2(i), ties in file order, 0 for a query with fewer than 10 documents or no relevant "
                  "one, the mean over all queries: streamrank's letor4 convention)")
        printers.append(print_nys)

    # ------------------------------------------------------------ gbdt
    if "gbdt" in only and big:
        import importlib.util
        gtext, gh5 = big["text"], big["h5"]
        if args.gbdt_rows and args.gbdt_rows < big["rows"]:
            gtext = head_lines(big["text"], big["dir"] / f"{big['stem']}-head{args.gbdt_rows}rows.txt",
                               rows=args.gbdt_rows)
            gh5 = gtext.with_suffix(".h5")
            convert_once(gtext, gh5, ("--n-features", str(BIG_D)))
        g_rows = h5_x_bytes(gh5)[1] if gh5.exists() else None
        ttext, tbytes = generated_text(big["dir"] / f"{BIG_PRESET}-s{args.test_scale:g}-test.txt", BIG_PRESET,
                                       args.test_scale, part="test")
        tools = [("streamrank linear (HDF5)", "sr", lambda r: [("train", sr_train(gh5, models / f"gbdt.sr.r{r}.h5"),
                                                                  env)],
                  lambda r: models / f"gbdt.sr.r{r}.h5", "", "streamrank")]
        for key, label, mod in (("lightgbm", "LightGBM lambdarank, 100 trees, num_threads=2", "lightgbm"),
                                ("xgboost", "XGBoost rank:ndcg, 100 trees, n_jobs=2", "xgboost")):
            have = importlib.util.find_spec(mod) is not None
            tools.append((label, key,
                          (lambda r, key=key: [("fit", [py, "-c", GBDT, key, gh5, ttext,
                                                        models / f"gbdt.{key}.r{r}.scores", str(BIG_D)], env)])
                          if have else None,
                          lambda r, key=key: models / f"gbdt.{key}.r{r}.scores",
                          "" if have else f"not available ({mod} is not installed in {py})", key))
        grows = run_section("gbdt", tools)
        sr_cols, W = [], []
        for row in grows:
            for res in row.get("ok", []):
                if row["kind"] == "streamrank":
                    try:
                        W.append(read_streamrank_model(res["model"], "identity")[0])
                        sr_cols.append(row)
                    except (OSError, ValueError, KeyError) as exc:
                        add_note(row, f"model unreadable: {exc}")
        Wm = np.stack(W, axis=1) if W else np.zeros((BIG_D, 1))
        S, yt, qt = text_scores(ttext, Wm, BIG_D)
        for row in grows:
            nd = []
            if row["kind"] == "streamrank":
                nd = [ndcg_at(S[:, k], yt, qt) for k in range(len(W))]
                if row.get("ok"):
                    row["fit"] = statistics.median([s for s in (json_value(r, "seconds") for r in row["ok"])
                                                    if s is not None] or [float("nan")])
            else:
                for res in row.get("ok", []):
                    try:
                        sc = read_scores(res["model"])
                        if sc.size != yt.size:
                            raise ValueError(f"{sc.size} scores for {yt.size} test rows")
                        nd.append(ndcg_at(sc, yt, qt))
                    except (OSError, ValueError) as exc:
                        add_note(row, f"scores unreadable: {exc}")
                if row.get("ok"):
                    row["fit"] = statistics.median(json_value(r, "fit_seconds") or float("nan") for r in row["ok"])
                    row["load"] = statistics.median(json_value(r, "load_seconds") or float("nan") for r in row["ok"])
                    v = json_value(row["ok"][-1], "version")
                    if v:
                        add_note(row, f"version {v}")
            if nd:
                row["ndcg"] = statistics.median(nd)
            mark_empty([row])
        n_test_q = int(np.unique(qt).size)

        def print_gbdt():
            print()
            table(grows, [("section", "section", None), ("tool", "tool", None),
                          ("median", "median s (whole process)", "{:.2f}"), ("fit", "fit s (its own clock)", "{:.2f}"),
                          ("load", "read HDF5 s", "{:.2f}"), ("runs", "each run s", None),
                          ("rss", "peak RSS MB", "{:,.0f}"), ("ndcg", "test NDCG@10", "{:.4f}"),
                          ("note", "note", None)])
            print()
            print(f"gbdt: trained on {gh5.name} ({g_rows if g_rows is None else f'{g_rows:,}'} rows of the big set"
                  f"{'' if gh5 == big['h5'] else f', its first {args.gbdt_rows:,} rows cut at a query boundary'}); "
                  f"tested on {ttext.name} ({yt.size:,} rows, {n_test_q:,} queries: {BIG_PRESET}, scale "
                  f"{args.test_scale:g}, seed 0, part test = other queries of the same relevance model; a different "
                  f"seed would be a different relevance model); streamrank: train --C {C:g} --tol {EPS:g}, its test "
                  f"scores computed here from w and the text in float64; LightGBM LGBMRanker(n_estimators=100, "
                  f"num_threads=2) and XGBoost XGBRanker(n_estimators=100, objective='rank:ndcg', n_jobs=2), defaults "
                  f"otherwise, each a process that reads the HDF5 with h5py (X float32), fits, and scores the test "
                  f"text (parsed by scikit-learn, included in the whole-process seconds); NDCG@10 as in nystroem")
        printers.append(print_gbdt)
    return out


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
    ap.add_argument("--firstuse-commands", default="demo,train,select",
                    help="firstuse: the commands timed, some of demo, train, select (default all three)")
    ap.add_argument("--only", default=",".join(DEFAULT_ONLY),
                    help=f"comma-separated subset of {','.join(SECTIONS)} (default {','.join(DEFAULT_ONLY)})")
    ap.add_argument("--big-scale", type=float, default=BIG_SCALE,
                    help=f"scale of the generated {BIG_PRESET} set of big, convert and gbdt (default {BIG_SCALE:g}: "
                         f"about 1M rows; 0.044: about 100k rows, a quick run)")
    ap.add_argument("--slice-mb", type=int, default=200,
                    help="convert: the head of the big text (MB = 10^6 bytes) both parsers also read (default 200)")
    ap.add_argument("--sklearn-full", choices=["auto", "yes", "no"], default="auto",
                    help="convert: scikit-learn on the whole big text too: auto = only when the text is at most 4 "
                         "times the head and the head's run, scaled to the whole file, stays under 4 GB and 3 "
                         "minutes (default auto; its time grows faster than the file: 766 s for the default 1.7 "
                         "GB, 9.2 s for its first 200 MB)")
    ap.add_argument("--gbdt-rows", type=int, default=0,
                    help="gbdt: train on the first R rows of the big set (cut at a query boundary; default 0 = all)")
    ap.add_argument("--test-scale", type=float, default=0.05,
                    help="gbdt: scale of the generated held-out test set (part test; default 0.05: ~113k rows)")
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
    if "export" in only:  # issue 32: tools/bench_export.py (its own options: python tools/bench_export.py --help)
        from bench_export import main as export_main
        peers_given = [f"--{o}={Path(p).with_name(n)}" for o, p, n in (("liblinear-predict", args.liblinear, "predict"),
                       ("svmrank-classify", args.svmrank, "svm_rank_classify")) if p]
        rc = export_main([f"--repeats={args.repeats}", f"--data={args.data}"] + peers_given
                         + ([f"--workdir={Path(args.workdir) / 'export'}"] if args.workdir else []))
        only.remove("export")
        if not only:
            return rc

    import numpy as np

    py = sys.executable
    print(machine_facts())
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores); peak RSS by "
          f"{TIME + ' -f %M' if TIME else 'os.wait4 rusage'}"
          + ("; PYTHONDONTWRITEBYTECODE is set (the bench compiles the checkout's bytecode first)"
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
    # the children import the checkout's streamrank from compiled bytecode, as an installed package
    # does (with PYTHONDONTWRITEBYTECODE set, each would otherwise compile every module it imports)
    subprocess.run([py, "-m", "compileall", "-q", str(REPO / "streamrank")], check=False, cwd=REPO,
                   stdout=subprocess.DEVNULL)

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
    fold = Path(args.data) / "Fold1"
    if "linear" in only or "exact" in only or "nystroem" in only or "firstuse" in only:
        src = find_text(fold, "train") if fold.is_dir() else None
        if src is None:
            msg = (f"MQ2008 not found: no {fold}/train.txt or train.txt.gz (LETOR 4.0 text); pass --data DIR, "
                   f"the folder holding Fold1..Fold5")
            print(msg)
            status = 2
            for sec in ("linear", "exact", "nystroem", "firstuse"):
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

    # ---------------------------------------------------------------- first use after pip install
    if "firstuse" in only:
        venv = work / "firstuse-venv"
        vpy = venv / "bin" / "python"
        if not (venv / "bin" / "streamrank").exists():
            shutil.rmtree(venv, ignore_errors=True)
            mk = run_timed([py, "-m", "venv", venv], logs / "firstuse.venv", env=env, timeout=args.timeout)
            inst = mk if mk["error"] else run_timed([vpy, "-m", "pip", "install", "--quiet", REPO],
                                                    logs / "firstuse.pip", env=env, timeout=args.timeout)
            row = {"section": "firstuse", "tool": "python -m venv + pip install . (once)"}
            summarise(row, [dict(inst, wall_s=(mk["wall_s"] or 0) + (inst["wall_s"] or 0))])
            rows.append(row)
        if not (venv / "bin" / "streamrank").exists():
            rows.append({"section": "firstuse", "tool": "(all)", "note": "skipped: the venv's install failed"})
        else:
            runs = [("streamrank demo", "demo", [vpy, "-m", "streamrank", "demo"])]
            if data:
                runs.append(("streamrank train fold1.h5 --C 1", "train",
                             [vpy, "-m", "streamrank", "train", data["h5"], "--C", f"{C:g}", "-o",
                              models / "firstuse.h5", "--quiet"]))
                runs.append(("streamrank select-features fold1.h5 -k 10 --importance map --tradeoff 0.5", "select",
                             [vpy, "-m", "streamrank", "select-features", data["h5"], "-k", "10", "--importance",
                              "map", "--tradeoff", "0.5", "-o", models / "firstuse-gas.h5", "--quiet"]))
            chosen = {c.strip() for c in args.firstuse_commands.split(",")}
            runs = [r for r in runs if r[1] in chosen]
            kinds = [("first run", {}), ("first run, helper off", {"STREAMRANK_NO_WARMUP": "1"}), ("warm", None)]
            res = {(key, kind): [] for _, key, _ in runs for kind, _ in kinds}
            for r in range(args.repeats):
                for _, key, cmd in runs:
                    for i, (kind, extra) in enumerate(kinds):
                        # an empty cache for a first run; the warm run uses the one the first filled
                        cache = work / f"firstuse-cache-{key}-{i if extra is not None else 0}"
                        if extra is not None:
                            shutil.rmtree(cache, ignore_errors=True)
                        run_env = dict(env, NUMBA_CACHE_DIR=str(cache), **(extra or {}))
                        res[(key, kind)].append(run_timed(cmd, logs / f"firstuse.{key}.k{i}.r{r}", env=run_env,
                                                          timeout=args.timeout))
            for what, key, _ in runs:
                for kind, _ in kinds:
                    row = {"section": "firstuse", "tool": f"{what} ({kind})"}
                    summarise(row, res[(key, kind)])
                    rows.append(row)

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
    exact_ref = None
    if "exact" in only and data:
        h5, text = data["h5"], data["text"]
        exact = ("--method", "exact", "--kernel", "rbf", "--gamma", f"{GAMMA:g}")
        # the untimed warm-up runs to --tol 1e-7: its objective is the f* of the "f* (1 + 1e-3)" note
        # (when lower than the timed runs' own final objective at eps 1e-3)
        w = run_timed(sr_train(h5, models / "exact.warm.h5", exact + ("--tol", "1e-7")), logs / "exact.warm",
                      env=env, timeout=args.timeout)
        if w["error"]:
            print(f"streamrank's untimed exact warm-up run failed: {w['error']}")
        exact_ref = (last_json(w["out"]) or {}).get("objective") if not w["error"] else None
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
        # exact: when streamrank's run reached libsvm-ranksvm's final objective and f* (1 + 1e-3)
        sr_row = next((r for r in rows if r["section"] == "exact" and r.get("kind") == "streamrank"
                       and r.get("objective") is not None and r.get("ok")), None)
        ls_row = next((r for r in rows if r["section"] == "exact" and r.get("kind") == "libsvm"
                       and r.get("objective") is not None), None)
        if sr_row is not None:
            reach_ls, reach_opt = [], []
            for res in sr_row["ok"]:
                trace = solver_trace(res["err"])
                j = last_json(res["out"])
                if not trace or not j or "objective" not in j:
                    continue
                # streamrank logs the function it minimises (Q' = float32(K) + jitter I): targets
                # in this bench's units are scaled by its final own / this bench's objective
                scale = j["objective"] / sr_row["objective"]
                # the whole process's rest: start-up, Q and the preconditioner before the solve,
                # saving the model after it (counted as if before: an upper bound); the solve's
                # own seconds, not its last iteration's, so its final gap estimate is not
                solve_s = (j.get("candidates") or [{}])[-1].get("seconds", trace[-1][1])
                setup = res["wall_s"] - solve_s
                if ls_row is not None:
                    reach_ls.append(first_time_at(trace, ls_row["objective"] * scale, setup))
                f_star = min(j["objective"], exact_ref) if exact_ref is not None else j["objective"]
                reach_opt.append(first_time_at(trace, f_star * (1 + 1e-3), setup))
            reach_ls = [x for x in reach_ls if x is not None]
            reach_opt = [x for x in reach_opt if x is not None]
            if reach_ls and ls_row is not None and ls_row.get("median"):
                t = statistics.median(reach_ls)
                notes.append(f"exact: streamrank reached libsvm-ranksvm's final objective {ls_row['objective']:.4f} "
                             f"after {t:.2f} s of its process (median; {t / ls_row['median']:.2f}x libsvm-ranksvm's "
                             f"{ls_row['median']:.2f} s run): " + ", ".join(f"{x:.2f}" for x in reach_ls) + " s")
            if reach_opt:
                notes.append("exact: streamrank reached f* (1 + 1e-3), f* the lower of its own final objective and "
                             "its untimed warm-up's at --tol 1e-7"
                             + (f" ({exact_ref:.6f} in its own units)" if exact_ref is not None else "") + ", after "
                             + ", ".join(f"{x:.2f}" for x in reach_opt) + " s of its process")
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
    # ---------------------------------------------------------------- big, convert, nystroem, gbdt
    extra = run_extra_sections(args, only, work, logs, models, env, peers, data, fold, run_section, sr_train)
    if extra["status"]:
        status = extra["status"]

    mark_empty(rows)

    if rows:
        print()
        table(rows, [("section", "section", None), ("tool", "tool", None), ("median", "median s", "{:.2f}"),
                     ("runs", "each run s", None), ("x_fastest", "x fastest", "{:.2f}"),
                     ("rss", "peak RSS MB", "{:,.0f}"), ("objective", "sq-hinge primal objective", "{:.4f}"),
                     ("rel", "rel. to lowest", "{:.2e}"), ("l1", "L1-hinge objective (own loss)", "{:.4f}"),
                     ("note", "note", None)])
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
    if data and ("linear" in only or "exact" in only):
        print("objectives: computed by this bench in float64 from each model file over the explicit pairs of the "
              "text file; rel. to lowest = (f - lowest f of the section) / lowest f")
    for n in notes:
        print("note: " + n)
    extra["print"]()
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
