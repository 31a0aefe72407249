"""No output can be an input (issue 30, build items 4 and 8).

Each example points one output of a command (``-o``, ``--checkpoint``, ``--cache-dir``, a run
directory, ``--png-dir``) at one of its inputs: the same path, the same path spelt another way,
a symbolic link to it, a hard link to it, or the name under a symbolic link to its folder. A file
output that is an input must be refused (exit 2, one line) before any work; a folder that holds
the inputs may be written into as long as no input is replaced. Either way every input stays
byte-identical and nothing is left beside an output.
"""

import os
import shutil

from hypothesis import given, note
from hypothesis import strategies as st

import prop_checker as pc
import prop_kit as kit
import prop_strategies as ps

LINKS = ["same path", "path spelt another way", "symbolic link", "hard link", "name under a linked folder"]


def alias(target, how, out):
    """A path in ``out`` (or ``target`` itself) that names ``target``."""
    name = target.name
    if how == "same path":
        return target
    if how == "path spelt another way":
        return target.parent / ".." / target.parent.name / "." / name
    if how == "symbolic link":
        p = out / f"link-{name}"
        p.symlink_to(target)
        return p
    if how == "hard link":
        p = out / f"hard-{name}"
        os.link(target, p)
        return p
    d = out / "linked-folder"
    d.symlink_to(target.parent, target_is_directory=True)
    return d / name


def folder_alias(folder, how, out):
    """A path naming the folder ``folder`` (a hard link to a folder cannot be made: the folder itself)."""
    if how in ("same path", "hard link"):
        return folder
    if how == "path spelt another way":
        return folder / ".." / folder.name / "."
    p = out / ("link-folder" if how == "symbolic link" else "linked-folder")
    p.symlink_to(folder, target_is_directory=True)
    return p


def _case(env, draw, i, o, c):
    """(command, argv, inputs, outputs, refusal, kinds) of one collision."""
    how = draw(st.sampled_from(LINKS))
    command = draw(st.sampled_from(["convert", "train", "train --checkpoint", "train --cache-dir", "predict",
                                    "select-features", "grid", "cv", "report"]))
    kinds = [f"output {how}"]
    if command == "convert":
        src = ps.write_text(env.data, i / "d.txt")
        out = alias(src, how, o)
        return command, ["convert", src, "-o", out, "--quiet"], [src], [out], "the output is the input", kinds
    if command.startswith("train"):
        data = ps.write_h5(env.data, i / ("checkpoint.h5" if command.endswith("checkpoint") else "d.h5"))
        valid = ps.write_h5(env.valid_data, i / "v.h5")
        argv = ["train", data, "--valid", valid, "--C", "0.5,1", "--quiet", "--method",
                draw(st.sampled_from(["primal", "nystroem", "exact"])), "--components", "4"]
        if command == "train":
            target = draw(st.sampled_from([data, valid]))
            out = alias(target, how, o)
            return command, argv + ["-o", out], [data, valid], [out], "the output is an input", kinds
        folder = folder_alias(i, how, o)
        flag = command.split(" ")[1]
        # the checkpoint's file is named as the data: it would replace them; a cache folder holding
        # the inputs may be used as long as none is replaced
        refuse = "the checkpoint file is the data" if flag == "--checkpoint" else ""
        return (command, argv + ["-o", o / "m.h5", flag, folder], [data, valid], [o / "m.h5"], refuse,
                kinds + [f"{flag} the inputs' folder"])
    if command == "predict":
        model = i / "m.h5"
        shutil.copy(env.models[draw(st.sampled_from(kit.METHODS))], model)
        data = ps.write_h5(env.data, i / "d.h5")
        out = alias(draw(st.sampled_from([model, data])), how, o)
        return command, ["predict", model, data, "-o", out], [model, data], [out], "the output is an input", kinds
    if command == "select-features":
        data = ps.write_h5(env.data, i / "d.h5")
        out = alias(data, how, o)
        return command, ["select-features", data, "-o", out, "--quiet"], [data], [out], "the output is the input", kinds
    if command == "grid":
        # the training data where the run's best model goes: RUN_DIR/model.h5
        run = i / "run"
        run.mkdir()
        data = ps.write_h5(env.data, run / "model.h5")
        valid = ps.write_h5(env.valid_data, i / "v.h5")
        target = folder_alias(run, how, o)
        return (command, ["grid", data, "--valid", valid, "-o", target, "--C", "1", "--quiet"], [data, valid], [target],
                "RUN_DIR/model.h5 is the training data", kinds + ["run directory holds the data"])
    if command == "cv":
        folds = i / "folds"
        shutil.copytree(env.folds, folds)
        target = folder_alias(folds, how, o)
        return (command, ["cv", folds, "-o", target, "--C", "1", "--quiet"], [folds / "Fold1"], [target], "",
                kinds + ["run directory is the folds directory"])
    run = i / "run"
    shutil.copytree(env.run, run)
    grid_json = run / "grid.json"
    if draw(st.booleans()):
        out = alias(grid_json, how, o)
        return command, ["report", run, "-o", out, "--no-plots", "--quiet"], [run], [out], "REPORT is grid.json", kinds
    png = folder_alias(run, how, o)
    return (command, ["report", run, "-o", o / "r.html", "--png-dir", png, "--quiet"], [run], [o / "r.html"], "",
            kinds + ["--png-dir the run directory"])


@kit.examples(18)
@given(data=st.data())
def test_no_output_is_an_input(prop_env, data):
    with prop_env.workspace() as (i, o, c):
        command, argv, inputs, outputs, refuse, kinds = _case(prop_env, data.draw, i, o, c)
        note(f"argv: {argv}")
        case = pc.Case(command.split(" ")[0], kinds, argv, inputs=inputs, outputs=outputs, data=prop_env.data,
                       must_refuse=refuse)
        pc.check(case, pc.run_cli(argv))
