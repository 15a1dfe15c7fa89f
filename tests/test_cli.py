"""The `kvlab` command: one entry point that lists every command, imports a command's code only when it runs,
and a command-line layer that is the only place (with the lab's three scripts) that knows argparse."""

import ast
import importlib
import io
import json
import os
import subprocess
import sys

import pytest
from conftest import KVLAB, ROOT, kvlab

from kvlab.cli import COMMANDS

LAB_SCRIPTS = {"kvsim.py", "scenario.py", "summarize.py"}


def test_help_lists_every_command_with_one_line():
    done = kvlab("--help")
    assert done.returncode == 0
    lines = [line.split() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert [words[0] for words in lines] == list(COMMANDS)
    assert all(len(words) > 3 for words in lines)


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_and_a_main(name):
    module = importlib.import_module(f"kvlab.cli.{COMMANDS[name][0]}")
    assert callable(module.main)
    done = kvlab(name, "--help")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith(f"usage: kvlab {name}")


@pytest.mark.parametrize(("argv", "fragment"), [([], "usage: kvlab COMMAND"), (["nope"], "unknown command 'nope'")])
def test_no_or_an_unknown_command_is_a_usage_error(argv, fragment):
    done = kvlab(*argv)
    assert done.returncode == 2 and done.stdout == "" and fragment in done.stderr


def loaded_after(*argv):
    """The kvlab modules a real `python -m kvlab ARGV` process has loaded when it ends."""
    code = (
        "import runpy, sys, json, atexit\n"
        "atexit.register(lambda: print(json.dumps(sorted(m for m in sys.modules if m.startswith('kvlab'))),"
        " file=sys.stderr))\n"
        f"sys.argv = ['kvlab', *{list(argv)!r}]\n"
        "runpy.run_module('kvlab', run_name='__main__')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_a_command_imports_only_its_own_code():
    replay = loaded_after("replay", "--workload", "lab", "--docs", "2", "--tokens", "10", "--gpu-tokens", "5")
    assert "kvlab.loop" in replay and "kvlab.cli.replay" in replay
    assert not {module for module in replay if module.startswith(("kvlab.curves", "kvlab.report", "kvlab.latency"))}
    assert "kvlab.cli.mrc" not in replay and "kvlab.cli.plots" not in replay
    scenario = loaded_after("scenario", "--docs", "2")
    assert "kvlab.scenario" in scenario and "kvlab.workloads" not in scenario and "kvlab.cache" not in scenario


def test_only_the_command_line_layer_and_the_lab_scripts_know_argparse_and_sys_path():
    offenders = []
    for path in sorted(KVLAB.rglob("*.py")):
        relative = path.relative_to(KVLAB)
        if relative.parts[0] == "cli" or str(relative) in LAB_SCRIPTS:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [alias.name for alias in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if "argparse" in names or module == "argparse":
                offenders.append(f"{relative}: imports argparse")
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                offenders.append(f"{relative}: touches sys.path")
    assert offenders == []


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("stream", [Terminal, io.StringIO], ids=["terminal", "pipe"])
def test_a_due_compile_is_announced_on_a_terminal_only(monkeypatch, stream):
    """Numba's first compile takes seconds: a person at a terminal is told; a log or a pipe gets nothing."""
    monkeypatch.setattr("kvlab.curves.mrc.compiled", lambda: False)
    monkeypatch.setattr(sys, "stderr", stream())
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    from kvlab.cli.mrc import main

    assert main(["--workload", "lab", "--docs", "2", "--tokens", "10"], "kvlab mrc") == 0
    said = sys.stderr.getvalue()
    assert said == (
        "kvlab: compiling the exact-curve kernels (numba; once per checkout, about 10 s) ...\n"
        if stream is Terminal
        else ""
    )


@pytest.mark.parametrize(("command", "flag"), [("scenario", "--gpu"), ("replay", "--gpu-tokens")])
def test_a_flag_given_twice_is_refused_alike_by_the_lab_script_and_the_commands(command, flag):
    """kvlab/cli/base.py's ``Once`` and the scenario script's own copy: the same rule, the same line."""
    done = kvlab(command, flag, "1", flag, "2")
    assert done.returncode == 2 and done.stderr == f"kvlab {command}: error: argument {flag}: given twice\n"


@pytest.mark.parametrize("told", [False, True])
def test_the_console_script_sets_its_process_defaults_unless_told(monkeypatch, told):
    """kvlab.cli.entry sets each of PROCESS_DEFAULTS before any command imports numpy (docs: kvlab/cli/__init__.py),
    and a value the user set stays."""
    import kvlab.cli as cli

    given = {name: value + "1" for name, value in cli.PROCESS_DEFAULTS.items()}  # a value that is not the default
    for name in given:
        if told:
            monkeypatch.setenv(name, given[name])
        else:
            monkeypatch.delenv(name, raising=False)
    seen = []
    monkeypatch.setattr(cli, "main", lambda: seen.append({name: os.environ.get(name) for name in given}) or 0)
    with pytest.raises(SystemExit) as stop:
        cli.entry()
    assert (stop.value.code, seen) == (0, [given if told else cli.PROCESS_DEFAULTS])


def test_with_the_process_defaults_numpy_and_numba_start_no_threads():
    """OPENBLAS_NUM_THREADS=1 reaches both OpenBLAS libraries (numpy's, and scipy's that numba's BLAS check loads):
    the process keeps its one thread; on a machine of several cores the libraries' default starts more."""
    code = (
        "import os, sys; from kvlab.cli import process_defaults; os.environ.pop('OPENBLAS_NUM_THREADS', None);"
        " process_defaults() if sys.argv[1] == 'set' else None;"
        " import numpy, numba, scipy.linalg.cython_blas; print(len(os.listdir('/proc/self/task')))"
    )
    threads = {how: int(subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True,
                                       check=True).stdout) for how in ("set", "unset")}  # fmt: skip
    assert threads["set"] == 1
    assert threads["unset"] > 1 or len(os.sched_getaffinity(0)) == 1
