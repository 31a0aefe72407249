"""Every ``while`` loop in ``streamrank/`` has its row in docs/loops.md, with the bound it cannot
pass (issue 30, build item 1): a loop added later without a row fails here, so the table stays the
list of every loop. The row names the file and the function that holds the loop (the innermost
``def``, as ``Class.method`` or ``outer.inner``)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE, TABLE = ROOT / "streamrank", ROOT / "docs" / "loops.md"


def _while_loops():
    """(file relative to streamrank/, qualified name of the function holding it, line) per loop."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))

        def walk(node, names):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    walk(child, names + [child.name])
                else:
                    if isinstance(child, ast.While):
                        out.append((path.relative_to(PACKAGE).as_posix(), ".".join(names), child.lineno))
                    walk(child, names)
        walk(tree, [])
    return out


def _rows():
    """The first cell of each table row of docs/loops.md."""
    return [ln.split("|")[1] for ln in TABLE.read_text().splitlines()
            if ln.startswith("| ") and not ln.startswith(("| loop", "|---"))]


def test_the_loops_are_found():
    # a scanner that finds nothing would pass the test below vacuously
    loops = _while_loops()
    assert len(loops) >= 60
    assert any(f == "solvers/tron.py" and name == "_trpcg" for f, name, _ in loops)


@pytest.mark.skipif(not TABLE.exists(), reason="docs/loops.md is not in this checkout")
def test_every_while_loop_has_a_row_with_its_bound():
    rows = _rows()
    missing = []
    for f, name, line in _while_loops():
        if not any(r.strip().startswith(f + ":") and name and name in r.replace("`", "") for r in rows):
            missing.append(f"streamrank/{f}:{line} in {name or 'the module'}")
    assert not missing, ("while loops without a row in docs/loops.md (add the loop and the bound it "
                         "cannot pass):\n" + "\n".join(missing))
