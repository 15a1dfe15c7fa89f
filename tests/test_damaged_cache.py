"""A damaged compiled cache is never fatal (issue 36, item 1): a truncated or garbage file where the removed
ahead-of-time module was loaded from (a SIGBUS or an ImportError before), or a truncated or garbage numba cache
file (an unpickling traceback before; kvlab.util.kernels.discard_damaged), and ``kvlab trace stats`` and
``kvlab simulate`` still print what they print with a sound cache. Each case runs in a copy of the package with
the checkout's cache taken along (no kernel but the damaged one compiles again), in a process of its own (a
SIGBUS kills it)."""

import hashlib
import importlib.machinery
import io
import os
import pickletools
import shutil
import subprocess
import sys
from pathlib import Path

import numba._helperlib
import pytest
from conftest import KVLAB, ROOT, kvlab
from numba.core.caching import UserProvidedCacheLocator

from kvlab.util import kernels

TRACE = "".join(
    f'{{"timestamp": {t}, "input_length": 600, "output_length": 3, "hash_ids": [1, {t + 2}]}}\n' for t in (0, 1)
)
STATS = ("trace", "stats", "--workload", "mooncake", "--trace", "tiny.jsonl")
SIMULATE = (
    *("simulate", "--workload", "mooncake", "--trace", "tiny.jsonl", "--gpu-system", "h100_sxm"),
    *("--model-config", ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json", "--gpu-blocks", "64"),
)


def module_path(package):
    """Where the removed build put the ahead-of-time module, and where kvlab loaded it from: its name held the
    SHA-256 of the package's sources, numba's version and Python's tag (kvlab/util/ahead.py, until issue 38)."""
    digest = hashlib.sha256(f"{numba.__version__} {sys.implementation.cache_tag}".encode())
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    name = "kvlab_ahead_" + digest.hexdigest()[:24] + importlib.machinery.EXTENSION_SUFFIXES[0]
    return package / "__pycache__" / name


def truncated(path, source=None):
    """``path`` cut to its first 4 KiB (``source``'s, where given)."""
    path.write_bytes((source or path).read_bytes()[:4096])


def first_pickle(path):
    """``path`` cut where its first pickle ends (an index without its overloads)."""
    stream = io.BytesIO(path.read_bytes())
    for _ in pickletools.genops(stream):
        pass
    path.write_bytes(stream.getvalue()[: stream.tell()])


def cut_at_stop(path):
    """``path`` cut halfway, just after a STOP byte (it starts and ends as a pickle does)."""
    data = path.read_bytes()
    path.write_bytes(data[: data.rindex(b".", 0, len(data) // 2) + 1])


def garbage(path):
    path.write_bytes(b"garbage\n" * 64)


def fifo(path):
    path.unlink()
    os.mkfifo(path)


def link(path, target):
    path.unlink()
    path.symlink_to(target)


def folder(path):
    path.unlink()
    (path / "inside").mkdir(parents=True)


def cached(package, module, kernel, suffix):
    """The numba cache file of ``kernel`` in ``module`` for its current source: its index (``.nbi``), or its first
    data file (``.nbc``)."""
    path, name, line = next(found for found in kernels.kernels(package) if found[:2] == (package / module, kernel))
    index = kernels.index_file(path, name, line)
    found = index if suffix == ".nbi" else index.with_name(index.name.removesuffix(".nbi") + ".1.nbc")
    assert found.is_file(), f"{found.name}: the suite's warm-up compiled it, and numba names its files so"
    return found


def elsewhere(path, folder):
    """Where numba keeps the cache file ``path`` (in a ``__pycache__``) when ``NUMBA_CACHE_DIR`` is ``folder``: its
    locator names a folder for each source folder (numba/core/caching.py)."""
    return folder / UserProvidedCacheLocator.get_suitable_cache_subpath(str(path.parent.parent / "any.py")) / path.name


SHARED = Path(numba._helperlib.__file__)  # an extension module to cut (a truncated one is a SIGBUS to load)

CASES = {
    "a truncated module": (STATS, lambda p: truncated(module_path(p), SHARED)),
    "a garbage module": (SIMULATE, lambda p: garbage(module_path(p))),
    "numba: garbage data": (STATS, lambda p: garbage(cached(p, "workloads/dense.py", "_intern", ".nbc"))),
    "numba: a garbage and a truncated index, truncated data": (
        SIMULATE,
        lambda p: (
            garbage(cached(p, "simulator/kernel.py", "known_prices", ".nbi")),
            truncated(cached(p, "workloads/dense.py", "_intern", ".nbi")),
            truncated(cached(p, "simulator/kernel.py", "moved_prices", ".nbc")),
        ),
    ),  # fmt: skip
    "numba: an index of one pickle, data cut at a STOP byte": (
        STATS,
        lambda p: (
            first_pickle(cached(p, "workloads/dense.py", "_intern", ".nbi")),
            cut_at_stop(cached(p, "workloads/dense.py", "_rehash", ".nbc")),
        ),
    ),  # fmt: skip
    "numba: a named pipe, a link to a device, a folder": (
        STATS,
        lambda p: (
            fifo(cached(p, "workloads/dense.py", "_intern", ".nbi")),  # a read waits for a writer (a hang before)
            link(cached(p, "workloads/dense.py", "_rehash", ".nbi"), "/dev/zero"),  # endless (memory, before)
            folder(cached(p, "workloads/dense.py", "_intern", ".nbc")),  # numba's rename onto it fails
        ),
    ),  # fmt: skip
}


def copy(tmp_path, argv):
    """A copy of the package under ``tmp_path`` with the checkout's cache, a tiny trace beside it, and what ``argv``
    prints in this checkout (its cache sound)."""
    package = tmp_path / "kvlab"
    shutil.copytree(KVLAB, package, ignore=shutil.ignore_patterns("__pycache__"))
    kernels.copy_cache(KVLAB, package)
    (tmp_path / "tiny.jsonl").write_text(TRACE, encoding="utf-8")
    expected = kvlab(*argv, cwd=tmp_path)
    assert expected.returncode == 0, expected.stderr
    return package, expected.stdout


def run_copy(tmp_path, argv, env=None):
    return subprocess.run(
        [sys.executable, "-m", "kvlab", *map(str, argv)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


@pytest.mark.parametrize("case", CASES)
def test_a_damaged_cache_is_never_fatal(case, tmp_path):
    argv, damage = CASES[case]
    package, expected = copy(tmp_path, argv)
    module_path(package).parent.mkdir(exist_ok=True)
    damage(package)
    done = run_copy(tmp_path, argv)
    assert (done.returncode, done.stdout) == (0, expected), done.stderr[-2000:]


def test_a_damaged_cache_in_numba_cache_dir_is_never_fatal(tmp_path):
    """Where ``NUMBA_CACHE_DIR`` is set (by the user, or by kvlab for a read-only checkout), the cache is there."""
    package, expected = copy(tmp_path, STATS)
    folder = tmp_path / "numba-cache"
    damaged = elsewhere(cached(package, "workloads/dense.py", "_intern", ".nbi"), folder)
    for path in package.rglob("__pycache__/*.nb[ic]"):
        elsewhere(path, folder).parent.mkdir(parents=True, exist_ok=True)
        path.rename(elsewhere(path, folder))
    garbage(damaged)
    done = run_copy(tmp_path, STATS, env={**os.environ, "NUMBA_CACHE_DIR": str(folder)})
    assert (done.returncode, done.stdout) == (0, expected), done.stderr[-2000:]


def test_a_cache_damaged_after_a_run_found_it_sound_is_never_fatal(tmp_path):
    """A run lists the cache files it found sound (a memo beside them, so that the next run does not read them
    again); a file damaged after that is not on the list as it is now, and is found damaged."""
    package, expected = copy(tmp_path, STATS)
    first = run_copy(tmp_path, STATS)
    assert (first.returncode, first.stdout) == (0, expected), first.stderr[-2000:]
    damaged = cached(package, "workloads/dense.py", "_intern", ".nbc")
    assert damaged.name in damaged.with_name(f"dense.{kernels.SOUND}").read_text(encoding="utf-8")
    truncated(damaged)
    done = run_copy(tmp_path, STATS)
    assert (done.returncode, done.stdout) == (0, expected), done.stderr[-2000:]
