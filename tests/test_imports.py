"""The layers of kvlab/ as its imports draw them: read from the source (every import statement, a function's lazy
ones too), no module imports from a layer above its own, the imports have no cycle, and the three lab files are
imported by nobody but their command wrappers (and each other: scenario.py runs kvsim.py's caches)."""

import ast
import functools
import re

import pytest
from conftest import KVLAB

# Bottom to top. A module's layer is that of the longest prefix listed; a layer may import its own and those below.
LAYERS = (
    ("kvlab.util",),
    ("kvlab.serving",),
    ("kvlab.workloads",),
    ("kvlab.cache",),
    ("kvlab.loop",),
    ("kvlab.fleet",),
    ("kvlab.curves", "kvlab.designs"),
    ("kvlab.sizing",),
    ("kvlab.latency",),
    ("kvlab.simulator",),
    ("kvlab.measure",),
    ("kvlab.report",),
    ("kvlab.api",),
    ("kvlab.web",),
    ("kvlab.workflow",),
    ("kvlab.cli",),
    ("kvlab", "kvlab.__main__"),
)
LAB = {"kvlab.kvsim": (), "kvlab.scenario": ("kvlab.cli.scenario",), "kvlab.summarize": ("kvlab.cli.summarize",)}
LAB_ITSELF = {("kvlab.scenario", "kvlab.kvsim")}  # the lab script runs the lab's caches
MAX_TOP_LEVEL = 8  # modules directly in kvlab/ (issue 23): the lab's three, the package's two, and a few homes


def module_name(path):
    parts = path.relative_to(KVLAB.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(KVLAB.rglob("*.py")) if "__pycache__" not in path.parts}


def imports(name):
    """The kvlab modules ``name`` imports, resolved to modules (``from kvlab.cache import prefix`` is
    kvlab.cache.prefix; ``from kvlab.cache.prefix import PrefixCache`` is kvlab.cache.prefix too)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


@functools.cache
def graph():
    """``{module: the kvlab modules it imports}``, made on first use (about 1 s of parsing): not at import, which
    every pytest-xdist worker's collection pays, while only the worker that runs this file reads it."""
    return {name: imports(name) for name in MODULES}


def layer(name):
    ranked = [(len(prefix), rank) for rank, prefixes in enumerate(LAYERS) for prefix in prefixes]
    matches = [
        (length, rank)
        for (length, rank), prefix in zip(ranked, [p for prefixes in LAYERS for p in prefixes], strict=True)
        if name == prefix or name.startswith(prefix + ".")
    ]
    return max(matches)[1] if matches else None


def test_every_module_has_a_layer():
    assert [name for name in MODULES if name not in LAB and layer(name) is None] == []


@pytest.mark.parametrize("name", [name for name in MODULES if name not in LAB])
def test_no_module_imports_from_a_layer_above_its_own(name):
    above = sorted(target for target in graph()[name] if target not in LAB and layer(target) > layer(name))
    assert above == [], f"{name} (layer {LAYERS[layer(name)]}) imports from above: {above}"


def test_the_lab_files_are_imported_only_by_their_wrappers():
    importers = {
        (importer, target)
        for importer, targets in graph().items()
        for target in targets
        if target in LAB and importer not in LAB[target]
    }
    assert importers <= LAB_ITSELF
    assert all(graph()[lab] <= set(LAB) for lab in LAB)  # and they import nothing else of kvlab: standard library only


def cycle(graph):
    """One cycle of ``graph`` as a list of modules (first repeated last), or None: modules that import nothing left
    are dropped until none does; from what remains, following imports inside it must come back."""
    left = {name: set(targets) for name, targets in graph.items()}
    while leaves := {name for name, targets in left.items() if not targets & left.keys()}:
        left = {name: targets - leaves for name, targets in left.items() if name not in leaves}
    if not left:
        return None
    path = [min(left)]
    while path[-1] not in path[:-1]:
        path.append(min(left[path[-1]] & left.keys()))
    return path[path.index(path[-1]) :]


def test_the_imports_have_no_cycle():
    assert cycle(graph()) is None, " -> ".join(cycle(graph()))


def test_the_cycle_finder_finds_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycle(graph) == ["a", "b", "c", "a"] and cycle({"a": {"b"}, "b": set()}) is None


def test_the_workflow_never_imports_the_commands():
    for name, targets in graph().items():
        if name.startswith("kvlab.workflow"):
            assert not [target for target in targets if target.startswith("kvlab.cli")], name


def test_kvlab_has_few_top_level_modules():
    top = sorted(path.name for path in KVLAB.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, top


def test_the_graph_sees_what_python_sees():
    """The walker is checked against the interpreter: every kvlab module that importing a command loads is one
    the walker reaches from it (a walker that missed imports would pass every test above)."""
    import subprocess
    import sys

    code = "import sys, kvlab.cli.replay; print(' '.join(sorted(m for m in sys.modules if m.startswith('kvlab'))))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(done.stdout.split())
    reached, todo = set(), ["kvlab.cli.replay"]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo += graph()[module]
            todo += [module.rpartition(".")[0]] if "." in module else []
    assert loaded <= reached | {"kvlab"}


@pytest.mark.parametrize("name", ["MAX_WHOLE", "GIB"])
def test_a_shared_number_is_defined_once_outside_the_lab(name):
    defined = [
        module
        for module, path in MODULES.items()
        if module not in LAB and re.search(rf"^{name}\s*=", path.read_text(encoding="utf-8"), flags=re.M)
    ]
    assert defined == ["kvlab.util.numbers"]
