"""Child processes that record which of streamrank's kernels numba compiles (the first-use tests of
tests/native/test_warmup.py and tests/selection/test_gas_firstuse.py)."""

import os
import subprocess
import sys

from streamrank._native import warmup

# runs ``code`` and prints COMPILED and the JSON list of streamrank's functions numba compiled
RUN = """
import json, sys
from numba.core import event
with event.install_recorder("numba:compile") as rec:
    exec({code!r})
names = sorted({{ev.data["dispatcher"].py_func.__qualname__ for _, ev in rec.buffer
                 if ev.data["dispatcher"].py_func.__module__.startswith("streamrank.")}})
print("COMPILED" + json.dumps(names))
"""


def child_env(**extra):
    """The environment of a child that imports the same streamrank as this process (numba's cache
    is per source file: a checkout and an installed copy do not share it)."""
    root = warmup.helper_command("x")[1]
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=root + (os.pathsep + path if path else ""), **extra)


def run_python(code, cache, work, **extra):
    """``code`` (``{work}`` replaced) in a child with numba's cache at ``cache`` and no warm-up
    helper; its standard output."""
    env = child_env(NUMBA_CACHE_DIR=str(cache), STREAMRANK_NO_WARMUP="1", **extra)
    p = subprocess.run([sys.executable, "-c", code.replace("{work}", str(work))], env=env, cwd=str(work),
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout
