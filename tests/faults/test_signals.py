"""SIGTERM and SIGHUP end a run as SIGINT does (issue 30, Build 7): one line on stderr ("interrupted
by SIGTERM; checkpoint kept at DIR"), no traceback, exit 128 + the signal's number, the checkpoint
whole (it loads, and --resume ends with the model of an uninterrupted run), no partial output and
no temporary file; the warm-up helper a command started is stopped. Real processes, each signal
sent once the first checkpoint is on disk (polled for, not timed)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kill_harness as kh
from streamrank.synthetic import write_hdf5

# a warm-started path of many C values, each point one or two iterations and a checkpoint: seconds
# of work after the first checkpoint appears (40 points of 1.15x left 0.47 s, which a poller starved
# on a loaded machine missed once in CI: the run ended with exit 0; 150 points of 1.04x, about 2 s)
C_PATH = ",".join(f"{0.01 * 1.04 ** k:.6g}" for k in range(150))
# the grid's: after issue 34's faster passes its 150 points ended once between the first checkpoint
# and the signal (CI at 3504fdc: "interrupted by SIGTERM" with no configuration's checkpoint left);
# 250 points of 1.025x over about the same range leave about 1.7 times the work
GRID_C_PATH = ",".join(f"{0.01 * 1.025 ** k:.6g}" for k in range(250))
DEADLINE = 300.0  # seconds a poll waits at most (a bound against a hang, not a timing)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("signals")
    write_hdf5(d / "t.h5", "small", seed=0, part="train", scale=0.3)
    write_hdf5(d / "v.h5", "small", seed=0, part="valid", scale=0.3)
    return d


def train_argv(d, w, *extra):
    return ["train", str(d / "t.h5"), "--valid", str(d / "v.h5"), "--C", C_PATH, "--tol", "1e-8",
            "-o", str(w / "m.h5"), "--checkpoint", str(w / "ck"), *extra]


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    w = tmp_path_factory.mktemp("signals-reference")
    r = kh.run(train_argv(data, w, "--quiet"))
    assert r.returncode == 0, r.stderr[-2000:]
    return kh.file_result(w / "m.h5")


def _dispositions(ignored=()):
    """For the child: the three signals at their defaults (a test runner started in the background
    may have SIGINT ignored), except ``ignored``."""
    def preexec():
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN if s in ignored else signal.SIG_DFL)
    return preexec


def start(argv, w, env=None, ignored=()):
    e = {k: v for k, v in os.environ.items() if k != kh.KILL_ENV}
    e.update(env or {})
    err = open(w / "stderr.txt", "w")
    p = subprocess.Popen([sys.executable, "-m", "streamrank", *argv], stdout=subprocess.DEVNULL, stderr=err, env=e,
                         preexec_fn=_dispositions(ignored))
    err.close()
    return p


def wait_for(p, ready):
    """Poll until ``ready()`` (True) or the process ends (False)."""
    end = time.monotonic() + DEADLINE
    while not ready():
        if p.poll() is not None:
            return False
        assert time.monotonic() < end, "the process neither got ready nor ended"
        time.sleep(0.005)
    return True


def finish(p):
    try:
        return p.wait(DEADLINE)
    except subprocess.TimeoutExpired:  # pragma: no cover - a hang is the failure
        p.kill()
        raise


# SIGHUP and SIGINT take SIGTERM's path (cli.signals maps all three to one interrupt): slow tier
@pytest.mark.parametrize("sig", [signal.SIGTERM, pytest.param(signal.SIGHUP, marks=pytest.mark.slow),
                                 pytest.param(signal.SIGINT, marks=pytest.mark.slow)], ids=lambda s: s.name)
def test_a_signal_keeps_the_checkpoint_and_says_so(data, reference, tmp_path, sig):
    from streamrank.state.checkpoint import read_checkpoint
    w = tmp_path
    p = start(train_argv(data, w), w)
    assert wait_for(p, lambda: (w / "ck" / "checkpoint.h5").exists()), "the run ended before its first checkpoint"
    p.send_signal(sig)
    rc = finish(p)
    err = (w / "stderr.txt").read_text()
    assert rc == 128 + sig, (rc, err[-2000:])
    assert "Traceback" not in err
    assert err.splitlines()[-1] == f"streamrank train: interrupted by {sig.name}; checkpoint kept at {w / 'ck'}"
    assert not (w / "m.h5").exists()  # no partial output
    assert not kh.leftovers(w)        # no temporary file
    ck = read_checkpoint(w / "ck")
    assert ck is not None and ck["w"].size > 0
    r = kh.run(train_argv(data, w, "--resume"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resuming from" in r.stderr
    assert kh.file_result(w / "m.h5") == reference
    assert not kh.leftovers(w)


@pytest.mark.slow  # grid's kill at a random moment (test_kills) and the signal property keep a grid in the fast tier
def test_sigterm_during_grid_names_the_configurations_checkpoint(data, tmp_path):
    run = tmp_path / "run"
    argv = ["grid", str(data / "t.h5"), "--valid", str(data / "v.h5"), "--C", GRID_C_PATH, "--tol", "1e-8", "-o",
            str(run)]
    ck = run / "runs" / "00-primal" / "checkpoint"
    p = start(argv, tmp_path)
    assert wait_for(p, lambda: (ck / "checkpoint.h5").exists()), "the grid ended before its first checkpoint"
    p.send_signal(signal.SIGTERM)
    rc = finish(p)
    err = (tmp_path / "stderr.txt").read_text()
    assert rc == 143 and "Traceback" not in err, (rc, err[-2000:])
    assert err.splitlines()[-1] == f"streamrank grid: interrupted by SIGTERM; checkpoint kept at {ck}"
    assert not (run / "model.h5").exists() and not kh.leftovers(run)
    r = kh.run(argv + ["--quiet"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert (run / "model.h5").exists() and not ck.exists()


@pytest.mark.slow  # a whole training; CI checks an ignored SIGHUP stays ignored at the program's start
# (tests/cli/test_cli_text_inputs.py), where the handlers are installed
def test_a_signal_ignored_at_start_stays_ignored(data, tmp_path):
    """nohup: SIGHUP ignored by the parent stays ignored, and the run finishes."""
    p = start(train_argv(data, tmp_path, "--quiet"), tmp_path, ignored=(signal.SIGHUP,))
    assert wait_for(p, lambda: (tmp_path / "ck" / "checkpoint.h5").exists())
    p.send_signal(signal.SIGHUP)
    assert finish(p) == 0, (tmp_path / "stderr.txt").read_text()[-2000:]
    assert (tmp_path / "m.h5").exists()


def test_the_handlers_are_restored_after_a_command(data, tmp_path):
    from streamrank.cli import main
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    assert main(["info", str(data / "t.h5")]) == 0
    assert main(["train", str(data / "t.h5"), "-o", str(tmp_path / "t.h5"), "--quiet"]) == 0
    assert main(["train", str(tmp_path / "t.h5"), "-o", str(tmp_path / "t.h5")]) == 2
    assert {s: signal.getsignal(s) for s in before} == before


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_the_end_of_a_command_stops_the_warmup_helper(data, tmp_path, sig):
    """On a cold kernel cache a command waits for the first-use helper (a second process compiling its
    kernels); a SIGTERM to the command stops the helper too, and a helper whose command was killed
    stops by itself."""
    psutil = pytest.importorskip("psutil")
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "STREAMRANK_NO_WARMUP": ""}
    p = start(["train", str(data / "t.h5"), "-o", str(tmp_path / "m.h5")], tmp_path, env=env)
    proc = psutil.Process(p.pid)

    def helpers():
        try:
            return [c for c in proc.children() if "streamrank._native.warmup" in " ".join(c.cmdline())]
        except psutil.Error:
            return []
    assert wait_for(p, lambda: bool(helpers())), "no warm-up helper was started on a cold cache"
    helper = helpers()[0]
    p.send_signal(sig)
    rc = finish(p)
    err = (tmp_path / "stderr.txt").read_text()
    if sig == signal.SIGTERM:
        assert rc == 143 and "Traceback" not in err, (rc, err[-2000:])
        assert err.splitlines()[-1] == "streamrank train: interrupted by SIGTERM"
    gone, alive = psutil.wait_procs([helper], timeout=DEADLINE)
    assert not alive, "the warm-up helper outlived the command"
    from streamrank._native import warmup
    old = os.environ.get("NUMBA_CACHE_DIR")
    os.environ["NUMBA_CACHE_DIR"] = env["NUMBA_CACHE_DIR"]
    try:
        stamp = Path(warmup.stamp_path("train-primal"))
    finally:
        os.environ.pop("NUMBA_CACHE_DIR") if old is None else os.environ.__setitem__("NUMBA_CACHE_DIR", old)
    assert stamp.parent == tmp_path / "numba" and not stamp.exists(), "the helper was not stopped: it compiled its list"
    assert not (tmp_path / "m.h5").exists()


def test_an_interrupted_conversion_names_its_last_commit(tmp_path, capsys, monkeypatch):
    """A signal after a conversion's first commit: the line names the progress record, which the
    same command continues from (in process: the signal stands as the Interrupted it raises)."""
    import numpy as np

    from streamrank.cli import main
    from streamrank.cli.signals import Interrupted
    from streamrank.io import convert_progress
    rng = np.random.default_rng(0)
    src = tmp_path / "in.txt"
    src.write_text("".join(f"{rng.integers(3)} qid:{i // 20} " + " ".join(f"{j + 1}:{v:.5f}" for j, v in
                                                                         enumerate(rng.random(20))) + "\n"
                           for i in range(6000)))
    save, saved = convert_progress.save, []

    def save_then_signal(*a, **k):  # the signal lands after the second commit
        save(*a, **k)
        saved.append(1)
        if len(saved) == 2:
            raise Interrupted(signal.SIGTERM)
    monkeypatch.setattr(convert_progress, "save", save_then_signal)
    argv = ["convert", str(src), "-o", str(tmp_path / "d.h5"), "--commit-every", "0", "--memory-budget", "1MB"]
    assert main(argv) == 143
    record = convert_progress.work_paths(tmp_path / "d.h5")[1]
    assert capsys.readouterr().err.splitlines()[-1] == (f"streamrank convert: interrupted by SIGTERM; checkpoint kept "
                                                        f"at {record} (the same command continues from it)")
    monkeypatch.setattr(convert_progress, "save", save)
    assert main(argv + ["--quiet"]) == 0
    assert (tmp_path / "d.h5").is_file() and not record.exists()


def test_sigterm_stops_the_dask_workers(data, tmp_path):
    psutil = pytest.importorskip("psutil")
    pytest.importorskip("distributed")
    p = start(train_argv(data, tmp_path, "--workers", "1"), tmp_path)
    assert wait_for(p, lambda: (tmp_path / "ck" / "checkpoint.h5").exists()), "the run ended before its checkpoint"
    workers = psutil.Process(p.pid).children(recursive=True)
    assert workers, "no worker process"
    p.send_signal(signal.SIGTERM)
    rc = finish(p)
    err = (tmp_path / "stderr.txt").read_text()
    assert rc == 143 and "Traceback" not in err, (rc, err[-2000:])
    assert err.splitlines()[-1] == f"streamrank train: interrupted by SIGTERM; checkpoint kept at {tmp_path / 'ck'}"
    gone, alive = psutil.wait_procs(workers, timeout=DEADLINE)
    assert not alive, f"worker processes outlived the command: {alive}"


def test_an_interruption_lost_in_c_code_is_delivered_again():
    """A handler's exception that C code swallows (as PyDict_GetItem does) is raised again by the
    watcher until cli.main acknowledges it; one on its way is not raised twice, so the cleanup it
    started runs to its end."""
    from streamrank.cli.signals import Handlers, Interrupted
    h = Handlers()
    h.install()
    got, cleaned = None, False
    try:
        try:
            try:
                signal.raise_signal(signal.SIGTERM)
                raise AssertionError("the handler did not raise")
            except KeyboardInterrupt:
                pass  # lost, as in C code that clears the error
            end = time.monotonic() + DEADLINE
            while time.monotonic() < end:  # bytecode for the handler to run at
                sum(range(100))
            raise AssertionError("the lost interruption never came back")
        except Interrupted as e:
            got = e
            try:
                raise RuntimeError("a cleanup with an exception on its way")
            except RuntimeError:
                signal.raise_signal(signal.SIGTERM)  # a repeat here is ignored
                cleaned = True
            h.acknowledge()
        assert got.signum == signal.SIGTERM and cleaned
        signal.raise_signal(signal.SIGTERM)  # acknowledged: ignored
    finally:
        h.restore()
