"""One pipeline run at a time per folder, and a clean start after a run that was killed.

A run holds an exclusive lock on a file under ``.snakemake/`` for its whole life (the kernel drops it when the
process dies, however it dies), so a second run in the same folder stops at once and names the first. Holding
the lock also proves that any Snakemake lock or temporary file left in the folder belongs to a dead run: they
are removed before Snakemake starts, and Snakemake reruns the jobs the dead run left incomplete.
"""

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from kvlab.kernels import compiled

__all__ = ["LOCK", "RunError", "run_pipeline"]

LOCK = Path(".snakemake", "kvlab-run.lock")
TEMPORARY = ("results/**/*.tmp", "work/**/*.tmp")  # a job's and a writer's unfinished files (never tracked)


class RunError(RuntimeError):
    """The run cannot start; the message is one line."""


def hold_lock(folder):
    """The open lock file, locked for this process; RunError naming the run that holds it."""
    path = Path(folder, LOCK)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise RunError(f"another run is in progress in this folder (pid {holder}); wait for it or stop it") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def clean_dead_run(folder, snakemake):
    """Remove what a killed run left: temporary files, and Snakemake's own lock (through ``--unlock``)."""
    for pattern in TEMPORARY:
        for path in Path(folder).glob(pattern):
            if path.is_file():
                path.unlink()
    locks = Path(folder, ".snakemake", "locks")
    if locks.is_dir() and any(locks.iterdir()):
        subprocess.run([*snakemake, "--unlock"], cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def warm_kernels(folder):
    """Compile the folder's kernels once before the jobs start, rather than in every job that starts at once."""
    if compiled(Path(folder, "kvlab")):
        return
    print("kvlab: compiling the kernels once (numba, about 8 s of CPU; cached beside the code) ...", flush=True)
    subprocess.run([sys.executable, "-m", "kvlab.kernels"], cwd=folder)  # a failure shows in the jobs


def run_pipeline(arguments=(), folder=".", snakemake=None):
    """Run Snakemake in ``folder`` with ``arguments`` as the only run there; return its exit code."""
    snakemake = snakemake or [sys.executable, "-m", "snakemake"]
    lock = hold_lock(folder)
    try:
        clean_dead_run(folder, snakemake)
        warm_kernels(folder)
        return subprocess.run([*snakemake, *arguments], cwd=folder).returncode
    finally:
        lock.close()
