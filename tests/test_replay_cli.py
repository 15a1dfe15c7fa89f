"""Tests of ``kvlab replay`` (kvlab/cli/replay.py over kvlab/loop.py): the one-JSON-object contract, the
per-request CSV, bad flags, equivalence with the lab's document-level simulator, the Mooncake trace against an
independent count, two-tier properties, and the progress bar (in a real process on a terminal)."""

import fcntl
import gzip
import io
import json
import os
import random
import struct
import subprocess
import sys
import termios

import pandas as pd
import pytest
from conftest import ROOT, kvlab, run_python

from kvlab import loop as replay
from kvlab import scenario
from kvlab.cache.write_policies import make_cache
from kvlab.cli.replay import progress_bar
from kvlab.workloads import WORKLOADS

TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
UNLIMITED = str(10**12)
FIGURES = [
    "requests",
    "block_accesses",
    "input_tokens",
    "gpu_hit_tokens",
    "cpu_hit_tokens",
    "computed_tokens",
    "token_hit_ratio",
    "gpu_hit_blocks",
    "cpu_hit_blocks",
    "computed_blocks",
    "block_hit_ratio",
]
TOP_KEYS = ["workload", "cache", *FIGURES, "rounds"]
SUMMED = [key for key in FIGURES if not key.endswith("_ratio")]
CSV_TAIL = ["blocks", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens"]


def run_cli(*args, cwd=ROOT):
    return kvlab("replay", *args, cwd=cwd)


def ratio(part, whole):
    return round(part / whole, 6) if whole else None


def check_figures(figures):
    """Every token is served by one tier or computed; the same for blocks; the ratios follow from the counts."""
    assert figures["gpu_hit_tokens"] + figures["cpu_hit_tokens"] + figures["computed_tokens"] == figures["input_tokens"]
    assert (
        figures["gpu_hit_blocks"] + figures["cpu_hit_blocks"] + figures["computed_blocks"] == figures["block_accesses"]
    )
    assert min(figures[key] for key in SUMMED) >= 0
    hits = figures["gpu_hit_tokens"] + figures["cpu_hit_tokens"]
    assert figures["token_hit_ratio"] == ratio(hits, figures["input_tokens"])
    block_hits = figures["gpu_hit_blocks"] + figures["cpu_hit_blocks"]
    assert figures["block_hit_ratio"] == ratio(block_hits, figures["block_accesses"])


def run_ok(*args, **kwargs):
    """Run the command; check the one-JSON-object contract and the bookkeeping; return the parsed object."""
    proc = run_cli(*args, **kwargs)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # not a terminal: no progress bar
    assert proc.stdout.endswith("}\n") and not proc.stdout.endswith("\n\n")
    report = json.loads(proc.stdout)  # the whole stdout: raises on anything printed besides one object
    assert list(report) == TOP_KEYS
    check_figures(report)
    for one in report["rounds"]:
        assert list(one) == ["round", *FIGURES]
        check_figures(one)
    for key in SUMMED:
        assert sum(one[key] for one in report["rounds"]) == report[key], key
    return report


def first_trace_line():
    with gzip.open(TRACE, "rt", encoding="utf-8") as handle:
        return handle.readline()


def read_csv(path):
    return pd.read_csv(path, keep_default_na=False)


# --------------------------------------------------------------------------------------------
# Output shape and the per-request table
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, rounds",
    [
        (["--workload", "lab", "--passes", "fwd,rev,fwd,fwd"], ["pass1", "pass2", "pass3", "pass4"]),
        (
            ["--workload", "lab", "--partial-blocks", "keep", "--eviction-order", "head-first"],
            ["pass1", "pass2", "pass3"],
        ),
        (["--workload", "long_doc_qa", "--num-documents", "5", "--document-length", "3000"], ["warmup", "query"]),
        (["--workload", "mooncake", "--trace", TRACE, "--block-tokens", "1024"], ["trace"]),
    ],
)
def test_report_shape(args, rounds):
    """One JSON object whose rounds are the workload's own, and whose cache block is the settings used."""
    report = run_ok(*args, "--gpu-tokens", "21520", "--cpu-tokens", "56000")
    assert [one["round"] for one in report["rounds"]] == rounds
    assert report["workload"]["source"] == args[1]
    cache = report["cache"]
    assert list(cache) == [
        "gpu_tokens",
        "cpu_tokens",
        "block_tokens",
        "partial_blocks",
        "eviction_order",
        "write_policy",
        "gpu_eviction",
        "cpu_eviction",
        "touch_cpu_on_gpu_hit",
        "re_store_on_gpu_hit",
    ]
    assert (cache["gpu_tokens"], cache["cpu_tokens"]) == (21520, 56000)
    given = dict(zip(args[::2], args[1::2], strict=True))
    assert cache["block_tokens"] == int(given.get("--block-tokens", 256))
    assert cache["partial_blocks"] == given.get("--partial-blocks", "drop")
    assert cache["eviction_order"] == given.get("--eviction-order", "tail-first")


def test_no_cpu_tier_by_default():
    """Without --cpu-tokens there is no CPU tier: nothing is ever served from it."""
    report = run_ok("--workload", "lab", "--gpu-tokens", "30000", "--docs", "4", "--tokens", "3000")
    assert report["cache"]["cpu_tokens"] == 0
    assert all(one["cpu_hit_tokens"] == one["cpu_hit_blocks"] == 0 for one in [report, *report["rounds"]])
    assert report["gpu_hit_tokens"] > 0  # 4 x 3000 tokens fit: not vacuous


def check_per_request(table, report, label):
    """The table has the documented columns, one row per request in order, and adds up to the JSON."""
    assert list(table.columns) == ["request", "round", label, *CSV_TAIL]
    assert len(table) == report["requests"]
    assert table["request"].tolist() == list(range(len(table)))
    assert table["round"].tolist() == [one["round"] for one in report["rounds"] for _ in range(one["requests"])]
    computed = table["input_tokens"] - table["gpu_hit_tokens"] - table["cpu_hit_tokens"]
    assert table["computed_tokens"].tolist() == computed.tolist()
    sums = {"block_accesses": "blocks", **{key: key for key in CSV_TAIL[1:]}}
    for one in report["rounds"]:
        part = table[table["round"] == one["round"]]
        for key, column in sums.items():
            assert int(part[column].sum()) == one[key], (one["round"], key)
    for key, column in sums.items():
        assert int(table[column].sum()) == report[key], key


def test_per_request_lab(tmp_path):
    """Lab rows follow the passes' document orders; the file sits beside an unchanged stdout."""
    out = tmp_path / "lab.csv"
    args = ["--workload", "lab", "--docs", "6", "--passes", "fwd,rev", "--gpu-tokens", "21520", "--cpu-tokens", "20000"]
    report = run_ok(*args, "--per-request", out)
    assert run_cli(*args).stdout == json.dumps(report, indent=2) + "\n"
    table = read_csv(out)
    check_per_request(table, report, "document")
    assert table["document"].tolist() == [0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0]
    assert set(table["blocks"]) == {-(-5011 // 256)} and set(table["input_tokens"]) == {5011}


def test_per_request_long_doc_qa(tmp_path):
    """Warm-up reads each document once in order; the query round is the benchmark's seeded shuffle."""
    out = tmp_path / "ldqa.csv"
    args = ["--num-documents", "7", "--document-length", "1000", "--repeat-count", "3", "--shuffle-seed", "11"]
    report = run_ok("--workload", "long_doc_qa", *args, "--gpu-tokens", "5000", "--per-request", out)
    table = read_csv(out)
    check_per_request(table, report, "document")
    expected = list(range(7)) * 3
    random.seed(11)  # what LMCache's long_doc_qa does before random.shuffle
    random.shuffle(expected)
    assert table["document"].tolist() == list(range(7)) + expected


def test_per_request_mooncake(tmp_path, trace_lines):
    """Mooncake rows carry the trace's timestamps and lengths, line by line."""
    out = tmp_path / "mooncake.csv"
    report = run_ok("--workload", "mooncake", "--trace", TRACE, "--gpu-tokens", "200000", "--per-request", out)
    table = read_csv(out)
    check_per_request(table, report, "timestamp")
    assert table["timestamp"].tolist() == [line["timestamp"] for line in trace_lines]
    assert table["input_tokens"].tolist() == [line["input_length"] for line in trace_lines]
    assert table["blocks"].tolist() == [len(line["hash_ids"]) for line in trace_lines]


def check_one_line_error(proc):
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("kvlab replay: error: ")
    assert "Traceback" not in proc.stderr


def test_failed_run_keeps_per_request_file(tmp_path):
    """A bad trace line stops the replay before anything is written: the old file stays, no stray temp files."""
    bad = tmp_path / "t.jsonl"
    bad.write_text(first_trace_line() + "{not json\n")
    out = tmp_path / "per.csv"
    out.write_text("old content\n")
    proc = run_cli("--workload", "mooncake", "--trace", bad, "--gpu-tokens", "9", "--per-request", out)
    check_one_line_error(proc)
    assert "t.jsonl:2:" in proc.stderr
    assert out.read_text() == "old content\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["per.csv", "t.jsonl"]


@pytest.mark.parametrize("where", ["missing/x.csv", "folder"])
def test_unwritable_per_request(tmp_path, where):
    """A --per-request path that cannot be written: exit 1, one line, no JSON, nothing created or left behind."""
    (tmp_path / "folder").mkdir()
    proc = run_cli("--workload", "lab", "--gpu-tokens", "100", "--per-request", tmp_path / where)
    check_one_line_error(proc)
    assert "cannot write" in proc.stderr
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["folder"]


def test_other_working_directory(tmp_path):
    """The script finds its package from anywhere; a relative --per-request is relative to the caller's folder."""
    args = ["--workload", "lab", "--gpu-tokens", "21520", "--cpu-tokens", "56000"]
    elsewhere = run_ok(*args, "--per-request", "rows.csv", cwd=tmp_path)
    assert elsewhere == run_ok(*args)
    check_per_request(read_csv(tmp_path / "rows.csv"), elsewhere, "document")


# --------------------------------------------------------------------------------------------
# Equivalence with the lab's document-level simulator (one block per document)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gpu, cpu, docs, tokens, passes, block, order",
    [
        (21520, 56000, 10, 5011, "fwd,fwd,rev", 5011, "tail-first"),
        (21520, 56000, 10, 5011, "fwd,fwd,rev", 8192, "head-first"),
        (21520, 0, 10, 5011, "fwd,fwd,rev", 5011, "tail-first"),
        (50110, 0, 10, 5011, "fwd,fwd", 6000, "tail-first"),
        (15033, 30066, 12, 5011, "fwd,rev,rev,fwd", 5011, "tail-first"),
        (0, 12, 5, 3, "rev,fwd,rev,fwd", 4, "head-first"),
        (7, 9, 6, 2, "fwd,rev,fwd", 2, "tail-first"),
    ],
)
def test_matches_scenario(tmp_path, gpu, cpu, docs, tokens, passes, block, order):
    """Blocks at least a document long turn the replay into the lab's cache: the same hits, pass by pass."""
    out = tmp_path / "rows.csv"
    args = ["--workload", "lab", "--docs", docs, "--tokens", tokens, "--passes", passes, "--block-tokens", block]
    cache = ["--gpu-tokens", gpu, "--cpu-tokens", cpu, "--partial-blocks", "keep", "--eviction-order", order]
    report = run_ok(*args, *cache, "--per-request", out)
    table = read_csv(out)
    expected = scenario.run(gpu, cpu, docs, tokens, passes.split(","))["passes"]
    assert len(report["rounds"]) == len(expected)
    for one, lab in zip(report["rounds"], expected, strict=True):
        rows = table[table["round"] == one["round"]]
        gpu_hit = rows["gpu_hit_tokens"] > 0
        cpu_hit = ~gpu_hit & (rows["cpu_hit_tokens"] > 0)
        assert int(gpu_hit.sum()) == lab["gpu_hits"] == one["gpu_hit_blocks"]
        assert int(cpu_hit.sum()) == lab["cpu_hits"] == one["cpu_hit_blocks"]
        assert len(rows) - int(gpu_hit.sum() + cpu_hit.sum()) == lab["misses"] == one["computed_blocks"]
        assert rows.loc[gpu_hit | cpu_hit, "document"].tolist() == lab["hit_docs"]


# --------------------------------------------------------------------------------------------
# The Mooncake trace against an independent count of its hash ids
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trace_lines():
    with gzip.open(TRACE, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def test_mooncake_unlimited_room(trace_lines):
    """With room for everything, a block is a hit iff its hash id was seen before (the ids are chained)."""
    seen, hit_tokens = set(), 0
    for line in trace_lines:
        ids, length = line["hash_ids"], line["input_length"]
        for index, block in enumerate(ids):
            if block in seen:
                hit_tokens += 512 if index < len(ids) - 1 else length - 512 * (len(ids) - 1)
        seen.update(ids)
    total = sum(len(line["hash_ids"]) for line in trace_lines)
    input_tokens = sum(line["input_length"] for line in trace_lines)
    keep = run_ok("--workload", "mooncake", "--trace", TRACE, "--gpu-tokens", UNLIMITED, "--partial-blocks", "keep")
    assert keep["workload"] == {"source": "mooncake", "trace": "conversation_trace.jsonl.gz"}
    assert (keep["requests"], keep["block_accesses"]) == (len(trace_lines), total) == (12031, 288500)
    assert keep["input_tokens"] == input_tokens
    assert keep["block_hit_ratio"] == round(1 - len(seen) / total, 6) == pytest.approx(0.366412, abs=1e-6)
    assert keep["gpu_hit_tokens"] == hit_tokens and keep["cpu_hit_tokens"] == 0
    assert keep["token_hit_ratio"] == round(hit_tokens / input_tokens, 6)
    drop = run_ok("--workload", "mooncake", "--trace", TRACE, "--gpu-tokens", UNLIMITED)
    assert drop["block_hit_ratio"] <= keep["block_hit_ratio"]
    assert drop["block_accesses"] == total


# --------------------------------------------------------------------------------------------
# Two-tier properties on small runs
# --------------------------------------------------------------------------------------------

SMALL = {
    "lab": ["--workload", "lab", "--docs", "4", "--tokens", "1000", "--passes", "fwd,fwd"],
    "long_doc_qa": ["--workload", "long_doc_qa", "--num-documents", "4", "--document-length", "1000"],
}


@pytest.mark.parametrize("workload", sorted(SMALL))
@pytest.mark.parametrize("partial", ["drop", "keep"])
def test_cpu_room_for_everything(workload, partial):
    """A CPU room of exactly the stored tokens (GPU 0) serves the second round whole but the dropped tail blocks."""
    block, docs, tokens = 256, 4, 1000
    stored = docs * (tokens if partial == "keep" else tokens // block * block)
    args = [*SMALL[workload], "--block-tokens", block, "--partial-blocks", partial, "--gpu-tokens", "0"]
    first, second = run_ok(*args, "--cpu-tokens", stored)["rounds"]
    assert first["computed_tokens"] == first["input_tokens"] == docs * tokens
    assert second["gpu_hit_tokens"] == 0
    left = tokens % block if partial == "drop" else 0
    assert second["computed_tokens"] == second["requests"] * left
    short = run_ok(*args, "--cpu-tokens", stored - 1)["rounds"][1]
    assert short["computed_tokens"] > second["computed_tokens"]


def test_tail_first_keeps_the_head():
    """Tail-first eviction keeps document 5's head on the GPU for the reverse pass; head-first loses it."""
    args = ["--workload", "lab", "--gpu-tokens", "21520", "--block-tokens", "256", "--passes", "fwd,fwd,rev"]
    tail = run_ok(*args, "--eviction-order", "tail-first")["rounds"][2]
    head = run_ok(*args, "--eviction-order", "head-first")["rounds"][2]
    assert tail["gpu_hit_tokens"] > head["gpu_hit_tokens"] > 0
    assert tail["input_tokens"] == head["input_tokens"]


@pytest.mark.parametrize("design", ["write-through", "write-back", "selective"])
@pytest.mark.parametrize("eviction", ["lru", "fifo", "lfu", "arc", "opt"])
def test_every_design_from_the_command_line(design, eviction):
    """The flags reach the cache: the report names the design, and its figures are the in-process replay's."""
    args = ["--workload", "lab", "--gpu-tokens", "21520", "--cpu-tokens", "20000", "--write-policy", design]
    args += ["--gpu-eviction", eviction, "--cpu-eviction", eviction]
    report = run_ok(*args)
    assert {key: report["cache"][key] for key in ("write_policy", "gpu_eviction", "cpu_eviction")} == {
        "write_policy": design,
        "gpu_eviction": eviction,
        "cpu_eviction": eviction,
    }
    workload = WORKLOADS["lab"](256)
    cache = make_cache(design, 21520, 20000, 256, gpu_eviction=eviction, cpu_eviction=eviction)
    expected = replay.figures(replay.overall(replay.replay(workload, cache)))
    assert {key: report[key] for key in expected} == expected


@pytest.mark.parametrize("touch", [False, True])
@pytest.mark.parametrize("re_store", [False, True])
def test_the_lmcache_switches_reach_the_cache(touch, re_store):
    """Each switch is reported and replayed: two documents read back and forth through a GPU that holds one and a
    half and a CPU that holds one, where re-storing GPU hits on the CPU pushes out the block the last pass needs."""
    args = ["--workload", "lab", "--docs", "2", "--tokens", "512", "--passes", "fwd,rev,fwd,fwd"]
    args += ["--gpu-tokens", "768", "--cpu-tokens", "512", "--block-tokens", "256"]
    args += ["--touch-cpu-on-gpu-hit"] * touch + ["--re-store-on-gpu-hit"] * re_store
    report = run_ok(*args)
    assert (report["cache"]["touch_cpu_on_gpu_hit"], report["cache"]["re_store_on_gpu_hit"]) == (touch, re_store)
    workload = WORKLOADS["lab"](256, docs=2, tokens=512, passes="fwd,rev,fwd,fwd")
    cache = make_cache("write-through", 768, 512, 256, touch_cpu_on_gpu_hit=touch, re_store_on_gpu_hit=re_store)
    totals = replay.replay(workload, cache)
    assert [one["cpu_hit_tokens"] for one in report["rounds"]] == [row[6] for row in totals]
    assert report["rounds"][3]["cpu_hit_tokens"] == (0 if re_store else 512)


# --------------------------------------------------------------------------------------------
# Bad flags
# --------------------------------------------------------------------------------------------

LAB = ["--workload", "lab", "--gpu-tokens", "100"]
BAD_FLAGS = [
    (["--gpu-tokens", "100"], "--workload"),
    (["--workload", "nope", "--gpu-tokens", "100"], "nope"),
    (["--workload", "lab"], "--gpu-tokens"),
    (["--workload", "lab", "--gpu-tokens", "-1"], "-1"),
    (["--workload", "lab", "--gpu-tokens", "lots"], "lots"),
    ([*LAB, "--cpu-tokens", "1.5"], "1.5"),
    ([*LAB, "--cpu-tokens", "-3"], "-3"),
    ([*LAB, "--block-tokens", "0"], "--block-tokens"),
    ([*LAB, "--partial-blocks", "maybe"], "maybe"),
    ([*LAB, "--eviction-order", "x"], "--eviction-order"),
    ([*LAB, "--trace", "f"], "--trace"),
    (["--workload", "mooncake", "--trace", "{trace}", "--gpu-tokens", "1", "--docs", "3"], "--docs"),
    (["--workload", "mooncake", "--gpu-tokens", "1"], "--trace"),
    (["--workload", "mooncake", "--trace", "{trace}", "--gpu-tokens", "1", "--block-tokens", "500"], "500"),
    ([*LAB, "--passes", "fwd,bwd"], "fwd,bwd"),
    ([*LAB, "--tokens", "0"], "--tokens"),
    (["--workload", "long_doc_qa", "--gpu-tokens", "1", "--repeat-mode", "zig"], "zig"),
    (["--workload", "long_doc_qa", "--gpu-tokens", "1", "--num-documents", "-1"], "--num-documents"),
    (["--workload", "mooncake", "--trace", "{tmp}/absent.jsonl", "--gpu-tokens", "1"], "absent.jsonl"),
    (["--workload", "mooncake", "--trace", "{tmp}/t.jsonl", "--gpu-tokens", "1"], "t.jsonl:2:"),
    ([*LAB, "--passes", "fwd\nrev"], "--passes"),
    ([*LAB, "extra\nargument"], "extra"),
    (["--workload", "mooncake", "--trace", "{tmp}/two\nlines.jsonl", "--gpu-tokens", "1"], "cannot read"),
    ([*LAB, "--per-request", "{tmp}/no\nfolder/x.csv"], "cannot write"),
    ([*LAB, "--write-policy", "write-around"], "'write-through', 'write-back', 'selective'"),
    ([*LAB, "--gpu-eviction", "clock"], "'lru', 'fifo', 'lfu', 'arc', 'opt'"),
    ([*LAB, "--cpu-eviction", "LRU"], "'lru', 'fifo', 'lfu', 'arc', 'opt'"),
    ([*LAB, "--cpu-eviction", "opt", "--partial-blocks", "keep"], "opt needs equal-sized blocks"),
    ([*LAB, "--gpu-eviction", "arc", "--partial-blocks", "keep"], "arc needs equal-sized blocks"),
    ([*LAB, "--write-policy", "write-back", "--touch-cpu-on-gpu-hit"], "touch_cpu_on_gpu_hit applies to"),
    ([*LAB, "--write-policy", "selective", "--re-store-on-gpu-hit"], "re_store_on_gpu_hit applies to"),
    (["--workload", "lab", "--gpu-tokens", str(2**53 + 1)], f"<= {2**53}"),
    ([*LAB, "--cpu-tokens", "1" + "0" * 30], f"<= {2**53}"),
    ([*LAB, "--docs", "20000", "--tokens", "1000000"], "at most 100000000"),
    (
        ["--workload", "mooncake", "--trace", "{tmp}/t.jsonl", "--gpu-tokens", "1", "--per-request", "{tmp}/t.jsonl"],
        "both an input and an output",
    ),
]


@pytest.mark.parametrize("args, fragment", BAD_FLAGS, ids=repr)
def test_bad_flags(tmp_path, args, fragment):
    """Exit nonzero with exactly one 'kvlab replay: error:' line that names the culprit; nothing on stdout."""
    (tmp_path / "t.jsonl").write_text(first_trace_line() + '{"timestamp": 1}\n')
    before = (tmp_path / "t.jsonl").read_bytes()
    args = [arg.format(tmp=tmp_path, trace=TRACE) for arg in args]
    proc = run_cli(*args)
    check_one_line_error(proc)
    assert fragment in proc.stderr
    assert (tmp_path / "t.jsonl").read_bytes() == before  # an input is never written over


@pytest.mark.parametrize(
    "args",
    [
        ["--workload", "lab", "--gpu-tokens", str(2**53 + 1)],
        ["--workload", "lab", "--gpu-tokens", "1", "--docs", "20000", "--tokens", "1000000"],
        ["--workload", "mooncake", "--trace", TRACE, "--gpu-tokens", "1", "--per-request", TRACE],
    ],
    ids=["beyond-2**53", "beyond-10**8-accesses", "output-is-the-trace"],
)
def test_usage_errors_exit_2(args):
    """A number beyond its limit, a workload too large to generate, an output that is an input: usage errors."""
    proc = run_cli(*args)
    check_one_line_error(proc)
    assert proc.returncode == 2


# --------------------------------------------------------------------------------------------
# The progress bar
# --------------------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_on_a_terminal():
    """On a terminal the bar shows the count out of the total, and clears itself when done."""
    stream = Terminal()
    with progress_bar(5, stream, delay=0) as bar:
        bar.update()
        bar.update()
        assert bar.n == 2
        assert "/5" in stream.getvalue() and "req" in stream.getvalue()
    assert stream.getvalue().endswith("\r")  # leave=False: the bar's line is erased


def test_no_progress_bar_off_a_terminal():
    """A stream that is not a terminal gets no bar at all (None: the replay makes no call per request)."""
    stream = io.StringIO()
    assert progress_bar(5, stream, delay=0) is None
    assert stream.getvalue() == ""


def test_progress_bar_silent_for_a_short_replay():
    """Nothing on a terminal for a replay shorter than the delay."""
    stream = Terminal()
    with progress_bar(5, stream, delay=1.0) as bar:
        for _ in range(5):
            bar.update()
    assert stream.getvalue() == ""


def test_the_command_keeps_a_pipe_clean():
    """The console process with both streams on pipes: no bar on stderr, and stdout is the in-process output."""
    args = ["replay", "--workload", "lab", "--gpu-tokens", "21520", "--cpu-tokens", "56000"]
    proc = run_python("-m", "kvlab", *args, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout == kvlab(*args).stdout


def test_the_command_shows_a_bar_on_a_terminal():
    """The console process with stderr on a terminal and stdout on a pipe: the bar (its delay set to none, so that
    it shows however fast the machine) is on the terminal only; stdout is the one JSON object, untouched by it."""
    docs = 150
    args = [
        "replay",
        "--workload",
        "lab",
        "--docs",
        docs,
        "--tokens",
        10**6,
        "--passes",
        "fwd,fwd",
        "--gpu-tokens",
        1000,
    ]
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # a terminal has a size
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "kvlab", *map(str, args)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=follower,
            env={**os.environ, "KVLAB_PROGRESS_DELAY": "0"},
        )
        os.close(follower)
        terminal = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            terminal += chunk
        stdout = child.communicate(timeout=120)[0]
    finally:
        os.close(leader)
    assert child.returncode == 0, terminal
    report = json.loads(stdout)
    assert report["requests"] == 2 * docs
    assert f"/{2 * docs}".encode() in terminal and b"req" in terminal
    assert b"{" not in terminal  # the report never reaches the terminal
