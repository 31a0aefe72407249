"""--json (README: "prints one JSON object last"): every command that takes it ends its standard
output with ONE line holding ONE JSON object, strict JSON (no NaN or Infinity), whatever else it
printed before."""

import json

import pytest

from streamrank.cli import main


def _strict(text):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def _commands(tiny, model, tmp):
    t, v, e = (str(tiny[p]) for p in ("train", "valid", "test"))
    return {
        "convert": ["convert", str(tiny["test_txt"]), "-o", str(tmp / "c.h5")],
        "info dataset": ["info", e],
        "info model": ["info", str(model)],
        "train": ["train", t, "--valid", v, "--C", "0.5,1", "-o", str(tmp / "m.h5")],
        "train text": ["train", str(tiny["train_txt"]), "-o", str(tmp / "mt.h5"), "--cache-dir", str(tmp / "cache")],
        "predict": ["predict", str(model), e, "-o", str(tmp / "s.txt")],
        "eval": ["eval", e, str(tmp / "s.txt"), "--per-query"],
        "select-features": ["select-features", t, "-k", "3"],
        "grid": ["grid", t, "--valid", v, "-o", str(tmp / "run"), "--C", "0.5,1"],
        "cv": ["cv", str(_folds(tiny, tmp)), "-o", str(tmp / "cvrun"), "--C", "1"],
    }


def _folds(tiny, tmp):
    """One fold of tiny's parts, as cv reads them (FoldK/train, vali, test)."""
    fold = tmp / "folds" / "Fold1"
    fold.mkdir(parents=True, exist_ok=True)
    for part, name in (("train", "train"), ("valid", "vali"), ("test", "test")):
        if not (fold / f"{name}.h5").exists():
            (fold / f"{name}.h5").symlink_to(tiny[part])
    return tmp / "folds"


NAMES = ["convert", "info dataset", "info model", "train", "train text", "predict", "eval", "select-features", "grid",
         "cv"]


@pytest.mark.parametrize("name", NAMES)
def test_the_last_line_of_stdout_is_one_json_object(tiny, tiny_model, tmp_path, capsys, name):
    cmds = _commands(tiny, tiny_model, tmp_path)
    if name == "eval":  # a score file first
        assert main(cmds["predict"]) == 0
        capsys.readouterr()
    assert main(cmds[name] + ["--json"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("\n")
    last = out.splitlines()[-1]
    assert isinstance(_strict(last), dict), last[:200]


def test_json_and_scores_on_standard_output_are_refused(tiny, tiny_model, capsys):
    assert main(["predict", str(tiny_model), str(tiny["test"]), "-o", "-", "--json"]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "--json and -o - both write to standard output" in cap.err


def test_emit_json_writes_strict_json():
    import io
    import sys

    import numpy as np

    from streamrank.cli.common import emit_json
    buf, saved = io.StringIO(), sys.stdout
    sys.stdout = buf
    try:
        emit_json({"a": float("nan"), "b": np.float32(0.5), "c": [np.int64(3), float("inf")], "d": {1: None}})
    finally:
        sys.stdout = saved
    assert buf.getvalue().count("\n") == 1
    assert _strict(buf.getvalue()) == {"a": None, "b": 0.5, "c": [3, None], "d": {"1": None}}
    with pytest.raises(TypeError):
        emit_json([1, 2])
