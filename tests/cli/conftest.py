"""Tiny data for the command-line tests: the ``small`` preset at a tenth (300 rows, 20 features)."""

import pytest

from streamrank.synthetic import write_hdf5, write_text


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """{part: HDF5 path} for train, valid and test, and {part + "_txt": LETOR text path}."""
    d = tmp_path_factory.mktemp("cli-tiny")
    out = {}
    for part in ("train", "valid", "test"):
        out[part] = d / f"{part}.h5"
        write_hdf5(out[part], "small", seed=5, part=part, scale=0.1)
        out[part + "_txt"] = d / f"{part}.txt"
        write_text(out[part + "_txt"], "small", seed=5, part=part, scale=0.1)
    return out


@pytest.fixture(scope="session")
def tiny_model(tiny, tmp_path_factory):
    """A linear model trained on tiny's train part (20 features)."""
    from streamrank.cli import main
    path = tmp_path_factory.mktemp("cli-model") / "m.h5"
    assert main(["train", str(tiny["train"]), "-o", str(path), "--quiet"]) == 0
    return path
