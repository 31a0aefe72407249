"""This machine's limits, the bars of issue 34: every target there is a ratio to one of them,
measured in the same run.

    python tools/bench_limits.py               # about a minute: 598 MB float32 X, a 2 GB file, GEMM n = 3000
    python tools/bench_limits.py --quick       # seconds (small sizes; for smoke tests only)

- **memory bandwidth**: the float32 matrix-vector product ``X @ v`` of a C-ordered X of 1.1M x 136
  (598 MB, the linear pass's rows; issue 34's ``27 GB/s`` is this product), GB/s = bytes of X /
  seconds, best of ``--repeats``, on 1 and on 2 BLAS threads (threadpoolctl); the same for
  ``X^T t`` (the pass's second product), a float64 X (1.2 GB) and two plain streaming reads that
  do no more than load every byte (``np.sum``, one thread; a numba sum on 1 and 2 threads): the
  floor any pass over X sits on;
- **disk streaming rate**: a file of ``--disk-gb`` GB written (and fsynced) under ``--workdir``,
  then read start to end in 16 MB blocks, its pages dropped from the page cache before each read
  (``os.posix_fadvise(POSIX_FADV_DONTNEED)``: the machine's RAM would otherwise hold the whole
  file and the read would measure memory). The host beneath a virtual disk may still cache it, so
  this is the rate the guest sees, not the device's. The same file read without dropping pages is
  the page-cache rate (a cached file's ceiling); the file is removed afterwards;
- **dense GEMM**: ``A @ B`` of n x n float64 and float32 (numpy / OpenBLAS), GFLOP/s = 2 n^3 /
  seconds, on 1 and 2 threads.

Measured under the command line's process settings (``streamrank.configure()`` turns numpy's
transparent huge-page advice off, streamrank._native.process; ``STREAMRANK_NUMPY_HUGEPAGES=1`` keeps it): the rows a pass
reads are allocated the same way. Measured on the 2-core EPYC, huge pages read 5-15 % faster.

Machine facts first; the table is appended to docs/results/limits.jsonl (_benchutil.record).
Other benchmarks import :func:`measure_limits` (quick=True for a seconds-long look) and print their
times beside :func:`read_seconds` (X's bytes at the measured bandwidth). A shared 2-core machine is
noisy: best-of-N is the limit, the median is printed beside it.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import machine_facts, table_record  # noqa: E402

# the linear pass's rows (issue 34: generated mslr30k at scale 0.5, 1.1M x 136, 598 MB as float32)
ROWS, COLS = 1_100_000, 136
QUICK_ROWS = 20_000
BLOCK = 16 << 20  # bytes a read() asks for when streaming the file
SCRATCH = Path("/work/scratch") if Path("/work/scratch").is_dir() else Path(tempfile.gettempdir())

COLUMNS = [("limit", "limit", None), ("how", "measured by", None), ("threads", "threads", None),
           ("size", "size", None), ("best_s", "best s", "{:.4f}"), ("median_s", "median s", "{:.4f}"),
           ("rate", "best rate", "{:,.1f}"), ("median_rate", "median rate", "{:,.1f}"), ("unit", "unit", None)]


@contextmanager
def blas_threads(n):
    """BLAS (OpenBLAS here) on ``n`` threads inside (threadpoolctl, process-wide)."""
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=n, user_api="blas"):
        yield


def _times(fn, repeats):
    """Seconds of ``repeats`` calls of fn() after one untimed warm-up call (pages touched, threads up)."""
    fn()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def _row(limit, how, threads, size, amount, unit, secs, scale):
    """A table row: the best and median of ``secs``, and ``amount / seconds / scale`` as rates."""
    best, med = min(secs), statistics.median(secs)
    return {"limit": limit, "how": how, "threads": threads, "size": size, "best_s": best, "median_s": med,
            "rate": amount / best / scale, "median_rate": amount / med / scale, "unit": unit,
            "runs_s": list(secs)}


_sum_kernel = None


def _numba_sum():
    """A nogil numba sum of a float32 row range: the plainest full read of X. fastmath lets LLVM
    keep several SIMD accumulators (a reassociated sum: this kernel measures speed, not values)."""
    global _sum_kernel
    if _sum_kernel is None:
        import numba

        @numba.njit(nogil=True, fastmath=True)
        def rows_sum(X, r0, r1):
            acc = 0.0
            for i in range(r0, r1):
                for k in range(X.shape[1]):
                    acc += X[i, k]
            return acc
        _sum_kernel = rows_sum
    return _sum_kernel


def _threaded_sum(X, pool, threads):
    """The numba sum over ``threads`` contiguous row ranges at once (the kernel releases the GIL)."""
    kern = _numba_sum()
    b = np.linspace(0, X.shape[0], threads + 1).round().astype(np.int64)
    if threads == 1:
        return kern(X, 0, X.shape[0])
    return sum(pool.map(lambda k: kern(X, int(b[k]), int(b[k + 1])), range(threads)))


def memory_bandwidth(rows=ROWS, cols=COLS, repeats=7, threads=(1, 2), float64=True, seed=0):
    """Table rows (GB/s = bytes of X / seconds) of reading a ``rows`` x ``cols`` X from memory:
    float32 ``X @ v`` and ``X^T t`` (OpenBLAS gemv) and plain streaming sums on each of ``threads``,
    and float64 ``X @ v`` when ``float64``. Best and median of ``repeats`` after a warm-up."""
    rng = np.random.default_rng(seed)
    X = rng.random((rows, cols), dtype=np.float32)
    v, t = rng.random(cols, dtype=np.float32), rng.random(rows, dtype=np.float32)
    size = f"{rows:,} x {cols} f32, {X.nbytes / 1e6:,.0f} MB"
    out = []

    def add(limit, how, k, fn, nbytes, label=size):
        out.append(_row(limit, how, k, label, nbytes, "GB/s", _times(fn, repeats), 1e9))
    for k in threads:
        with blas_threads(k):
            add("memory bandwidth", "float32 X @ v (sgemv)", k, lambda: X @ v, X.nbytes)
    for k in threads:
        with blas_threads(k):
            add("memory bandwidth", "float32 X^T t (sgemv)", k, lambda: t @ X, X.nbytes)
    add("memory streaming", "np.sum(X) (float32)", 1, lambda: X.sum(), X.nbytes)
    with ThreadPoolExecutor(max_workers=max(threads)) as pool:
        for k in threads:
            add("memory streaming", "numba sum of X's rows", k, lambda: _threaded_sum(X, pool, k), X.nbytes)
    if float64:
        del X
        X64 = rng.random((rows, cols))
        v64 = rng.random(cols)
        size64 = f"{rows:,} x {cols} f64, {X64.nbytes / 1e6:,.0f} MB"
        for k in threads:
            with blas_threads(k):
                add("memory bandwidth", "float64 X @ v (dgemv)", k, lambda: X64 @ v64, X64.nbytes, size64)
    return out


def _drop_cache(path):
    """Drop ``path``'s pages from the page cache (clean pages only: the file was fsynced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _read_all(path, buf):
    """Read ``path`` start to end into ``buf`` a block at a time; returns the bytes read."""
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            got = f.readinto(buf)
            if not got:
                return n
            n += got


def disk_rate(workdir=None, size_bytes=2 << 30, repeats=3, block=BLOCK):
    """Table rows (MB/s, MB = 10^6 bytes) of streaming a ``size_bytes`` file from disk, its pages
    dropped before each read (``posix_fadvise(DONTNEED)``), and from the page cache (pages kept).
    The file (under ``workdir``, default /work/scratch) is written, fsynced and removed."""
    work = Path(workdir or SCRATCH)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"bench_limits_{os.getpid()}.bin"
    chunk = np.random.default_rng(1).integers(0, 256, min(block, size_bytes), dtype=np.uint8).tobytes()
    buf = bytearray(block)
    mv = memoryview(buf)
    size = f"{size_bytes / 1e9:.2f} GB file, {block >> 20} MB reads"
    try:
        with open(path, "wb") as f:
            left = size_bytes
            while left > 0:
                left -= f.write(chunk[:min(left, len(chunk))])
            f.flush()
            os.fsync(f.fileno())
        if not hasattr(os, "posix_fadvise"):
            raise RuntimeError("disk_rate needs os.posix_fadvise (Linux) to drop the page cache")
        cold = []
        for _ in range(repeats):
            _drop_cache(path)
            t = time.perf_counter()
            n = _read_all(path, mv)
            cold.append(time.perf_counter() - t)
            if n != size_bytes:
                raise RuntimeError(f"read {n} bytes of {path}, expected {size_bytes}")
        warm = _times(lambda: _read_all(path, mv), repeats)  # the last read left every page cached
    finally:
        path.unlink(missing_ok=True)
    return [_row("disk streaming", "read(), page cache dropped (fadvise)", 1, size, size_bytes, "MB/s", cold, 1e6),
            _row("page-cache read", "read(), pages cached", 1, size, size_bytes, "MB/s", warm, 1e6)]


def gemm_rate(n=3000, repeats=3, threads=(1, 2), dtypes=("float64", "float32"), seed=0):
    """Table rows (GFLOP/s = 2 n^3 / seconds) of a dense n x n ``A @ B`` (numpy, OpenBLAS)."""
    rng = np.random.default_rng(seed)
    out = []
    for dt in dtypes:
        A = rng.random((n, n)).astype(dt)
        B = rng.random((n, n)).astype(dt)
        for k in threads:
            with blas_threads(k):
                secs = _times(lambda: A @ B, repeats)
            out.append(_row(f"dense GEMM {dt}", f"{dt} A @ B (numpy)", k, f"n = {n}", 2.0 * n ** 3, "GFLOP/s",
                            secs, 1e9))
    return out


def summarize(rows):
    """The limits as numbers: ``bandwidth_gbs`` (best float32 X @ v: issue 34's bandwidth),
    ``stream_gbs`` (best plain streaming read), ``disk_mbs``, ``page_cache_mbs``,
    ``gemm_float64_gflops`` and ``gemm_float32_gflops`` (best over threads)."""
    def best(pred):
        got = [r["rate"] for r in rows if pred(r)]
        return max(got) if got else None
    return {"bandwidth_gbs": best(lambda r: r["how"].startswith("float32 X @ v")),
            "stream_gbs": best(lambda r: r["limit"] == "memory streaming"),
            "disk_mbs": best(lambda r: r["limit"] == "disk streaming"),
            "page_cache_mbs": best(lambda r: r["limit"] == "page-cache read"),
            "gemm_float64_gflops": best(lambda r: r["limit"] == "dense GEMM float64"),
            "gemm_float32_gflops": best(lambda r: r["limit"] == "dense GEMM float32")}


def read_seconds(nbytes, limits):
    """Seconds to read ``nbytes`` once from memory at the measured bandwidth (the float32 X @ v
    rate of :func:`summarize`): the bound a pass over in-memory rows is compared with."""
    return nbytes / (limits["bandwidth_gbs"] * 1e9)


def measure_limits(quick=False, *, workdir=None, results_dir=None, bench="limits", section="limits",
                   repeats=None, disk_bytes=None, gemm_n=None, rows=None, params=None):
    """Measure every limit, print the machine facts and the table, record it in
    ``<results_dir>/<bench>.jsonl`` and return :func:`summarize`'s dict with ``rows`` (the table)
    added. ``quick``: small sizes (20,000 rows, a 64 MB file, n = 256), seconds in all: a smoke
    test or a rough bar, not a limit to quote."""
    rows = rows or (QUICK_ROWS if quick else ROWS)
    repeats = repeats or (3 if quick else 7)
    disk_bytes = disk_bytes or ((64 << 20) if quick else (2 << 30))
    gemm_n = gemm_n or (256 if quick else 3000)
    import streamrank
    streamrank.configure()  # the command line's settings (huge-page advice off) before any array is made
    print(machine_facts())
    load = os.getloadavg()
    hugepages = "on" if os.environ.get("STREAMRANK_NUMPY_HUGEPAGES", "") == "1" else "off (streamrank's setting)"
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (a shared machine: best of {repeats} is the "
          f"limit, the median beside it)", flush=True)
    out = memory_bandwidth(rows=rows, repeats=repeats)
    out += disk_rate(workdir, disk_bytes, repeats=min(repeats, 3))
    out += gemm_rate(gemm_n, repeats=min(repeats, 3))
    lim = summarize(out)
    notes = [f"load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; numpy's huge-page advice {hugepages}",
             "disk: the guest's page cache is dropped before each read; the host beneath a virtual disk may "
             "still hold the file (the rate the guest sees, not the device's)",
             f"limits: bandwidth {lim['bandwidth_gbs']:.1f} GB/s (float32 X @ v), streaming read "
             f"{lim['stream_gbs']:.1f} GB/s, disk {lim['disk_mbs']:,.0f} MB/s (page cache dropped), page cache "
             f"{lim['page_cache_mbs']:,.0f} MB/s, GEMM {lim['gemm_float64_gflops']:.1f} GFLOP/s float64 / "
             f"{lim['gemm_float32_gflops']:.1f} float32",
             f"reading {rows:,} x {COLS} float32 rows ({rows * COLS * 4 / 1e6:,.0f} MB) once at the bandwidth: "
             f"{read_seconds(rows * COLS * 4, lim):.4f} s"]
    print()
    table_record(bench, section, out, COLUMNS, notes=notes, results_dir=results_dir,
                 params={"quick": quick, "rows": rows, "cols": COLS, "repeats": repeats, "disk_bytes": disk_bytes,
                         "gemm_n": gemm_n, "block": BLOCK, "load": list(load), "hugepages": hugepages, **(params or {}), "limits": lim})
    for n in notes:
        print(n)
    lim["rows"] = out
    return lim


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, seconds (a smoke test)")
    ap.add_argument("--workdir", type=Path, default=None, help=f"where the disk test's file goes (default {SCRATCH})")
    ap.add_argument("--disk-gb", type=float, default=None, help="size of the disk test's file (default 2, quick 0.0625)")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs of each (default 7, quick 3; disk and "
                                                             "GEMM at most 3)")
    ap.add_argument("--gemm-n", type=int, default=None, help="GEMM size (default 3000, quick 256)")
    ap.add_argument("--results-dir", type=Path, default=None, help="where limits.jsonl goes (default docs/results)")
    args = ap.parse_args()
    measure_limits(args.quick, workdir=args.workdir, results_dir=args.results_dir, repeats=args.repeats,
                   disk_bytes=int(args.disk_gb * 1e9) if args.disk_gb else None, gemm_n=args.gemm_n)


if __name__ == "__main__":
    main()
