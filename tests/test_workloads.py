"""Tests for kvlab/workloads/__init__.py: the lab, long_doc_qa and Mooncake sources of the block-level replay.

Expected orders and keys come from independent models written here: the lab's passes from the
settings, long_doc_qa's query round from LMCache's ``repeat_prompts`` (global ``random``, as the
benchmark calls it), and the Mooncake grouping of 512-token hash IDs into larger blocks.
"""

import gzip
import hashlib
import json
import math
import random

import pytest
import yaml
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab.util.settings import flag
from kvlab.workloads import WORKLOADS, TraceWorkload, Workload, WorkloadError, repeat_documents
from kvlab.workloads.traces import FORMATS, MOONCAKE, TraceError, read

Lab = WORKLOADS["lab"]
LongDocQA = WORKLOADS["long_doc_qa"]
Mooncake = WORKLOADS["mooncake"]
TRACES = ROOT / "data" / "traces" / "mooncake"
MODES = ("tile", "interleave", "random")
TMP_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def check_one_line_error(excinfo, *needles):
    """The error is the whole explanation on one line and names what the user must fix."""
    message = str(excinfo.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)
    return message


def check_documents(requests, block_tokens, tokens):
    """Each document is ceil(T/B) keys, the same list every time it is read, disjoint from the others."""
    chains = {}
    for request in requests:
        assert len(request.keys) == math.ceil(tokens / block_tokens)
        assert request.tokens == tokens
        assert chains.setdefault(request.label, request.keys) == request.keys
    seen = set()
    for keys in chains.values():
        assert len(set(keys)) == len(keys)
        assert seen.isdisjoint(keys)
        seen.update(keys)


# --------------------------------------------------------------------------------------------------------------
# lab: docs documents of tokens tokens, read pass after pass forward or in reverse.
# --------------------------------------------------------------------------------------------------------------


@given(
    docs=st.integers(0, 12),
    tokens=st.integers(1, 5000),
    block=st.integers(1, 1024),
    passes=st.lists(st.sampled_from(("fwd", "rev")), min_size=1, max_size=5),
)
def test_lab_requests_follow_the_passes(docs, tokens, block, passes):
    """Every pass reads all documents in its order; round indexes the pass; the chains obey the block model."""
    workload = Lab(block_tokens=block, docs=docs, tokens=tokens, passes=",".join(passes))
    requests = list(workload.requests())
    assert workload.rounds == [f"pass{n}" for n in range(1, len(passes) + 1)]
    expected = [
        (r, doc) for r, order in enumerate(passes) for doc in (range(docs) if order == "fwd" else reversed(range(docs)))
    ]
    assert [(request.round, request.label) for request in requests] == expected
    assert len(workload) == len(requests)
    check_documents(requests, block, tokens)


def test_lab_defaults():
    """The lab's defaults are the scenario of the course: 10 documents of 5011 tokens, fwd,fwd,rev, 256-token blocks."""
    workload = Lab()
    assert (workload.docs, workload.tokens, workload.passes, workload.block_tokens) == (
        10,
        5011,
        ["fwd", "fwd", "rev"],
        256,
    )
    assert workload.describe() == {"source": "lab", "docs": 10, "tokens": 5011, "passes": ["fwd", "fwd", "rev"]}
    assert len(list(workload.requests())) == len(workload) == 30


@pytest.mark.parametrize(
    ("setting", "needle"),
    [
        ({"tokens": 0}, "--tokens"),
        ({"tokens": "many"}, "--tokens"),
        ({"docs": -1}, "--docs"),
        ({"passes": "fwd,bwd"}, "--passes"),
        ({"passes": ""}, "--passes"),
        ({"passes": "fwd,,rev"}, "--passes"),
        ({"block_tokens": 0}, "--block-tokens"),
        ({"block_tokens": -256}, "--block-tokens"),
        ({"block_tokens": 1.5}, "--block-tokens"),
        ({"docs": 2.9}, "--docs"),
        ({"docs": True}, "--docs"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_lab_bad_settings(setting, needle):
    """A bad setting is refused when the workload is made, naming the flag (or the unknown name) to fix."""
    with pytest.raises(WorkloadError) as excinfo:
        Lab(**setting)
    check_one_line_error(excinfo, needle)


# --------------------------------------------------------------------------------------------------------------
# long_doc_qa: LMCache's benchmarks/long_doc_qa, a warm-up round and the repeat_prompts query round.
# --------------------------------------------------------------------------------------------------------------


def benchmark_repeat_prompts(prompts, count, mode, seed):
    """LMCache's repeat_prompts, as the benchmark runs it: the global random module, seeded, then shuffled."""
    if mode == "tile":
        return list(prompts) * count
    if mode == "interleave":
        return [prompt for prompt in prompts for _ in range(count)]
    state = random.getstate()
    try:
        random.seed(seed)
        repeated = list(prompts) * count
        random.shuffle(repeated)
        return repeated
    finally:
        random.setstate(state)


@given(
    documents=st.lists(st.integers(-50, 50), max_size=25),
    count=st.integers(0, 4),
    mode=st.sampled_from(MODES),
    seed=st.integers(-(2**70), 2**70),
)
def test_repeat_documents_matches_the_benchmark(documents, count, mode, seed):
    """The query order is exactly the benchmark's for every mode and seed, and the input is left as it was."""
    original = list(documents)
    assert repeat_documents(documents, count, mode, seed) == benchmark_repeat_prompts(original, count, mode, seed)
    assert documents == original


def test_repeat_documents_bad_mode():
    """An unknown mode names the flag and the valid choices."""
    with pytest.raises(WorkloadError) as excinfo:
        repeat_documents(range(3), 2, "shuffle", 0)
    check_one_line_error(excinfo, "--repeat-mode", "tile", "interleave", "random")


@given(
    documents=st.integers(0, 10),
    length=st.integers(1, 30000),
    block=st.integers(1, 2048),
    count=st.integers(0, 3),
    mode=st.sampled_from(MODES),
    seed=st.integers(0, 2**32),
)
def test_long_doc_qa_rounds(documents, length, block, count, mode, seed):
    """Warm-up reads every document once in order; the query round is the benchmark's order."""
    workload = LongDocQA(
        block_tokens=block,
        num_documents=documents,
        document_length=length,
        repeat_count=count,
        repeat_mode=mode,
        shuffle_seed=seed,
    )
    requests = list(workload.requests())
    assert workload.rounds == ["warmup", "query"]
    assert {request.round for request in requests} <= {0, 1}
    assert [r.label for r in requests if r.round == 0] == list(range(documents))
    query = benchmark_repeat_prompts(range(documents), count, mode, seed)
    assert [r.label for r in requests if r.round == 1] == query
    assert [r.round for r in requests] == [0] * documents + [1] * len(query)
    assert len(workload) == len(requests)
    check_documents(requests, block, length)


def test_long_doc_qa_defaults_are_the_benchmarks():
    """Without settings the workload is the benchmark's default run (8 x 20000 tokens, twice, random, seed 0)."""
    workload = LongDocQA()
    expected = {
        "num_documents": 8,
        "document_length": 20000,
        "repeat_count": 2,
        "repeat_mode": "random",
        "shuffle_seed": 0,
    }
    assert workload.describe() == {"source": "long_doc_qa", **expected}
    query = [r.label for r in workload.requests() if r.round == 1]
    assert query == benchmark_repeat_prompts(range(8), 2, "random", 0)


@pytest.mark.parametrize(
    ("setting", "needle"),
    [({"repeat_mode": "shuffle"}, "--repeat-mode"), ({"document_length": 0}, "--document-length")],
)
def test_long_doc_qa_bad_settings(setting, needle):
    """A bad setting is refused at construction with the flag to fix."""
    with pytest.raises(WorkloadError) as excinfo:
        LongDocQA(**setting)
    check_one_line_error(excinfo, needle)


# --------------------------------------------------------------------------------------------------------------
# Limits: whole numbers up to 2**53, generated workloads up to 10**8 block accesses (checked when made, before a
# single request is generated).
# --------------------------------------------------------------------------------------------------------------


def test_a_generated_workload_of_exactly_the_limit_is_made():
    """10**8 block accesses is allowed (the workload is made, not replayed here)."""
    workload = Lab(block_tokens=256, docs=10**8 // 2, tokens=256, passes="fwd,fwd")
    assert len(workload) == 10**8


@pytest.mark.parametrize(
    ("source", "setting", "needles"),
    [
        ("lab", {"docs": 10**8 // 2 + 1, "tokens": 256, "passes": "fwd,fwd"}, ["100000002", "at most 100000000"]),
        ("lab", {"docs": 10**8 + 1, "tokens": 1, "passes": "fwd"}, ["at most 100000000"]),
        ("lab", {"docs": 1, "tokens": 2**53, "passes": "fwd"}, ["at most 100000000"]),
        ("lab", {"tokens": 2**53 + 1}, ["--tokens", f"<= {2**53}"]),
        ("lab", {"docs": str(2**53 + 1)}, ["--docs", f"<= {2**53}"]),
        ("lab", {"block_tokens": 2**53 + 1}, ["--block-tokens", f"<= {2**53}"]),
        ("long_doc_qa", {"num_documents": 1, "document_length": 256 * 10**8}, ["300000000", "at most 100000000"]),
        ("long_doc_qa", {"num_documents": 10**8 + 1, "document_length": 1, "repeat_count": 0}, ["at most 100000000"]),
        ("long_doc_qa", {"shuffle_seed": 2**53 + 1}, ["--shuffle-seed", str(2**53)]),
        ("long_doc_qa", {"shuffle_seed": -(2**53) - 1}, ["--shuffle-seed", str(2**53)]),
    ],
    ids=repr,
)
def test_limits(source, setting, needles):
    """A setting beyond its limit is refused at construction, in one line naming the limit."""
    with pytest.raises(WorkloadError) as excinfo:
        WORKLOADS[source](**setting)
    check_one_line_error(excinfo, *needles)


@pytest.mark.parametrize("seed", [2**53, -(2**53)])
def test_a_seed_at_the_limit_is_allowed(seed):
    assert LongDocQA(num_documents=3, document_length=10, shuffle_seed=seed).shuffle_seed == seed


# --------------------------------------------------------------------------------------------------------------
# mooncake: JSONL traces of 512-token hash IDs, streamed line by line.
# --------------------------------------------------------------------------------------------------------------


def trace_line(timestamp=0, tokens=1000, ids=None, output=10, **changes):
    """One well-formed trace record (hash_ids fitting input_length unless given), as a dict."""
    ids = list(range(math.ceil(tokens / 512))) if ids is None else ids
    return {"timestamp": timestamp, "input_length": tokens, "output_length": output, "hash_ids": ids, **changes}


def write_trace(path, lines, trailing=True):
    """Write lines (dicts, str or bytes) one per line; returns the path."""
    chunks = [json.dumps(x).encode() if isinstance(x, dict) else x.encode() if isinstance(x, str) else x for x in lines]
    path.write_bytes(b"\n".join(chunks) + (b"\n" if trailing else b""))
    return path


def grouped_keys(ids, k):
    """Independent model: the block of k 512-token ids ending at id j is keyed by id j (the last may be short)."""
    return [ids[min(start + k, len(ids)) - 1] for start in range(0, len(ids), k)]


records = st.builds(
    lambda ts, tokens, base, out: trace_line(ts, tokens, list(range(base, base + math.ceil(tokens / 512))), out),
    st.one_of(st.integers(0, 10**9), st.floats(0, 1e9)),
    st.integers(0, 8000),
    st.integers(0, 10**6),
    st.integers(0, 4000),
)
blank = st.sampled_from(["", "   ", "\t", " \r"])
trace_lines = st.lists(st.one_of(records, records, blank), max_size=15)


@TMP_SETTINGS
@given(lines=trace_lines, k=st.integers(1, 4))
def test_mooncake_reads_the_trace_in_order(tmp_path, lines, k):
    """Requests follow the file (blank lines skipped); keys are hash_ids grouped k at a time as the model says."""
    path = write_trace(tmp_path / "trace.jsonl", lines)
    workload = Mooncake(trace=str(path), block_tokens=512 * k)
    got = [(r.round, r.label, r.keys, r.tokens) for r in workload.requests()]
    wanted = [
        (0, x["timestamp"], grouped_keys(x["hash_ids"], k), x["input_length"]) for x in lines if isinstance(x, dict)
    ]
    assert got == wanted


@given(ids=st.lists(st.integers(0, 10**12), max_size=40), k=st.integers(1, 6))
def test_grouped_keys_model(ids, k):
    """The reference itself: one key per k ids, each the last id of its group, so ceil(n/k) keys."""
    keys = grouped_keys(ids, k)
    assert len(keys) == math.ceil(len(ids) / k)
    assert keys == ids[k - 1 :: k] + ([ids[-1]] if len(ids) % k else [])


def test_mooncake_defaults_and_describe(tmp_path):
    """The default block is the trace's 512 tokens; describe shows the trace's file name, never its folder."""
    path = write_trace(tmp_path / "some.jsonl", [trace_line(5, 1500, [7, 8, 9])])
    workload = Mooncake(trace=str(path))
    assert workload.block_tokens == 512
    assert workload.rounds == ["trace"]
    assert workload.describe() == {"source": "mooncake", "trace": "some.jsonl"}
    assert str(tmp_path) not in json.dumps(workload.describe())
    assert list(workload.requests()) == [(0, 5, [7, 8, 9], 1500)]


def test_mooncake_streams(tmp_path):
    """The reader yields a batch before it has read the rest of the file (a bad later line is not seen yet)."""
    path = write_trace(tmp_path / "t.jsonl", [trace_line(1), trace_line(2), "{oops"])
    batches = read(str(path), MOONCAKE, size=len(trace_line(1)) + 1)
    assert next(batches).labels.tolist() == [1]
    assert next(batches).labels.tolist() == [2]
    with pytest.raises(TraceError, match=":3: malformed JSON"):
        next(batches)


@pytest.mark.parametrize("block", [384, 513, 768, 1000, 1280])
def test_mooncake_block_must_be_a_multiple_or_divisor_of_512(tmp_path, block):
    """A block that neither groups nor divides the trace's 512-token blocks is refused at construction, naming
    --block-tokens."""
    with pytest.raises(WorkloadError) as excinfo:
        Mooncake(trace=str(tmp_path / "never-read.jsonl"), block_tokens=block)
    check_one_line_error(excinfo, "--block-tokens", str(block))


def test_mooncake_needs_a_trace():
    """Without a trace there is nothing to replay: the error names --trace."""
    with pytest.raises(WorkloadError) as excinfo:
        Mooncake()
    check_one_line_error(excinfo, "--trace")


def test_mooncake_missing_file(tmp_path):
    """A file that cannot be opened is a WorkloadError naming the file, not an OSError."""
    path = tmp_path / "absent.jsonl"
    with pytest.raises(WorkloadError) as excinfo:
        list(Mooncake(trace=str(path)).requests())
    check_one_line_error(excinfo, str(path), "cannot read")


def line_without(field):
    return json.dumps({k: v for k, v in trace_line().items() if k != field})


GOOD = json.dumps(trace_line())
BAD_LINES = {
    "malformed JSON": '{"timestamp": 0, "input_length": 10',
    "truncated last line": GOOD[: len(GOOD) // 2],
    "a list": "[1, 2, 3]",
    "a number": "42",
    "a string": '"hello"',
    "null": "null",
    "no timestamp": line_without("timestamp"),
    "no input_length": line_without("input_length"),
    "no output_length": line_without("output_length"),
    "no hash_ids": line_without("hash_ids"),
    "timestamp string": json.dumps(trace_line(timestamp="0")),
    "timestamp negative": json.dumps(trace_line(timestamp=-1)),
    "timestamp NaN": GOOD.replace('"timestamp": 0', '"timestamp": NaN'),
    "timestamp Infinity": GOOD.replace('"timestamp": 0', '"timestamp": Infinity'),
    "timestamp bool": json.dumps(trace_line(timestamp=True)),
    "input_length negative": json.dumps(trace_line(tokens=-1, ids=[])),
    "input_length float": json.dumps(trace_line(tokens=1000.0, ids=[0, 1])),
    "input_length bool": json.dumps(trace_line(tokens=True, ids=[0])),
    "output_length string": json.dumps(trace_line(output="10")),
    "output_length negative": json.dumps(trace_line(output=-5)),
    "input_length beyond 2**53": json.dumps(trace_line(tokens=2**53 + 1, ids=[0])),
    "output_length beyond 2**53": json.dumps(trace_line(output=2**53 + 1)),
    "hash_ids not a list": json.dumps(trace_line(tokens=1, ids=7)),
    "hash_ids with a string": json.dumps(trace_line(tokens=1000, ids=[0, "1"])),
    "hash_ids with a float": json.dumps(trace_line(tokens=1000, ids=[0, 1.0])),
    "hash_ids with a bool": json.dumps(trace_line(tokens=1000, ids=[0, True])),
    "too many hash_ids": json.dumps(trace_line(tokens=1024, ids=[0, 1, 2])),
    "too few hash_ids": json.dumps(trace_line(tokens=1025, ids=[0, 1])),
    "hash_ids for zero tokens": json.dumps(trace_line(tokens=0, ids=[0])),
    "invalid UTF-8": GOOD.encode()[:-1] + b', "note": "\xff\xfe"}',
    "UTF-16 with a byte-order mark": "{}".encode("utf-16"),
    "timestamp beyond the float range": GOOD.replace('"timestamp": 0', '"timestamp": 1' + "0" * 400),
    "nested too deeply": "[" * 100000 + "]" * 100000,
}


@pytest.mark.parametrize("before", [[GOOD, ""], [GOOD, GOOD]], ids=["blank", "two-good"])
@pytest.mark.parametrize("bad", list(BAD_LINES.values()), ids=list(BAD_LINES))
def test_mooncake_bad_line(tmp_path, before, bad):
    """A bad line stops the replay with one line starting 'file:line: ', counting blank lines too."""
    truncated = bad == BAD_LINES["truncated last line"]
    path = write_trace(tmp_path / "bad.jsonl", [*before, bad], trailing=not truncated)
    workload = Mooncake(trace=str(path))
    with pytest.raises(WorkloadError) as excinfo:
        list(workload.requests())
    message = check_one_line_error(excinfo)
    assert message.startswith(f"{path}:3: ")
    assert len(message) > len(f"{path}:3: ")


@pytest.mark.parametrize(
    ("name", "requests", "keys", "distinct"),
    [("conversation_trace.jsonl.gz", 12031, 288500, 182790), ("synthetic_trace.jsonl.gz", 3993, 121877, 43924)],
)
def test_published_mooncake_traces(name, requests, keys, distinct):
    """The reader sees the shipped traces (read compressed) as their published statistics and checksums say."""
    path = TRACES / name
    published = (TRACES / "README.md").read_text(encoding="utf-8")
    digest = hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest()
    assert f"| {name} | {requests:,} | {keys:,} | {distinct:,} | {digest} |" in published
    count = total = 0
    seen = set()
    for request in Mooncake(trace=str(path)).requests():
        count += 1
        total += len(request.keys)
        seen.update(request.keys)
    assert (count, total, len(seen)) == (requests, keys, distinct)


# --------------------------------------------------------------------------------------------------------------
# The registry the replay CLI builds its flags from.
# --------------------------------------------------------------------------------------------------------------


def test_registry_maps_names_to_classes():
    """Each source is registered under its own name and is a Workload with rounds and a label name."""
    assert set(WORKLOADS) == {
        "lab",
        "long_doc_qa",
        "mooncake",
        "bailian",
        "requests",
        "bench_multiturn",
        "multi_round_qa",
    }
    for name, source in WORKLOADS.items():
        assert issubclass(source, Workload)
        assert source.name == name
        assert source.label_name


def test_option_names_are_unique_and_flags_follow_them():
    """The replay CLI merges all sources' options into one parser: names must not clash (sources may share an
    option, as the traces share --trace), flags are derived."""
    options = list({id(option): option for source in WORKLOADS.values() for option in source.options}.values())
    names = [option.name for option in options]
    assert len(names) == len(set(names))
    assert "block_tokens" not in names
    for option in options:
        assert flag(option.name) == "--" + option.name.replace("_", "-")
        assert option.metadata["help"]
        assert not option.metadata["choices"] or option.default in option.metadata["choices"]


def test_the_config_schema_knows_every_source_and_which_read_a_trace():
    """config.yaml's schema lists the sources of the registry, and needs ``trace`` exactly for the trace formats."""
    schema = yaml.safe_load((ROOT / "schemas" / "config.schema.yaml").read_text(encoding="utf-8"))
    workload = schema["$defs"]["replay_workload"]
    assert workload["properties"]["source"]["enum"] == list(WORKLOADS)
    traced = [rule for rule in workload["allOf"] if "trace" in rule.get("then", {}).get("required", [])]
    readers = [name for name, source in WORKLOADS.items() if issubclass(source, TraceWorkload)]
    assert [rule["if"]["properties"]["source"]["enum"] for rule in traced] == [readers]
    assert readers == [*FORMATS, "requests"]  # the trace formats, and the user's own


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3 * 512)), min_size=1, max_size=8),
    st.sampled_from([1, 2, 64, 128, 256]),
)
def test_mooncake_pieces_of_a_block_are_reused_only_behind_it(tmp_path_factory, shapes, block):
    """Blocks that divide the trace's 512 (as aisimulate cuts them into an engine's 64-token blocks): a request of
    ``n`` tokens has ``ceil(n / block)`` of them, and two requests share piece ``j`` exactly when they share the
    trace block it is cut from, at the same place: checked against a brute-force expansion of each line."""
    path = tmp_path_factory.mktemp("pieces") / "trace.jsonl"
    lines, expected = [], []
    for number, (chain, tokens) in enumerate(shapes):
        ids = [chain * 100 + index for index in range(-(-tokens // 512))]
        lines.append(json.dumps({"timestamp": number, "input_length": tokens, "output_length": 1, "hash_ids": ids}))
        expected.append([(ids[piece * block // 512], piece % (512 // block)) for piece in range(-(-tokens // block))])
    path.write_text("\n".join(lines) + "\n")
    served = list(Mooncake(trace=str(path), block_tokens=block).timed())
    assert [len(request.keys) for request in served] == [len(pieces) for pieces in expected]
    names = {}
    for request, pieces in zip(served, expected, strict=True):
        for key, piece in zip(request.keys, pieces, strict=True):
            assert names.setdefault(piece, key) == key  # one key per piece
    assert len(set(names.values())) == len(names)  # and one piece per key
    assert [request.arrival_s for request in served] == [number / 1000 for number in range(len(shapes))]
