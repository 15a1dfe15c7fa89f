"""Files a hostile or careless user points the commands at (issue 36): an output naming a file the command reads
(its ``--gpu-system`` too), a URL whose query holds a key, a trace whose ids a spreadsheet would run, a read-only
output, an empty path, standard output on a full device, a cache folder that is not there. Each answer is one line
and an exit code, and no file is clobbered, left behind or made.

Commands run in this process (``conftest.kvlab``), but where the failure is the process's own: its standard output,
its environment read once.

Standard input a folder (``kvlab ... < /``) is left out: Python itself stops before any of kvlab runs ("Fatal Python
error: init_sys_streams: <stdin> is a directory, cannot continue", exit 1; CPython's pylifecycle.c)."""

import csv
import json
import os
import shlex
import stat
import subprocess
import sys

import pytest
from conftest import ROOT, kvlab, load_config

from kvlab.workflow import commands

CONFIG = load_config()
SYSTEM = ROOT / "data" / "systems" / "ci-2vcpu.yaml"
MODEL = ROOT / "models" / "tiny-llama-cpp" / "config.json"
HARDWARE = ("--model-config", MODEL, "--latency-source", "roofline")
TRACE_FLAGS = ("--workload", "requests", "--hash-block-tokens", 16, "--hash-chaining", "chained")
# request ids a spreadsheet reads as a formula (OWASP's "CSV Injection"), and others: a number (negative too), and
# a carriage return, where a reader would end the row and start the next one with a formula; and a formula behind
# what some spreadsheets strip first (whitespace, a control character)
FORMULAS = [
    '=HYPERLINK("http://evil")',
    "+1+1",
    "-2+3",
    "@SUM(A1)",
    "\t=1",
    "\r=1",
    "\n=1",
    "\x00=1",
    "\u00a0=1",
    " =x",
]
OTHERS = ["doc-7", -7, 12, "a\r=1+1", " doc"]


def one_line(done, code):
    """The command failed with exit ``code`` and one line on stderr, nothing on stdout; that line."""
    assert (done.returncode, done.stdout) == (code, ""), (done.returncode, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr


def process(*args, **kwargs):
    """``python -m kvlab ARGS`` in a process of its own; stderr as text."""
    command = [sys.executable, "-m", "kvlab", *map(str, args)]
    return subprocess.run(command, stderr=subprocess.PIPE, text=True, timeout=120, **kwargs)


def trace(folder, ids=(None,)):
    """A requests trace of one short request per id (None: no id), each sharing its first block."""
    path = folder / "trace.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for number, request_id in enumerate(ids):
            record = {
                "timestamp": number,
                "input_length": 64,
                "output_length": 2,
                "hash_ids": [1, 2, 3 + 2 * number, 4 + 2 * number],
            }
            out.write(json.dumps(record if request_id is None else {**record, "request_id": request_id}) + "\n")
    return path


def simulate(folder, *more, ids=(None,)):
    return ("simulate", *TRACE_FLAGS, "--trace", trace(folder, ids), *HARDWARE, *more)


def replay(folder, *more, ids=(None,)):
    return ("replay", *TRACE_FLAGS, "--trace", trace(folder, ids), "--gpu-tokens", 1000, *more)


# -- every file a command reads is an input: an output naming it is refused before any work ----------------------

READ_SYSTEM = {  # a command reading --gpu-system F, with an output named F
    "simulate --percentiles": lambda tmp, system: simulate(tmp, "--gpu-system", system, "--percentiles", system),
    "ttft predict --per-request": lambda tmp, system: (
        "ttft",
        "predict",
        *TRACE_FLAGS,
        "--trace",
        trace(tmp),
        "--gpu-tokens",
        1000,
        *HARDWARE,
        "--gpu-system",
        system,
        "--per-request",
        system,
    ),
    "ttft fit --model": lambda tmp, system: (
        "ttft",
        "fit",
        *shlex.split(commands.real_fit_args(CONFIG)),
        "--measurement",
        ROOT / CONFIG["real_measurement"]["source"],
        "--model-config",
        ROOT / CONFIG["real_measurement"]["model_config"],
        "--gpu-system",
        system,
        "--model",
        system,
        "--table",
        tmp / "table.csv",
    ),
}


@pytest.mark.parametrize("command", READ_SYSTEM)
def test_the_gpu_system_file_is_never_an_output(command, tmp_path):
    system = tmp_path / "system.yaml"
    system.write_bytes(SYSTEM.read_bytes())
    line = one_line(kvlab(*READ_SYSTEM[command](tmp_path, system), cwd=tmp_path), 2)
    assert f"{system} is both an input and an output" in line
    assert system.read_bytes() == SYSTEM.read_bytes()


# -- a URL's secrets: the password, a lone user name, the query's values, the fragment ---------------------------

SECRET = "hunter2"
URLS = [
    f"http://127.0.0.1:9/?key={SECRET}",
    f"http://127.0.0.1:9/v1?model=m&key={SECRET}",
    f"http://127.0.0.1:9/?{SECRET}",
    f"http://127.0.0.1:9/#{SECRET}",
    f"http://user:{SECRET}@127.0.0.1:9/?key={SECRET}",
    f"http://{SECRET}@127.0.0.1:9/#x",
    f"127.0.0.1:9/?key={SECRET}",  # no scheme: not even a URL
]


@pytest.mark.parametrize("url", URLS)
def test_a_urls_query_and_fragment_are_never_shown(url, tmp_path):
    done = kvlab(
        "measure",
        "--base-url",
        url,
        "--model",
        "m",
        "--docs",
        1,
        "--tokens",
        1,
        "--config-name",
        "c",
        "--out",
        "m.jsonl",
        cwd=tmp_path,
    )
    line = one_line(done, 2)
    assert SECRET not in line and "argument --base-url" in line
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("userinfo", [f"{SECRET}:", f"{SECRET}:x", f"user:{SECRET}", SECRET])
def test_a_urls_user_information_is_never_shown(userinfo, tmp_path):
    """A token may be given as the user name, the password empty or not: all of it is hidden. The URL is a base
    URL, so the command runs, and names it when nothing answers (port 9 is discard's, closed here)."""
    url = f"http://{userinfo}@127.0.0.1:9/"
    argv = ("measure", "--base-url", url, "--model", "m", "--docs", 1, "--tokens", 1, "--config-name", "c")
    line = one_line(kvlab(*argv, "--out", "m.jsonl", cwd=tmp_path), 1)
    assert SECRET not in line and "http://***@127.0.0.1:9/" in line, line
    assert not list(tmp_path.iterdir())


# -- a cell a spreadsheet would run is text -----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["simulate", "replay"])
def test_a_request_id_is_never_a_formula(command, tmp_path):
    table = tmp_path / "requests.csv"
    ids = [*FORMULAS, *OTHERS]
    argv = simulate(tmp_path, "--gpu-system", SYSTEM, ids=ids) if command == "simulate" else replay(tmp_path, ids=ids)
    done = kvlab(*argv, "--per-request", table, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with table.open(newline="", encoding="utf-8") as handle:
        cells = [row["request_id"] for row in csv.DictReader(handle)]
    expected = ["'" + text for text in FORMULAS] + [str(value) for value in OTHERS]
    assert cells == [text.replace("\r", "\n") for text in expected]


# -- outputs: read-only, named by nothing, on a full device -------------------------------------------------------


def test_a_read_only_output_is_refused_and_kept(tmp_path):
    """As ``cp`` or a shell's ``>`` would: the file says it is not to be written (root too: a mode of 0444 is an
    intent, whatever root may do), so it is not replaced."""
    table = tmp_path / "requests.csv"
    table.write_text("keep me\n")
    table.chmod(0o444)
    line = one_line(kvlab(*replay(tmp_path, "--per-request", table), cwd=tmp_path), 1)
    assert line.endswith(f"{table}: cannot write: Permission denied\n")
    assert table.read_text() == "keep me\n" and stat.S_IMODE(table.stat().st_mode) == 0o444
    assert not [path.name for path in tmp_path.iterdir() if path.name.startswith(".kvlab-")]


@pytest.mark.parametrize("name", ["o.csv/", "o.csv/."])
def test_an_output_named_as_a_folder_is_a_usage_error(name, tmp_path):
    line = one_line(kvlab(*replay(tmp_path, "--per-request", name), cwd=tmp_path), 2)
    assert f"argument --per-request: {name}: names a folder, not a file" in line, line
    assert sorted(path.name for path in tmp_path.iterdir()) == ["trace.jsonl"]


@pytest.mark.parametrize("name", ["conv.csv", "conv.jsonl.gz", "conv.csv.gz"])
def test_a_converted_trace_is_never_named_as_another_format(name, tmp_path):
    """kvlab reads a requests trace named ``.csv`` as CSV and any ``.gz`` as compressed; convert writes JSONL."""
    argv = ("trace", "convert", *TRACE_FLAGS, "--trace", trace(tmp_path), "--to", "requests", "--out", name)
    line = one_line(kvlab(*argv, cwd=tmp_path), 2)
    assert f"argument --out: {name}: " in line, line
    assert sorted(path.name for path in tmp_path.iterdir()) == ["trace.jsonl"]


@pytest.mark.parametrize("flag", ["--per-request", "--trace"])
def test_an_empty_path_is_a_usage_error_that_leaves_nothing(flag, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    argv = replay(work, "--per-request", "requests.csv")
    argv = [*argv[: argv.index(flag) + 1], "", *argv[argv.index(flag) + 2 :]]
    assert f"argument {flag}: an empty path names no file" in one_line(kvlab(*argv, cwd=work), 2)
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["trace.jsonl", "work"]


@pytest.mark.parametrize("command", ["simulate", "scenario"])  # kvlab's parser, and the lab script's own
def test_help_on_a_full_device_is_exit_1_and_one_line(command):
    with open("/dev/full", "w") as full:
        done = process(command, "--help", stdout=full)
    assert done.returncode == 1, done.stderr
    assert done.stderr == f"kvlab {command}: error: standard output: cannot write: No space left on device\n"


def test_a_reader_that_has_gone_is_no_error_to_tell():
    """``kvlab ... | head``: the reader closed the pipe on purpose; exit 1, nothing said."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = process("ttft", "systems", stdout=write)
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (1, "")


# -- the cache folder a user names is used, never made ------------------------------------------------------------


def test_a_cache_folder_that_is_not_there_is_not_made(tmp_path):
    """Like one that cannot be written (kvlab/util/user_cache.py), it only means deriving every time."""
    environment = {**os.environ, "KVLAB_CACHE": str(tmp_path / "no" / "cache")}
    alone = process("ttft", "systems", stdout=subprocess.PIPE, cwd=tmp_path)
    done = process("ttft", "systems", stdout=subprocess.PIPE, env=environment, cwd=tmp_path)
    assert (done.returncode, done.stderr, done.stdout) == (0, "", alone.stdout)
    assert not (tmp_path / "no").exists()
