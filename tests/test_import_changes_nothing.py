"""``import streamrank`` and using its API leave the process as they found it.

A fresh interpreter imports streamrank first (before numpy and numba, where a setting could still
take effect), fits a small RankSVM, predicts, saves, loads it back and opens a dataset; its
environment, numpy's huge-page advice, numba's config values, numba's cache and dispatcher classes,
the signal handlers and Python's hooks must then be what they are in an interpreter that never
imported streamrank. ``streamrank.configure()`` is the one call that changes them: it is checked
to do so, so the probe can tell.
"""

import json
import os
import subprocess
import sys

import pytest

STATE = r"""
def state():
    import signal, warnings
    import numpy as np
    import numba
    from numba.core import caching, config, dispatcher
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:
        from numpy.core.multiarray import _set_madvise_hugepage
    hugepage = _set_madvise_hugepage(True)
    _set_madvise_hugepage(hugepage)

    def name(v):
        if callable(v) or isinstance(v, (classmethod, staticmethod, property)):
            f = getattr(v, "__func__", getattr(v, "fget", v))
            return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', type(f).__name__)}"
        simple = isinstance(v, (int, float, str, bool, type(None), tuple))
        return repr(v) if simple else type(v).__name__

    # every class numba's caching and dispatcher modules define (Cache, FunctionCache, Dispatcher...)
    classes = {f"{m.__name__}.{c.__qualname__}": {k: name(v) for k, v in sorted(vars(c).items())}
               for m in (caching, dispatcher) for c in vars(m).values()
               if isinstance(c, type) and c.__module__ == m.__name__}
    return {"hugepage": bool(hugepage),
            "config": {k: name(v) for k, v in sorted(vars(config).items()) if k.isupper()},
            "classes": classes,
            "signals": {s: name(signal.getsignal(getattr(signal, s)))
                        for s in ("SIGINT", "SIGTERM", "SIGHUP")},
            "hooks": [name(sys.excepthook), name(warnings.showwarning)],
            "threads": numba.get_num_threads()}
"""

USE = r"""
import os, sys, json, tempfile
env0 = dict(os.environ)
import streamrank
import numpy as np
rng = np.random.default_rng(0)
X = rng.standard_normal((60, 4)).astype(np.float32)
y = rng.integers(0, 3, 60).astype(np.float32)
qid = np.repeat(np.arange(6), 10)
with tempfile.TemporaryDirectory() as d:
    m = streamrank.RankSVM(C=1.0).fit(X, y, qid=qid)
    s = m.predict(X)
    m.save(os.path.join(d, "m.h5"))
    assert np.array_equal(streamrank.load(os.path.join(d, "m.h5")).predict(X), s)
    path = os.path.join(d, "d.h5")
    from streamrank.synthetic import write_hdf5
    write_hdf5(path, "small", seed=1, part="train", scale=0.02)
    with streamrank.open_dataset(path) as ds:
        assert ds.n_rows > 0
changed = sorted(k for k in set(env0) | set(os.environ) if env0.get(k) != os.environ.get(k))
out = dict(state(), env_changed=changed)
print("STATE:" + json.dumps(out))
"""

BARE = "import sys, json\nprint('STATE:' + json.dumps(state()))\n"

CONFIGURED = r"""
import os, sys, json
env0 = dict(os.environ)
import streamrank
streamrank.configure()
changed = sorted(k for k in set(env0) | set(os.environ) if env0.get(k) != os.environ.get(k))
print("STATE:" + json.dumps(dict(state(), env_changed=changed)))
"""


SETTINGS = ("OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT", "NUMBA_SLP_VECTORIZE", "STREAMRANK_NUMPY_HUGEPAGES")


def _run(code):
    env = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    p = subprocess.run([sys.executable, "-c", STATE + code], env=env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    return json.loads(next(line for line in p.stdout.splitlines() if line.startswith("STATE:"))[6:])


@pytest.fixture(scope="module")
def bare():
    return _run(BARE)


def test_import_and_use_change_nothing_in_the_process(bare):
    used = _run(USE)
    assert used.pop("env_changed") == []
    for part in bare:
        assert used[part] == bare[part], part


def test_configure_changes_what_it_says_and_the_probe_sees_it(bare):
    """The probe is an oracle that fails: with streamrank.configure() the environment and numpy's
    huge-page advice differ from the bare interpreter's, and numba's classes still do not."""
    used = _run(CONFIGURED)
    assert used.pop("env_changed") == ["OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT"]
    assert not used["hugepage"]
    assert used["classes"] == bare["classes"] and used["config"] == bare["config"]


@pytest.mark.slow  # compiles the kernel methods' kernels when the cache is cold
def test_every_method_changes_nothing(bare):
    """CLSRRank, Nystroem and the exact kernel path leave the process as they found it too."""
    fits = ('    streamrank.CLSRRank(n_components=20).fit(X, y, qid=qid).predict(X)\n'
            '    streamrank.RankSVM(method="nystroem", n_components=20).fit(X, y, qid=qid).predict(X)\n'
            '    streamrank.RankSVM(method="exact", gamma=0.1).fit(X, y, qid=qid).predict(X)\n')
    anchor = "    m = streamrank.RankSVM(C=1.0).fit(X, y, qid=qid)\n"
    used = _run(USE.replace(anchor, fits + anchor))
    assert used.pop("env_changed") == []
    for part in bare:
        assert used[part] == bare[part], part
