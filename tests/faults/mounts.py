"""Small tmpfs mounts for disk-full and read-only tests (root ignores chmod, so permissions are
tested on a read-only file system). Where mounting is not allowed the tests skip with the reason,
unless STREAMRANK_REQUIRE_MOUNTS=1 (set by .ci/run): then they fail, so CI never skips them silently."""

import contextlib
import os
import subprocess

import pytest


@contextlib.contextmanager
def tmpfs(path, size="64k", read_only=False):
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        reason = f"cannot mount a tmpfs at {path}: {r.stderr.strip() or r.returncode}"
        if os.environ.get("STREAMRANK_REQUIRE_MOUNTS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    try:
        if read_only:
            subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
