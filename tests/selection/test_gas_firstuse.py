"""select-features' first use (issue 31): the first-use helper's list for select-features
(``streamrank/_native/warm_manifest.py``) holds every kernel the command compiles, so that the
helper compiles half of them beside the command on a cold numba cache, and the command starts it."""

import os
import subprocess
import sys
import textwrap

import pytest

from compile_children import RUN, child_env, run_python
from streamrank._native import warmup
from streamrank._native.warm_manifest import KERNELS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# what the list was recorded from (tools/kernel_manifest.py's scenario for select-features): both the
# GAS-E kernels (map) and GAS-L's (pairwise, signed)
SCENARIO = ("from streamrank.cli.main import main; "
            "main(['select-features', '{work}/t.h5', '-k', '5', '--importance', 'map', '--tradeoff', '0.5', '-o', "
            "'{work}/g.h5', '--quiet']); "
            "main(['select-features', '{work}/t.h5', '-k', '5', '--importance', 'pairwise', '--signed', '--quiet'])")

PREPARE = """
from streamrank.synthetic import write_hdf5
write_hdf5("{work}/t.h5", "small", seed=0)
"""

@pytest.mark.slow  # compiles select-features' kernels from an empty numba cache
def test_the_list_covers_what_select_features_compiles(tmp_path):
    """After the helper has compiled the select-features list into an empty cache, the command
    compiles nothing of streamrank's itself."""
    assert KERNELS["select-features"]
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    run_python(PREPARE, tmp_path / "prepare-cache", work)
    argv, cwd = warmup.helper_command("select-features")
    subprocess.run(argv, cwd=cwd, env=child_env(NUMBA_CACHE_DIR=str(cache)), check=True, timeout=900)
    out = run_python(RUN.format(code=SCENARIO), cache, work)
    compiled = out.split("COMPILED", 1)[1].strip()
    assert compiled == "[]", f"select-features compiled {compiled} itself: record its list again"


@pytest.mark.slow  # a cold numba cache: every kernel compiled
def test_select_features_starts_the_helper_on_a_cold_cache(tmp_path):
    """The command compiles its own list in helpers before it goes on."""
    code = textwrap.dedent("""
        from streamrank._native import warmup
        started = []
        real = warmup.start
        warmup.start = lambda lists, *a: started.extend([lists] if isinstance(lists, str) else lists) or real(lists, *a)
        from streamrank.cli.main import main
        from streamrank.synthetic import write_hdf5
        write_hdf5("{work}/t.h5", "small", seed=0)
        assert main(["select-features", "{work}/t.h5", "-k", "2", "--quiet"]) == 0
        assert "select-features" in started, started
    """).replace("{work}", str(tmp_path))
    env = child_env(NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env.pop(warmup.ENV_OFF, None)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
