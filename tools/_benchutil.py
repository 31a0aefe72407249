"""Shared by the benchmark scripts: machine facts, isolated child runs with their peak RSS, tables."""

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def machine_facts():
    import h5py
    import numba
    import numpy as np
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    from streamrank import __version__
    return (f"machine: {cpu}, {os.cpu_count()} cores, {mem:.1f} GiB RAM, {platform.system()} "
            f"{platform.release()}; Python {platform.python_version()}, numpy {np.__version__}, "
            f"numba {numba.__version__}, h5py {h5py.__version__} (HDF5 {h5py.version.hdf5_version}), "
            f"streamrank {__version__}")


def test_metrics(model, path):
    """(prediction seconds, letor4 means) of ``model`` on the HDF5 file at ``path``; for children."""
    import streamrank
    from streamrank.evaluation.metrics import evaluate
    from streamrank.training.problem import read_labels
    with streamrank.open_dataset(path) as tds:
        t = time.perf_counter()
        sc = model.predict_dataset(tds)
        seconds = time.perf_counter() - t
        rep = evaluate(read_labels(tds), sc[tds.row], tds.query_ptr, convention="letor4", qid=tds.query_ids)
    return seconds, {k: float(v) for k, v in rep.means.items()}


def run_child(code, timeout=3600, cwd=None, env=None):
    """Run python ``code`` in a fresh process (in ``cwd``, default the repository, so that its
    ``streamrank`` is imported: another tree's ``cwd`` runs that tree's code); it must print one JSON
    dict as its last line.

    Returns that dict with ``peak_rss_mb`` (the child's own VmHWM, in MB = 10^6 bytes, the unit
    of --memory-budget) and ``wall_s`` added.
    """
    # VmHWM is this process image's own peak; ru_maxrss would carry the parent's peak across exec
    wrapper = (code + "\nimport json as _j\n"
               "_hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
               "print(_j.dumps({'_rss_kb': int(_hwm)}))\n")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, timeout=timeout,
                       cwd=cwd or REPO, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"child failed:\n{p.stderr[-3000:]}")
    lines = [ln for ln in p.stdout.strip().splitlines() if ln.startswith("{")]
    out = json.loads(lines[-2]) if len(lines) >= 2 else {}
    out["peak_rss_mb"] = json.loads(lines[-1])["_rss_kb"] * 1024 / 1e6  # VmHWM is in KiB
    out["wall_s"] = wall
    return out


def table(rows, columns):
    """Print rows (dicts) as an aligned text table with the given (key, header, format) columns."""
    cells = [[h for _, h, _ in columns]]
    for r in rows:
        cells.append([("" if r.get(k) is None else (f.format(r[k]) if f else str(r[k]))) for k, _, f in columns])
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    lines = []
    for n, c in enumerate(cells):
        lines.append("  ".join(x.rjust(w) if i else x.ljust(w) for i, (x, w) in enumerate(zip(c, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    print("\n".join(lines))
