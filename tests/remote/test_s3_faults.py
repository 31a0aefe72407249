"""The store going away: a read after the server stopped, or a server that never answers, ends in
one line naming the URL, within the requests' deadlines (io.urls.S3_DEFAULTS), and leaves the
objects as they were."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from streamrank.cli import main
from streamrank.errors import StoreError
from streamrank.io.dataset import open_dataset
from streamrank.synthetic import write_hdf5


@pytest.fixture
def own_server(s3_server, monkeypatch):
    """A second moto server of this test's own (it is stopped mid-test), with its bucket."""
    from moto.server import ThreadedMotoServer
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    from s3_env import s3_environment
    fs = s3_environment(f"http://127.0.0.1:{port}", monkeypatch)
    if fs.exists("bkt"):  # moto's state is the process's: an earlier test's server made it
        fs.rm("bkt", recursive=True)
    fs.mkdir("bkt")
    yield server, fs
    try:
        server.stop()
    except Exception:  # noqa: BLE001 - stopped by the test already
        pass
    fs.clear_instance_cache()


def test_a_read_after_the_server_stopped_is_one_line_naming_the_url(tmp_path, own_server, capsys):
    server, fs = own_server
    write_hdf5(tmp_path / "t.h5", "small", seed=1, part="train", scale=0.5)
    fs.put_file(str(tmp_path / "t.h5"), "bkt/t.h5")
    ds = open_dataset("s3://bkt/t.h5")
    server.stop()
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=r"s3://bkt/t\.h5: the store did not give bytes"):
        ds.read(0, ds.n_rows)
    assert time.monotonic() - t0 < 60
    t0 = time.monotonic()
    once = ["--storage-option", "config_kwargs.retries.max_attempts=1"]  # a refused connection: no backoff to wait
    code = main(["predict", str(tmp_path / "nothing.h5"), "s3://bkt/t.h5", "-o", str(tmp_path / "s.txt"), *once])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    code = main(["train", "s3://bkt/t.h5", "-o", "s3://bkt/m.h5", "--quiet", *once])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "s3://bkt/m.h5: the store cannot be reached" in err, err
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "s.txt").exists()


@pytest.mark.slow  # waits out the read deadlines: about 40 s
def test_a_server_that_never_answers_ends_within_a_minute(tmp_path, monkeypatch):
    """A listener that accepts and never answers (s3fs's defaults had not failed after 590 s)."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(64)
    held = []
    stop = threading.Event()

    def accept():
        lst.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(lst.accept()[0])
            except OSError:
                continue
    threading.Thread(target=accept, daemon=True).start()
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{lst.getsockname()[1]}", "AWS_ACCESS_KEY_ID": "t",
           "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "streamrank", "train", "s3://bkt/t.h5", "-o", str(tmp_path / "m.h5"),
                        "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    took = time.monotonic() - t0
    stop.set()
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "s3://bkt/t.h5" in r.stderr, r.stderr
    assert took < 60, took


@pytest.mark.slow  # 150,000 rows streamed from the bucket at every pass: about a minute
def test_the_server_stopped_mid_pass_ends_in_one_line_and_the_resume_gives_the_bits(tmp_path, own_server):
    """Rows the budget cannot keep are read from the store at every pass; the server is stopped
    once the first checkpoint is stored (mid-training): exit 2 with one line within 60 s, the
    checkpoint kept; the server started again (same port, same objects), --resume ends with the
    uninterrupted run's model."""
    import h5py
    import numpy as np
    server, fs = own_server
    data = tmp_path / "t.h5"
    write_hdf5(data, "mslr30k", scale=150_000 / 2_270_296, seed=2)
    fs.put_file(str(data), "bkt/t.h5")
    common = ["--C", "1", "--memory-budget", "220MB", "--quiet"]
    ref = subprocess.run([sys.executable, "-m", "streamrank", "train", str(data), "-o", str(tmp_path / "ref.h5"),
                          *common], capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr
    ck = tmp_path / "ck"
    argv = [sys.executable, "-m", "streamrank", "train", "s3://bkt/t.h5", "-o", str(tmp_path / "m.h5"),
            "--checkpoint", str(ck), *common]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (ck / "checkpoint.h5").exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.poll() is None, "the run ended before its first checkpoint"
    server.stop()
    t0 = time.monotonic()
    out, err = p.communicate(timeout=120)
    assert time.monotonic() - t0 < 60
    assert p.returncode == 2 and err.count("\n") == 1 and "s3://bkt/t.h5" in err, err
    assert "--resume" in err and not (tmp_path / "m.h5").exists()
    server.start()
    r = subprocess.run(argv + ["--resume"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with h5py.File(tmp_path / "m.h5") as a, h5py.File(tmp_path / "ref.h5") as b:
        assert np.array_equal(a["w"][:], b["w"][:])
    assert sorted(fs.ls("bkt", refresh=True)) == ["bkt/t.h5"]  # no temporary or partial object


def test_an_upload_interrupted_in_its_parts_leaves_no_part_and_the_old_object(tmp_path, s3, monkeypatch):
    """A signal (here SIGINT's KeyboardInterrupt) while a multipart upload runs: the upload stops,
    the parts it sent are aborted, the object there is the old one, and the interruption goes on."""
    import signal

    import s3fs.core

    from streamrank.io.atomic import publish
    fs, bucket = s3
    monkeypatch.setattr(s3fs.core, "calculate_chunksize", lambda size, chunksize=None: 5 << 20)  # parts of 5 MiB
    old = b"the old model"
    fs.pipe(f"{bucket}/m.h5", old)
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(16 << 20))  # four parts
    started = threading.Event()
    real = s3fs.core.S3FileSystem._call_s3

    async def slow(self, method, *a, **kw):
        if method == "upload_part":
            started.set()
            import asyncio
            t = time.monotonic()  # no part ends before the signal is sent (however loaded the machine)
            while not sent.is_set() and time.monotonic() - t < 30:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
        return await real(self, method, *a, **kw)
    monkeypatch.setattr(s3fs.core.S3FileSystem, "_call_s3", slow)
    main_thread = threading.main_thread().ident
    # Python's own SIGINT handler for this test: a runner started in the background by a shell has
    # SIGINT ignored, and the interruption would never come
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    sent = threading.Event()

    def interrupt():
        if started.wait(30):
            time.sleep(0.2)
            signal.pthread_kill(main_thread, signal.SIGINT)
            sent.set()
    threading.Thread(target=interrupt, daemon=True).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            publish(local, f"s3://{bucket}/m.h5")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - t0 < 30
    monkeypatch.setattr(s3fs.core.S3FileSystem, "_call_s3", real)
    time.sleep(1.5)  # a part request in flight when the upload was cancelled has ended by now
    uploads = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix="m.h5").get("Uploads", [])
    assert uploads == [], uploads
    assert fs.cat_file(f"{bucket}/m.h5") == old
    # and uninterrupted, the same upload publishes the new object whole
    publish(local, f"s3://{bucket}/m.h5")
    assert fs.cat_file(f"{bucket}/m.h5") == local.read_bytes()
