import pytest

from streamrank.synthetic import write_hdf5


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A directory with the generated 'small' preset's train.h5 and valid.h5 (seed 0, scale 0.1)."""
    d = tmp_path_factory.mktemp("small")
    for part in ("train", "valid"):
        write_hdf5(d / f"{part}.h5", "small", seed=0, part=part, scale=0.1)
    return d
