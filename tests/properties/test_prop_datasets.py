"""Datasets written by another tool, for every command that reads data (issue 30, build item 8).

Each example writes a small dataset directly with h5py in the documented format (docs/formats.md,
versions 1 and 2), or as LETOR text: non-finite, huge (1e38), tiny or subnormal values, mixed
scales, features constant within every query, empty and one-document queries, all labels equal,
labels outside the usual levels (negative, fractional, 2000, 3e38), string query ids. A value that
is not finite must be refused (exit 2, one line naming it) by every command that uses it, and
``info`` must say so; everything else ends as every case must (prop_checker).
"""

import shutil

from hypothesis import given, note
from hypothesis import strategies as st

import prop_checker as pc
import prop_kit as kit
import prop_strategies as ps

C_VALUES = ["1", "1", "0.25", "4", "1e-6", "1e6", "1e300"]


def _nonfinite_x(d):
    import numpy as np
    return not np.isfinite(np.asarray(d.X, np.float64)).all()


def _nonfinite_y(d):
    import numpy as np
    return not np.isfinite(np.asarray(d.y, np.float64)).all()


def _write(draw, d, where, name="d"):
    """The data as HDF5 (mostly) or as LETOR text."""
    if draw(st.integers(0, 3)) == 0:
        d.kinds = d.kinds + ["as LETOR text"]
        return ps.write_text(d, where / f"{name}.txt")
    return ps.write_h5(d, where / f"{name}.h5")


@kit.examples(32)
@given(data=st.data())
def test_train_on_datasets_from_another_tool(prop_env, data):
    draw = data.draw
    d = draw(ps.datasets())
    method = draw(st.sampled_from(kit.METHODS))
    note(d.describe())
    with prop_env.workspace() as (i, o, c):
        src = _write(draw, d, i)
        argv = ["train", src, "-o", o / "m.h5", "--method", method, "--cache-dir", c, *kit.METHOD_ARGS[method],
                "--normalize", draw(st.sampled_from(["none", "none", "zscore", "query_minmax"]))]
        if method != "clsr":
            argv += [f"--C={draw(st.sampled_from(C_VALUES))}"]
        case = pc.Case(f"train {method}", d.kinds, argv, inputs=[src], outputs=[o / "m.h5"], data=d,
                       must_refuse="a non-finite value in the data" if not d.finite() else "")
        pc.check(case, pc.run_cli(argv))


@kit.examples(16)
@given(data=st.data())
def test_predict_on_datasets_from_another_tool(prop_env, data):
    draw = data.draw
    d = draw(ps.datasets())
    method = draw(st.sampled_from(kit.METHODS))
    note(d.describe())
    with prop_env.workspace() as (i, o, c):
        src = _write(draw, d, i)
        model = i / "m.h5"
        shutil.copy(prop_env.models[method], model)
        argv = ["predict", model, src, "-o", o / "s.txt", "--cache-dir", c]
        case = pc.Case("predict", d.kinds + [f"model {method}"], argv, inputs=[src, model], outputs=[o / "s.txt"],
                       data=d, must_refuse="a non-finite feature value" if _nonfinite_x(d) else "")
        pc.check(case, pc.run_cli(argv))


SCORES = ["0.5", "1", "-3", "1e308", "-1e308", "5e-324", "0", "-0", "nan", "inf", "-inf", "abc", "", "1e400"]


@kit.examples(16)
@given(data=st.data())
def test_eval_on_datasets_and_scores_from_another_tool(prop_env, data):
    draw = data.draw
    d = draw(ps.datasets())
    note(d.describe())
    n = d.n + draw(st.sampled_from([0, 0, 0, 0, -1, 1]))
    tame = st.floats(-10, 10).map(repr)
    scores = [draw(st.one_of(tame, tame, tame, st.sampled_from(SCORES))) for _ in range(max(n, 0))]
    note(f"scores: {scores}")
    kinds = d.kinds + ["scores " + ("hostile" if any(s in SCORES for s in scores) else "plain")]
    with prop_env.workspace() as (i, o, c):
        src = _write(draw, d, i)
        sc = i / "scores.txt"
        sc.write_text("\n".join(scores) + ("\n" if scores else ""))
        argv = ["eval", src, sc, "--json", "--cache-dir", c]
        case = pc.Case("eval", kinds, argv, inputs=[src, sc], outputs=[], data=d,
                       must_refuse="a non-finite label" if _nonfinite_y(d) else "")
        pc.check(case, pc.run_cli(argv))


@kit.examples(12)
@given(data=st.data())
def test_select_features_and_info_on_datasets_from_another_tool(prop_env, data):
    draw = data.draw
    d = draw(ps.datasets())
    note(d.describe())
    with prop_env.workspace() as (i, o, c):
        if draw(st.booleans()):
            src = ps.write_h5(d, i / "d.h5")
            argv = ["info", src]
            case = pc.Case("info", d.kinds, argv, inputs=[src], data=d)
        else:
            src = _write(draw, d, i)
            argv = ["select-features", src, "-o", o / "gas.h5", "--quiet", "--cache-dir", c,
                    "--importance", draw(st.sampled_from(["map", "ndcg@3", "pairwise"]))]
            case = pc.Case("select-features", d.kinds, argv, inputs=[src], outputs=[o / "gas.h5"], data=d,
                           must_refuse="a non-finite value in the data" if not d.finite() else "")
        pc.check(case, pc.run_cli(argv))


@kit.examples(8)
@given(data=st.data())
def test_grid_and_cv_on_datasets_from_another_tool(prop_env, data):
    draw = data.draw
    d = draw(ps.datasets())
    note(d.describe())
    method = draw(st.sampled_from(kit.METHODS))
    margs = ["--components", "4"] if method in ("nystroem", "rff", "clsr") else []
    with prop_env.workspace() as (i, o, c):
        if draw(st.integers(0, 2)) == 0:  # cv: the drawn data as one part of a fold
            part = draw(st.sampled_from(["train", "vali", "test"]))
            folds = i / "folds"
            shutil.copytree(prop_env.folds, folds)
            (folds / "Fold1" / f"{part}.h5").unlink()
            ps.write_h5(d, folds / "Fold1" / f"{part}.h5")
            argv = ["cv", folds, "-o", o / "cv", "--method", method, "--cache-dir", c, "--quiet", *margs]
            case = pc.Case("cv", d.kinds + [f"as {part}"], argv, inputs=[folds], outputs=[o / "cv"],
                           must_refuse="a non-finite value in the data" if not d.finite() else "")
        else:
            as_valid = draw(st.booleans())
            src = _write(draw, d, i)
            plain = ps.write_h5(prop_env.data, i / "plain.h5")
            train, valid = (plain, src) if as_valid else (src, plain)
            argv = ["grid", train, "--valid", valid, "-o", o / "run", "--method", method, "--cache-dir", c,
                    "--quiet", "--C", "0.5,2", *margs]
            case = pc.Case("grid", d.kinds + ["as valid" if as_valid else "as train"], argv, inputs=[src, plain],
                           outputs=[o / "run"], data=prop_env.data if as_valid else d,
                           must_refuse="a non-finite value in the data" if not d.finite() else "")
        pc.check(case, pc.run_cli(argv))


@kit.examples(12)
@given(data=st.data())
def test_convert_letor_text(prop_env, data):
    draw = data.draw
    if draw(st.booleans()):
        d = draw(ps.datasets())
        note(d.describe())
        text, kinds = None, d.kinds
    else:
        text, kinds = draw(ps.letor_text())
        note(f"text: {text!r}")
    with prop_env.workspace() as (i, o, c):
        src = i / "d.txt"
        if text is None:
            ps.write_text(d, src)
        else:
            src.write_text(text)
        argv = ["convert", src, "-o", o / "d.h5", "--quiet"]
        case = pc.Case("convert", kinds, argv, inputs=[src], outputs=[o / "d.h5"])
        pc.check(case, pc.run_cli(argv))


@kit.examples(16)
@given(data=st.data())
def test_the_block_stream_yields_only_finite_blocks(prop_env, data):
    """``open_dataset(path).stream()``, the one place every command reads rows through: every block
    it yields is finite, whoever wrote the file, or the stream stops with a StreamrankError naming
    the file (build item 3)."""
    import numpy as np

    import streamrank
    draw = data.draw
    d = draw(ps.datasets())
    block_bytes = draw(st.sampled_from([None, 64, 1000, 1 << 20]))
    note(f"{d.describe()}; block_bytes={block_bytes}")
    with prop_env.workspace() as (i, o, c):
        src = ps.write_h5(d, i / "d.h5")
        seen = []

        def run():
            with streamrank.open_dataset(src) as ds:
                for block, _, _ in ds.stream(**({} if block_bytes is None else {"block_bytes": block_bytes})):
                    seen.append((np.array(block.X, np.float64, copy=True), np.array(block.y, np.float64, copy=True)))

        def ok():
            for X, y in seen:
                if not (np.isfinite(X).all() and np.isfinite(y).all()):
                    return "the stream yielded a block holding a value that is not finite"
            rows = sum(len(y) for _, y in seen)
            return "" if rows == d.n else f"the stream yielded {rows} rows of {d.n}"
        case = pc.Case("Dataset.stream", d.kinds, None, inputs=[src], data=d,
                       must_refuse="a value that is not finite" if not d.finite() else "")
        case.api_ok = ok
        pc.check(case, pc.run_api(run))
