"""Shared paths and helpers for the test suite."""

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return sorted({name for name in listing.decode().split("\0") if name and (ROOT / name).is_file()})


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
