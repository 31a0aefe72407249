"""An S3-compatible server on 127.0.0.1 (moto's server mode) for the tests of data in a bucket.

``s3`` starts one server for the session and gives each test a fresh bucket, with the
environment (endpoint, dummy credentials) that s3fs, and any child process or dask worker
started from the test, open it with. Without moto or s3fs the tests skip, saying which is
missing; CI installs both (the test extra) and requires them (STREAMRANK_REQUIRE_S3=1).
"""

import os
import socket
import uuid

import pytest


def _missing():
    for mod in ("moto", "s3fs", "flask"):
        try:
            __import__(mod)
        except ImportError:
            return mod
    return None


@pytest.fixture(scope="session")
def s3_server():
    missing = _missing()
    if missing:
        if os.environ.get("STREAMRANK_REQUIRE_S3") == "1":
            pytest.fail(f"{missing} is not installed, and STREAMRANK_REQUIRE_S3=1 requires the S3 tests")
        pytest.skip(f"{missing} is not installed (the test extra: pip install -e '.[test]')")
    from moto.server import ThreadedMotoServer
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield server, f"http://127.0.0.1:{port}"
    server.stop()


ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture
def s3(s3_server, monkeypatch):
    """(s3fs file system, bucket name): a new empty bucket on the session's server."""
    server, endpoint = s3_server
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    import s3fs
    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint})
    bucket = f"b{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    yield fs, bucket
    s3fs.S3FileSystem.clear_instance_cache()
