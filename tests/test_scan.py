"""The compiled scanner of plain JSON lines (kvlab/workloads/scan.py) against the standard library's json: every line it
takes, json reads as the same numbers (on lines written every way JSON allows and on random edits of them), and
it takes every plain line, so the trace reader's fast path is used where it should be."""

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.workloads.scan import BLANK, OK, OTHER, scan

NAMES = ("timestamp", "input_length", "output_length", "hash_ids")
LISTED = 3
SPACE = st.text(alphabet=" \t\r", max_size=2)
PLAIN = st.integers(-(10**18) + 1, 10**18 - 1)
BLANKS = ["", " ", "\t\r", "\x0b\x0c"]  # what bytes.isspace calls blank, as the reference reader does
ALPHABET = ' \t\r{}[]:,"-+.0123456789eEx\\\x0b\xe9'


@st.composite
def plain_lines(draw):
    """An object of exactly NAMES, in any order, integers of at most 18 digits, whitespace anywhere JSON allows."""
    values = {name: draw(st.lists(PLAIN, max_size=6)) if name == "hash_ids" else draw(PLAIN) for name in NAMES}
    order = draw(st.permutations(NAMES))

    def spaced(text):
        return draw(SPACE) + text + draw(SPACE)

    def value(item):
        if isinstance(item, list):
            return "[" + (",".join(spaced(str(number)) for number in item) if item else draw(SPACE)) + "]"
        return str(item)

    fields = ",".join(spaced(json.dumps(name)) + ":" + spaced(value(values[name])) for name in order)
    return "{" + (fields or draw(SPACE)) + "}" + draw(SPACE), values


def scanned(lines):
    status, values, counts, items = scan("\n".join(lines).encode("utf-8"), NAMES, LISTED)
    rows, at = [], 0
    for line, (kind, row, count) in enumerate(zip(status, values, counts, strict=True)):
        if kind == OK:
            record = {name: int(row[index]) for index, name in enumerate(NAMES) if index != LISTED}
            record["hash_ids"] = items[at : at + count].tolist()
            at += count
            rows.append((line, record))
    assert at == len(items)
    return status, dict(rows)


def unique(pairs):
    """An object with a field given twice reads as None (the trace reader refuses it)."""
    return dict(pairs) if len(dict(pairs)) == len(pairs) else None


def json_reading(line):
    """The record json reads from ``line`` if it is an object of exactly NAMES with whole numbers and a list of
    them (bools are not numbers), else None."""
    try:
        record = json.loads(line, object_pairs_hook=unique)
    except ValueError:
        return None
    if type(record) is not dict or set(record) != set(NAMES):
        return None
    if type(record["hash_ids"]) is not list or not all(type(item) is int for item in record["hash_ids"]):
        return None
    if not all(type(record[name]) is int for name in NAMES if name != "hash_ids"):
        return None
    return record


@settings(max_examples=150, deadline=None)
@given(st.lists(plain_lines(), min_size=1, max_size=8), st.lists(st.sampled_from(BLANKS), max_size=3))
def test_every_plain_line_is_taken_as_json_reads_it(plain, blanks):
    lines = [text for text, _ in plain] + blanks
    status, records = scanned(lines)
    assert status.tolist() == [OK] * len(plain) + [BLANK] * len(blanks)
    for line, (text, values) in enumerate(plain):
        assert records[line] == values == json.loads(text)


@st.composite
def edited_lines(draw):
    """A plain line with a few random edits (inserts, deletions, replacements from JSON's own characters)."""
    text = draw(plain_lines())[0]
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(text)))
        edit = draw(st.sampled_from(["insert", "delete", "replace"]))
        char = draw(st.sampled_from(ALPHABET))
        if edit == "insert":
            text = text[:at] + char + text[at:]
        elif edit == "delete":
            text = text[:at] + text[at + 1 :]
        else:
            text = text[:at] + char + text[at + 1 :]
    return text


@settings(max_examples=400, deadline=None)
@given(st.lists(edited_lines(), min_size=1, max_size=4))
def test_a_line_it_takes_is_one_json_reads_the_same(lines):
    lines = [line.replace("\n", "") for line in lines]
    status, records = scanned(lines)
    for number, line in enumerate(lines):
        expected = json_reading(line)
        if status[number] == OK:
            assert records[number] == expected, line
        elif status[number] == BLANK:
            assert line.encode("utf-8").isspace() or not line
        else:
            assert status[number] == OTHER
            if expected is not None:  # json reads it, the scanner does not: only beyond the plain shape
                numbers = [expected[name] for name in NAMES if name != "hash_ids"] + expected["hash_ids"]
                assert max(map(abs, numbers)) >= 10**18 or "\\" in line, line


def test_longer_numbers_floats_and_extra_fields_are_left_to_the_full_reader():
    base = {"timestamp": 1, "input_length": 2, "output_length": 3, "hash_ids": [4]}
    variants = [
        {**base, "timestamp": 10**18},  # 19 digits
        {**base, "hash_ids": [1.0]},
        {**base, "timestamp": 1e3},
        {**base, "extra": 1},
        {name: value for name, value in base.items() if name != "hash_ids"},
        {**base, "input_length": True},
        {**base, "hash_ids": [[4]]},
    ]
    lines = [json.dumps(variant) for variant in variants] + ['{"timestamp": 1, "timestamp": 1}', "[1]", "{}"]
    status, _ = scanned(lines)
    assert status.tolist() == [OTHER] * len(lines)
    status, records = scanned([json.dumps(base)])
    assert status.tolist() == [OK] and records[0] == base
    assert np.asarray(status).dtype == np.int8
