"""Tests of ``kvlab replay-table`` (kvlab/report/replay_table.py): ``kvlab replay`` outputs folded into one CSV, a
row per (point, round), "all" first."""

import csv
import json

import pytest
from conftest import kvlab

SETTINGS = [
    "block_tokens",
    "gpu_tokens",
    "cpu_tokens",
    "partial_blocks",
    "eviction_order",
    "write_policy",
    "gpu_eviction",
    "cpu_eviction",
]
POINTS = {  # deliberately not in name order: the table must keep the order of its arguments
    "p3": ["--gpu-tokens", "50110", "--block-tokens", "512", "--partial-blocks", "keep"],
    "p1": ["--gpu-tokens", "21520", "--cpu-tokens", "56000"],
    "p2": ["--gpu-tokens", "21520", "--eviction-order", "head-first", "--passes", "fwd,rev"],
}


def run_table(out, *points):
    return kvlab("replay-table", "--out", out, *points)


@pytest.fixture
def points(tmp_path):
    """The replay outputs of POINTS, written to files; returns {path: parsed JSON} in POINTS order."""
    written = {}
    for name, args in POINTS.items():
        proc = kvlab("replay", "--workload", "lab", *args)
        assert proc.returncode == 0, proc.stderr
        path = tmp_path / f"{name}.json"
        path.write_text(proc.stdout)
        written[path] = json.loads(proc.stdout)
    return written


def cell(value):
    """A JSON value as the CSV shows it (a missing ratio is an empty cell)."""
    return "" if value is None else str(value)


def test_table(tmp_path, points):
    """Every point gives its "all" row then its rounds, with its settings in front and its figures unchanged."""
    out = tmp_path / "table.csv"
    proc = run_table(out, *points)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == proc.stderr == ""
    with out.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        rows = list(reader)
    some = next(iter(points.values()))
    figures = list(some)[list(some).index("cache") + 1 : list(some).index("rounds")]
    assert header == [*SETTINGS, "round", *figures]
    expected = []
    for report in points.values():
        settings = [cell(report["cache"][key]) for key in SETTINGS]
        for one in [{"round": "all", **report}, *report["rounds"]]:
            expected.append([*settings, one["round"], *(cell(one[key]) for key in figures)])
    assert rows == expected
    assert [row[header.index("round")] for row in rows] == ["all", "pass1", "pass2", "pass3"] * 2 + [
        "all",
        "pass1",
        "pass2",
    ]
    assert {row[0] for row in rows} == {"256", "512"}
    assert out.read_text().endswith("\n") and "\r" not in out.read_text()


def test_single_point(tmp_path, points):
    """One point is a table of its own rows: the same rows as in the big table."""
    whole, single = tmp_path / "whole.csv", tmp_path / "single.csv"
    path = list(points)[1]
    assert run_table(whole, *points).returncode == 0
    assert run_table(single, path).returncode == 0
    whole_lines, single_lines = whole.read_text().splitlines(), single.read_text().splitlines()
    assert single_lines[0] == whole_lines[0]
    assert single_lines[1:] == whole_lines[5:9]  # the second point: after p3's "all" + 3 passes


@pytest.mark.parametrize(
    "content",
    ["scenario", "{not json", "[]", "{}", ""],
    ids=["scenario-output", "invalid-json", "a-list", "empty-object", "empty-file"],
)
def test_not_a_replay_output(tmp_path, points, content):
    """A file that is not a replay output, even after good ones: exit 1, one line naming it, no table."""
    bad = tmp_path / "bad.json"
    if content == "scenario":
        proc = kvlab("scenario")
        assert proc.returncode == 0
        content = proc.stdout
    bad.write_text(content)
    out = tmp_path / "table.csv"
    proc = run_table(out, *points, bad)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith("kvlab replay-table: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert str(bad) in proc.stderr
    assert not out.exists()
    assert not [path for path in tmp_path.iterdir() if path.name.endswith(".tmp")]


def test_missing_point(tmp_path, points):
    """A point file that does not exist: exit 1, one line naming it, no table."""
    out = tmp_path / "table.csv"
    proc = run_table(out, *points, tmp_path / "absent.json")
    assert proc.returncode == 1
    assert proc.stderr.startswith("kvlab replay-table: error: ")
    assert proc.stderr.count("\n") == 1 and "absent.json" in proc.stderr
    assert not out.exists()


def test_an_output_that_is_a_point_is_refused(tmp_path, points):
    """--out naming one of the points would overwrite an input: a usage error (exit 2), the point unchanged."""
    path = list(points)[0]
    before = path.read_bytes()
    proc = kvlab("replay-table", "--out", path, *points)
    assert proc.returncode == 2
    assert proc.stderr.startswith("kvlab replay-table: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "both an input and an output" in proc.stderr
    assert path.read_bytes() == before
