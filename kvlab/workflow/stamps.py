"""Code and settings stamps: one small input file per job that changes only when its settings or the kvlab source
files it runs (derived from the imports) do, so that a changed setting or module reruns exactly its jobs."""

import ast
import json
import os
from functools import cache
from pathlib import Path

from kvlab.util.files import write_together


def module_file(module, root="."):
    """The source file of a ``kvlab`` module (a package's ``__init__.py``), relative to ``root``."""
    path = Path(*module.split("."))
    return str(path / "__init__.py") if (Path(root) / path).is_dir() else str(path.with_suffix(".py"))


@cache
def imported(module, root="."):
    """The ``kvlab`` modules ``module`` imports, anywhere in its code (a command imports its domain lazily)."""
    return {name for name in imported_names(module, root) if is_module(name, root)}


def imported_names(module, root="."):
    """Every name ``module``'s import statements name, from the file's parse, kept in work/stamps/imports.json by
    the file's time and size (a no-op run parses no module)."""
    name = module_file(module, root)
    source = Path(root) / name
    status = source.stat()
    known = import_cache(root)
    entry = known.get(name)
    if entry and entry[:2] == [status.st_mtime_ns, status.st_size]:
        return set(entry[2])
    package = module if source.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from kvlab import files`
    known[name] = [status.st_mtime_ns, status.st_size, sorted(found)]
    known[CHANGED] = True
    return found


CHANGED = ""  # the import cache's mark of an entry added since it was read


@cache
def import_cache(root="."):
    try:
        known = json.loads((Path(root) / STAMPS / "imports.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def save_import_cache(root="."):
    """Write the import cache if a module was parsed."""
    known = import_cache(root)
    if known.pop(CHANGED, False):
        path = Path(root) / STAMPS / "imports.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_together({path: json.dumps(known, sort_keys=True) + "\n"})


def is_module(name, root="."):
    """Whether ``name`` is a module or package of kvlab (not a function or constant imported from one)."""
    path = Path(root, *name.split("."))
    return name.split(".")[0] == "kvlab" and (path.with_suffix(".py").is_file() or path.is_dir())


@cache
def command_code(module, root="."):
    """Every ``kvlab`` source file a ``python -m kvlab COMMAND`` job runs, given the command's module
    (``kvlab.cli.replay``; the Snakefile names it from the command table): derived from the imports, so that
    editing one reruns exactly the jobs that import it."""
    seen, todo = set(), ["kvlab", "kvlab.__main__", "kvlab.cli", module]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += imported(module, root) - seen
            parent = module.rpartition(".")[0]  # importing a.b.c runs a/__init__ and a/b/__init__ first
            if parent:
                todo.append(parent)
    save_import_cache(root)
    return sorted(module_file(module, root) for module in seen)


STAMPS = "work/stamps"


@cache
def code_stamp(command, module, root="."):
    """The stamp of the code a ``kvlab COMMAND`` job runs: the files of :func:`command_code` with their times and
    sizes, rewritten only when one of them changes. One input per job instead of the dozens of files behind it
    keeps Snakemake's own start-up small (it handles every input of every job on every run)."""
    files = {}
    for name in command_code(module, root):
        status = os.stat(Path(root, name))
        files[name] = [status.st_mtime_ns, status.st_size]
    return write_stamp("code", {"command": command}, files)


def write_stamp(rule, wildcards, settings):
    """The stamp file of one job: its settings (command line, input list) as text, rewritten only when they
    change. A rule takes it as an input, so a changed setting reruns the job through file times alone: a fresh
    clone (no stamps yet) reruns everything, and no decision needs Snakemake's metadata."""
    name = "-".join(str(value) for value in wildcards.values()) or rule
    path = Path(STAMPS, rule, f"{name}.json")
    text = json.dumps(settings, indent=1) + "\n"
    try:
        if path.read_text(encoding="utf-8") == text:
            return str(path)
    except OSError:
        path.parent.mkdir(parents=True, exist_ok=True)
    write_together({path: text})
    return str(path)
