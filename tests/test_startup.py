"""Start-up imports only what it needs (issue 17): ``import streamrank`` and ``streamrank --help``
load numpy but not numba, scipy, h5py, dask or scikit-learn; the public names still resolve.
(How long start-up takes is measured by tools/bench_peers.py, not asserted here.)"""

import subprocess
import sys

import pytest

HEAVY = ("numba", "scipy", "h5py", "dask", "sklearn", "matplotlib", "tqdm", "threadpoolctl")

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
], ids=["import", "parser", "help", "train-help"])
def test_start_up_imports_no_heavy_library(code):
    assert loaded_after(code) == ""


def test_the_public_names_load_on_first_use():
    import streamrank
    assert streamrank.RankSVM.__name__ == "RankSVM" and callable(streamrank.open_dataset)
    assert streamrank.errors.ParameterError.__name__ == "ParameterError"   # a submodule, imported on use
    assert {"RankSVM", "CLSRRank", "Dataset", "open_dataset", "load", "__version__"} <= set(dir(streamrank))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        streamrank.nothing
