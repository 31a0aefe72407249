"""Checkpoints: kill-and-resume gives the uninterrupted model bit for bit; refusals; damage.

The kill tests run ``python -m streamrank.cli train`` in subprocesses with the test hook
``STREAMRANK_TEST_ABORT`` (see streamrank/checkpoint.py): ``after-iteration:N`` exits with code 77
right after the process's checkpoint N is in place, ``mid-checkpoint:N`` exits half-way through
writing it (a temporary file, no rename). A kill after checkpoint N is, for the work done, a kill
in the middle of the next iteration: the resumed run does that iteration again.

To stay fast, each chain below is ONE sequence of processes in one checkpoint directory: every
process resumes from what the previous kill left and is itself killed at the next chosen point,
until a last process runs to the end. Checkpoints are numbered globally along the uninterrupted
run (one per TRON step, over the whole C path); a process resumed from checkpoint s writes s + 1,
s + 2, ... The two chains run in parallel.
"""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pytest

import streamrank
from streamrank.state import checkpoint as ckm
from streamrank.state.checkpoint import (ABORT_ENV, ABORT_EXIT_CODE, CURRENT, DAMAGED, PREVIOUS, CheckpointMismatch,
                                   read_checkpoint, write_checkpoint)
from streamrank.cli import main
from streamrank.io.convert import convert
from streamrank.synthetic import write_text
from streamrank.errors import FormatError
from streamrank.training.linear import train_linear

# TRON without the preconditioner: many steps to kill (the preconditioned run: its own test below)
SETTINGS = ["--C", "0.01,0.1", "--tol", "1e-6", "--solver", "tron", "--precondition", "off"]
C_PATH = [0.01, 0.1]
TEMP = re.compile(r"\.checkpoint\.h5\.\d+\.tmp")



# -- data and the uninterrupted reference ----------------------------------------------------------
@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckdata")
    out = {}
    for name, seed, scale in (("train", 0, 0.4), ("valid", 1, 0.2), ("other", 2, 0.4)):
        write_text(d / f"{name}.txt", preset="small", seed=seed, scale=scale)
        convert([d / f"{name}.txt"], d / f"{name}.h5", quiet=True)
        out[name] = d / f"{name}.h5"
    out["cache"] = d / "cache"
    return out


def train_args(data, out, ck=None, *extra):
    args = ["train", str(data["train"]), "-o", str(out), "--valid", str(data["valid"]), *SETTINGS,
            "--cache-dir", str(data["cache"]), "--json"]
    return args + (["--checkpoint", str(ck)] if ck is not None else []) + list(extra)


def run(args, abort=None):
    env = {k: v for k, v in os.environ.items() if k != ABORT_ENV}
    if abort:
        env[ABORT_ENV] = abort
    return subprocess.run([sys.executable, "-m", "streamrank", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def run_in_process(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def last_json(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def read_w(path):
    with h5py.File(path, "r") as f:
        return f["w"][:]


def step_of(path):
    """(C index, TRON steps in that C) of a checkpoint file."""
    sc = ckm._read(path)["scalars"]
    return sc["C_index"], len(sc["history"])


@dataclass
class Reference:
    w: np.ndarray
    summary: dict
    ck: Path                                    # checkpoint directory of the uninterrupted run
    steps: list = field(default_factory=list)   # checkpoint number - 1 -> (C index, steps in that C)

    @property
    def n(self):
        return len(self.steps)

    @property
    def n_first(self):
        return sum(1 for c, _ in self.steps if c == 0)


@pytest.fixture(scope="module")
def ref(data, tmp_path_factory):
    """The uninterrupted run (in this process: the same code and BLAS as the subprocesses)."""
    d = tmp_path_factory.mktemp("reference")
    code, out, err = run_in_process(train_args(data, d / "ck.h5", d / "ck"))
    assert code == 0, err
    # writing checkpoints does not change the result
    code2, out2, err2 = run_in_process(train_args(data, d / "plain.h5", None, "--quiet"))
    assert code2 == 0, err2
    w = read_w(d / "ck.h5")
    assert np.array_equal(w, read_w(d / "plain.h5"))
    assert last_json(out)["objective"] == last_json(out2)["objective"]
    # one checkpoint per TRON step (accepted or not), one "iter" log line each
    steps, c, k = [], -1, 0
    for line in err.splitlines():
        if re.match(r"C=\S+: (tron|newton_cholesky) eps", line):
            c, k = c + 1, 0
        elif re.match(r"iter +\d+ ", line):
            k += 1
            steps.append((c, k))
    r = Reference(w=w, summary=last_json(out), ck=d / "ck", steps=steps)
    assert [c["message"] for c in r.summary["candidates"]] == ["converged", "converged"]
    assert r.n_first >= 4 and r.n - r.n_first >= 4, steps
    # the previous checkpoint is kept beside the current one; no temporary file is left
    assert sorted(os.listdir(r.ck)) == [CURRENT, PREVIOUS]
    assert step_of(r.ck / CURRENT) == steps[-1] and step_of(r.ck / PREVIOUS) == steps[-2]
    return r


def assert_same_model(ref, model_path, summary):
    assert np.array_equal(read_w(model_path), ref.w)
    for key in ("objective", "grad_norm", "C", "iterations"):
        assert summary[key] == ref.summary[key], key
    keys = ("C", "objective", "grad_norm", "iterations", "cg_steps", "message", "valid_meanndcg")
    assert [{k: c[k] for k in keys} for c in summary["candidates"]] == \
           [{k: c[k] for k in keys} for c in ref.summary["candidates"]]


# -- kill and resume ------------------------------------------------------------------------------
def chain_specs(ref):
    """Per chain, the hook of each process (None: the last one, left to finish). Global checkpoint
    numbers in the comments; n1 = checkpoints of the first C, n = all."""
    n, n1 = ref.n, ref.n_first
    return {
        "A": ["after-iteration:1",           # fresh; killed after #1
              "mid-checkpoint:1",            # resumes #1 (not the last iteration); dies writing #2
              f"after-iteration:{n1 + 1}",   # resumes #1 again, finishes the first C; killed after #n1+2
              None],                         # resumes #n1+2 inside the second C; runs to the end
        "B": [f"mid-checkpoint:{n1 + 1}",    # fresh; dies writing #n1+1 (the first of the second C)
              f"mid-checkpoint:{n - n1}",    # resumes #n1 (first C converged): dies writing #n (the last)
              "after-iteration:1",           # resumes #n-1; killed after the final checkpoint #n
              None],                         # resumes #n: nothing left to iterate, writes the model
    }


@dataclass
class Step:
    abort: str
    code: int
    stdout: str
    stderr: str
    files: list      # the checkpoint directory after the process ended
    current: tuple   # (C index, steps) of checkpoint.h5, or None
    previous: tuple


def run_chain(data, workdir, specs):
    ck, out = workdir / "ck", workdir / "model.h5"
    steps = []
    for i, abort in enumerate(specs):
        p = run(train_args(data, out, ck, *(["--resume"] if i else [])), abort)
        steps.append(Step(abort, p.returncode, p.stdout, p.stderr, sorted(os.listdir(ck)) if ck.exists() else [],
                          step_of(ck / CURRENT) if (ck / CURRENT).exists() else None,
                          step_of(ck / PREVIOUS) if (ck / PREVIOUS).exists() else None))
        if p.returncode != ABORT_EXIT_CODE:
            break
    return steps, out


@pytest.fixture(scope="module")
def chains(data, ref, tmp_path_factory):
    specs = chain_specs(ref)
    with ThreadPoolExecutor(len(specs)) as pool:
        futures = {name: pool.submit(run_chain, data, tmp_path_factory.mktemp(f"chain{name}"), s)
                   for name, s in specs.items()}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.parametrize("name", ["A", "B"])
def test_killed_and_resumed_runs_give_the_uninterrupted_model(ref, chains, name):
    steps, model = chains[name]
    specs = chain_specs(ref)[name]
    assert [s.code for s in steps] == [ABORT_EXIT_CODE] * (len(specs) - 1) + [0], steps[-1].stderr
    last = 0  # global number of the last complete checkpoint
    for i, (s, spec) in enumerate(zip(steps, specs)):
        # where the process started
        if i:
            if last == 0:
                assert "no checkpoint in" in s.stderr and "resuming from" not in s.stderr
            else:
                m = re.search(r"resuming from (\S+): C=(\S+), iteration (\d+)", s.stderr)
                assert m, s.stderr
                assert Path(m.group(1)).name == CURRENT
                assert float(m.group(2)) == C_PATH[ref.steps[last - 1][0]]
        if spec is None:
            break
        # what the kill left behind
        where, k = spec.split(":")
        temps = [f for f in s.files if TEMP.fullmatch(f)]
        if where == "after-iteration":
            last += int(k)
            assert temps == [], s.files
        else:
            last += int(k) - 1
            assert len(temps) == 1, s.files  # the half-written checkpoint, never renamed
        assert s.current == (ref.steps[last - 1] if last >= 1 else None), (i, spec)
        assert s.previous == (ref.steps[last - 2] if last >= 2 else None), (i, spec)
        assert set(s.files) - set(temps) <= {CURRENT, PREVIOUS}
    # the end: the model of the uninterrupted run, bit for bit
    assert_same_model(ref, model, last_json(steps[-1].stdout))
    assert steps[-1].files == [CURRENT, PREVIOUS]  # temporary files of interrupted writes removed
    assert steps[-1].current == ref.steps[-1] and steps[-1].previous == ref.steps[-2]
    if name == "B":  # resumed from the final checkpoint: no iteration left to do
        assert "resuming from" in steps[-1].stderr and not re.search(r"^iter ", steps[-1].stderr, re.M)


def test_the_kills_cover_the_chosen_points(ref, chains):
    """Killed after iteration 1, mid-write of #2, after an iteration inside the second C, mid-write
    of the first checkpoint of the second C, mid-write of the last one and after the last one; and
    resumed from checkpoints that are not the last iteration (#1, #n1, #n1+2, #n-1)."""
    killed = set()
    resumed_from = []
    for name, (steps, _) in chains.items():
        last = 0
        for s in steps:
            if s.abort is None:
                break
            where, k = s.abort.split(":")
            killed.add((where, last + int(k)))
            resumed_from.append(last + int(k) - (where == "mid-checkpoint"))
            last = resumed_from[-1]
    n, n1 = ref.n, ref.n_first
    assert killed == {("after-iteration", 1), ("mid-checkpoint", 2), ("after-iteration", n1 + 2),
                      ("mid-checkpoint", n1 + 1), ("mid-checkpoint", n), ("after-iteration", n)}
    assert ref.steps[n1 + 1][0] == 1  # #n1+2 is inside the second C
    assert resumed_from == [1, 1, n1 + 2, n1, n - 1, n]


def test_a_directory_with_only_a_temporary_file_starts_from_scratch(data, ref, tmp_path):
    """A complete-looking temporary file (killed between the write and the rename) is not read."""
    ck = tmp_path / "ck"
    ck.mkdir()
    shutil.copy(ref.ck / CURRENT, ck / ".checkpoint.h5.4242.tmp")
    code, out, err = run_in_process(train_args(data, tmp_path / "m.h5", ck, "--resume"))
    assert code == 0, err
    assert "no checkpoint in" in err and "resuming" not in err
    assert_same_model(ref, tmp_path / "m.h5", last_json(out))
    assert sorted(os.listdir(ck)) == [CURRENT, PREVIOUS]  # and it was removed by the first write


def killed_after_two_iterations_and_resumed(data, tmp_path, args):
    """Train with ``args`` uninterrupted (in this process), then killed after the second iteration
    and resumed (child processes): the same weights and objective."""
    code, out, err = run_in_process(train_args(data, tmp_path / "ref.h5", None, *args))
    assert code == 0, err
    ck = tmp_path / "ck"
    p = run(train_args(data, tmp_path / "m.h5", ck, *args), "after-iteration:2")
    assert p.returncode == ABORT_EXIT_CODE, p.stderr
    p = run(train_args(data, tmp_path / "m.h5", ck, *args, "--resume"))
    assert p.returncode == 0, p.stderr
    assert "resuming from" in p.stderr
    assert np.array_equal(read_w(tmp_path / "m.h5"), read_w(tmp_path / "ref.h5"))
    assert last_json(p.stdout)["objective"] == last_json(out)["objective"]


def test_preconditioned_run_killed_and_resumed_gives_the_uninterrupted_model(data, tmp_path):
    """The preconditioner is rebuilt from the resumed point's active set: the same M, the same steps."""
    killed_after_two_iterations_and_resumed(data, tmp_path, ["--precondition", "on", "--tol", "1e-9"])


def test_a_wide_maps_sketch_preconditioned_path_killed_and_resumed_gives_the_uninterrupted_model(data, tmp_path):
    """Nystroem wider than the dense preconditioner: the sketch of G(0) is rebuilt by the resumed
    process from the data and the seed alone, so the steps and the model are the same."""
    killed_after_two_iterations_and_resumed(data, tmp_path, ["--method", "nystroem", "--components", "300",
                                                             "--gamma", "0.05", "--precondition", "on",
                                                             "--tol", "1e-7"])


# -- refusals -------------------------------------------------------------------------------------
def copy_ck(ref, tmp_path):
    d = tmp_path / "ck"
    shutil.copytree(ref.ck, d)
    return d


def cli_train(data, tmp_path, ck, *extra, train=None):
    out = tmp_path / "resumed.h5"
    args = ["train", str(train or data["train"]), "-o", str(out), "--valid", str(data["valid"]), *SETTINGS,
            "--cache-dir", str(data["cache"]), "--checkpoint", str(ck), "--resume", "--json"]
    for i in range(0, len(extra), 2):  # an option given in extra replaces the default one
        if extra[i] in args:
            args[args.index(extra[i]) + 1] = extra[i + 1]
        else:
            args += [extra[i], extra[i + 1]]
    return main(args), out


def test_checkpoint_of_other_data_is_refused(data, ref, tmp_path, capsys):
    ck = copy_ck(ref, tmp_path)
    code, out = cli_train(data, tmp_path, ck, train=data["other"])
    err = capsys.readouterr().err
    assert code == 2
    assert re.search(r"checkpoint\.h5 was written for other data \(dataset fingerprint [0-9a-f]{12}\.\.\., "
                     r"this data [0-9a-f]{12}\.\.\.\); use another directory \(--checkpoint DIR\), or start again without --resume", err)
    assert not out.exists()
    assert sorted(os.listdir(ck)) == [CURRENT, PREVIOUS]  # untouched


@pytest.mark.parametrize("option,value,message", [
    ("--tol", "1e-5", "tol: 1e-06 there, 1e-05 now"),
    ("--C", "0.01,1", "C_path: [0.01, 0.1] there, [0.01, 1.0] now"),
    ("--normalize", "zscore", "normalize: 'none' there, 'zscore' now"),
    ("--valid", "OTHER", "valid_fingerprint: '"),
])
def test_checkpoint_of_other_settings_is_refused_naming_the_setting(data, ref, tmp_path, capsys, option, value,
                                                                    message):
    ck = copy_ck(ref, tmp_path)
    code, out = cli_train(data, tmp_path, ck, option, str(data["other"]) if value == "OTHER" else value)
    err = capsys.readouterr().err
    assert code == 2
    assert "checkpoint.h5 was written with other settings (" in err and message in err
    assert "use the same settings, another directory (--checkpoint DIR), or start again without --resume" in err
    assert not out.exists()


@pytest.mark.parametrize("option,value", [("--memory-budget", "1MB"), ("--max-iter", "5000")])
def test_resume_may_change_budget_and_iteration_limit(data, ref, tmp_path, option, value):
    """The model does not depend on the memory budget (block-independent sums), and a larger
    iteration limit only lets the solver continue: resuming with either is allowed."""
    ck = copy_ck(ref, tmp_path)
    (ck / CURRENT).unlink()  # resume one step before the end: the last step is redone here
    code, out = cli_train(data, tmp_path, ck, option, value)
    assert code == 0
    assert np.array_equal(streamrank.load(out).coef_, ref.w)


def test_without_resume_a_run_starts_afresh(data, ref, tmp_path, capsys):
    ck = copy_ck(ref, tmp_path)
    out = tmp_path / "m.h5"
    assert main(["train", str(data["other"]), "-o", str(out), "--C", "0.1", "--checkpoint", str(ck),
                 "--quiet"]) == 0
    with streamrank.open_dataset(data["other"]) as ds:
        assert ckm._read(ck / CURRENT)["fingerprint"] == ds.fingerprint


# -- damage ---------------------------------------------------------------------------------------
def flip_bytes_of(path, dataset="w", n=8):
    with h5py.File(path, "r") as f:
        offset = f[dataset].id.get_offset()
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(n)
        fh.seek(offset)
        fh.write(bytes(x ^ 0xFF for x in b))


def truncate(path):
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(size // 2)


@pytest.mark.parametrize("damage", ["flip-w", "flip-path_w", "truncate"])
def test_damaged_current_checkpoint_falls_back_to_the_previous(data, ref, tmp_path, capsys, damage):
    ck = copy_ck(ref, tmp_path)
    if damage == "truncate":
        truncate(ck / CURRENT)
    else:
        flip_bytes_of(ck / CURRENT, "w" if damage == "flip-w" else "extra/path_w")
    code, out = cli_train(data, tmp_path, ck)
    cap = capsys.readouterr()
    err = cap.err
    assert code == 0, err
    assert "ignoring a damaged checkpoint: " in err and "trying the previous one" in err
    if damage != "truncate":
        assert "checkpoint is damaged (checksum mismatch)" in err
    assert re.search(r"resuming from \S+checkpoint\.prev\.h5: ", err)
    assert "iter " in err  # the last iteration is done again
    assert_same_model(ref, out, json.loads(cap.out.strip().splitlines()[-1]))
    # the damaged file was moved aside: the intact previous one stayed the previous one
    assert sorted(os.listdir(ck)) == sorted([CURRENT, DAMAGED, PREVIOUS])
    assert step_of(ck / PREVIOUS) == ref.steps[-2] and step_of(ck / CURRENT) == ref.steps[-1]


def test_both_checkpoints_damaged_is_an_error_saying_so(data, ref, tmp_path, capsys):
    ck = copy_ck(ref, tmp_path)
    flip_bytes_of(ck / CURRENT)
    truncate(ck / PREVIOUS)
    code, out = cli_train(data, tmp_path, ck)
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"no intact checkpoint in {ck}: both checkpoints are damaged (" in err
    assert "checkpoint.h5: checkpoint is damaged (checksum mismatch)" in err and "checkpoint.prev.h5" in err
    assert "start again without --resume" in err
    assert not out.exists()


def test_the_only_checkpoint_damaged_is_an_error(data, ref, tmp_path, capsys):
    ck = copy_ck(ref, tmp_path)
    (ck / PREVIOUS).unlink()
    flip_bytes_of(ck / CURRENT, "g")
    code, _ = cli_train(data, tmp_path, ck)
    assert code == 2 and "the only checkpoint is damaged" in capsys.readouterr().err


# -- the file itself ------------------------------------------------------------------------------
def _write(d, i, **kw):
    write_checkpoint(d, config={"tol": 1e-3, "C_path": [1.0]}, fingerprint="f" * 64,
                     scalars={"iteration": i, "f": 1.0 / (i + 1), "history": [(i, 0.5, 0.25, 3, True)]},
                     w=np.arange(3.0) * i, g=np.ones(3) / (i + 1), extra={"path_w": np.zeros((i, 3))}, **kw)


def test_write_read_round_trip_and_rotation(tmp_path):
    d = tmp_path / "ck"
    assert read_checkpoint(d) is None  # no directory yet: nothing to resume
    for i in range(1, 4):
        _write(d, i)
    assert sorted(os.listdir(d)) == [CURRENT, PREVIOUS]
    ck = read_checkpoint(d, config={"tol": 1e-3, "C_path": [1.0]}, fingerprint="f" * 64)
    assert ck["scalars"] == {"iteration": 3, "f": 0.25, "history": [[3, 0.5, 0.25, 3, True]]}
    assert np.array_equal(ck["w"], [0.0, 3.0, 6.0]) and ck["w"].dtype == np.float64
    assert np.array_equal(ck["g"], np.ones(3) / 4) and ck["extra"]["path_w"].shape == (3, 3)
    assert ck["created_by"] == f"streamrank {streamrank.__version__}"
    assert ckm._read(d / PREVIOUS)["scalars"]["iteration"] == 2
    with h5py.File(d / CURRENT, "r") as f:
        assert f.attrs["format"] == "streamrank-checkpoint" and f.attrs["version"] == 1
        assert json.loads(f.attrs["config"]) == {"tol": 1e-3, "C_path": [1.0]}
        assert len(f.attrs["checksum"]) == 64


def test_checksum_covers_attributes_too(tmp_path):
    d = tmp_path / "ck"
    _write(d, 1)
    _write(d, 2)
    with h5py.File(d / CURRENT, "r+") as f:
        f.attrs["scalars"] = f.attrs["scalars"].replace('"iteration": 2', '"iteration": 7')
    warnings = []
    ck = read_checkpoint(d, warn=warnings.append)
    assert ck["scalars"]["iteration"] == 1 and ck["path"].endswith(PREVIOUS)
    assert len(warnings) == 1 and "checksum mismatch" in warnings[0]


def test_temporary_file_of_an_interrupted_write_is_not_a_checkpoint(tmp_path):
    d = tmp_path / "ck"
    _write(d, 1)
    # a complete-looking temporary file (as if killed between the write and the rename)
    shutil.copy(d / CURRENT, d / ".checkpoint.h5.99999.tmp")
    (d / CURRENT).unlink()
    assert read_checkpoint(d) is None
    # the next write removes it; an interrupted write of this process leaves nothing either
    _write(d, 2)
    assert sorted(os.listdir(d)) == [CURRENT]
    with pytest.raises(TypeError):  # a write that fails half-way removes its temporary file
        write_checkpoint(d, config={}, fingerprint="", scalars={"x": object()}, w=[0.0], g=[0.0])
    assert sorted(os.listdir(d)) == [CURRENT]
    assert read_checkpoint(d)["scalars"]["iteration"] == 2


def test_other_format_version_and_other_package_version(tmp_path):
    d = tmp_path / "ck"
    _write(d, 1)
    _write(d, 2)
    with h5py.File(d / CURRENT, "r+") as f:
        f.attrs["created_by"] = "streamrank 0.0.1"  # outside the checksum: informational
    warnings = []
    assert read_checkpoint(d, warn=warnings.append)["scalars"]["iteration"] == 2
    assert warnings == [f"{d / CURRENT} was written by streamrank 0.0.1, this is streamrank "
                        f"{streamrank.__version__}; resuming, but the result may differ from an uninterrupted run"]
    for name in (CURRENT, PREVIOUS):
        with h5py.File(d / name, "r+") as f:
            f.attrs["version"] = 2
    with pytest.raises(FormatError, match="checkpoint format version 2 is not supported .this streamrank reads 1.; "
                                          "start again with resume=False"):
        read_checkpoint(d)


def test_mismatch_is_a_streamrank_error(tmp_path):
    d = tmp_path / "ck"
    _write(d, 1)
    with pytest.raises(CheckpointMismatch, match="other data"):
        read_checkpoint(d, fingerprint="e" * 64)
    with pytest.raises(CheckpointMismatch, match=r"other settings \(C_path: \[1.0\] there, \[2.0\] now\)"):
        read_checkpoint(d, config={"tol": 1e-3, "C_path": [2.0]}, fingerprint="f" * 64)


def test_abort_hook_spec_is_checked(monkeypatch, tmp_path):
    monkeypatch.setenv(ABORT_ENV, "after-iteration:one")
    with pytest.raises(ValueError, match="expected after-iteration:N or mid-checkpoint:N"):
        _write(tmp_path / "ck", 1, number=1)
    monkeypatch.setenv(ABORT_ENV, "after-iteration:5")
    _write(tmp_path / "ck", 1, number=1)  # not this one
    assert (tmp_path / "ck" / CURRENT).exists()


# -- resuming a finished solve --------------------------------------------------------------------
@pytest.mark.parametrize("settings", [
    pytest.param({"C": [0.01, 0.1], "max_iter": 3}, id="stopped-at-max-iter"),
    pytest.param({"C": [0.01], "tol": 1e-15, "precondition": "off"}, id="stopped-without-progress"),
])
def test_resume_from_the_final_checkpoint_of_a_stopped_solve(data, tmp_path, settings):
    ck = tmp_path / "ck"
    with streamrank.open_dataset(data["train"]) as ds, streamrank.open_dataset(data["valid"]) as vds:
        valid = vds if len(settings["C"]) > 1 else None
        m1, s1 = train_linear(ds, valid=valid, checkpoint=ck, solver="tron", **settings)
        if "tol" in settings:
            assert s1["candidates"][-1]["message"].endswith("no further progress possible")
        else:
            assert s1["candidates"][0]["message"] == "reached max_iter=3"
        m2, s2 = train_linear(ds, valid=valid, checkpoint=ck, resume=True, solver="tron", **settings)
    assert np.array_equal(m2.w, m1.w)
    assert [(c["objective"], c["iterations"], c["message"]) for c in s2["candidates"]] == \
           [(c["objective"], c["iterations"], c["message"]) for c in s1["candidates"]]


@pytest.mark.parametrize("edit, message", [
    (lambda sc, arr: sc.__setitem__("C_index", 7), "it is at point 7 of 2"),
    (lambda sc, arr: arr.__setitem__("w", arr["w"][:-1]), "w has shape"),
    (lambda sc, arr: sc.__setitem__("f", float("nan")), "not a finite number"),
    (lambda sc, arr: sc.pop("delta"), "a field is missing"),
])
def test_a_checkpoint_with_a_valid_checksum_but_inconsistent_contents_is_refused(tmp_path, edit, message):
    """Written through write_checkpoint (so the checksum is right) with contents no run can have."""
    from streamrank.errors import FormatError
    from streamrank.solvers.tron import TronState
    from streamrank.training.path import checkpoint_scalars, resume_point
    st = TronState(w=np.ones(4), f=1.0, g=np.ones(4), delta=1.0, gnorm0=2.0, iteration=3)
    sc = checkpoint_scalars(st, C_index=0, candidates=[], passes=5, settings={})
    arrays = {"w": st.w, "g": st.g}
    edit(sc, arrays)
    write_checkpoint(tmp_path, config={"a": 1}, fingerprint="f", scalars=sc, w=arrays["w"], g=arrays["g"], extra={})
    with pytest.raises(FormatError, match=f"the checkpoint is inconsistent: .*{message}.*resume=False"):
        resume_point(tmp_path, {"a": 1}, "f", [(0, 0.5), (0, 1.0)])


@pytest.mark.parametrize("solver", ["tron", "newton_yuan"])
def test_smooth_hinge_killed_and_resumed_gives_the_uninterrupted_model(data, tmp_path, solver):
    """Paper 001's cs-sRSVM with either solver: a kill after the second iteration, then --resume."""
    killed_after_two_iterations_and_resumed(data, tmp_path, [
        "--loss", "smooth_hinge", "--eta", "0.3", "--pair-cost", "0-1:1,1-2:1.3,0-2:2", "--query-weight",
        "log_ratio", "--tol", "1e-9", "--solver", solver])


def test_a_checkpoint_of_the_earlier_layout_resumes_to_the_same_model(data, ref, tmp_path, capsys):
    """Checkpoints once held each finished point's trace in the JSON scalars and each solution
    as an array ``w{i}``; such a file (rewritten from the reference's last one) still resumes, to
    the uninterrupted model with the same traces."""
    from streamrank.state.checkpoint import _read, write_checkpoint
    from streamrank.training.path import _finished
    ck = copy_ck(ref, tmp_path)
    old = _read(ck / CURRENT)
    done, path_w = _finished(old["scalars"], old["extra"])
    assert len(done) >= 1 and all("trace" in c for c in done)
    scalars = {k: v for k, v in old["scalars"].items() if k not in ("trace_rows", "w_sizes")}
    scalars["candidates"] = done
    for p in (ck / CURRENT, ck / PREVIOUS):
        p.unlink()
    write_checkpoint(ck, config=old["config"], fingerprint=old["fingerprint"], scalars=scalars, w=old["w"],
                     g=old["g"], extra={f"w{i}": v for i, v in enumerate(path_w)})
    with h5py.File(ck / CURRENT) as f:
        assert "extra/w0" in f and "extra/path_w" not in f
    code, out = cli_train(data, tmp_path, ck)
    cap = capsys.readouterr()
    assert code == 0, cap.err
    summary = json.loads(cap.out.strip().splitlines()[-1])
    assert_same_model(ref, out, summary)
    # the finished points' traces come back from the file as they were (their seconds included)
    assert [c["trace"] for c in done] == [c["trace"] for c in ref.summary["candidates"]][:len(done)]
    assert [c["trace"] for c in summary["candidates"]][:len(done)] == [c["trace"] for c in done]
