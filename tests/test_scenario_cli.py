"""Tests of the lab's scenario (SPEC.md steps 2, 3, 4, 6, 7), ``kvlab scenario`` and ``python kvlab/scenario.py``:
the command line, its one JSON document, the lab's expected numbers (derived by hand below), bad arguments, the
command and the script byte for byte alike (and ``kvlab summarize`` and ``python kvlab/summarize.py``), and the
scripts copied alone.

The command runs in this process (fast); the scripts run by path in a process of their own, as the lab runs them.

Hand derivation for the defaults (every document 5011 tokens): a room of R tokens holds R // 5011
documents, so GPU 21520 holds 4, GPU 50109 holds 9, GPU 50110 holds all 10 (10 * 5011 = 50110),
CPU 56000 holds 11 (i.e. all 10). Reading 0..9 cyclically through an LRU that holds fewer than
10 evicts each document just before it is needed again: zero hits (the cliff).
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import KVLAB, ROOT, kvlab, run_python
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import scenario
from kvlab.cache.write_policies import make_cache
from kvlab.loop import replay as block_replay
from kvlab.workloads import LabWorkload

SCRIPT = KVLAB / "scenario.py"
SUMMARIZE = KVLAB / "summarize.py"
PASS_KEYS = ["order", "gpu_hits", "cpu_hits", "misses", "hit_docs"]


def run_cli(*args, cwd=ROOT):
    """``kvlab scenario ARGS``, in this process."""
    return kvlab("scenario", *args, cwd=cwd)


def run_script(*args, script=SCRIPT, cwd=ROOT, env=None):
    """``python kvlab/scenario.py ARGS`` (or another script), in a process of its own."""
    return run_python(script, *args, cwd=cwd, env=env, timeout=60)


def run_ok(*args, **kwargs):
    """Run the command, check the one-JSON-document contract, and return the parsed document."""
    proc = run_cli(*args, **kwargs)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    document = json.loads(proc.stdout)  # the whole stdout: raises on anything printed besides one document
    assert list(document) == ["passes"]
    for item in document["passes"]:
        assert list(item) == PASS_KEYS
        assert item["order"] in ("fwd", "rev")
        for key in ("gpu_hits", "cpu_hits", "misses"):
            assert type(item[key]) is int
        assert type(item["hit_docs"]) is list
        assert all(type(doc) is int for doc in item["hit_docs"])
    return document


def replay(gpu, cpu, docs, tokens, passes):
    """Independent brute-force replay. All documents have the same size, so a room of R tokens is
    R // tokens slots (unbounded when tokens == 0) and each tier is a list of documents, oldest first."""

    def slots(room):
        return None if tokens == 0 else room // tokens

    gpu_slots, cpu_slots = slots(gpu), slots(cpu)
    gpu_docs, cpu_docs = [], []

    def lru_access(stored, limit, doc):
        if doc in stored:
            stored.remove(doc)
            stored.append(doc)
            return
        if limit is not None:
            if limit == 0:
                return
            if len(stored) >= limit:
                del stored[0]
        stored.append(doc)

    out = []
    for order in passes:
        reading = list(range(docs)) if order == "fwd" else list(reversed(range(docs)))
        gpu_hits = cpu_hits = misses = 0
        hit_docs = []
        for doc in reading:
            if doc in gpu_docs:
                lru_access(gpu_docs, gpu_slots, doc)
                gpu_hits += 1
                hit_docs.append(doc)
            elif doc in cpu_docs:
                lru_access(cpu_docs, cpu_slots, doc)
                lru_access(gpu_docs, gpu_slots, doc)
                cpu_hits += 1
                hit_docs.append(doc)
            else:
                lru_access(gpu_docs, gpu_slots, doc)
                lru_access(cpu_docs, cpu_slots, doc)
                misses += 1
        out.append({"order": order, "gpu_hits": gpu_hits, "cpu_hits": cpu_hits, "misses": misses, "hit_docs": hit_docs})
    return {"passes": out}


def p(order, gpu_hits, cpu_hits, misses, hit_docs):
    return {"order": order, "gpu_hits": gpu_hits, "cpu_hits": cpu_hits, "misses": misses, "hit_docs": hit_docs}


# --------------------------------------------------------------------------------------------
# The lab's numbers, derived by hand
# --------------------------------------------------------------------------------------------


def test_defaults_baseline():
    # GPU holds 4 documents; after pass 1 and pass 2 (both all-miss) it holds 6, 7, 8, 9,
    # which the reverse pass reads first.
    assert run_ok() == {
        "passes": [
            p("fwd", 0, 0, 10, []),
            p("fwd", 0, 0, 10, []),
            p("rev", 4, 0, 6, [9, 8, 7, 6]),
        ]
    }


def test_cyclic():
    assert run_ok("--passes", "fwd,fwd") == {"passes": [p("fwd", 0, 0, 10, []), p("fwd", 0, 0, 10, [])]}


def test_explicit_defaults_equal_defaults():
    explicit = run_cli("--gpu", "21520", "--docs", "10", "--tokens", "5011", "--passes", "fwd,fwd,rev")
    assert explicit.returncode == 0
    assert explicit.stdout == run_cli().stdout


def test_offload():
    # CPU holds all 10: pass 2 loads every document from the CPU; the GPU again ends with 6..9,
    # so the reverse pass is 4 GPU hits (9, 8, 7, 6) then 6 CPU loads (5 .. 0).
    assert run_ok("--gpu", "21520", "--cpu", "56000", "--passes", "fwd,fwd,rev") == {
        "passes": [
            p("fwd", 0, 0, 10, []),
            p("fwd", 0, 10, 0, list(range(10))),
            p("rev", 4, 6, 0, [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]),
        ]
    }


def test_offload_is_default_passes():
    assert run_cli("--cpu", "56000").stdout == run_cli("--cpu", "56000", "--passes", "fwd,fwd,rev").stdout


@pytest.mark.parametrize("gpu, hits", [(21520, 0), (30000, 0), (40000, 0), (45000, 0), (50109, 0), (50110, 10)])
def test_cliff(gpu, hits):
    first, second = run_ok("--gpu", str(gpu), "--passes", "fwd,fwd")["passes"]
    assert first == p("fwd", 0, 0, 10, [])
    assert second["gpu_hits"] + second["cpu_hits"] == hits
    assert second["cpu_hits"] == 0  # no CPU tier
    assert second["misses"] == 10 - hits
    assert second["hit_docs"] == list(range(hits))


@pytest.mark.parametrize(
    "cpu, misses", [(0, 10), (20000, 10), (30000, 10), (40000, 10), (50109, 10), (50110, 0), (56000, 0)]
)
def test_cpu_cliff(cpu, misses):
    first, second = run_ok("--gpu", "21520", "--cpu", str(cpu), "--passes", "fwd,fwd")["passes"]
    assert first == p("fwd", 0, 0, 10, [])
    assert second["misses"] == misses
    assert second["gpu_hits"] == 0  # the GPU (4 docs) never helps a cyclic pass of 10
    assert second["cpu_hits"] == 10 - misses
    assert second["hit_docs"] == list(range(10 - misses))


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--passes", "fwd,fwd"],
        ["--gpu", "50110", "--passes", "fwd,rev,fwd"],
        ["--tokens", "0"],
        ["--docs", "0"],
        ["--gpu", "0", "--passes", "rev,rev"],
    ],
)
def test_cpu_zero_equals_no_cpu(args):
    without = run_cli(*args)
    with_zero = run_cli(*args, "--cpu", "0")
    assert without.returncode == with_zero.returncode == 0
    assert without.stdout == with_zero.stdout
    assert without.stderr == with_zero.stderr == ""
    assert all(item["cpu_hits"] == 0 for item in json.loads(without.stdout)["passes"])


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--cpu", "56000"],
        ["--gpu", "0", "--cpu", "12", "--docs", "5", "--tokens", "3", "--passes", "rev,fwd,rev,fwd"],
        ["--gpu", "7", "--cpu", "7", "--docs", "4", "--tokens", "0", "--passes", "fwd"],
        ["--docs", "0", "--passes", "rev"],
        ["--gpu", "15033", "--cpu", "30066", "--docs", "12", "--passes", "fwd,rev,rev,fwd"],
    ],
)
def test_cli_matches_replay(args):
    params = {"gpu": 21520, "cpu": 0, "docs": 10, "tokens": 5011, "passes": ["fwd", "fwd", "rev"]}
    for option, value in zip(args[::2], args[1::2], strict=True):
        name = option.removeprefix("--")
        params[name] = value.split(",") if name == "passes" else int(value)
    assert run_ok(*args) == replay(**params)


# --------------------------------------------------------------------------------------------
# run() in-process against the brute-force replay
# --------------------------------------------------------------------------------------------


def test_replay_model_sanity():
    """The model reproduces the hand-derived lab numbers (so it is not vacuously agreeing with run())."""
    assert replay(21520, 0, 10, 5011, ["fwd", "fwd", "rev"])["passes"][2] == p("rev", 4, 0, 6, [9, 8, 7, 6])
    assert replay(21520, 56000, 10, 5011, ["fwd", "fwd"])["passes"][1] == p("fwd", 0, 10, 0, list(range(10)))
    assert replay(50109, 0, 10, 5011, ["fwd", "fwd"])["passes"][1]["misses"] == 10


@settings(max_examples=1500, deadline=None, database=None)
@given(
    gpu=st.integers(min_value=0, max_value=60),
    cpu=st.integers(min_value=0, max_value=80),
    docs=st.integers(min_value=0, max_value=9),
    tokens=st.integers(min_value=0, max_value=12),
    passes=st.lists(st.sampled_from(["fwd", "rev"]), max_size=5),
)
def test_run_matches_replay(gpu, cpu, docs, tokens, passes):
    result = scenario.run(gpu, cpu, docs, tokens, passes)
    expected = replay(gpu, cpu, docs, tokens, passes)
    assert result == expected
    assert json.loads(json.dumps(result)) == result
    for item in result["passes"]:
        assert list(item) == PASS_KEYS
        assert item["gpu_hits"] + item["cpu_hits"] + item["misses"] == docs
        assert len(item["hit_docs"]) == item["gpu_hits"] + item["cpu_hits"]


@settings(max_examples=300, deadline=None, database=None)
@given(
    gpu=st.integers(min_value=0, max_value=60),
    docs=st.integers(min_value=0, max_value=9),
    tokens=st.integers(min_value=0, max_value=12),
    passes=st.lists(st.sampled_from(["fwd", "rev"]), max_size=5),
)
def test_run_cpu_zero_has_no_cpu_hits(gpu, docs, tokens, passes):
    result = scenario.run(gpu, 0, docs, tokens, passes)
    assert all(item["cpu_hits"] == 0 for item in result["passes"])
    assert result == replay(gpu, 0, docs, tokens, passes)


# --------------------------------------------------------------------------------------------
# Bad arguments
# --------------------------------------------------------------------------------------------

BAD_NUMBERS = ["-1", "-5011", "1.5", "abc", "1e3", ""]
BAD_PASSES = ["fwd,bwd", "FWD", "fwd,,rev", "", "fwd,", "fwd rev", "-1"]
BAD_CASES = (
    [[option, value] for option in ("--gpu", "--cpu", "--docs", "--tokens") for value in BAD_NUMBERS]
    + [[f"{option}={value}"] for option in ("--gpu", "--cpu", "--docs", "--tokens") for value in ("-1", "1.5", "abc")]
    + [["--passes", value] for value in BAD_PASSES]
    + [[f"--passes={value}"] for value in ("fwd,bwd", "FWD", "fwd,,rev")]
    + [["--gpu"], ["--passes"], ["--no-such-option"], ["extra"], ["two\nlines"], ["--passes", "fwd\nrev"]]
    + [["--write-policy", value] for value in ("write-around", "", "WRITE-BACK", "write_back")]
    + [["--docs", str(10**8 + 1)], ["--docs", str(10**8 // 2 + 1), "--passes", "fwd,fwd"]]  # > 10**8 reads
)


@pytest.mark.parametrize("args", BAD_CASES, ids=repr)
def test_bad_arguments(args):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert proc.stderr.endswith("\n")
    assert lines[0].startswith("kvlab scenario: error: ")


def test_too_many_reads_name_the_limit():
    proc = run_cli("--docs", str(10**8 // 2 + 1), "--passes", "fwd,fwd")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "100000000" in proc.stderr and "--docs" in proc.stderr


def test_bad_argument_with_otherwise_good_ones():
    proc = run_cli("--gpu", "50110", "--cpu", "56000", "--passes", "fwd,bwd")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith("kvlab scenario: error: ")


# --------------------------------------------------------------------------------------------
# The scripts copied alone
# --------------------------------------------------------------------------------------------


def test_a_bad_write_policy_lists_the_valid_ones():
    proc = run_cli("--write-policy", "write-around")
    assert proc.returncode == 2 and proc.stdout == ""
    assert all(name in proc.stderr for name in ("write-through", "write-back", "selective"))


@settings(max_examples=200, deadline=None, database=None)
@given(
    policy=st.sampled_from(["write-through", "write-back", "selective"]),
    gpu=st.integers(0, 60),
    cpu=st.integers(0, 60),
    docs=st.integers(0, 8),
    tokens=st.integers(1, 12),
    passes=st.lists(st.sampled_from(["fwd", "rev"]), min_size=1, max_size=4),
)
def test_run_of_each_write_policy_is_the_block_replay(policy, gpu, cpu, docs, tokens, passes):
    """scenario.py's --write-policy (kvsim's document-level classes) against the block-level replay, one block per
    document: the same GPU hits, CPU hits and misses in every pass."""
    result = scenario.run(gpu, cpu, docs, tokens, passes, policy)
    workload = LabWorkload(tokens, docs=docs, tokens=tokens, passes=",".join(passes))
    totals = block_replay(workload, make_cache(policy, gpu, cpu, tokens))
    for counts, row in zip(result["passes"], totals, strict=True):
        requests, blocks, _, gpu_blocks, cpu_blocks, _, _ = row
        assert (counts["gpu_hits"], counts["cpu_hits"]) == (gpu_blocks, cpu_blocks)
        assert counts["misses"] == blocks - gpu_blocks - cpu_blocks


@pytest.mark.parametrize(
    "args", [["--passes", "fwd,fwd"], [], ["--cpu", "56000"], ["--cpu", "30066", "--write-policy", "write-back"]]
)
def test_standalone_copy(tmp_path, args):
    for name in ("kvsim.py", "scenario.py", "summarize.py"):
        shutil.copy(KVLAB / name, tmp_path / name)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    alone = subprocess.run(
        [sys.executable, "scenario.py", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert alone.returncode == 0, alone.stderr
    assert alone.stderr == ""
    from_repo = run_script(*args)
    assert from_repo.returncode == 0
    assert alone.stdout == from_repo.stdout == run_cli(*args).stdout
    json.loads(alone.stdout)
    assert sorted(path.name for path in tmp_path.iterdir() if path.is_file()) == [
        "kvsim.py",
        "scenario.py",
        "summarize.py",
    ]


# --------------------------------------------------------------------------------------------
# The command and the scripts, byte for byte
# --------------------------------------------------------------------------------------------


def run_bytes(*args, cwd=ROOT):
    """``python ARGS`` in a process of its own; stdout and stderr as bytes (no newline translation)."""
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, capture_output=True, timeout=60)


def as_bytes(proc):
    """A CompletedProcess with text output (the in-process command's) as the bytes a console would get."""
    if isinstance(proc.stdout, bytes):
        return proc
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.encode(), proc.stderr.encode())


def same_apart_from_prog(command, script, prog, script_prog):
    """The same exit code and stdout bytes; stderr the same line by line once each names its own program."""
    command, script = as_bytes(command), as_bytes(script)
    assert command.returncode == script.returncode, (command.stderr, script.stderr)
    assert command.stdout == script.stdout
    prog, script_prog = prog.encode(), script_prog.encode()
    ours = command.stderr.splitlines(keepends=True)
    theirs = script.stderr.splitlines(keepends=True)
    assert len(ours) == len(theirs), (command.stderr, script.stderr)
    for mine, other in zip(ours, theirs, strict=True):
        assert mine.startswith(prog + b": ") and other.startswith(script_prog + b": "), (mine, other)
        assert mine.removeprefix(prog + b": ") == other.removeprefix(script_prog + b": ")


SCENARIO_ARGS = [  # (arguments, exit code)
    ([], 0),
    (["--passes", "fwd,fwd"], 0),
    (["--cpu", "56000"], 0),
    (["--gpu", "50110", "--passes", "fwd,rev,fwd"], 0),
    (["--gpu", "0", "--cpu", "12", "--docs", "5", "--tokens", "3", "--passes", "rev,fwd,rev,fwd"], 0),
    (["--gpu", "7", "--cpu", "7", "--docs", "4", "--tokens", "0", "--passes", "fwd"], 0),
    (["--docs", "0", "--passes", "rev"], 0),
    (["--gpu=15033", "--cpu=30066", "--docs=12", "--passes=fwd,rev,rev,fwd"], 0),
    (["--cpu", "30066", "--write-policy", "write-back"], 0),
    (["--cpu", "56000", "--write-policy", "selective", "--passes", "fwd,fwd,fwd"], 0),
    (["--gpu", str(2**53), "--cpu", str(2**53), "--docs", "3"], 0),
    (["--gpu", str(10**30), "--cpu", "0", "--docs", "3"], 2),
    # bad ones: the same one line (but for the program's name), the same exit code, nothing on stdout
    (["--gpu", "-1"], 2),
    (["--passes", "fwd,bwd"], 2),
    (["--write-policy", "write-around"], 2),
    (["--docs", str(10**8 + 1)], 2),
    (["--no-such-option"], 2),
    (["two\nlines"], 2),
]


@pytest.mark.parametrize("args, status", SCENARIO_ARGS, ids=repr)
def test_command_and_script_print_the_same_bytes(args, status):
    """``kvlab scenario ARGS`` and ``python kvlab/scenario.py ARGS`` write byte-identical stdout (and exit alike)."""
    command = run_cli(*args)
    script = run_bytes(SCRIPT, *args)
    assert command.returncode == status, command.stderr
    same_apart_from_prog(command, script, "kvlab scenario", "scenario.py")
    if status == 0:
        assert command.stderr == "" and command.stdout.endswith("}\n")  # not vacuous: a document to compare


@pytest.mark.parametrize("args, status", [SCENARIO_ARGS[0], SCENARIO_ARGS[8], SCENARIO_ARGS[-3]], ids=repr)
def test_command_in_a_process_of_its_own_prints_the_same_bytes(args, status):
    """The same with the command in a process of its own (``python -m kvlab``, the console script's entry)."""
    command = run_bytes("-m", "kvlab", "scenario", *args)
    assert command.returncode == status, command.stderr
    same_apart_from_prog(command, run_bytes(SCRIPT, *args), "kvlab scenario", "scenario.py")


def request(config, ttft, name="p", doc=0):
    return {"config": config, "pass": name, "doc": doc, "doc_tokens": 5011, "ttft_ms": ttft, "total_ms": ttft + 210}


SUMMARIZE_INPUTS = {  # name: (lines, exit code)
    "lab-passes": (
        [
            request(config, ttft, name, doc)
            for config, scale in (("baseline", 1.0), ("lmcache", 0.3))
            for name in ("pass1-cold", "pass2-replay", "pass3-reverse")
            for doc, ttft in enumerate([576.0 * scale, 30, 48.6 * scale + 1, 601.25, 2.675])
        ],
        0,
    ),
    "one-config-warns": ([*(request("baseline", doc) for doc in range(4)), request("other", 1)], 0),
    "zero-lmcache-warns": ([request("baseline", 3.5), request("lmcache", 0)], 0),
    "empty": ([], 0),
    "bad-line": ([request("baseline", 1), "{oops"], 1),
    "negative": ([request("lmcache", -1)], 1),
    "overflow": ([request("baseline", 1e300), request("lmcache", 1e-300)], 1),
}


@pytest.mark.parametrize("lines, status", SUMMARIZE_INPUTS.values(), ids=SUMMARIZE_INPUTS.keys())
def test_summarize_command_and_script_write_the_same_bytes(tmp_path, lines, status):
    """``kvlab summarize IN OUT`` and ``python kvlab/summarize.py IN OUT`` write byte-identical files (or none),
    exit alike, and say the same warnings or error line but for the program's name. Each runs in a folder of its
    own with the same relative paths, so that the messages name the same files."""
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    runs = {"command": [], "script": []}
    for name, outputs in runs.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "in.jsonl").write_text(text, encoding="utf-8")
        (folder / "old.json").write_bytes(b"keep me unless summarized\n")
        for out in ("new.json", "old.json"):  # a new file, and one written over
            if name == "command":
                outputs.append(kvlab("summarize", "in.jsonl", out, cwd=folder))
            else:
                outputs.append(run_bytes(SUMMARIZE, "in.jsonl", out, cwd=folder))
    for command, script in zip(runs["command"], runs["script"], strict=True):
        assert command.returncode == status, command.stderr
        same_apart_from_prog(command, script, "kvlab summarize", "summarize.py")
    files = {name: sorted(path.name for path in (tmp_path / name).iterdir()) for name in runs}
    assert (
        files["command"]
        == files["script"]
        == (["in.jsonl", "new.json", "old.json"] if status == 0 else ["in.jsonl", "old.json"])
    )
    for name in files["command"]:
        assert (tmp_path / "command" / name).read_bytes() == (tmp_path / "script" / name).read_bytes(), name
    if status == 0:
        assert (tmp_path / "command" / "new.json").read_bytes() == (tmp_path / "command" / "old.json").read_bytes()
