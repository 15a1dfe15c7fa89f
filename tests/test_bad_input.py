"""Bad and edge inputs for every ``kvlab`` command, as a table: each case is data (its command, its arguments,
the files it starts from, the exit code and the start of -- or a fragment of -- the one error line it must give),
and one checker holds every case to the contract of ``kvlab/cli/base.py``:

* the exit code (2 for a usage error, 1 for bad data or I/O);
* stderr is exactly one line, ``kvlab COMMAND: error: ...`` (a subcommand: ``kvlab ttft fit: error: ...``);
* no ``Traceback`` anywhere, nothing on stdout;
* every file the case starts from is byte-identical afterwards, and no new file appears in its folder (no
  partial output, no ``.kvlab-*.tmp``); the repository's inputs it names are untouched;
* it finishes in under 10 s (no hang).

Cases run in-process (``conftest.kvlab``) in their own ``tmp_path`` as the working folder; the few that need a
real process (closed or full stdout, a read without bound) run ``python -m kvlab``. A few GOOD inputs check
that the limits still let real inputs through, and that outputs get the umask's mode.

``python tests/test_bad_input.py`` prints the number of cases per command.
"""

import functools
import gzip
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import ROOT, SCHEMA, deleter, kvlab, load_config, setter  # noqa: E402

from kvlab.latency.ttft import model_identity  # noqa: E402
from kvlab.workflow import paths  # noqa: E402

R = str(ROOT)
BIG = str(2**70)
OVER = str(2**53 + 1)
MAXW = str(2**53)
DIGITS = "9" * 5000
HUGE_EXP = "1e999999999"
DEEP = "[" * 100000
MODEL_CONFIG = (ROOT / "models" / "Qwen2.5-1.5B-Instruct" / "config.json").read_text()
TTFT_MODEL = (ROOT / "results" / "ttft" / "model.json").read_text()
SCENARIO_OUT = (ROOT / "results" / "cyclic.json").read_text()
REPLAY_POINT = (ROOT / paths.replay_points(load_config(), "lab")[0]).read_text()  # the grids' first point
BUDGETS_CSV = (ROOT / "results" / "ttft" / "budgets-lab.csv").read_text()
CLIFF_JSON = (ROOT / "results" / "cliff.json").read_text()
SWEEP_CSV = (ROOT / "results" / "ttft" / "sweep-cliff.csv").read_text()
CONFIG_TEXT = (ROOT / "config.yaml").read_text()
DIR = object()  # a files entry that is a folder
OLD = "OLD CONTENT\n"  # what a pre-existing output holds; it must stay so when a command fails
TIME_LIMIT = 10


def jl(*records):
    """JSONL text of ``records`` (dicts, or raw line strings)."""
    return "".join((record if isinstance(record, str) else json.dumps(record)) + "\n" for record in records)


def trace_line(timestamp=0, input_length=1000, output_length=5, hash_ids=(1, 2), **changes):
    record = {"timestamp": timestamp, "input_length": input_length, "output_length": output_length}
    record["hash_ids"] = list(hash_ids)
    record.update(changes)
    return record


GOOD_TRACE = jl(trace_line(0), trace_line(1, hash_ids=(1, 3)), trace_line(2, 512, hash_ids=(1,)))


def without(record, key):
    return {k: v for k, v in record.items() if k != key}


def measurement_line(config="baseline", name="p1", doc=0, tokens=10, ttft=5.0, total=9.0, **changes):
    record = {"config": config, "pass": name, "doc": doc, "doc_tokens": tokens, "ttft_ms": ttft, "total_ms": total}
    record.update(changes)
    return record


MEASUREMENT = jl(
    *(
        measurement_line(config, name, doc, ttft=5.0 + doc + (config == "lmcache"))
        for config in ("baseline", "lmcache")
        for name in ("p1", "p2")
        for doc in (0, 1)
    )
)


# ----------------------------------------------------------------------------------------------------------
# The table


@dataclass
class Case:
    command: str  # "scenario", "ttft fit", ...: the stderr prefix is "kvlab COMMAND: error: "
    id: str
    args: tuple  # after "kvlab"; "{R}" is the repository, "{T}" the case's folder
    code: int
    message: str  # the start of the message after the prefix, or "~fragment" that must appear in it
    files: dict = field(default_factory=dict)  # name -> str | bytes | DIR, made in the case's folder first
    process: bool = False  # run as a real process (python -m kvlab) under a memory limit


CASES = []


def add(command, id, args, code, message, files=None, process=False, argv=None):
    """One case; ``args`` follow ``kvlab COMMAND`` unless ``argv`` gives the whole command line."""
    full = tuple(argv) if argv is not None else (*command.split(), *args)
    CASES.append(Case(command, f"{command.replace(' ', '-')}:{id}", full, code, message, files or {}, process))


def add_many(command, base, rows, files=None):
    """Cases that change ``base``: rows of (id, replace: {flag: value or None to drop} | extra list, code,
    message[, files])."""
    for row in rows:
        id, change, code, message, *rest = row
        extra_files = rest[0] if rest else {}
        add(command, id, edit(base, change), code, message, {**(files or {}), **extra_files})


def edit(base, change):
    """``base`` with flags replaced or dropped (a dict), or with more arguments appended (a list)."""
    if isinstance(change, list):
        return [*base, *change]
    change = dict(change)
    extra = change.pop("+", [])
    args, index = list(base), 0
    result = []
    while index < len(args):
        arg = args[index]
        if arg in change:
            value = change[arg]
            takes_value = index + 1 < len(args) and not args[index + 1].startswith("--")
            index += 2 if takes_value else 1
            if value is None:
                continue
            result += [arg, value] if takes_value else [arg]
            continue
        result.append(arg)
        index += 1
    return [*result, *extra]


# --- kvlab scenario (stdout only) --------------------------------------------------------------------------
SCEN = ["--docs", "2", "--tokens", "10"]
add_many(
    "scenario",
    SCEN,
    [
        ("unknown-flag", ["--bogus", "1"], 2, "unrecognized arguments: --bogus"),
        ("positional", ["extra"], 2, "unrecognized arguments: extra"),
        ("abbreviated-flag", ["--write", "selective"], 2, "unrecognized arguments"),
        ("flag-without-value", ["--gpu"], 2, "argument --gpu: expected one argument"),
        ("duplicate-flag", ["--docs", "3"], 2, "~--docs"),
        ("docs-negative", {"--docs": "-1"}, 2, "argument --docs: expected a whole number >= 0"),
        ("docs-float", {"--docs": "1.5"}, 2, "argument --docs: expected a whole number >= 0"),
        ("docs-nan", {"--docs": "nan"}, 2, "argument --docs: expected a whole number >= 0"),
        ("docs-inf", {"--docs": "inf"}, 2, "argument --docs: expected a whole number >= 0"),
        ("docs-empty", {"--docs": ""}, 2, "argument --docs: expected a whole number >= 0"),
        ("docs-1e999999999", {"--docs": HUGE_EXP}, 2, "argument --docs: expected a whole number >= 0"),
        ("docs-5000-digits", {"--docs": DIGITS}, 2, "~--docs"),
        ("docs-hex", {"--docs": "0x10"}, 2, "argument --docs: expected a whole number >= 0"),
        ("docs-2e8-reads", {"--docs": str(10**8)}, 2, "--docs 100000000 x 3 passes reads more than 100000000"),
        ("docs-2**70", {"--docs": BIG}, 2, "~--docs"),
        ("gpu-2**70", ["--gpu", BIG], 2, "~--gpu"),
        ("gpu-2**53+1", ["--gpu", OVER], 2, "~--gpu"),
        ("gpu-negative", ["--gpu", "-5"], 2, "argument --gpu: expected a whole number >= 0"),
        ("cpu-2**70", ["--cpu", BIG], 2, "~--cpu"),
        ("cpu-inf", ["--cpu", "inf"], 2, "argument --cpu: expected a whole number >= 0"),
        ("tokens-2**70", {"--tokens": BIG}, 2, "~--tokens"),
        ("passes-bad", ["--passes", "fwd,sideways"], 2, "argument --passes: expected a comma-separated list"),
        ("passes-empty", ["--passes", ""], 2, "argument --passes: expected a comma-separated list"),
        ("write-policy-choice", ["--write-policy", "lru"], 2, "argument --write-policy: invalid choice"),
        ("write-policy-empty", ["--write-policy", ""], 2, "argument --write-policy: invalid choice"),
    ],
)

# --- kvlab summarize IN OUT ---------------------------------------------------------------------------------
MEAS_OK = {"in.jsonl": MEASUREMENT}
add("summarize", "no-arguments", [], 2, "the following arguments are required")
add("summarize", "one-argument", ["in.jsonl"], 2, "the following arguments are required: OUT.json", MEAS_OK)
add("summarize", "three-arguments", ["in.jsonl", "out.json", "x"], 2, "unrecognized arguments: x", MEAS_OK)
add("summarize", "unknown-flag", ["--fast", "in.jsonl", "out.json"], 2, "unrecognized arguments: --fast", MEAS_OK)
add("summarize", "output-is-input", ["in.jsonl", "in.jsonl"], 2, "in.jsonl is both", MEAS_OK)
add(
    "summarize",
    "output-is-input-via-link",
    ["in.jsonl", "link.jsonl"],
    2,
    "~both",
    {**MEAS_OK, "link.jsonl": lambda tmp: (tmp / "link.jsonl").symlink_to(tmp / "in.jsonl")},
)
add("summarize", "input-missing", ["missing.jsonl", "out.json"], 1, "missing.jsonl: cannot read")
add("summarize", "input-directory", ["d", "out.json"], 1, "~d", {"d": DIR})
add("summarize", "input-dev-zero", ["/dev/zero", "out.json"], 1, "/dev/zero:1: line longer than")
add("summarize", "output-missing-folder", ["in.jsonl", "nowhere/out.json"], 1, "~nowhere/out.json", MEAS_OK)
add("summarize", "output-directory", ["in.jsonl", "d"], 1, "~d", {**MEAS_OK, "d": DIR})
add("summarize", "output-dev-full", ["in.jsonl", "/dev/full"], 1, "~/dev/full", MEAS_OK)
for id, text, message in [
    # an empty or blank measurement is not an error for the lab's summarize: an empty summary and two warnings
    # (tests/test_summarize.py, test_empty_input_gives_empty_maps)
    ("binary", b"\x00\x01\x02\xff\xfe\n", "in.jsonl:1: not UTF-8 text"),
    ("not-utf8", jl(measurement_line()).encode() + b"\xff\xfe{}\n", "in.jsonl:2: not UTF-8 text"),
    ("deep-nesting", DEEP + "\n", "in.jsonl:1: malformed JSON"),
    ("nan", jl(measurement_line()).replace("5.0", "NaN"), "in.jsonl:1: malformed JSON"),
    ("infinity", jl(measurement_line()).replace("5.0", "Infinity"), "in.jsonl:1: malformed JSON"),
    ("1e999", jl(measurement_line()).replace("5.0", "1e999"), "~in.jsonl:1"),
    ("5000-digit-int", jl(measurement_line()).replace("5.0", DIGITS), "in.jsonl:1: malformed JSON"),
    ("truncated-json", '{"config": "baseline"\n', "in.jsonl:1: malformed JSON"),
    ("object-empty", jl(measurement_line(), "{}"), "in.jsonl:2: missing field(s)"),
    ("array-line", jl("[]"), "in.jsonl:1: expected a JSON object"),
    ("number-line", jl("5"), "in.jsonl:1: expected a JSON object"),
    ("missing-ttft", jl(without(measurement_line(), "ttft_ms")), "in.jsonl:1: missing field(s): ttft_ms"),
    ("ttft-string", jl(measurement_line(ttft="fast")), "in.jsonl:1: ttft_ms must be a number"),
    ("ttft-bool", jl(measurement_line(ttft=True)), "in.jsonl:1: ttft_ms must be a number"),
    ("ttft-negative", jl(measurement_line(ttft=-1)), "in.jsonl:1: ttft_ms must be a finite number >= 0"),
    ("config-number", jl(measurement_line(config=5)), "in.jsonl:1: config must be a string"),
    ("pass-null", jl(measurement_line(name=None)), "in.jsonl:1: pass must be a string"),
]:
    add("summarize", id, ["in.jsonl", "out.json"], 1, message, {"in.jsonl": text, "out.json": OLD})

# --- kvlab replay ---------------------------------------------------------------------------------------------
REPLAY = ["--workload", "lab", "--gpu-tokens", "100", "--docs", "2", "--tokens", "10"]
MOON = ["--workload", "mooncake", "--gpu-tokens", "1024", "--trace", "t.jsonl"]
TRACE_FILES = {"t.jsonl": GOOD_TRACE}
add_many(
    "replay",
    REPLAY,
    [
        ("no-workload", {"--workload": None}, 2, "the following arguments are required: --workload"),
        ("no-gpu-tokens", {"--gpu-tokens": None}, 2, "the following arguments are required: --gpu-tokens"),
        ("workload-choice", {"--workload": "sharegpt"}, 2, "argument --workload: invalid choice"),
        ("unknown-flag", ["--bogus"], 2, "unrecognized arguments: --bogus"),
        ("abbreviated-flag", ["--gpu", "5"], 2, "unrecognized arguments"),
        ("duplicate-flag", ["--gpu-tokens", "200"], 2, "~--gpu-tokens"),
        ("gpu-negative", {"--gpu-tokens": "-1"}, 2, "argument --gpu-tokens: expected a whole number >= 0"),
        ("gpu-2**70", {"--gpu-tokens": BIG}, 2, "argument --gpu-tokens: expected a whole number <= 9007199254740992"),
        ("gpu-2**53+1", {"--gpu-tokens": OVER}, 2, "argument --gpu-tokens: expected a whole number <="),
        ("gpu-1e999999999", {"--gpu-tokens": HUGE_EXP}, 2, "argument --gpu-tokens: expected a whole number"),
        ("gpu-nan", {"--gpu-tokens": "nan"}, 2, "argument --gpu-tokens: expected a whole number"),
        ("gpu-empty", {"--gpu-tokens": ""}, 2, "argument --gpu-tokens: expected a whole number"),
        ("gpu-5000-digits", {"--gpu-tokens": DIGITS}, 2, "argument --gpu-tokens: expected a whole number"),
        ("gpu-float", {"--gpu-tokens": "100.0"}, 2, "argument --gpu-tokens: expected a whole number"),
        ("cpu-float", ["--cpu-tokens", "1.5"], 2, "argument --cpu-tokens: expected a whole number"),
        ("cpu-inf", ["--cpu-tokens", "inf"], 2, "argument --cpu-tokens: expected a whole number"),
        ("block-zero", ["--block-tokens", "0"], 2, "argument --block-tokens: expected a whole number >= 1"),
        ("block-2**70", ["--block-tokens", BIG], 2, "argument --block-tokens: expected a whole number <="),
        ("docs-negative", {"--docs": "-1"}, 2, "~--docs"),
        ("docs-2**70", {"--docs": BIG}, 2, "~--docs"),
        ("tokens-zero", {"--tokens": "0"}, 2, "~--tokens"),
        ("passes-empty", ["--passes", ""], 2, "~--passes"),
        ("passes-bad", ["--passes", "fwd,up"], 2, "~--passes"),
        ("too-many-accesses", {"--docs": str(10**8)}, 2, "workload lab would make"),
        ("trace-with-lab", ["--trace", "t.jsonl"], 2, "--trace is a setting of --workload mooncake, not lab"),
        (
            "num-documents-with-lab",
            ["--num-documents", "3"],
            2,
            "--num-documents is a setting of --workload long_doc_qa",
        ),
        ("write-back-touch", ["--write-policy", "write-back", "--touch-cpu-on-gpu-hit"], 2, "~touch"),
        ("selective-re-store", ["--write-policy", "selective", "--re-store-on-gpu-hit"], 2, "~re"),
        ("arc-keep", ["--gpu-eviction", "arc", "--partial-blocks", "keep"], 2, "~arc"),
        ("opt-keep", ["--cpu-eviction", "opt", "--partial-blocks", "keep", "--cpu-tokens", "10"], 2, "~opt"),
        ("eviction-choice", ["--gpu-eviction", "mru"], 2, "argument --gpu-eviction: invalid choice"),
        ("write-policy-choice", ["--write-policy", "write-around"], 2, "argument --write-policy: invalid choice"),
        ("partial-choice", ["--partial-blocks", "maybe"], 2, "argument --partial-blocks: invalid choice"),
        ("order-choice", ["--eviction-order", "middle"], 2, "argument --eviction-order: invalid choice"),
        ("per-request-missing-folder", ["--per-request", "nowhere/r.csv"], 1, "~nowhere/r.csv"),
        ("per-request-directory", ["--per-request", "d"], 1, "~d", {"d": DIR}),
        ("per-request-dev-full", ["--per-request", "/dev/full"], 1, "~/dev/full"),
    ],
)
add(
    "replay",
    "long-doc-qa-repeat-mode",
    ["--workload", "long_doc_qa", "--gpu-tokens", "1", "--repeat-mode", "zigzag"],
    2,
    "~--repeat-mode",
)
add(
    "replay",
    "long-doc-qa-seed-2**70",
    ["--workload", "long_doc_qa", "--gpu-tokens", "1", "--shuffle-seed", BIG],
    2,
    "~--shuffle-seed",
)
add(
    "replay",
    "long-doc-qa-docs-with-lab-flag",
    ["--workload", "long_doc_qa", "--gpu-tokens", "1", "--docs", "2"],
    2,
    "--docs is a setting of --workload lab",
)
add(
    "replay", "mooncake-no-trace", ["--workload", "mooncake", "--gpu-tokens", "1"], 2, "workload mooncake needs --trace"
)
add_many(
    "replay",
    MOON,
    [
        ("mooncake-block-384", ["--block-tokens", "384"], 2, "--block-tokens must be a multiple or a divisor"),
        ("mooncake-tokens-flag", ["--tokens", "10"], 2, "--tokens is a setting of --workload lab"),
        ("per-request-is-trace", ["--per-request", "t.jsonl"], 2, "t.jsonl is both an input and an output"),
        ("trace-missing", {"--trace": "missing.jsonl"}, 1, "missing.jsonl: cannot read"),
        ("trace-directory", {"--trace": "d"}, 1, "~d", {"d": DIR}),
        ("trace-dev-zero", {"--trace": "/dev/zero"}, 1, "/dev/zero:1: line longer than"),
        ("trace-bad-gzip", {"--trace": "t.jsonl.gz"}, 1, "t.jsonl.gz:1: cannot read", {"t.jsonl.gz": b"not gzip\n"}),
    ],
    TRACE_FILES,
)
for id, text, message in [
    ("binary", b"\x00\xff\x00\xfe", "t.jsonl:1: not UTF-8 text"),
    ("not-utf8", GOOD_TRACE.encode() + b'{"timestamp": "\xff"}\n', "t.jsonl:4: not UTF-8 text"),
    ("deep-nesting", DEEP + "\n", "t.jsonl:1: malformed JSON"),
    (
        "nan-timestamp",
        GOOD_TRACE + '{"timestamp": NaN, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n',
        "t.jsonl:4: malformed JSON",
    ),
    (
        "1e999-timestamp",
        '{"timestamp": 1e999, "input_length": 1, "output_length": 1, "hash_ids": [1]}\n',
        "t.jsonl:1: malformed JSON",
    ),
    (
        "5000-digit-timestamp",
        jl(trace_line()).replace('"timestamp": 0', f'"timestamp": {DIGITS}'),
        "t.jsonl:1: malformed JSON",
    ),
    ("negative-timestamp", jl(trace_line(-1)), "t.jsonl:1: timestamp must be a number from 0 to"),
    ("missing-hash-ids", GOOD_TRACE + jl(without(trace_line(), "hash_ids")), "t.jsonl:4: missing field(s): hash_ids"),
    ("input-length-string", jl(trace_line(input_length="1000")), "t.jsonl:1: input_length must be a whole number"),
    ("input-length-2**60", jl(trace_line(input_length=2**60)), "t.jsonl:1: input_length must be a whole number"),
    ("output-length-float", jl(trace_line(output_length=1.5)), "t.jsonl:1: output_length must be a whole number"),
    ("hash-ids-strings", jl(trace_line(hash_ids=("a", "b"))), "t.jsonl:1: hash_ids must be a list of whole numbers"),
    ("hash-ids-count", jl(trace_line(hash_ids=(1,))), "t.jsonl:1: 1 hash_ids, but input_length 1000 makes 2"),
    ("array-line", jl(trace_line(), "[]"), "t.jsonl:2: expected a JSON object"),
    ("object-empty", jl("{}"), "t.jsonl:1: missing field(s)"),
    ("number-line", jl("42"), "t.jsonl:1: expected a JSON object"),
    (
        "field-twice",
        jl(trace_line())[:-2] + ', "input_length": 5}\n',
        "t.jsonl:1: malformed JSON (field 'input_length'",
    ),
    ("hash-id-2**63", jl(trace_line(hash_ids=(1, 2**63))), "t.jsonl:1: hash_ids must be 64-bit"),
    ("hash-ids-nested", jl(trace_line(hash_ids=([1], [2]))), "t.jsonl:1: hash_ids must be a list of whole numbers"),
]:
    add("replay", f"trace-{id}", [*MOON, "--per-request", "r.csv"], 1, message, {"t.jsonl": text, "r.csv": OLD})
add_many(
    "replay",
    MOON,
    [
        (
            "max-memory-tiny",
            ["--max-memory", "100", "--per-request", "r.csv"],
            1,
            "~more than --max-memory 100 bytes",
            {"r.csv": OLD},
        ),
        ("max-memory-zero", ["--max-memory", "0"], 2, "argument --max-memory: expected an amount of memory of at"),
        ("max-memory-words", ["--max-memory", "lots"], 2, "argument --max-memory: expected an amount of memory such"),
        ("max-memory-negative", ["--max-memory=-5G"], 2, "argument --max-memory: expected an amount of memory"),
    ],
    TRACE_FILES,
)
BAILIAN_LINE = {"chat_id": 1, "parent_chat_id": -1, "timestamp": 1.5, "input_length": 20, "output_length": 2}
BAILIAN_LINE |= {"type": "text", "turn": 1, "hash_ids": [7, 8]}
for id, change, message in [
    ("parent-below-minus-one", {"parent_chat_id": -2}, "q.jsonl:1: parent_chat_id must be a whole number from -1"),
    ("type-number", {"type": 3}, "q.jsonl:1: type must be a string, got 3"),
    ("turn-float", {"turn": 1.0}, "q.jsonl:1: turn must be a whole number"),
    ("chat-id-missing", {"chat_id": None}, "q.jsonl:1: missing field(s): chat_id"),
    ("blocks-of-16", {"hash_ids": [7]}, "q.jsonl:1: 1 hash_ids, but input_length 20 makes 2 blocks of 16 tokens"),
]:
    record = {key: value for key, value in (BAILIAN_LINE | change).items() if value is not None}
    args = ["--workload", "bailian", "--trace", "q.jsonl", "--gpu-tokens", "32"]
    add("replay", f"bailian-{id}", args, 1, message, {"q.jsonl": jl(record)})
add(
    "replay",
    "bailian-block-24",
    ["--workload", "bailian", "--trace", "q.jsonl", "--gpu-tokens", "1", "--block-tokens", "24"],
    2,
    "--block-tokens must be a multiple or a divisor of the trace's 16-token blocks, got 24",
    {"q.jsonl": jl(BAILIAN_LINE)},
)

# --- kvlab mrc -----------------------------------------------------------------------------------------------
MRC = ["--workload", "lab", "--docs", "2", "--tokens", "10", "--block-tokens", "5"]
add_many(
    "mrc",
    MRC,
    [
        ("no-workload", {"--workload": None}, 2, "the following arguments are required: --workload"),
        ("unknown-flag", ["--disk-tokens", "5"], 2, "unrecognized arguments: --disk-tokens"),
        ("cpu-room-without-gpu-room", ["--cpu-tokens", "5"], 2, "--cpu-tokens gives the disk tier's curve"),
        ("write-policy-not-a-flag", ["--write-policy", "write-back"], 2, "unrecognized arguments"),
        ("eviction-not-a-flag", ["--gpu-eviction", "lfu"], 2, "unrecognized arguments"),
        ("duplicate-flag", ["--block-tokens", "7"], 2, "~--block-tokens"),
        (
            "ratio-above-1",
            ["--target-hit-ratio", "1.5"],
            2,
            "argument --target-hit-ratio: expected a ratio between 0 and 1",
        ),
        ("ratio-negative", ["--target-hit-ratio", "-0.1"], 2, "argument --target-hit-ratio: expected a ratio"),
        ("ratio-nan", ["--target-hit-ratio", "nan"], 2, "argument --target-hit-ratio: expected a ratio"),
        ("ratio-inf", ["--target-hit-ratio", "inf"], 2, "argument --target-hit-ratio: expected a ratio"),
        ("ratio-1e999999999", ["--target-hit-ratio", HUGE_EXP], 2, "argument --target-hit-ratio: expected a ratio"),
        ("ratio-empty", ["--target-hit-ratio", ""], 2, "argument --target-hit-ratio: expected a ratio"),
        ("ratio-5000-digits", ["--target-hit-ratio", DIGITS], 2, "argument --target-hit-ratio: expected a ratio"),
        ("gpu-negative", ["--gpu-tokens", "-5"], 2, "argument --gpu-tokens: expected a whole number >= 0"),
        ("gpu-2**70", ["--gpu-tokens", BIG], 2, "argument --gpu-tokens: expected a whole number <="),
        ("block-zero", {"--block-tokens": "0"}, 2, "argument --block-tokens: expected a whole number >= 1"),
        ("block-float", {"--block-tokens": "2.5"}, 2, "argument --block-tokens: expected a whole number >= 1"),
        ("partial-choice", ["--partial-blocks", "all"], 2, "argument --partial-blocks: invalid choice"),
        ("order-choice", ["--eviction-order", "random"], 2, "argument --eviction-order: invalid choice"),
        ("too-many-accesses", {"--docs": str(10**8)}, 2, "workload lab would make"),
        ("docs-2**70", {"--docs": BIG}, 2, "~--docs"),
        ("trace-with-lab", ["--trace", "t.jsonl"], 2, "--trace is a setting of --workload mooncake, not lab"),
        ("curve-missing-folder", ["--curve", "nowhere/c.csv"], 1, "~nowhere/c.csv"),
        ("curve-directory", ["--curve", "d"], 1, "~d", {"d": DIR}),
        ("curve-dev-full", ["--curve", "/dev/full"], 1, "~/dev/full"),
    ],
)
MRC_MOON = ["--workload", "mooncake", "--trace", "t.jsonl", "--curve", "c.csv"]
add_many(
    "mrc",
    MRC_MOON,
    [
        ("curve-is-trace", {"--curve": "t.jsonl"}, 2, "t.jsonl is both an input and an output"),
        ("mooncake-block-1000", ["--block-tokens", "1000"], 2, "--block-tokens must be a multiple"),
        ("trace-missing", {"--trace": "missing.jsonl"}, 1, "missing.jsonl: cannot read"),
        (
            "trace-nan",
            {},
            1,
            "t.jsonl:2: malformed JSON",
            {"t.jsonl": GOOD_TRACE.replace('"timestamp": 1', '"timestamp": NaN')},
        ),
        (
            "trace-missing-field",
            {},
            1,
            "t.jsonl:1: missing field(s): input_length",
            {"t.jsonl": jl(without(trace_line(), "input_length"))},
        ),
        ("trace-not-utf8", {}, 1, "t.jsonl:1: not UTF-8 text", {"t.jsonl": b"\xc3\x28\n"}),
    ],
    {"t.jsonl": GOOD_TRACE, "c.csv": OLD},
)

# --- kvlab plan (stdout only) ----------------------------------------------------------------------------
PLAN = ["--workload", "lab", "--docs", "2", "--tokens", "10", "--model-config", "m.json", "--gpu-tokens", "100"]
PLAN_FILES = {"m.json": MODEL_CONFIG}


def model_config(**changes):
    document = json.loads(MODEL_CONFIG)
    for key, value in changes.items():
        if value is None:
            document.pop(key, None)
        else:
            document[key] = value
    return json.dumps(document)


add_many(
    "plan",
    PLAN,
    [
        ("no-model-config", {"--model-config": None}, 2, "the following arguments are required: --model-config"),
        ("no-gpu-room", {"--gpu-tokens": None}, 2, "one of the arguments --gpu-tokens --gpu-gib is required"),
        ("gpu-tokens-and-gib", ["--gpu-gib", "1"], 2, "argument --gpu-gib: not allowed with argument --gpu-tokens"),
        ("unknown-flag", ["--cpu-tokens", "5"], 2, "unrecognized arguments"),
        ("engine-unknown", ["--engine", "tgi"], 2, "argument --engine: invalid choice: 'tgi'"),
        ("engine-twice", ["--engine", "vllm", "--engine", "sglang"], 2, "~--engine"),
        ("kv-dtype-int4", ["--kv-dtype", "int4"], 2, "argument --kv-dtype: invalid choice"),
        ("duplicate-flag", ["--cpu-gib", "1", "--cpu-gib", "2"], 2, "~--cpu-gib"),
        ("cpu-gib-negative", ["--cpu-gib", "-1"], 2, "argument --cpu-gib: expected a number of GiB >= 0"),
        ("cpu-gib-nan", ["--cpu-gib", "nan"], 2, "argument --cpu-gib: expected a number of GiB >= 0"),
        ("cpu-gib-inf", ["--cpu-gib", "inf"], 2, "argument --cpu-gib: expected a number of GiB >= 0"),
        ("cpu-gib-empty", ["--cpu-gib", ""], 2, "argument --cpu-gib: expected a number of GiB >= 0"),
        ("cpu-gib-1e999999999", ["--cpu-gib", HUGE_EXP], 2, "argument --cpu-gib: expected at most 1099511627776 GiB"),
        ("cpu-gib-5000-digits", ["--cpu-gib", DIGITS], 2, "argument --cpu-gib:"),
        ("cpu-gib-2**40+1", ["--cpu-gib", str(2**40 + 1)], 2, "argument --cpu-gib: expected at most 1099511627776 GiB"),
        (
            "cpu-gib-19-places",
            ["--cpu-gib", "0." + "0" * 18 + "1"],
            2,
            "argument --cpu-gib: expected at most 18 decimal places",
        ),
        ("cpu-gib-hex", ["--cpu-gib", "0x10"], 2, "argument --cpu-gib: expected a number of GiB >= 0"),
        ("gpu-gib-2**70", {"--gpu-tokens": None, "+": ["--gpu-gib", BIG]}, 2, "~--gpu-gib"),
        ("gpu-tokens-2**70", {"--gpu-tokens": BIG}, 2, "argument --gpu-tokens: expected a whole number <="),
        ("tp-zero", ["--tp", "0"], 2, "argument --tp: expected a whole number >= 1"),
        ("tp-2**21", ["--tp", str(2**21)], 2, "argument --tp: expected a whole number <= 1048576"),
        ("tp-uneven", ["--tp", "3"], 2, "--tp: 2 KV heads do not split over tp 3"),
        ("format-choice", ["--format", "yaml"], 2, "argument --format: invalid choice"),
        ("write-policy-choice", ["--write-policy", "lru"], 2, "argument --write-policy: invalid choice"),
        ("ratio-above-1", ["--target-hit-ratio", "2"], 2, "argument --target-hit-ratio: expected a ratio"),
        ("chunk-zero", ["--chunk-tokens", "0"], 2, "argument --chunk-tokens: expected a whole number >= 1"),
        ("trace-with-lab", ["--trace", "t.jsonl"], 2, "--trace is a setting of --workload mooncake, not lab"),
        ("too-many-accesses", {"--docs": str(10**8)}, 2, "workload lab would make"),
        ("model-config-missing", {"--model-config": "missing.json"}, 1, "missing.json: cannot read"),
        ("model-config-directory", {"--model-config": "d"}, 1, "~d", {"d": DIR}),
        ("model-config-dev-zero", {"--model-config": "/dev/zero"}, 1, "/dev/zero: larger than 33554432 bytes"),
    ],
    PLAN_FILES,
)
add(
    "plan",
    "mooncake-chunk-100",
    [
        "--workload",
        "mooncake",
        "--trace",
        "t.jsonl",
        "--model-config",
        "m.json",
        "--gpu-tokens",
        "1",
        "--chunk-tokens",
        "100",
    ],
    2,
    "--chunk-tokens must be a multiple of the trace's 512-token hash blocks",
    {**PLAN_FILES, **TRACE_FILES},
)
for id, text, message in [
    ("empty", "", "m.json: malformed JSON"),
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00", "m.json: not UTF-8 text"),
    ("deep-nesting", DEEP, "m.json: malformed JSON"),
    ("nan", MODEL_CONFIG.replace("28", "NaN"), "m.json: num_hidden_layers must be a whole number"),
    ("1e999", MODEL_CONFIG.replace("28", "1e999"), "m.json: num_hidden_layers must be a whole number"),
    ("array", "[]", "m.json: expected a JSON object"),
    ("number", "5", "m.json: expected a JSON object"),
    ("object-empty", "{}", "m.json: missing num_hidden_layers"),
    ("layers-string", model_config(num_hidden_layers="28"), "m.json: num_hidden_layers must be a whole number"),
    ("layers-float", model_config(num_hidden_layers=28.0), "m.json: num_hidden_layers must be a whole number"),
    ("layers-2**40", model_config(num_hidden_layers=2**40), "m.json: num_hidden_layers must be a whole number"),
    ("layers-zero", model_config(num_hidden_layers=0), "m.json: num_hidden_layers must be a whole number"),
    ("kv-heads-negative", model_config(num_key_value_heads=-2), "m.json: num_key_value_heads must be a whole number"),
    ("dtype-int8", model_config(torch_dtype="int8"), "m.json: torch_dtype 'int8' is not one of"),
    ("dtype-list", model_config(torch_dtype=["bfloat16"]), "m.json: torch_dtype"),
    ("hidden-not-multiple", model_config(hidden_size=1537), "m.json: hidden_size 1537 is not a multiple"),
    ("mla-without-rope", model_config(kv_lora_rank=512), "m.json: missing qk_rope_head_dim"),
    (  # the published Qwen2.5 config names a sliding_window (unused: use_sliding_window false): drop it
        "window-missing",
        model_config(layer_types=["sliding_attention"] * 28, sliding_window=None),
        "m.json: missing sliding_window",
    ),
    ("state-fields", model_config(hybrid_override_pattern="M*" * 14), "m.json: missing mamba_num_heads"),
]:
    add("plan", f"model-config-{id}", PLAN, 1, message, {"m.json": text})
    add("size", f"model-config-{id}", ["--model-config", "m.json"], 1, message, {"m.json": text})

# --- kvlab size ------------------------------------------------------------------------------------------------
SIZE = ["--model-config", "m.json"]
add_many(
    "size",
    SIZE,
    [
        ("no-model", {"--model-config": None}, 2, "the following arguments are required: --model-config"),
        ("model-missing", {"--model-config": "missing.json"}, 1, "missing.json: cannot read"),
        ("model-directory", {"--model-config": "d"}, 1, "~d", {"d": DIR}),
        ("tokens-and-gib", ["--tokens", "5", "--gib", "1"], 2, "argument --gib: not allowed with argument --tokens"),
        ("tokens-negative", ["--tokens=-5"], 2, "argument --tokens: expected a whole number >= 0"),
        ("tokens-float", ["--tokens", "5.5"], 2, "argument --tokens: expected a whole number"),
        ("tokens-2**60", ["--tokens", str(2**60)], 2, "argument --tokens: expected a whole number <="),
        ("gib-nan", ["--gib", "nan"], 2, "argument --gib: expected a number of GiB"),
        ("gib-huge", ["--gib", str(2**41)], 2, "argument --gib: expected at most"),
        ("kv-dtype-int4", ["--kv-dtype", "int4"], 2, "argument --kv-dtype: invalid choice"),
        ("tp-zero", ["--tp", "0"], 2, "argument --tp: expected a whole number >= 1"),
        ("tp-split", ["--tp", "3"], 2, "--tp: 2 KV heads do not split over tp 3"),
        ("format-yaml", ["--format", "yaml"], 2, "argument --format: invalid choice"),
        ("engine-flag", ["--engine", "vllm"], 2, "unrecognized arguments: --engine"),
    ],
    {"m.json": MODEL_CONFIG},
)

# --- kvlab measure (no server answers at 127.0.0.1:9: a refused connection is the one network case) ---------------
MEASURE = ["--base-url", "http://127.0.0.1:9", "--model", "m", "--docs", "2", "--tokens", "5"]
MEASURE += ["--config-name", "lmcache", "--out", "m.jsonl"]
GOOD_RECORD = '{"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 5, "ttft_ms": 1.0, "total_ms": 2.0}\n'
BASE_URL = "argument --base-url: expected http://HOST[:PORT][/PATH] (or https)"
add_many(
    "measure",
    MEASURE,
    [
        ("no-base-url", {"--base-url": None}, 2, "the following arguments are required: --base-url"),
        ("base-url-unbalanced", {"--base-url": "http://[::1"}, 2, f"{BASE_URL}, got 'http://[::1': a '[' or ']'"),
        ("base-url-ftp", {"--base-url": "ftp://x"}, 2, f"{BASE_URL}, got 'ftp://x': the scheme must be http"),
        ("base-url-no-host", {"--base-url": "http://"}, 2, f"{BASE_URL}, got 'http://': it names no host"),
        ("no-model", {"--model": None}, 2, "the following arguments are required: --model"),
        ("no-out", {"--out": None}, 2, "the following arguments are required: --out"),
        ("no-config-name", {"--config-name": None}, 2, "the following arguments are required: --config-name"),
        ("config-name-blank", {"--config-name": " "}, 2, "--config-name must be a name"),
        ("docs-zero", {"--docs": "0"}, 2, "argument --docs: expected a whole number >= 1"),
        ("docs-many", {"--docs": "1025"}, 2, "argument --docs: expected a whole number <= 1024"),
        ("docs-float", {"--docs": "2.5"}, 2, "argument --docs: expected a whole number"),
        ("tokens-zero", {"--tokens": "0"}, 2, "argument --tokens: expected a whole number >= 1"),
        ("tokens-huge", {"--tokens": str(10**7)}, 2, "argument --tokens: expected a whole number <="),
        ("pass-sideways", ["--pass", "a:sideways"], 2, "argument --pass: expected NAME:fwd or NAME:rev"),
        ("pass-twice", ["--pass", "a:fwd", "--pass", "a:rev"], 2, "--pass: a name is given twice"),
        ("max-tokens-zero", ["--max-tokens", "0"], 2, "argument --max-tokens: expected a whole number >= 1"),
        ("timeout-zero", ["--timeout", "0"], 2, "argument --timeout: expected seconds"),
        ("timeout-nan", ["--timeout", "nan"], 2, "argument --timeout: expected seconds"),
        ("unknown-flag", ["--stream"], 2, "unrecognized arguments"),
        ("long-doc-qa-mode", ["--long-doc-qa", "2:sorted"], 2, "argument --long-doc-qa: expected COUNT:MODE"),
        ("long-doc-qa-count", ["--long-doc-qa", "x:tile"], 2, "argument --long-doc-qa: expected COUNT:MODE"),
        ("long-doc-qa-and-pass", ["--long-doc-qa", "2:tile", "--pass", "a:fwd"], 2, "--pass and --long-doc-qa"),
        ("long-doc-qa-huge", ["--long-doc-qa", f"{10**12}:tile"], 1, "~workload long_doc_qa would make"),
        ("refused", [], 1, "http://127.0.0.1:9/tokenize: cannot connect"),
        ("refused-existing", [], 1, "http://127.0.0.1:9/tokenize: cannot connect", {"m.jsonl": GOOD_RECORD}),
        ("out-bad-line", [], 1, "m.jsonl:2: malformed JSON", {"m.jsonl": GOOD_RECORD + "{oops\n"}),
        ("out-bad-field", [], 1, "m.jsonl:1: ", {"m.jsonl": '{"config": "x"}\n'}),
        ("out-directory", {"--out": "d"}, 1, "~d", {"d": DIR}),
        ("out-missing-folder", {"--out": "no/m.jsonl"}, 1, "no/m.jsonl: cannot write"),
    ],
)

# --- the server design and window rule flags of replay, ttft fit and plan ------------------------------------------
add("replay", "bos-without-server", ["--workload", "lab", "--gpu-tokens", "5", "--bos"], 2, "--state-extra-tokens")
add("replay", "server-unknown", ["--workload", "lab", "--gpu-tokens", "5", "--server", "vllm"], 2, "argument --server")
add(
    "replay",
    "server-with-policy",
    ["--workload", "lab", "--gpu-tokens", "5", "--server", "llama-cpp", "--write-policy", "write-back"],
    2,
    "--write-policy does not apply to --server llama-cpp",
)
add(
    "replay",
    "state-extra-negative",
    ["--workload", "lab", "--gpu-tokens", "5", "--server", "llama-cpp", "--state-extra-tokens=-1"],
    2,
    "argument --state-extra-tokens",
)

# --- kvlab policies / policies cliff / policies table ----------------------------------------------------------
add("policies", "no-subcommand", [], 2, "the following arguments are required: command")
add("policies", "unknown-subcommand", ["curve"], 2, "argument command: invalid choice")
add("policies", "flag-before-subcommand", ["--out", "x.json", "cliff"], 2, "argument command: invalid choice")
CLIFF = ["--docs", "2", "--tokens", "10", "--passes", "fwd,fwd", "--gpu-tokens", "10", "--cpu-tokens", "0,10"]
CLIFF += ["--record-pass", "2", "--write-policies", "write-through", "--out", "out.json"]
add_many(
    "policies cliff",
    CLIFF,
    [
        ("no-out", {"--out": None}, 2, "the following arguments are required: --out"),
        ("no-docs", {"--docs": None}, 2, "the following arguments are required: --docs"),
        ("unknown-flag", ["--evictions", "lru"], 2, "unrecognized arguments"),
        ("duplicate-flag", ["--docs", "3"], 2, "~--docs"),
        ("record-pass-3", {"--record-pass": "3"}, 2, "--record-pass 3 but --passes has only 2"),
        ("record-pass-0", {"--record-pass": "0"}, 2, "argument --record-pass: expected a whole number >= 1"),
        ("cpu-repeated", {"--cpu-tokens": "0,0"}, 2, "argument --cpu-tokens: rooms in tokens: an item is given twice"),
        ("cpu-empty", {"--cpu-tokens": ""}, 2, "argument --cpu-tokens: expected a whole number >= 0"),
        ("cpu-empty-item", {"--cpu-tokens": "0,,10"}, 2, "argument --cpu-tokens: expected a whole number >= 0"),
        ("cpu-negative", {"--cpu-tokens": "-5"}, 2, "argument --cpu-tokens: expected a whole number >= 0"),
        ("cpu-2**53+1", {"--cpu-tokens": f"0,{OVER}"}, 2, "argument --cpu-tokens: expected a whole number <="),
        ("cpu-5000-digits", {"--cpu-tokens": DIGITS}, 2, "argument --cpu-tokens: expected a whole number"),
        ("gpu-nan", {"--gpu-tokens": "nan"}, 2, "argument --gpu-tokens: expected a whole number >= 0"),
        (
            "write-policies-repeated",
            {"--write-policies": "write-back,write-back"},
            2,
            "argument --write-policies: write policies: an item is given twice",
        ),
        (
            "write-policies-choice",
            {"--write-policies": "lru"},
            2,
            "argument --write-policies: 'lru' is not a write policy",
        ),
        ("write-policies-empty", {"--write-policies": ""}, 2, "argument --write-policies: '' is not a write policy"),
        ("docs-2**70", {"--docs": BIG}, 2, "argument --docs: expected a whole number <="),
        ("docs-too-many", {"--docs": str(10**8)}, 2, "workload lab would make"),
        ("tokens-zero", {"--tokens": "0"}, 2, "argument --tokens: expected a whole number >= 1"),
        ("passes-bad", {"--passes": "rev,up"}, 2, "argument --passes: expected a comma-separated list of fwd/rev"),
        ("passes-empty", {"--passes": ""}, 2, "argument --passes: expected a comma-separated list of fwd/rev"),
        ("out-directory", {"--out": "d"}, 1, "~d", {"d": DIR}),
        ("out-missing-folder", {"--out": "nowhere/out.json"}, 1, "~nowhere/out.json"),
        ("out-dev-full", {"--out": "/dev/full"}, 1, "~/dev/full"),
    ],
    {"out.json": OLD},
)
TABLE = ["--workload", "lab", "--docs", "2", "--tokens", "10", "--gpu-tokens", "10", "--cpu-tokens", "0"]
TABLE += ["--block-tokens", "5", "--write-policies", "write-through", "--evictions", "lru", "--out", "out.csv"]
add_many(
    "policies table",
    TABLE,
    [
        ("no-evictions", {"--evictions": None}, 2, "the following arguments are required: --evictions"),
        ("no-workload", {"--workload": None}, 2, "the following arguments are required: --workload"),
        ("unknown-flag", ["--record-pass", "1"], 2, "unrecognized arguments"),
        ("duplicate-flag", ["--evictions", "fifo"], 2, "~--evictions"),
        ("block-zero", {"--block-tokens": "0"}, 2, "argument --block-tokens: expected a whole number >= 1"),
        (
            "block-repeated",
            {"--block-tokens": "5,5"},
            2,
            "argument --block-tokens: block sizes in tokens: an item is given twice",
        ),
        ("gpu-not-a-number", {"--gpu-tokens": "10,x"}, 2, "argument --gpu-tokens: expected a whole number >= 0"),
        ("cpu-2**70", {"--cpu-tokens": BIG}, 2, "argument --cpu-tokens: expected a whole number <="),
        (
            "evictions-repeated",
            {"--evictions": "lru,lru"},
            2,
            "argument --evictions: eviction policies: an item is given twice",
        ),
        ("evictions-choice", {"--evictions": "mru"}, 2, "argument --evictions: 'mru' is not a eviction policy"),
        ("arc-keep", {"--evictions": "arc", "+": ["--partial-blocks", "keep"]}, 2, "~arc"),
        ("write-back-touch", {"--write-policies": "write-back", "+": ["--touch-cpu-on-gpu-hit"]}, 2, "~touch"),
        ("trace-with-lab", ["--trace", "t.jsonl"], 2, "--trace is a setting of --workload mooncake, not lab"),
        ("too-many-accesses", {"--docs": str(10**8)}, 2, "workload lab would make"),
        ("docs-negative", {"--docs": "-3"}, 2, "~--docs"),
        ("out-directory", {"--out": "d"}, 1, "~d", {"d": DIR}),
        ("out-dev-full", {"--out": "/dev/full"}, 1, "~/dev/full"),
    ],
    {"out.csv": OLD},
)
add(
    "policies table",
    "opt-keep",
    [*edit(TABLE, {"--evictions": "lru,opt"}), "--partial-blocks", "keep"],
    2,
    "~opt",
    {"out.csv": OLD},
)
TABLE_MOON = ["--workload", "mooncake", "--trace", "t.jsonl", "--gpu-tokens", "1024", "--cpu-tokens", "0"]
TABLE_MOON += ["--block-tokens", "512", "--write-policies", "write-through", "--evictions", "lru", "--out", "out.csv"]
add_many(
    "policies table",
    TABLE_MOON,
    [
        ("out-is-trace", {"--out": "t.jsonl"}, 2, "t.jsonl is both an input and an output"),
        ("mooncake-block-100", {"--block-tokens": "512,100"}, 2, "--block-tokens must be a multiple"),
        ("trace-missing", {"--trace": "missing.jsonl"}, 1, "missing.jsonl: cannot read"),
        ("trace-bad-line", {}, 1, "t.jsonl:3: hash_ids must be a list", {"t.jsonl": GOOD_TRACE.replace("[1]", '"x"')}),
        ("trace-empty-object", {}, 1, "t.jsonl:1: missing field(s)", {"t.jsonl": "{}\n"}),
    ],
    {"t.jsonl": GOOD_TRACE, "out.csv": OLD},
)

# --- kvlab ttft / predict / breakeven / systems / fit / sweep / budgets ------------------------------------------
add("ttft", "no-subcommand", [], 2, "the following arguments are required: command")
add("ttft", "unknown-subcommand", ["estimate"], 2, "argument command: invalid choice")
add("ttft", "flag-without-subcommand", ["--hlep"], 2, "the following arguments are required: command")
FIT = ["--measurement", "m.jsonl", "--docs", "2", "--tokens", "10", "--config", "baseline:10,0"]
FIT += [
    "--config",
    "lmcache:10,100",
    "--pass",
    "p1:fwd",
    "--pass",
    "p2:fwd",
    "--model",
    "model.json",
    "--table",
    "table.csv",
]
FIT_FILES = {"m.jsonl": MEASUREMENT, "model.json": OLD, "table.csv": OLD}
add_many(
    "ttft fit",
    FIT,
    [
        ("no-measurement", {"--measurement": None}, 2, "the following arguments are required: --measurement"),
        ("no-table", {"--table": None}, 2, "the following arguments are required: --table"),
        ("unknown-flag", ["--grid", "1"], 2, "unrecognized arguments"),
        ("duplicate-flag", ["--docs", "3"], 2, "~--docs"),
        ("config-no-rooms", ["--config", "other"], 2, "argument --config: expected NAME:GPU_TOKENS,CPU_TOKENS"),
        ("config-bad-room", ["--config", "other:1,x"], 2, "argument --config: expected NAME:GPU_TOKENS,CPU_TOKENS"),
        (
            "config-negative-room",
            ["--config", "other:-1,0"],
            2,
            "argument --config: expected NAME:GPU_TOKENS,CPU_TOKENS",
        ),
        ("config-room-2**70", ["--config", f"other:{BIG},0"], 2, "argument --config: expected a whole number <="),
        ("config-twice", ["--config", "baseline:20,0"], 2, "--config: a config name is given twice"),
        ("pass-bad-order", ["--pass", "p3:sideways"], 2, "argument --pass: expected NAME:fwd or NAME:rev"),
        ("pass-no-name", ["--pass", ":fwd"], 2, "argument --pass: expected NAME:fwd or NAME:rev"),
        ("docs-zero", {"--docs": "0"}, 2, "argument --docs: expected a whole number >= 1"),
        ("docs-2**70", {"--docs": BIG}, 2, "argument --docs: expected a whole number <="),
        ("docs-too-many", {"--docs": str(10**8)}, 2, "--docs 100000000 x 2 passes x 1 points reads more than"),
        ("tokens-nan", {"--tokens": "nan"}, 2, "argument --tokens: expected a whole number >= 1"),
        ("model-is-table", {"--table": "model.json"}, 2, "model.json is named as two outputs"),
        ("model-is-measurement", {"--model": "m.jsonl"}, 2, "m.jsonl is both an input and an output"),
        ("table-missing-folder", {"--table": "nowhere/t.csv"}, 1, "~nowhere/t.csv"),
        ("model-directory", {"--model": "d"}, 1, "~d", {"d": DIR}),
        ("table-dev-full", {"--table": "/dev/full"}, 1, "~/dev/full"),
        ("measurement-missing", {"--measurement": "missing.jsonl"}, 1, "missing.jsonl: cannot read"),
        ("measurement-directory", {"--measurement": "d"}, 1, "~d", {"d": DIR}),
        ("measurement-dev-zero", {"--measurement": "/dev/zero"}, 1, "/dev/zero:1: line longer than"),
    ],
    FIT_FILES,
)
for id, text, message in [
    ("empty", "", "~m.jsonl"),
    ("not-utf8", MEASUREMENT.encode() + b"\xff\n", "m.jsonl:9: not UTF-8 text"),
    ("deep-nesting", DEEP + "\n", "m.jsonl:1: malformed JSON"),
    ("nan", MEASUREMENT.replace("5.0", "NaN", 1), "m.jsonl:1: malformed JSON"),
    ("array-line", MEASUREMENT + "[]\n", "m.jsonl:9: expected a JSON object"),
    (
        "missing-field",
        MEASUREMENT + jl(without(measurement_line(doc=1), "doc_tokens")),
        "m.jsonl:9: missing field(s): doc_tokens",
    ),
    ("ttft-string", jl(measurement_line(ttft="5")), "m.jsonl:1: ttft_ms must be a number"),
    ("unknown-config", jl(measurement_line(config="other")), "m.jsonl:1: config 'other' is not in the setting"),
    ("unknown-pass", jl(measurement_line(name="p9")), "m.jsonl:1: pass 'p9' is not in the setting"),
    ("doc-out-of-range", jl(measurement_line(doc=2)), "m.jsonl:1: doc must be a document number 0..1"),
    ("doc-float", jl(measurement_line(doc=0.0)), "m.jsonl:1: doc must be a document number"),
    ("doc-tokens-zero", jl(measurement_line(tokens=0)), "m.jsonl:1: doc_tokens must be a whole number from 1"),
    (
        "doc-read-twice",
        jl(measurement_line(), measurement_line()),
        "m.jsonl:2: config 'baseline' pass 'p1' reads doc 0 twice",
    ),
    ("ttft-1e308", MEASUREMENT.replace("5.0", "1e308").replace("6.0", "1.7e308"), "~m.jsonl"),
]:
    add("ttft fit", f"measurement-{id}", FIT, 1, message, {**FIT_FILES, "m.jsonl": text})
add("ttft fit", "state-extra-without-server", [*FIT, "--state-extra-tokens", "3"], 2, "--state-extra-tokens", FIT_FILES)
add("ttft fit", "fit-doc-outside", [*FIT, "--fit-doc", "2"], 2, "--fit-doc: the documents are 0..1", FIT_FILES)
add("ttft fit", "fit-every-doc", [*FIT, "--fit-doc", "0", "--fit-doc", "1"], 1, "~none is left to compare", FIT_FILES)
add("ttft fit", "server-unknown", [*FIT, "--server", "sglang"], 2, "argument --server: invalid choice", FIT_FILES)


SWEEP = ["--model", "model.json", "--docs", "2", "--tokens", "10", "--passes", "fwd,fwd", "--vary", "gpu_tokens"]
SWEEP += ["--grid", "0,10", "--out", "out.csv"]
SWEEP_FILES = {"model.json": TTFT_MODEL, "out.csv": OLD}


def ttft_model(**tiers):
    document = json.loads(TTFT_MODEL)
    for tier, fit in tiers.items():
        document["tiers"][tier] = fit
    return json.dumps(document)


add_many(
    "ttft sweep",
    SWEEP,
    [
        ("no-vary", {"--vary": None}, 2, "the following arguments are required: --vary"),
        ("no-model", {"--model": None}, 2, "the following arguments are required: --model"),
        ("unknown-flag", ["--config", "a:1,2"], 2, "unrecognized arguments"),
        ("duplicate-flag", ["--vary", "cpu_tokens"], 2, "~--vary"),
        ("vary-choice", {"--vary": "tokens"}, 2, "argument --vary: invalid choice"),
        ("grid-empty", {"--grid": ""}, 2, "argument --grid: expected a whole number >= 0"),
        ("grid-repeated", {"--grid": "10,10"}, 2, "argument --grid: rooms in tokens: an item is given twice"),
        ("grid-negative", {"--grid": "-1"}, 2, "argument --grid: expected a whole number >= 0"),
        ("grid-2**70", {"--grid": f"0,{BIG}"}, 2, "argument --grid: expected a whole number <="),
        ("grid-float", {"--grid": "0,1.5"}, 2, "argument --grid: expected a whole number >= 0"),
        ("gpu-nan", ["--gpu-tokens", "nan"], 2, "argument --gpu-tokens: expected a whole number >= 0"),
        ("cpu-1e999999999", ["--cpu-tokens", HUGE_EXP], 2, "argument --cpu-tokens: expected a whole number >= 0"),
        ("write-policy-choice", ["--write-policy", "lru"], 2, "argument --write-policy: invalid choice"),
        (
            "docs-too-many",
            {"--docs": str(5 * 10**7), "--grid": "0,10"},
            2,
            "--docs 50000000 x 2 passes x 2 points reads more than",
        ),
        ("docs-2**70", {"--docs": BIG}, 2, "argument --docs: expected a whole number <="),
        ("tokens-zero", {"--tokens": "0"}, 2, "argument --tokens: expected a whole number >= 1"),
        ("passes-bad", {"--passes": "fwd,back"}, 2, "argument --passes: expected a comma-separated list"),
        ("out-is-model", {"--out": "model.json"}, 2, "model.json is both an input and an output"),
        ("out-directory", {"--out": "d"}, 1, "~d", {"d": DIR}),
        ("out-missing-folder", {"--out": "nowhere/s.csv"}, 1, "~nowhere/s.csv"),
        ("out-dev-full", {"--out": "/dev/full"}, 1, "~/dev/full"),
        ("model-missing", {"--model": "missing.json"}, 1, "missing.json: cannot read"),
        ("model-directory", {"--model": "d"}, 1, "~d", {"d": DIR}),
    ],
    SWEEP_FILES,
)
for id, text, message in [
    ("empty", "", "model.json: malformed JSON"),
    ("binary", b"\x00\x00\xff\xff", "model.json: not UTF-8 text"),
    ("deep-nesting", DEEP, "model.json: malformed JSON"),
    ("nan", TTFT_MODEL.replace("30.35", "NaN"), "model.json: malformed JSON"),
    ("1e999", TTFT_MODEL.replace("30.35", "1e999"), "model.json: malformed JSON"),
    ("object-empty", "{}", "model.json: not a model written by `kvlab ttft fit`"),
    ("array", "[]", "model.json: not a model written by `kvlab ttft fit`"),
    ("number", "5", "model.json: not a model written by `kvlab ttft fit`"),
    ("tiers-list", json.dumps({"tiers": []}), "model.json: not a model written by `kvlab ttft fit`"),
    ("tier-unknown", ttft_model(disk={"n": 1}), "model.json: not a model written by `kvlab ttft fit`"),
    (
        "tier-field-string",
        ttft_model(gpu_hit={**json.loads(TTFT_MODEL)["tiers"]["gpu_hit"], "intercept_ms": "30"}),
        "model.json: not a model written by",
    ),
    ("tier-field-missing", ttft_model(gpu_hit={"n": 8}), "model.json: not a model written by"),
    (
        "tier-huge",
        ttft_model(**{t: {**f, "intercept_ms": 1.7e308} for t, f in json.loads(TTFT_MODEL)["tiers"].items()}),
        "~",
    ),
]:
    add("ttft sweep", f"model-{id}", SWEEP, 1, message, {**SWEEP_FILES, "model.json": text})

BUDGETS = ["--model", "model.json", "--workload", "lab", "--docs", "2", "--tokens", "10", "--model-config", "cfg.json"]
BUDGETS += ["--gpu-tokens", "10", "--cpu-gib-grid", "0,1", "--out", "out.csv"]
QWEN = ROOT / "models" / "Qwen2.5-1.5B-Instruct" / "config.json"  # MODEL_CONFIG's file
TINY = ROOT / "models" / "tiny-llama-cpp" / "config.json"


def fitted_model(model_config=QWEN, synthetic=False, tokens=(10, 10), **changes):
    """The committed model's tiers, as fitted to ``model_config`` (None: no --model-config) on prompts of ``tokens``
    (BUDGETS' are 10): budgets price a fitted model's own setting only."""
    document = {key: value for key, value in json.loads(TTFT_MODEL).items() if key != "fitted_in"}
    model = None if model_config is None else model_identity(model_config)
    fitted = {"model": model, "measured_on": None, "synthetic": synthetic, "tokens": list(tokens)}
    return json.dumps({**document, "fitted_in": fitted, **changes})


BUDGETS_FILES = {"model.json": fitted_model(), "cfg.json": MODEL_CONFIG, "out.csv": OLD}
add_many(
    "ttft budgets",
    BUDGETS,
    [
        ("no-grid", {"--cpu-gib-grid": None}, 2, "the following arguments are required: --cpu-gib-grid"),
        ("no-model-config", {"--model-config": None}, 2, "the following arguments are required: --model-config"),
        ("no-gpu-room", {"--gpu-tokens": None}, 2, "one of the arguments --gpu-tokens --gpu-gib is required"),
        ("gpu-tokens-and-gib", ["--gpu-gib", "1"], 2, "argument --gpu-gib: not allowed with argument --gpu-tokens"),
        ("unknown-flag", ["--target-hit-ratio", "0.5"], 2, "unrecognized arguments"),
        ("duplicate-flag", ["--tp", "1", "--tp", "2"], 2, "~--tp"),
        ("grid-empty", {"--cpu-gib-grid": ""}, 2, "argument --cpu-gib-grid: expected a number of GiB >= 0"),
        ("grid-nan", {"--cpu-gib-grid": "0,nan"}, 2, "argument --cpu-gib-grid: expected a number of GiB >= 0"),
        ("grid-inf", {"--cpu-gib-grid": "Infinity"}, 2, "argument --cpu-gib-grid: expected a number of GiB >= 0"),
        (
            "grid-repeated",
            {"--cpu-gib-grid": "1,1.0"},
            2,
            "argument --cpu-gib-grid: GiB amounts: an item is given twice",
        ),
        ("grid-negative", {"--cpu-gib-grid": "-1"}, 2, "argument --cpu-gib-grid: expected a number of GiB >= 0"),
        (
            "grid-2**41",
            {"--cpu-gib-grid": str(2**41)},
            2,
            "argument --cpu-gib-grid: expected at most 1099511627776 GiB",
        ),
        ("grid-1e999999999", {"--cpu-gib-grid": HUGE_EXP}, 2, "argument --cpu-gib-grid: expected at most"),
        (
            "grid-19-places",
            {"--cpu-gib-grid": "1." + "0" * 18 + "1"},
            2,
            "argument --cpu-gib-grid: expected at most 18 decimal places",
        ),
        (
            "gpu-gib-nan",
            {"--gpu-tokens": None, "+": ["--gpu-gib", "nan"]},
            2,
            "argument --gpu-gib: expected a number of GiB >= 0",
        ),
        ("tp-zero", ["--tp", "0"], 2, "argument --tp: expected a whole number >= 1"),
        ("write-policy-choice", ["--write-policy", "write-around"], 2, "argument --write-policy: invalid choice"),
        ("trace-with-lab", ["--trace", "t.jsonl"], 2, "--trace is a setting of --workload mooncake, not lab"),
        ("out-is-model", {"--out": "model.json"}, 2, "model.json is both an input and an output"),
        ("out-is-model-config", {"--out": "cfg.json"}, 2, "cfg.json is both an input and an output"),
        ("out-directory", {"--out": "d"}, 1, "~d", {"d": DIR}),
        ("out-dev-full", {"--out": "/dev/full"}, 1, "~/dev/full"),
        ("model-missing", {"--model": "missing.json"}, 1, "missing.json: cannot read"),
        ("model-object-empty", {}, 1, "model.json: not a model written by `kvlab ttft fit`", {"model.json": "{}"}),
        ("model-config-object-empty", {}, 1, "cfg.json: missing num_hidden_layers", {"cfg.json": "{}"}),
        ("model-config-nan", {}, 1, "cfg.json: hidden_size must be", {"cfg.json": MODEL_CONFIG.replace("1536", "NaN")}),
        # a fitted model prices the setting it was fitted in only (kvlab/latency/ttft.py fitted_model)
        ("model-and-gpu-system", ["--gpu-system", "h100_sxm"], 2, "give one of --model (a fitted model) and"),
        ("neither-model-nor-gpu-system", {"--model": None}, 2, "give one of --model (a fitted model) and"),
        (
            "gpu-system-allow-other-setting",
            {"--model": None, "+": ["--gpu-system", "h100_sxm", "--allow-other-setting"]},
            2,
            "--allow-other-setting applies to a fitted --model only",
        ),
        (
            "gpu-system-unknown",
            {"--model": None, "+": ["--gpu-system", "nope"]},
            2,
            "--gpu-system: 'nope' is not a system of aiconfigurator-core",
        ),
        ("efficiency-zero", ["--efficiency", "0"], 2, "argument --efficiency: expected a fraction from 1e-9 to 1"),
        (
            "model-without-model-config",
            {},
            2,
            "model.json: it was fitted without --model-config (its model is unknown)",
            {"model.json": fitted_model(None)},
        ),
        (
            "model-without-fitted-in",
            {},
            2,
            "model.json: it was fitted without --model-config",
            {"model.json": json.dumps({"tiers": json.loads(TTFT_MODEL)["tiers"]})},
        ),
        (
            "model-of-another-model",
            {},
            2,
            f"model.json: it was fitted to {TINY.parent.name}, not ",
            {"model.json": fitted_model(TINY)},
        ),
        (  # --docs 2 read by one pass: 2 requests, each of 11 tokens
            "tokens-above-the-fit",
            {"--tokens": "11", "+": ["--passes", "fwd"]},
            2,
            "model.json: 2 requests are outside the 10..10 prompt tokens it was fitted on",
        ),
        (
            "tokens-below-the-fit",
            {"--tokens": "9", "+": ["--passes", "fwd,rev"]},
            2,
            "model.json: 4 requests are outside the 10..10 prompt tokens it was fitted on",
        ),
        (
            "synthetic-allow-other-setting",
            {"--tokens": "11", "+": ["--allow-other-setting"]},
            2,
            "~a model fitted to the SYNTHETIC example measurement prices that setting only",
            {"model.json": fitted_model(synthetic=True)},
        ),
        (
            "synthetic-other-model-allow-other-setting",
            ["--allow-other-setting"],
            2,
            f"model.json: it was fitted to {TINY.parent.name}",
            {"model.json": fitted_model(TINY, synthetic=True)},
        ),
        (
            "model-calibration",
            {},
            2,
            "model.json: a hardware calibration (kvlab ttft fit --gpu-system), not a per-tier model",
            {"model.json": fitted_model(calibration={"factors": ["efficiency"]})},
        ),
    ],
    BUDGETS_FILES,
)

# kvlab ttft predict: a workload's TTFT priced from the hardware (stdout; --per-request a CSV)
PREDICT = ["--workload", "lab", "--docs", "2", "--tokens", "10", "--gpu-tokens", "10", "--model-config", "cfg.json"]
PREDICT += ["--gpu-system", "h100_sxm"]
HARDWARE_ROWS = [  # the hardware flags (kvlab/cli/flags.py add_hardware_arguments), as predict and breakeven read them
    ("no-gpu-system", {"--gpu-system": None}, 2, "the following arguments are required: --gpu-system"),
    ("no-model-config", {"--model-config": None}, 2, "the following arguments are required: --model-config"),
    ("gpu-system-unknown", {"--gpu-system": "nope"}, 2, "--gpu-system: 'nope' is not a system of aiconfigurator-core"),
    ("gpu-system-empty", {"--gpu-system": ""}, 2, "~--gpu-system"),
    ("gpu-system-missing-yaml", {"--gpu-system": "missing.yaml"}, 2, "~missing.yaml"),
    ("efficiency-zero", ["--efficiency", "0"], 2, "argument --efficiency: expected a fraction from 1e-9 to 1, got '0'"),
    ("efficiency-1.5", ["--efficiency", "1.5"], 2, "argument --efficiency: expected a fraction from 1e-9 to 1"),
    ("efficiency-nan", ["--efficiency", "nan"], 2, "argument --efficiency: expected a fraction from 1e-9 to 1"),
    ("memory-efficiency-zero", ["--memory-efficiency", "0"], 2, "argument --memory-efficiency: expected a fraction"),
    ("overhead-negative", ["--overhead-ms", "-1"], 2, "argument --overhead-ms: expected 0 to 1e9 ms"),
    ("link-gbps-zero", ["--link-gbps", "0"], 2, "argument --link-gbps: expected a number from 1e-9 to 1e9"),
    ("link-gbps-inf", ["--link-gbps", "inf"], 2, "~--link-gbps"),
    ("copy-us-negative", ["--copy-us", "-1"], 2, "argument --copy-us: expected 0 to 1e9 microseconds"),
    ("link-latency-nan", ["--link-latency-ms", "nan"], 2, "argument --link-latency-ms: expected 0 to 1e9 ms"),
    ("engine-choice", ["--engine", "trtllm"], 2, "argument --engine: invalid choice: 'trtllm'"),
    ("latency-source-choice", ["--latency-source", "guess"], 2, "argument --latency-source: invalid choice"),
    ("all-reduce-choice", ["--all-reduce", "tree"], 2, "argument --all-reduce: invalid choice"),
    ("layerwise-with-vllm", ["--layerwise"], 2, "--layerwise is LMCache's use_layerwise"),
    ("tp-zero", ["--tp", "0"], 2, "argument --tp: expected a whole number >= 1"),
    ("engine-version-unknown", ["--engine-version", "9.9"], 2, "--engine-version '9.9': the database has vllm"),
    ("duplicate-gpu-system", ["--gpu-system", "h100_sxm"], 2, "argument --gpu-system: given twice"),
    ("model-config-missing", {"--model-config": "missing.json"}, 2, "--model-config: missing.json: cannot read"),
    ("model-config-object-empty", {}, 2, "--model-config: cfg.json: missing num_hidden_layers", {"cfg.json": "{}"}),
]
PREDICT_FILES = {"cfg.json": MODEL_CONFIG, "r.csv": OLD}
add_many(
    "ttft predict",
    PREDICT,
    [
        *HARDWARE_ROWS,
        ("no-workload", {"--workload": None}, 2, "the following arguments are required: --workload"),
        ("no-gpu-room", {"--gpu-tokens": None}, 2, "the following arguments are required: --gpu-tokens"),
        ("unknown-flag", ["--model", "m.json"], 2, "unrecognized arguments: --model m.json"),
        ("per-request-is-model-config", ["--per-request", "cfg.json"], 2, "cfg.json is both an input and an output"),
        ("per-request-directory", ["--per-request", "d"], 1, "~d", {"d": DIR}),
        ("per-request-missing-folder", ["--per-request", "nowhere/r.csv"], 1, "~nowhere/r.csv"),
        ("per-request-dev-full", ["--per-request", "/dev/full"], 1, "~/dev/full"),
    ],
    PREDICT_FILES,
)

# kvlab ttft breakeven: the link bandwidth above which loading a prefix beats recomputing it (stdout)
BREAKEVEN = ["--prefix-tokens", "100", "--model-config", "cfg.json", "--gpu-system", "h100_sxm"]
add_many(
    "ttft breakeven",
    BREAKEVEN,
    [
        *HARDWARE_ROWS,
        ("no-prefix", {"--prefix-tokens": None}, 2, "the following arguments are required: --prefix-tokens"),
        ("prefix-zero", {"--prefix-tokens": "0"}, 2, "argument --prefix-tokens: expected a whole number >= 1"),
        ("prefix-negative", {"--prefix-tokens": "-1"}, 2, "argument --prefix-tokens: expected a whole number >= 1"),
        ("prefix-float", {"--prefix-tokens": "1.5"}, 2, "argument --prefix-tokens: expected a whole number >= 1"),
        ("prefix-nan", {"--prefix-tokens": "nan"}, 2, "argument --prefix-tokens: expected a whole number >= 1"),
        ("prefix-2**70", {"--prefix-tokens": BIG}, 2, "~--prefix-tokens"),
        ("unknown-flag", ["--workload", "lab"], 2, "unrecognized arguments: --workload lab"),
    ],
    {"cfg.json": MODEL_CONFIG},
)

# kvlab ttft systems: the GPU systems and engine versions (stdout; no flags)
add("ttft systems", "positional", ["h100_sxm"], 2, "unrecognized arguments: h100_sxm")
add("ttft systems", "unknown-flag", ["--gpu-system", "h100_sxm"], 2, "unrecognized arguments: --gpu-system h100_sxm")

# --- kvlab plots NAME --out FILE INPUT... -----------------------------------------------------------------------
PLOT = ["ttft_budgets", "--out", "out.png", "in.csv"]
PLOT_FILES = {"in.csv": BUDGETS_CSV, "out.png": OLD}
add_many(
    "plots",
    PLOT,
    [
        ("unknown-flag", ["--dpi", "300"], 2, "unrecognized arguments"),
        ("duplicate-out", ["--out", "other.png"], 2, "~--out"),
        ("no-out", {"--out": None}, 2, "the following arguments are required: --out"),
        ("out-is-input", {"--out": "in.csv"}, 2, "in.csv is both an input and an output"),
        ("out-directory", {"--out": "d"}, 1, "~d", {"d": DIR}),
        ("out-missing-folder", {"--out": "nowhere/p.png"}, 1, "~nowhere/p.png"),
        ("out-dev-full", {"--out": "/dev/full"}, 1, "~/dev/full"),
    ],
    PLOT_FILES,
)
add("plots", "no-arguments", [], 2, "the following arguments are required")
add(
    "plots", "unknown-plot", ["histogram", "--out", "out.png", "in.csv"], 2, "argument plot: invalid choice", PLOT_FILES
)
add(
    "plots",
    "no-inputs",
    ["ttft_budgets", "--out", "out.png"],
    2,
    "the following arguments are required: inputs",
    PLOT_FILES,
)
add(
    "plots",
    "gpu-cliff-one-input",
    ["gpu_cliff", "--out", "out.png", "cliff.json"],
    2,
    "~gpu_cliff",
    {"cliff.json": CLIFF_JSON, "out.png": OLD},
)
add(
    "plots",
    "ttft-budgets-two-inputs",
    ["ttft_budgets", "--out", "out.png", "in.csv", "in2.csv"],
    2,
    "~ttft_budgets",
    {**PLOT_FILES, "in2.csv": BUDGETS_CSV},
)
for id, files, message in [
    ("input-missing", {}, "~missing.csv"),
    ("input-directory", {"missing.csv": DIR}, "~missing.csv"),
    ("input-empty", {"missing.csv": ""}, "~missing.csv"),
    ("input-binary", {"missing.csv": b"\x89PNG\r\n\x1a\n\x00\x00\x00"}, "~missing.csv"),
    ("input-not-utf8", {"missing.csv": BUDGETS_CSV.encode() + b"0.5,\xff,all,1,1,1\n"}, "~missing.csv"),
    ("input-wrong-columns", {"missing.csv": "a,b\n1,2\n"}, "~missing.csv"),
    ("input-inf", {"missing.csv": BUDGETS_CSV + "2.0,10,all,inf,1,1\n"}, "~missing.csv"),
    ("input-nan", {"missing.csv": BUDGETS_CSV + "2.0,10,all,nan,1,1\n"}, "~missing.csv"),
    ("input-text-number", {"missing.csv": BUDGETS_CSV + "2.0,10,all,high,1,1\n"}, "~missing.csv"),
]:
    add(
        "plots",
        f"ttft-budgets-{id}",
        ["ttft_budgets", "--out", "out.png", "missing.csv"],
        1,
        message,
        {"out.png": OLD, **files},
    )
add("plots", "input-dev-zero", ["ttft_budgets", "--out", "out.png", "/dev/zero"], 1, "~/dev/zero", {"out.png": OLD})
for id, text in [
    ("nan", CLIFF_JSON.replace("0", "NaN", 1)),
    ("deep-nesting", DEEP),
    ("array", "[]"),
    ("object-empty", "{}"),
    ("number", "7"),
    ("values-strings", json.dumps({"21520": "ten", "30000": "x"})),
    ("not-utf8", b'{"21520": 1, "\xff": 2}'),
]:
    add(
        "plots",
        f"gpu-cliff-{id}",
        ["gpu_cliff", "--out", "out.png", "cliff.json", "sweep.csv"],
        1,
        "~cliff.json",
        {"cliff.json": text, "sweep.csv": SWEEP_CSV, "out.png": OLD},
    )

# --- kvlab collect ------------------------------------------------------------------------------------------
COLLECT = ["--pass", "2", "--value", "hits", "--out", "out.json", "30000.json"]
COLLECT_FILES = {"30000.json": SCENARIO_OUT, "out.json": OLD}


def scenario_out(**changes):
    document = json.loads(SCENARIO_OUT)
    document["passes"][1].update(changes)
    return json.dumps(document)


add_many(
    "collect",
    COLLECT,
    [
        ("no-pass", {"--pass": None}, 2, "the following arguments are required: --pass"),
        ("no-value", {"--value": None}, 2, "the following arguments are required: --value"),
        ("no-out", {"--out": None}, 2, "the following arguments are required: --out"),
        ("unknown-flag", ["--grid", "1"], 2, "unrecognized arguments"),
        ("duplicate-flag", ["--pass", "1"], 2, "~--pass"),
        ("pass-zero", {"--pass": "0"}, 2, "argument --pass: expected a whole number >= 1"),
        ("pass-2**70", {"--pass": BIG}, 2, "argument --pass: expected a whole number <="),
        ("pass-nan", {"--pass": "nan"}, 2, "argument --pass: expected a whole number >= 1"),
        ("pass-empty", {"--pass": ""}, 2, "argument --pass: expected a whole number >= 1"),
        ("value-choice", {"--value": "total"}, 2, "argument --value: invalid choice"),
        ("pass-3-of-2", {"--pass": "3"}, 1, "30000.json: has 2 pass(es), cannot record pass 3"),
        ("out-is-point", {"--out": "30000.json"}, 2, "30000.json is both an input and an output"),
        ("out-directory", {"--out": "d"}, 1, "~d", {"d": DIR}),
        ("out-missing-folder", {"--out": "nowhere/c.json"}, 1, "~nowhere/c.json"),
        ("out-dev-full", {"--out": "/dev/full"}, 1, "~/dev/full"),
        ("point-missing", ["40000.json"], 1, "40000.json: cannot read"),
        ("point-directory", ["40000.json"], 1, "~40000.json", {"40000.json": DIR}),
        ("point-dev-zero", ["/dev/zero"], 1, "/dev/zero: larger than"),
        (
            "point-stem-twice",
            ["sub/30000.json"],
            1,
            "sub/30000.json: grid value 30000 appears twice",
            {"sub/30000.json": SCENARIO_OUT},
        ),
    ],
    COLLECT_FILES,
)
add(
    "collect",
    "no-points",
    ["--pass", "2", "--value", "hits", "--out", "out.json"],
    2,
    "the following arguments are required: points",
    {"out.json": OLD},
)
COUNTS_NEEDED = "40000.json: pass 2 needs gpu_hits, cpu_hits, misses as whole numbers"

for id, text, message in [
    ("empty", "", "40000.json: malformed JSON"),
    ("binary", b"\x00\xff\x00", "40000.json: not UTF-8 text"),
    ("deep-nesting", DEEP, "40000.json: malformed JSON"),
    ("nan", SCENARIO_OUT.replace("10", "NaN", 1), "40000.json: malformed JSON"),
    ("1e999", SCENARIO_OUT.replace("10", "1e999", 1), "40000.json: malformed JSON"),
    ("object-empty", "{}", "40000.json: not a scenario output (no passes list)"),
    ("array", "[]", "40000.json: not a scenario output (no passes list)"),
    ("number", "3", "40000.json: not a scenario output (no passes list)"),
    ("passes-of-numbers", json.dumps({"passes": [1, 2]}), "40000.json: not a scenario output (no passes list)"),
    ("hits-string", scenario_out(gpu_hits="3"), COUNTS_NEEDED),
    ("hits-float", scenario_out(gpu_hits=1.5), COUNTS_NEEDED),
    (
        "hits-missing",
        json.dumps({"passes": [{}, {"misses": 1}]}),
        COUNTS_NEEDED,
    ),
    ("hits-bool", scenario_out(gpu_hits=True, cpu_hits=True), "~40000.json"),
    ("hits-negative", scenario_out(gpu_hits=-5), "~40000.json"),
    ("hits-2**70", scenario_out(gpu_hits=2**70), "~40000.json"),
]:
    add("collect", f"point-{id}", [*COLLECT, "40000.json"], 1, message, {**COLLECT_FILES, "40000.json": text})

# --- kvlab replay-table --------------------------------------------------------------------------------------
RT = ["--out", "t.csv", "p.json"]
RT_FILES = {"p.json": REPLAY_POINT, "t.csv": OLD}
add_many(
    "replay-table",
    RT,
    [
        ("no-out", {"--out": None}, 2, "the following arguments are required: --out"),
        ("unknown-flag", ["--workload", "lab"], 2, "unrecognized arguments"),
        ("duplicate-out", ["--out", "u.csv"], 2, "~--out"),
        ("out-is-point", {"--out": "p.json"}, 2, "p.json is both an input and an output"),
        ("out-directory", {"--out": "d"}, 1, "~d", {"d": DIR}),
        ("out-missing-folder", {"--out": "nowhere/t.csv"}, 1, "~nowhere/t.csv"),
        ("out-dev-full", {"--out": "/dev/full"}, 1, "~/dev/full"),
        ("point-missing", ["q.json"], 1, "q.json: cannot read"),
        ("point-directory", ["q.json"], 1, "~q.json", {"q.json": DIR}),
        ("point-dev-zero", ["/dev/zero"], 1, "/dev/zero: larger than"),
    ],
    RT_FILES,
)
add("replay-table", "no-arguments", [], 2, "the following arguments are required")
add("replay-table", "no-points", ["--out", "t.csv"], 2, "the following arguments are required: points", {"t.csv": OLD})
_point = json.loads(REPLAY_POINT)
_room = f'"gpu_tokens": {_point["cache"]["gpu_tokens"]}'  # a number of the point, in its JSON
for id, text, message in [
    ("empty", "", "q.json: malformed JSON"),
    ("binary", b"\xff\xd8\xff\xe0", "q.json: not UTF-8 text"),
    ("deep-nesting", DEEP, "q.json: malformed JSON"),
    ("nan", REPLAY_POINT.replace(_room, '"gpu_tokens": NaN', 1), "q.json: malformed JSON"),
    ("infinity", REPLAY_POINT.replace(_room, '"gpu_tokens": -Infinity', 1), "q.json: malformed JSON"),
    ("1e999", REPLAY_POINT.replace(_room, '"gpu_tokens": 1e999', 1), "q.json: malformed JSON"),
    ("object-empty", "{}", "q.json: not a replay output"),
    ("array", "[]", "q.json: not a replay output"),
    ("number", "1", "q.json: not a replay output"),
    ("no-rounds", json.dumps(without(_point, "rounds")), "q.json: not a replay output"),
    ("cache-list", json.dumps({**_point, "cache": []}), "q.json: not a replay output"),
    ("rounds-of-strings", json.dumps({**_point, "rounds": ["pass1"]}), "q.json: not a replay output"),
    ("figure-string", json.dumps({**_point, "token_hit_ratio": "high"}), "~q.json"),
]:
    add("replay-table", f"point-{id}", [*RT, "q.json"], 1, message, {**RT_FILES, "q.json": text})

# --- kvlab example-measurement -------------------------------------------------------------------------------
EX = ["--config", "baseline:10,0", "--pass", "p1:fwd", "--docs", "2", "--tokens", "10", "--gpu-hit-ms", "30"]
EX += ["--cpu-load-ms", "48", "--recompute-ms", "576", "--store-overhead-ms", "30", "--decode-ms", "210"]
EX += ["--jitter", "0.03", "--seed", "1", "--out", "out.jsonl"]
add_many(
    "example-measurement",
    EX,
    [
        ("no-seed", {"--seed": None}, 2, "the following arguments are required: --seed"),
        ("no-out", {"--out": None}, 2, "the following arguments are required: --out"),
        ("no-decode", {"--decode-ms": None}, 2, "the following arguments are required: --decode-ms"),
        ("unknown-flag", ["--model", "m.json"], 2, "unrecognized arguments"),
        ("duplicate-flag", ["--seed", "2"], 2, "~--seed"),
        ("config-bad", {"--config": "baseline"}, 2, "argument --config: expected NAME:GPU_TOKENS,CPU_TOKENS"),
        ("config-empty", {"--config": ""}, 2, "argument --config: expected NAME:GPU_TOKENS,CPU_TOKENS"),
        ("config-twice", ["--config", "baseline:20,0"], 2, "~--config"),
        ("pass-bad", {"--pass": "p1:both"}, 2, "argument --pass: expected NAME:fwd or NAME:rev"),
        ("pass-twice", ["--pass", "p1:rev"], 2, "~--pass"),
        ("jitter-11", {"--jitter": "11"}, 2, "argument --jitter: expected a relative standard deviation from 0 to 10"),
        ("jitter-nan", {"--jitter": "nan"}, 2, "argument --jitter: expected a relative standard deviation"),
        ("jitter-negative", {"--jitter": "-0.1"}, 2, "argument --jitter: expected a relative standard deviation"),
        (
            "gpu-hit-negative",
            {"--gpu-hit-ms": "-1"},
            2,
            "argument --gpu-hit-ms: expected milliseconds from 0 to 1000000000",
        ),
        ("gpu-hit-1e10", {"--gpu-hit-ms": "1e10"}, 2, "argument --gpu-hit-ms: expected milliseconds"),
        ("cpu-load-inf", {"--cpu-load-ms": "inf"}, 2, "argument --cpu-load-ms: expected milliseconds"),
        ("recompute-1e999999999", {"--recompute-ms": HUGE_EXP}, 2, "argument --recompute-ms: expected milliseconds"),
        ("decode-empty", {"--decode-ms": ""}, 2, "argument --decode-ms: expected milliseconds"),
        (
            "store-5000-digits",
            {"--store-overhead-ms": DIGITS},
            2,
            "argument --store-overhead-ms: expected milliseconds",
        ),
        ("seed-2**70", {"--seed": BIG}, 2, "argument --seed: expected a whole number from"),
        ("seed-float", {"--seed": "1.5"}, 2, "argument --seed: expected a whole number from"),
        ("docs-negative", {"--docs": "-2"}, 2, "argument --docs: expected a whole number >= 0"),
        ("docs-2**70", {"--docs": BIG}, 2, "argument --docs: expected a whole number <="),
        (
            "docs-too-many",
            {"--docs": str(10**8), "+": ["--pass", "p2:rev"]},
            2,
            "--docs 100000000 makes more than 100000000",
        ),
        ("tokens-2**54", {"--tokens": str(2**54)}, 2, "argument --tokens: expected a whole number <="),
        ("out-directory", {"--out": "d"}, 1, "~d", {"d": DIR}),
        ("out-missing-folder", {"--out": "nowhere/m.jsonl"}, 1, "~nowhere/m.jsonl"),
        ("out-dev-full", {"--out": "/dev/full"}, 1, "~/dev/full"),
    ],
    {"out.jsonl": OLD},
)

# --- kvlab config FILE -----------------------------------------------------------------------------------------
TOP_KEYS = list(load_config())
SCHEMA_REQUIRED = yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))["required"]  # parsed once, not once a key
REQUIRED_KEYS = [key for key in TOP_KEYS if key in SCHEMA_REQUIRED]


def config_yaml(mutate):
    """The committed config, mutated, as ``yaml.safe_dump`` writes it: libyaml's emitter with the same safe
    representer writes the same text for these configs (checked byte for byte on every case here) in a tenth of
    the time, and this runs at import, in each pytest-xdist worker's collection (about 2 s of CPU each)."""
    config = load_config()
    mutate(config)
    return yaml.dump(config, Dumper=yaml.CSafeDumper, sort_keys=False)


setting, removing = setter, deleter  # conftest's config mutations


def linked(name):
    """A files entry: a link to the repository's folder ``name`` (a config's relative paths resolve)."""
    return lambda tmp: (tmp / name).symlink_to(ROOT / name)


REPOSITORY_LINKS = {name: linked(name) for name in ("data", "models", "results") if (ROOT / name).exists()}


@functools.lru_cache(maxsize=8)
def composed(text):
    """``text`` composed as YAML (the pure-Python loader: its marks are the ones spliced below), once per text: the
    committed config's is read for six cases at import, in each pytest-xdist worker's collection. Its nodes are
    only read."""
    return yaml.compose(text, Loader=yaml.SafeLoader)


def key_node(text, path):
    """The composed YAML node of the key at ``path`` in ``text`` and its value's node (found as YAML finds it,
    whatever the layout)."""
    node, key = composed(text), None
    for name in path:
        assert isinstance(node, yaml.MappingNode), (path, name)
        key, node = next((k, v) for k, v in node.value if k.value == name)
    return key, node


def key_line(text, *path):
    """The 1-based line of the key at ``path`` in ``text``."""
    return key_node(text, path)[0].start_mark.line + 1


def spliced(text, path, literal):
    """``text`` with the scalar value at ``path`` written as the YAML text ``literal`` (in place: the rest of the
    file, comments and layout, as it was)."""
    _, value = key_node(text, path)
    assert isinstance(value, yaml.ScalarNode), path
    return text[: value.start_mark.index] + literal + text[value.end_mark.index :]


def tab_indented(text, path):
    """``text`` with the line of the key at ``path`` indented by a tab instead of its spaces."""
    key, _ = key_node(text, path)
    assert key.start_mark.column > 0, path
    return text[: key.start_mark.index - key.start_mark.column] + "\t" + text[key.start_mark.index :]


def config_case(id, text, message, args=("c.yaml",), code=1, process=False):
    files = {"c.yaml": text, **REPOSITORY_LINKS} if text is not None else {}
    add("config", id, list(args), code, message, files, process)


for key in REQUIRED_KEYS:  # an optional section (real_measurement) may be left out
    config_case(f"without-{key}", config_yaml(removing([key])), "c.yaml:1: (top level):")
config_case("unknown-top-key", config_yaml(lambda c: c.update(extra=1)), "~extra: unknown key")
_text = config_yaml(lambda c: c["scenario"].update(doc=3))
config_case("unknown-nested-key", _text, f"c.yaml:{key_line(_text, 'scenario', 'doc')}: scenario.doc: unknown key")
# The committed file (comments above the key shift its line) and the file as a YAML tool writes it.
_text = spliced(CONFIG_TEXT, ("runs", "cyclic", "gpu"), "-1")
config_case("negative-room", _text, f"c.yaml:{key_line(_text, 'runs', 'cyclic', 'gpu')}: runs.cyclic.gpu:")
_text = config_yaml(setting(["runs", "cyclic", "gpu"], -1))
config_case("negative-room-tool-written", _text, f"c.yaml:{key_line(_text, 'runs', 'cyclic', 'gpu')}: runs.cyclic.gpu:")
# YAML's own spellings of numbers no JSON value has, written where the value stands.
config_case(
    "nan",
    spliced(CONFIG_TEXT, ("example_measurement", "jitter"), ".nan"),
    "~example_measurement.jitter: not a finite number",
)
config_case(
    "inf",
    spliced(CONFIG_TEXT, ("example_measurement", "latency_ms", "gpu_hit"), ".inf"),
    "~example_measurement.latency_ms.gpu_hit: not a finite number",
)
config_case(
    "minus-inf",
    spliced(CONFIG_TEXT, ("mrc", "target_hit_ratio"), "-.inf"),
    "~mrc.target_hit_ratio: not a finite number",
)
config_case(
    "1e999",
    spliced(CONFIG_TEXT, ("plans", "lab", "cpu_gib"), "1.0e+999"),
    "~plans.lab.cpu_gib: not a finite number",
)
config_case("docs-string", config_yaml(setting(["scenario", "docs"], "ten")), "~scenario.docs:")
config_case("docs-float", config_yaml(setting(["scenario", "docs"], 10.5)), "~scenario.docs:")
config_case("docs-bool", config_yaml(setting(["scenario", "docs"], True)), "~scenario.docs:")
config_case("docs-2**70", config_yaml(setting(["scenario", "docs"], 2**70)), "~scenario.docs")
config_case("room-2**70", config_yaml(setting(["runs", "cyclic", "gpu"], 2**70)), "~runs.cyclic.gpu")
config_case("passes-bad", config_yaml(setting(["runs", "cyclic", "passes"], ["fwd", "up"])), "~runs.cyclic.passes")
config_case("passes-empty", config_yaml(setting(["runs", "cyclic", "passes"], [])), "~runs.cyclic.passes")
config_case("runs-list", config_yaml(setting(["runs"], ["cyclic"])), "~runs:")
config_case(
    "write-policy-bad", config_yaml(setting(["replay", "write_policy"], "write-around")), "~replay.write_policy"
)
config_case("eviction-bad", config_yaml(setting(["replay", "gpu_eviction"], "mru")), "~replay.gpu_eviction")
config_case("block-zero", config_yaml(setting(["replay", "rooms", "block_tokens"], [0])), "~replay.rooms.block_tokens")
config_case("ratio-2", config_yaml(setting(["mrc", "target_hit_ratio"], 2)), "~mrc.target_hit_ratio")
config_case("cpu-gib-negative", config_yaml(setting(["plans", "lab", "cpu_gib"], -1)), "~plans.lab.cpu_gib")
config_case(
    "jitter-string", config_yaml(setting(["example_measurement", "jitter"], "0.03")), "~example_measurement.jitter"
)
REAL = ["real_measurement"]
config_case(
    "real-fit-doc-outside", config_yaml(setting([*REAL, "fit_docs"], [1, 10])), "~real_measurement.fit_docs: 10"
)
config_case("real-fit-every-doc", config_yaml(setting([*REAL, "fit_docs"], list(range(10)))), "~every document")
config_case("real-server-vllm", config_yaml(setting([*REAL, "server"], "vllm")), "~real_measurement.server")
config_case("real-no-note", config_yaml(removing([*REAL, "note"])), "~real_measurement")
config_case("real-source-missing", config_yaml(setting([*REAL, "source"], "nope.jsonl")), "~real_measurement.source")
config_case("real-extra-negative", config_yaml(setting([*REAL, "state_extra_tokens"], -1)), "~state_extra_tokens")
config_case("yte-header", "__use_yte__: true\n" + CONFIG_TEXT, "c.yaml:1: __use_yte__: YTE templating runs code")
config_case("yte-header-late", CONFIG_TEXT + "\n__use_yte__: true\n", "~__use_yte__")
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
)
config_case("alias-bomb", BOMB, "c.yaml: YAML aliases expand to more than 100000 nodes")
config_case(
    "alias-bomb-in-config",
    CONFIG_TEXT + "\n" + BOMB.replace("a:", "zz_a:", 1).replace("\nb:", "\nzz_b:"),
    "~YAML aliases expand to more than 100000 nodes",
)
config_case("document-list", "- 1\n- 2\n", "~(top level)")
config_case("document-scalar", "42\n", "~(top level)")
config_case("document-string", "hello\n", "~(top level)")
config_case("two-documents", CONFIG_TEXT + "\n---\nscenario: {}\n", "~c.yaml")
config_case("invalid-yaml", "scenario: [docs: 10\n", "~c.yaml:")
config_case("invalid-yaml-tab", tab_indented(CONFIG_TEXT, ("scenario", "docs")), "~c.yaml:")
config_case("python-tag", CONFIG_TEXT + "\nextra: !!python/object/apply:os.system [true]\n", "~c.yaml")
config_case("empty", "", "c.yaml: empty")
config_case("comments-only", "# nothing\n", "c.yaml: empty")
config_case("not-utf8", CONFIG_TEXT.encode() + b"\n# \xff\xfe\n", "c.yaml: not UTF-8 text")
config_case("binary", b"\x00\x01\x02\x03", "~c.yaml")
config_case("missing", None, "missing.yaml: cannot read", ("missing.yaml",))
config_case("directory", None, "~d", ("d",))
CASES[-1].files["d"] = DIR
config_case("default-missing", None, "config.yaml: cannot read", ())
config_case("dev-zero", None, "/dev/zero: larger than", ("/dev/zero",), process=True)
config_case("two-files", CONFIG_TEXT, "unrecognized arguments", ("c.yaml", "c.yaml"), code=2)
config_case("unknown-flag", CONFIG_TEXT, "unrecognized arguments: --strict", ("--strict", "c.yaml"), code=2)
config_case("duplicate-key", CONFIG_TEXT + "\nscenario:\n  docs: 3\n  tokens: 10\n", "~scenario")
# cross-field rules
config_case(
    "sweep-varies-fixed",
    config_yaml(setting(["sweeps", "cliff", "fixed", "gpu"], 1)),
    "~sweeps.cliff varies 'gpu' and also fixes it",
)
config_case(
    "record-pass-3",
    config_yaml(setting(["sweeps", "cliff", "record", "pass"], 3)),
    "~sweeps.cliff.record.pass is 3 but sweeps.cliff.passes has only 2",
)
config_case(
    "run-named-like-sweep",
    config_yaml(lambda c: c["runs"].update(cliff=c["runs"]["cyclic"])),
    "~artifact name 'cliff' is used twice",
)
config_case(
    "policies-gpu-sweep",
    config_yaml(setting(["policies", "cpu_cliff", "sweep"], "cliff")),
    "~policies.cpu_cliff.sweep must name a sweep that varies cpu",
)
config_case("arc-keep", config_yaml(lambda c: c["replay"].update(gpu_eviction="arc", partial_blocks="keep")), "~arc")
config_case(
    "touch-write-back",
    config_yaml(lambda c: c["replay"].update(write_policy="write-back", touch_cpu_on_gpu_hit=True)),
    "~touch",
)
config_case(
    "policies-opt-keep",
    config_yaml(setting(["replay", "partial_blocks"], "keep")),
    "~policies.evictions has arc, opt, which need partial_blocks drop",
)
config_case(
    "tables-unknown-workload",
    config_yaml(setting(["policies", "tables", "workloads"], ["lab", "nope"])),
    "~policies.tables.workloads names 'nope'",
)
config_case("mrc-unknown-workload", config_yaml(setting(["mrc", "workloads"], ["nope"])), "~nope")
config_case("plan-unknown-workload", config_yaml(setting(["plans", "lab", "workload"], "nope")), "~nope")
config_case("ttft-unknown-sweep", config_yaml(setting(["ttft", "sweeps"], ["nope"])), "~nope")
config_case("plots-unknown-sweep", config_yaml(setting(["plots", "gpu_cliff"], "nope")), "~nope")
config_case(
    "plan-model-config-missing",
    config_yaml(setting(["plans", "lab", "model_config"], "models/none/config.json")),
    "~models/none/config.json",
)
config_case(
    "mooncake-block-16",
    config_yaml(lambda c: c["replay"]["workloads"].update(t={"source": "mooncake", "trace": "t.jsonl"})),
    "~must be multiples of 512",
)


# ----------------------------------------------------------------------------------------------------------
# The checker


class Hang(BaseException):
    """Raised by the alarm in a case that runs too long (a BaseException: no `except Exception` swallows it)."""


class DeviceClobber(BaseException):
    """kvlab tried to rename a file over a device node (it would have replaced /dev/full)."""


def make_files(tmp, files):
    for name, content in files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is DIR:
            path.mkdir(exist_ok=True)
        elif callable(content):
            content(tmp)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_bytes(content.encode())


def snapshot(tmp):
    """Every entry under ``tmp`` (links not followed): a file's bytes, a folder, a link's target."""
    found = {}
    for folder, folders, files in os.walk(tmp):
        for entry in folders + files:
            path = Path(folder) / entry
            name = str(path.relative_to(tmp))
            if path.is_symlink():
                found[name] = ("link", os.readlink(path))
            elif path.is_dir():
                found[name] = "dir"
            else:
                found[name] = path.read_bytes()
    return found


def dev_temporaries():
    return {entry for entry in os.listdir("/dev") if entry.startswith((".kvlab-", ".summarize-"))}


def guarded_replace(real):
    """os.replace that refuses to rename over a device node (as root, kvlab would replace /dev/full)."""

    def replace(source, target, *args, **kwargs):
        try:
            mode = os.stat(target).st_mode
        except OSError:
            mode = 0
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            raise DeviceClobber(f"kvlab renamed a file over the device {target} (it would replace it)")
        return real(source, target, *args, **kwargs)

    return replace


def run_in_process(argv, tmp, monkeypatch):
    monkeypatch.setattr(os, "replace", guarded_replace(os.replace))

    def alarm(signum, frame):
        raise Hang(f"kvlab {' '.join(argv)[:200]} ran longer than {TIME_LIMIT} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
    try:
        return kvlab(*argv, cwd=tmp)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))


def run_process(argv, tmp, **kwargs):
    """``python -m kvlab ARGV`` in ``tmp`` under a 3 GiB memory limit and the time limit."""
    env = {**os.environ, "PYTHONPATH": R}
    options = {"capture_output": True, **kwargs}
    try:
        return subprocess.run(
            [sys.executable, "-m", "kvlab", *argv],
            cwd=tmp,
            text=True,
            env=env,
            timeout=TIME_LIMIT,
            preexec_fn=options.pop("preexec_fn", limit_memory),
            **options,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"kvlab {' '.join(argv)[:200]} ran longer than {TIME_LIMIT} s (a hang)")


def substitute(args, tmp):
    return [arg.replace("{R}", R).replace("{T}", str(tmp)) for arg in args]


def repository_inputs(argv):
    """The repository's regular files a case names, with their bytes."""
    found = {}
    for arg in argv:
        if arg.startswith(R) and os.path.isfile(arg):
            found[arg] = Path(arg).read_bytes()
    return found


def check(case, tmp, monkeypatch):
    make_files(tmp, case.files)
    argv = substitute(case.args, tmp)
    before = snapshot(tmp)
    inputs = repository_inputs(argv)
    devices = dev_temporaries()
    start = time.monotonic()
    try:
        result = run_process(argv, tmp) if case.process else run_in_process(argv, tmp, monkeypatch)
    except DeviceClobber as error:
        for leftover in dev_temporaries() - devices:
            os.unlink(os.path.join("/dev", leftover))
        pytest.fail(str(error))
    elapsed = time.monotonic() - start
    leftovers = dev_temporaries() - devices
    for leftover in leftovers:
        os.unlink(os.path.join("/dev", leftover))
    prefix = f"kvlab {case.command}: error: "
    shown = (
        f"kvlab {' '.join(argv)[:300]}\nexit {result.returncode}\n"
        f"stderr: {result.stderr[:1500]!r}\nstdout: {result.stdout[:300]!r}"
    )
    assert "Traceback" not in result.stderr + result.stdout, shown
    assert elapsed < TIME_LIMIT, f"took {elapsed:.1f} s\n{shown}"
    assert result.returncode == case.code, shown
    assert result.stdout == "", shown
    assert result.stderr.endswith("\n") and result.stderr.count("\n") == 1, f"not one line\n{shown}"
    assert result.stderr.startswith(prefix), shown
    message = result.stderr[len(prefix) : -1]
    if case.message.startswith("~"):
        assert case.message[1:] in message, shown
    else:
        assert message.startswith(case.message), shown
    assert not leftovers, f"temporary files left in /dev: {leftovers}\n{shown}"
    after = snapshot(tmp)
    assert sorted(after) == sorted(before), f"files appeared or vanished: {sorted(set(after) ^ set(before))}\n{shown}"
    changed = [name for name in before if before[name] != after[name]]
    assert not changed, f"files changed: {changed}\n{shown}"
    for path, data in inputs.items():
        assert Path(path).read_bytes() == data, f"{path} changed\n{shown}"


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input(case, tmp_path, monkeypatch):
    check(case, tmp_path, monkeypatch)


def counts():
    """Cases per command (subcommands apart)."""
    found = {}
    for case in CASES:
        found[case.command] = found.get(case.command, 0) + 1
    return found


COMMAND_NAMES = ("scenario", "summarize", "replay", "mrc", "plan", "policies", "ttft", "plots", "collect")
COMMAND_NAMES += ("replay-table", "example-measurement", "config", "size", "measure")


def test_the_table_covers_every_command():
    found = counts()
    assert len(CASES) >= 320
    assert len({case.id for case in CASES}) == len(CASES), "case ids repeat"
    for name in COMMAND_NAMES:
        assert sum(n for command, n in found.items() if command.split()[0] == name) >= 20, name
    for sub in ("policies cliff", "policies table", "ttft fit", "ttft sweep", "ttft budgets"):
        assert found[sub] >= 20, sub
    for sub in ("ttft predict", "ttft breakeven"):  # TTFT from the hardware
        assert found[sub] >= 20, sub
    assert found["ttft systems"] >= 2


# ----------------------------------------------------------------------------------------------------------
# Standard output closed or full: exit 1 and one line (a broken pipe, the reader gone, is quiet)


def close_stdout():
    limit_memory()
    os.close(1)


STDOUT_COMMANDS = {
    "scenario": ["scenario", "--docs", "2", "--tokens", "10"],
    "replay": ["replay", *REPLAY],
    "mrc": ["mrc", *MRC],
    "plan": [
        "plan",
        "--workload",
        "lab",
        "--docs",
        "2",
        "--tokens",
        "10",
        "--model-config",
        f"{R}/models/Qwen2.5-1.5B-Instruct/config.json",
        "--gpu-tokens",
        "100",
    ],
    "ttft systems": ["ttft", "systems"],
}


@pytest.mark.parametrize("how", ["closed", "full"])
@pytest.mark.parametrize("name", list(STDOUT_COMMANDS))
def test_stdout_closed_or_full_exits_1_with_one_line(name, how, tmp_path):
    argv = STDOUT_COMMANDS[name]
    if how == "closed":
        result = run_process(argv, tmp_path, capture_output=False, stderr=subprocess.PIPE, preexec_fn=close_stdout)
    else:
        with open("/dev/full", "w") as full:
            result = run_process(argv, tmp_path, capture_output=False, stdout=full, stderr=subprocess.PIPE)
    reason = "it is closed" if how == "closed" else "No space left on device"
    assert result.returncode == 1, result.stderr
    assert result.stderr == f"kvlab {name}: error: standard output: cannot write: {reason}\n", result.stderr
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------------------------
# GOOD inputs at the limits still pass


def ok(result):
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    return result


def test_plan_takes_a_tebibyte_of_cpu():
    result = ok(
        kvlab(
            "plan",
            *PLAN[:6],
            "--model-config",
            f"{R}/models/Qwen2.5-1.5B-Instruct/config.json",
            "--gpu-tokens",
            "100",
            "--cpu-gib",
            "1024",
        )
    )
    assert json.loads(result.stdout)


def test_plan_takes_the_largest_gib_amounts(tmp_path):
    config = f"{R}/models/Qwen2.5-1.5B-Instruct/config.json"
    ok(kvlab("plan", *PLAN[:6], "--model-config", config, "--gpu-gib", "0." + "0" * 17 + "1", "--cpu-gib", str(2**40)))


def test_replay_takes_a_gpu_room_of_2_53_tokens():
    result = ok(kvlab("replay", *edit(REPLAY, {"--gpu-tokens": MAXW})))
    assert json.loads(result.stdout)["cache"]["gpu_tokens"] == 2**53


def test_negative_zero_is_zero():
    for command, base, flag in [("scenario", SCEN, "--gpu"), ("replay", REPLAY, "--cpu-tokens")]:
        zero = ok(kvlab(command, *base, flag, "0"))
        assert ok(kvlab(command, *base, flag, "-0")).stdout == zero.stdout


def test_replay_reads_a_gzipped_trace_and_standard_input(tmp_path):
    (tmp_path / "t.jsonl").write_text(GOOD_TRACE)
    (tmp_path / "t.jsonl.gz").write_bytes(gzip.compress(GOOD_TRACE.encode()))
    plain = json.loads(ok(kvlab(*("replay", *MOON), cwd=tmp_path)).stdout)
    packed = json.loads(ok(kvlab(*("replay", *edit(MOON, {"--trace": "t.jsonl.gz"})), cwd=tmp_path)).stdout)
    piped = run_process(["replay", *edit(MOON, {"--trace": "-"})], tmp_path, input=GOOD_TRACE)
    ok(piped)
    piped = json.loads(piped.stdout)
    for document in (packed, piped):
        assert {k: v for k, v in document.items() if k != "workload"} == {
            k: v for k, v in plain.items() if k != "workload"
        }


def test_config_yaml_of_the_repository_is_good():
    ok(kvlab("config", f"{R}/config.yaml"))


OUTPUT_COMMANDS = {
    "collect": (["collect", *COLLECT], COLLECT_FILES, ["out.json"]),
    "policies cliff": (["policies", "cliff", *CLIFF], {}, ["out.json"]),
    "example-measurement": (["example-measurement", *EX], {}, ["out.jsonl"]),
    "summarize": (["summarize", "in.jsonl", "out.json"], MEAS_OK, ["out.json"]),
    "summarize, replacing": (["summarize", "in.jsonl", "out.json"], {**MEAS_OK, "out.json": OLD}, ["out.json"]),
    "ttft fit": (["ttft", "fit", *FIT], {"m.jsonl": MEASUREMENT}, ["model.json", "table.csv"]),
    "ttft sweep": (["ttft", "sweep", *SWEEP], {"model.json": TTFT_MODEL}, ["out.csv"]),
    "replay-table": (["replay-table", *RT], {"p.json": REPLAY_POINT}, ["t.csv"]),
    "replay --per-request": (["replay", *REPLAY, "--per-request", "r.csv"], {}, ["r.csv"]),
    "ttft predict --per-request": (["ttft", "predict", *PREDICT, "--per-request", "r.csv"], PREDICT_FILES, ["r.csv"]),
    "ttft budgets": (["ttft", "budgets", *BUDGETS], BUDGETS_FILES, ["out.csv"]),
}


@pytest.mark.parametrize("name", list(OUTPUT_COMMANDS))
def test_outputs_get_the_umask_mode(name, tmp_path):
    """A new output gets the umask's mode; one that replaces a file keeps that file's mode, as a shell's ``>`` does
    (a private file, 0600 here, stays private)."""
    argv, files, outputs = OUTPUT_COMMANDS[name]
    make_files(tmp_path, files)
    replaced = [output for output in outputs if output in files]
    for output in replaced:
        (tmp_path / output).chmod(0o600)
    previous = os.umask(0o027)
    try:
        result = kvlab(*argv, cwd=tmp_path)
    finally:
        os.umask(previous)
    assert result.returncode == 0, result.stderr
    for output in outputs:
        assert (tmp_path / output).read_text() != OLD, output
        assert stat.S_IMODE((tmp_path / output).stat().st_mode) == (0o600 if output in replaced else 0o640), output
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".kvlab-")]


if __name__ == "__main__":
    table = counts()
    for command, number in table.items():
        print(f"{command:22} {number}")
    print(f"{'total':22} {len(CASES)}")
