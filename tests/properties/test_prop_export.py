"""``streamrank export`` over inputs nobody listed (issue 32, under issue 30's rules): every model
kind in every format, with hostile feature-name files, model names, format words and outputs that
alias the model. Each run exits 0 with a whole file its consumer reads, or 2 with one line and no
file; the model stays byte-identical. A linear-only format must refuse a kernel model; onnx and
json must never refuse a model."""

import shutil
import unicodedata

from hypothesis import given, note
from hypothesis import strategies as st

import prop_checker as pc
import prop_kit as kit

FORMATS = ["onnx", "solr", "elasticsearch", "svmrank", "liblinear", "json"]
LINEAR_ONLY = {"solr", "elasticsearch", "svmrank", "liblinear"}

# a name, as a user might type it or a tool might emit it
NAMES = st.one_of(
    st.text(min_size=1, max_size=12),
    st.sampled_from(["bm25", "title bm25", "f1", "1", "#", "a:b", "q\"uote", "back\\slash", "tab\tname", "é", "∞",
                     "x" * 300, "-", "--format", ""]),
)


def printable(name):
    """A name the feature-name rules accept (non-empty, no surrounding spaces, no control character)."""
    return bool(name) and name.strip() == name and not any(unicodedata.category(c) == "Cc" for c in name)


@st.composite
def names_file(draw, d):
    """(lines of a --feature-names file, kinds): often right, often wrong in one way."""
    how = draw(st.sampled_from(["right"] * 7 + ["short", "long", "duplicate", "blank", "spaces", "empty file", "random"]))
    names = [f"feat_{j}" for j in range(1, d + 1)]
    if how == "right":
        names = draw(st.lists(NAMES.filter(printable),
                              min_size=d, max_size=d, unique=True)) if draw(st.booleans()) else names
    elif how == "short":
        names = names[:-1]
    elif how == "long":
        names = names + ["extra"]
    elif how == "duplicate":
        names[-1] = names[0]
    elif how == "blank":
        names[0] = ""
    elif how == "spaces":
        names[0] = " " + names[0]
    elif how == "empty file":
        names = []
    else:
        names = draw(st.lists(NAMES, max_size=d + 2))
    return names, [f"feature names: {how}"]


@kit.examples(20)
@given(data=st.data())
def test_export_writes_a_whole_file_or_refuses_in_one_line(prop_env, data):
    draw = data.draw
    method = draw(st.sampled_from(kit.METHODS))
    fmt = draw(st.sampled_from(FORMATS * 4 + ["ONNX", "pmml", "", "json "]))
    with prop_env.workspace() as (i, o, c):
        model = i / "m.h5"
        shutil.copy(prop_env.models[method], model)
        kinds = [f"model {method}", f"format {fmt!r}"]
        out = o / draw(st.sampled_from(["model.out", "m.onnx", "x.json", "noext"]))
        where = draw(st.sampled_from(["file", "file", "file", "the model", "stdout"]))
        if where == "the model":
            out = model
        argv = ["export", model, "--format", fmt, "-o", "-" if where == "stdout" else out]
        inputs, refuse = [model], ""
        if draw(st.booleans()):
            lines, k = draw(names_file(prop_env.data.d))
            f = i / "names.txt"
            f.write_text("\n".join(lines) + ("\n" if lines and draw(st.booleans()) else ""), encoding="utf-8")
            argv += ["--feature-names", f]
            inputs.append(f)
            kinds += k
        bad_name = dashed = False
        if draw(st.booleans()):
            name = draw(NAMES)
            argv += ["--name", name]
            kinds.append("--name")
            # export's rule (docs/formats.md): non-empty printable text without surrounding spaces
            bad_name = (not name.strip() or name != name.strip()
                        or any(unicodedata.category(ch) in ("Cc", "Cf") for ch in name))
            # a value that starts with '-' may be read by argparse as an option ("--format") or as
            # the value ("-", "-1"): either a name or a usage error of one line, no prediction
            dashed = name.startswith("-")
        if where == "the model":
            refuse = "the output is the model"
        elif fmt in LINEAR_ONLY and method != "primal":  # the models of the session are rbf: not linear
            refuse = f"{fmt} holds weights only, and a {method} rbf model is not linear"
        elif fmt not in FORMATS:
            refuse = f"no format {fmt!r}"
        elif bad_name and not dashed:
            refuse = "--name must be non-empty printable text without surrounding spaces"
        note(f"argv: {argv}")
        case = pc.Case("export", kinds, argv, inputs=inputs, outputs=[] if where == "stdout" else [out],
                       data=prop_env.data, must_refuse=refuse)
        res = pc.run_cli(argv)
        # onnx and json hold every model: a refusal must come from the names, the output or the format word
        if res.rc == 2 and fmt in ("onnx", "json") and where == "file" and not (bad_name or dashed) and not any(
                k.startswith("feature names") and k != "feature names: right" for k in kinds):
            pc._fail(case, res, f"{fmt} refused a {method} model")
        pc.check(case, res)
