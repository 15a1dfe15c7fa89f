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
import contextlib
import hashlib
import io
import os
import pickletools
import shutil
import stat
import sys
from pathlib import Path

__all__ = ["compiled", "copy_cache", "discard_damaged", "index_file", "kernels", "writable_cache"]

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


def index_file(path, name, line):
    """Where numba keeps the index of the kernel ``name`` of the source file ``path``, its decorator at ``line``."""
    return (
        path.parent
        / "__pycache__"
        / f"{path.stem}.{name}-{line}.py{sys.version_info.major}{sys.version_info.minor}.nbi"
    )


def compiled(package=PACKAGE):
    """Whether the cache holds every kernel for its current source (so that no compile is due): each kernel's
    index file holds the SHA-256 of its source file, numba's stamp of it."""
    found = [(path, index_file(path, name, line)) for path, name, line in kernels(package)]

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
    """Copy numba's cache of the package folder ``source`` into the same places under ``target`` (a copy of it),
    where it is missing."""
    source, target = Path(source), Path(target)
    for cached in source.rglob("__pycache__/*.nb[ic]"):
        copy = target / cached.relative_to(source)
        if copy.parent.parent.is_dir() and not copy.exists():
            copy.parent.mkdir(exist_ok=True)
            shutil.copy2(cached, copy)


LARGEST = 64 * 2**20  # bytes: numba's largest cache file here is about 400 KB; a larger one is not one of its own


def discard_damaged(module):
    """Remove the cache of each kernel of the module file ``module`` whose files are not whole pickles, so that
    numba compiles it again rather than fail: numba tolerates a missing cache file ("Cache sharing" in its user
    guide), but unpickles a truncated or garbage one unguarded (numba 0.68, ``numba/core/caching.py``'s
    ``_load_index`` and ``_load_data``: a traceback). Both files are pickles (numba's "Notes on Caching"), read
    opcode by opcode (:mod:`pickletools`, no object built): an index (``.nbi``) must be two whole pickles, a data
    file (``.nbc``, up to 400 KB of object code) one. A pickle whose opcodes are whole but whose objects are not
    numba's passes: a cache file is code numba runs, as trusted as the source beside it. Only a
    regular file of at most :data:`LARGEST` bytes is read: a named pipe (a read waits for ever), a device (a link to
    /dev/zero: endless), a folder (numba's rename of a new file onto it fails) or a larger file is damaged too. A
    changed byte inside the object code passes: numba keeps no checksum to tell. The cache is where numba keeps it:
    beside the module, or under ``NUMBA_CACHE_DIR`` (its ``UserProvidedCacheLocator``; kvlab sets it for a
    read-only checkout). Where the cache cannot be removed (a read-only checkout of its own), numba reads it as it
    would anyway. A file found sound is listed, by name, size and modification time, in a memo beside it
    (:data:`SOUND`), and read again only once it changed."""
    from numba.core import caching, config

    folder = Path(module).parent / "__pycache__"
    if config.CACHE_DIR:  # numba's reading of NUMBA_CACHE_DIR
        folder = Path(config.CACHE_DIR, caching.UserProvidedCacheLocator.get_suitable_cache_subpath(module))
    kernels = {}  # a kernel's cache, as numba names it ("<module>.<kernel>-<line>.py311") -> its files
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if name.startswith(Path(module).stem + ".") and name.endswith((".nbi", ".nbc")):
                kernel = name.rsplit(".", 2 if name.endswith(".nbc") else 1)[0]  # less ".nbi", or ".<n>.nbc"
                kernels.setdefault(kernel, []).append(folder / name)
    memo = folder / f"{Path(module).stem}.{SOUND}"
    known, sound = _read_sound(memo), set()
    for files in kernels.values():
        stamps = [_stamp(path) for path in files]
        if all(stamp in known or _sound(path) for stamp, path in zip(stamps, files, strict=True)):
            sound.update(stamps)
            continue
        for path in files:
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
    if sound != known:
        with contextlib.suppress(OSError):
            fresh = memo.with_name(f"{memo.name}.{os.getpid()}")
            fresh.write_text("".join(f"{name}\t{size}\t{mtime}\n" for name, size, mtime in sorted(sound)))
            os.replace(fresh, memo)


SOUND = "kvlab-sound.txt"  # beside numba's cache, per module: the files found sound, by name, size and modified time


def _stamp(path):
    """``(name, size, modification time)`` of a regular file (what a memo of a sound one rests on), else None."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (path.name, status.st_size, status.st_mtime_ns) if stat.S_ISREG(status.st_mode) else None


def _read_sound(memo):
    """The stamps the memo ``memo`` lists (none where it is missing or not one kvlab wrote): reading each cache file
    opcode by opcode took 0.2 s of CPU at every command's start."""
    try:
        lines = memo.read_text(encoding="utf-8").splitlines()
        return {(name, int(size), int(mtime)) for name, size, mtime in (line.split("\t") for line in lines)}
    except (OSError, ValueError):
        return set()


def _sound(path):
    """Whether ``path`` is a cache file numba can read: a regular file (or a link to one) of at most
    :data:`LARGEST` bytes, holding as many whole pickles as numba writes (:func:`_pickles`)."""
    try:
        status = os.stat(path)
    except OSError:
        return False
    if not stat.S_ISREG(status.st_mode) or status.st_size > LARGEST:
        return False
    return _pickles(path) == (2 if path.suffix == ".nbi" else 1)


def _pickles(path):
    """How many complete pickles the file holds end to end (read opcode by opcode, no object built), or 0 where it
    ends early or holds bytes that are no opcode. numba writes an index as two (its version, then its overloads) and
    a data file as one (``numba/core/caching.py``, ``_save_index`` and ``_save_data``)."""
    try:
        data = path.read_bytes()
        stream, count = io.BytesIO(data), 0
        while stream.tell() < len(data):
            for _ in pickletools.genops(stream):  # ValueError where a file ends early or holds no opcode
                pass
            count += 1
    except (OSError, ValueError):
        return 0
    return count


def writable_cache():
    """numba caches compiled kernels beside the code, else in the user's cache folder; where neither can be
    written (a read-only checkout and an unwritable HOME) it refuses to compile at all ("cannot cache function:
    no locator available"). There, point it at a folder that can be written: the user's cache folder, else the
    temporary one (``NUMBA_CACHE_DIR``; one the user set stays). kvlab's entry points call it before numba is
    imported: the console script (kvlab/cli/__init__.py ``entry``) and ``kvlab.<function>``'s first use."""
    import tempfile

    if "NUMBA_CACHE_DIR" in os.environ or os.access(str(PACKAGE), os.W_OK):
        return
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    temporary = os.path.join(tempfile.gettempdir(), f"kvlab-numba-{os.getuid()}")
    for folder in (os.path.join(cache, "kvlab-numba"), temporary):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK):
            os.environ["NUMBA_CACHE_DIR"] = folder
            return
