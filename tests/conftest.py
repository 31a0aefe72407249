import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from locations import MQ2008  # noqa: E402  (../shared beside the repository; tests skip without it)


@pytest.fixture
def mq2008():
    if not MQ2008.exists():
        pytest.skip("../shared/data/MQ2008 is not available")
    return MQ2008
