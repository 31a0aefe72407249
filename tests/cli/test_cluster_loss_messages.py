"""A lost dask cluster's error line: the cause, then what to do, naming a checkpoint only where one
exists on disk (the same rule as the signal line's "checkpoint kept at"). The cluster's loss is
stood in for by a start_cluster that raises it: the line comes from the CLI's error mapping, the
one place that knows the command's --checkpoint."""

import argparse

import pytest

from streamrank.cli import main
from streamrank.cli.main import _kept
from streamrank.execution import dask_executor
from streamrank.execution.dask_executor import ClusterLost

CAUSE = "every worker of the dask cluster at tcp://127.0.0.1:1 was lost at once (tcp://127.0.0.1:2, tcp://127.0.0.1:3)"
WHERE = "(--workers N or --scheduler ADDRESS of live workers, or neither)"


@pytest.fixture
def lost(monkeypatch):
    def start_cluster(workers=None, scheduler=None):
        raise ClusterLost(CAUSE)
    monkeypatch.setattr(dask_executor, "start_cluster", start_cluster)


def line(capsys, *argv):
    assert main([*map(str, argv), "--workers", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err  # one line, no traceback
    return err.strip()


def test_without_a_checkpoint_no_checkpoint_is_promised(tiny, tmp_path, capsys, lost):
    got = line(capsys, "train", tiny["train"], "-o", tmp_path / "m.h5")
    assert got == (f"streamrank train: error: {CAUSE}; nothing of the run was saved: run the same command again "
                   f"{WHERE}; with --checkpoint DIR too, a run that loses its cluster can continue with --resume")
    assert not (tmp_path / "m.h5").exists()


def test_an_empty_checkpoint_directory_is_no_checkpoint(tiny, tmp_path, capsys, lost):
    ck = tmp_path / "ck"
    got = line(capsys, "train", tiny["train"], "-o", tmp_path / "m.h5", "--checkpoint", ck)
    assert got == (f"streamrank train: error: {CAUSE}; {ck} holds no checkpoint yet (none was written before the "
                   f"loss): run the same command again {WHERE}")
    assert "pass --resume" not in got


def test_a_written_checkpoint_is_named_with_the_flag_that_continues_it(tiny, tmp_path, capsys, lost):
    ck = tmp_path / "ck"
    assert main(["train", str(tiny["train"]), "-o", str(tmp_path / "first.h5"), "--checkpoint", str(ck),
                 "--quiet"]) == 0  # in this process: a checkpoint written
    capsys.readouterr()
    got = line(capsys, "train", tiny["train"], "-o", tmp_path / "m.h5", "--checkpoint", ck)
    assert got == (f"streamrank train: error: {CAUSE}; the checkpoint in {ck} is kept: pass --resume to the same "
                   f"command to continue from it {WHERE}")
    got = line(capsys, "train", tiny["train"], "-o", tmp_path / "m.h5", "--checkpoint", ck, "--resume")
    assert f"the checkpoint in {ck} is kept: run the same command again to continue from it" in got


def test_the_signal_line_names_no_checkpoint_that_is_not_there(tmp_path):
    args = argparse.Namespace(command="train", checkpoint=str(tmp_path), output="m.h5")
    assert _kept(args) == ""
    assert _kept(argparse.Namespace(command="train", checkpoint=None, output="m.h5")) == ""
    (tmp_path / "checkpoint.h5").write_bytes(b"")
    assert _kept(args) == f"; checkpoint kept at {tmp_path}"


def test_the_library_message_promises_no_checkpoint():
    msg = str(ClusterLost(CAUSE))
    assert msg.startswith(CAUSE) and "resume=True" in msg
    assert "kept" not in msg and "last checkpoint" not in msg
