"""Tests for the lab's summary (SPEC step 8), kvlab/summarize.py and ``kvlab summarize``: per-pass TTFT medians,
means and baseline/lmcache ratios.

The expected numbers are computed here independently of the script: the median by hand from a sorted
list, the mean exactly with ``fractions.Fraction``. The command is exercised in this process (``kvlab summarize``,
which runs the script's own main); the script copied alone runs in a process of its own, and
tests/test_scenario_cli.py checks that the command and ``python kvlab/summarize.py`` write the same bytes.
"""

import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import pytest
from conftest import KVLAB, ROOT, kvlab
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab import summarize as summarize_module

SCRIPT = KVLAB / "summarize.py"
CONFIGS = ("baseline", "lmcache")
FIELDS = ("config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms")
PASSES = ("pass1-cold", "pass2-replay", "pass3-reverse")


# --------------------------------------------------------------------------------------------------------------
# Helpers: records, files, the CLI, and the independent oracle.
# --------------------------------------------------------------------------------------------------------------


def record(config, pass_name, doc, ttft, total=None, tokens=None):
    """One request as a dict with every field the script requires."""
    return {
        "config": config,
        "pass": pass_name,
        "doc": doc,
        "doc_tokens": 1000 + doc if tokens is None else tokens,
        "ttft_ms": ttft,
        "total_ms": (ttft * 3 if total is None else total),
    }


def lines_of(records):
    return [json.dumps(r) for r in records]


def write_lines(path, lines, newline="\n", trailing=True):
    """Write ``lines`` (str or bytes) joined by ``newline``; returns the path."""
    chunks = [line.encode("utf-8") if isinstance(line, str) else line for line in lines]
    sep = newline.encode("ascii")
    data = sep.join(chunks) + (sep if trailing and chunks else b"")
    path.write_bytes(data)
    return path


def run_cli(*args, cwd=ROOT):
    """``kvlab summarize ARGS``, in this process."""
    return kvlab("summarize", *args, cwd=cwd)


def hand_median(values):
    """Median as statistics.median defines it: the middle value, or the mean of the two middle values."""
    ordered = sorted(values)
    n = len(ordered)
    middle = n // 2
    if n % 2:
        return float(ordered[middle])
    return (ordered[middle - 1] + ordered[middle]) / 2


def exact_mean(values):
    """The exactly computed mean, correctly rounded to a float (what statistics.mean returns)."""
    return float(sum((Fraction(v) for v in values), Fraction(0)) / len(values))


def expected_summary(records):
    """The whole output document, computed independently of the script."""
    groups = {}
    for r in records:
        groups.setdefault(r["config"], {}).setdefault(r["pass"], []).append(r["ttft_ms"])
    stats = {
        config: {name: (hand_median(v), exact_mean(v), len(v)) for name, v in groups.get(config, {}).items()}
        for config in CONFIGS
    }
    document = {}
    for config in CONFIGS:
        document[config] = {
            name: {"n": n, "p50_ms": round(p50, 1), "mean_ms": round(mean, 1)}
            for name, (p50, mean, n) in sorted(stats[config].items())
        }
    ratio = {}
    for name in sorted(set(stats["baseline"]) & set(stats["lmcache"])):
        (b50, bmean, _), (l50, lmean, _) = stats["baseline"][name], stats["lmcache"][name]
        ratio[name] = {
            # A zero lmcache statistic has no ratio; the script documents JSON null for it.
            "p50": None if l50 == 0 else round(b50 / l50, 2),
            "mean": None if lmean == 0 else round(bmean / lmean, 2),
        }
    document["ratio"] = ratio
    return document


def expected_text(records):
    return json.dumps(expected_summary(records), indent=2) + "\n"


def grid(docs_per_pass, seed=0):
    """Records for both configs with ``docs_per_pass[pass]`` documents each, with varied float/int TTFTs."""
    rng = random.Random(seed)
    records = []
    for config in CONFIGS:
        scale = 1.0 if config == "baseline" else 0.4
        for name, docs in docs_per_pass.items():
            for doc in range(docs):
                ttft = round(rng.uniform(20, 900) * scale, rng.choice([0, 1, 2, 3, 6]))
                if rng.random() < 0.3:
                    ttft = int(ttft)
                records.append(record(config, name, doc, ttft))
    return records


def summarize_file(tmp_path, lines, name="in.jsonl", newline="\n", trailing=True):
    """Run the CLI on ``lines``; returns (process, output text or None)."""
    source = write_lines(tmp_path / name, lines, newline=newline, trailing=trailing)
    target = tmp_path / (name + ".out.json")
    if target.exists():
        target.unlink()
    proc = run_cli(source, target)
    return proc, (target.read_text(encoding="utf-8") if target.exists() else None)


def leftover_temporaries(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".summarize-"))


# --------------------------------------------------------------------------------------------------------------
# Output: format and numbers.
# --------------------------------------------------------------------------------------------------------------


def test_golden_document_text(tmp_path):
    """A small hand-checked input gives exactly this text (key order, sorted passes, indent 2, newline)."""
    records = [
        record("lmcache", "pass2-replay", 0, 50),
        record("baseline", "pass2-replay", 0, 100.0),
        record("baseline", "pass1-cold", 0, 100.0),
        record("lmcache", "pass1-cold", 0, 150),
        record("baseline", "pass1-cold", 1, 300.0),
        record("lmcache", "pass1-cold", 1, 50),
        record("baseline", "pass1-cold", 2, 200.0),
        record("lmcache", "pass1-cold", 2, 120),
        record("lmcache", "pass1-cold", 3, 100),
        record("baseline", "pass2-replay", 1, 101.0),
        record("lmcache", "pass2-replay", 1, 40),
    ]
    # baseline pass1-cold: [100, 200, 300] -> median 200, mean 200
    # lmcache  pass1-cold: [50, 100, 120, 150] -> median (100 + 120) / 2 = 110, mean 420 / 4 = 105
    # ratio pass1-cold: 200 / 110 = 1.8181.. -> 1.82; 200 / 105 = 1.9047.. -> 1.9
    # baseline pass2-replay: [100, 101] -> 100.5, 100.5; lmcache [40, 50] -> 45, 45; ratio 2.2333.. -> 2.23
    golden = """\
{
  "baseline": {
    "pass1-cold": {
      "n": 3,
      "p50_ms": 200.0,
      "mean_ms": 200.0
    },
    "pass2-replay": {
      "n": 2,
      "p50_ms": 100.5,
      "mean_ms": 100.5
    }
  },
  "lmcache": {
    "pass1-cold": {
      "n": 4,
      "p50_ms": 110.0,
      "mean_ms": 105.0
    },
    "pass2-replay": {
      "n": 2,
      "p50_ms": 45.0,
      "mean_ms": 45.0
    }
  },
  "ratio": {
    "pass1-cold": {
      "p50": 1.82,
      "mean": 1.9
    },
    "pass2-replay": {
      "p50": 2.23,
      "mean": 2.23
    }
  }
}
"""
    proc, text = summarize_file(tmp_path, lines_of(records))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert text == golden
    assert text == expected_text(records)
    assert leftover_temporaries(tmp_path) == []
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE((tmp_path / "in.jsonl.out.json").stat().st_mode) == 0o666 & ~mask  # the umask's mode


@pytest.mark.parametrize(
    ("baseline", "lmcache", "p50", "mean"),
    [
        # odd counts: the middle value
        ([5.0, 1.0, 3.0], [2.0, 1.0, 4.0], 3.0 / 2.0, 3.0 / (7.0 / 3.0)),
        # even counts: the mean of the two middle values (not the lower or upper one)
        ([4.0, 1.0, 3.0, 10.0], [1.0, 2.0], 3.5 / 1.5, 4.5 / 1.5),
        # single values
        ([7.25], [2.5], 7.25 / 2.5, 7.25 / 2.5),
    ],
)
def test_median_odd_and_even_counts(tmp_path, baseline, lmcache, p50, mean):
    records = [record("baseline", "pass1-cold", i, v) for i, v in enumerate(baseline)]
    records += [record("lmcache", "pass1-cold", i, v) for i, v in enumerate(lmcache)]
    proc, text = summarize_file(tmp_path, lines_of(records))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(text)
    assert out["baseline"]["pass1-cold"]["p50_ms"] == round(hand_median(baseline), 1)
    assert out["lmcache"]["pass1-cold"]["p50_ms"] == round(hand_median(lmcache), 1)
    assert out["baseline"]["pass1-cold"]["n"] == len(baseline)
    assert out["lmcache"]["pass1-cold"]["n"] == len(lmcache)
    assert out["ratio"]["pass1-cold"] == {"p50": round(p50, 2), "mean": round(mean, 2)}
    assert text == expected_text(records)


def test_even_count_median_is_mean_of_middle_pair(tmp_path):
    records = [record("baseline", "p", i, v) for i, v in enumerate([10.0, 40.0, 20.0, 30.0])]
    records += [record("lmcache", "p", i, v) for i, v in enumerate([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])]
    proc, text = summarize_file(tmp_path, lines_of(records))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(text)
    assert out["baseline"]["p"]["p50_ms"] == 25.0
    assert out["lmcache"]["p"]["p50_ms"] == 3.5
    assert out["ratio"]["p"]["p50"] == round(25.0 / 3.5, 2) == 7.14


def test_ratio_uses_unrounded_statistics(tmp_path):
    """1.04 / 1.05 = 0.990.. -> 0.99, while the rounded statistics give 1.0 / 1.1 = 0.909.. -> 0.91."""
    baseline = [1.03, 1.04, 1.05]  # median 1.04 -> p50_ms 1.0
    lmcache = [1.05, 1.05, 1.05]  # median 1.05 -> p50_ms 1.1
    assert round(round(1.04, 1) / round(1.05, 1), 2) == 0.91  # what rounding first would give
    records = [record("baseline", "pass1-cold", i, v) for i, v in enumerate(baseline)]
    records += [record("lmcache", "pass1-cold", i, v) for i, v in enumerate(lmcache)]
    proc, text = summarize_file(tmp_path, lines_of(records))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(text)
    assert out["baseline"]["pass1-cold"]["p50_ms"] == 1.0
    assert out["lmcache"]["pass1-cold"]["p50_ms"] == 1.1
    assert out["ratio"]["pass1-cold"]["p50"] == 0.99
    assert out["ratio"]["pass1-cold"]["mean"] == round(exact_mean(baseline) / exact_mean(lmcache), 2) == 0.99


def test_ratio_mean_uses_unrounded_mean(tmp_path):
    """Means 10.04 and 10.05 round to 10.0 / 10.1 (-> 0.99), but the unrounded ratio 0.999.. -> 1.0."""
    baseline = [10.0, 10.08]  # exact mean 10.04
    lmcache = [10.0, 10.1]  # exact mean 10.05
    assert round(round(exact_mean(baseline), 1) / round(exact_mean(lmcache), 1), 2) == 0.99
    records = [record("baseline", "p", i, v) for i, v in enumerate(baseline)]
    records += [record("lmcache", "p", i, v) for i, v in enumerate(lmcache)]
    proc, text = summarize_file(tmp_path, lines_of(records))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(text)
    assert out["ratio"]["p"]["mean"] == 1.0
    assert text == expected_text(records)


def test_integer_ttft_values(tmp_path):
    records = [record("baseline", "pass1-cold", i, v) for i, v in enumerate([300, 100, 200])]
    records += [record("lmcache", "pass1-cold", i, v) for i, v in enumerate([70, 80, 90, 101])]
    records += [record("baseline", "pass2-replay", i, v) for i, v in enumerate([1, 2])]
    records += [record("lmcache", "pass2-replay", i, v) for i, v in enumerate([3, 3, 4])]
    proc, text = summarize_file(tmp_path, lines_of(records))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(text)
    assert out["baseline"]["pass1-cold"] == {"n": 3, "p50_ms": 200.0, "mean_ms": 200.0}
    assert out["lmcache"]["pass1-cold"] == {"n": 4, "p50_ms": 85.0, "mean_ms": 85.2}  # 341 / 4 = 85.25
    assert out["baseline"]["pass2-replay"] == {"n": 2, "p50_ms": 1.5, "mean_ms": 1.5}
    assert out["lmcache"]["pass2-replay"] == {"n": 3, "p50_ms": 3.0, "mean_ms": 3.3}
    assert out["ratio"]["pass2-replay"] == {"p50": 0.5, "mean": round(1.5 / (10 / 3), 2)}
    for config in CONFIGS:
        for stats in out[config].values():
            assert isinstance(stats["n"], int)
            assert isinstance(stats["p50_ms"], float) and isinstance(stats["mean_ms"], float)
    assert text == expected_text(records)


@pytest.mark.parametrize(
    "docs_per_pass",
    [
        {"pass1-cold": 3, "pass2-replay": 3, "pass3-reverse": 3},
        {"pass1-cold": 7, "pass2-replay": 7, "pass3-reverse": 7},
        {"pass1-cold": 3, "pass2-replay": 7, "pass3-reverse": 4},
        {"pass1-cold": 1, "pass2-replay": 2},
        {"pass1-cold": 40},
    ],
    ids=["3-docs", "7-docs", "mixed-n", "two-passes", "40-docs"],
)
def test_other_document_counts(tmp_path, docs_per_pass):
    records = grid(docs_per_pass, seed=len(docs_per_pass) * 100 + sum(docs_per_pass.values()))
    proc, text = summarize_file(tmp_path, lines_of(records))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(text)
    assert list(out) == ["baseline", "lmcache", "ratio"]
    for config in CONFIGS:
        assert list(out[config]) == sorted(docs_per_pass)
        assert {name: s["n"] for name, s in out[config].items()} == docs_per_pass
    assert list(out["ratio"]) == sorted(docs_per_pass)
    assert text == expected_text(records)


def test_passes_are_sorted_by_name(tmp_path):
    names = ["zeta", "pass3-reverse", "Alpha", "pass1-cold", "pass10", "pass2-replay"]
    records = [record(c, n, 0, 10.0 + i) for i, n in enumerate(names) for c in CONFIGS]
    proc, text = summarize_file(tmp_path, lines_of(records))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(text)
    for key in ("baseline", "lmcache", "ratio"):
        assert list(out[key]) == sorted(names)


def test_shuffled_line_order_is_byte_identical(tmp_path):
    records = grid({"pass1-cold": 7, "pass2-replay": 6, "pass3-reverse": 5}, seed=7)
    proc, reference = summarize_file(tmp_path, lines_of(records), name="ordered.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert reference == expected_text(records)
    rng = random.Random(12345)
    for attempt in range(3):
        shuffled = records[:]
        rng.shuffle(shuffled)
        proc, text = summarize_file(tmp_path, lines_of(shuffled), name=f"shuffled{attempt}.jsonl")
        assert proc.returncode == 0, proc.stderr
        assert text == reference
    proc, text = summarize_file(tmp_path, lines_of(records[::-1]), name="reversed.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert text == reference


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_blank_and_whitespace_lines_are_skipped(tmp_path, newline):
    records = grid({"pass1-cold": 3, "pass2-replay": 4}, seed=3)
    plain = lines_of(records)
    padded = ["", "   "]
    for i, line in enumerate(plain):
        padded.append(line)
        padded.append(["", " ", "\t", " \t  ", "\x0c", "\x0b"][i % 6])
    padded += ["", "   ", ""]  # trailing blank lines
    proc_plain, reference = summarize_file(tmp_path, plain, name="plain.jsonl")
    proc, text = summarize_file(tmp_path, padded, name="padded.jsonl", newline=newline, trailing=True)
    assert proc_plain.returncode == 0 and proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert text == reference == expected_text(records)


def test_crlf_and_missing_final_newline(tmp_path):
    records = grid({"pass1-cold": 3}, seed=11)
    _, reference = summarize_file(tmp_path, lines_of(records), name="plain.jsonl")
    proc, text = summarize_file(tmp_path, lines_of(records), name="crlf.jsonl", newline="\r\n", trailing=False)
    assert proc.returncode == 0, proc.stderr
    assert text == reference
    proc, text = summarize_file(tmp_path, lines_of(records) + ["   "], name="ws-last.jsonl", trailing=False)
    assert proc.returncode == 0, proc.stderr
    assert text == reference


def test_extra_fields_are_ignored(tmp_path):
    records = grid({"pass1-cold": 3}, seed=5)
    extended = [dict(r, note="x", gpu={"id": 0}) for r in records]
    _, reference = summarize_file(tmp_path, lines_of(records), name="plain.jsonl")
    proc, text = summarize_file(tmp_path, lines_of(extended), name="extra.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert text == reference


def test_overwrites_existing_output_on_success(tmp_path):
    records = grid({"pass1-cold": 3}, seed=2)
    source = write_lines(tmp_path / "in.jsonl", lines_of(records))
    target = tmp_path / "out.json"
    target.write_bytes(b"old contents, longer than nothing\n" * 100)
    proc = run_cli(source, target)
    assert proc.returncode == 0, proc.stderr
    assert target.read_text(encoding="utf-8") == expected_text(records)
    assert leftover_temporaries(tmp_path) == []


# --------------------------------------------------------------------------------------------------------------
# Missing configs.
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("present", CONFIGS)
def test_only_one_config_gives_empty_maps_and_a_warning(tmp_path, present):
    absent = "lmcache" if present == "baseline" else "baseline"
    records = [record(present, "pass1-cold", i, v) for i, v in enumerate([10.0, 30.0, 20.0])]
    records += [record(present, "pass2-replay", i, v) for i, v in enumerate([5, 6])]
    proc, text = summarize_file(tmp_path, lines_of(records))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(text)
    assert list(out) == ["baseline", "lmcache", "ratio"]
    assert out[absent] == {}
    assert out["ratio"] == {}
    assert out[present] == {
        "pass1-cold": {"n": 3, "p50_ms": 20.0, "mean_ms": 20.0},
        "pass2-replay": {"n": 2, "p50_ms": 5.5, "mean_ms": 5.5},
    }
    assert text == expected_text(records)
    assert proc.stderr.strip(), "expected a warning on stderr"
    assert "warning" in proc.stderr.lower()
    assert absent in proc.stderr


def test_empty_input_gives_empty_maps(tmp_path):
    proc, text = summarize_file(tmp_path, ["", "  "])
    assert proc.returncode == 0, proc.stderr
    assert text == '{\n  "baseline": {},\n  "lmcache": {},\n  "ratio": {}\n}\n'
    assert proc.stderr.strip()


# --------------------------------------------------------------------------------------------------------------
# Bad input: one line on stderr naming file:line, nonzero exit, OUT untouched.
# --------------------------------------------------------------------------------------------------------------

GOOD = [json.dumps(record("baseline", "pass1-cold", 0, 10.0)), json.dumps(record("lmcache", "pass1-cold", 0, 5.0))]


def with_field(ttft_literal):
    """A record line whose ttft_ms is the given raw JSON text."""
    return (
        '{"config": "lmcache", "pass": "pass1-cold", "doc": 1, "doc_tokens": 10, '
        f'"ttft_ms": {ttft_literal}, "total_ms": 20.0}}'
    )


def without(field):
    return json.dumps({k: v for k, v in record("baseline", "pass2-replay", 3, 12.5).items() if k != field})


BAD_LINES = {
    "truncated-json": '{"config": "baseline", "pass": "pass1-cold",',
    "not-json": "this is not json",
    "trailing-garbage": json.dumps(record("baseline", "pass1-cold", 1, 1.0)) + " x",
    "two-objects": json.dumps(record("baseline", "pass1-cold", 1, 1.0)) * 2,
    "array": "[1, 2, 3]",
    "record-in-array": "[" + json.dumps(record("baseline", "pass1-cold", 1, 1.0)) + "]",
    "number": "42",
    "string": '"baseline"',
    "null": "null",
    **{f"missing-{field}": without(field) for field in FIELDS},
    "empty-object": "{}",
    "ttft-string": with_field('"12.5"'),
    "ttft-null": with_field("null"),
    "ttft-true": with_field("true"),
    "ttft-false": with_field("false"),
    "ttft-list": with_field("[12.5]"),
    "ttft-object": with_field('{"v": 1}'),
    "ttft-NaN": with_field("NaN"),
    "ttft-Infinity": with_field("Infinity"),
    "ttft-minus-Infinity": with_field("-Infinity"),
    "ttft-overflow-float": with_field("1e400"),
    "ttft-int-beyond-float-range": with_field("1" + "0" * 400),
    "ttft-int-too-many-digits": with_field("9" * 5000),
    "ttft-negative-float": with_field("-0.5"),
    "ttft-negative-int": with_field("-1"),
    "non-utf8": b'{"config": "baseline", "pass": "p\xff\xfe", "doc": 0}',
    "latin1": '{"config": "baseline", "pass": "caf\xe9"}'.encode("latin-1"),
}


def check_one_line_error(proc, *fragments):
    assert proc.returncode != 0
    assert proc.stderr.startswith("kvlab summarize: error: "), proc.stderr
    assert proc.stderr.endswith("\n"), repr(proc.stderr)
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        if isinstance(fragment, re.Pattern):
            assert fragment.search(proc.stderr), (fragment.pattern, proc.stderr)
        else:
            assert fragment in proc.stderr, (fragment, proc.stderr)


def location(path, lineno):
    """``file:line`` with the exact line number (``:1`` must not match ``:12``)."""
    return re.compile(re.escape(str(path)) + ":" + str(lineno) + r"(?!\d)")


@pytest.mark.parametrize("bad", list(BAD_LINES.values()), ids=list(BAD_LINES))
@pytest.mark.parametrize(
    ("layout", "newline", "preexisting"),
    [
        ("first", "\n", False),
        ("after-blanks", "\n", True),
        ("last-no-newline", "\n", True),
        ("after-blanks", "\r\n", False),
    ],
    ids=["first-absent", "after-blanks-existing", "last-no-newline-existing", "after-blanks-crlf-absent"],
)
def test_bad_line_reports_file_and_line(tmp_path, bad, layout, newline, preexisting):
    """Every bad input: nonzero exit, one stderr line naming file:line (blank lines counted), OUT untouched."""
    if layout == "first":
        lines, lineno, trailing = [bad, *GOOD], 1, True
    elif layout == "after-blanks":
        # line 1 good, 2 blank, 3 whitespace, 4 good, 5..10 blank/whitespace, 11 good, 12 bad, 13 good
        lines = [GOOD[0], "", "  ", GOOD[1], "", "", "\t", "", " ", "", GOOD[0], bad, GOOD[1]]
        lineno, trailing = 12, True
    else:
        lines, lineno, trailing = [*GOOD, "", bad], 4, False
    source = write_lines(tmp_path / "in.jsonl", lines, newline=newline, trailing=trailing)

    target = tmp_path / "out" / "out.json"
    target.parent.mkdir()
    old = b'{"stale": true}\n\x00 not even json \xff\n'
    if preexisting:
        target.write_bytes(old)
    proc = run_cli(source, target)
    check_one_line_error(proc, location(source, lineno))
    if preexisting:
        assert target.read_bytes() == old
        assert list(target.parent.iterdir()) == [target]  # no temporary file left behind
    else:
        assert not target.exists()
        assert list(target.parent.iterdir()) == []


@pytest.mark.parametrize("field", FIELDS)
def test_missing_field_is_named(tmp_path, field):
    source = write_lines(tmp_path / "in.jsonl", [*GOOD, without(field)])
    proc = run_cli(source, tmp_path / "out.json")
    check_one_line_error(proc, location(source, 3))
    message = proc.stderr.split(f"{source}:3", 1)[1]
    assert re.search(rf"\b{field}\b", message), proc.stderr
    assert not (tmp_path / "out.json").exists()


def test_first_bad_line_is_reported(tmp_path):
    source = write_lines(tmp_path / "in.jsonl", [GOOD[0], "", with_field("-3"), "not json", GOOD[1]])
    proc = run_cli(source, tmp_path / "out.json")
    check_one_line_error(proc, location(source, 3))


def test_relative_paths_are_named_as_given(tmp_path):
    write_lines(tmp_path / "in.jsonl", [GOOD[0], GOOD[1], "", "oops"])
    proc = run_cli("in.jsonl", "out.json", cwd=tmp_path)
    check_one_line_error(proc, location("in.jsonl", 4))
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("preexisting", [False, True], ids=["absent", "existing"])
def test_nonexistent_input_file(tmp_path, preexisting):
    source = tmp_path / "no-such-file.jsonl"
    target = tmp_path / "out.json"
    if preexisting:
        target.write_bytes(b"keep me\n")
    proc = run_cli(source, target)
    check_one_line_error(proc, str(source))
    if preexisting:
        assert target.read_bytes() == b"keep me\n"
    else:
        assert not target.exists()
    assert leftover_temporaries(tmp_path) == []


def test_input_is_a_directory(tmp_path):
    (tmp_path / "dir.jsonl").mkdir()
    proc = run_cli(tmp_path / "dir.jsonl", tmp_path / "out.json")
    check_one_line_error(proc, str(tmp_path / "dir.jsonl"))
    assert not (tmp_path / "out.json").exists()


def test_output_folder_missing(tmp_path):
    source = write_lines(tmp_path / "in.jsonl", GOOD)
    target = tmp_path / "missing" / "deeper" / "out.json"
    proc = run_cli(source, target)
    check_one_line_error(proc, "missing")
    assert not (tmp_path / "missing").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


@pytest.mark.parametrize(
    "args",
    [[], ["in.jsonl"], ["in.jsonl", "out.json", "extra.json"]],
    ids=["no-args", "one-arg", "three-args"],
)
def test_wrong_argument_count(tmp_path, args):
    write_lines(tmp_path / "in.jsonl", GOOD)
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("kvlab summarize: error: ")
    assert proc.stderr.endswith("\n")
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out.json").exists()
    assert not (tmp_path / "extra.json").exists()


@pytest.mark.parametrize("how", ["same-path", "other-spelling", "link"])
def test_output_that_is_the_input_is_refused(tmp_path, how):
    """OUT naming IN (by the same path, another spelling, or a link) is a usage error: exit 2, IN unchanged."""
    source = write_lines(tmp_path / "in.jsonl", GOOD)
    before = source.read_bytes()
    target = {"same-path": source, "other-spelling": tmp_path / "." / "in.jsonl", "link": tmp_path / "link.json"}[how]
    if how == "link":
        target.symlink_to(source)
    proc = run_cli(source, target)
    check_one_line_error(proc, "both the input and the output")
    assert proc.returncode == 2
    assert source.read_bytes() == before
    assert leftover_temporaries(tmp_path) == []


# --------------------------------------------------------------------------------------------------------------
# Standalone copy.
# --------------------------------------------------------------------------------------------------------------


def test_standalone_copy_gives_same_output(tmp_path):
    records = grid({"pass1-cold": 7, "pass2-replay": 7, "pass3-reverse": 7}, seed=99)
    write_lines(tmp_path / "ttft.jsonl", lines_of(records))
    proc = run_cli(tmp_path / "ttft.jsonl", tmp_path / "reference.json")
    assert proc.returncode == 0, proc.stderr

    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy2(SCRIPT, alone / "summarize.py")
    shutil.copy2(tmp_path / "ttft.jsonl", alone / "ttft.jsonl")
    standalone = subprocess.run(
        [sys.executable, "summarize.py", "ttft.jsonl", "measured.json"],
        capture_output=True,
        text=True,
        cwd=alone,
        timeout=60,
    )
    assert standalone.returncode == 0, standalone.stderr
    assert (alone / "measured.json").read_bytes() == (tmp_path / "reference.json").read_bytes()
    assert (alone / "measured.json").read_text(encoding="utf-8") == expected_text(records)


# --------------------------------------------------------------------------------------------------------------
# Property test: random records -> the whole document equals the independent computation.
# --------------------------------------------------------------------------------------------------------------

ttft_values = st.one_of(
    # no tiny positive values: x / 1e-309 overflows to inf, an error case tested on its own above
    st.just(0.0),
    st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False),
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from([0.05, 0.15, 0.25, 1.05, 2.675, 10.05, 100.25, 0.125]),  # rounding-sensitive values
)
records_strategy = st.lists(
    st.builds(
        record,
        config=st.sampled_from(CONFIGS),
        pass_name=st.sampled_from(["pass1-cold", "pass2-replay", "pass3-reverse", "warmup"]),
        doc=st.integers(min_value=0, max_value=50),
        ttft=ttft_values,
        total=st.floats(min_value=0.0, max_value=1e6, allow_nan=False),
        tokens=st.integers(min_value=0, max_value=100_000),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_strategy, blank_every=st.integers(min_value=0, max_value=5), crlf=st.booleans())
def test_property_whole_document_matches_independent_computation(records, blank_every, crlf):
    lines = []
    for i, line in enumerate(lines_of(records)):
        if blank_every and i % blank_every == 0:
            lines.append("  ")
        lines.append(line)
    with tempfile.TemporaryDirectory() as folder:
        source = write_lines(Path(folder) / "in.jsonl", lines, newline="\r\n" if crlf else "\n")
        samples = summarize_module.read_samples(str(source))
        document = summarize_module.summarize(samples)
        assert document == expected_summary(records)
        assert list(document) == ["baseline", "lmcache", "ratio"]

        target = Path(folder) / "out.json"
        assert summarize_module.main([str(source), str(target)]) == 0
        assert target.read_text(encoding="utf-8") == expected_text(records)


@settings(max_examples=40, deadline=None)
@given(records=records_strategy, seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_property_line_order_does_not_matter(records, seed):
    shuffled = records[:]
    random.Random(seed).shuffle(shuffled)
    with tempfile.TemporaryDirectory() as folder:
        a = write_lines(Path(folder) / "a.jsonl", lines_of(records))
        b = write_lines(Path(folder) / "b.jsonl", lines_of(shuffled))
        doc_a = summarize_module.summarize(summarize_module.read_samples(str(a)))
        doc_b = summarize_module.summarize(summarize_module.read_samples(str(b)))
    assert json.dumps(doc_a, indent=2) == json.dumps(doc_b, indent=2)


@pytest.mark.parametrize(
    "records",
    [
        [record("baseline", "p", 0, 1.7e308), record("baseline", "p", 1, 1.7e308), record("lmcache", "p", 0, 1.0)],
        [record("baseline", "p", 0, 1e300), record("lmcache", "p", 0, 1e-300)],
    ],
    ids=["median-overflows", "ratio-overflows"],
)
def test_overflowing_statistics_are_one_line_and_no_output(tmp_path, records):
    """Finite inputs whose median or ratio is infinite must not produce invalid JSON (Infinity)."""
    source = write_lines(tmp_path / "in.jsonl", lines_of(records))
    target = tmp_path / "out.json"
    target.write_bytes(b"keep me\n")
    proc = run_cli(source, target)
    check_one_line_error(proc, str(source), "overflow")
    assert target.read_bytes() == b"keep me\n"
    assert leftover_temporaries(tmp_path) == []
