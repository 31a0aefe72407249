#!/usr/bin/env python3
"""Generate synthetic LETOR-like ranking data (see streamrank.synthetic for the data model).

    python tools/make_letor.py --preset mslr30k --scale 0.5 --seed 0 -o out.txt      # LETOR text
    python tools/make_letor.py --preset mq2007 -o mq2007.txt.gz                      # gzip text
    python tools/make_letor.py --preset istella --scale 0.1 -o istella.h5            # HDF5 dataset

The output format follows the extension: .h5/.hdf5 -> streamrank HDF5 dataset, .gz -> gzip text,
anything else -> plain text. Prints one summary line (rows, queries, pairs, bytes, seconds).
"""

import argparse
import sys
from pathlib import Path

try:
    from streamrank import synthetic as datasets
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from streamrank import synthetic as datasets
from streamrank.cli import translate  # noqa: E402
from streamrank.errors import StreamrankError

_H5_SUFFIXES = (".h5", ".hdf5")


def build_parser():
    ap = argparse.ArgumentParser(
        prog="make_letor.py", description=__doc__.split("\n\n")[0],
        epilog="presets: " + "; ".join(
            f"{p.name}: {p.n_queries:,} queries, {p.n_rows:,} rows, {p.n_features} features, "
            f"labels 0-{p.n_labels - 1}" for p in datasets.PRESETS.values()))
    ap.add_argument("--preset", default="small", choices=list(datasets.PRESETS),
                    help="data set shape to mimic (default: small)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply the numbers of queries and rows (default: 1)")
    ap.add_argument("--seed", type=int, default=0, help="random seed; also fixes the relevance model (default: 0)")
    ap.add_argument("--part", default="train",
                    help="train, valid, test or an integer: other queries from the same relevance model")
    ap.add_argument("-o", "--output", required=True,
                    help="output file: .txt, .txt.gz or .h5 (format from the extension)")
    ap.add_argument("--sparse", action="store_true", help="text only: omit zero-valued features")
    ap.add_argument("--compression", choices=["none", "lzf", "gzip"], default=None,
                    help="HDF5 only: compression of the datasets (default: the writer's)")
    ap.add_argument("--gzip-level", type=int, default=1, choices=range(1, 10), metavar="1-9",
                    help=".gz only: zlib level (default: 1, fastest)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar and no summary line")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    out = Path(args.output)
    is_h5 = out.suffix.lower() in _H5_SUFFIXES
    progress = not args.quiet and sys.stderr.isatty()
    try:
        if is_h5:
            if args.sparse:
                raise SystemExit("make_letor.py: --sparse applies to text output only; "
                                 "drop it or write a .txt file")
            stats = datasets.write_hdf5(out, args.preset, scale=args.scale, seed=args.seed,
                                          part=int(args.part) if args.part.isdigit() else args.part,
                                        compression=args.compression, progress=progress)
        else:
            if args.compression is not None:
                raise SystemExit("make_letor.py: --compression applies to .h5 output only; "
                                 "name the output .txt.gz for gzip text")
            stats = datasets.write_text(out, args.preset, scale=args.scale, seed=args.seed,
                                          part=int(args.part) if args.part.isdigit() else args.part,
                                        sparse=args.sparse, gzip_level=args.gzip_level,
                                        progress=progress)
    except StreamrankError as exc:
        raise SystemExit(f"make_letor.py: {translate(str(exc))}")
    if not args.quiet:
        mb = stats["bytes"] / 1e6
        print(f"{out}: {stats['rows']:,} rows, {stats['queries']:,} queries, "
              f"{stats['features']} features, {stats['pairs']:,} pairs, {stats['bytes']:,} bytes, {stats['seconds']:.1f} s "
              f"({mb / max(stats['seconds'], 1e-9):.0f} MB/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
