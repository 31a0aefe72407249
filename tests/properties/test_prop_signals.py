"""SIGTERM, SIGINT and SIGHUP at a moment Hypothesis draws (issue 30, build items 7 and 8).

A child process runs a command on data large enough to take a second or two; the signal is sent a
drawn delay after its first log line, or after its first checkpoint. The run must then end with
exit 128 + the signal and its one line ("interrupted ..."), no traceback, no output written, the
inputs byte-identical and nothing left beside the output but the checkpoint; a checkpoint left
behind must resume to a finished model. A run that finished before the signal came must be an
ordinary success. These are the costly examples: few of them.
"""

import signal

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import prop_checker as pc
import prop_kit as kit

SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGHUP]


@pytest.fixture(scope="module")
def bigger(tmp_path_factory):
    """60 queries of generated data (a couple of seconds of training) and its text."""
    from streamrank.synthetic import write_hdf5, write_text
    d = tmp_path_factory.mktemp("signals")
    write_hdf5(d / "train.h5", "small", seed=0, part="train", scale=1.0)
    write_text(d / "train.txt", "small", seed=0, part="train", scale=3.0)
    return d


@kit.few(2)
@given(sig=st.sampled_from(SIGNALS), delay=st.floats(0.0, 1.5),
       command=st.sampled_from(["train", "train", "grid", "convert", "select-features"]),
       after=st.sampled_from(["log", "checkpoint"]))
def test_a_signal_at_any_moment(prop_env, bigger, sig, delay, command, after):
    import shutil
    with prop_env.workspace() as (i, o, c):
        data = i / "train.h5"
        shutil.copy(bigger / "train.h5", data)
        ck = o / "ck"
        if command == "train":
            argv = ["train", data, "-o", o / "m.h5", "--valid", data, "--C", "2^-6:2^6", "--tol", "1e-10",
                    "--checkpoint", ck]
            outputs = [o / "m.h5", ck]
        elif command == "grid":
            argv = ["grid", data, "--valid", data, "-o", o / "run", "--C", "2^-6:2^6", "--tol", "1e-10"]
            outputs, after = [o / "run"], "log"
        elif command == "convert":
            text = i / "train.txt"
            shutil.copy(bigger / "train.txt", text)
            argv, outputs, after = ["convert", text, "-o", o / "d.h5"], [o / "d.h5"], "log"
            data = text
        else:
            argv = ["select-features", data, "-o", o / "gas.h5", "--checkpoint", ck, "--commit-every", "0.05"]
            outputs = [o / "gas.h5", ck]
        note(f"argv: {argv}; signal {sig!r} {delay:.3f} s after the first {after}")
        # the conversion keeps its progress record beside the output for a rerun to continue from
        keep = (".d.h5.convert.json", ".d.h5.convert.h5", ".d.h5.convert.lock")
        case = pc.Case(command, [f"{signal.Signals(sig).name} after the first {after}"], argv, inputs=[data],
                       outputs=outputs, data=None, extra_ok=keep if command == "convert" else ())
        res = pc.run_child(argv, sig=sig, after=after, delay=delay, checkpoint=ck)
        note(f"exit {res.rc}, signal sent: {res.sent}; stderr tail: {res.err[-300:]!r}")
        pc.check(case, res, sig=sig)
        if res.rc == 128 + sig and command == "train" and (ck / "checkpoint.h5").exists():
            resumed = pc.Case("train", ["resume after a signal"], argv + ["--resume", "--quiet"], inputs=[data],
                              outputs=outputs)
            pc.check(resumed, pc.run_cli(argv + ["--resume", "--quiet"]))
