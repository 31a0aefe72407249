"""The command line: eval against the official LETOR outputs, input-order scores, errors, demo."""

import json

import numpy as np
import pytest

from letor_oracle import parse_letor
from streamrank.cli import main
from streamrank.evaluation.metrics import evaluate

from locations import DATA  # noqa: E402

EVAL = DATA / "letor4_eval"


@pytest.mark.parametrize("name", ["ties", "fine"])
def test_eval_cli_reproduces_official_script(mq2008, tmp_path, capsys, name):
    data = mq2008 / "Fold1" / "test.txt.gz"
    assert main(["eval", str(data), str(EVAL / f"scores_{name}.txt"), "--per-query",
                 "--cache-dir", str(tmp_path)]) == 0
    want = (EVAL / f"scores_{name}.perl_output.txt").read_text().splitlines()
    got = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("#")]
    assert got[:len(want)] == want


def test_eval_maps_input_order_scores_through_row(tmp_path, capsys):
    rng = np.random.default_rng(3)
    lines = [f"{rng.integers(0, 3)} qid:{rng.integers(0, 6)} 1:{rng.random():.4f}" for _ in range(200)]
    src = tmp_path / "s.txt"
    src.write_text("\n".join(lines) + "\n")
    scores = rng.standard_normal(200).round(1)  # coarse: many ties, so the order within a query matters
    np.savetxt(tmp_path / "scores.txt", scores)
    h5 = tmp_path / "s.h5"
    assert main(["convert", str(src), "-o", str(h5), "--quiet"]) == 0
    assert main(["eval", str(h5), str(tmp_path / "scores.txt"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    o = parse_letor(src)
    want = evaluate(o["y"], scores[o["row"]], o["query_ptr"], qid=o["qid"]).to_dict()
    assert got == want


def test_eval_refuses_wrong_number_of_scores(tmp_path, capsys):
    src = tmp_path / "s.txt"
    src.write_text("1 qid:1 1:1\n0 qid:1 1:2\n")
    (tmp_path / "scores.txt").write_text("0.5\n")
    assert main(["eval", str(src), str(tmp_path / "scores.txt"), "--cache-dir", str(tmp_path / "c")]) == 2
    assert "scores.txt: 1 scores but the data has 2 rows" in capsys.readouterr().err


@pytest.mark.parametrize("extra,message", [
    (["--method", "exact", "--kernel", "sigmoid"], "kernel=sigmoid is not positive semi-definite"),
    (["--gamma", "0.5"], "--gamma applies to --method nystroem or rff or exact or clsr, not to primal; drop --gamma"),
    (["--method", "rff", "--kernel", "poly"], "--method rff supports --kernel rbf or laplacian"),
    (["--method", "nystroem", "--gamma", "-1"], "argument --gamma: gamma must be a finite number > 0; got -1 (from '-1'). Pass --gamma 1"),
    (["--C", "-1"], "argument --C: C must be a finite number > 0; got -1 (from '-1'). Pass --C 1"),
    (["--resume"], "--resume needs --checkpoint DIR"),
])
def test_train_refuses_what_is_not_there_yet(tmp_path, capsys, extra, message):
    src = tmp_path / "s.txt"
    src.write_text("1 qid:1 1:1\n0 qid:1 1:2\n")
    assert main(["train", str(src), "-o", str(tmp_path / "m.h5"), "--cache-dir", str(tmp_path), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "m.h5").exists()


def test_demo_runs(tmp_path, capsys):
    assert main(["demo", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "[3/4] trained the linear RankSVM" in out and "[4/4] test set" in out
    assert "MeanNDCG" in out and (tmp_path / "model.h5").exists()


def test_library_messages_are_printed_in_the_cli_terms(tmp_path, capsys):
    """The library says C=0.5; the CLI says --C 0.5 (cli.translate), for errors and log lines."""
    from streamrank.cli import translate
    from locations import DATA as data
    assert main(["train", str(data / "dataset_v1.h5"), "-o", str(tmp_path / "m.h5"), "--C", "1", "--tol", "-1"]) == 2
    err = capsys.readouterr().err
    assert "tol must be a finite number > 0; got -1.0. Pass --tol 1" in err  # the sign slip mended (params.suggest)
    assert translate("start again with resume=False; another directory (checkpoint=DIR)") == (
        "start again without --resume; another directory (--checkpoint DIR)")
    assert translate("C=0.01: tron eps=0.001; kernel=poly with coef0=-1") == "C=0.01: tron eps=0.001; kernel=poly with coef0=-1"
    assert translate("feature index 0; use zero_based=True") == "feature index 0; pass --zero-based"
    assert translate("n_components must be an integer >= 1; got 0. Use n_components=1000") == (
        "n_components must be an integer >= 1; got 0. Pass --components 1000")


def test_no_library_message_names_a_flag():
    """Flags belong to the CLI: no string in the library outside streamrank/cli/ spells one, but for
    the settings table (streamrank/settings.py), where each setting's flag and help are declared."""
    import ast
    import re
    import streamrank
    from pathlib import Path
    pkg = Path(streamrank.__file__).parent
    bad = []
    for f in pkg.rglob("*.py"):
        if f.relative_to(pkg).parts[0] in ("cli", "settings.py"):
            continue
        tree = ast.parse(f.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if re.search(r"(?<![\w-])--[A-Za-z]", node.value):
                    bad.append(f"{f.relative_to(pkg)}:{node.lineno}: {node.value[:60]!r}")
    assert not bad, bad


def test_text_without_qid_takes_a_query_file_or_its_sibling(tmp_path, capsys):
    """LightGBM's layout: data.txt without qid: and data.txt.query with the group sizes beside it."""
    rng = np.random.default_rng(4)
    rows = [f"{rng.integers(3)} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(rng.random(5)))
            for _ in range(60)]
    data = tmp_path / "lgb.txt"
    data.write_text("\n".join(rows) + "\n")
    cache = ["--cache-dir", str(tmp_path / "c")]
    assert main(["train", str(data), "-o", str(tmp_path / "m.h5"), *cache]) == 2
    assert "pass --query-file F with the group sizes" in capsys.readouterr().err
    sizes = tmp_path / "groups.txt"
    sizes.write_text("20\n25\n15\n")
    assert main(["train", str(data), "-o", str(tmp_path / "m.h5"), "--query-file", str(sizes), *cache]) == 0
    (tmp_path / "lgb.txt.query").write_text("20\n25\n15\n")  # picked up beside the data
    assert main(["predict", str(tmp_path / "m.h5"), str(data), "-o", str(tmp_path / "s.txt"), *cache]) == 0
    assert main(["eval", str(data), str(tmp_path / "s.txt"), "--json", *cache]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["n_queries"] == 3
    assert main(["eval", str(data), str(tmp_path / "s.txt"), "--query-file", str(sizes), *cache]) == 0


def test_every_option_explains_itself_and_its_default():
    """Issue 16: every option of every command has help text, and each that takes a value says its default."""
    import argparse
    from streamrank.cli import build_parser
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    bad = []
    for name, sp in sub.choices.items():
        for a in sp._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            flag = a.option_strings[-1] if a.option_strings else a.dest
            if not a.help:
                bad.append(f"{name} {flag}: no help")
            elif a.option_strings and not a.required and not isinstance(a, argparse._StoreTrueAction) \
                    and "default" not in a.help:
                bad.append(f"{name} {flag}: no default in {a.help!r}")
    assert not bad, bad
    assert set(sub.choices) >= {"convert", "info", "eval", "demo", "train", "grid", "cv", "report", "predict",
                                "select-features"}


@pytest.mark.parametrize("argv, words", [
    (["--method", "rff", "--rank", "10"], "--rank applies to --method nystroem, not to rff"),
    (["--method", "nystroem", "--degree", "2"], "--degree applies to --kernel poly only; got --kernel rbf. Pass "
                                                "--kernel poly or drop --degree"),
    (["--abs-gtol", "1e-4"], "--abs-gtol applies to --solver newton_yuan only; got --solver tron"),
    (["--method", "clsr", "--tol", "1e-4"], "--tol applies to --method primal or nystroem or rff or exact, not to clsr"),
    (["--method", "exact", "--cache-size", "1GB"], "--cache-size applies to --method primal or nystroem or rff, not"),
    (["--eta", "0.5"], "--eta applies to --loss smooth_hinge only; got --loss squared_hinge"),
    (["--map-cache", "memory"], "--map-cache applies to --method nystroem or rff"),
    (["--cache-size", "1GB"], "pass --cache-dir DIR too"),
    (["--method", "clsr", "--gap-tol", "1e-6"], "--gap-tol applies to --method primal or nystroem or rff or exact"),
    (["--gap-tol", "2"], "gap_tol must be a finite number in (0, 1)"),
])
def test_options_that_apply_to_none_of_the_methods_are_refused(tmp_path, capsys, argv, words):
    src = tmp_path / "s.txt"
    src.write_text("1 qid:1 1:1\n0 qid:1 1:2\n")
    assert main(["train", str(src), "-o", str(tmp_path / "m.h5"), *argv]) == 2
    assert words in capsys.readouterr().err


def test_train_reports_the_gap_and_stops_at_a_gap_target(tmp_path, capsys):
    """--json carries the relative gap (a bound for a linear model: ||g||^2 / 2f, from its own
    objective and gradient norm); --gap-tol G stops where the bound is at most G, which a
    tighter solve confirms."""
    from streamrank.synthetic import write_hdf5
    write_hdf5(tmp_path / "t.h5", "small", seed=1, scale=0.1)
    runs = {}
    for name, extra in (("tol", []), ("gap", ["--gap-tol", "1e-7"]), ("tight", ["--tol", "1e-12"])):
        assert main(["train", str(tmp_path / "t.h5"), "-o", str(tmp_path / f"{name}.h5"), "--C", "0.5", "--json",
                     "--quiet", *extra]) == 0
        runs[name] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for r in runs.values():
        assert r["gap_kind"] == "bound"
        assert r["gap"] == pytest.approx(r["grad_norm"] ** 2 / (2 * r["objective"]), rel=1e-12)
    assert runs["gap"]["gap"] <= 1e-7
    f_star = runs["tight"]["objective"]
    for name in ("tol", "gap"):
        assert (runs[name]["objective"] - f_star) / runs[name]["objective"] <= runs[name]["gap"] * (1 + 1e-9) + 1e-15


def test_info_describes_a_model(tmp_path, capsys):
    from streamrank.synthetic import write_hdf5
    write_hdf5(tmp_path / "t.h5", "small", seed=1, scale=0.1)
    assert main(["train", str(tmp_path / "t.h5"), "-o", str(tmp_path / "m.h5"), "--C", "0.5", "--quiet"]) == 0
    assert main(["info", str(tmp_path / "m.h5")]) == 0
    out = capsys.readouterr().out
    assert "method: primal" in out and "chosen: C=0.5" in out and "largest |weight|" in out
    assert main(["info", str(tmp_path / "m.h5"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    from streamrank.state.model import load
    m = load(tmp_path / "m.h5")
    assert info["weights"]["weight"] == [float(v) for v in m.w] and info["weights"]["feature"][0] == 1
    assert info["trained_on"]["fingerprint"] == m.fingerprint


def test_predict_to_standard_output(tmp_path, capfd):
    from streamrank.synthetic import write_hdf5
    write_hdf5(tmp_path / "t.h5", "small", seed=1, scale=0.1)
    assert main(["train", str(tmp_path / "t.h5"), "-o", str(tmp_path / "m.h5"), "--quiet"]) == 0
    assert main(["predict", str(tmp_path / "m.h5"), str(tmp_path / "t.h5"), "-o", str(tmp_path / "s.txt")]) == 0
    capfd.readouterr()
    assert main(["predict", str(tmp_path / "m.h5"), str(tmp_path / "t.h5"), "-o", "-"]) == 0
    assert capfd.readouterr().out == (tmp_path / "s.txt").read_text()


def test_a_usage_error_is_one_line_naming_the_flag(capsys):
    """argparse's synopsis (24 lines for train) is not printed: the error's one line, ending where help is (as git's hint)."""
    assert main(["train", "x.h5", "-o", "m.h5", "--C", "inf"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("streamrank train: error: argument --C: C must be finite")
    assert err.endswith("; try 'streamrank train --help'\n") and err.count("\n") == 1
