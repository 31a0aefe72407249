"""Peak RSS of one streamrank command, run as the CLI runs it, in a fresh process."""

import json
import subprocess
import sys
import time

from _benchutil import REPO

# the child runs the CLI's own main and prints its VmHWM (this process image's peak resident set;
# ru_maxrss would carry the parent's peak across fork and exec) as the last line of stderr
_CHILD = """
import sys
from streamrank.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code if isinstance(e.code, int) else 1
hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]
print('\\n@@rss_kb ' + hwm + ' rc ' + str(rc), file=sys.stderr)
"""


def cli_peak_rss(args, timeout=3600, stdout=subprocess.DEVNULL):
    """(peak RSS in MB = 10^6 bytes, wall seconds, return code, stderr) of ``streamrank ARGS``."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", _CHILD, *map(str, args)], stdout=stdout, stderr=subprocess.PIPE,
                       text=True, timeout=timeout, cwd=REPO)
    wall = time.perf_counter() - t0
    tail = [ln for ln in p.stderr.splitlines() if ln.startswith("@@rss_kb ")]
    if not tail:
        raise RuntimeError(f"streamrank {' '.join(map(str, args))} died (rc {p.returncode}):\n{p.stderr[-3000:]}")
    kb, _, rc = tail[-1].split()[1:]
    return int(kb) * 1024 / 1e6, wall, int(rc), p.stderr


def as_json(obj):
    return json.dumps(obj, default=str)


# -- the process tree's peak PSS -------------------------------------------------------------------
# PSS (proportional set size) counts a page shared by k processes as 1/k in each, so the sum over a
# tree counts the tree's shared pages (libraries, the numba cache's mapped code) once: what a
# container's memory limit charges, unlike a sum of RSS. Sampled, so a peak shorter than the
# interval can be missed: the interval bounds that, and every sample costs about 0.2 ms a process.
TREE_INTERVAL = 0.01


def tree_pss(root, procs=None, rss=None):
    """(sum of PSS in bytes, number of processes) over ``root`` (a psutil.Process) and every
    descendant alive now (or the processes ``procs``, the tree as last listed); a process that
    ends while it is read counts 0. ``rss``: a list that gets the sum of their RSS appended (each
    shared page counted in every process: a bound on the PSS that other processes sharing the
    libraries cannot lower)."""
    import psutil
    if procs is None:
        try:
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            return 0, 0
    total, n, resident = 0, 0, 0
    for p in procs:
        try:
            info = p.memory_full_info()
            total, resident, n = total + info.pss, resident + info.rss, n + 1
        except psutil.Error:
            pass
    if rss is not None:
        rss.append(resident)
    return total, n


class TreeSampler:
    """Samples :func:`tree_pss` of a pid's tree every ``interval`` seconds in a thread until
    :meth:`stop`; ``peak`` (bytes), ``peak_procs`` (processes in the tree at the peak), ``samples``,
    ``peak_rss`` (the largest sum of RSS), ``max_gap`` (the longest interval between two samples,
    seconds: the sampling's bound). A
    process that starts is counted from the next listing of the tree, ``RELIST`` samples at most
    (an interpreter takes longer than that to grow past its first megabytes)."""

    RELIST = 5  # samples between two listings of the tree: a process that starts is read within 5 intervals

    def __init__(self, pid, interval=TREE_INTERVAL):
        import threading
        import psutil
        self.root, self.interval = psutil.Process(pid), interval
        self.peak = self.peak_procs = self.samples = self.peak_rss = 0
        self.max_gap = 0.0
        self.most_procs = 0
        # the RSS sum from /proc/PID/statm, sampled in its own thread: statm reads the kernel's
        # counters without the process's mmap lock, which a compiling process (LLVM mapping and
        # unmapping) holds often, so PSS reads (smaps_rollup walks the mappings under that lock)
        # wait 25-40 ms at times; the RSS sum bounds the PSS sum (shared pages counted in each)
        self.statm_peak, self.statm_gap, self.statm_samples = 0, 0.0, 0
        self._procs = [self.root]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._rss_thread = threading.Thread(target=self._run_statm, daemon=True)
        self._thread.start()
        self._rss_thread.start()

    def _run_statm(self):
        import os
        import threading
        page = os.sysconf("SC_PAGE_SIZE")
        try:
            os.sched_setscheduler(threading.get_native_id(), os.SCHED_FIFO, os.sched_param(1))
        except (OSError, AttributeError):
            pass
        last = time.perf_counter()
        while not self._stop.is_set():
            total = 0
            for p in list(self._procs):
                try:
                    with open(f"/proc/{p.pid}/statm") as f:
                        total += int(f.read().split()[1]) * page
                except (OSError, ValueError, IndexError):
                    pass
            now = time.perf_counter()
            self.statm_gap, last = max(self.statm_gap, now - last), now
            self.statm_samples += 1
            self.statm_peak = max(self.statm_peak, total)
            self._stop.wait(max(0.0, self.interval - (time.perf_counter() - now)))

    def _run(self):
        import os
        import threading
        import psutil
        try:  # this thread ahead of the compiling processes it measures (as root; else as it is):
            # real-time FIFO, so a wake-up preempts the busy cores at once (a nice value alone left
            # gaps of 30-38 ms while the command and its compiling helper held both cores)
            os.sched_setscheduler(threading.get_native_id(), os.SCHED_FIFO, os.sched_param(1))
        except (OSError, AttributeError):
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)
            except (OSError, AttributeError):
                pass
        last, procs = time.perf_counter(), None
        while not self._stop.is_set():
            if self.samples % self.RELIST == 0:  # listing the tree reads every process's stat: 1-2 ms
                try:
                    procs = [self.root] + self.root.children(recursive=True)
                except psutil.Error:
                    procs = [self.root]
                self._procs = procs
            rss = []
            total, n = tree_pss(self.root, procs, rss)
            self.peak_rss = max(self.peak_rss, rss[0])
            now = time.perf_counter()
            self.max_gap, last = max(self.max_gap, now - last), now
            self.samples += 1
            self.most_procs = max(self.most_procs, n)
            if total > self.peak:
                self.peak, self.peak_procs = total, n
            self._stop.wait(max(0.0, self.interval - (time.perf_counter() - now)))

    def stop(self):
        self._stop.set()
        self._thread.join()
        self._rss_thread.join()
        return self


def cli_tree_peak(args, env=None, timeout=3600, interval=TREE_INTERVAL, stdout=subprocess.DEVNULL):
    """``streamrank ARGS`` in a fresh process with ``env`` (default: this one's), its whole process
    tree's PSS sampled every ``interval`` s: a dict of ``peak_mb`` (MB = 10^6 bytes, the unit of
    --memory-budget), ``rss_mb`` (the largest sum of RSS: each shared page counted in every process),
    ``procs`` (processes alive at the peak), ``most_procs``, ``max_gap_ms``,
    ``samples``, ``rc``, ``s`` (wall seconds) and ``stderr``."""
    import os
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "streamrank", *map(str, args)], stdout=stdout, stderr=subprocess.PIPE,
                         text=True, cwd=REPO, env=dict(os.environ if env is None else env))
    sampler = TreeSampler(p.pid, interval)
    try:
        _, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        sampler.stop()
    return {"peak_mb": sampler.peak / 1e6, "rss_mb": sampler.peak_rss / 1e6, "procs": sampler.peak_procs,
            "most_procs": sampler.most_procs,
            "max_gap_ms": sampler.max_gap * 1e3, "samples": sampler.samples, "rc": p.returncode,
            "statm_rss_mb": sampler.statm_peak / 1e6, "statm_gap_ms": sampler.statm_gap * 1e3,
            "s": time.perf_counter() - t0, "stderr": err}


def clean_tree_peak(args, env=None, timeout=3600):
    """:func:`cli_tree_peak` measured from a fresh interpreter that imports neither numpy nor numba:
    a measuring process that maps the same libraries shares their pages, and the tree's PSS would
    fall by its share. PSS also falls when unrelated processes map them: the tree's RSS sum
    (``rss_mb``) is the figure no other process lowers."""
    p = subprocess.run([sys.executable, __file__, "--tree", *map(str, args)], capture_output=True, text=True,
                       timeout=timeout + 60, env=env, cwd=REPO)
    if p.returncode != 0 or not p.stdout.strip():
        raise RuntimeError(f"the tree sampler failed (rc {p.returncode}): {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--tree"]:
        print(as_json(cli_tree_peak(sys.argv[2:])))
