"""kvlab simulate's kernels compiled ahead of time into one extension module, so that a run skips numba's start-up.

Why: numba runs a cached kernel only after it has set up its whole compiler. numba/core/caching.py's
``load_overload`` calls the target context's ``refresh()``, which imports every implementation module, and
numba/np/arraymath.py imports scipy's BLAS on the way. That is 0.3-0.4 s of CPU before the first cached kernel
runs, a third of kvlab simulate on the conversation trace. An extension module from numba's own ahead-of-time
compiler (``numba.pycc``: numba 0.68, pending deprecation since 0.57 with no replacement yet) needs none of it.

- **What is exported:** each function marked ``@ahead("signature", ...)`` above its ``@njit(cache=True)``: its Python
  code once per signature (numba's spelling, return type included, as ``numba.pycc`` takes it).
- **Built by** ``python -m kvlab.workflow.kernels``, where a C compiler is found. It goes to ``kvlab/__pycache__/``,
  and :func:`kvlab.util.kernels.copy_cache` takes it along into a copied tree.
- **Never stale:** the module's name holds the SHA-256 of every source file of kvlab and numba's version, so a module
  built from other sources is never loaded.
- **When a call uses it:** the module is there, ``KVLAB_AOT`` is not ``0``, and every argument has the declared type.
  The module does not check a type itself: it would read another dtype's buffer as its own. Otherwise the JIT's
  dispatcher serves, as without the module.

Both give the same answers (tests/test_ahead.py).
"""

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

__all__ = ["SWITCH", "ahead", "build", "built", "compiler", "module_path", "off"]

PACKAGE = Path(__file__).parents[1]  # kvlab/
SWITCH = "KVLAB_AOT"  # 0: the JIT's dispatchers serve every call
PREFIX = "kvlab_ahead_"
MARK = "@ahead("  # how a marked function's source reads (build() imports the modules that hold one)

_MARKED = {}  # "module.function" -> its Ahead, as the modules are imported
_MODULE = []  # this process's answer for PACKAGE: [the loaded module or None]


def _digest(package):
    """The SHA-256 of kvlab's sources (every ``.py`` file, its path and bytes), numba's version and Python's tag."""
    import numba

    digest = hashlib.sha256(f"{numba.__version__} {sys.implementation.cache_tag}".encode())
    for path in sorted(Path(package).rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


def module_path(package=PACKAGE):
    """Where the module for ``package``'s current sources is (or would be) built."""
    name = PREFIX + _digest(package)
    return Path(package) / "__pycache__" / (name + importlib.machinery.EXTENSION_SUFFIXES[0])


def built(package=PACKAGE):
    """Whether the module for ``package``'s current sources is built."""
    return module_path(package).is_file()


def compiler():
    """The C compiler numba's ahead-of-time compiler would call (setuptools': ``$CC`` or Python's own), or ``None``
    where there is none."""
    command = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    return shutil.which(command[0]) if command else None


@contextlib.contextmanager
def off():
    """The JIT's dispatchers serve every call within (``KVLAB_AOT=0``), as the warm-up needs them compiled."""
    before = os.environ.get(SWITCH)
    os.environ[SWITCH] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ[SWITCH]
        else:
            os.environ[SWITCH] = before


def _module():
    if not _MODULE:
        path = module_path()
        found = None
        if path.is_file():
            spec = importlib.util.spec_from_file_location(path.name.split(".")[0], path)
            found = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(found)
        _MODULE.append(found)
    return _MODULE[0]


def _export_name(key, index):
    return f"{key.replace('.', '_')}_{index}"


def _checks(types):
    """Per argument type, a test that a Python value has it (C-contiguous arrays and whole or real numbers only)."""
    import numpy as np
    from numba.core import types as nb

    checks = []
    for kind in types:
        if isinstance(kind, nb.Array) and kind.layout == "C":
            dtype, ndim, readonly = np.dtype(str(kind.dtype)), kind.ndim, not kind.mutable

            def check(value, dtype=dtype, ndim=ndim, readonly=readonly):
                return (
                    isinstance(value, np.ndarray)
                    and value.dtype == dtype
                    and value.ndim == ndim
                    and value.flags.c_contiguous
                    and (readonly or value.flags.writeable)
                )

        elif isinstance(kind, nb.Integer):

            def check(value):
                return type(value) is int or isinstance(value, np.integer)

        elif isinstance(kind, nb.Float):

            def check(value):
                return isinstance(value, float | np.floating)

        else:
            raise TypeError(f"@ahead takes C-contiguous arrays and numbers, not {kind}")
        checks.append(check)
    return checks


class Ahead:
    """A kernel served by the ahead-of-time module where it can be, by its JIT dispatcher otherwise."""

    def __init__(self, signatures, dispatcher):
        self.signatures = signatures  # numba's spelling, e.g. "int64(int64[::1], float64)"
        self.dispatcher = dispatcher
        self.key = f"{dispatcher.py_func.__module__}.{dispatcher.__name__}"
        self.__doc__, self.__name__ = dispatcher.__doc__, dispatcher.__name__
        self._served = None  # per signature the module holds: (the argument checks, its function)

    def __call__(self, *args):
        if self._served is None:
            self._served = self._exported()
        if self._served and os.environ.get(SWITCH) != "0":
            for checks, function in self._served:
                if len(args) == len(checks) and all(check(arg) for check, arg in zip(checks, args, strict=True)):
                    return function(*args)
        return self.dispatcher(*args)

    def _exported(self):
        found = _module()
        if found is None:
            return []
        from numba.core import sigutils

        return [
            (_checks(sigutils.normalize_signature(signature)[0]), getattr(found, _export_name(self.key, index)))
            for index, signature in enumerate(self.signatures)
        ]


def ahead(*signatures):
    """Mark a ``@njit(cache=True)`` kernel for the ahead-of-time module, with its signatures in numba's spelling (a
    call takes the first its arguments fit). It must be called from Python only: compiled code calls a dispatcher,
    not this."""

    def mark(dispatcher):
        marked = Ahead(signatures, dispatcher)
        _MARKED[marked.key] = marked
        return marked

    return mark


def build():
    """Build the module for kvlab's current sources (every marked kernel); return its path. Raises where numba's
    ahead-of-time compiler or the C compiler fails."""
    import warnings

    from numba.core.errors import NumbaPendingDeprecationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaPendingDeprecationWarning)
        from numba.pycc import CC

    for path in sorted(PACKAGE.rglob("*.py")):
        if MARK in path.read_text(encoding="utf-8") and path != Path(__file__):
            importlib.import_module(".".join(("kvlab", *path.relative_to(PACKAGE).with_suffix("").parts)))
    target = module_path()
    target.parent.mkdir(exist_ok=True)
    name = target.name.split(".")[0]
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        compiler = CC(name)
        compiler.output_dir = scratch
        for key, marked in sorted(_MARKED.items()):
            for index, signature in enumerate(marked.signatures):
                compiler.export(_export_name(key, index), signature)(marked.dispatcher.py_func)
        compiler.compile()
        os.replace(Path(scratch) / target.name, target)
    for old in target.parent.glob(PREFIX + "*"):
        if old != target:
            (shutil.rmtree if old.is_dir() else Path.unlink)(old)
    return target
