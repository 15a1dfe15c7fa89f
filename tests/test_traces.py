"""The trace readers (kvlab/workloads/traces.py): the fast path (simdjson, a batch at a time) against the reference
reader (the standard library's json, a line at a time), on traces of both formats written in every way JSON allows,
and on every kind of bad line: the same requests, or the same one-line error naming the same line.
"""

import gzip
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.workloads import WORKLOADS
from kvlab.workloads.traces import BAILIAN, FORMATS, MOONCAKE, TraceError, read

ID = st.integers(-(2**63), 2**63 - 1) | st.integers(0, 50)


@st.composite
def records(draw, trace):
    """One valid request of ``trace``'s format, as a dict (its fields in a random order, maybe extra ones)."""
    tokens = draw(st.integers(0, 6 * trace.block_tokens))
    record = {
        "timestamp": draw(st.integers(0, 2**53) | st.floats(0, 2**53, allow_nan=False)),
        "input_length": tokens,
        "hash_ids": draw(
            st.lists(ID, min_size=-(-tokens // trace.block_tokens), max_size=-(-tokens // trace.block_tokens))
        ),
    }
    for field in trace.fields:
        if field.low is None:
            record[field.name] = draw(st.text(max_size=5))
        else:
            record[field.name] = draw(st.integers(field.low, field.high))
    if draw(st.integers(0, 9)) == 0:
        record["extra"] = draw(st.lists(st.integers(), max_size=2))  # a second '[': the slow path
    items = list(record.items())
    order = draw(st.permutations(range(len(items))))
    return dict(items[index] for index in order)


def line(record, spaced):
    return json.dumps(record, separators=(", ", ": ") if spaced else (",", ":"))


@st.composite
def trace_texts(draw, trace):
    """The text of a valid trace: its records, separated by newlines, maybe blank lines and CRLF."""
    lines = [line(record, draw(st.booleans())) for record in draw(st.lists(records(trace), max_size=12))]
    text = ""
    for raw in lines:
        text += raw + draw(st.sampled_from(["\n", "\r\n", "\n\n", " \n"]))
    return text


def reference(text, trace):
    """What the reference reader makes of the trace: labels, tokens, counts and ids."""
    labels, tokens, counts, ids = [], [], [], []
    for number, raw in enumerate(text.encode().split(b"\n"), 1):
        if not raw.strip():
            continue
        label, length, chain = trace.check(raw, f"t:{number}")
        labels.append(label)
        tokens.append(length)
        counts.append(len(chain))
        ids.extend(chain)
    return labels, tokens, counts, ids


def fast(path, trace, size):
    batches = list(read(str(path), trace, size=size))
    empty = np.zeros(0, dtype=np.int64)
    joined = [
        np.concatenate([empty, *(getattr(batch, name) for batch in batches)]) for name in ("labels", "tokens", "counts")
    ]
    return joined, np.concatenate([empty, *(batch.ids for batch in batches)])


@pytest.mark.parametrize("trace", [MOONCAKE, BAILIAN], ids=lambda trace: trace.name)
@settings(max_examples=150, deadline=None)
@given(data=st.data(), size=st.integers(1, 400))
def test_fast_reader_reads_what_the_reference_reads(trace, data, size, tmp_path_factory):
    text = data.draw(trace_texts(trace))
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    path.write_text(text, encoding="utf-8")
    (labels, tokens, counts), ids = fast(path, trace, size)
    expected = reference(text, trace)
    assert labels.tolist() == ([float(v) for v in expected[0]] if labels.dtype.kind == "f" else expected[0])
    assert labels.dtype.kind == ("i" if all(type(v) is int for v in expected[0]) else "f")
    assert tokens.tolist() == expected[1]
    assert counts.tolist() == expected[2]
    assert ids.tolist() == expected[3]


def corrupt(record, how):
    """A bad line made from a good record."""
    bad = dict(record)
    if how == "not-json":
        return line(record, False)[:-1]
    if how == "array":
        return "[1, 2]"
    if how == "missing":
        del bad["input_length"]
    elif how == "twice":
        return line(record, False)[:-1] + ', "input_length": 0}'
    elif how == "negative-timestamp":
        bad["timestamp"] = -1
    elif how == "timestamp-too-big":
        bad["timestamp"] = 2**53 + 1
    elif how == "timestamp-string":
        bad["timestamp"] = "0"
    elif how == "timestamp-bool":
        bad["timestamp"] = True
    elif how == "length-float":
        bad["input_length"] = float(record["input_length"])
    elif how == "length-too-big":
        bad["input_length"] = 2**64
    elif how == "count":
        bad["hash_ids"] = [*record["hash_ids"], 1]
    elif how == "id-float":
        bad["hash_ids"] = [1.0]
        bad["input_length"] = 1
    elif how == "id-too-big":
        bad["hash_ids"] = [2**63]
        bad["input_length"] = 1
    elif how == "id-nested":
        bad["hash_ids"] = [[1]]
        bad["input_length"] = 1
    elif how == "ids-not-a-list":
        bad["hash_ids"] = {"a": 1}
    elif how == "output-negative":
        bad["output_length"] = -1
    elif how == "nan":
        return line(record, True).replace('"input_length": ', '"input_length": NaN, "x": ', 1)
    return line(bad, False)


CORRUPTIONS = [
    "not-json",
    "array",
    "missing",
    "twice",
    "negative-timestamp",
    "timestamp-too-big",
    "timestamp-string",
    "timestamp-bool",
    "length-float",
    "length-too-big",
    "count",
    "id-float",
    "id-too-big",
    "id-nested",
    "ids-not-a-list",
    "output-negative",
    "nan",
]


@pytest.mark.parametrize("trace", [MOONCAKE, BAILIAN], ids=lambda trace: trace.name)
@settings(max_examples=200, deadline=None)
@given(data=st.data(), how=st.sampled_from(CORRUPTIONS), size=st.integers(1, 400))
def test_a_bad_line_gives_the_reference_message_for_the_first_bad_line(trace, data, how, size, tmp_path_factory):
    good = data.draw(st.lists(records(trace), min_size=1, max_size=8))
    lines = [line(record, True) for record in good]
    at = data.draw(st.integers(0, len(lines) - 1))
    lines[at] = corrupt(good[at], how)
    if data.draw(st.booleans()):  # a second bad line later: the first one is named
        lines.append(corrupt(good[0], "not-json"))
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        fast(path, trace, size)
    with pytest.raises(TraceError) as expected:
        trace.check(lines[at].encode(), f"{path}:{at + 1}")
    assert str(caught.value) == str(expected.value)
    assert "\n" not in str(caught.value)


def test_compressed_and_piped_traces_read_as_the_plain_file(tmp_path):
    text = "".join(
        json.dumps({"timestamp": n, "input_length": 1024, "output_length": 1, "hash_ids": [n, n + 1]}) + "\n"
        for n in range(50)
    )
    plain, packed = tmp_path / "t.jsonl", tmp_path / "t.jsonl.gz"
    plain.write_text(text, encoding="utf-8")
    packed.write_bytes(gzip.compress(text.encode()))
    expected = fast(plain, MOONCAKE, 64)
    for got in (fast(packed, MOONCAKE, 64),):
        assert [column.tolist() for column in got[0]] == [column.tolist() for column in expected[0]]
        assert got[1].tolist() == expected[1].tolist()
    piped = subprocess.run(
        [sys.executable, "-m", "kvlab", "replay", "--workload", "mooncake", "--trace", "-", "--gpu-tokens", "1024"],
        input=text,
        capture_output=True,
        text=True,
    )
    direct = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvlab",
            "replay",
            "--workload",
            "mooncake",
            "--trace",
            str(plain),
            "--gpu-tokens",
            "1024",
        ],
        capture_output=True,
        text=True,
    )
    assert piped.returncode == direct.returncode == 0
    assert json.loads(piped.stdout)["rounds"] == json.loads(direct.stdout)["rounds"]


def test_every_trace_format_is_a_workload():
    for name, trace in FORMATS.items():
        assert WORKLOADS[name].format is trace
        assert WORKLOADS[name](trace="t").block_tokens == trace.block_tokens


def test_a_bailian_trace_at_larger_blocks_keys_each_group_by_its_last_id(tmp_path):
    """32-token blocks over 16-token trace blocks: the second id of each pair, and a lone last one."""
    record = {
        "chat_id": 1,
        "parent_chat_id": -1,
        "timestamp": 0.5,
        "input_length": 80,
        "output_length": 3,
        "type": "text",
        "turn": 1,
        "hash_ids": [10, 11, 12, 13, 14],
    }
    path = tmp_path / "qwen.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    (request,) = WORKLOADS["bailian"](32, trace=str(path)).requests()
    assert request.keys == [11, 13, 14]
    assert request.tokens == 80
    assert request.label == 0.5
