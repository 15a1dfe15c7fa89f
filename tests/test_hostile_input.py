"""What a hostile or careless user feeds the commands (issue 22): values the config check must refuse before any
job, inputs that are not what they claim, outputs that are links, named pipes with nobody at the other end, a
compression bomb, a closed standard input, numbers in other scripts' digits, totals past 64 bits. Each answer is
one line and a nonzero exit, with no traceback, no hang and no clobbered file.

Expectations come from the parsed config.yaml and the commands themselves, never from the config's text."""

import copy
import gzip
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, kvlab, load_config
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.workflow import checks, commands
from kvlab.workflow.config import line_of

HANG_GUARD = 120  # seconds: only a guard against a hang, never a measure of speed
MOONCAKE_LINE = {"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1]}


def one_line_error(done, code=None):
    """The command failed with one line on stderr and nothing else; that line."""
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode != 0 if code is None else done.returncode == code, (done.returncode, done.stderr)
    assert done.stdout == "", done.stdout[:300]
    assert done.stderr.endswith("\n") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def process(*args, cwd=ROOT, **kwargs):
    """``python -m kvlab ARGS`` in a process of its own (stdin, pipes and terminals as a user has them)."""
    command = [sys.executable, "-m", "kvlab", *map(str, args)]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=HANG_GUARD, **kwargs)


def trace_file(folder, lines=(MOONCAKE_LINE,), name="trace.jsonl"):
    path = Path(folder, name)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


# -- the config check refuses, in one line naming file, line and key, what a job would refuse ------------------


def first(mapping):
    return next(iter(mapping))


def grid_sweep(config):
    return first(config["sweeps"])


MUTATIONS = {
    # (what changes, the key the message must name)
    "a room as a float": (
        lambda c: c["runs"][first(c["runs"])].update(gpu=float(c["runs"][first(c["runs"])]["gpu"])),
        lambda c: f"runs.{first(c['runs'])}.gpu",
    ),
    "a grid of floats": (
        lambda c: c["sweeps"][grid_sweep(c)].update(grid=[value + 0.5 for value in c["sweeps"][grid_sweep(c)]["grid"]]),
        lambda c: f"sweeps.{grid_sweep(c)}.grid.",
    ),
    "a latency of 1e300 ms": (
        lambda c: c["example_measurement"]["latency_ms"].update({first(c["example_measurement"]["latency_ms"]): 1e300}),
        lambda c: "example_measurement",
    ),
    "a CPU budget of 1e300 GiB": (
        lambda c: c["plans"][first(c["plans"])].update(cpu_gib=1e300),
        lambda c: f"plans.{first(c['plans'])}",
    ),
    "10**8 documents": (lambda c: c["scenario"].update(docs=10**8), lambda c: "runs."),
    "a name ending in a newline": (
        lambda c: c["runs"].update({first(c["runs"]) + "\n": c["runs"].pop(first(c["runs"]))}),
        lambda c: "runs.",
    ),
    "a system file as the measurement": (
        lambda c: c["measurement"].update(source="/etc/passwd"),
        lambda c: "measurement.source",
    ),
    "a system file as the real measurement": (
        lambda c: c["real_measurement"].update(source="/etc/passwd"),
        lambda c: "real_measurement.source",
    ),
    "a system file as a trace": (
        lambda c: next(spec for spec in c["replay"]["workloads"].values() if "trace" in spec).update(
            trace="/etc/passwd"
        ),
        lambda c: "replay.workloads.",
    ),
    "300 GPU rooms": (
        lambda c: c["replay"]["rooms"].update(gpu_tokens=list(range(1, 301))),
        lambda c: "jobs (replay",
    ),
    "a real measurement of 10**8 documents": (
        lambda c: c["real_measurement"].update(docs=10**8),
        lambda c: "real_measurement.source",
    ),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_the_config_check_refuses_what_a_job_would(name, tmp_path):
    mutate, key = MUTATIONS[name]
    config = load_config()
    mutate(config)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    line = one_line_error(kvlab("config", path, cwd=ROOT), code=1)
    assert line.startswith(f"kvlab config: error: {path}"), line
    assert key(config) in line, line


def test_a_link_to_a_system_file_is_no_measurement(tmp_path):
    link = tmp_path / "ttft.jsonl"
    link.symlink_to("/etc/passwd")
    config = load_config()
    config["measurement"]["source"] = str(link)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    line = one_line_error(kvlab("config", path, cwd=ROOT), code=1)
    assert "measurement.source" in line and "/etc/passwd" not in line.partition("source:")[0]


def test_the_job_bound_names_the_sections_that_pass_it():
    """The bound is on the sum of every section's jobs; the committed config is far below it, a grid of the
    bound's size is over it."""
    config = load_config()
    counts = checks.job_counts(config)
    assert sum(counts.values()) < checks.MAX_JOBS
    config["sweeps"][grid_sweep(config)]["grid"] = list(range(checks.MAX_JOBS))
    expected = checks.job_counts(config)["sweeps"]
    assert expected > checks.MAX_JOBS
    with pytest.raises(checks.ConfigError, match=rf"sweeps {expected:,}"):
        checks.check_config(config)


def test_every_job_line_of_the_committed_config_parses():
    """The lines the config check parses are the jobs' own: each names a command and its flags parse."""
    from kvlab.cli.config import refusal

    lines = list(commands.job_lines(load_config()))
    assert {line.split()[0] for _, line in lines} >= {"scenario", "replay", "mrc", "plan", "ttft", "plots"}
    parsers = {}
    assert [line for _, line in lines if refusal(parsers, shlex.split(line))] == []  # as kvlab config reads them


def test_a_config_line_names_the_key_in_the_file(tmp_path):
    """The line number is the key's in the file as written (found in the composed YAML, not by its text)."""
    config = load_config()
    run = first(config["runs"])
    config["runs"][run]["gpu"] = -1
    text = yaml.safe_dump(config, sort_keys=False)
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    line = one_line_error(kvlab("config", path, cwd=ROOT), code=1)
    assert line.startswith(f"kvlab config: error: {path}:{line_of(yaml.compose(text), ('runs', run, 'gpu'))}:")


# -- outputs: links written through, standard input never overwritten -----------------------------------------


def test_an_output_that_is_a_link_is_written_through(tmp_path):
    trace = trace_file(tmp_path)
    target, link = tmp_path / "target.csv", tmp_path / "link.csv"
    target.write_text("old\n")
    link.symlink_to(target)
    done = kvlab("replay", "--workload", "mooncake", "--trace", trace, "--gpu-tokens", 1000, "--per-request", link)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text().startswith("request,")


def test_standard_input_is_never_an_output(tmp_path):
    """``--trace -`` from a file, ``--per-request /dev/stdin``: the input file would be overwritten; refused."""
    trace = trace_file(tmp_path)
    before = trace.read_bytes()
    with open(trace, "rb") as stdin:
        done = process(
            "replay",
            "--workload",
            "mooncake",
            "--trace",
            "-",
            "--gpu-tokens",
            1000,
            "--per-request",
            "/dev/stdin",
            stdin=stdin,
        )
    assert "both an input and an output" in one_line_error(done, code=2)
    assert trace.read_bytes() == before


# -- named pipes, closed and bombed inputs ------------------------------------------------------------------------


def fifo(folder, name="pipe"):
    path = Path(folder, name)
    os.mkfifo(path)
    return path


def replay(trace, *more):
    return ("replay", "--workload", "mooncake", "--trace", trace, "--gpu-tokens", 1000, *more)


READERS = {
    "a trace": lambda pipe, tmp: replay(pipe),
    "a config": lambda pipe, tmp: ("config", pipe),
    "a measurement to summarize": lambda pipe, tmp: ("summarize", pipe, tmp / "out.json"),
    "a model config": lambda pipe, tmp: ("size", "--model-config", pipe),
}


@pytest.mark.parametrize("reader", READERS)
def test_a_named_pipe_with_no_writer_is_an_error_not_a_wait(reader, tmp_path):
    line = one_line_error(process(*READERS[reader](fifo(tmp_path), tmp_path), cwd=tmp_path), code=1)
    assert "no writer" in line


WRITERS = {
    "a per-request table": lambda pipe, tmp: replay(trace_file(tmp), "--per-request", pipe),
    "a summary": lambda pipe, tmp: ("summarize", ROOT / "data" / "measurements" / "llama-cpp-tiny.jsonl", pipe),
}


@pytest.mark.parametrize("writer", WRITERS)
def test_a_named_pipe_with_no_reader_is_an_error_not_a_wait(writer, tmp_path):
    line = one_line_error(process(*WRITERS[writer](fifo(tmp_path), tmp_path), cwd=tmp_path), code=1)
    assert "no reader" in line


def test_a_named_pipe_with_a_writer_is_read(tmp_path):
    pipe = fifo(tmp_path)
    command = [sys.executable, "-m", "kvlab", *map(str, replay(pipe))]
    reader = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with open(pipe, "w", encoding="utf-8") as writer:  # waits for the reader: it must have opened the pipe
        writer.write(json.dumps(MOONCAKE_LINE) + "\n")
    out, err = reader.communicate(timeout=HANG_GUARD)
    assert reader.returncode == 0, err
    assert json.loads(out)["requests"] == 1


def test_a_closed_standard_input_is_one_line():
    command = [sys.executable, "-c", "import os, sys; os.close(0); from kvlab.cli import entry; entry()"]
    closed = subprocess.run([*command, *map(str, replay("-"))], cwd=ROOT, capture_output=True, text=True)
    assert "standard input is closed" in one_line_error(closed, code=1)


SLACK = 2**20  # the bomb's slack in these tests (the command's own is larger): what it reads before it judges


def test_a_compression_bomb_stops_at_once(tmp_path, monkeypatch):
    """A .gz of nothing but newlines expands about 1,000 times: refused past the slack, not read for minutes."""
    from kvlab.util import files

    monkeypatch.setattr(files, "EXPANSION_SLACK", SLACK)
    bomb = tmp_path / "bomb.jsonl.gz"
    with gzip.open(bomb, "wb") as handle:
        handle.write(b"\n" * 4 * SLACK)
    assert 4 * SLACK > files.MAX_EXPANSION * bomb.stat().st_size
    assert "expands more than" in one_line_error(kvlab(*replay(bomb)), code=1)


def test_a_trace_that_expands_like_a_real_one_is_read(tmp_path, monkeypatch):
    """Past the slack, a trace as repetitive as a trace can be (one id, one length, its timestamps counting up)
    stays under the ratio."""
    from kvlab.util import files

    monkeypatch.setattr(files, "EXPANSION_SLACK", SLACK)
    trace = tmp_path / "trace.jsonl.gz"
    lines = 0
    with gzip.open(trace, "wb") as handle:
        written = 0
        while written < 2 * SLACK:
            line = (json.dumps({**MOONCAKE_LINE, "timestamp": lines}) + "\n").encode()
            handle.write(line)
            written, lines = written + len(line), lines + 1
    done = kvlab(*replay(trace))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["requests"] == lines


def test_kvlab_help_on_a_full_device_is_an_exit_code():
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "kvlab", "--help"], stdout=full, stderr=subprocess.PIPE, text=True)
    assert done.returncode == 1 and "Traceback" not in done.stderr


# -- numbers as JSON and YAML write them, every reader of JSON alike ------------------------------------------------

NUMBER_FLAGS = [
    ("scenario", "--gpu"),
    ("replay", "--gpu-tokens"),
    ("mrc", "--block-tokens"),
    ("size", "--tokens"),
]


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(NUMBER_FLAGS),
    st.integers(1, 99_999)
    .map(str)
    .flatmap(
        lambda digits: st.sampled_from(
            [
                digits[:1] + "_" + digits[1:] if len(digits) > 1 else digits + "_0",
                digits.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")),
                digits.translate(str.maketrans("0123456789", "０１２３４５６７８９")),
                f" {digits}",
            ]
        )
    ),
)
def test_numbers_are_ascii_digits(flag, text):
    """``int()`` takes ``1_000``, ``١٢٣`` and ``１２３``; a command does not."""
    command, name = flag
    args = {"replay": ["--workload", "lab"], "mrc": ["--workload", "lab"], "size": ["--model-config", "x"]}
    done = kvlab(command, *args.get(command, []), name, text)
    assert done.returncode == 2 and f"argument {name}" in done.stderr, done.stderr


def test_a_byte_order_mark_is_refused_by_every_json_reader(tmp_path):
    """The trace reader took a UTF-8 BOM that json (the measurement's and the model config's reader) refuses."""
    bom = b"\xef\xbb\xbf"
    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(bom + (json.dumps(MOONCAKE_LINE) + "\n").encode())
    measurement = tmp_path / "m.jsonl"
    record = {"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 5, "ttft_ms": 1, "total_ms": 2}
    measurement.write_bytes(bom + (json.dumps(record) + "\n").encode())
    model = tmp_path / "config.json"
    model.write_bytes(bom + (ROOT / "models" / "Qwen2.5-1.5B-Instruct" / "config.json").read_bytes())
    for args in (replay(trace), ("summarize", measurement, tmp_path / "o.json"), ("size", "--model-config", model)):
        assert ":" in one_line_error(kvlab(*args, cwd=tmp_path), code=1)


def test_a_field_given_twice_in_a_measurement_is_refused(tmp_path):
    line = '{"config":"baseline","pass":"p","doc":0,"doc_tokens":5,"ttft_ms":1,"ttft_ms":3,"total_ms":2}\n'
    (tmp_path / "m.jsonl").write_text(line)
    error = one_line_error(kvlab("summarize", "m.jsonl", "o.json", cwd=tmp_path), code=1)
    assert "m.jsonl:1:" in error and "ttft_ms" in error and "twice" in error
    assert not (tmp_path / "o.json").exists()


# -- totals past what is counted exactly ---------------------------------------------------------------------------


def test_totals_past_64_bits_are_refused_not_wrapped():
    """1,000 documents of 2**53 tokens read three times: the curve's 64-bit sums would wrap (it printed 8.6e18
    for 2.7e19 tokens); the curve and the plan refuse, the replay (Python integers) counts exactly."""
    huge = ["--workload", "lab", "--docs", 1000, "--tokens", 2**53]
    for args in (
        ("mrc", *huge, "--block-tokens", 2**53),
        (
            "plan",
            *huge,
            "--chunk-tokens",
            2**53,
            "--model-config",
            ROOT / "models/Qwen2.5-1.5B-Instruct/config.json",
            "--gpu-tokens",
            100,
            "--cpu-gib",
            1,
        ),
    ):
        assert "64 bits" in one_line_error(kvlab(*args), code=1)
    exact = kvlab("replay", *huge, "--block-tokens", 2**53, "--gpu-tokens", 100)
    assert exact.returncode == 0 and json.loads(exact.stdout)["input_tokens"] == 3000 * 2**53


def test_a_ttft_longer_than_any_is_refused(tmp_path):
    from kvlab.latency.model import MAX_MS

    records = [
        {"config": config, "pass": "p1", "doc": 0, "doc_tokens": 10, "ttft_ms": ttft, "total_ms": ttft}
        for config, ttft in (("baseline", 1.7e308), ("lmcache", 5.0))
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    done = kvlab(
        "ttft",
        "fit",
        "--measurement",
        "m.jsonl",
        "--docs",
        1,
        "--tokens",
        10,
        "--config",
        "baseline:10,0",
        "--config",
        "lmcache:10,100",
        "--pass",
        "p1:fwd",
        "--model",
        "model.json",
        "--table",
        "t.csv",
        cwd=tmp_path,
    )
    assert f"longer than {MAX_MS}" in one_line_error(done, code=1)
    assert not (tmp_path / "model.json").exists()


# -- a read-only checkout and an unwritable HOME ------------------------------------------------------------------


def test_a_read_only_checkout_and_home_still_compile(tmp_path):
    """numba cannot cache beside read-only code nor in an unwritable HOME ("no locator available", a traceback):
    kvlab points it at a folder it can write, from the command and from the Python API alike. A user and mount
    namespace (unshare) makes the copy read-only."""
    import shutil

    copy = tmp_path / "ro"
    shutil.copytree(ROOT / "kvlab", copy / "kvlab", ignore=shutil.ignore_patterns("*.nbi", "*.nbc"))
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    script = (
        f"mount --bind {copy} {copy} && mount -o remount,ro,bind {copy} && cd {copy} &&"
        f" HOME={copy} TMPDIR={temporary} {sys.executable} -m kvlab mrc --workload lab --docs 2 --tokens 10"
        " --block-tokens 4 && echo &&"
        f' HOME={copy} TMPDIR={temporary} {sys.executable} -c "import kvlab;'
        " print(kvlab.curve(workload='lab', docs=3, tokens=10, block_tokens=4).text)\""
    )
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=HANG_GUARD)
    assert done.returncode == 0, done.stderr[-2000:]
    command, function = map(json.loads, done.stdout.strip().split("\n\n"))
    assert command["workload"]["docs"] == 2 and function["workload"]["docs"] == 3
    assert list(temporary.glob("kvlab-numba-*"))  # where the kernels went


def test_the_committed_config_has_what_the_mutations_change():
    """The mutations above find what they change in the parsed config (a config without it would make them
    vacuous)."""
    config = load_config()
    for mutate, _ in MUTATIONS.values():
        mutate(copy.deepcopy(config))
