"""bench_distributed.py --kill-workers N: every worker of a 2-worker run killed at once, N times.

Each try starts ``streamrank train TRAIN --workers 2`` on MQ2008 Fold1 (a Nystroem map of 800
components, a path of five C values chosen on vali, tol 1e-9: about 600 short passes in 45 s, so a
kill often lands between a task's end and its result's return), waits for its two worker
processes (the run's children that multiprocessing spawned), lets it run a random 2-25 s (a
seeded draw: kernels' compile, the map's build or the solver), then SIGKILLs both workers together and
times the run's exit from that moment. Every other try passes --checkpoint DIR. A run still alive
after ``--hang-limit`` seconds counts as hung (then SIGTERM, then SIGKILL). Per try: the exit
status, the seconds to exit, the standard error's lines after the kill (with --quiet every line of
it is the command's own), whether that is one line, whether it says the workers were lost, and
whether it names a checkpoint exactly when --checkpoint DIR holds one (checkpoint.h5 or its
previous copy) after the run.
"""

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

NAMED = re.compile(r"checkpoint in \S+ is kept|checkpoint kept at")  # a line that names a checkpoint
WORKER_MARK = "multiprocessing.spawn"  # a dask worker process's command line (the resource tracker's differs)


def _children(pid):
    """PIDs of ``pid``'s direct children whose command line names multiprocessing's spawn."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid and WORKER_MARK in (d / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(d.name))
        except (OSError, ValueError, IndexError):
            continue
    return sorted(found)


def one_try(cmd, delay, hang_limit, log_path):
    """Run ``cmd``, kill its two workers ``delay`` s after both exist; a dict of what happened."""
    with open(log_path, "w+b") as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 180
        workers = []
        while p.poll() is None and time.monotonic() < deadline:
            workers = _children(p.pid)
            if len(workers) >= 2:
                break
            time.sleep(0.05)
        if len(workers) < 2 or p.poll() is not None:
            p.kill()
            p.wait()
            return {"killed": False, "why": f"no two workers (exit {p.returncode})"}
        time.sleep(delay)
        if p.poll() is not None:
            return {"killed": False, "why": f"the run ended first (exit {p.returncode})"}
        err.flush()
        before = os.fstat(err.fileno()).st_size
        for w in workers:  # both at once: nothing runs in between
            os.kill(w, signal.SIGKILL)
        t0 = time.monotonic()
        try:
            rc = p.wait(timeout=hang_limit)
            hung = False
        except subprocess.TimeoutExpired:
            hung = True
            p.send_signal(signal.SIGTERM)
            try:
                rc = p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = p.wait()
        seconds = time.monotonic() - t0
        err.seek(before)
        after = err.read().decode(errors="replace").splitlines()
    return {"killed": True, "rc": rc, "seconds": seconds, "hung": hung, "lines": after}


def run(args, data, valid):
    """The --kill-workers table: rows per try and the summary, recorded as section 'worker loss'."""
    from _benchutil import args_params, table_record
    work = Path(args.workdir) / "worker_loss"
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    rows = []
    for k in range(args.kill_workers):
        ck = work / f"ck{k}"
        shutil.rmtree(ck, ignore_errors=True)  # no checkpoint of an earlier invocation
        (work / f"m{k}.h5").unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "streamrank", "train", str(data), "-o", str(work / f"m{k}.h5"), "--workers", "2",
               "--method", "nystroem", "--components", "800", "--C", "0.01,0.1,1,10,100", "--tol", "1e-9",
               "--valid", str(valid), "--normalize", "zscore", "--quiet"]
        if k % 2:
            cmd += ["--checkpoint", str(ck)]
        delay = rng.uniform(2.0, 25.0)
        r = one_try(cmd, delay, args.hang_limit, work / f"stderr{k}.txt")
        lines = r.get("lines", [])
        row = {"try": k + 1, "checkpoint": "yes" if k % 2 else "no", "kill_after_s": delay,
               "exit": r.get("rc"), "seconds": r.get("seconds"), "hung": r.get("hung"),
               "stderr_lines": len(lines), "one_line": len(lines) == 1,
               "says_lost": any("was lost at once" in ln or "did not start" in ln for ln in lines),
               "named_right": any(map(NAMED.search, lines)) == any((ck / n).is_file() for n in
                                                                    ("checkpoint.h5", "checkpoint.prev.h5")),
               "last": (lines[-1] if lines else r.get("why", ""))[:300]}
        rows.append(row)
        print(f"  try {k + 1}: {row['checkpoint']} checkpoint, kill after {delay:.1f} s: exit {row['exit']} "
              f"in {row['seconds'] or 0:.1f} s, {len(lines)} line(s): {row['last'][:160]}", flush=True)
    killed = [r for r in rows if r["exit"] is not None]
    summary = []
    for ck in ("no", "yes"):
        rs = [r for r in killed if r["checkpoint"] == ck]
        if rs:
            summary.append({"checkpoint": ck, "tries": len(rs), "exit_2": sum(r["exit"] == 2 for r in rs),
                            "one_line": sum(r["one_line"] for r in rs), "hung": sum(bool(r["hung"]) for r in rs),
                            "max_s": max(r["seconds"] for r in rs), "says_lost": sum(r["says_lost"] for r in rs),
                            "named_right": sum(r["named_right"] for r in rs),
                            "example": rs[-1]["last"]})
    table_record("distributed", "worker loss", summary,
                 [("checkpoint", "--checkpoint", None), ("tries", "tries", None), ("exit_2", "exit 2", None),
                  ("one_line", "one line", None), ("hung", f"hung > {args.hang_limit:g} s", None),
                  ("says_lost", "says lost", None), ("named_right", "checkpoint named iff one exists", None),
                  ("max_s", "max s to exit", "{:.1f}")],
                 notes=[f"{len(killed)} of {len(rows)} tries killed both workers; the last lines:"]
                 + [f"--checkpoint {r['checkpoint']}: {r['example']}" for r in summary],
                 params=args_params(args))
    return rows
