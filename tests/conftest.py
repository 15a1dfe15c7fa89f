"""Shared paths and helpers for the test suite."""

import contextlib
import fcntl
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kvlab import freshness

ROOT = Path(__file__).resolve().parents[1]
KVLAB = ROOT / "kvlab"
SCHEMA = ROOT / "schemas" / "config.schema.yaml"
BIN = Path(sys.executable).parent  # this environment's console scripts (snakemake, snakefmt, ruff)


def load_config():
    """The committed config.yaml as a dict (a fresh copy each call)."""
    return yaml.safe_load((ROOT / "config.yaml").read_text(encoding="utf-8"))


def run_python(*args, cwd=ROOT, **kwargs):
    """Run ``python ARGS`` with this interpreter; capture text output."""
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, text=True, **kwargs)


def kvlab(*args, cwd=None):
    """Run ``kvlab ARGS`` in this process (as the console script would, without a Python start-up); return a
    CompletedProcess with the exit code and the text written to stdout and stderr."""
    from kvlab.cli import main

    argv = [str(arg) for arg in args]
    out, err = io.StringIO(), io.StringIO()
    previous = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(previous)
    return subprocess.CompletedProcess(["kvlab", *argv], code, out.getvalue(), err.getvalue())


def tool(name, *args, cwd):
    """Run a console script of this environment (snakemake, snakefmt, ruff) in ``cwd``."""
    return subprocess.run([str(BIN / name), *args], cwd=cwd, capture_output=True, text=True)


def project_files():
    """The working tree as it would be committed: tracked files plus untracked ones git does not ignore."""
    return freshness.project_files(ROOT)


def scratch_copy(folder, results=False, link_code=True):
    """The project, as it would be committed, copied into ``folder`` (file times kept), without results/ unless
    ``results``. With ``link_code`` kvlab/ is a link to this checkout's: every copy then shares numba's compiled
    kernels beside the code (one compile per test run, not one per copy); a test that edits code copies it."""
    folder = Path(folder)
    for name in project_files():
        if (name.startswith("results/") and not results) or (link_code and name.startswith("kvlab/")):
            continue
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, folder / name)
    if link_code:
        (folder / "kvlab").symlink_to(KVLAB, target_is_directory=True)
    return folder


def results_tree(folder):
    """``{relative path: bytes}`` of every file under ``folder/results``."""
    base = Path(folder)
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted((base / "results").rglob("*")) if p.is_file()}


def run_pipeline(folder, *args, timeout=600):
    """``kvlab run`` (the pipeline as `make run` runs it) in ``folder``, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "kvlab", "run", "--", "--cores", "2", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def setter(path, value):
    """A config mutation that sets config[path[0]][path[1]]... to ``value``."""

    def mutate(config):
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


def deleter(path):
    """A config mutation that deletes config[path[0]][path[1]]..."""

    def mutate(config):
        node = config
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return mutate


def both(first, second):
    """A config mutation that applies two."""

    def mutate(config):
        first(config)
        second(config)

    return mutate


@pytest.fixture
def config():
    return load_config()


LEFTOVERS = ("results/cyclic.json.tmp", "results/.kvlab-dead.tmp", "work/stamps/lab_run/dead.json.tmp")


@pytest.fixture(scope="session")
def killed_and_rerun(tmp_path_factory):
    """The project without results/, a run killed with SIGKILL half-way, the temporary files a dead run leaves,
    then one plain run: ``(folder, what the kill left)``. Built once per test run, also when pytest-xdist's
    workers share it (under a lock in their common temporary folder); tests copy it before they change it."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # this run's folder, above each worker's own
    with open(shared / "regenerated.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        folder, record = shared / "regenerated", shared / "regenerated.json"
        if not record.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            left = kill_and_rerun(folder)
            record.write_text(json.dumps(left), encoding="utf-8")
        return folder, json.loads(record.read_text(encoding="utf-8"))


def kill_and_rerun(folder):
    """The kill, the leftovers and the rerun in ``folder``; what the kill left."""
    copy = scratch_copy(folder)
    first = subprocess.Popen(
        [sys.executable, "-m", "kvlab", "run", "--", "--cores", "2", "--quiet"],
        cwd=copy,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list((copy / "results").rglob("*.json"))) < 8:
        time.sleep(0.02)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    left = {
        "results": len(list((copy / "results").rglob("*.json"))),
        "locks": sorted(path.name for path in (copy / ".snakemake" / "locks").glob("*")),
    }
    for name in LEFTOVERS:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text("partial", encoding="utf-8")
    done = run_pipeline(copy)
    assert done.returncode == 0, done.stdout + done.stderr
    return left


@pytest.fixture(scope="session")
def regenerated(killed_and_rerun):
    return killed_and_rerun[0]
