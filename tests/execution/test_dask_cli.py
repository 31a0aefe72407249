"""The CLI on a cluster: --workers starts one and reports it; a scheduler lost mid-training ends the
run with a clear error, the checkpoint intact, and --resume in this process finishes the same model."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from streamrank.synthetic import write_hdf5
from streamrank.state.model import load

pytestmark = pytest.mark.filterwarnings("ignore:.*larger than the block budget")


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "streamrank", *map(str, args)], capture_output=True, text=True,
                          **kw)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("dask_cli")
    write_hdf5(d / "train.h5", "small", seed=5, part="train", scale=3.0)
    write_hdf5(d / "valid.h5", "small", seed=5, part="valid", scale=1.0)
    return d


@pytest.mark.slow  # CI runs the same (--workers 2: the local bits and the cluster report) from a bucket:
# tests/remote/test_s3_cluster.py
def test_workers_flag_trains_the_local_model_and_reports_the_cluster(data, tmp_path):
    common = [data / "train.h5", "--valid", data / "valid.h5", "--C", "0.1,1", "--partition-rows", 1000, "--json"]
    r = cli("train", *common, "-o", tmp_path / "d.h5", "--workers", 2)
    assert r.returncode == 0, r.stderr
    cluster = json.loads(r.stdout.splitlines()[-1])["cluster"]
    assert cluster["workers"] == 2 and cluster["passes"] > 0 and 0 < cluster["bytes_per_pass"] < 1e6
    assert "dask: 2 workers" in r.stderr
    r = cli("train", *common, "-o", tmp_path / "l.h5")
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(load(tmp_path / "d.h5").w, load(tmp_path / "l.h5").w)


@pytest.mark.slow  # waits out the client's timeouts after the scheduler is killed
def test_a_lost_scheduler_ends_clearly_and_the_checkpoint_resumes_locally(data, tmp_path):
    sched_file = tmp_path / "scheduler.json"
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                              "--port", "0", "--no-dashboard", "--scheduler-file", sched_file],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = None
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        address = json.loads(sched_file.read_text())["address"]
        workers = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", sched_file,
                                    "--nthreads", "1", "--nworkers", "2", "--no-dashboard"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        ck = tmp_path / "ck"
        common = [data / "train.h5", "--valid", data / "valid.h5", "--C", "0.01,0.1,1", "--tol", "1e-8",
                  "--partition-rows", 1000, "--checkpoint", ck]
        run = subprocess.Popen([sys.executable, "-m", "streamrank", "train", *map(str, common), "-o",
                                tmp_path / "m.h5", "--scheduler", address], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        while not (ck / "checkpoint.h5").exists() and run.poll() is None and time.monotonic() < deadline + 60:
            time.sleep(0.02)
        sched.kill()  # mid-training: the first checkpoint is written, the path has far to go
        out, err = run.communicate(timeout=120)
        assert run.returncode == 2, err
        last = err.strip().splitlines()[-1]
        assert "the dask scheduler at" in last and "is gone" in last and "pass --resume" in last
        assert "Traceback" not in err and not (tmp_path / "m.h5").exists()
    finally:
        sched.kill()
        if workers is not None:
            os.killpg(workers.pid, signal.SIGKILL)
            workers.wait()
    r = cli("train", *common, "-o", tmp_path / "m.h5", "--resume", "--quiet")
    assert r.returncode == 0, r.stderr
    r = cli("train", *common[:-2], "-o", tmp_path / "ref.h5", "--quiet")
    assert r.returncode == 0, r.stderr
    np.testing.assert_array_equal(load(tmp_path / "m.h5").w, load(tmp_path / "ref.h5").w)


def test_a_malformed_scheduler_address_is_a_clear_error(data, tmp_path):
    r = cli("train", data / "train.h5", "-o", tmp_path / "m.h5", "--scheduler", "notanaddress")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "cannot reach the dask scheduler at notanaddress" in r.stderr and "tcp://HOST:PORT" in r.stderr
    r = cli("train", data / "train.h5", "-o", tmp_path / "m.h5", "--workers", 0)
    assert r.returncode == 2 and "Pass --workers 2" in r.stderr


def test_a_dataset_travels_by_its_absolute_path(data, tmp_path, monkeypatch):
    """Workers started elsewhere (another working directory) open the file the driver named
    relatively."""
    import pickle
    import streamrank
    monkeypatch.chdir(data)
    with streamrank.open_dataset("train.h5") as ds:
        msg = pickle.dumps(ds)
    monkeypatch.chdir(tmp_path)
    again = pickle.loads(msg)
    assert again.path == (data / "train.h5").resolve() and again.n_rows > 0


@pytest.mark.slow  # a local cluster whose two workers are killed mid-training
def test_losing_every_worker_ends_with_one_line_that_names_the_checkpoint(data, tmp_path):
    """Both worker processes SIGKILLed at once (their nanny restarts them: that changes nothing):
    exit 2, one line saying so and naming the checkpoint that is on disk, no model written."""
    psutil = pytest.importorskip("psutil")
    ck = tmp_path / "ck"
    run = subprocess.Popen([sys.executable, "-m", "streamrank", "train", str(data / "train.h5"), "--valid",
                            str(data / "valid.h5"), "--C", "0.01,0.1,1", "--tol", "1e-8", "--partition-rows", "1000",
                            "--checkpoint", str(ck), "-o", str(tmp_path / "m.h5"), "--workers", "2", "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (ck / "checkpoint.h5").exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        workers = [c for c in psutil.Process(run.pid).children() if "multiprocessing.spawn" in " ".join(c.cmdline())]
        assert len(workers) == 2 and run.poll() is None
        for w in workers:
            w.send_signal(signal.SIGKILL)
        out, err = run.communicate(timeout=120)  # a hang guard: the run ends by itself
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 2, err
    assert len(err.splitlines()) == 1, err
    assert "was lost at once" in err and f"the checkpoint in {ck} is kept: pass --resume" in err
    assert not (tmp_path / "m.h5").exists()
