"""Where the tests' files are: the fixtures under tests/data and ../shared beside the repository."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data"
ROOT = TESTS.parent
# ../shared beside the repository: real data for tests that skip cleanly without it
SHARED = ROOT.parent / "shared"
MQ2008 = SHARED / "data" / "MQ2008"


def edited_copy(tmp_path, edit, name="edited.h5", source="model_v1.h5"):
    """A copy of ``DATA / source`` in ``tmp_path`` that ``edit(h5py.File)`` changed in place, as
    a user editing a released file with h5py would."""
    import shutil

    import h5py
    path = tmp_path / name
    shutil.copy(DATA / source, path)
    with h5py.File(path, "r+") as f:
        edit(f)
    return path
