import logging
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from locations import MQ2008  # noqa: E402  (../shared beside the repository; tests skip without it)

# the commands the tests run are short: a first-use compile helper started by each would be
# stopped before it finishes and compete for the cores (tests/native/test_warmup.py runs it)
os.environ.setdefault("STREAMRANK_NO_WARMUP", "1")


@pytest.fixture(autouse=True)
def _restore_logging():
    """The CLI points the "streamrank" logger at the sys.stderr of its call: restore it after each
    test, so that later log lines do not go to a closed capture."""
    logger = logging.getLogger("streamrank")
    saved = logger.handlers[:], logger.level, logger.propagate
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


@pytest.fixture
def mq2008():
    if not MQ2008.exists():
        pytest.skip("../shared/data/MQ2008 is not available")
    return MQ2008


# Modules whose module- or session-scoped fixtures are costly (a session environment of trained
# models, killed-run references, a dask cluster): under pytest-xdist's --dist loadgroup each group
# runs on one worker, so the fixture is built once instead of once per worker; every other test is
# handed out one at a time as usual.
XDIST_GROUPS = {"properties": "properties", "faults/test_kills.py": "kills", "execution/test_dask.py": "dask",
                "execution/test_dask_cli.py": "dask-cli", "faults/test_signals.py": "signals"}


def pytest_collection_modifyitems(config, items):
    root = Path(__file__).resolve().parent
    for item in items:
        rel = item.path.resolve().relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        for prefix, group in XDIST_GROUPS.items():
            if rel == prefix or rel.startswith(prefix + "/"):
                item.add_marker(pytest.mark.xdist_group(group))
                break
