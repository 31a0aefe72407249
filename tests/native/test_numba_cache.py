"""streamrank's cached kernels are keyed by the settings that shaped their code (issue 34).

A process that imported numba before streamrank compiles the kernels without LLVM's SLP
vectoriser (streamrank turns it on only when it is imported first). numba's own cache key holds
the signature, the CPU and the bytecode, so such code used to be loaded by every later run, the
row dots 2.5x slower. Here three processes share one cache: numba first, then streamrank first
twice; the second must compile its own code (a miss), the third load it (a hit).
"""

import json
import os
import subprocess
import sys

PROBE = """
import json, {first}
from streamrank._native import linalg, numba_cache
from numba.core import config
linalg.runtime_probe(1)
s = linalg.runtime_probe.stats
print(json.dumps({{"slp": bool(config.SLP_VECTORIZE), "hits": sum(s.cache_hits.values()),
                   "misses": sum(s.cache_misses.values()), "key": list(map(str, numba_cache.compile_settings()))}}))
"""


def _run(first, cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir), STREAMRANK_NO_WARMUP="1")
    env.pop("NUMBA_SLP_VECTORIZE", None)
    code = PROBE.format(first="numba, streamrank" if first == "numba" else "streamrank, numba")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_code_compiled_without_slp_is_not_loaded_by_a_run_with_it(tmp_path):
    a = _run("numba", tmp_path)
    assert not a["slp"] and a["misses"] == 1  # compiled (and cached) without the vectoriser
    b = _run("streamrank", tmp_path)
    assert b["slp"] and b["misses"] == 1 and b["hits"] == 0, b  # its own code, not a's
    c = _run("streamrank", tmp_path)
    assert c["slp"] and c["hits"] == 1 and c["misses"] == 0, c  # and that is cached
    assert a["key"] != b["key"] == c["key"]
    again = _run("numba", tmp_path)
    assert again["hits"] == 1 and again["misses"] == 0  # the other settings' code is still there
