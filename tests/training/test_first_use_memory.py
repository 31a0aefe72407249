"""A first run's memory: the command's kernels are compiled by helper processes before it plans
(``_native.warmup.start``), as many at once as ``warmup.first_use_compilers`` fits in the
budget, so the plan, its accept or refuse and the tree's peak are those of a cached run.

The fast tests fake the helpers (no compile); the slow one measures a real first run's process tree.
"""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamrank._native import warmup
from streamrank._native.warm_manifest import KERNELS
from streamrank.cli.main import _warm_lists, build_parser
from streamrank.settings import METHODS

MB = 10**6
ROOT = Path(__file__).resolve().parents[2]


def test_compilers_fit_the_budget_beside_the_command():
    """One helper, capped so that it and the command stay inside the budget (its cap, plus the one
    kernel it may be compiling, plus the command); two only where each has room for several kernels."""
    base, step, r = warmup.COMPILER_BYTES, warmup.COMPILE_STEP, 40 * MB
    for budget in (300 * MB, 350 * MB, 600 * MB):
        n, cap = warmup.first_use_compilers(budget, r)
        assert n == 1 and cap >= base  # room for a compile beyond the helper's first
        assert r + cap + step <= budget
    n, cap = warmup.first_use_compilers(2000 * MB, r)
    assert n == 2 and r + 2 * (cap + step) <= 2000 * MB
    assert warmup.first_use_compilers(None, r) == (n, cap)  # the default 2GB
    two = r + 2 * (base + warmup.KERNELS_PER_HELPER * step)
    assert warmup.first_use_compilers(two, r)[0] == 2
    assert warmup.first_use_compilers(two - 2, r)[0] == 1


def test_a_budget_below_a_compile_is_said(caplog):
    n, cap = warmup.first_use_compilers(200 * MB, 40 * MB)
    assert n == 1 and 0 < cap < warmup.COMPILER_BYTES
    assert "compiling this command's kernels" in caplog.text


class _FakeHelper:
    """A helper process that 'compiles' PER_LIFE kernels of its order (or the kernels in FAIL: '!')
    and then ends with RESTART while kernels are left, as warmup.main does past its cap."""
    PER_LIFE, FAIL, log = 10, (), []

    def __init__(self, argv, cwd=None, env=None, stdout=None, **kw):
        args = list(argv[3:])
        self.skip = next((int(a.split("=")[1]) for a in args if a.startswith("@skip=")), 0)
        names = [a for a in args if not a.startswith("@")]
        total = len(warmup._kernels_in_order(names, "@back" in args))
        done = min(total, self.skip + self.PER_LIFE)
        self.stdout = io.BytesIO(b"".join(b"!" if i in self.FAIL else b"+" for i in range(self.skip, done)))
        self.argv, self.rc, self.polls, self.returncode = tuple(argv), warmup.RESTART if done < total else 0, 0, None
        _FakeHelper.log.append(("start", self.argv))

    def poll(self):
        self.polls += 1
        if self.polls < 2:
            return None  # running
        if self.polls == 2:
            _FakeHelper.log.append(("ended", self.argv))
        self.returncode = self.rc
        return self.rc

    def terminate(self):
        _FakeHelper.log.append(("terminate", self.argv))


@pytest.fixture
def fake_helpers(monkeypatch, tmp_path):
    monkeypatch.delenv(warmup.ENV_OFF, raising=False)
    monkeypatch.delenv("NUMBA_DISABLE_JIT", raising=False)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(subprocess, "Popen", _FakeHelper)
    monkeypatch.setattr(warmup, "install_compile_locks", lambda: None)
    monkeypatch.setattr(warmup, "_POLL", 0)
    _FakeHelper.log, _FakeHelper.FAIL = [], ()
    return _FakeHelper.log


LISTS = ["train-primal", "train-exact"]


@pytest.mark.parametrize("budget, helpers", [(300 * MB, 1), (2000 * MB, 2)])
def test_start_compiles_everything_before_it_returns(fake_helpers, budget, helpers):
    """start returns once every helper has ended and each slot's helpers, restarted past their cap
    with the kernels done skipped, went through the whole lists; two slots only where the plan
    fits two (the second from the lists' back); the lists then stamped, and the next run starts none."""
    warmup.start(LISTS, budget)
    starts = [a for e, a in fake_helpers if e == "start"]
    assert sorted(a for e, a in fake_helpers if e == "ended") == sorted(starts)
    assert "terminate" not in {e for e, _ in fake_helpers}
    total = len(warmup._kernels_in_order(LISTS, False))
    for back in (False, True)[:helpers]:
        mine = [a for a in starts if ("@back" in a) == back]
        skips = [next((int(x.split("=")[1]) for x in a if x.startswith("@skip=")), 0) for a in mine]
        assert skips == list(range(0, total, _FakeHelper.PER_LIFE))
        assert all(a[-2:] == tuple(LISTS) and any(x.startswith("@cap=") for x in a) for a in mine)
    assert len({("@back" in a) for a in starts}) == helpers
    assert warmup._helper is None and not warmup.cold_lists(LISTS)
    fake_helpers.clear()
    warmup.start(LISTS, budget)
    assert fake_helpers == []


def test_a_failed_kernel_leaves_the_list_unstamped(fake_helpers):
    _FakeHelper.FAIL = (3,)
    warmup.start(LISTS, 300 * MB)
    assert warmup.cold_lists(LISTS) == LISTS  # the command compiles it itself, and the next run tries again


def test_a_stamped_list_is_not_compiled_again(fake_helpers):
    Path(warmup.stamp_path("train-primal")).touch()
    warmup.start(LISTS, 300 * MB)
    starts = [a for e, a in fake_helpers if e == "start"]
    assert starts and all(a[-1] == "train-exact" and "train-primal" not in a for a in starts)


@pytest.mark.parametrize("argv, lists", [
    (["train", "d.h5", "-o", "m.h5"], ["train-primal"]),
    (["train", "d.h5", "-o", "m.h5", "--valid", "v.h5", "--method", "exact"], ["train", "train-exact"]),
    (["grid", "d.h5", "--valid", "v.h5", "-o", "run", "--method", "primal,clsr"], ["train", "train-primal", "train-clsr"]),
    (["select-features", "d.h5"], ["select-features"]),
    (["convert", "d.txt", "-o", "d.h5"], ["convert"]),
    (["info", "d.h5"], []),
])
def test_each_command_names_lists_the_manifest_has(argv, lists):
    got = _warm_lists(build_parser().parse_args(argv))
    assert got == lists
    assert all(name in KERNELS and KERNELS[name] for name in got)


def test_every_method_has_its_list():
    """A method without a list would compile in the command's own process, after the plan."""
    assert all(KERNELS.get(f"train-{m}") for m in METHODS)


@pytest.mark.slow  # compiles the primal kernels from an empty cache (tens of seconds)
def test_primal_first_run_tree_peak_within_budget(tmp_path, monkeypatch):
    """From an empty numba cache, train --method primal at 300MB, then again: the whole process
    tree's peak PSS (the command and its compiling helpers, sampled every 10 ms) within the budget
    on both runs, and both accepted."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from _rss import clean_tree_peak as cli_tree_peak  # this process maps numba: not the sampler
    finally:
        sys.path.remove(str(ROOT / "tools"))
    from streamrank.synthetic import write_hdf5
    data = tmp_path / "d.h5"
    write_hdf5(data, "mq2007", scale=0.2, seed=0)  # about 9,000 rows of 46 features
    env = {k: v for k, v in os.environ.items() if k != warmup.ENV_OFF}
    env.update(NUMBA_CACHE_DIR=str(tmp_path / "numba"), PYTHONPATH=str(ROOT))
    argv = ["train", data, "-o", tmp_path / "m.h5", "--normalize", "zscore", "--memory-budget", "300MB", "--quiet"]
    monkeypatch.setenv("NUMBA_CACHE_DIR", env["NUMBA_CACHE_DIR"])
    stamp = Path(warmup.stamp_path("train-primal"))
    assert not stamp.exists()
    first = cli_tree_peak(argv, env=env)
    assert stamp.exists()  # the helpers compiled the list: this was a first run
    cached = cli_tree_peak(argv, env=env)
    assert first["rc"] == cached["rc"] == 0, first["stderr"] + cached["stderr"]
    assert first["peak_mb"] <= 300 and cached["peak_mb"] <= 300, (first["peak_mb"], cached["peak_mb"])


def test_a_helper_past_its_wait_is_stopped_and_the_command_goes_on(monkeypatch):
    """A helper stuck (a deadlock, a stalled file system) is killed after HELPER_WAIT: the command
    then compiles what is left itself rather than waiting for ever."""
    stuck = []

    def spawn(lists, from_back, cap, skip):
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=subprocess.PIPE)
        warmup._helper.append(p)
        stuck.append(p)
        return p

    monkeypatch.setattr(warmup, "_spawn", spawn)
    monkeypatch.setattr(warmup, "HELPER_WAIT", 0.3)
    monkeypatch.setattr(warmup, "_helper", [])
    assert warmup._run_helpers(["train-primal"], 1, 10 ** 9) == [False]
    assert stuck and stuck[0].poll() is not None and warmup._helper == []
