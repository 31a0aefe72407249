"""The package's layers: every import runs down (or within a layer), and no modules import each
other in a cycle. The order is the data flow of DESIGN.md: passes are run by an executor
(execution), rows are read (io) or generated (synthetic), mapped (features),
kept between passes (cache), measured (evaluation), turned into an objective (objectives) that a solver minimises
(solvers); models and checkpoints are files (state), which export writes in other programs' formats (export); features are chosen (selection, which
checkpoints its pass); training runs the path; workflows (grid, cross-validation, report) run many trainings; the faces (CLI,
estimator, demo) sit on top."""

import ast
from pathlib import Path

import pytest

import streamrank

PKG = Path(streamrank.__file__).resolve().parent
# lowest first; a module may import from its own layer and the ones before it
LAYERS = [
    {"errors", "units", "params", "settings", "_version", "_native", "faultpoints"},
    {"execution"},
    {"io"},
    {"synthetic"},
    {"features"},
    {"cache"},
    {"evaluation"},
    {"objectives"},
    {"solvers"},
    {"state"},
    {"export"},
    {"selection"},
    {"training"},
    {"workflow"},
    {"console"},
    {"estimator", "cli", "demo", "__init__", "__main__"},
]


def module_name(path):
    rel = path.relative_to(PKG).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["streamrank", *parts]) if parts else "streamrank"


def layer_of(name):
    """Layer index of a dotted module name under streamrank."""
    parts = name.split(".")
    head = parts[1] if len(parts) > 1 else "__init__"
    for k, members in enumerate(LAYERS):
        if head in members:
            return k
    raise AssertionError(f"{name}: its top-level name {head!r} is in no layer; add it to LAYERS")


def imports(path, me=None):
    """(dotted module imported, line, at module level) for every streamrank import in a file
    (module ``me``, by default the one at ``path`` in the package)."""
    tree = ast.parse(path.read_text(), str(path))
    me = me or module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    top_level = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("streamrank"):
                continue
            targets = [mod]
            if not node.module or mod == "streamrank" or (PKG / Path(*mod.split(".")[1:]) / "__init__.py").exists():
                # from package import module: the module is what is imported
                targets = [f"{mod}.{a.name}" if (PKG / Path(*mod.split(".")[1:], a.name + ".py")).exists()
                           or (PKG / Path(*mod.split(".")[1:], a.name)).is_dir() else mod for a in node.names]
            out += [(t, node.lineno, id(node) in top_level) for t in targets]
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno, id(node) in top_level) for a in node.names if a.name.startswith("streamrank")]
    return out


FILES = sorted(PKG.rglob("*.py"))


def test_every_module_is_in_a_layer():
    for f in FILES:
        layer_of(module_name(f))


def upward_imports(path, me=None):
    """The imports of a file that run up the layers: [(module, line)]."""
    mine = layer_of(me or module_name(path))
    return [(mod, line) for mod, line, _ in imports(path, me) if mod != "streamrank" and layer_of(mod) > mine]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_imports_run_down_the_layers(path):
    up = upward_imports(path)
    assert not up, f"{path.relative_to(PKG)} imports from higher layers: " + ", ".join(
        f"{m} (layer {layer_of(m)}) at line {line}" for m, line in up)


def import_graph(files=None, *, lazy=True):
    """module -> the streamrank modules it imports: at module level, and with ``lazy`` inside
    functions too (a function-level import is a cycle all the same once the function runs). A
    package's ``__init__`` counts where it is named (``from streamrank.cli import main``), not as the
    parent every submodule import passes through (a package that imports its own modules would
    otherwise be a cycle with each of them)."""
    graph = {}
    for f in FILES if files is None else files:
        me = module_name(f)
        targets = set()
        for m, _, top in imports(f, me):
            if (top or lazy) and m != "streamrank":
                targets.add(m)
        graph[me] = targets - {me}
    return graph


def cycles(graph):
    """Every strongly connected set of more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = iter(range(10 ** 9))

    def visit(v):
        index[v] = low[v] = next(counter)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    """No modules import each other in a cycle, counting imports inside functions (issue 33: a lazy
    import hides a cycle from start-up, not from the design)."""
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_sees_a_lazy_cycle():
    graph = {"streamrank.a": {"streamrank.b"}, "streamrank.b": {"streamrank.c"}, "streamrank.c": {"streamrank.a"},
             "streamrank.d": {"streamrank.a"}}
    assert cycles(graph) == [["streamrank.a", "streamrank.b", "streamrank.c"]]
    assert cycles({"streamrank.a": {"streamrank.b"}, "streamrank.b": set()}) == []


def test_the_checker_sees_upward_imports(tmp_path):
    """The walk itself, on a file posing as streamrank.io._probe: absolute, relative and lazy
    imports of a higher layer are reported, a lower layer's is not."""
    probe = tmp_path / "_probe.py"
    probe.write_text("from streamrank.errors import ParameterError\n"
                     "from ..training.linear import train_linear\n"
                     "def f():\n    from streamrank.state import model\n")
    up = upward_imports(probe, "streamrank.io._probe")
    assert up == [("streamrank.training.linear", 2), ("streamrank.state.model", 4)]
