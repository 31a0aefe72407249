"""``streamrank demo``: the pipeline end to end on a generated LETOR-like dataset."""

import tempfile
import time
from pathlib import Path

import numpy as np

from .convert import convert
from .dataset import open_dataset
from .info import dataset_info, format_info


def run_demo(workdir=None, quiet=False, preset="small", seed=0):
    """Generate text, convert it, describe it and stream it once; return the exit status."""
    from .datasets import write_text

    say = (lambda *a: None) if quiet else print
    tmp = None
    if workdir is None:
        tmp = tempfile.TemporaryDirectory(prefix="streamrank-demo-")
        workdir = tmp.name
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        text = work / "train.txt"
        write_text(text, preset=preset, seed=seed)
        say(f"[1/4] generated {text} (preset {preset!r}, seed {seed}, {text.stat().st_size / 1e6:.1f} MB) "
            f"in {time.perf_counter() - t0:.1f} s")
        h5 = work / "train.h5"
        stats = convert([text], h5, quiet=True)
        say(f"[2/4] converted to {h5}: {stats['rows']:,} rows, {stats['queries']:,} queries in "
            f"{stats['seconds']:.2f} s ({stats['text_mb_per_s']:.0f} MB/s)")
        with open_dataset(h5) as ds:
            say("[3/4] " + format_info(dataset_info(ds)))
            t1 = time.perf_counter()
            xty = np.zeros(ds.n_features)
            blocks = 0
            for block, _, _ in ds.stream(block_bytes=256 << 10):
                xty += block.X.T.astype(np.float64) @ block.y
                blocks += 1
            say(f"[4/4] streamed {ds.n_rows:,} rows in {blocks} query-aligned blocks of <= 256 KB "
                f"({time.perf_counter() - t1:.2f} s); |X^T y| = {np.linalg.norm(xty):.6g}")
        say("training (streamrank train) arrives with the linear RankSVM; this demo will then train and evaluate.")
        return 0
    finally:
        if tmp is not None:
            tmp.cleanup()
