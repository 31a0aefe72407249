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


def pytest_configure(config):
    """Workers of one run (pytest -n) and the commands they start share numba's cache: each
    compiles a kernel the others are compiling at that moment by waiting for it and loading it
    (the command line takes the same locks), not a second time."""
    from streamrank._native import warmup
    warmup.install_compile_locks()


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
