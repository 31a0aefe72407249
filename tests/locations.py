"""Where the tests' files are: the fixtures under tests/data and ../shared beside the repository."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data"
ROOT = TESTS.parent
# ../shared beside the repository: real data for tests that skip cleanly without it
SHARED = ROOT.parent / "shared"
MQ2008 = SHARED / "data" / "MQ2008"
