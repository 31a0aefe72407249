"""Kill a command at a named fault point (streamrank.faultpoints) or after a delay, then check that
whatever it left is absent or complete, and that running it again (or resuming) gives exactly the
result of an uninterrupted run, with no temporary file left behind.

A command joins the harness as one :class:`Scenario`: its argv, the argv that continues it, the files
it writes and a function that reads its result. tests/faults/test_kills.py runs a few kills per
scenario in CI; tools/soak.py runs hundreds at random moments.
"""

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np

KILL_ENV = "STREAMRANK_TEST_KILL"


@dataclass
class Scenario:
    name: str
    argv: list                       # the command, with {w} for the work directory
    outputs: list                    # files it writes, relative to the work directory
    again: list = None               # the command that continues it (default: argv)
    points: list = field(default_factory=list)   # (fault point, N) pairs it passes

    def command(self, w, again=False):
        return [a.format(w=w) for a in (self.again if again and self.again else self.argv)]


def run(argv, env=None, timeout=300):
    e = {k: v for k, v in os.environ.items() if k != KILL_ENV}  # a kill point only where asked
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "streamrank", *argv], capture_output=True, text=True, env=e,
                          timeout=timeout)


def run_killed_after(argv, seconds, timeout=300):
    """Start the command, SIGKILL it after ``seconds`` (if still running); its return code."""
    e = dict(os.environ)
    e.pop(KILL_ENV, None)
    p = subprocess.Popen([sys.executable, "-m", "streamrank", *argv], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=e)
    try:
        p.wait(seconds)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGKILL)
    return p.wait(timeout)


def file_result(path):
    """What a file holds, comparable across runs: arrays of an HDF5 file (attributes that record
    time or version left out), or the bytes of any other file; None when absent."""
    path = Path(path)
    if not path.exists():
        return None
    if not h5py.is_hdf5(path):
        return hashlib.sha256(path.read_bytes()).hexdigest()
    h = hashlib.sha256()
    with h5py.File(path, "r") as f:
        items = []
        f.visititems(lambda n, o: items.append((n, o)))
        for name, obj in sorted(items, key=lambda t: t[0]):
            h.update(name.encode())
            if isinstance(obj, h5py.Dataset):
                h.update(np.ascontiguousarray(obj[()]).tobytes() if obj.dtype.kind != "O" else repr(obj[()]).encode())
        # a dataset's content_sha256 is its content; a model's also covers the training log (times)
        keys = ("content_sha256", "index_sha256", "n_rows") if f.attrs.get("format") == "streamrank-dataset" \
            else ("fingerprint", "method", "n_features")
        for k in keys:
            if k in f.attrs:
                h.update(str(f.attrs[k]).encode())
    return h.hexdigest()


def results(s, w):
    return {o: file_result(Path(w) / o) for o in s.outputs}


def leftovers(w):
    """Temporary files, and a finished conversion's progress files, anywhere under the work directory."""
    return sorted(str(p.relative_to(w)) for pattern in (".*.tmp*", ".*.convert.*") for p in Path(w).rglob(pattern))


def check_after_kill(s, w, reference):
    """Every output is absent or complete (equal to the reference); returns the outputs present."""
    present = []
    for o, got in results(s, w).items():
        if got is not None:
            assert got == reference[o], f"{s.name}: {o} was left incomplete after the kill"
            present.append(o)
    return present


def continue_and_compare(s, w, reference):
    r = run(s.command(w, again=True))
    assert r.returncode == 0, f"{s.name}: continuing failed:\n{r.stderr[-3000:]}"
    assert results(s, w) == reference, f"{s.name}: the continued run's result differs from an uninterrupted run"
    assert not leftovers(w), f"{s.name}: temporary files left: {leftovers(w)}"


def fresh_workdir(base, inputs, tag):
    w = Path(base) / tag
    shutil.rmtree(w, ignore_errors=True)
    shutil.copytree(inputs, w)
    return w


def reference_result(s, base, inputs):
    w = fresh_workdir(base, inputs, f"{s.name}-reference")
    t = time.perf_counter()
    r = run(s.command(w))
    assert r.returncode == 0, f"{s.name}: the uninterrupted run failed:\n{r.stderr[-3000:]}"
    return results(s, w), time.perf_counter() - t


def kill_at_point(s, base, inputs, reference, point, n):
    """Kill ``s`` at the n-th pass through ``point``; check the leftovers; continue; compare."""
    w = fresh_workdir(base, inputs, f"{s.name}-{point}-{n}")
    r = run(s.command(w), env={KILL_ENV: f"{point}:{n}"})
    assert r.returncode == -signal.SIGKILL, f"{s.name}: {point}:{n} was not reached (rc {r.returncode})\n{r.stderr[-2000:]}"
    check_after_kill(s, w, reference)
    continue_and_compare(s, w, reference)


def kill_after(s, base, inputs, reference, seconds, tag):
    """Kill ``s`` ``seconds`` after it starts; check the leftovers; continue; compare. Returns
    whether the kill landed (the command had not finished)."""
    w = fresh_workdir(base, inputs, f"{s.name}-t{tag}")
    rc = run_killed_after(s.command(w), seconds)
    check_after_kill(s, w, reference)
    continue_and_compare(s, w, reference)
    return rc == -signal.SIGKILL
