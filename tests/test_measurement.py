"""kvlab/latency/measurement.py, the domain's reader and summary of a TTFT measurement, against its lab twin
kvlab/summarize.py (standard library only, kept whole for the lab's users): on generated measurements, good lines
and bad ones, both read the same records or refuse with the same line, and summarize.py's output file is the
domain summary's text, warnings included.
"""

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab import summarize as lab
from kvlab.latency import measurement
from kvlab.util.files import dump_json

PASSES = ["pass1-cold", "pass2-replay", "pass3-reverse", "warmup"]
NUMBERS = st.one_of(
    st.just(0),
    st.integers(0, 10**6),
    st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.05, 0.15, 0.25, 1.05, 2.675, 10.05, 0.125]),  # rounding-sensitive
)
RECORDS = st.fixed_dictionaries(
    {
        "config": st.sampled_from(["baseline", "lmcache", "other"]),
        "pass": st.sampled_from(PASSES),
        "doc": st.integers(0, 50),
        "doc_tokens": st.integers(0, 10**5),
        "ttft_ms": NUMBERS,
        "total_ms": NUMBERS,
    }
)
GOOD = '"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1'


def line(ttft="1", total="1", head=GOOD):
    return f'{{{head}, "ttft_ms": {ttft}, "total_ms": {total}}}'.encode()


# Lines that are not good records, each as the file holds it.
BAD = st.sampled_from(
    [
        b"not json",
        b'{"config": "baseline",',
        b"[1, 2]",
        b"42",
        b"null",
        b"{}",
        line(head=GOOD.replace('"baseline"', "1")),
        line(head=GOOD.replace('"p"', "null")),
        line(head=GOOD + ', "config": "lmcache"'),
        line('"1"'),
        line("true"),
        line("-1"),
        line("NaN"),
        line("1e999"),
        line(total="1e999"),
        line("1" + "0" * 400),
        line("9" * 5000),
        b'{"config": "baseline", "pass": "p", "doc": 0, "doc_tokens": 1, "total_ms": 1}',
        b'{"config": "baseline", "pass": "caf\xe9"}',
        b"[" * 100_000,
        b"  ",
        b"",
    ]
)
LINES = st.lists(st.one_of(RECORDS.map(lambda record: json.dumps(record).encode()), BAD), max_size=30)


def outcome(read, path):
    """The records a reader yields, or the one line it refuses with."""
    try:
        return [(where, record) for where, record in read(path)]
    except ValueError as error:  # each module's InputError
        return type(error).__name__, str(error)


def written(folder, lines, newline):
    path = Path(folder) / "in.jsonl"
    path.write_bytes(newline.join(lines) + (newline if lines else b""))
    return str(path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=LINES, crlf=st.booleans())
def test_both_read_the_same_records_or_refuse_with_the_same_line(lines, crlf):
    with tempfile.TemporaryDirectory() as folder:
        path = written(folder, lines, b"\r\n" if crlf else b"\n")
        assert outcome(measurement.read_records, path) == outcome(lab.read_records, path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(RECORDS, max_size=40))
def test_summarize_writes_the_domain_summary(records):
    """Byte for byte: the script's output file is the domain summary as kvlab writes JSON; the same warnings."""
    with tempfile.TemporaryDirectory() as folder:
        path = written(folder, [json.dumps(record).encode() for record in records], b"\n")
        target = os.path.join(folder, "out.json")
        assert lab.main([path, target]) == 0
        warnings, theirs = [], []
        document = measurement.summary(measurement.read_samples(path), warnings.append)
        lab.summarize(lab.read_samples(path), theirs.append)
        assert Path(target).read_text(encoding="utf-8") == dump_json(document)
        assert warnings == theirs
        assert measurement.describe([1, 2, 4]) == lab.describe([1, 2, 4])
        assert measurement.CONFIGS == lab.CONFIGS and measurement.FIELDS == lab.FIELDS


@pytest.mark.parametrize("name", ["missing.jsonl", "folder", "fifo", "-", "m.jsonl.gz"])
def test_both_open_the_same_files_the_same_way(tmp_path, name, monkeypatch):
    """A missing file, a folder, a named pipe with no writer; ``-`` and ``.gz`` are plain file names to both."""
    monkeypatch.chdir(tmp_path)
    if name == "folder":
        os.mkdir(name)
    elif name == "fifo":
        os.mkfifo(name)
    elif name == "m.jsonl.gz":
        import gzip

        Path(name).write_bytes(gzip.compress(b'{"config": "baseline"}\n'))
    ours, theirs = outcome(measurement.read_records, name), outcome(lab.read_records, name)
    assert ours == theirs and ours[0] == "InputError"
