import logging
import os
import socket
import sys
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from locations import MQ2008  # noqa: E402  (../shared beside the repository; tests skip without it)

# the commands the tests run are short: a first-use compile helper started by each would be
# stopped before it finishes and compete for the cores (tests/native/test_warmup.py runs it)
os.environ.setdefault("STREAMRANK_NO_WARMUP", "1")


def pytest_configure(config):
    """Workers of one run (pytest -n) and the commands they start share numba's cache: each
    compiles a kernel the others are compiling at that moment by waiting for it and loading it
    (the command line takes the same locks), not a second time."""
    from streamrank._native import warmup
    warmup.install_compile_locks()


@pytest.fixture(autouse=True)
def _signal_handlers_unchanged(request):
    """No test leaves a signal handler changed: the library changes none, and the command line
    restores its own (a SIGINT handler left behind made a later test's KeyboardInterrupt vanish)."""
    import signal
    nums = [getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)]
    before = {n: signal.getsignal(n) for n in nums}
    yield
    changed = {signal.Signals(n).name: signal.getsignal(n) for n in nums if signal.getsignal(n) != before[n]}
    for n in nums:
        signal.signal(n, before[n]) if before[n] is not None else None
    assert not changed, f"{request.node.nodeid} left signal handlers changed: {changed}"


@pytest.fixture(autouse=True)
def _restore_logging():
    """The CLI points the "streamrank" logger at the sys.stderr of its call: restore it after each
    test, so that later log lines do not go to a closed capture."""
    logger = logging.getLogger("streamrank")
    saved = logger.handlers[:], logger.level, logger.propagate
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


@pytest.fixture
def mq2008():
    if not MQ2008.exists():
        pytest.skip("../shared/data/MQ2008 is not available")
    return MQ2008


# -- an S3-compatible server on 127.0.0.1 (moto's server mode), for data in a bucket ---------------
# ``s3_server`` starts one for the session; ``s3`` gives a test a fresh bucket, with the environment
# (endpoint, dummy credentials) that s3fs, and any child process started from the test, open it
# with. Without moto or s3fs the tests skip, saying which is missing; CI installs both (the test
# extra) and requires them (STREAMRANK_REQUIRE_S3=1).
def _missing():
    for mod in ("moto", "s3fs", "flask", "flask_cors"):
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


@pytest.fixture
def s3(s3_server, monkeypatch):
    """(s3fs file system, bucket name): a new empty bucket on the session's server."""
    from s3_env import s3_environment
    server, endpoint = s3_server
    fs = s3_environment(endpoint, monkeypatch)
    bucket = f"b{uuid.uuid4().hex[:12]}"
    fs.mkdir(bucket)
    yield fs, bucket
    import s3fs
    s3fs.S3FileSystem.clear_instance_cache()
