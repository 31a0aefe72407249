"""Shared by the benchmark scripts: machine facts, isolated child runs with their peak RSS, tables,
and the results data: every benchmark appends what it printed to docs/results/<bench>.jsonl
(:func:`record`), from which ``python tools/render_benchmarks.py`` draws docs/benchmarks.md and
its plots."""

import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu_model():
    """The CPU's model name (/proc/cpuinfo), or "unknown"."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def machine_facts():
    """The machine and library facts every benchmark prints first, as one line."""
    m = machine_record()
    return (f"machine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']:.1f} GiB RAM, {m['os']}; Python {m['python']}, "
            f"numpy {m['numpy']}, numba {m['numba']}, h5py {m['h5py']} (HDF5 {m['hdf5']}), streamrank {m['streamrank']}")


RESULTS = REPO / "docs" / "results"


def machine_record():
    """The machine facts of :func:`machine_facts` as a dict, with the commit (``dirty`` when the
    working tree differs from it) and the date (UTC): the keys a result is filed under."""
    import h5py
    import numba
    import numpy as np
    from streamrank import __version__

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"cpu": cpu_model(), "cores": os.cpu_count(),
            "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "numpy": np.__version__, "numba": numba.__version__, "h5py": h5py.__version__,
            "hdf5": h5py.version.hdf5_version,
            "streamrank": __version__, "commit": git("rev-parse", "--short", "HEAD") or "unknown",
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", "streamrank", "tools")),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def record(bench, section, rows, columns, *, notes=(), plot=None, params=None, results_dir=None):
    """Append one section's results to ``docs/results/<bench>.jsonl`` (one JSON object per line):
    the machine (:func:`machine_record`), the command line, ``params`` (the section's settings),
    ``columns`` as :func:`table` takes them ((key, header, format)), the ``rows`` (dicts of
    JSON-able values: numbers, text, None) and ``notes`` (lines printed with the table). ``plot``
    (optional) tells tools/render_benchmarks.py how to draw the rows: {"file": "NAME.svg",
    "title", "x", "y", "series" (the key whose values are the lines), "xlabel", "ylabel", "logx",
    "logy"}. Returns the record."""
    out = Path(results_dir or RESULTS)
    out.mkdir(parents=True, exist_ok=True)

    def plain(v):
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if hasattr(v, "item") and not isinstance(v, (str, bytes)):
            v = v.item()  # numpy scalars
        if isinstance(v, float) and not math.isfinite(v):
            return None  # JSON has no NaN or infinity
        return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)
    rec = {"bench": bench, "section": section, "machine": machine_record(),
           "command": " ".join(["python"] + [str(a) for a in sys.argv]), "params": plain(params or {}),
           "columns": [list(c) for c in columns], "rows": plain(list(rows)), "notes": list(notes)}
    if plot:
        rec["plot"] = plain(plot)
    line = json.dumps(rec, allow_nan=False, sort_keys=False)
    with open(out / f"{bench}.jsonl", "a", encoding="utf-8") as f:
        f.write(line + "\n")
    return rec


def test_metrics(model, path):
    """(prediction seconds, letor4 means) of ``model`` on the HDF5 file at ``path``; for children."""
    import streamrank
    getattr(streamrank, "configure", lambda: None)()  # the command line's process settings
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


def args_params(args, skip=()):
    """An argparse namespace as :func:`record`'s ``params``: every option but ``skip``, paths as text."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in sorted(vars(args).items()) if k not in skip}


def table_record(bench, section, rows, columns, *, notes=(), params=None, plot=None, results_dir=None):
    """:func:`table` of the rows, then :func:`record` of the same rows and columns: what a bench
    prints is what docs/results/<bench>.jsonl keeps. Returns the record."""
    rows = list(rows)
    table(rows, columns)
    return record(bench, section, rows, columns, notes=notes, params=params, plot=plot, results_dir=results_dir)
