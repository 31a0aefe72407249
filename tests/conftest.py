import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# ../shared beside the repository: real data for tests that skip cleanly without it
SHARED = HERE.parents[1] / "shared"
MQ2008 = SHARED / "data" / "MQ2008"


@pytest.fixture
def mq2008():
    if not MQ2008.exists():
        pytest.skip("../shared/data/MQ2008 is not available")
    return MQ2008
