"""SIGKILL at chosen points and at random moments of convert, train (linear, Nystroem with a disk
cache, exact) and predict: what is left is absent or complete, and running again (train: --resume)
ends with exactly the result of an uninterrupted run, with no temporary file left (issue 12).
tools/soak.py runs the same scenarios with hundreds of random kills."""

import zlib

import numpy as np
import pytest

import kill_harness as kh
from scenarios import SCENARIOS, make_inputs

CASES = [(s, point, n) for s in SCENARIOS for point, n in s.points]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return make_inputs(tmp_path_factory.mktemp("kill-inputs"))


@pytest.fixture(scope="module")
def references(inputs, tmp_path_factory):
    base = tmp_path_factory.mktemp("kill-reference")
    return {s.name: kh.reference_result(s, base, inputs) for s in SCENARIOS}


@pytest.mark.parametrize("s, point, n", CASES, ids=[f"{s.name}-{p}-{n}" for s, p, n in CASES])
def test_killed_at_a_fault_point(s, point, n, inputs, references, tmp_path):
    kh.kill_at_point(s, tmp_path, inputs, references[s.name][0], point, n)


@pytest.mark.parametrize("s", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_killed_at_a_random_moment(s, inputs, references, tmp_path):
    reference, seconds = references[s.name]
    rng = np.random.default_rng(zlib.crc32(s.name.encode()))
    for k, frac in enumerate(rng.uniform(0.3, 0.95, 2)):
        kh.kill_after(s, tmp_path, inputs, reference, frac * seconds, k)


def test_a_kill_that_leaves_a_partial_file_is_caught(tmp_path):
    """The harness itself: an output that differs from the reference is reported."""
    s = kh.Scenario("fake", ["info"], ["out.txt"])
    (tmp_path / "out.txt").write_text("half")
    with pytest.raises(AssertionError, match="left incomplete"):
        kh.check_after_kill(s, tmp_path, {"out.txt": kh.file_result(tmp_path / "out.txt") + "x"})
