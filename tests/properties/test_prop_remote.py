"""Datasets named by URL (issue 45): the data of test_prop_datasets (another tool's HDF5 or LETOR
text, hostile values and shapes), put in a store (fsspec's ``memory://``, in this process) and
trained on by its URL. The run must end as the same run on the local file ends: the same exit
status, the same model bits when it trains; every rule of prop_checker holds; and the object in
the store is untouched."""

import uuid

import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st

import prop_checker as pc
import prop_kit as kit
import prop_strategies as ps
from test_prop_datasets import C_VALUES, _write


@kit.examples(12)
@given(data=st.data())
def test_a_dataset_by_url_ends_as_the_local_file(prop_env, data):
    import fsspec
    import h5py
    draw = data.draw
    d = draw(ps.datasets())
    method = draw(st.sampled_from(kit.METHODS))
    note(d.describe())
    fs = fsspec.filesystem("memory")
    with prop_env.workspace() as (i, o, c):
        src = _write(draw, d, i)
        url = f"memory://props-{uuid.uuid4().hex[:12]}/{src.name}"
        fs.put_file(str(src), url)
        stored = fs.cat_file(url)
        common = ["--method", method, "--cache-dir", c, *kit.METHOD_ARGS[method],
                  "--normalize", draw(st.sampled_from(["none", "zscore", "query_minmax"]))]
        if method != "clsr":
            common.append(f"--C={draw(st.sampled_from(C_VALUES))}")
        local = pc.run_cli(["train", src, "-o", o / "local.h5", *common])
        argv = ["train", url, "-o", o / "url.h5", *common]
        case = pc.Case(f"train {method} by URL", d.kinds + ["memory:// URL"], argv, inputs=[src],
                       outputs=[o / "url.h5"], data=d,
                       must_refuse="a non-finite value in the data" if not d.finite() else "")
        res = pc.run_cli(argv)
        pc.check(case, res)
        try:
            if res.rc != local.rc:
                pc._fail(case, res, f"exit {res.rc} by URL, {local.rc} from the local file ({local.err.strip()[:300]})")
            if res.rc == 0:
                with h5py.File(o / "local.h5", "r") as a, h5py.File(o / "url.h5", "r") as b:
                    if not np.array_equal(a["w"][()], b["w"][()]):
                        pc._fail(case, res, "the model trained by URL differs from the local file's")
            if fs.cat_file(url) != stored:
                pc._fail(case, res, "the object in the store changed")
        finally:
            fs.rm(url)
