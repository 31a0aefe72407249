"""The first-use helper (``_native.warmup``): its kernel lists are current, its types decode, and
the compile locks keep every signature two processes save."""

import os
import subprocess
import sys
import textwrap

import pytest

from compile_children import RUN, child_env, run_python
from streamrank._native import warmup
from streamrank._native.warm_manifest import KERNELS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
try:
    import kernel_manifest  # the scenarios the lists were recorded from
finally:
    sys.path.remove(os.path.join(ROOT, "tools"))


def test_types_round_trip():
    from numba.core import types
    sig = (types.int64, types.float64, types.boolean, types.Array(types.float32, 2, "C"),
           types.Array(types.int32, 1, "A", readonly=True), types.uint8)
    assert warmup.decode(warmup.encode(sig)) == sig
    with pytest.raises(ValueError):
        warmup.encode((types.UniTuple(types.int64, 2),))


def test_every_entry_names_a_cached_kernel_and_decodes():
    for command, entries in KERNELS.items():
        assert entries, command
        for i, (module, qualname, sig, seconds, callees, end) in enumerate(entries):
            k = warmup._kernel(module, qualname)
            # cache=True, adopted by numba_cache
            assert k._cache.__class__.__name__ == "KernelCache", (module, qualname)
            warmup.decode(sig)
            assert seconds >= 0 and end >= seconds and all(j < i for j in callees)


def test_recording_some_lists_keeps_the_others_as_written():
    """``tools/kernel_manifest.py --only LISTS`` keeps the lists it does not record: the manifest read
    back and written again is the same text, and its lists are those the package imports."""
    kept = kernel_manifest.current_lists()
    assert set(kept) == set(kernel_manifest.SCENARIOS) == set(KERNELS)
    assert kernel_manifest.render(kept) == kernel_manifest.MANIFEST.read_text()
    for name, entries in KERNELS.items():
        assert [tuple(e) for e in kept[name]] == [tuple(e) for e in entries], name


def _entries(spec):
    """(name, seconds, callees) -> manifest entries, the command's other work between them none."""
    out, end = [], 0.0
    for name, sec, calls in spec:
        end += sec
        out.append(("m", name, (), sec, calls, end))
    return out


def test_backwards_order_goes_backwards_callees_first():
    # post-order: a, b -> P; c -> Q; R calls P (compiled before it, under P)
    entries = _entries([("a", 1.0, ()), ("b", 1.0, ()), ("P", 1.0, (0, 1)), ("c", 1.0, ()), ("Q", 1.0, (3,)),
                        ("R", 1.0, (2,))])
    assert [entries[i][1] for i in warmup.backwards_order(entries)] == ["c", "Q", "b", "a", "P", "R"]
    assert [entries[i][1] for i in warmup.tree_order(entries)] == ["b", "a", "P", "R", "c", "Q"]
    assert warmup.helper_order([]) == []


def test_simulated_end_by_hand():
    # alone, the command ends when the recording did
    entries = _entries([("a", 1.0, ()), ("b", 2.0, ()), ("c", 0.5, (0,))])
    assert warmup.simulated_end(entries, []) == 3.5
    # the helper takes c's tree from the back: b is the command's (it gets there first), c waits for a
    assert warmup.simulated_end(entries, [0, 2, 1]) == 3.0
    # two independent kernels: one each, both done after one second
    assert warmup.simulated_end(_entries([("a", 1.0, ()), ("b", 1.0, ())]), [1]) == 1.0


def test_helper_order_takes_the_order_that_ends_sooner():
    # select-features' shape: m is a callee of M (needed first) and of B (needed last, the largest).
    # Backwards starts on t and m, which the command needs next, and it waits: t, m, B, M, p ends at 4 s;
    # B's tree first (m, B) leaves t and M to the command: 3 s
    entries = _entries([("p", 1.0, ()), ("m", 1.0, ()), ("t", 1.0, ()), ("M", 1.0, (1, 2)), ("B", 2.0, (1,))])
    backwards, tree = warmup.backwards_order(entries), warmup.tree_order(entries)
    assert [entries[i][1] for i in backwards] == ["t", "m", "B", "M", "p"]
    assert [entries[i][1] for i in tree] == ["m", "B", "t", "M", "p"]
    assert warmup.simulated_end(entries, backwards) == 4.0 and warmup.simulated_end(entries, tree) == 3.0
    assert [e[1] for e in warmup.helper_order(entries)] == ["m", "B", "t", "M", "p"]


# each compiles a command's kernels from an empty numba cache (tens of seconds): the slow tier
@pytest.mark.slow
@pytest.mark.parametrize("command", ["train", "convert", "train-primal", "train-nystroem", "train-rff", "train-exact",
                                     "train-clsr"])
def test_lists_cover_what_the_command_compiles(tmp_path, command):
    """After the helper has compiled a whole list into an empty cache, the command it was recorded
    from compiles nothing of streamrank's: the list is current (else: python tools/kernel_manifest.py)."""
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    run_python(kernel_manifest.PREPARE, tmp_path / "prepare-cache", work)
    argv, cwd = warmup.helper_command(command)
    subprocess.run(argv, cwd=cwd, env=child_env(NUMBA_CACHE_DIR=str(cache)), check=True, timeout=900)
    out = run_python(RUN.format(code=kernel_manifest.SCENARIOS[command].replace("{work}", str(work))), cache, work)
    compiled = out.split("COMPILED", 1)[1].strip()
    assert compiled == "[]", f"{command} compiled {compiled} itself: rerun python tools/kernel_manifest.py"


@pytest.mark.slow  # compiles from an empty cache in several processes
def test_compile_locks_keep_every_signature(tmp_path):
    """Two processes save different signatures of one function at the same moment, many times:
    with the lock, every signature is in the index and loads its own code."""
    mod = tmp_path / "lockmod.py"
    mod.write_text(textwrap.dedent("""
        import numba
        from streamrank._native import numba_cache
        @numba.njit(cache=True)
        def f(x):
            return x + 1
        numba_cache.adopt(globals())  # a kernel as streamrank's are: its cache takes the locks
    """))
    code = textwrap.dedent("""
        import sys, time
        sys.path.insert(0, {path!r})
        from streamrank._native import warmup
        warmup.install_compile_locks()
        from numba.core import types
        import lockmod
        t = {which}
        lockmod.f.compile((types.{ty},))
    """)
    cache = tmp_path / "cache"
    for round_ in range(3):
        for d in (cache,):
            if d.exists():
                for p in d.rglob("*"):
                    if p.is_file():
                        p.unlink()
        procs = [subprocess.Popen([sys.executable, "-c", code.format(path=str(tmp_path), which=i, ty=ty)],
                                  env=child_env(NUMBA_CACHE_DIR=str(cache)))
                 for i, ty in enumerate(["int64", "float64", "int32", "float32"])]
        assert all(p.wait(timeout=300) == 0 for p in procs)
        check = textwrap.dedent("""
            import sys
            sys.path.insert(0, {path!r})
            import numpy as np, lockmod
            assert lockmod.f(np.int64(1)) == 2 and lockmod.f(1.5) == 2.5
            assert lockmod.f(np.int32(1)) == 2 and lockmod.f(np.float32(0.5)) == 1.5
            print(len(lockmod.f.stats.cache_hits))
        """).format(path=str(tmp_path))
        out = subprocess.run([sys.executable, "-c", check], env=dict(os.environ, NUMBA_CACHE_DIR=str(cache)),
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "4", f"round {round_}: only {out.stdout.strip()} of 4 signatures were cached"


def test_start_does_nothing_when_turned_off(monkeypatch):
    monkeypatch.setenv(warmup.ENV_OFF, "1")
    warmup.start("train")
    assert warmup._helper is None
    warmup.stop()


def test_start_compiles_the_list_once_then_a_stamp_keeps_it_off(tmp_path):
    """start returns when the helper has compiled the list (it waits), and a stamped list starts none."""
    code = textwrap.dedent("""
        import os, subprocess
        from streamrank._native import warmup
        started = []
        real = subprocess.Popen
        subprocess.Popen = lambda *a, **k: started.append(a[0]) or real(*a, **k)
        warmup.start("convert")
        assert started, "no helper on a cold cache"
        assert os.path.exists(warmup.stamp_path("convert")), "start returned before the list was compiled"
        assert warmup._helper is None
        del started[:]
        warmup.start("convert")
        assert not started, "a helper although the list was compiled"
    """)
    env = {k: v for k, v in child_env().items() if k != warmup.ENV_OFF}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "cache")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_failed_lean_load_falls_back_to_numbas_own_load():
    """``_native.numba_cache``: should the lean load of a streamrank kernel fail (a numba whose
    cached code needs more than the runtime), numba's own load runs instead and the kernel works."""
    import subprocess
    import sys
    code = """
import numpy as np
import numba.core.caching as C
from streamrank._native import linalg
failed = []
real = C.Cache._load_overload
def first_fails(self, sig, ctx):
    if not failed:
        failed.append(1)
        raise RuntimeError("the lean load lacks something")
    return real(self, sig, ctx)
C.Cache._load_overload = first_fails
print(linalg.sum_in_order(1.0, np.array([2.0, 3.0])), len(failed))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.split() == ["6.0", "1"], p.stderr
