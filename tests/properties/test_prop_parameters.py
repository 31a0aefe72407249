"""Numeric parameters over the whole float range, for every command (issue 30, build item 8).

Each example takes a command's ordinary command line on a small plain dataset and sets one to three
of its numeric options to values drawn from the whole float range as typed (0, negatives,
subnormals, 1e-300, 1e300, inf, nan, integers where floats are expected, strings). Every case
must end within its bound, exit 0 with a finite converged-or-capped model whose objective is at
most f(0), or exit 2 with one line; inf and nan (and C or gamma <= 0) are always refused; inputs
stay byte-identical and nothing is left beside an output.
"""

import math

from hypothesis import given, note
from hypothesis import strategies as st

import prop_checker as pc
import prop_kit as kit
import prop_strategies as ps

NUM = ps.numbers()


def _list(draw):
    """One to three values (a path), or the power grammar."""
    if draw(st.integers(0, 4)) == 0:
        return f"2^{draw(NUM)}:2^{draw(NUM)}"
    return ",".join(draw(st.lists(NUM, min_size=1, max_size=3)))


def _cost_spec(draw):
    return draw(st.sampled_from(["none", "graded", "gain_difference", f"0-1:{draw(NUM)}",
                                 f"0-1:{draw(NUM)},1-2:{draw(NUM)}"]))


def _refused(flag, value):
    """Why this value must be refused, or "" (the ranges every parameter table must hold)."""
    if flag in ("--C", "--gamma", "--lambda", "--components", "--eta"):
        parts = str(value).replace("2^", "").replace(":", ",").split(",")
    elif flag == "--pair-cost":
        parts = [item.split(":", 1)[1] for item in str(value).split(",") if ":" in item]
    else:
        parts = [value]
    for v in parts:
        try:
            x = float(v.strip())
        except ValueError:
            continue
        if math.isnan(x) or math.isinf(x):
            return f"{flag} {value}: inf and nan are always refused"
        if flag in ("--C", "--gamma") and x <= 0 and "2^" not in str(value):
            return f"{flag} {value}: must be > 0"
    return ""


def _apply(draw, argv, table, n=(1, 3)):
    """Sets ``n`` options drawn from ``table`` (flag -> value drawer); returns (argv, kinds, refusal)."""
    flags = draw(st.lists(st.sampled_from(sorted(table)), min_size=n[0], max_size=n[1], unique=True))
    kinds, refuse = [], ""
    for flag in flags:
        value = table[flag](draw)
        argv += [f"{flag}={value}"] if flag.startswith("--") else [flag, value]
        cls = ps.value_class(value) if table[flag] in (_num, _size) else "list or spec"
        kinds.append(f"{flag} {cls}")
        refuse = refuse or _refused(flag, value)
    note(f"argv: {argv}")
    return argv, kinds, refuse


def _num(draw):
    return draw(NUM)


def _size(draw):
    return draw(kit.size_text())


COMMON = {"--tol": _num, "--max-iter": _num, "--seed": _num, "--memory-budget": _size, "--partition-rows": _num}
TRAIN = {**COMMON, "--C": _list, "--gap-tol": _num, "--pair-cost": _cost_spec}
KERNEL = {"--gamma": _list, "--degree": _num, "--coef0": _num}
BY_METHOD = {
    "primal": {**TRAIN, "--eta": _num},
    "nystroem": {**TRAIN, **KERNEL, "--components": _num, "--rank": _num, "--eta": _num},
    "rff": {**TRAIN, "--gamma": _list, "--components": _num},
    "exact": {**TRAIN, **KERNEL, "--eta": _num},
    "clsr": {"--lambda": _list, **KERNEL, "--components": _num, "--memory-budget": _size, "--seed": _num},
}


@kit.examples(24)
@given(data=st.data())
def test_train_with_hostile_parameters(prop_env, data):
    env, draw = prop_env, data.draw
    method = draw(st.sampled_from(kit.METHODS))
    table = dict(BY_METHOD[method])
    if method == "primal" and draw(st.booleans()):
        table.update({"--abs-gtol": _num, "--abs-dtol": _num})
    with env.workspace() as (i, o, c):
        src = ps.write_h5(env.data, i / "train.h5")
        valid = ps.write_h5(env.valid_data, i / "valid.h5")
        argv = ["train", src, "-o", o / "m.h5", "--method", method, "--cache-dir", c, *kit.METHOD_ARGS[method]]
        argv, kinds, refuse = _apply(draw, argv, table)
        if method in ("nystroem", "exact", "clsr"):
            joined = " ".join(map(str, argv))
            kernels = ["poly"] if "--degree" in joined else ["poly", "sigmoid"] if "--coef0" in joined else \
                ["rbf", "laplacian", "poly", "sigmoid", "linear"]
            argv += ["--kernel", draw(st.sampled_from(kernels))]
        if "--eta" in " ".join(map(str, argv)):
            argv += ["--loss", "smooth_hinge"]
        if "--abs-gtol" in " ".join(map(str, argv)):
            argv += ["--solver", "newton_yuan"]
        if draw(st.booleans()):
            argv += ["--valid", valid]
        argv += ["--quiet"] if draw(st.booleans()) else []
        pair_cost = next((a.split("=", 1)[1] for a in map(str, argv) if a.startswith("--pair-cost=")), None)
        case = pc.Case(f"train {method}", kinds, argv, inputs=[src, valid], outputs=[o / "m.h5"], data=env.data,
                       train={"pair_cost": pair_cost, "loss": "smooth_hinge" if "--loss" in argv else "squared_hinge"},
                       must_refuse=refuse)
        pc.check(case, pc.run_cli(argv))


GRID = {**COMMON, "--C": _list, "--gamma": _list, "--components": _list, "--eta": _list, "--lambda": _list,
        "--degree": _num, "--coef0": _num, "--rank": _num}


@kit.examples(8)
@given(data=st.data())
def test_grid_with_hostile_parameters(prop_env, data):
    env, draw = prop_env, data.draw
    methods = draw(st.lists(st.sampled_from(kit.METHODS), min_size=1, max_size=2, unique=True))
    with env.workspace() as (i, o, c):
        src, valid = ps.write_h5(env.data, i / "train.h5"), ps.write_h5(env.valid_data, i / "valid.h5")
        argv = ["grid", src, "--valid", valid, "-o", o / "run", "--method", ",".join(methods), "--cache-dir", c,
                "--quiet"]
        if set(methods) & {"nystroem", "rff", "clsr"}:
            argv += ["--components", "4"]
        argv, kinds, refuse = _apply(draw, argv, GRID)
        if any(str(a).startswith("--eta=") for a in argv):
            argv += ["--loss", "smooth_hinge"]
        if any(str(a).startswith(("--degree=", "--coef0=")) for a in argv):
            argv += ["--kernel", "poly"]
        case = pc.Case("grid", kinds + [f"methods {','.join(methods)}"], argv, inputs=[src, valid],
                       outputs=[o / "run"], data=env.data, must_refuse=refuse)
        pc.check(case, pc.run_cli(argv))


@kit.examples(4)
@given(data=st.data())
def test_cv_with_hostile_parameters(prop_env, data):
    env, draw = prop_env, data.draw
    method = draw(st.sampled_from(kit.METHODS))
    with env.workspace() as (i, o, c):
        import shutil
        folds = i / "folds"
        shutil.copytree(env.folds, folds)
        argv = ["cv", folds, "-o", o / "cv", "--method", method, "--cache-dir", c, "--quiet"]
        if method in ("nystroem", "rff", "clsr"):
            argv += ["--components", "4"]
        argv, kinds, refuse = _apply(draw, argv, {k: v for k, v in GRID.items() if k != "--components"}, n=(1, 2))
        if any(str(a).startswith("--eta=") for a in argv):
            argv += ["--loss", "smooth_hinge"]
        case = pc.Case("cv", kinds + [f"method {method}"], argv, inputs=[folds], outputs=[o / "cv"],
                       must_refuse=refuse)
        pc.check(case, pc.run_cli(argv))


SELECT = {"-k": _num, "--tradeoff": _num, "--importance": lambda draw: f"ndcg@{draw(NUM)}",
          "--memory-budget": _size, "--commit-every": _num, "--partition-rows": _num}


@kit.examples(12)
@given(data=st.data())
def test_select_features_with_hostile_parameters(prop_env, data):
    env, draw = prop_env, data.draw
    with env.workspace() as (i, o, c):
        src = ps.write_h5(env.data, i / "train.h5")
        argv, kinds, refuse = _apply(draw, ["select-features", src, "-o", o / "gas.h5", "--quiet"], SELECT)
        if draw(st.booleans()):
            argv += ["--checkpoint", o / "ck"]
        case = pc.Case("select-features", kinds, argv, inputs=[src], outputs=[o / "gas.h5", o / "ck"],
                       data=env.data, must_refuse=refuse)
        pc.check(case, pc.run_cli(argv))


@kit.examples(10)
@given(data=st.data())
def test_convert_predict_eval_with_hostile_parameters(prop_env, data):
    env, draw = prop_env, data.draw
    command = draw(st.sampled_from(["convert", "predict", "eval"]))
    with env.workspace() as (i, o, c):
        if command == "convert":
            src = ps.write_text(env.data, i / "train.txt")
            argv, kinds, refuse = _apply(draw, ["convert", src, "-o", o / "d.h5", "--quiet"],
                                         {"--n-features": _num, "--memory-budget": _size, "--commit-every": _num})
            inputs, outputs = [src], [o / "d.h5"]
        elif command == "predict":
            method = draw(st.sampled_from(kit.METHODS))
            model = i / "m.h5"
            model.write_bytes(env.models[method].read_bytes())
            src = ps.write_h5(env.data, i / "d.h5")
            argv, kinds, refuse = _apply(draw, ["predict", model, src, "-o", o / "s.txt"],
                                         {"--memory-budget": _size, "--partition-rows": _num})
            inputs, outputs = [model, src], [o / "s.txt"]
        else:
            src = ps.write_h5(env.data, i / "d.h5")
            scores = i / "s.txt"
            scores.write_bytes(env.scores.read_bytes())
            argv, kinds, refuse = _apply(draw, ["eval", src, scores, "--json"], {"--memory-budget": _size}, n=(1, 1))
            inputs, outputs = [src, scores], []
        case = pc.Case(command, kinds, argv, inputs=inputs, outputs=outputs, data=env.data, must_refuse=refuse)
        pc.check(case, pc.run_cli(argv))
