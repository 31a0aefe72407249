"""Platforms: one thread or two (NUMBA_NUM_THREADS and the BLAS threads, as a one-core container or
``taskset -c 0`` leaves them).

A child process trains a drawn dataset with a drawn method on the drawn thread count; the case must
hold the checker's rules, and, differentially, end as the same run in this process does (its own
thread count): the same exit code, and on success a model with the same bits. A child costs a second
of start-up, so these are few.
"""

import h5py
from hypothesis import given, note
from hypothesis import strategies as st

import prop_checker as pc
import prop_kit as kit
import prop_strategies as ps


def _arrays(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda k, v: out.__setitem__(k, v[()].tobytes()) if isinstance(v, h5py.Dataset) else None)
    return out


@kit.few(1)
@given(data=st.data())
def test_train_on_one_thread_or_two(prop_env, data):
    draw = data.draw
    d = draw(ps.datasets(allow_breaks=False))
    method = draw(st.sampled_from(kit.METHODS))
    threads = draw(st.sampled_from([1, 2]))
    note(f"{d.describe()}; {threads} thread(s)")
    with prop_env.workspace() as (i, o, c):
        src = ps.write_h5(d, i / "d.h5")
        args = ["--method", method, "--cache-dir", c, *kit.METHOD_ARGS[method],
                "--normalize", draw(st.sampled_from(["none", "zscore"]))]
        argv = ["train", src, "-o", o / "m.h5", *args]
        case = pc.Case(f"train {method}", d.kinds + [f"threads {threads}"], argv, inputs=[src], outputs=[o / "m.h5"],
                       data=d)
        env = {"NUMBA_NUM_THREADS": str(threads), "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
        res = pc.run_child(argv, env=env)
        pc.check(case, res)
        here = pc.run_cli(["train", src, "-o", c / "here.h5", *args])
        assert here.rc == res.rc, f"{threads} thread(s) exit {res.rc}, this process's threads {here.rc}"
        if res.rc == 0:
            assert _arrays(o / "m.h5") == _arrays(c / "here.h5"), "the model's bits depend on the thread count"
