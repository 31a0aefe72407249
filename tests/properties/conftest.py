"""Hypothesis profiles of the property tests (issue 30, build item 8), the kernels compiled before
the first example, and the counts the reliability bench reads.

- ``ci`` (default): derandomized, a fixed small number of examples per property, no deadline, no
  shrinking (a failure prints the example it found); the whole folder in well under a minute once
  numba's kernels are cached.
- ``long``: ``STREAMRANK_PROPERTY_EXAMPLES`` examples per property (default 200), random, shrunk to a
  minimal failing example; ``python tools/bench_reliability.py --only properties --examples N``
  chooses it.

``STREAMRANK_PROPERTY_PROFILE`` picks the profile; ``STREAMRANK_PROPERTY_REPORT=FILE`` writes the
counts by command and kind of input, and the failures, as JSON at the end of the session.
"""

import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

_common = dict(deadline=None, database=None, print_blob=False,
               suppress_health_check=list(HealthCheck))
settings.register_profile("ci", max_examples=8, derandomize=True,
                          phases=(Phase.explicit, Phase.reuse, Phase.generate), **_common)
settings.register_profile("long", max_examples=int(os.environ.get("STREAMRANK_PROPERTY_EXAMPLES", "200")),
                          derandomize=False, **_common)
# applied to these properties only (prop_kit.examples), never loaded as the session's default: the
# other Hypothesis tests of the suite keep their own settings
PROFILE = os.environ.get("STREAMRANK_PROPERTY_PROFILE", "ci")
if PROFILE == "long":
    # shrinking a failure is capped in time (Hypothesis' own cap is 300 s a property): a hang's
    # shrinking steps each wait out a bound, and a run of the bench must stay within its minutes
    from hypothesis.internal.conjecture import engine as _engine
    _engine.MAX_SHRINKING_SECONDS = float(os.environ.get("STREAMRANK_PROPERTY_SHRINK_SECONDS", "60"))

_failures = []


@pytest.fixture(scope="session")
def prop_env(tmp_path_factory):
    """A session directory with a plain dataset, a model of every method trained on it, a validation
    set, a folds directory, a grid run directory and scores; every kernel the properties use is
    compiled here, before the first example is timed."""
    import prop_kit
    return prop_kit.Env(tmp_path_factory.mktemp("props"))


@pytest.fixture(autouse=True)
def _new_property():
    import prop_checker
    prop_checker.new_property()
    yield


def pytest_runtest_logreport(report):
    if report.when == "call" and report.failed:
        text = report.longreprtext
        keep = [ln for ln in text.splitlines() if ln.startswith(("E ", "Falsifying", "  case", "    "))
                or "Violation" in ln][:60]
        _failures.append({"test": report.nodeid, "text": "\n".join(keep)[-6000:]})


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("STREAMRANK_PROPERTY_REPORT")
    if not out:
        return
    import prop_checker
    Path(out).write_text(json.dumps({"profile": PROFILE, "max_examples": settings.get_profile(PROFILE).max_examples,
                                     "counts": prop_checker.counts_table(), "failures": _failures,
                                     "violations": prop_checker.VIOLATIONS}, indent=1))
