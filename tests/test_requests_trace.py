"""The user's own trace (``--workload requests``, kvlab/workloads/requests.py): a prompt given as token ids, as
per-block hashes or as chained hashes replays the same, in JSONL or CSV; per-block hashes are never reused out of
their prefix; ``kvlab trace stats`` and ``convert`` agree with a reading of the file apart; the trace's request ids
reach ``--per-request``; a bad line is one ``file:line`` error."""

import csv
import gzip
import io
import itertools
import json

import pytest
from conftest import ROOT, kvlab
from hypothesis import given, settings
from hypothesis import strategies as st

TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"


@st.composite
def prompts(draw):
    """``(block, requests)``: prompts of token ids over a few documents (so that prefixes are shared, and the same
    block contents recur behind different prefixes), each with its timestamp, output length and id."""
    block = draw(st.sampled_from([1, 2, 4]))
    documents = draw(st.lists(st.lists(st.integers(0, 3), min_size=12, max_size=12), min_size=1, max_size=3))
    requests = []
    for number in range(draw(st.integers(1, 16))):
        tokens = list(draw(st.sampled_from(documents))[: draw(st.integers(1, 12))])
        if draw(st.booleans()):
            tokens[draw(st.integers(0, len(tokens) - 1))] = draw(st.integers(0, 3))
        requests.append({"request_id": f"r{number}", "timestamp": number, "output_length": 1, "tokens": tokens})
    return block, requests


def as_records(block, requests, how):
    """The requests as a trace's records: ``tokens`` (prompt_token_ids), ``per-block`` (a hash of each block's own
    tokens) or ``chained`` (an id per distinct prefix)."""
    own, prefixes, records = {}, {}, []
    for request in requests:
        tokens = request["tokens"]
        record = {key: request[key] for key in ("request_id", "timestamp", "output_length")}
        record["input_length"] = len(tokens)
        pieces = [tuple(tokens[start : start + block]) for start in range(0, len(tokens), block)]
        if how == "tokens":
            record["prompt_token_ids"] = tokens
        elif how == "per-block":
            record["hash_ids"] = [own.setdefault(piece, len(own) * 7 + 3) for piece in pieces]
        else:
            record["hash_ids"] = [
                prefixes.setdefault(tuple(pieces[: i + 1]), len(prefixes)) for i in range(len(pieces))
            ]
        records.append(record)
    return records


def write(path, records):
    if path.suffix == ".csv":
        columns = list(dict.fromkeys(itertools.chain.from_iterable(records)))
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(columns)
        for record in records:
            writer.writerow(
                [" ".join(map(str, value)) if isinstance(value, list) else value for value in record.values()]
            )
        path.write_text(buffer.getvalue(), encoding="utf-8")
    else:
        path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def replayed(path, block, how, *extra):
    flags = () if how == "tokens" else ("--hash-block-tokens", block, "--hash-chaining", how)
    table = path.with_suffix(".per-request.csv")
    done = kvlab(
        "replay", "--workload", "requests", "--trace", path, "--block-tokens", block, *flags,
        "--gpu-tokens", 6 * block, "--per-request", table, *extra,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    figures.pop("workload")
    return figures, table.read_text(encoding="utf-8")


@settings(max_examples=60, deadline=None)
@given(prompts(), st.sampled_from([".jsonl", ".csv"]))
def test_token_ids_per_block_hashes_and_chained_hashes_replay_alike(tmp_path_factory, workload, suffix):
    """The chained ids (one per distinct prefix) are the truth; token ids chained by kvlab, and per-block hashes
    (which recur behind other prefixes) chained by kvlab, give the same figures request by request."""
    block, requests = workload
    folder = tmp_path_factory.mktemp("trace")
    runs = {
        how: replayed(write(folder / f"{how}{suffix}", as_records(block, requests, how)), block, how)
        for how in ("chained", "per-block", "tokens")
    }
    assert runs["tokens"] == runs["per-block"] == runs["chained"]


def test_per_block_hashes_are_never_reused_out_of_their_prefix(tmp_path):
    """The issue's case: [2,3,4] after [1,2,3] and [9,2,3] hits nothing when the hashes are per block; read as
    chained (each a hash of its prefix) its blocks 2 and 3 would hit."""
    rows = [(0, [1, 2, 3]), (1, [9, 2, 3]), (2, [2, 3, 4])]
    records = [{"timestamp": t, "input_length": 48, "output_length": 1, "hash_ids": ids} for t, ids in rows]
    path = write(tmp_path / "t.jsonl", records)
    per_block, _ = replayed(path, 16, "per-block")
    chained, _ = replayed(path, 16, "chained")
    assert per_block["rounds"][0]["gpu_hit_tokens"] == 0
    assert chained["rounds"][0]["gpu_hit_tokens"] > 0


def test_the_traces_request_ids_reach_the_per_request_tables(tmp_path):
    records = as_records(2, [{"request_id": "a", "timestamp": 0, "output_length": 3, "tokens": [1, 2, 3]}], "tokens")
    records += [{"timestamp": 1, "input_length": 3, "output_length": 2, "prompt_token_ids": [1, 2, 4]}]
    path = write(tmp_path / "t.jsonl", records)
    _, table = replayed(path, 2, "tokens")
    assert [row["request_id"] for row in csv.DictReader(io.StringIO(table))] == ["a", ""]
    out = tmp_path / "sim.csv"
    model = ("--model-config", ROOT / "models/Llama-3.1-8B-Instruct/config.json", "--gpu-system", "h100_sxm")
    done = kvlab(
        "simulate", "--workload", "requests", "--trace", path, "--block-tokens", 2, *model, "--per-request", out
    )
    assert done.returncode == 0, done.stderr
    assert [row["request_id"] for row in csv.DictReader(out.open())] == ["a", ""]


def head(tmp_path, lines=300):
    path = tmp_path / "head.jsonl"
    with gzip.open(TRACE, "rt") as source:
        path.write_text("".join(itertools.islice(source, lines)))
    return path


def test_stats_are_what_a_reading_of_the_file_apart_gives():
    ids = [block for line in gzip.open(TRACE, "rt") for block in json.loads(line)["hash_ids"]]
    done = kvlab("trace", "stats", "--workload", "mooncake", "--trace", TRACE)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert (figures["block_accesses"], figures["distinct_blocks"]) == (len(ids), len(set(ids)))
    assert figures["reused_block_share"] == round(1 - len(set(ids)) / len(ids), 6)


@pytest.mark.parametrize("to", ["requests", "mooncake"])
def test_a_converted_trace_replays_as_the_original(tmp_path, to):
    original = head(tmp_path)
    converted = tmp_path / f"converted-{to}.jsonl"
    done = kvlab("trace", "convert", "--workload", "mooncake", "--trace", original, "--to", to, "--out", converted)
    assert done.returncode == 0, done.stderr
    flags = ("--workload", "mooncake") if to == "mooncake" else ("--workload", "requests", "--timestamp-unit", "s")
    flags += () if to == "mooncake" else ("--hash-block-tokens", 512, "--hash-chaining", "chained")
    runs = []
    for source, workload in ((original, ("--workload", "mooncake")), (converted, flags)):
        done = kvlab("replay", *workload, "--trace", source, "--block-tokens", 512, "--gpu-tokens", 200000)
        assert done.returncode == 0, done.stderr
        figures = json.loads(done.stdout)
        figures.pop("workload")
        runs.append(figures)
    assert runs[0] == runs[1]


BAD = {
    "token count": ('{"timestamp": 0, "input_length": 3, "output_length": 1, "prompt_token_ids": [1, 2]}', (), "2"),
    "undeclared hashes": ('{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1]}', (), "declared"),
    "hash count": (
        '{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [1]}',
        ("--hash-block-tokens", "16", "--hash-chaining", "chained"),
        "3 blocks of 16 tokens",
    ),
    "unknown field": ('{"timestamp": 0, "input_length": 1, "output_length": 1, "prompt": [1]}', (), "unknown field"),
    "both prompts": (
        '{"timestamp": 0, "input_length": 1, "output_length": 1, "prompt_token_ids": [1], "hash_ids": [1]}',
        (),
        "one of them",
    ),
    "negative timestamp": (
        '{"timestamp": -1, "input_length": 1, "output_length": 1, "prompt_token_ids": [1]}',
        (),
        "timestamp",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_line_is_one_error_naming_it(tmp_path, case):
    line, flags, needle = BAD[case]
    good = '{"timestamp": 0, "input_length": 1, "output_length": 1, "prompt_token_ids": [1]}'
    path = tmp_path / "t.jsonl"
    path.write_text(f"{good}\n{line}\n")
    done = kvlab("replay", "--workload", "requests", "--trace", path, "--gpu-tokens", 100, *flags)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and f"{path}:2: " in done.stderr and needle in done.stderr, done.stderr


def test_a_bad_csv_row_names_its_line_and_a_spreadsheets_byte_order_mark_is_taken(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbftimestamp,input_length,output_length,prompt_token_ids\n0,2,1,1 2\n1,2,1\n")
    done = kvlab("replay", "--workload", "requests", "--trace", path, "--gpu-tokens", 100)
    assert done.returncode == 1 and f"{path}:3: 3 cells, but the header names 4 columns" in done.stderr
    path.write_bytes(b"\xef\xbb\xbftimestamp,input_length,output_length,prompt_token_ids\n0,2,1,1 2\nsoon,2,1,1 2\n")
    done = kvlab("replay", "--workload", "requests", "--trace", path, "--gpu-tokens", 100)
    assert done.returncode == 1 and f"{path}:3: timestamp must be a number" in done.stderr, done.stderr
