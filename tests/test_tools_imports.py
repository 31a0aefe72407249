"""Every streamrank import written in tools/ (including the code the benchmarks run in child
processes, which lives in strings) names a module and attributes that exist: a module move must not
leave a benchmark that no longer starts."""

import importlib
import re
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"
FROM = re.compile(r"^\s*from (streamrank(?:\.\w+)*) import \(?([\w\s,]+?)\)?\s*(?:#.*)?$", re.M)
PLAIN = re.compile(r"^\s*import (streamrank(?:\.\w+)*)", re.M)


def written_imports(text):
    for m in FROM.finditer(text):
        names = [n.split(" as ")[0].strip() for n in m.group(2).split(",") if n.strip()]
        yield m.group(1), names, text.count("\n", 0, m.start()) + 1
    for m in PLAIN.finditer(text):
        yield m.group(1), [], text.count("\n", 0, m.start()) + 1


@pytest.mark.parametrize("path", sorted(TOOLS.rglob("*.py")), ids=lambda p: str(p.relative_to(TOOLS)))
def test_tools_import_what_exists(path):
    text = path.read_text()
    for module, names, line in written_imports(text):
        mod = importlib.import_module(module)
        for name in names:
            if not hasattr(mod, name):  # a submodule not imported by its package yet
                try:
                    importlib.import_module(f"{module}.{name}")
                except ModuleNotFoundError:
                    pytest.fail(f"{path.relative_to(TOOLS)}:{line}: {module} has no {name}")


def test_the_check_sees_a_stale_import(tmp_path):
    assert list(written_imports("x\nfrom streamrank import _pairkernels as pk  # old\n")) == [
        ("streamrank", ["_pairkernels"], 2)]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("streamrank._pairkernels")


def test_no_tool_file_over_800_lines():
    """Issue 33: a benchmark grows by a module of its own, not by a longer script."""
    long = {str(p.relative_to(TOOLS)): n for p in TOOLS.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 800}
    assert not long, f"files under tools/ over 800 lines: {long}"


@pytest.mark.parametrize("script", ["bench_peers.py", "bench_export.py", "bench_kernel_approx.py"])
def test_split_benchmarks_start(script):
    """The entry scripts of the split benchmarks (tools/bench/, tools/_kernel_approx_child.py) still
    parse their command line."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, str(TOOLS / script), "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "usage:" in p.stdout
