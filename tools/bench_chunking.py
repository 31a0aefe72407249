"""Choose the dataset file's default chunk size and compression by measurement.

For every (compression, chunk size): conversion time of a generated LETOR text file, the file's
size, and the time of one full pass of the QueryStream (what training repeats every iteration),
with the file in the page cache (second of two passes) — the case a training run lives in.

    python tools/bench_chunking.py                   # mslr30k preset, scale 0.1 (~380 MB text)
    python tools/bench_chunking.py --checksums       # what format version 2's Fletcher-32 costs a pass

``--checksums``: the default file (version 2, Fletcher-32 on every chunk) against a copy of it without
the filter (version 1, whose rows the reader checks to be finite instead), interleaved, best of 7:
raw HDF5 reads of X and y in 8 MB slices, and full QueryStream passes.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import machine_facts, run_child, args_params, table_record  # noqa: E402

JOB = """
import json, os, time
import numpy as np
import streamrank
getattr(streamrank, "configure", lambda: None)()  # the command line's process settings
from streamrank.io.convert import convert
s = convert([{src!r}], {out!r}, quiet=True, compression={comp!r}, chunk_bytes={chunk})
passes = []
with streamrank.open_dataset({out!r}) as ds:
    stream = ds.stream(memory_budget="2GB")  # one stream, reused by every pass as training does
    for _ in range(2):
        t = time.perf_counter()
        acc = 0.0
        for block, a, b in stream:
            acc += float(block.y.sum())
        passes.append(time.perf_counter() - t)
    xbytes = ds.n_rows * ds.n_features * 4
print(json.dumps({{"convert_s": s["seconds"], "file_mb": os.path.getsize({out!r}) / 1e6,
                  "pass_s": passes[1], "pass_cold_s": passes[0], "x_mb": xbytes / 1e6}}))
"""


CHECKSUMS = """
import json, time
import h5py, numpy as np
import streamrank
getattr(streamrank, "configure", lambda: None)()  # the command line's process settings
from streamrank.io.convert import convert
v2, v1 = {v2!r}, {v1!r}
convert([{src!r}], v2, quiet=True)
with h5py.File(v2, "r") as f, h5py.File(v1, "w") as g:  # the same chunks without the filter
    for k, v in f.attrs.items():
        g.attrs[k] = v
    g.attrs["version"] = 1
    for name in ("X", "y", "row", "query_ptr", "qid"):
        d = f[name]
        g.create_dataset(name, data=d[()], chunks=d.chunks if name in ("X", "y", "row") else None)

def raw(path):
    with h5py.File(path, "r") as f:
        X, y = f["X"], f["y"]
        step = max(X.chunks[0], (8 << 20) // (4 * X.shape[1]) // X.chunks[0] * X.chunks[0])
        bx, by = np.empty((step, X.shape[1]), np.float32), np.empty(step, np.float32)
        t = time.perf_counter()
        for a in range(0, X.shape[0], step):
            b = min(a + step, X.shape[0])
            X.read_direct(bx[:b - a], np.s_[a:b]); y.read_direct(by[:b - a], np.s_[a:b])
        return time.perf_counter() - t

def stream(path):
    with streamrank.open_dataset(path) as ds:
        s = ds.stream(memory_budget="2GB")
        t = time.perf_counter()
        for block, a, b in s:
            pass
        return time.perf_counter() - t, ds.n_rows * ds.n_features * 4

out = {{"raw2": [], "raw1": [], "stream2": [], "stream1": []}}
for r in range(7):
    for tag, path in ((("2", v2), ("1", v1)) if r % 2 == 0 else (("1", v1), ("2", v2))):
        out["raw" + tag].append(raw(path))
        t, xb = stream(path)
        out["stream" + tag].append(t)
print(json.dumps({{**{{k: min(v) for k, v in out.items()}}, "x_mb": xb / 1e6}}))
"""


def checksums(work, src):
    r = run_child(CHECKSUMS.format(v2=str(work / "ck-v2.h5"), v1=str(work / "ck-v1.h5"), src=str(src)))
    rows = [{"what": "raw HDF5 reads of X, y", "v1": r["raw1"], "v2": r["raw2"]},
            {"what": "QueryStream pass", "v1": r["stream1"], "v2": r["stream2"]}]
    for row in rows:
        row["ratio"] = row["v2"] / row["v1"]
        row["gbs"] = r["x_mb"] / 1e3 / row["v2"]
    table_record("chunking", "checksums",
        rows, [("what", "pass", None), ("v1", "v1 no checksums s", "{:.3f}"), ("v2", "v2 Fletcher-32 s", "{:.3f}"),
                 ("ratio", "v2 / v1", "{:.2f}"), ("gbs", "v2 GB/s of X", "{:.2f}")])
    print(f"input: {src.name}; X {r['x_mb']:,.0f} MB, default chunks, no compression, file in page cache; best of 7, "
          f"interleaved; the v1 stream checks every row is finite")
    print(machine_facts())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="mslr30k")
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--workdir", default="bench-out")
    ap.add_argument("--checksums", action="store_true", help="only the Fletcher-32 comparison")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(exist_ok=True)
    src = work / f"{args.preset}-s{args.scale:g}.txt"
    if not src.exists():
        from streamrank.synthetic import write_text
        write_text(src, preset=args.preset, scale=args.scale, seed=0)
    if args.checksums:
        checksums(work, src)
        return
    text_mb = src.stat().st_size / 1e6
    rows = []
    for comp in ("none", "lzf", "gzip"):
        for chunk in (256 << 10, 1 << 20, 4 << 20):
            r = run_child(JOB.format(src=str(src), out=str(work / "chunk.h5"), comp=comp, chunk=chunk))
            rows.append({"compression": comp, "chunk": f"{chunk >> 10} KB", "convert_mbs": text_mb / r["convert_s"],
                         "file_mb": r["file_mb"], "ratio": r["file_mb"] / r["x_mb"],
                         "pass_s": r["pass_s"], "pass_gbs": r["x_mb"] / 1e3 / r["pass_s"]})
            print(f"  {comp} {chunk >> 10} KB done", file=sys.stderr, flush=True)
    print()
    table_record("chunking", "layouts", rows, [("compression", "compression", None), ("chunk", "chunk", None),
                 ("convert_mbs", "convert MB/s", "{:.0f}"), ("file_mb", "file MB", "{:,.0f}"),
                 ("ratio", "file/X", "{:.2f}"), ("pass_s", "pass s", "{:.3f}"),
                 ("pass_gbs", "pass GB/s of X", "{:.2f}")], params=args_params(args))
    print(f"input: {src.name}, {text_mb:,.0f} MB text; passes with --memory-budget 2GB, file in page cache")
    print(machine_facts())
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
