"""Shared paths and helpers for the test suite."""

import contextlib
import fcntl
import importlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import settings
from hypothesis import strategies as st

from kvlab.cli import COMMANDS
from kvlab.util import kernels
from kvlab.workflow import freshness
from kvlab.workflow.kernels import PARTS
from kvlab.workloads import Request, Workload

ROOT = Path(__file__).resolve().parents[1]
KVLAB = ROOT / "kvlab"
SCHEMA = ROOT / "schemas" / "config.schema.yaml"
BIN = Path(sys.executable).parent  # this environment's console scripts (snakemake, snakefmt, ruff)

# Every run draws the same examples (derandomized), so CI runs the cases the suite was last seen to pass and a
# failure reproduces; KVLAB_HYPOTHESIS=explore draws new ones each run, to look for bugs.
settings.register_profile("derandomized", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("KVLAB_HYPOTHESIS", "derandomized"))


# This machine's environment sets PYTHONDONTWRITEBYTECODE=1, and pytest then rewrites the asserts of every test
# module again in each worker on each run (about 4 s of CPU a collection, half of it): in the test processes the
# rewritten modules are cached in tests/__pycache__ (ignored by git) as Python caches any module. The processes the
# tests start keep the environment as it is.
sys.dont_write_bytecode = False

KERNELS_LOCK = "kernels.lock"  # in this run's temporary folder: held while the kernels compile beside the workers
WARMING = pytest.StashKey[list]()  # the processes that compile them


@pytest.hookimpl(trylast=True)  # after the tmp_path plugin's (this run's temporary folder)
def pytest_configure(config):
    """Compile the kernels once, before any test runs (pytest-xdist's controller, or a plain run), so that no
    worker or scratch copy compiles them again. The compile runs in two processes of its own; under pytest-xdist
    they run while the workers start and collect (about 8 s each on two cores), and each worker waits for them
    before its first test (compiled_kernels below)."""
    if hasattr(config, "workerinput") or kernels.compiled():
        return
    lock = open(config._tmp_path_factory.getbasetemp() / KERNELS_LOCK, "w")  # noqa: SIM115 - the children hold it
    fcntl.flock(lock, fcntl.LOCK_EX)
    warming = [  # kvlab.workflow.kernels' parts side by side, as kvlab run compiles them
        subprocess.Popen([sys.executable, "-m", "kvlab.workflow.kernels", part], cwd=ROOT, pass_fds=(lock.fileno(),))
        for part in PARTS
    ]
    lock.close()  # the children's copies keep the lock until both have exited
    workers = config.getoption("dist", "no") != "no" and config.getoption("tx", None)  # as pytest-xdist decides
    if workers and not config.getoption("collectonly"):
        config.stash[WARMING] = warming
        return
    for process in warming:  # no workers: the tests start once the kernels are compiled
        process.wait()


def pytest_unconfigure(config):
    for process in config.stash.get(WARMING, []):
        process.wait()


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels(tmp_path_factory):
    """Under pytest-xdist, each worker's first test waits for the controller's compile (a shared lock on the file
    the compiling processes hold), so that no worker compiles the same kernels beside them."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        path = tmp_path_factory.getbasetemp().parent / KERNELS_LOCK
        if path.is_file():
            with open(path, encoding="utf-8") as lock:
                fcntl.flock(lock, fcntl.LOCK_SH)


def pytest_collection_modifyitems(items):
    """The modules marked ``pipeline`` first (pytest-xdist hands out whole modules in this order): the slow ones
    start at once on every worker and the quick ones fill in after, so that the workers end together."""
    items.sort(key=lambda item: item.get_closest_marker("pipeline") is None)


def load_config():
    """The committed config.yaml as a dict (a fresh copy each call)."""
    return yaml.load((ROOT / "config.yaml").read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)  # libyaml: faster


def command_parsers():
    """``{prog: parser}`` of every kvlab command and subcommand, built by the command's own ``build_parser``; the lab
    scripts' commands are left out."""
    parsers, todo = {}, []
    for name, (module_name, _) in COMMANDS.items():
        module = importlib.import_module(f"kvlab.cli.{module_name}")
        if not hasattr(module, "build_parser"):
            continue  # a lab script's own parser (kvlab scenario, kvlab summarize): the handout's flags
        todo.append(module.build_parser(f"kvlab {name}"))
    while todo:
        parser = todo.pop()
        parsers[parser.prog] = parser
        todo += parser.subcommands.values()
    return parsers


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
    else:
        kernels.copy_cache(KVLAB, folder / "kvlab")  # an edited module's kernels alone compile again
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


def snakemake_group(folder):
    """The process group of the Snakemake that ``kvlab run`` in ``folder`` started (its lock file names it), or
    None before it has started."""
    found = re.search(r"process group (\d+)", (Path(folder) / ".snakemake" / "kvlab-run.lock").read_text())
    return int(found.group(1)) if found else None


def kill_run(folder, process):
    """A machine's crash: ``kvlab run`` (``process``, in a session of its own) and its Snakemake's whole group
    killed with SIGKILL at once."""
    group = snakemake_group(folder)
    for target in ([group] if group else []) + [process.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(target, signal.SIGKILL)


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
    kill_run(copy, first)
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


class ToyWorkload(Workload):
    """A workload of given requests (its batches made from them by the base class)."""

    def __init__(self, block_tokens, rounds, requests):
        self.block_tokens = block_tokens
        self.rounds = rounds
        self._requests = requests

    def requests(self):
        return iter(self._requests)

    def __repr__(self):
        return f"ToyWorkload({self.block_tokens}, {self.rounds}, {self._requests})"


@st.composite
def toy_workloads(draw):
    """Requests over a small tree of prefixes: block j's key is the prefix of contents up to j, so two requests
    share block j only if they share blocks 0..j; a partial last block's key also holds its length. Requests
    read a prefix of one of a few documents, sometimes with a branch (one block changed) in it."""
    block = draw(st.integers(1, 6))
    rounds = [f"r{index}" for index in range(draw(st.integers(1, 3)))]
    documents = draw(st.lists(st.lists(st.integers(0, 3), min_size=6, max_size=6), min_size=1, max_size=3))
    requests = []
    for number in range(draw(st.integers(4, 16))):
        count = draw(st.integers(0, 6))
        contents = list(draw(st.sampled_from(documents))[:count])
        if count and draw(st.booleans()):
            contents[draw(st.integers(0, count - 1))] = draw(st.integers(0, 3))
        last = draw(st.integers(1, block)) if count else 0
        tokens = (count - 1) * block + last if count else 0
        keys = [("full", tuple(contents[: j + 1])) for j in range(count)]
        if count and last < block:
            keys[-1] = ("partial", tuple(contents), last)
        requests.append(Request(draw(st.integers(0, len(rounds) - 1)), number, keys, tokens))
    return ToyWorkload(block, rounds, requests)
