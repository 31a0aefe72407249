"""Running one child (wall seconds and its own peak RSS), a row's figures from its runs, and the rows
as the results file keeps them."""
import contextlib
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _benchutil import REPO

GNU_TIME = "/usr/bin/time"


def _find_gnu_time():
    """/usr/bin/time when it is GNU time (-f %M -o FILE works), else None."""
    if not os.access(GNU_TIME, os.X_OK):
        return None
    try:
        with tempfile.TemporaryDirectory() as d:
            f = Path(d) / "m"
            p = subprocess.run([GNU_TIME, "-f", "%M", "-o", str(f), "true"], capture_output=True, timeout=20)
            int(f.read_text().split()[-1])
        return GNU_TIME if p.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


TIME = _find_gnu_time()


def run_timed(cmd, log, env=None, timeout=1800.0):
    """Run ``cmd`` (a list) once, stdout and stderr to LOG.out / LOG.err.

    Returns {"wall_s", "rss_mb", "rc", "error", "out", "err"}; ``error`` is None when the command
    exited with 0 within ``timeout`` seconds, else a short reason. Never raises for the child.
    """
    log = Path(log)
    out, err, rssf = (log.with_name(log.name + s) for s in (".out", ".err", ".rss"))
    rssf.unlink(missing_ok=True)
    full = [TIME, "-f", "%M", "-o", str(rssf), *map(str, cmd)] if TIME else [*map(str, cmd)]
    timed_out = []

    def kill(p):
        timed_out.append(True)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    rss_kb = None
    with open(out, "w") as fo, open(err, "w") as fe:
        t0 = time.perf_counter()
        try:
            p = subprocess.Popen(full, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, cwd=REPO, env=env,
                                 start_new_session=True)
        except OSError as exc:
            return {"wall_s": None, "rss_mb": None, "rc": None, "error": f"cannot start: {exc}", "out": out,
                    "err": err}
        timer = threading.Timer(timeout, kill, (p,))
        timer.start()
        try:
            if TIME:
                rc = p.wait()
            else:
                # the bench process is small when children run (objectives come after), and a fresh
                # child's ru_maxrss is its own peak from exec on, plus at most that of the fork
                _, status, ru = os.wait4(p.pid, 0)
                rc = p.returncode = os.waitstatus_to_exitcode(status)
                rss_kb = ru.ru_maxrss
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
    if TIME:
        try:
            rss_kb = int(rssf.read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            rss_kb = None
    error = None
    if timed_out:
        error = f"timed out after {timeout:.0f} s"
    elif rc != 0:
        tail = [ln for ln in err.read_text(errors="replace").splitlines() if ln.strip()]
        error = f"exit status {rc}" + (f": {tail[-1][:160]}" if tail else "")
    return {"wall_s": wall, "rss_mb": None if rss_kb is None else rss_kb * 1024 / 1e6, "rc": rc, "error": error,
            "out": out, "err": err}


def run_steps(steps, log, timeout):
    """Run (name, cmd, env) steps in order as one measurement: seconds summed, peak RSS the largest.

    ``steps`` of the result: {name: (wall seconds, peak RSS MB, its stdout file)} of every step.
    """
    total, rss, res, parts = 0.0, 0.0, None, {}
    for name, cmd, env in steps:
        res = run_timed(cmd, f"{log}.{name}", env=env, timeout=timeout)
        if res["error"]:
            res["error"] = f"{name}: {res['error']}"
            return res
        parts[name] = (res["wall_s"], res["rss_mb"], res["out"])
        total += res["wall_s"]
        rss = max(rss, res["rss_mb"] or 0.0)
    return dict(res, wall_s=total, rss_mb=rss or None, steps=parts)


def last_json(path):
    """The last line of a file that parses as a JSON object, or None."""
    try:
        for ln in reversed(Path(path).read_text(errors="replace").splitlines()):
            if ln.startswith("{"):
                return json.loads(ln)
    except (OSError, ValueError):
        pass
    return None


def summarise(row, results):
    ok = [r for r in results if not r["error"]]
    bad = [r for r in results if r["error"]]
    if ok:
        walls = [r["wall_s"] for r in ok]
        row["median"] = statistics.median(walls)
        row["runs"] = " ".join(f"{x:.2f}" for x in walls)
        row["runs_s"] = walls  # the numbers, for the results file ("runs" is their printed form)
        rss = [r["rss_mb"] for r in ok if r["rss_mb"] is not None]
        row["rss"] = max(rss) if rss else None
    if bad:
        note = f"{len(bad)} of {len(results)} runs failed: {bad[-1]['error']}"
        row["note"] = f"{row['note']}; {note}" if row.get("note") else note
    return ok


def median_of(results, key):
    vals = [r[key] for r in results if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def new_row(section, tool, note=""):
    return {"section": section, "tool": tool, "note": note}


def add_note(row, text):
    row["note"] = f"{row['note']}; {text}" if row.get("note") else text


def mark_empty(rows):
    """Rows without a time and without a note say "no result"."""
    for r in rows:
        if r.get("median") is None and not r.get("note"):
            r["note"] = "no result"


def json_value(res, key, step=None):
    """``key`` of the last JSON line a run (or one of its steps) printed, or None."""
    f = res["steps"][step][2] if step else res["out"]
    j = last_json(f)
    return j.get(key) if j else None


def data_rows(rows, section=None):
    """The rows as the results file keeps them (those of ``section`` when given): without the runs'
    own records (``ok``: paths and logs) and the bench's bookkeeping keys."""
    return [{k: v for k, v in r.items() if k not in ("ok", "key", "kind")} for r in rows
            if section is None or r.get("section") == section]


@contextlib.contextmanager
def echoed(lines):
    """Print as usual inside the block, and keep each non-empty printed line in ``lines`` (the notes
    that a record carries beside its table)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        yield lines
    text = buf.getvalue()
    sys.stdout.write(text)
    lines.extend(ln for ln in text.splitlines() if ln.strip())
