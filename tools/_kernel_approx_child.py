"""The code tools/bench_kernel_approx.py runs in each child process (``RUN``: the warm-up, the
instrumentation of the solver's passes, and one run of the parameters it is given), kept apart from
the sections that print its figures."""

# Load (or compile into numba's on-disk cache) every kernel the runs use, on a tiny generated set,
# before anything is timed: linear; Nystroem in memory and streamed (recomputed), both solvers;
# random Fourier features; prediction and letor4 evaluation.
WARM = """
import time, warnings
_t = time.perf_counter()
import numpy as np
import streamrank
getattr(streamrank, "configure", lambda: None)()  # the command line's process settings
from streamrank.training.linear import train_linear  # noqa: E402
from streamrank.training.problem import read_labels
from streamrank.evaluation.metrics import evaluate
with streamrank.open_dataset(__WARM__) as _ds, warnings.catch_warnings():
    warnings.simplefilter("ignore")
    train_linear(_ds, C=[1.0], tol=1e-2)
    for _solver in ("tron", "newton_cholesky"):
        for _b in ("2GB", "100KB"):
            _m, _ = train_linear(_ds, C=[1.0], tol=1e-2, method="nystroem", components=64, solver=_solver,
                                 memory_budget=_b)
    _m, _ = train_linear(_ds, C=[1.0], tol=1e-2, method="rff", components=64)
    _sc = _m.predict_dataset(_ds)
    evaluate(read_labels(_ds), _sc[_ds.row], _ds.query_ptr, convention="letor4")
warm_s = time.perf_counter() - _t
"""

# Instrumentation of the child (module attributes replaced in the child only; the package is not
# changed): feature-map fits, MappedSource passes (timed whole, tagged by who asked for them), the
# dense Hessian of newton_cholesky and its pieces, and --solver auto's choice.
INSTR = """
import json, os, time, zlib
import numpy as np
import streamrank.objectives.mapped_source as _mp, streamrank.features.maps as _fm, streamrank.training.linear as _tr
import streamrank.objectives.rank_objective as _ob
_I = {"sources": [], "fits": [], "fit_hwm": [], "passes": [], "hess": [], "hess_prod": [], "phi": [], "choose": []}
_FLAG = [None]

def _hwm_mb():
    return int([l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]) * 1024 / 1e6  # MB

class _Src(_mp.MappedSource):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        _I["sources"].append(self)

    def __iter__(self):
        kind, first = _FLAG[0] or "pass", self.passes == 0
        t = time.perf_counter()
        try:
            yield from super().__iter__()
        finally:
            _I["passes"].append(("first" if first else kind, time.perf_counter() - t))
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
            _I["fits"].append(time.perf_counter() - t)
            _I["fit_hwm"].append(_hwm_mb())
    fmap.fit = timed_fit
    return fmap
_fm.make_map = _make

_choose = _tr.choose_solver
def _timed_choose(*a, **k):
    _FLAG[0] = "auto"
    t = time.perf_counter()
    try:
        name, why = _choose(*a, **k)
    finally:
        _FLAG[0] = None
    _I["choose"].append({"solver": name, "why": why, "s": time.perf_counter() - t})
    return name, why
_tr.choose_solver = _timed_choose

_hessian = _ob.RankObjective.hessian
def _timed_hessian(self, *a, **k):
    prev = _FLAG[0]
    _FLAG[0] = prev or "hessian"
    t = time.perf_counter()
    try:
        return _hessian(self, *a, **k)
    finally:
        _FLAG[0] = prev
        if prev is None:
            _I["hess"].append({"s": time.perf_counter() - t, "rows": int(self.hessian_rows), "m": self.n_features})
_ob.RankObjective.hessian = _timed_hessian

def _timer(key, f, when):
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            if when(a):
                _I[key].append(time.perf_counter() - t)
    return g
_ob.pk.hess_prod = _timer("hess_prod", _ob.pk.hess_prod, lambda a: _FLAG[0] == "hessian" and np.ndim(a[0]) == 2)
_ob._phi = _timer("phi", _ob._phi, lambda a: _FLAG[0] == "hessian")
"""

# One training run: open -> train -> (save) -> (letor4 on test) [-> per-pass limits]
RUN = WARM + INSTR + """
P = json.loads(__PARAMS__)
from streamrank.cache.feature_cache import block_name
R = {"warm_s": warm_s}
kw = dict(P["kw"])
t0 = time.perf_counter()
with streamrank.open_dataset(P["train"]) as ds:
    vds = streamrank.open_dataset(P["valid"]) if P.get("valid") else None
    t1 = time.perf_counter()
    model, s = train_linear(ds, valid=vds, **kw)
    t2 = time.perf_counter()
    if P.get("save"):
        model.save(P["save"])
    t3 = time.perf_counter()
    R["rss_train_mb"] = _hwm_mb()
    R.update(open_s=t1 - t0, train_s=t2 - t1, save_s=t3 - t2, total_s=t3 - t0, n_rows=ds.n_rows)
    srcs = _I["sources"]
    R["fit_s"] = sum(_I["fits"])
    R["rss_fit_mb"] = max(_I["fit_hwm"]) if _I["fit_hwm"] else None
    R["transform_s"] = sum(x._map_seconds for x in srcs)
    R["transform_rows"] = sum(x._map_rows for x in srcs)
    R["map_s"] = R["fit_s"] + R["transform_s"]
    R["solver_s"] = R["train_s"] - R["map_s"]
    cands = s["candidates"]
    R.update(objective=s["objective"], grad_norm=s["grad_norm"], iterations=s["iterations"], passes=s["passes"],
             cg=sum(c["cg_steps"] for c in cands), solver=s["solver"], map_storage=s.get("map_storage"),
             components=s.get("components"), C=s["C"], gamma=s["gamma"], message=cands[-1]["message"],
             tron_s=sum(c["seconds"] for c in cands))
    if srcs:
        src = srcs[-1]
        R["reason"] = src.reason
        R["n_blocks"] = len(src.stream)
        R["mapped_bytes"] = src.n_rows * 4 * src.m
        if src._disk is not None:
            R["cache_stats"] = src._disk.stats.as_dict()
            R["cache_dir"] = str(src._disk.dir)
    R["pass_times"] = _I["passes"]
    R["hess"] = _I["hess"]
    R["hess_prod_s"] = sum(_I["hess_prod"])
    R["phi_s"] = sum(_I["phi"])
    R["choose"] = _I["choose"]
    if P.get("test"):
        from tools._benchutil import test_metrics
        R["predict_s"], R["test"] = test_metrics(model, P["test"])
    if P.get("limits") and srcs:
        src = srcs[-1]
        L = {}
        disk = src._disk
        # (a) read every block file of the cache into one reused buffer (as a pass does), with and
        #     without the crc32 check that FeatureCache.get applies to every read
        if disk is not None and disk.complete:
            files = [disk.dir / block_name(k) for k in range(disk.n_blocks)]
            buf = np.empty(max(os.path.getsize(f) for f in files), np.uint8)
            mv = memoryview(buf)
            def read_all(crc):
                total = 0
                for f in files:
                    with open(f, "rb", buffering=0) as fh:
                        got = 0
                        while True:
                            n = fh.readinto(mv[got:])
                            if not n:
                                break
                            got += n
                    if crc:
                        zlib.crc32(mv[:got])
                    total += got
                return total
            for crc in (False, True):
                ts = []
                for _ in range(P.get("reps", 2)):
                    t = time.perf_counter()
                    nbytes = read_all(crc)
                    ts.append(time.perf_counter() - t)
                L["read_crc_s" if crc else "read_s"] = min(ts)
            L["read_bytes"] = nbytes
            # (c) numpy's float32 products of one pass (Phi s and Phi^T t) on blocks in memory, from
            #     the first block file, scaled to all rows
            r0 = disk.rows(0)
            Phi = buf[:r0 * src.m * 4].view(np.float32).reshape(r0, src.m)
            with open(files[0], "rb", buffering=0) as fh:
                fh.readinto(mv[:r0 * src.m * 4])
            sv, tv = np.ones(src.m, np.float32), np.ones(r0, np.float32)
            ts = []
            for _ in range(3):
                t = time.perf_counter()
                Phi @ sv
                Phi.T @ tv
                ts.append(time.perf_counter() - t)
            L["blas_pass_s"] = min(ts) * src.n_rows / r0
            del Phi, buf, mv
            # the disk itself: one block with its pages dropped first (posix_fadvise DONTNEED)
            try:
                bps = disk.measure_read(0, cold=True)
                L["cold_read_bps"] = bps
            except Exception as exc:  # noqa: BLE001
                L["cold_read_error"] = str(exc)
        # (b) mapping rate: normalise + transform rows of the first block, as a pass does (best of 2)
        rows = min(src.stream.max_block_rows, P.get("map_rows", 32768), ds.n_rows)
        X, _ = ds.read(0, rows)
        out = np.empty((rows, src.m), np.float32)
        ts = []
        for _ in range(2):
            t = time.perf_counter()
            src.fmap.transform(src.normalizer.transform(X, None), dtype=np.float32, out=out)
            ts.append(time.perf_counter() - t)
        L["map_rps"] = rows / min(ts)
        L["map_pass_s"] = src.n_rows / L["map_rps"]
        del X, out
        # BLAS rate: (4096 x 1024) @ (1024 x 1024), float64 (newton's Hessian) and float32
        rng = np.random.default_rng(0)
        for dt, key in ((np.float64, "dgemm"), (np.float32, "sgemm")):
            A = rng.standard_normal((4096, 1024)).astype(dt)
            B = rng.standard_normal((1024, 1024)).astype(dt)
            A @ B
            ts = []
            for _ in range(3):
                t = time.perf_counter()
                A @ B
                ts.append(time.perf_counter() - t)
            L[key + "_gflops"] = 2 * 4096 * 1024 * 1024 / min(ts) / 1e9
        R["limits"] = L
    if vds is not None:
        vds.close()
R["load_end"] = os.getloadavg()[0]
print(json.dumps(R, default=lambda o: o.item() if hasattr(o, "item") else str(o)))
"""
