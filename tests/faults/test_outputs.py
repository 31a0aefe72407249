"""Output locations: tried before the work, never renamed over a special file, clean on a full or
read-only file system; temporary files of killed writers are cleaned up (issue 12)."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from mounts import tmpfs
from streamrank.cli import main
from streamrank.io.atomic import remove_stale_temps, temp_name
from streamrank.synthetic import write_hdf5


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("outputs")
    write_hdf5(d / "train.h5", "small", seed=0, part="train", scale=0.1)
    assert main(["train", str(d / "train.h5"), "-o", str(d / "m.h5"), "--quiet"]) == 0
    return d


def test_predict_to_a_special_file_writes_in_place(trained, tmp_path):
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    assert main(["predict", str(trained / "m.h5"), str(trained / "train.h5"), "-o", str(link)]) == 0
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader exists, so the writer's open does not wait
    try:
        assert main(["predict", str(trained / "m.h5"), str(trained / "train.h5"), "-o", str(fifo)]) == 0
        got = os.read(fd, 1 << 20)  # the scores fit in the pipe's buffer
    finally:
        os.close(fd)
    assert len(got.decode().split()) > 10 and fifo.exists() and not fifo.is_file()


def test_predict_to_dev_stdout_prints_and_leaves_it_alone(trained):
    before = os.readlink("/dev/stdout") if os.path.islink("/dev/stdout") else None
    r = subprocess.run([sys.executable, "-m", "streamrank", "predict", str(trained / "m.h5"), str(trained / "train.h5"),
                        "-o", "/dev/stdout"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.split()) > 10 and all(np.isfinite(np.array(r.stdout.split(), float)))
    assert (os.readlink("/dev/stdout") if os.path.islink("/dev/stdout") else None) == before


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "adir", "is a directory; give a file name"),
    (lambda d: d / "missing" / "m.h5", "does not exist; create it first"),
])
def test_a_bad_output_location_is_refused_before_training(trained, tmp_path, capsys, make, message):
    (tmp_path / "adir").mkdir()
    out = make(tmp_path)
    assert main(["train", str(trained / "train.h5"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "iter" not in err  # no training happened
    assert main(["convert", str(trained / "train.h5"), "-o", str(out)]) == 2


def test_a_read_only_location_is_refused_before_the_work(trained, tmp_path, capsys):
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        for argv in (["train", str(trained / "train.h5"), "-o", str(ro / "m.h5")],
                     ["train", str(trained / "train.h5"), "-o", str(tmp_path / "m.h5"), "--checkpoint", str(ro / "ck")],
                     ["predict", str(trained / "m.h5"), str(trained / "train.h5"), "-o", str(ro / "s.txt")]):
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert ("read-only file system" in err or "cannot be created" in err) and "Traceback" not in err
            assert "iter" not in err


def test_a_full_disk_ends_convert_and_train_cleanly(trained, tmp_path, capsys):
    text = tmp_path / "big.txt"
    rng = np.random.default_rng(0)
    text.write_text("".join(f"{rng.integers(3)} qid:{i // 20} " + " ".join(f"{j + 1}:{v:.6f}" for j, v in
                                                                           enumerate(rng.random(30))) + "\n"
                            for i in range(3000)))
    with tmpfs(tmp_path / "full", size="200k") as full:
        # the probe passes (the disk is not full yet); the conversion fills it
        r = subprocess.run([sys.executable, "-m", "streamrank", "convert", str(text), "-o", str(full / "d.h5")],
                           capture_output=True, text=True)
        assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
        assert "no space left" in r.stderr.lower() and "Traceback" not in r.stderr
        assert os.listdir(full) == []  # no partial file, no temporary file
        # a disk already full is refused before the work
        try:
            with open(full / "filler", "wb") as f:
                f.write(b"\0" * (256 << 10))
        except OSError:
            pass
        assert main(["train", str(trained / "train.h5"), "-o", str(full / "m.h5")]) == 2
        assert "no space left on the device" in capsys.readouterr().err


def test_stale_temporary_files_of_dead_writers_are_removed(trained, tmp_path):
    target = tmp_path / "d.h5"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    stale = [tmp_path / f".d.h5.{dead}.tmp", tmp_path / f".d.h5.{dead}.tmp.regroup"]
    alive = tmp_path / f".d.h5.{os.getppid()}.tmp"  # a live process's: kept
    other = tmp_path / f".e.h5.{dead}.tmp"          # another target's: kept
    for p in stale + [alive, other]:
        p.write_bytes(b"x" * 100)
    write_hdf5(target, "small", seed=1, part="train", scale=0.05)  # a writer of the same target cleans up
    assert not any(p.exists() for p in stale) and target.exists()
    assert remove_stale_temps(target) == []
    assert alive.exists() and other.exists()
    assert temp_name(target).name == f".d.h5.{os.getpid()}.tmp"


def test_eval_names_the_line_of_a_bad_score(tmp_path, capsys):
    src = tmp_path / "s.txt"
    src.write_text("1 qid:1 1:1\n0 qid:1 1:2\n2 qid:1 1:3\n")
    for body, want in (("0.5\n1e400\n0\n", "scores.txt:2: the score 1e400 is beyond"),
                       ("0.5\n0.1\nabc\n", "scores.txt:3: expected one number, got 'abc'"),
                       ("0.5\n1_0\n1\n", "scores.txt:2: expected one number, got '1_0'"),
                       ("0.5\nnan\n1\n", "scores.txt:2: expected one number, got 'nan'"),
                       ("1\n2\n3\n4\n", "more than 3 scores but the data has 3 rows")):
        (tmp_path / "scores.txt").write_text(body)
        assert main(["eval", str(src), str(tmp_path / "scores.txt"), "--cache-dir", str(tmp_path / "c")]) == 2
        assert want in capsys.readouterr().err


def test_warnings_are_one_plain_line(trained, tmp_path, capsys):
    assert main(["train", str(trained / "train.h5"), "-o", str(tmp_path / "m.h5"), "--memory-budget", "1KB"]) == 0
    err = capsys.readouterr().err
    assert "RuntimeWarning" not in err and ".py:" not in err
    assert "1.0 KB" in err and not re.search(r"(?<![0-9.])0\.0 MB", err)
    assert "pass --memory-budget " in err and "block_bytes" not in err


def test_a_full_disk_keeps_the_last_checkpoint_intact(tmp_path):
    from streamrank.errors import StorageError
    from streamrank.state.checkpoint import read_checkpoint, write_checkpoint
    w = np.arange(2000, dtype=np.float64)
    with tmpfs(tmp_path / "ck", size="256k") as d:
        for k in range(3):
            write_checkpoint(d, config={"C": 1}, fingerprint="f", scalars={"iteration": k}, w=w + k, g=w, number=k)
        free = os.statvfs(d).f_bavail * os.statvfs(d).f_frsize
        (d / "filler").write_bytes(b"\0" * max(0, free - (8 << 10)))  # leave 8 KB
        with pytest.raises(StorageError, match="no space left on the device"):
            write_checkpoint(d, config={"C": 1}, fingerprint="f", scalars={"iteration": 3}, w=w + 3, g=w, number=3)
        ck = read_checkpoint(d, config={"C": 1}, fingerprint="f")
        assert ck["scalars"]["iteration"] == 2 and np.array_equal(ck["w"], w + 2)
        assert sorted(p.name for p in d.iterdir()) == ["checkpoint.h5", "checkpoint.prev.h5", "filler"]


def test_review_fixes_probe_sibling_scores_and_empty_features(trained, tmp_path, capsys):
    """A same-pid temporary file does not block the output probe; a PATH.query beside text that has
    qid: is ignored; trailing blank score lines are accepted, inner ones refused; data without
    features is refused with a message."""
    from streamrank.io.atomic import check_writable
    out = tmp_path / "m.h5"
    temp_name(out).write_bytes(b"x")
    check_writable(out, "model file")
    assert temp_name(out).exists()  # not the probe's to delete
    src = tmp_path / "q.txt"
    src.write_text("1 qid:1 1:0.5 2:1\n0 qid:1 1:0.1 2:0\n2 qid:2 1:0.3 2:2\n0 qid:2 1:0.9 2:1\n")
    (tmp_path / "q.txt.query").write_text("4\n")
    assert main(["train", str(src), "-o", str(tmp_path / "q.h5"), "--cache-dir", str(tmp_path / "c"), "--quiet"]) == 0
    (tmp_path / "s.txt").write_text("0.5\n1\n2\n3\n\n\n")
    assert main(["eval", str(src), str(tmp_path / "s.txt"), "--cache-dir", str(tmp_path / "c")]) == 0
    (tmp_path / "s.txt").write_text("0.5\n\n2\n3\n4\n")
    assert main(["eval", str(src), str(tmp_path / "s.txt"), "--cache-dir", str(tmp_path / "c")]) == 2
    assert "s.txt:2: a blank line among the scores" in capsys.readouterr().err
    empty = tmp_path / "e.txt"
    empty.write_text("1 qid:1\n0 qid:1\n")
    assert main(["train", str(empty), "-o", str(tmp_path / "e.h5"), "--cache-dir", str(tmp_path / "c")]) == 2
    assert "has no features" in capsys.readouterr().err


def test_a_read_into_a_buffer_of_another_shape_is_refused(tmp_path):
    import streamrank
    from streamrank.io.hdf5_format import DatasetWriter
    with DatasetWriter(tmp_path / "d.h5", n_features=4) as w:
        w.append(np.arange(40, dtype=np.float32).reshape(10, 4), np.zeros(10, np.float32), np.repeat([1, 2], 5))
    with streamrank.open_dataset(tmp_path / "d.h5") as ds:
        ds.read(0, 5)  # verified: the next read of rows 0:5 may take the unchecked path
        big_X, big_y = np.zeros((8, 4), np.float32), np.zeros(8, np.float32)
        with pytest.raises((TypeError, ValueError)):
            ds.read(0, 5, out=(big_X[:3], big_y[:3]))
        assert not big_X[3:].any()  # nothing written past the view
        X, y = ds.read(0, 5, out=(big_X, big_y))
        np.testing.assert_array_equal(X, np.arange(20, dtype=np.float32).reshape(5, 4))


@pytest.mark.parametrize("ignore_sigxfsz", [True, False])
def test_a_file_size_limit_ends_convert_and_predict_cleanly(trained, tmp_path, ignore_sigxfsz):
    """RLIMIT_FSIZE (ulimit -f): writes are checked against it before HDF5 or numpy meet EFBIG (or
    SIGXFSZ, which kills a process that does not ignore it)."""
    import resource
    import signal
    text = tmp_path / "big.txt"
    rng = np.random.default_rng(1)
    text.write_text("".join(f"{rng.integers(3)} qid:{i // 20} " + " ".join(f"{j + 1}:{v:.6f}" for j, v in
                                                                           enumerate(rng.random(30))) + "\n"
                            for i in range(3000)))

    def limit():
        if ignore_sigxfsz:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (150 << 10, resource.RLIM_INFINITY))

    write_hdf5(tmp_path / "more.h5", "small", seed=0, part="test", scale=3.0)  # 9000 rows: 200 KB of scores
    out = tmp_path / "out"
    out.mkdir()
    for argv in (["convert", str(text), "-o", str(out / "d.h5")],
                 ["predict", str(trained / "m.h5"), str(tmp_path / "more.h5"), "-o", str(out / "s.txt")]):
        r = subprocess.run([sys.executable, "-m", "streamrank", *argv], capture_output=True, text=True,
                           preexec_fn=limit)
        assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
        assert "file size limit" in r.stderr and "Traceback" not in r.stderr
        assert os.listdir(out) == []
