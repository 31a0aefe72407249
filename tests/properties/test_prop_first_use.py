"""A first run under a memory limit: every method from an empty numba cache at a budget drawn as a
container's limit would be, then the same command again with the kernels cached.

Each run is held to the rules of every command (prop_checker.check: exit 0 with a finite model, or
exit 2 with one line; inputs unchanged), and to two of its own: the whole process tree's peak PSS
(the command and the helpers that compile its kernels, tools/_rss.cli_tree_peak) within the
budget, and the same decision, accept or refuse, on both runs. An empty cache compiles every
kernel (tens of seconds an example): the slow tier.
"""

import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import prop_checker as pc
import prop_kit as kit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from _rss import clean_tree_peak as cli_tree_peak  # noqa: E402 - sampled from a process that maps no numba


def _rule(case, res, ok, why):
    """One more rule, counted in the tables as prop_checker.check counts its own."""
    if ok:
        return
    for t in [pc.BY_COMMAND[case.command]] + [pc.BY_KIND[k] for k in dict.fromkeys(case.kinds)]:
        t["failed"] += 1
    try:
        pc._fail(case, res, why)
    except pc.Violation as v:
        if not pc.COUNT_ONLY:
            raise
        pc.VIOLATIONS.append(str(v)[:3000])


@pytest.mark.slow
@kit.few(2)
@given(method=st.sampled_from(kit.METHODS), budget_mb=st.integers(300, 700))
def test_a_first_run_keeps_its_budget_and_decides_as_the_next(prop_env, method, budget_mb):
    import os
    with prop_env.workspace() as (i, o, c):
        data = i / "train.h5"
        shutil.copy(prop_env.plain, data)
        argv = ["train", data, "-o", o / "m.h5", "--quiet", "--method", method, *kit.METHOD_ARGS[method],
                "--memory-budget", f"{budget_mb}MB", "--cache-dir", c]
        env = {k: v for k, v in os.environ.items() if k != "STREAMRANK_NO_WARMUP"}
        env["NUMBA_CACHE_DIR"] = str(c / "numba")
        note(f"argv: {argv}")
        decisions = []
        for run in ("empty numba cache", "cached kernels"):
            if (o / "m.h5").exists():
                (o / "m.h5").unlink()
            case = pc.Case(f"train {method}", ["cgroup-like budget", run], argv, inputs=[data], outputs=[o / "m.h5"],
                           data=prop_env.data)
            r = cli_tree_peak(argv, env=env, timeout=pc.CHILD_BOUND * 5)
            res = pc.Result(r["rc"], "", r["stderr"], r["s"])
            pc.check(case, res)
            _rule(case, res, r["peak_mb"] <= budget_mb,
                  f"{run}: the process tree peaked at {r['peak_mb']:.0f} MB, above the budget")
            decisions.append(r["rc"])
        _rule(case, res, decisions[0] == decisions[1],
              f"exit {decisions[0]} on the first run, {decisions[1]} on the next")
