"""Exported models on the consumers' side (issue 32): the peers' own programs scoring streamrank's
svmrank and liblinear files, and the speed of onnxruntime on an exported model.

    python tools/bench_export.py                              # both parts, 3 rounds
    python tools/bench_peers.py --only export                 # the same, as bench_peers' section
                                          (tools/bench/export.py; both append to docs/results/export.jsonl)
    python tools/bench_export.py --kernel-rows 1000000        # the Nystroem rows at 1M too (~16 min)
    python tools/bench_export.py --skip-timing                # the agreement table only (seconds)

(a) Agreement. Two linear RankSVM models (normalize none and zscore, C = 0.25) trained on MQ2008
Fold1's train.txt (../shared/data/MQ2008, --data; without it, on a generated mq2007-like set and
scored on generated test rows), exported with ``render(model, "svmrank" | "liblinear")`` and scored
on Fold1's test rows by SVMrank's ``svm_rank_classify`` and the LIBLINEAR ranksvm extension's
``predict`` (built by tools/peers/build.sh into ../peers/; --svmrank-classify, --liblinear-predict).
Printed: max_i |s_i - p_i - c| over the rows, c the midrange of s - p (the one constant that
minimises it), divided by max|p| (the peer's printed scale: LIBLINEAR prints %g, six significant
digits, so 5e-6 is its rounding) and by max|s| (streamrank's); and c beside the constant the file
dropped. Verdict: within 1e-5 of max|p| (+ 1e-8 for svm_rank_classify's %.8f).

(b) Speed. A generated mq2007-like test set (streamrank.synthetic, seed 0, part ``test``, 46
features; --rows, default about 1M rows) is scored by a linear model (zscore) and an rbf Nystroem
model (m = --components, default 2,000, zscore; both trained on the preset's train part at scale
0.25, about 10k rows), each three ways, interleaved, --repeats rounds:
  * ``streamrank predict MODEL.h5 DATA.h5 -o scores.txt``: a whole process (start-up, reading the
    HDF5 file, scoring, writing one %.17g line a row);
  * ``model.decision_function(X)`` in this process on the rows already in memory;
  * onnxruntime (``render(model, "onnx")``, a session with 2 intra-op threads that do not spin, made once, untimed)
    ``session.run`` over batches of --batch rows (linear: --linear-batch) on the same rows.
The Nystroem rows are --kernel-rows rows of the same preset (default 250,000, so that the default
run stays near 6 minutes on 2 cores: each of the three scorers takes about 90 s over 1M rows,
most of it the n x m x m product with the m x m projection; the seconds per 1M rows are printed
scaled from them). Medians, each run's seconds, ratios against onnxruntime, and ONNX's
largest |difference| from decision_function over max|score|. ONNX rows say "not available (...)"
while streamrank.export.onnx_graph cannot export the model or onnxruntime is missing.

(c) Laplacian's memory. Its L1 distances need a (rows, m, d) difference in standard operators; the
exported graph computes it in a Scan over chunks of rows (streamrank.export.onnx_graph), so it stays
within a few tens of MB whatever the batch. Printed: one call over --laplacian-rows rows of a
laplacian Nystroem model (m = --laplacian-components, d = 46), the exported graph against the same
graph with the chunk limits lifted (one difference), each in a process of its own: seconds, the
rise of peak RSS over the process before the call, and the scores' agreement with predict.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/, for _benchutil
from _benchutil import REPO, machine_facts, record, run_child, table  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "MQ2008"
PEERS = REPO.parent / "peers"
DEFAULT_PROGS = {"svmrank": PEERS / "svm_rank" / "svm_rank_classify",
                 "liblinear": PEERS / "liblinear-ranksvm" / "predict"}
PEER_LABEL = {"svmrank": "SVMrank svm_rank_classify", "liblinear": "LIBLINEAR ranksvm predict"}
PRESET, PRESET_ROWS = "mq2007", 42158  # rows of streamrank.synthetic's mq2007 preset at scale 1
AGREE_C = 0.25


def header():
    print(machine_facts())
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "streamrank"],
                           capture_output=True, text=True).stdout.strip().splitlines()
    load = os.getloadavg()
    print(f"commit {commit}" + (f" ({len(dirty)} files of streamrank/ modified in the work tree)" if dirty else "")
          + f"; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; load average at start {load[0]:.2f} {load[1]:.2f} "
            f"{load[2]:.2f} ({os.cpu_count()} cores)")


def program(given, key):
    """(path or None, why not)."""
    p = Path(given) if given else DEFAULT_PROGS[key]
    if not p.is_file() or not os.access(p, os.X_OK):
        how = f"pass --{'svmrank-classify' if key == 'svmrank' else 'liblinear-predict'} PATH"
        return None, f"not available ({p} is not an executable file; build it with tools/peers/build.sh or {how})"
    return p, None


def program_version(path):
    try:
        lines = (path.parent / "VERSION").read_text(errors="replace").splitlines()
        return "; ".join(ln.strip() for ln in lines[:2])
    except OSError:
        return "(no VERSION file beside it)"


# -- (a) the peers' own programs on exported files ----------------------------------------------------
def write_svmlight(path, X, y, qid):
    """SVMlight rows ``label qid:Q j:x_j ...``, query ids renumbered 1, 2, ... by runs (both programs
    read them; svm_rank_classify wants them increasing), each value the double of its float32."""
    import numpy as np
    starts = np.r_[True, qid[1:] != qid[:-1]]
    qnum = np.cumsum(starts)
    with open(path, "w") as f:
        for i in range(len(X)):
            cells = " ".join(f"{j}:{x!r}" for j, x in enumerate(X[i].tolist(), 1))
            f.write(f"{float(y[i]):g} qid:{qnum[i]} {cells}\n")


def peer_scores(prog, fmt, model, test_file, work, tag):
    import numpy as np
    from streamrank.export import render
    model_file, out = work / f"{tag}.{fmt}.model", work / f"{tag}.{fmt}.out"
    model_file.write_text(render(model, fmt))
    t = time.perf_counter()
    run = subprocess.run([str(prog), str(test_file), str(model_file), str(out)], capture_output=True, text=True,
                         timeout=600)
    seconds = time.perf_counter() - t
    if run.returncode != 0:
        raise RuntimeError(f"{prog} ended with {run.returncode}: {(run.stdout + run.stderr)[-800:]}")
    return np.loadtxt(out, ndmin=1), seconds


def agreement_data(args, work):
    """(where, train X y q, test X y q): MQ2008 Fold1, else a generated mq2007-like pair."""
    import streamrank
    streamrank.configure()  # the command line's process settings
    fold = Path(args.data) / "Fold1"
    tr = next((fold / n for n in ("train.txt", "train.txt.gz") if (fold / n).is_file()), None)
    te = next((fold / n for n in ("test.txt", "test.txt.gz") if (fold / n).is_file()), None)
    if tr and te:
        Xtr, ytr, qtr = streamrank.load_ranking(tr)
        return f"MQ2008 Fold1 ({te})", (Xtr, ytr, qtr), streamrank.load_ranking(te, n_features=Xtr.shape[1])
    from streamrank.synthetic import write_hdf5
    for part, scale in (("train", 0.25), ("test", 0.1)):
        write_hdf5(work / f"agree-{part}.h5", PRESET, seed=0, part=part, scale=scale)
    return (f"generated {PRESET}-like rows ({fold} not found)", streamrank.load_ranking(work / "agree-train.h5"),
            streamrank.load_ranking(work / "agree-test.h5"))


def section_agreement(args, work):
    import numpy as np
    import streamrank
    streamrank.configure()  # the command line's process settings
    from streamrank.export.common import linear_weights
    progs = {k: program(getattr(args, f"{k}_prog"), k) for k in ("svmrank", "liblinear")}
    for k, (p, why) in progs.items():
        print(f"{PEER_LABEL[k]}: " + (f"{p}: {program_version(p)}" if p else why))
    where, (Xtr, ytr, qtr), (Xte, yte, qte) = agreement_data(args, work)
    test_file = work / "agree-test.txt"
    write_svmlight(test_file, Xte, yte, qte)
    print(f"\n(a) agreement: {where}, {len(Xte):,} test rows x {Xte.shape[1]} features; linear RankSVM C={AGREE_C:g} "
          f"trained on {len(Xtr):,} rows")
    rows, bad = [], 0
    for normalize in ("none", "zscore"):
        model = streamrank.RankSVM(C=AGREE_C, normalize=normalize).fit(Xtr, ytr, qtr)._model()
        s = model.decision_function(Xte)
        for fmt in ("svmrank", "liblinear"):
            prog, why = progs[fmt]
            row = {"fmt": fmt, "model": f"linear, normalize {normalize}"}
            if prog is None:
                rows.append({**row, "verdict": why})
                continue
            p, seconds = peer_scores(prog, fmt, model, test_file, work, normalize)
            if len(p) != len(s):
                raise RuntimeError(f"{prog} printed {len(p)} scores for {len(s)} rows")
            d = s - p
            c_hat = (d.max() + d.min()) / 2
            dev = float(np.abs(d - c_hat).max())
            top_p, top_s = float(np.abs(p).max()), float(np.abs(s).max())
            tol = 1e-5 * top_p + (1e-8 if fmt == "svmrank" else 0.0)
            ok = dev <= tol and abs(c_hat - linear_weights(model, fmt)[1]) <= tol
            bad += not ok
            rows.append({**row, "max_s": top_s, "max_p": top_p, "c_hat": c_hat, "c": linear_weights(model, fmt)[1],
                         "dev": dev, "rel_p": dev / top_p, "rel_s": dev / top_s, "secs": seconds,
                         "verdict": "agrees (<= 1e-5 max|p|)" if ok else f"DISAGREES (tolerance {tol:.3g})"})
    cols = [("fmt", "format", None), ("model", "model", None), ("max_s", "max|s| streamrank", "{:.6g}"),
                 ("max_p", "max|p| peer", "{:.6g}"), ("c_hat", "s - p (midrange)", "{:.9g}"),
                 ("c", "constant dropped", "{:.9g}"), ("dev", "max|s - p - c|", "{:.3g}"),
                 ("rel_p", "/ max|p|", "{:.2e}"), ("rel_s", "/ max|s|", "{:.2e}"), ("secs", "peer run s", "{:.2f}"),
                 ("verdict", "verdict", None)]
    table(rows, cols)
    record("export", "agreement", rows, cols, params={"C": AGREE_C, "data": where},
           notes=[f"(a) agreement: {where}, {len(Xte):,} test rows x {Xte.shape[1]} features; linear RankSVM "
                  f"C={AGREE_C:g} trained on {len(Xtr):,} rows; verdict: max|s - p - c| within 1e-5 max|p| "
                  f"(+ 1e-8 for svm_rank_classify's %.8f)"])
    return bad


# -- (b) speed of the exported model -------------------------------------------------------------------
def generated(work, part, rows, seed=0):
    """An HDF5 file of about ``rows`` rows of the mq2007-like preset (kept in --workdir)."""
    from streamrank.synthetic import write_hdf5
    scale = rows / PRESET_ROWS
    path = work / f"{PRESET}-{part}-{rows}.h5"
    if not path.exists():
        write_hdf5(path, PRESET, seed=seed, part=part, scale=scale)
    return path


def onnx_session(model):
    """(session, why not): onnxruntime on ``render(model, "onnx")``, 2 intra-op threads."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        return None, f"not available (onnxruntime: {exc}; pip install streamrank[export])"
    from streamrank.export import render
    try:
        graph = render(model, "onnx")
    except Exception as exc:  # the graph module is another part of issue 32: say why, do not stop the bench
        return None, f"not available (render(model, 'onnx'): {type(exc).__name__}: {str(exc)[:160]})"
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    # threads that spin between operators take a core from the other process on a shared machine
    # (docs/formats.md, onnx: "Speed"): measured 1.34x predict with spinning, 0.81x without
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"]), None


def ort_scores(sess, X, batch):
    import numpy as np
    name = sess.get_inputs()[0].name
    out = np.empty(len(X), np.float32)
    for i in range(0, len(X), batch):
        out[i:i + batch] = sess.run(None, {name: X[i:i + batch]})[0].ravel()
    return out


def time_model(label, model, model_path, data_path, X, batch, args, work):
    """Rows of the timing table for one model: CLI predict, decision_function, onnxruntime."""
    import numpy as np
    sess, why = onnx_session(model)
    out_txt = work / "predict-scores.txt"
    cli = [sys.executable, "-m", "streamrank", "predict", str(model_path), str(data_path), "-o", str(out_txt)]
    # warm-up (numba's cache, the page cache of the file): one untimed run of each on a slice
    subprocess.run(cli, check=True, capture_output=True, cwd=REPO)
    model.decision_function(X[:2000])
    if sess is not None:
        ort_scores(sess, X[:2000], batch)
    times = {"cli": [], "df": [], "ort": []}
    s = o = None
    for _ in range(args.repeats):
        t = time.perf_counter()
        run = subprocess.run(cli, capture_output=True, text=True, cwd=REPO)
        times["cli"].append(time.perf_counter() - t)
        if run.returncode != 0:
            raise RuntimeError(f"streamrank predict failed: {run.stderr[-800:]}")
        t = time.perf_counter()
        s = model.decision_function(X)
        times["df"].append(time.perf_counter() - t)
        if sess is not None:
            t = time.perf_counter()
            o = ort_scores(sess, X, batch)
            times["ort"].append(time.perf_counter() - t)
    per_m = 1e6 / len(X)
    med = {k: statistics.median(v) for k, v in times.items() if v}
    rows = [{"model": label, "tool": "streamrank predict (whole process)", "runs": times["cli"]},
            {"model": label, "tool": "model.decision_function (in process)", "runs": times["df"]}]
    if sess is None:
        rows.append({"model": label, "tool": "onnxruntime", "note": why})
    else:
        dev = float(np.abs(o.astype(np.float64) - s).max() / np.abs(s).max())
        rows.append({"model": label, "tool": f"onnxruntime, batches of {batch:,}", "runs": times["ort"],
                     "note": f"max|onnx - decision_function| / max|s| = {dev:.1e}"})
        for r, k in zip(rows, ("cli", "df")):
            r["ratio"] = med["ort"] / med[k]
    for r, k in zip(rows, ("cli", "df", "ort")):
        if k in med:
            r.update(rows_n=len(X), median=med[k], per_m=med[k] * per_m,
                     each=" ".join(f"{v:.2f}" for v in times[k]))
    return rows


def section_speed(args, work):
    import streamrank
    streamrank.configure()  # the command line's process settings
    print(f"\n(b) speed: generated {PRESET}-like rows (46 features), {args.repeats} rounds interleaved; models trained "
          f"on its train part at scale 0.25; ratio = onnxruntime's median / the row's median")
    train = generated(work, "train", int(PRESET_ROWS * 0.25))
    test = generated(work, "test", args.rows)
    X, _, _ = streamrank.load_ranking(test)
    rows = []
    lin = streamrank.RankSVM(C=1.0, normalize="zscore").fit(str(train))
    lin.save(work / "linear.h5")
    rows += time_model("linear (zscore)", lin.model_, work / "linear.h5", test, X, args.linear_batch, args, work)
    kr = min(args.kernel_rows, len(X))
    ktest = test if kr == len(X) else generated(work, "test", args.kernel_rows)
    Xk = X[:kr] if ktest == test else streamrank.load_ranking(ktest)[0]
    del X
    ny = streamrank.RankSVM(C=1.0, normalize="zscore", method="nystroem", kernel="rbf",
                            n_components=args.components).fit(str(train))
    ny.save(work / "nystroem.h5")
    rows += time_model(f"rbf Nystroem m={args.components:,} (zscore)", ny.model_, work / "nystroem.h5", ktest, Xk,
                       args.batch, args, work)
    cols = [("model", "model", None), ("tool", "tool", None), ("rows_n", "rows", "{:,}"),
            ("median", "median s", "{:.2f}"), ("each", "each run s", None), ("per_m", "s per 1M rows", "{:.2f}"),
            ("ratio", "onnx / this", "{:.2f}x"), ("note", "note", None)]
    table(rows, cols)
    record("export", "speed", rows, cols,
           params={"repeats": args.repeats, "rows": args.rows, "kernel_rows": args.kernel_rows,
                   "components": args.components, "batch": args.batch, "linear_batch": args.linear_batch},
           notes=[f"(b) speed: generated {PRESET}-like rows (46 features), {args.repeats} rounds interleaved; models "
                  f"trained on its train part at scale 0.25; ratio = onnxruntime's median / the row's median"])


# the child of section (c): one laplacian Nystroem model scored by onnxruntime, the graph chunked (as
# exported) or as one (rows, m, d) difference (naive: the chunk limits lifted); peak RSS is the child's
LAPLACIAN_CHILD = """
import json, resource, time, numpy as np, onnxruntime as ort
import streamrank.export.onnx_graph as og
from streamrank.state.model import LinearModel
from streamrank.features.normalize import Normalizer
from streamrank.features.maps import Nystroem
from streamrank.features.kernels import default_gamma
from streamrank.export import render
n, d, m, mode = {n}, {d}, {m}, {mode!r}
rng = np.random.default_rng(0)
X = (rng.random((n, d)) * np.logspace(-2, 4, d)).astype(np.float32)
norm = Normalizer("zscore").fit([X[:5000]], d)
Xn = norm.transform(X[:5000])
fmap = Nystroem("laplacian", default_gamma(d, Xn.var()), n_components=m).fit(Xn)
model = LinearModel(rng.standard_normal(fmap.n_components_), norm, n_features=d, fmap=fmap)
if mode == "naive":
    og.LAPLACIAN_CHUNK_BYTES = 1 << 50; og.CHUNK_BYTES = 1 << 50; og.MAX_CHUNK_ROWS = 1 << 40
chunk = n if mode == "naive" else og.chunk_rows(model)
so = ort.SessionOptions(); so.intra_op_num_threads = 2
so.add_session_config_entry("session.intra_op.allow_spinning", "0")
s = ort.InferenceSession(render(model, "onnx"), so, providers=["CPUExecutionProvider"])
s.run(None, {{"X": X[:1]}})
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter(); got = s.run(None, {{"X": X}})[0]; t = time.perf_counter() - t
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
ref = model.decision_function(X)
print(json.dumps({{"seconds": t, "rise_mb": after - before, "chunk": int(chunk),
                  "err": float(np.abs(got - ref).max() / np.abs(ref).max())}}))
"""


def section_laplacian(args, work):
    """(c) Laplacian's (rows, m, d) difference: the exported graph bounds it by chunks of rows (a
    Scan); the naive graph holds it whole. Each mode in a process of its own."""
    n, d, m = args.laplacian_rows, 46, args.laplacian_components
    print(f"\n(c) laplacian Nystroem m={m:,}, d={d}, {n:,} rows scored by onnxruntime in one call: the exported graph "
          f"(chunks of rows) against one (rows, m, d) difference ({n * m * d * 8 / 2**20:,.0f} MiB)")
    rows = []
    for mode in ("chunked", "naive"):
        out = run_child(LAPLACIAN_CHILD.format(n=n, d=d, m=m, mode=mode), timeout=1800)
        rows.append({"graph": mode, "rows_n": n, "chunk": out["chunk"], "seconds": out["seconds"],
                     "rise_mb": out["rise_mb"], "peak_mb": out["peak_rss_mb"], "err": out["err"]})
    cols = [("graph", "graph", None), ("rows_n", "rows", "{:,}"), ("chunk", "rows a step", "{:,}"),
            ("seconds", "s", "{:.2f}"), ("rise_mb", "RSS rise MB", "{:,.0f}"), ("peak_mb", "peak RSS MB", "{:,.0f}"),
            ("err", "max |onnx - predict| / max|s|", "{:.1e}")]
    table(rows, cols)
    record("export", "laplacian memory", rows, cols, params={"rows": n, "features": d, "components": m},
           notes=[f"laplacian Nystroem m={m:,}, d={d}: the exported graph's Scan over row chunks against one "
                  f"(rows, m, d) difference of {n * m * d * 8 / 2**20:,.0f} MiB; each in a process of its own"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA), help=f"MQ2008's folder (default {DEFAULT_DATA})")
    ap.add_argument("--svmrank-classify", dest="svmrank_prog", default=None,
                    help=f"SVMrank's svm_rank_classify (default {DEFAULT_PROGS['svmrank']})")
    ap.add_argument("--liblinear-predict", dest="liblinear_prog", default=None,
                    help=f"the LIBLINEAR ranksvm extension's predict (default {DEFAULT_PROGS['liblinear']})")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows of the generated test set (default 1M)")
    ap.add_argument("--kernel-rows", type=int, default=250_000,
                    help="rows the Nystroem model scores (default 250,000; 1000000 for the full set, ~16 min)")
    ap.add_argument("--components", type=int, default=2000, help="Nystroem landmarks m (default 2000)")
    ap.add_argument("--batch", type=int, default=4096, help="onnxruntime batch rows, Nystroem (default 4096)")
    ap.add_argument("--linear-batch", type=int, default=1 << 20, help="onnxruntime batch rows, linear (default 2^20)")
    ap.add_argument("--skip-timing", action="store_true", help="the agreement table only")
    ap.add_argument("--laplacian-rows", type=int, default=2000,
                    help="rows of section (c), laplacian's memory (default 2000; the naive graph holds rows x m x d x 8 "
                         "bytes twice)")
    ap.add_argument("--laplacian-components", type=int, default=1000, help="landmarks of section (c) (default 1000)")
    ap.add_argument("--workdir", default=None, help="where data, models and outputs go (default: a temporary "
                                                    "directory, removed at the end; about 300 MB at the defaults)")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.rows < 1000 or args.kernel_rows < 1000 or args.batch < 1 or args.linear_batch < 1:
        ap.error("--repeats must be >= 1, --rows and --kernel-rows >= 1000, batches >= 1")
    header()
    tmp = None
    if args.workdir:
        work = Path(args.workdir)
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="bench-export-")
        work = Path(tmp.name)
    try:
        bad = section_agreement(args, work)
        if not args.skip_timing:
            section_speed(args, work)
            section_laplacian(args, work)
    finally:
        if tmp is not None:
            tmp.cleanup()
    print("produced by: python " + " ".join(sys.argv))  # bench_export.py's, or bench_peers.py's --only export
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
