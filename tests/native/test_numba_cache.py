"""streamrank's kernels compile with their own LLVM settings and are cached under them
(``_native.numba_cache``), whatever the process imported first, and numba's own functions keep
numba's settings.

numba's cache key holds the signature, the CPU and the bytecode, not how LLVM compiled the code:
code compiled without the SLP vectoriser used to be loaded by every later run (the row dots 2.5x
slower). Here processes share one cache: a process whose user asked for no SLP
(``NUMBA_SLP_VECTORIZE=0``) compiles and caches its own code; a process that imported numba first
(numba's default: no SLP) still compiles streamrank's kernels with it, once, and the next loads it.
"""

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROBE = """
import json, {first}
from streamrank._native import linalg, numba_cache
from numba.core import config
linalg.runtime_probe(1)
s = linalg.runtime_probe.stats
print(json.dumps({{"config_slp": bool(config.SLP_VECTORIZE), "hits": sum(s.cache_hits.values()),
                   "misses": sum(s.cache_misses.values()), "key": list(map(str, numba_cache.compile_settings()))}}))
"""


def _run(first, cache_dir, slp=None):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir), STREAMRANK_NO_WARMUP="1")
    env.pop("NUMBA_SLP_VECTORIZE", None)
    if slp is not None:
        env["NUMBA_SLP_VECTORIZE"] = slp
    code = PROBE.format(first="numba, streamrank" if first == "numba" else "streamrank, numba")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_kernels_compile_with_slp_whatever_came_first_and_are_keyed_by_it(tmp_path):
    a = _run("streamrank", tmp_path, slp="0")
    assert a["misses"] == 1 and "False" in a["key"]  # the user's setting, obeyed and in the key
    b = _run("numba", tmp_path)
    assert b["misses"] == 1 and b["hits"] == 0, b  # its own code, not a's
    assert not b["config_slp"]  # numba's setting for everything else, put back after the compile
    c = _run("streamrank", tmp_path)
    assert c["hits"] == 1 and c["misses"] == 0, c  # and that is cached
    assert a["key"] != b["key"] == c["key"]
    again = _run("streamrank", tmp_path, slp="0")
    assert again["hits"] == 1 and again["misses"] == 0  # the other settings' code is still there


SLP_MODULE = '''
import numba
from streamrank._native import numba_cache


def pairs(a, out):  # two independent products stored side by side: what SLP packs
    x0 = a[0] * a[2]
    x1 = a[1] * a[3]
    out[0] = x0 + 1.0
    out[1] = x1 + 1.0


ours = numba.njit(pairs)
theirs = numba.njit(pairs)  # defined here too, but not a kernel of this module's: numba's settings
numba_cache.adopt({"__name__": __name__, "ours": ours})
'''


def test_slp_applies_to_streamrank_compiles_only(tmp_path):
    """In one process, an adopted kernel's optimised code has packed vector products, the same
    function compiled by numba without adoption has none, and numba's config is as it was."""
    (tmp_path / "slpmod.py").write_text(SLP_MODULE)
    code = textwrap.dedent("""
        import sys, json
        import numpy as np
        sys.path.insert(0, sys.argv[1])
        import slpmod
        from numba.core import config
        a, out = np.arange(4.0), np.zeros(2)
        slpmod.ours(a, out)
        slpmod.theirs(a, out)
        ir = {f: next(iter(getattr(slpmod, f).inspect_llvm().values())) for f in ("ours", "theirs")}
        print(json.dumps({"config": config.SLP_VECTORIZE, **ir}))
    """)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_SLP_VECTORIZE"}
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    packed = re.compile(r"fmul (\w+ )?<\d+ x double>")
    assert out["config"] == 0
    assert packed.search(out["ours"]) and not packed.search(out["theirs"])


def _kernel_modules():
    root = Path(importlib.import_module("streamrank").__file__).parent
    for path in sorted(root.rglob("*.py")):
        if "njit(" in path.read_text():
            yield ".".join(("streamrank",) + path.relative_to(root).with_suffix("").parts)


@pytest.mark.parametrize("name", list(_kernel_modules()))
def test_every_kernel_of_the_package_is_adopted(name):
    """A module that defines kernels ends with ``numba_cache.adopt(globals())``: each of its
    dispatchers compiles with streamrank's settings and caches through its KernelCache."""
    from numba.core.dispatcher import Dispatcher
    from streamrank._native import numba_cache
    module = importlib.import_module(name)
    kernels = [v for v in vars(module).values()
               if isinstance(v, Dispatcher) and v.py_func.__module__ == name]
    assert kernels, f"{name} mentions njit( but defines no kernel at module level"
    assert [k.__name__ for k in kernels if not numba_cache.adopted(k)] == []
