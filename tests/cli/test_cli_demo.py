"""streamrank demo keeps its files in a named folder (./streamrank-demo by default, --workdir),
says where, and prints the commands that redo its steps: run on its files they give the same
scores, bit for bit. A folder with files the demo did not write is refused; its own is reused."""

import shlex

import numpy as np

from streamrank.cli import main


def test_the_demo_keeps_its_files_and_its_steps_redo_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    work = tmp_path / "streamrank-demo"
    for name in ("train.txt", "valid.txt", "test.txt", "train.h5", "valid.h5", "test.h5", "model.h5", "scores.txt"):
        assert (work / name).is_file(), name
    assert "The demo's files are in streamrank-demo" in out and "streamrank-demo/model.h5" in out
    steps = [shlex.split(ln.strip()) for ln in out.splitlines() if ln.startswith("  streamrank ")]
    assert [s[1] for s in steps] == ["convert", "convert", "convert", "train", "predict", "eval"]
    # the same steps into another folder: the demo's files are the inputs, the outputs go elsewhere
    hand = tmp_path / "hand"
    hand.mkdir()
    for name in ("train.txt", "valid.txt", "test.txt"):
        (hand / name).write_bytes((work / name).read_bytes())
    for step in steps:
        argv = [a.replace("streamrank-demo", "hand") for a in step[1:]]
        assert main(argv + (["--quiet"] if argv[0] in ("convert", "train") else [])) == 0, argv
    capsys.readouterr()
    assert (hand / "scores.txt").read_bytes() == (work / "scores.txt").read_bytes()
    assert np.loadtxt(hand / "scores.txt").size == 3000


def test_the_demo_reuses_its_folder_and_refuses_another(tmp_path, capsys):
    work = tmp_path / "d"
    assert main(["demo", "--workdir", str(work), "--quiet"]) == 0
    first = (work / "scores.txt").read_bytes()
    assert main(["demo", "--workdir", str(work) + "/", "--quiet"]) == 0  # again in its own folder
    assert (work / "scores.txt").read_bytes() == first
    assert capsys.readouterr().out == ""
    other = tmp_path / "mine"
    other.mkdir()
    (other / "model.h5").write_text("a user's file")
    assert main(["demo", "--workdir", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds files the demo did not write (model.h5)" in err and "--workdir" in err
    assert (other / "model.h5").read_text() == "a user's file" and sorted(other.iterdir()) == [other / "model.h5"]
    (work / "notes.txt").write_text("x")  # a file the demo did not write, in the demo's folder
    assert main(["demo", "--workdir", str(work)]) == 2
    assert "(notes.txt)" in capsys.readouterr().err
