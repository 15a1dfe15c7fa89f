"""--max-memory (kvlab/util/memory.py): amounts, the projection from the part read, and the stop before the work."""

import gzip

import pytest
from conftest import ROOT, kvlab
from hypothesis import example, given
from hypothesis import strategies as st

from kvlab.util import memory
from kvlab.util.memory import Footprint, MemoryLimitError, Meter, available, default_limit, memory_size

TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"


@given(st.integers(1, 2**40), st.sampled_from(["", "K", "M", "G", "T"]), st.sampled_from(["", "B", "iB", "ib"]))
def test_amounts_are_binary_units(number, unit, suffix):
    if suffix and not unit and suffix != "B":
        suffix = ""
    factor = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[unit]
    assert memory_size(f"{number}{unit.lower() if number % 2 else unit}{suffix}") == number * factor


@pytest.mark.parametrize("text", ["", "G", "1.5.2G", "-1G", "0", "0.0001", "8 GB of RAM", "nan", "1e9"])
def test_bad_amounts_are_refused(text):
    with pytest.raises(ValueError, match="amount of memory"):
        memory_size(text)


def test_the_default_is_four_fifths_of_what_is_available(monkeypatch):
    """Of one reading of what is available: two readings differ as the machine's free memory moves (CI once saw
    95 KB between them)."""
    reading = available()
    assert reading > 0
    monkeypatch.setattr(memory, "available", lambda: reading)
    assert 0 < default_limit() == int(0.8 * reading) < reading


@given(st.integers(0, 10**9), st.integers(0, 10**7), st.integers(0, 10**8), st.floats(0.001, 1))
@example(0, 0, 89_285_715, 1.0)  # the whole input read: judged by its accesses (hypothesis found it)
def test_the_meter_stops_exactly_when_the_projection_passes_the_limit(accesses, requests, keys, fraction):
    footprint = Footprint(access=20, request=72, key=112)
    need = footprint.of(accesses, requests, keys) / fraction
    limit = 10**10
    meter = Meter(limit, footprint)
    if need > limit:  # judged by the part read, or, with the whole input read, by its accesses
        judged = f"the {fraction:.0%} read so far" if fraction < 1 else f"{accesses:,} block accesses"
        with pytest.raises(MemoryLimitError, match=f"judged by {judged}"):
            meter.check(accesses, requests, keys, fraction)
    else:
        meter.check(accesses, requests, keys, fraction)


@pytest.mark.parametrize("command", ["replay", "mrc", "plan"])
def test_each_command_stops_with_one_line_and_writes_nothing(command, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_bytes(gzip.decompress(TRACE.read_bytes()))
    args = ["--workload", "mooncake", "--trace", trace]
    args += {
        "replay": ["--gpu-tokens", "100000", "--per-request", tmp_path / "rows.csv"],
        "mrc": ["--curve", tmp_path / "curve.csv"],
        "plan": ["--model-config", ROOT / "models" / "Qwen2.5-7B-Instruct" / "config.json", "--gpu-tokens", "1000"],
    }[command]
    done = kvlab(command, *args, "--max-memory", "8M")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "more than --max-memory 8.00 MiB" in done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["t.jsonl"]
    assert kvlab(command, *args, "--max-memory", "4G").returncode == 0
