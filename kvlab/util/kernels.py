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


_SEEN = {}  # (what, package) -> (the files' stamps, the answer): kernels() and compiled() read the tree once


def _stamps(paths):
    """Each file's modification time and size (``None`` for a missing one): what a cached answer rests on."""
    stamps = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            stamps.append((path, None))
        else:
            stamps.append((path, stat.st_mtime_ns, stat.st_size))
    return tuple(stamps)


def _remembered(what, package, paths, answer):
    """``answer()`` for these files as they are now, computed again only when one of them changed: kvlab plan and
    kvlab mrc ask :func:`compiled` at every call, and reading and parsing the tree took 0.13 s of CPU each time."""
    stamps = _stamps(paths)
    key = (what, Path(package))
    if key not in _SEEN or _SEEN[key][0] != stamps:
        _SEEN[key] = (stamps, answer())
    return _SEEN[key][1]


def kernels(package=PACKAGE):
    """``(source file, function name, first line)`` of every cached kernel a caller compiles on its own (inlined
    ones are part of their callers), found by reading the source, without importing numba. The first line is
    the decorator's, as in numba's cache file names (the code's ``co_firstlineno``)."""
    files = sorted(Path(package).rglob("*.py"))
    return list(_remembered("kernels", package, files, lambda: _kernels(files)))


def _kernels(files):
    found = []
    for path in files:
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
    found = [
        (path, path.parent / "__pycache__" / f"{path.stem}.{name}-{line}.{python}.nbi")
        for path, name, line in kernels(package)
    ]

    def every_index_stamped():
        digests = {}
        for path, index in found:
            if path not in digests:
                digests[path] = hashlib.sha256(path.read_bytes()).digest()
            if not index.is_file() or digests[path] not in index.read_bytes():
                return False
        return True

    return _remembered("compiled", package, [file for pair in found for file in pair], every_index_stamped)


def copy_cache(source, target):
    """Copy the compiled kernels of the package folder ``source`` (numba's cache, and the ahead-of-time module of
    kvlab/util/ahead.py) into the same places under ``target`` (a copy of it), where they are missing."""
    from kvlab.util.ahead import PREFIX

    source, target = Path(source), Path(target)
    for cached in [*source.rglob("__pycache__/*.nb[ic]"), *source.glob(f"__pycache__/{PREFIX}*")]:
        copy = target / cached.relative_to(source)
        if copy.parent.parent.is_dir() and not copy.exists():
            copy.parent.mkdir(exist_ok=True)
            shutil.copy2(cached, copy)
