"""A cluster with no shared file system: the workers read the dataset's byte ranges from the
bucket themselves, with the storage options the command was given (their own environment names
no endpoint and holds no credential), and train the local model's bits."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from streamrank.cli import main
from streamrank.state.model import load
from streamrank.synthetic import write_hdf5


def _start(tmp_path):
    """A scheduler and two workers, each worker in its own empty directory, their environment
    without the test's AWS settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    sched_file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--no-dashboard", "--scheduler-file", str(sched_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path)]
    deadline = time.monotonic() + 60
    while not sched_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    address = json.loads(sched_file.read_text())["address"]
    for k in range(2):
        d = tmp_path / f"worker{k}"
        d.mkdir()
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                                       "--no-dashboard", "--local-directory", str(d)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=d))
    return address, procs


def _data(tmp_path, fs, b):
    """train/valid in the bucket only, and the local model of the same settings."""
    data = tmp_path / "data"
    data.mkdir()
    write_hdf5(data / "train.h5", "small", seed=5, part="train", scale=2.0)
    write_hdf5(data / "valid.h5", "small", seed=5, part="valid", scale=0.5)
    assert main(["train", str(data / "train.h5"), "--valid", str(data / "valid.h5"), "-o", str(tmp_path / "l.h5"),
                 *COMMON]) == 0
    for n in ("train.h5", "valid.h5"):
        fs.put_file(str(data / n), f"{b}/{n}")
        (data / n).unlink()  # the data is in the bucket only


COMMON = ["--C", "0.1,1", "--partition-rows", "600", "--quiet"]


def _options(secret):
    opts = [f"client_kwargs.endpoint_url={os.environ['AWS_ENDPOINT_URL']}", "key=testing-key-id",
            f"secret={secret}", "client_kwargs.region_name=us-east-1"]
    return [x for o in opts for x in ("--storage-option", o)]


def test_a_local_cluster_without_the_stores_settings_trains_the_local_bits_from_a_bucket(tmp_path, s3):
    """--workers 2 started by a command whose environment names no endpoint and holds no key: the
    workers (each in its own directory) get the storage options with the dataset, and train the
    local model's bits; the key appears in no output."""
    fs, b = s3
    _data(tmp_path, fs, b)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    r = subprocess.run([sys.executable, "-m", "streamrank", "train", f"s3://{b}/train.h5", "--valid",
                        f"s3://{b}/valid.h5", "-o", str(tmp_path / "d.h5"), "--workers", "2", "--json", *COMMON,
                        *_options("testing-secret-value")], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.splitlines()[-1])["cluster"]["workers"] == 2
    np.testing.assert_array_equal(load(tmp_path / "d.h5").w, load(tmp_path / "l.h5").w)
    assert "testing-secret-value" not in r.stderr + r.stdout
    assert "testing-secret-value" not in (tmp_path / "d.h5").read_bytes().decode("latin-1")


@pytest.mark.slow  # a scheduler and two worker processes of their own: about 30 s from a cold numba cache
def test_two_workers_without_a_shared_disk_train_the_local_bits_from_a_bucket(tmp_path, s3):
    fs, b = s3
    data = tmp_path / "data"
    data.mkdir()
    write_hdf5(data / "train.h5", "small", seed=5, part="train", scale=2.0)
    write_hdf5(data / "valid.h5", "small", seed=5, part="valid", scale=0.5)
    common = ["--C", "0.1,1", "--partition-rows", "600", "--json", "--quiet"]
    local = subprocess.run([sys.executable, "-m", "streamrank", "train", str(data / "train.h5"), "--valid",
                            str(data / "valid.h5"), "-o", str(tmp_path / "l.h5"), *common], capture_output=True,
                           text=True)
    assert local.returncode == 0, local.stderr
    for n in ("train.h5", "valid.h5"):
        fs.put_file(str(data / n), f"{b}/{n}")
        (data / n).unlink()  # the data is in the bucket only
    address, procs = _start(tmp_path)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        opts = [f"client_kwargs.endpoint_url={os.environ['AWS_ENDPOINT_URL']}", "key=testing-key-id",
                "secret=testing-secret-value", "client_kwargs.region_name=us-east-1"]
        r = subprocess.run([sys.executable, "-m", "streamrank", "train", f"s3://{b}/train.h5", "--valid",
                            f"s3://{b}/valid.h5", "-o", str(tmp_path / "d.h5"), "--scheduler", address, *common,
                            *[x for o in opts for x in ("--storage-option", o)]],
                           capture_output=True, text=True, env=env, timeout=300)
        # the command's own environment reaches the store; the workers', without the options, does not
        bad = subprocess.run([sys.executable, "-m", "streamrank", "train", f"s3://{b}/train.h5", "-o",
                              str(tmp_path / "x.h5"), "--scheduler", address, "--quiet"],
                             capture_output=True, text=True, timeout=300)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.splitlines()[-1])
    assert summary["cluster"]["workers"] == 2 and summary["cluster"]["passes"] > 0
    np.testing.assert_array_equal(load(tmp_path / "d.h5").w, load(tmp_path / "l.h5").w)
    assert "testing-secret-value" not in r.stderr + r.stdout
    assert "testing-secret-value" not in (tmp_path / "d.h5").read_bytes().decode("latin-1")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert f"s3://{b}/train.h5: the dask worker tcp://" in bad.stderr and "cannot read it" in bad.stderr
    assert not (tmp_path / "x.h5").exists()
