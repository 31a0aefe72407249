"""Kernel approximation at a million rows (issue 46): Nystroem and random Fourier features with
m = 2,000 on generated data in MSLR's shape (136 features), a 2 GB budget, the feature cache cold,
each phase timed against the machine's limits measured in the same run.

    python tools/bench_kernel_big.py                      # 1,000,000 training rows, every section
    python tools/bench_kernel_big.py --rows 100000        # smaller first
    python tools/bench_kernel_big.py --only nystroem,predict
    python tools/bench_kernel_big.py --only equivalence   # --map-rows features (phi) vs the default

Sections (``--only``): ``nystroem`` and ``rff`` (training: map fit, Hessian sketch, first pass,
later passes, whole process, peak RSS; the limits beside them), ``predict`` (the Nystroem model's
``predict`` on the training rows and onnxruntime's scores of its exported graph, against K(x, L)
alone in float64), ``lightgbm`` (100 trees of lambdarank on the same split: time and test NDCG@10
beside the Nystroem model's), ``equivalence`` (the same training on phi rows, the code before
kernel rows: objective and test NDCG@10).

The limits, each measured in the process that trains, right after it:

- K(x, L) alone: the map's kernel values of every training row (float32 out, as kernel rows are
  kept; the rows are read first and not timed), the floor of a mapping pass;
- read: every block file of the feature cache read once into one buffer, from the page cache (a
  second read) and from the disk (each file's pages dropped first, posix_fadvise), the floor of
  a later pass (whichever holds the rows: the page cache when it holds them all);
- write: 2 GB written and synced beside the cache, the disk's write rate; the first pass stores
  every mapped row, so the time to write them at that rate is its other floor;
- GEMM: float64 and float32 matrix products (2,000 x 2,000), the machine's flop rate.

Every training runs in a fresh process whose numba kernels were loaded by a tiny run first; the
cache directory is new, and the OS page cache is dropped before each training when this runs as
root (else the input file's pages are dropped with posix_fadvise). Rows: the generated
``mslr30k`` preset at the scale that gives ``--rows`` rows (seed 0), and its ``test`` part at a
tenth of that. Needs ``pip install lightgbm onnxruntime onnx`` for its sections.
"""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import machine_facts, run_child, table, table_record  # noqa: E402

PRESET_ROWS = 2270296  # the mslr30k preset's rows at scale 1

WARM = """
import time, warnings, json, os
import numpy as np
import streamrank
getattr(streamrank, "configure", lambda: None)()
from streamrank.training.linear import train_linear
with streamrank.open_dataset(__WARM__) as _ds, warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for _rows in ("kernel", "features"):
        for _b in ("2GB", "100KB"):
            train_linear(_ds, C=[1.0], tol=1e-2, method="nystroem", components=300, memory_budget=_b,
                         map_rows=_rows, cache_dir=__WARMDIR__)
    for _b in ("2GB", "100KB"):
        _m, _ = train_linear(_ds, C=[1.0], tol=1e-2, method="rff", components=300, memory_budget=_b,
                             cache_dir=__WARMDIR__)
    _m.predict_dataset(_ds)
"""

# the child's instrumentation (module attributes replaced in the child only)
INSTR = """
import streamrank.objectives.mapped_source as _mp, streamrank.features.maps as _fm
import streamrank.objectives.sketch_precond as _sk
_I = {"sources": [], "fit": [], "sketch": [], "passes": []}

def _hwm_mb():
    return int([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]) * 1024 / 1e6

class _Src(_mp.MappedSource):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        _I["sources"].append(self)

    def __iter__(self):
        t = time.perf_counter()
        try:
            yield from super().__iter__()
        finally:
            _I["passes"].append(time.perf_counter() - t)
_mp.MappedSource = _Src
_make_map = _fm.make_map
def _make(*a, **k):
    fmap = _make_map(*a, **k)
    fit = fmap.fit
    def timed_fit(*a, **k):
        t = time.perf_counter()
        try:
            return fit(*a, **k)
        finally:
            _I["fit"].append(time.perf_counter() - t)
    fmap.fit = timed_fit
    return fmap
_fm.make_map = _make
_sketch = _sk.sketch_hessian
def _timed_sketch(*a, **k):
    t = time.perf_counter()
    n = len(_I["passes"])
    try:
        return _sketch(*a, **k)
    finally:
        _I["sketch"].append(time.perf_counter() - t)
        _I["sketch_pass"] = n  # the index of the sketch's pass among the source's passes
_sk.sketch_hessian = _timed_sketch
"""

TRAIN = WARM + INSTR + """
P = json.loads(__PARAMS__)
if P.get("drop_caches"):
    os.system("sync")
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
else:
    fd = os.open(P["train"], os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
R = {}
t0 = time.perf_counter()
with streamrank.open_dataset(P["train"]) as ds:
    model, s = train_linear(ds, **P["kw"])
    R["total_s"] = time.perf_counter() - t0
    R["rss_mb"] = _hwm_mb()
    src = _I["sources"][-1]
    passes = list(_I["passes"])
    k = _I.get("sketch_pass")
    R.update(fit_s=sum(_I["fit"]), sketch_s=sum(_I["sketch"]), first_s=passes[0], n_passes=len(passes),
             objective=s["objective"], iterations=s["iterations"], passes=s["passes"], map_rows=s.get("map_rows"),
             map_storage=s.get("map_storage"), cg=sum(c["cg_steps"] for c in s["candidates"]),
             mapped_gb=src.n_rows * 4 * src.m / 1e9)
    later = [t for i, t in enumerate(passes) if i > 0 and i != k]
    R["later_s"] = sum(later) / max(len(later), 1)
    R["later_max_s"] = max(later, default=0.0)
    if P.get("save"):
        model.save(P["save"])
    if P.get("test"):
        from tools._benchutil import test_metrics
        R["test_predict_s"], R["test"] = test_metrics(model, P["test"])
    # -- the limits, in this process --
    disk = src._disk
    if disk is not None and disk.complete:
        from streamrank.cache.feature_cache import block_name
        files = [disk.dir / block_name(j) for j in range(disk.n_blocks)]
        buf = np.empty(max(os.path.getsize(f) for f in files), np.uint8)
        mv = memoryview(buf)
        def read_all(cold):
            total, t = 0, time.perf_counter()
            for f in files:
                with open(f, "rb", buffering=0) as fh:
                    if cold:
                        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                    got = 0
                    while True:
                        n = fh.readinto(mv[got:])
                        if not n:
                            break
                        got += n
                total += got
            return total, time.perf_counter() - t
        read_all(False)
        R["read_bytes"], R["read_cache_s"] = read_all(False)
        _, R["read_disk_s"] = read_all(True)
        del buf, mv
    fm = src.fmap
    if fm.kind == "nystroem":  # K(x, L) of every row into one reused float32 buffer, as kernel rows are kept
        spent, out = 0.0, None
        for block, a, b in ds.stream(block_bytes=64 << 20):
            Xn = block.X.astype(np.float64)
            if out is None or out.shape[0] < b - a:
                out = np.empty((b - a, fm.landmarks_.shape[0]), np.float32)
            t = time.perf_counter()
            fm.kernel_rows(Xn, row0=a, out=out[:b - a])
            spent += time.perf_counter() - t
        R["kernel_alone_s"] = spent
        del out
    # the disk's write rate: 2 GB written and synced where the cache was
    chunk = np.ones(64 << 20, np.uint8)
    os.makedirs(P["kw"]["cache_dir"], exist_ok=True)
    path = os.path.join(P["kw"]["cache_dir"], "write-rate.bin")
    t = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        for _ in range(32):
            f.write(chunk)
        os.fdatasync(f.fileno())
    R["disk_write_bps"] = 32 * chunk.nbytes / (time.perf_counter() - t)
    os.unlink(path)
    R["write_s"] = src.n_rows * 4 * src.m / R["disk_write_bps"]
A = np.random.default_rng(0).standard_normal((2000, 2000))
for dt in (np.float64, np.float32):
    B = A.astype(dt)
    B @ B
    t = time.perf_counter()
    for _ in range(3):
        B @ B
    R["gemm_gflops_" + np.dtype(dt).name] = 3 * 2 * 2000 ** 3 / (time.perf_counter() - t) / 1e9
print(json.dumps(R))
"""

PREDICT = """
import json, time, os
import numpy as np
import streamrank
getattr(streamrank, "configure", lambda: None)()
P = json.loads(__PARAMS__)
R = {}
model = streamrank.load(P["model"])._model()
with streamrank.open_dataset(P["train"]) as ds:
    model.predict_dataset(ds)  # warm: numba kernels, the file's pages
    t = time.perf_counter()
    s = model.predict_dataset(ds)
    R["predict_s"] = time.perf_counter() - t
    fm = model.fmap
    from streamrank.features.kernels import aligned_empty, parallel_tiles
    T, m = fm.chunk_rows(), fm.landmarks_.shape[0]
    spent = 0.0
    for block, a, b in ds.stream(block_bytes=64 << 20):  # K(x, L) in float64 by the same tiles, nothing kept
        Xn = model.normalizer.transform(block.X, block.query_ptr)
        t = time.perf_counter()
        parallel_tiles(Xn, a, T, lambda Xt, s, e, p, bufs: fm._kernel.into(Xt, bufs[0]),
                       lambda: [aligned_empty((T, m))])
        spent += time.perf_counter() - t
    R["kernel64_alone_s"] = spent
    import onnxruntime as ort
    so = ort.SessionOptions()  # onnxruntime's defaults (its threads spin: the machine is idle)
    from streamrank.export import render
    sess = ort.InferenceSession(render(model, "onnx"), so, providers=["CPUExecutionProvider"])
    got = np.empty(ds.n_rows)
    t = time.perf_counter()
    for block, a, b in ds.stream(block_bytes=64 << 20):
        for r in range(0, b - a, P["batch"]):
            got[a + r:min(b, a + r + P["batch"])] = sess.run(None, {"X": block.X[r:r + P["batch"]]})[0]
    R["onnx_s"] = time.perf_counter() - t
    ref = s[ds.row]
    R["onnx_max_rel"] = float(np.abs(got - ref).max() / np.abs(ref).max())
print(json.dumps(R))
"""


def generated(workdir, rows, part):
    from streamrank.synthetic import write_hdf5
    scale = rows / PRESET_ROWS
    path = Path(workdir) / f"mslr_{rows}_{part}.h5"
    if not path.exists():
        write_hdf5(path, "mslr30k", scale=scale, seed=0, part=part)
    return path


def train_row(args, work, method, rows_mode="auto", save=None):
    cache = work / f"cache-{method}-{rows_mode}"
    shutil.rmtree(cache, ignore_errors=True)
    kw = dict(method=method, components=args.components, gamma=args.gamma, C=[args.C], memory_budget=args.budget,
              cache_dir=str(cache))
    if method == "nystroem":
        kw["map_rows"] = rows_mode
    params = {"train": str(args.train), "test": str(args.test), "kw": kw, "save": save,
              "drop_caches": os.geteuid() == 0}
    code = (TRAIN.replace("__WARM__", repr(str(args.warm))).replace("__WARMDIR__", repr(str(work / "warm-cache")))
            .replace("__PARAMS__", repr(json.dumps(params))))
    r = run_child(code, timeout=7200)
    shutil.rmtree(cache, ignore_errors=True)
    r.update(method=method, rows=r.get("map_rows") or "features", ndcg10=r["test"].get("NDCG@10"))
    rb = r.get("read_bytes") or 0
    if rb:
        # the page cache holds the rows when they fit in RAM beside the process; the bound is the
        # rate of whichever holds them
        r["read_s"] = r["read_cache_s"] if rb < 0.8 * _mem_available() else r["read_disk_s"]
        r["later_over_read"] = r["later_s"] / r["read_s"]
    if r.get("kernel_alone_s"):
        r["first_over_kernel"] = r["first_s"] / r["kernel_alone_s"]
        r["first_over_floor"] = r["first_s"] / max(r["kernel_alone_s"], r["write_s"])
    return r


def _mem_available():
    for line in open("/proc/meminfo"):
        if line.startswith("MemTotal"):
            return int(line.split()[1]) * 1024
    return 0


TRAIN_COLS = [("method", "method", "{}"), ("rows", "rows kept", "{}"), ("fit_s", "map fit s", "{:.1f}"),
              ("sketch_s", "sketch s", "{:.1f}"), ("first_s", "first pass s", "{:.1f}"),
              ("kernel_alone_s", "K(x,L) alone s", "{:.1f}"), ("first_over_kernel", "first / K", "{:.2f}"),
              ("write_s", "write at disk rate s", "{:.1f}"), ("first_over_floor", "first / max(K, write)", "{:.2f}"),
              ("later_s", "later pass s", "{:.2f}"), ("read_cache_s", "read (page cache) s", "{:.2f}"),
              ("read_disk_s", "read (disk) s", "{:.2f}"), ("later_over_read", "later / read", "{:.2f}"),
              ("n_passes", "passes", "{:d}"), ("total_s", "whole run s", "{:.1f}"), ("rss_mb", "peak RSS MB", "{:.0f}"),
              ("objective", "objective", "{:.8g}"), ("ndcg10", "test NDCG@10", "{:.4f}"),
              ("gemm_gflops_float64", "GEMM f64 GFLOP/s", "{:.0f}")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--workdir", default="bench-out/kernel-big")
    ap.add_argument("--components", type=int, default=2000)
    ap.add_argument("--gamma", type=float, default=2.0 ** -5)
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--budget", default="2GB")
    ap.add_argument("--batch", type=int, default=10000, help="rows per onnxruntime call")
    ap.add_argument("--only", default="nystroem,rff,predict,lightgbm")
    ap.add_argument("--no-record", action="store_true")
    args = ap.parse_args()
    only = set(args.only.split(","))
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(machine_facts())
    args.train = generated(work, args.rows, 0)
    args.test = generated(work, max(1000, args.rows // 10), "test")
    args.warm = generated(work, 3000, 0)
    params = {"rows": args.rows, "components": args.components, "gamma": args.gamma, "C": args.C,
              "budget": args.budget, "cold": "page cache dropped" if os.geteuid() == 0 else "input pages dropped"}
    record = (lambda bench, section, rows, cols, **k: table(rows, cols)) if args.no_record else table_record
    rows = []
    model_path = work / "nystroem.h5"
    for method in ("nystroem", "rff"):
        if method in only:
            rows.append(train_row(args, work, method, save=str(model_path) if method == "nystroem" else None))
    if "equivalence" in only:
        rows.append(train_row(args, work, "nystroem", "features"))
        if not any(r["method"] == "nystroem" and r["rows"] == "kernel" for r in rows):
            rows.append(train_row(args, work, "nystroem", "auto"))
    if rows:
        notes = ["first pass: the fun pass that maps every row and writes the feature cache; later pass: the mean "
                 "of the other passes (the sketch's excluded); read: every cache file read once into one buffer"]
        eq = [r for r in rows if r["method"] == "nystroem"]
        if len(eq) == 2:
            a, b = eq
            rel = abs(a["objective"] - b["objective"]) / a["objective"]
            notes.append(f"phi rows vs kernel rows: objective {rel:.2e} relative, test NDCG@10 "
                         f"{abs(a['ndcg10'] - b['ndcg10']):.2e} apart")
        for n in notes:
            print(n)
        record("kernel_big", "training", rows, TRAIN_COLS, notes=notes, params=params)
    if "predict" in only and model_path.exists():
        p = {"model": str(model_path), "train": str(args.train), "batch": args.batch}
        r = run_child(PREDICT.replace("__PARAMS__", repr(json.dumps(p))), timeout=7200)
        r["predict_over_kernel"] = r["predict_s"] / r["kernel64_alone_s"]
        r["onnx_over_predict"] = r["onnx_s"] / r["predict_s"]
        record("kernel_big", "predict", [r], [
            ("predict_s", "predict s", "{:.1f}"), ("kernel64_alone_s", "K(x,L) float64 alone s", "{:.1f}"),
            ("predict_over_kernel", "predict / K", "{:.2f}"), ("onnx_s", "onnxruntime s", "{:.1f}"),
            ("onnx_over_predict", "onnx / predict", "{:.2f}"),
            ("onnx_max_rel", "onnx max error / max |score|", "{:.1e}"),
            ("peak_rss_mb", "peak RSS MB", "{:.0f}")], params={**params, "batch": args.batch})
    if "lightgbm" in only:
        r = lightgbm_row(args)
        if r is not None:
            record("kernel_big", "lightgbm", [r], [("trees", "trees", "{:d}"), ("train_s", "train s", "{:.1f}"),
                                                   ("ndcg10", "test NDCG@10", "{:.4f}"),
                                                   ("peak_rss_mb", "peak RSS MB", "{:.0f}")], params=params)


LGB = """
import json, time
import numpy as np
import h5py, lightgbm as lgb
import streamrank
from streamrank.evaluation.metrics import evaluate
P = json.loads(__PARAMS__)
def load(path):
    with h5py.File(path, "r") as f:
        return f["X"][()], f["y"][()], f["query_ptr"][()]
X, y, qp = load(P["train"])
t = time.perf_counter()
m = lgb.train({"objective": "lambdarank", "verbose": -1, "num_threads": 0}, lgb.Dataset(X, y, group=np.diff(qp)),
              num_boost_round=P["trees"])
R = {"train_s": time.perf_counter() - t, "trees": P["trees"]}
del X
Xt, yt, qpt = load(P["test"])
s = m.predict(Xt)
R["ndcg10"] = float(evaluate(yt, s, qpt, convention="letor4").means["NDCG@10"])
print(json.dumps(R))
"""


def lightgbm_row(args):
    try:
        import lightgbm  # noqa: F401
    except ImportError:
        print("lightgbm section skipped: pip install lightgbm")
        return None
    p = {"train": str(args.train), "test": str(args.test), "trees": 100}
    return run_child(LGB.replace("__PARAMS__", repr(json.dumps(p))), timeout=7200)


if __name__ == "__main__":
    main()
