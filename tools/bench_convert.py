"""Conversion speed and memory: streamrank convert on a >= 2 GB generated LETOR text file, beside
scikit-learn's load_svmlight_file(query_id=True) on a slice of it.

    python tools/bench_convert.py                      # mslr30k preset at scale 0.55 (~2.1 GB text)
    python tools/bench_convert.py --scale 0.1 --slice-mb 100   # a quick look

Each run happens in a fresh process, so "peak RSS" is that process's own maximum resident set.
The text file is generated first (and kept under --workdir for reuse); it is in the page cache
when converted, so the figures are CPU-bound parse speed, not disk speed.
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _benchutil import machine_facts, run_child, args_params, table_record  # noqa: E402

CONVERT = """
import json, sys
from streamrank.io.convert import convert
s = convert([{src!r}], {out!r}, quiet=True, compression={comp!r})
print(json.dumps(s))
"""

SKLEARN = """
import json, os, time
from sklearn.datasets import load_svmlight_file
t = time.perf_counter()
X, y, q = load_svmlight_file({src!r}, query_id=True)
dt = time.perf_counter() - t
print(json.dumps({{"seconds": dt, "rows": X.shape[0], "text_bytes": os.path.getsize({src!r})}}))
"""


def make_slice(src, dst, nbytes):
    """The first ``nbytes`` of ``src``, cut at a line end."""
    with open(src, "rb") as f:
        data = f.read(nbytes)
    data = data[:data.rfind(b"\n") + 1]
    Path(dst).write_bytes(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="mslr30k")
    ap.add_argument("--scale", type=float, default=0.55)
    ap.add_argument("--slice-mb", type=int, default=200, help="size of the slice scikit-learn reads")
    ap.add_argument("--workdir", default="bench-out")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--skip-sklearn", action="store_true")
    args = ap.parse_args()

    work = Path(args.workdir)
    work.mkdir(exist_ok=True)
    src = work / f"{args.preset}-s{args.scale:g}.txt"
    if not src.exists():
        from streamrank.io.synthetic import write_text
        print(f"generating {src} ...", flush=True)
        write_text(src, preset=args.preset, scale=args.scale, seed=0)
    size = src.stat().st_size
    piece = work / f"{src.stem}-slice{args.slice_mb}.txt"
    if not piece.exists():
        make_slice(src, piece, args.slice_mb << 20)
    # compile the numba kernels once (cached on disk), outside the timed runs
    run_child(CONVERT.format(src=str(piece), out=str(work / "warm.h5"), comp=args.compression))

    rows = []
    for name, path in ((f"full ({size / 1e9:.2f} GB)", src), (f"slice ({piece.stat().st_size / 1e6:.0f} MB)", piece)):
        r = run_child(CONVERT.format(src=str(path), out=str(work / "out.h5"), comp=args.compression))
        rows.append({"tool": "streamrank convert", "input": name, "mb": r["text_bytes"] / 1e6,
                     "s": r["seconds"], "mbs": r["text_bytes"] / 1e6 / r["seconds"],
                     "rows_s": r["rows"] / r["seconds"], "rss": r["peak_rss_mb"]})
    if not args.skip_sklearn:
        r = run_child(SKLEARN.format(src=str(piece)))
        rows.append({"tool": "sklearn load_svmlight_file", "input": f"slice ({piece.stat().st_size / 1e6:.0f} MB)",
                     "mb": r["text_bytes"] / 1e6, "s": r["seconds"], "mbs": r["text_bytes"] / 1e6 / r["seconds"],
                     "rows_s": r["rows"] / r["seconds"], "rss": r["peak_rss_mb"]})
    rows.append({"tool": "LIBLINEAR C parser", "input": "measured separately", "mbs_text": "70-85"})
    print()
    table_record("convert", "convert",
        rows, [("tool", "tool", None), ("input", "input", None), ("mb", "text MB", "{:,.0f}"),
                 ("s", "seconds", "{:.2f}"), ("mbs", "MB/s", "{:.1f}"), ("rows_s", "rows/s", "{:,.0f}"),
                 ("rss", "peak RSS MB", "{:,.0f}")], params=args_params(args))
    print("(LIBLINEAR's C parser, measured separately on this machine: about 70-85 MB/s, whole matrix in memory)")
    print(f"preset {args.preset} scale {args.scale} seed 0, compression {args.compression}; text in page cache")
    print(machine_facts())
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
