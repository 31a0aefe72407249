"""Generated LETOR-like train and validation sets for tests that need a pair of small files."""

import streamrank
from streamrank.synthetic import write_hdf5


def small_pair(tmp_path_factory, name, scale):
    """The ``small`` preset's train and valid parts (seed 3) at ``scale``, written and opened."""
    d = tmp_path_factory.mktemp(name)
    for part in ("train", "valid"):
        write_hdf5(d / f"{part}.h5", "small", seed=3, part=part, scale=scale)
    return streamrank.open_dataset(d / "train.h5"), streamrank.open_dataset(d / "valid.h5")
