"""Thread counts never change a model: every method trained (and its model used to predict) on one
numba thread and one BLAS thread, as under NUMBA_NUM_THREADS=1 or ``taskset -c 0``, gives the same
bits as on two. One child process per thread setting trains every method in turn (CI's one-thread
smoke run of every method; a process per method would cost a second of start-up each)."""

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from streamrank.synthetic import write_hdf5

# (name, arguments after DATA): each solver and loss of the linear method, both preconditioners
# of a feature map (up to 256 columns the sampled Hessian, wider the sketch), Newton's Cholesky
# of a wide map (scipy's own OpenBLAS, imported inside the solve), the exact kernel
# method with its Nystroem preconditioner, CLSRRank, and GAS selection
METHODS = [
    # first: nothing has imported scipy.linalg yet, so Newton's solve is the first to load its OpenBLAS
    ("nystroem_newton", ["train", "--method", "nystroem", "--components", "300", "--C", "0.5", "--normalize", "zscore",
                         "--solver", "newton_cholesky"]),
    ("tron", ["train", "--C", "0.5"]),
    ("newton_cholesky", ["train", "--C", "0.5", "--solver", "newton_cholesky"]),
    ("newton_yuan", ["train", "--C", "0.5", "--solver", "newton_yuan"]),
    ("smooth_hinge", ["train", "--C", "0.5", "--loss", "smooth_hinge"]),
    ("nystroem", ["train", "--method", "nystroem", "--components", "300", "--C", "0.5", "--normalize", "zscore"]),
    ("rff", ["train", "--method", "rff", "--components", "64", "--C", "0.5", "--normalize", "zscore"]),
    ("exact", ["train", "--method", "exact", "--kernel", "rbf", "--normalize", "zscore"]),
    ("clsr", ["train", "--method", "clsr", "--components", "100", "--normalize", "zscore"]),
    ("gas", ["select-features"]),
]

CHILD = r"""
import sys
from streamrank.cli.main import main
data, out = sys.argv[1], sys.argv[2]
for name, args in METHODS:
    cmd = [args[0], data, "-o", f"{out}/{name}.h5", "--quiet", *args[1:]]
    if main(cmd) != 0:
        sys.exit(f"{name}: streamrank {' '.join(cmd)} failed")
    if args[0] == "train" and main(["predict", f"{out}/{name}.h5", data, "-o", f"{out}/{name}.txt"]) != 0:
        sys.exit(f"{name}: predict failed")
if len(sys.argv) > 3:  # numba's count lowered in the process, below NUMBA_NUM_THREADS
    import numba
    numba.set_num_threads(1)
    args = dict(METHODS)["exact"]
    if main([args[0], data, "-o", f"{out}/exact_set1.h5", "--quiet", *args[1:]]) != 0:
        sys.exit("exact after numba.set_num_threads(1) failed")
"""


def _datasets(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda k, v: out.__setitem__(k, v[()]) if isinstance(v, h5py.Dataset) else None)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every method's model and scores from a child on 2 numba and 2 BLAS threads and from one on 1
    and 1 (both started at once); the first also trains exact again after numba.set_num_threads(1)."""
    d = tmp_path_factory.mktemp("threads")
    write_hdf5(d / "data.h5", "small", seed=3, scale=0.3)  # 900 rows, 20 features
    code = f"METHODS = {METHODS!r}\n" + CHILD
    procs = {}
    for n in (2, 1):
        (d / str(n)).mkdir()
        env = dict(os.environ, NUMBA_NUM_THREADS=str(n), OPENBLAS_NUM_THREADS=str(n), OMP_NUM_THREADS=str(n))
        extra = ["set_num_threads"] if n == 2 else []
        procs[n] = subprocess.Popen([sys.executable, "-c", code, str(d / "data.h5"), str(d / str(n)), *extra], env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for n, p in procs.items():
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, f"{n} thread(s): {err[-3000:]}"
    return d


@pytest.mark.parametrize("name", [m for m, _ in METHODS])
def test_one_thread_gives_the_bits_of_two(runs, name):
    two, one = _datasets(runs / "2" / f"{name}.h5"), _datasets(runs / "1" / f"{name}.h5")
    assert sorted(two) == sorted(one)
    differ = [k for k in two if two[k].tobytes() != one[k].tobytes()]
    assert not differ, f"{name}: {differ} differ between 1 and 2 threads"
    if name != "gas":
        assert (runs / "2" / f"{name}.txt").read_bytes() == (runs / "1" / f"{name}.txt").read_bytes()
        assert np.isfinite(np.loadtxt(runs / "1" / f"{name}.txt")).all()


def test_a_lower_set_num_threads_gives_the_bits_of_two(runs):
    """NUMBA_NUM_THREADS=2 with numba.set_num_threads(1) in force: the exact path's passes run on the
    one thread in force (its thread chooser has nothing to choose) and give the same model."""
    two, low = _datasets(runs / "2" / "exact.h5"), _datasets(runs / "2" / "exact_set1.h5")
    assert {k: v.tobytes() for k, v in two.items()} == {k: v.tobytes() for k, v in low.items()}
