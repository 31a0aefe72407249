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


def test_a_deleted_inputs_inode_given_to_a_new_file_is_not_a_hard_link(tmp_path):
    """A registration outliving its file (a deleted input) must not refuse a new output that the
    file system gave the freed (device, inode): found when one test's output got another's deleted
    input's inode on a busy xdist worker. A real hard link to a live input is still refused."""
    from streamrank.errors import InputError
    from streamrank.io import atomic
    src = tmp_path / "in.h5"
    src.write_bytes(b"input")
    link = tmp_path / "link.h5"
    os.link(src, link)
    with atomic.reading((src, "DATA")):
        with pytest.raises(InputError, match="hard link"):
            atomic.check_not_input(link)
        link.unlink()
        src.unlink()
        new = tmp_path / "new.h5"
        new.write_bytes(b"output")
        with atomic._INPUTS_LOCK:  # as if the file system reused the deleted input's inode for new.h5
            for token, (res, ident, what, shown) in list(atomic._INPUTS.items()):
                atomic._INPUTS[token] = (res, atomic._identity(new)[1], what, shown)
        atomic.check_not_input(new)  # not refused: in.h5 does not exist any more
        src.write_bytes(b"replaced")  # a new file at the input's path: another inode
        atomic.check_not_input(new)
