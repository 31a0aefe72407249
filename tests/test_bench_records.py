"""The benchmarks keep what they print (issue 33): every table a tool prints is also recorded, and a
record holds the printed rows, numbers as numbers."""
import ast
import json
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))

import _benchutil  # noqa: E402
from bench.run import data_rows, echoed  # noqa: E402


def calls(tree, name):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == name]


def test_every_function_that_prints_a_table_records_it():
    """A function under tools/ that calls table(rows, columns) also calls record(...) (or prints
    through table_record, which does both)."""
    missing = []
    for path in sorted(TOOLS.rglob("*.py")):
        if path.name == "_benchutil.py":
            continue
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef) and calls(fn, "table") and not calls(fn, "record"):
                missing.append(f"{path.relative_to(TOOLS)}:{fn.lineno} {fn.name}")
    assert not missing, "tables printed but not recorded: " + ", ".join(missing)


def test_the_check_sees_a_table_without_a_record():
    tree = ast.parse("def f(rows):\n    table(rows, [])\n")
    fn = tree.body[0]
    assert calls(fn, "table") and not calls(fn, "record")


def test_table_record_prints_and_keeps_the_same_rows(tmp_path, capsys):
    rows = [{"tool": "a", "seconds": 1.25, "runs": "1.25 1.30", "runs_s": [1.25, 1.3]},
            {"tool": "b", "seconds": None, "note": "not available"}]
    cols = [("tool", "tool", None), ("seconds", "median s", "{:.2f}"), ("runs", "each run s", None),
            ("note", "note", None)]
    rec = _benchutil.table_record("demo", "sec", rows, cols, notes=["n"], params={"C": 1.0}, results_dir=tmp_path)
    out = capsys.readouterr().out
    assert "1.25" in out and "not available" in out
    lines = (tmp_path / "demo.jsonl").read_text().splitlines()
    assert len(lines) == 1
    back = json.loads(lines[0])
    assert back == json.loads(json.dumps(rec))
    assert back["rows"][0]["seconds"] == 1.25 and back["rows"][0]["runs_s"] == [1.25, 1.3]
    assert back["columns"][1] == ["seconds", "median s", "{:.2f}"]
    assert back["section"] == "sec" and back["notes"] == ["n"] and back["params"] == {"C": 1.0}


def test_data_rows_drop_the_runs_own_records():
    rows = [{"section": "x", "tool": "t", "median": 2.0, "ok": [{"out": Path("/tmp/o")}], "key": "k", "kind": "s"},
            {"section": "y", "tool": "u"}]
    assert data_rows(rows) == [{"section": "x", "tool": "t", "median": 2.0}, {"section": "y", "tool": "u"}]
    assert data_rows(rows, "y") == [{"section": "y", "tool": "u"}]


def test_echoed_prints_and_keeps_the_lines(capsys):
    kept = []
    with echoed(kept):
        print("first")
        print()
        print("second")
    assert capsys.readouterr().out == "first\n\nsecond\n"
    assert kept == ["first", "second"]
