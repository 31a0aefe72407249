"""SIGKILL at chosen points and at random moments of convert, train (linear, Nystroem with a disk
cache, exact) and predict: what is left is absent or complete, and running again (train: --resume)
ends with exactly the result of an uninterrupted run, with no temporary file left (issue 12).
tools/soak.py runs the same scenarios with hundreds of random kills."""

import json
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


# an exact-kernel run killed at a random moment takes a whole exact training or more, and grid's and
# cv's runs are their trainings' (their fault points stay in the fast tier): the slow tier
SLOW_RANDOM = ("train-exact", "grid", "cv")


@pytest.mark.parametrize("s", [pytest.param(s, marks=[pytest.mark.slow] if s.name in SLOW_RANDOM else [])
                               for s in SCENARIOS], ids=[s.name for s in SCENARIOS])
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


def test_cache_builds_killed_midway_continue_from_the_blocks_written(inputs, tmp_path):
    """A kernel cache (exact) or feature cache (Nystroem) killed while it was being built keeps
    the blocks it wrote: the next run computes only the others (issue 12: "cache builds of large
    inputs resume rather than restart") and ends with the uninterrupted model."""
    import re
    import shutil
    w = tmp_path / "w"
    shutil.copytree(inputs, w)
    exact = ["train", str(w / "train.h5"), "--method", "exact", "--gamma", "0.05", "--memory-budget", "8MB",
             "--precondition", "off", "--tol", "1e-2", "--cache-dir"]
    ref = kh.run([*exact, str(w / "kc-ref"), "-o", str(w / "ref.h5")])
    assert ref.returncode == 0, ref.stderr[-2000:]
    total = int(re.search(r"(\d+) blocks, ", ref.stderr).group(1))
    assert total >= 6
    r = kh.run([*exact, str(w / "kc"), "-o", str(w / "m.h5")], env={kh.KILL_ENV: "cache-write:7"})
    assert r.returncode == -9
    r = kh.run([*exact, str(w / "kc"), "-o", str(w / "m.h5")])
    assert r.returncode == 0, r.stderr[-2000:]
    # (the manifest is written at the start and after each block: killed in the 7th write, two
    # blocks are whole and listed)
    assert f"({total - 2} blocks computed)" in r.stderr
    assert not kh.leftovers(w)
    assert kh.file_result(w / "m.h5") == kh.file_result(w / "ref.h5")

    from streamrank.synthetic import write_hdf5
    write_hdf5(w / "more.h5", "small", seed=0, part="train", scale=3.0)  # 9,000 rows: blocks of 128 KB below
    nys = ["train", str(w / "more.h5"), "--method", "nystroem", "--components", "64", "--map-cache", "cache",
           "--memory-budget", "1MB", "--tol", "1e-2", "--cache-dir"]
    assert kh.run([*nys, str(w / "fc-ref"), "-o", str(w / "nref.h5")]).returncode == 0
    r = kh.run([*nys, str(w / "fc"), "-o", str(w / "n.h5")], env={kh.KILL_ENV: "cache-write:9"})
    assert r.returncode == -9
    listed = json.loads(next((w / "fc").rglob("manifest.json")).read_text())
    before = {p: p.stat().st_mtime_ns for p in (w / "fc").rglob("block-*.bin")}
    assert len(before) >= 3
    assert kh.run([*nys, str(w / "fc"), "-o", str(w / "n.h5")]).returncode == 0
    kept = [p for p, t in before.items() if p.stat().st_mtime_ns == t]
    # block 0 is mapped again to time the map; the others the manifest listed are read, not mapped
    assert len(kept) >= 2 and len(kept) >= len(listed["blocks"]) - 1, (len(kept), listed)
    assert not kh.leftovers(w)
    assert kh.file_result(w / "n.h5") == kh.file_result(w / "nref.h5")
