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
