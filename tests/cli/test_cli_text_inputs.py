"""The program's first moments and its hints about files that are not datasets: a SIGTERM before the
command's own handlers are installed still ends with the one line and exit 143 (the signal is sent
from inside the child at a known point, not after a delay); ``info`` (and every reader of a
dataset) on text named ``.h5`` or on a GAS file suggests a command that works."""

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from streamrank.cli import main

KILL_AFTER_IMPORT = ("import os, signal, sys, time\n{before}import streamrank\n"
                     "os.kill(os.getpid(), signal.{sig})\ntime.sleep({wait})\nprint('still running')\n")


def child(tmp_path, argv0, args, sig="SIGTERM", before="", wait=30):
    script = tmp_path / argv0
    script.write_text(KILL_AFTER_IMPORT.format(sig=sig, before=before, wait=wait))
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_a_signal_before_the_commands_handlers_ends_the_program_with_its_line(tmp_path):
    r = child(tmp_path, "streamrank", ["convert", "in.txt", "-o", "out.h5"])  # the console script
    assert r.returncode == 128 + signal.SIGTERM and r.stderr == "streamrank convert: interrupted by SIGTERM\n"
    # python -m streamrank: argv[0] is "-m" while the package is imported
    before = "sys.argv[0] = '-m'; sys.orig_argv = [sys.executable, '-m', 'streamrank', 'info', 'x.h5']\n"
    r = child(tmp_path, "m.py", ["info", "x.h5"], sig="SIGHUP", before=before)
    assert r.returncode == 128 + signal.SIGHUP and r.stderr == "streamrank info: interrupted by SIGHUP\n"


def test_imported_as_a_library_streamrank_leaves_the_signals_alone(tmp_path):
    r = child(tmp_path, "user_script.py", [])
    assert r.returncode == -signal.SIGTERM and r.stderr == ""
    # a signal the program was started with ignored (nohup) stays ignored
    r = child(tmp_path, "streamrank", ["convert"], sig="SIGHUP", before="signal.signal(signal.SIGHUP, signal.SIG_IGN)\n",
              wait=0)
    assert r.returncode == 0 and r.stdout == "still running\n"


def test_info_on_text_named_h5_or_on_a_gas_file_suggests_what_works(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = tmp_path / "t.h5"
    text.write_text("1 qid:1 1:0.5\n0 qid:1 1:0.25\n")
    assert main(["info", "t.h5"]) == 2
    err = capsys.readouterr().err.strip()
    suggested = err.split("convert it with: ")[1]
    assert suggested == "streamrank convert t.h5 -o t.converted.h5"
    assert main(suggested.split()[1:] + ["--quiet"]) == 0  # the suggestion works
    assert main(["info", "t.converted.h5"]) == 0
    capsys.readouterr()
    gas = pytest.importorskip("streamrank.selection.gas")
    import h5py
    with h5py.File(tmp_path / "g.h5", "w") as f:
        f.attrs["format"], f.attrs["version"] = gas.FORMAT_NAME, gas.FORMAT_VERSION
        f["importance"] = np.zeros(3)
    assert main(["info", "g.h5"]) == 2
    err = capsys.readouterr().err
    assert "g.h5: this is a GAS feature ranking" in err and "--features g.h5:K" in err and "convert" not in err
    # an HDF5 file of another program: a conversion into a new file, never over it
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = np.zeros(2)
    assert main(["info", "other.h5"]) == 2
    err = capsys.readouterr().err
    assert "streamrank convert TEXT -o other.converted.h5" in err and err.count("\n") == 1
