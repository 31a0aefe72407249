"""Start-up imports only what it needs: ``import streamrank`` and ``streamrank --help`` load at
most numpy, not numba, scipy, h5py, dask, scikit-learn, onnx or onnxruntime; the public names
still resolve.
(How long start-up takes is measured by tools/bench_peers.py, not asserted here.)"""

import subprocess
import sys

import pytest

HEAVY = ("numba", "scipy", "h5py", "dask", "sklearn", "matplotlib", "tqdm", "threadpoolctl", "onnx", "onnxruntime")

PROBE = """
import sys
{code}
print("LOADED:" + ",".join(sorted(m for m in {heavy!r} if m in sys.modules)))
"""


def loaded_after(code):
    p = subprocess.run([sys.executable, "-c", PROBE.format(code=code, heavy=HEAVY)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().splitlines()[-1].removeprefix("LOADED:")


@pytest.mark.parametrize("code", [
    "import streamrank",
    "import streamrank.cli; streamrank.cli.build_parser()",
    "from streamrank.cli import main\nassert main(['--help']) == 0",
    "from streamrank.cli import main\nassert main(['train', '--help']) == 0",
    "from streamrank.cli import main\nassert main(['export', '--help']) == 0",
    "import streamrank.export, streamrank.export.common",
], ids=["import", "parser", "help", "train-help", "export-help", "export-package"])
def test_start_up_imports_no_heavy_library(code):
    assert loaded_after(code) == ""


def test_the_public_names_load_on_first_use():
    import streamrank
    assert streamrank.RankSVM.__name__ == "RankSVM" and callable(streamrank.open_dataset)
    assert streamrank.errors.ParameterError.__name__ == "ParameterError"   # a submodule, imported on use
    assert {"RankSVM", "CLSRRank", "Dataset", "open_dataset", "load", "__version__"} <= set(dir(streamrank))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        streamrank.nothing


TRAIN_PROBE = """
import sys
from streamrank.cli import main
assert main(["train", {data!r}, "--C", "1", "-o", {model!r}, "--quiet"]) == 0
print("LOADED:" + ",".join(sorted(m for m in ("scipy.linalg", "numba.np.arraymath", "numba.np.linalg")
                                  if m in sys.modules)))
"""


@pytest.mark.slow  # its first run compiles the training kernels into an empty cache
def test_a_linear_run_from_cached_kernels_imports_no_compiler_registry_nor_scipy_linalg(tmp_path):
    """Cached kernels load without numba's registries (``_native.numba_cache``; numba's own load
    imports them, and scipy.linalg with them) and TRON's preconditioner needs no scipy.linalg:
    the second run, on a filled cache, imports neither. Its model is the first run's."""
    import h5py
    import numpy as np
    from streamrank.synthetic import write_hdf5
    data = tmp_path / "d.h5"
    write_hdf5(data, "small", seed=4, part="train", scale=0.1)
    env = dict(__import__("os").environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    out = []
    for k in range(2):
        code = TRAIN_PROBE.format(data=str(data), model=str(tmp_path / f"m{k}.h5"))
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert p.returncode == 0, p.stderr
        out.append(p.stdout.strip().splitlines()[-1].removeprefix("LOADED:"))
    assert out[1] == ""  # (the first run compiled, which imports them)
    with h5py.File(tmp_path / "m0.h5") as a, h5py.File(tmp_path / "m1.h5") as b:
        np.testing.assert_array_equal(a["w"][()], b["w"][()])


def test_the_program_exits_with_its_status_and_flushed_output(tmp_path):
    """``streamrank`` ends without the interpreter's teardown (cli.main.run): what it printed to
    a pipe arrives whole, and the status is main()'s."""
    import json
    from streamrank.synthetic import write_hdf5
    data = tmp_path / "d.h5"
    write_hdf5(data, "small", seed=1, part="train", scale=0.05)
    p = subprocess.run([sys.executable, "-m", "streamrank", "info", str(data), "--json"], capture_output=True,
                       text=True)
    assert p.returncode == 0 and json.loads(p.stdout)["rows"] > 0, p.stderr
    p = subprocess.run([sys.executable, "-m", "streamrank", "info", str(tmp_path / "none.h5")], capture_output=True,
                       text=True)
    assert p.returncode == 2 and "no such file" in p.stderr


CONFIGURE = "import streamrank; streamrank.configure()"
PROGRAM = "from streamrank.cli import main; main(['--version'])"


@pytest.mark.parametrize("code,env,want", [
    ("import streamrank", {}, None),  # the import changes nothing
    (CONFIGURE, {}, "20"),
    (PROGRAM, {}, "20"),  # the command line configures first thing
    ("import numpy; " + CONFIGURE, {}, None),  # numpy (and its OpenBLAS) came first: left alone
    (CONFIGURE, {"OPENBLAS_THREAD_TIMEOUT": "26"}, "26"),
])
def test_openblas_threads_spin_briefly_once_configured(code, env, want):
    """OpenBLAS's threads spun 0.1 s after each product and took the cores from the exact path's
    next numba pass (streamrank._native.process)."""
    import os
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    out = subprocess.run([sys.executable, "-c", code + "; import os; print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'))"],
                         env={**clean, **env}, capture_output=True, text=True, check=True).stdout.strip()
    assert out.splitlines()[-1] == str(want)


@pytest.mark.parametrize("code,env,want", [
    ("import streamrank", {}, None),
    (CONFIGURE, {}, "PASSIVE"),
    (PROGRAM, {}, "PASSIVE"),
    ("import numba; " + CONFIGURE, {}, None),  # numba came first: left alone
    (CONFIGURE, {"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE"),
])
def test_openmp_workers_sleep_between_loops_once_configured(code, env, want):
    """numba's OpenMP workers spun between prange loops and took the core from the exact path's
    block mapping (streamrank._native.process)."""
    import os
    clean = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code + "; import os; print(os.environ.get('OMP_WAIT_POLICY'))"],
                         env={**clean, **env}, capture_output=True, text=True, check=True).stdout.strip()
    assert out.splitlines()[-1] == str(want)
