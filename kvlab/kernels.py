"""The compiled kernels: whether numba's on-disk cache holds them all for the current source, a warm-up that
compiles them once, and a copy of the cache into another tree.

numba caches each ``@njit(cache=True)`` kernel beside its module (``__pycache__/*.nbi`` and ``*.nbc``), keyed on
the module's name, the source file's time and size, and the function's bytecode: not on the folder. So a tree
copied with its file times (a test's scratch copy, ``kvlab check``'s ``work/check/``) can take the cache along
instead of compiling again (about 5 s of CPU), and parallel jobs or test workers load what one warm-up compiled
instead of each compiling the same kernels at once.

``python -m kvlab.kernels`` warms the kernels of the kvlab it imports.
"""

import ast
import shutil
from pathlib import Path

__all__ = ["compiled", "copy_cache", "kernels", "warm"]

PACKAGE = Path(__file__).parent


def kernels(package=PACKAGE):
    """``(source file, function name)`` of every cached kernel a caller compiles on its own (inlined ones are
    part of their callers), found by reading the source, without importing numba."""
    found = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "njit" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and any(map(_cached_not_inlined, node.decorator_list)):
                found.append((path, node.name))
    return found


def _cached_not_inlined(decorator):
    if not (isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "njit"):
        return False
    settings = {keyword.arg: getattr(keyword.value, "value", None) for keyword in decorator.keywords}
    return settings.get("cache") is True and settings.get("inline") != "always"


def compiled(package=PACKAGE):
    """Whether the cache holds every kernel for its current source (so that no compile is due)."""
    for path, name in kernels(package):
        indexes = list((path.parent / "__pycache__").glob(f"{path.stem}.{name}-*.nbi"))
        if not indexes or max(index.stat().st_mtime for index in indexes) < path.stat().st_mtime:
            return False
    return True


def copy_cache(source, target):
    """Copy the compiled kernels of the package folder ``source`` into the same places under ``target`` (a copy
    of it made with its file times), where they are missing."""
    source, target = Path(source), Path(target)
    for cached in source.rglob("__pycache__/*.nb[ic]"):
        copy = target / cached.relative_to(source)
        if copy.parent.parent.is_dir() and not copy.exists():
            copy.parent.mkdir(exist_ok=True)
            shutil.copy2(cached, copy)


def warm():
    """Run every compiled path once on tiny workloads, compiling (and caching) what the cache lacks."""
    import numpy as np

    from kvlab.cache.compiled import CompiledLRU
    from kvlab.curves.mrc import lru_curve, tier_curve
    from kvlab.dense import Interner
    from kvlab.replay import replay
    from kvlab.workloads import LabWorkload

    lab = LabWorkload(4, docs=2, tokens=10, passes="fwd,rev")
    for rules in ({}, {"partial_blocks": "keep", "eviction_order": "head-first", "touch_cpu_on_gpu_hit": True}):
        replay(lab, CompiledLRU(8, 8, 4, **rules), [])
    for gpu in (None, 4):
        tier_curve(lab, "drop", gpu_tokens=gpu)
        tier_curve(lab, "keep", gpu_tokens=gpu)
    lru_curve([1, 2, 1], [1, 2, 1])
    Interner(slots=2).dense(np.arange(4, dtype=np.int64))


if __name__ == "__main__":
    warm()
