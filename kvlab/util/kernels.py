"""The compiled kernels: whether numba's on-disk cache holds them all for the current source, and a copy
of the cache into another tree.

numba caches each ``@njit(cache=True)`` kernel beside its module (``__pycache__/*.nbi`` and ``*.nbc``), keyed on
the module's name, the SHA-256 of the source file (numba 0.68, ``numba/core/caching.py``,
``_hash_source_file``) and the function's bytecode: not on the folder. So a copied tree (a test's scratch copy,
``kvlab check``'s ``work/check/``) can take the cache along instead of compiling again (about 30 s of CPU, most
of it kvlab simulate's loop), and parallel jobs or test workers load what one warm-up compiled instead of each
compiling the same kernels at once.

``python -m kvlab.workflow.kernels`` warms them (it imports the domain, so it lives above it).
"""

import ast
import hashlib
import shutil
import sys
from pathlib import Path

__all__ = ["compiled", "copy_cache", "kernels"]

PACKAGE = Path(__file__).parents[1]  # kvlab/


def kernels(package=PACKAGE):
    """``(source file, function name, first line)`` of every cached kernel a caller compiles on its own (inlined
    ones are part of their callers), found by reading the source, without importing numba. The first line is
    the decorator's, as in numba's cache file names (the code's ``co_firstlineno``)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "njit" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and any(map(_cached_not_inlined, node.decorator_list)):
                found.append((path, node.name, node.decorator_list[0].lineno))
    return found


def _cached_not_inlined(decorator):
    if not (isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "njit"):
        return False
    settings = {keyword.arg: getattr(keyword.value, "value", None) for keyword in decorator.keywords}
    return settings.get("cache") is True and settings.get("inline") != "always"


def compiled(package=PACKAGE):
    """Whether the cache holds every kernel for its current source (so that no compile is due): each kernel's
    index file holds the SHA-256 of its source file, numba's stamp of it."""
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    digests = {}
    for path, name, line in kernels(package):
        index = path.parent / "__pycache__" / f"{path.stem}.{name}-{line}.{python}.nbi"
        if path not in digests:
            digests[path] = hashlib.sha256(path.read_bytes()).digest()
        if not index.is_file() or digests[path] not in index.read_bytes():
            return False
    return True


def copy_cache(source, target):
    """Copy the compiled kernels of the package folder ``source`` into the same places under ``target`` (a copy
    of it), where they are missing."""
    source, target = Path(source), Path(target)
    for cached in source.rglob("__pycache__/*.nb[ic]"):
        copy = target / cached.relative_to(source)
        if copy.parent.parent.is_dir() and not copy.exists():
            copy.parent.mkdir(exist_ok=True)
            shutil.copy2(cached, copy)
