"""Whole files or none: io.atomic, the one place that writes under a temporary name and renames."""

import os

import pytest

from streamrank.io.atomic import atomic_replace, temp_name, written


def test_written_replaces_the_target_only_when_the_block_ends(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with written(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".out.txt.") and tmp.name.endswith(".tmp")
        tmp.write_text("new")
        assert target.read_text() == "old"  # not yet
    assert target.read_text() == "new" and not tmp.exists()


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with written(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_atomic_replace_and_temp_name(tmp_path):
    target = tmp_path / "m.h5"
    tmp = temp_name(target)
    assert str(os.getpid()) in tmp.name
    tmp.write_bytes(b"x")
    atomic_replace(tmp, target)
    assert target.read_bytes() == b"x" and not tmp.exists()
