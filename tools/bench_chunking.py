"""Choose the dataset file's default chunk size and compression by measurement.

For every (compression, chunk size): conversion time of a generated LETOR text file, the file's
size, and the time of one full pass of the QueryStream (what training repeats every iteration),
with the file in the page cache (second of two passes) — the case a training run lives in.

    python tools/bench_chunking.py                   # mslr30k preset, scale 0.1 (~380 MB text)
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import machine_facts, run_child, table  # noqa: E402

JOB = """
import json, os, time
import numpy as np
import streamrank
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="mslr30k")
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--workdir", default="bench-out")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(exist_ok=True)
    src = work / f"{args.preset}-s{args.scale:g}.txt"
    if not src.exists():
        from streamrank.io.synthetic import write_text
        write_text(src, preset=args.preset, scale=args.scale, seed=0)
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
    table(rows, [("compression", "compression", None), ("chunk", "chunk", None),
                 ("convert_mbs", "convert MB/s", "{:.0f}"), ("file_mb", "file MB", "{:,.0f}"),
                 ("ratio", "file/X", "{:.2f}"), ("pass_s", "pass s", "{:.3f}"),
                 ("pass_gbs", "pass GB/s of X", "{:.2f}")])
    print(f"input: {src.name}, {text_mb:,.0f} MB text; passes with --memory-budget 2GB, file in page cache")
    print(machine_facts())
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
