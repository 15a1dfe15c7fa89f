"""The Snakemake workflow end to end: committed results are fresh, reruns are minimal, lint is clean."""

import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, project_files, tool

ALLOWED_LINT = "Specify a conda environment or container for each rule."  # explained in the Snakefile


def results_tree(folder):
    """``{relative path: bytes}`` of every file under ``folder/results``."""
    base = Path(folder)
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted((base / "results").rglob("*")) if p.is_file()}


def snakemake(folder, *args):
    done = tool("snakemake", "--cores", "2", *args, cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """A clean copy of the project without results/, and one full pipeline run in it."""
    copy = tmp_path_factory.mktemp("kvlab")
    for name in project_files():
        if name.startswith("results/"):
            continue
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, copy / name)
    snakemake(copy)
    return copy


def test_committed_results_are_fresh(regenerated):
    """Regenerating from the tracked files gives exactly the committed results/: no modified, missing or stale file."""
    committed = {name: (ROOT / name).read_bytes() for name in project_files() if name.startswith("results/")}
    fresh = results_tree(regenerated)
    assert sorted(fresh) == sorted(committed), "results/ files differ: regenerate with `make run` and commit"
    stale = [name for name in committed if committed[name] != fresh[name]]
    assert not stale, f"out of date: {stale}; regenerate with `make run` and commit"


def test_second_run_does_nothing(regenerated):
    done = snakemake(regenerated, "--dry-run")
    assert "Nothing to be done" in done.stdout + done.stderr


def test_appending_a_grid_value_reruns_only_that_point_and_what_reads_the_sweep(regenerated, tmp_path):
    """The new point, its collector, and the sweep's TTFT prediction and plot: nothing else."""
    copy = tmp_path / "copy"
    shutil.copytree(regenerated, copy)  # keeps mtimes and Snakemake's metadata
    outputs = [p for folder in ("results", "work") for p in (copy / folder).rglob("*") if p.is_file()]
    before = {p: p.stat().st_mtime_ns for p in outputs}
    config = (copy / "config.yaml").read_text(encoding="utf-8")
    grid = "grid: [21520, 30000, 40000, 45000, 50109, 50110]"
    assert grid in config
    (copy / "config.yaml").write_text(config.replace(grid, grid[:-1] + ", 35000]"), encoding="utf-8")

    snakemake(copy)

    changed = sorted(str(p.relative_to(copy)) for p, mtime in before.items() if p.stat().st_mtime_ns != mtime)
    assert changed == ["results/cliff.json", "results/plots/gpu_cliff.png", "results/ttft/sweep-cliff.csv"]
    assert (copy / "work/sweeps/cliff/35000.json").is_file()
    cliff = (copy / "results/cliff.json").read_text(encoding="utf-8")
    assert cliff.endswith('  "50110": 10,\n  "35000": 0\n}\n')
    assert "Nothing to be done" in "".join(snakemake(copy, "--dry-run").stdout)


def test_appending_a_replay_room_reruns_only_the_new_points_and_the_tables(regenerated, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(regenerated, copy)
    outputs = [p for p in (copy / "results").rglob("*") if p.is_file()]
    before = {p: p.stat().st_mtime_ns for p in outputs}
    config = (copy / "config.yaml").read_text(encoding="utf-8")
    grid = "    gpu_tokens: [21520, 45000, 48000, 50110]\n"
    assert grid in config
    (copy / "config.yaml").write_text(
        config.replace(grid, "    gpu_tokens: [21520, 45000, 48000, 50110, 30000]\n"), encoding="utf-8"
    )

    done = snakemake(copy)

    changed = sorted(str(p.relative_to(copy)) for p, mtime in before.items() if p.stat().st_mtime_ns != mtime)
    assert changed == ["results/replay/lab.csv", "results/replay/long_doc_qa.csv"]
    new_points = sorted((copy / "results" / "replay").rglob("gpu30000-*.json"))
    assert len(new_points) == 2 * 3 * 3  # two workloads x three CPU rooms x three block sizes
    assert f"{len(new_points) + 3} of {len(new_points) + 3} steps" in done.stdout + done.stderr  # + 2 tables + all


def test_a_mooncake_trace_is_one_config_entry(regenerated, tmp_path):
    """A trace workload named in config.yaml replays from its path; the artifact names only the file."""
    copy = tmp_path / "copy"
    shutil.copytree(regenerated, copy)
    trace = ROOT.parent / "shared" / "traces" / "mooncake" / "synthetic_trace.jsonl"
    entry = (
        "    synthetic:\n      source: mooncake\n"
        f"      trace: {trace}\n"
        "      rooms: {gpu_tokens: [1000000], cpu_tokens: [0, 10000000], block_tokens: [512, 1024]}\n"
    )
    config = copy / "config.yaml"
    marker = "    # A Mooncake FAST'25 trace"
    text = config.read_text(encoding="utf-8")
    assert text.count(marker) == 1
    config.write_text(text.replace(marker, entry + marker), encoding="utf-8")

    snakemake(copy)

    table = (copy / "results" / "replay" / "synthetic.csv").read_text(encoding="utf-8")
    assert len(table.splitlines()) == 1 + 4 * 2  # header + 4 points x (all + the trace round)
    point = (copy / "results" / "replay" / "synthetic" / "gpu1000000-cpu10000000-block512.json").read_text()
    assert '"trace": "synthetic_trace.jsonl"' in point and str(trace.parent) not in point
    assert '"block_accesses": 121877' in point


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("gpu: 21520\n    cpu: 56000", "gpu: -5\n    cpu: 56000", "-5"),
        ("value: misses", "value: hit_ratio", "hit_ratio"),
        ("pass: 2\n      value: hits", "pass: 3\n      value: hits", "sweeps.cliff.record.pass is 3"),
    ],
)
def test_bad_config_stops_before_any_job(tmp_path, old, new, message):
    for name in project_files():
        if name.endswith((".smk", ".py", ".yaml")) or name == "Snakefile":
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, tmp_path / name)
    config = (tmp_path / "config.yaml").read_text(encoding="utf-8")
    assert old in config
    (tmp_path / "config.yaml").write_text(config.replace(old, new, 1), encoding="utf-8")
    done = tool("snakemake", "--cores", "1", cwd=tmp_path)
    assert done.returncode != 0
    assert message in done.stdout + done.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "work").exists()


def test_snakemake_lint_has_only_the_documented_exception():
    done = tool("snakemake", "--lint", cwd=ROOT)
    lints = re.findall(r"^\s+\* (.+?):$", done.stdout + done.stderr, flags=re.MULTILINE)
    assert set(lints) <= {ALLOWED_LINT}, lints
    assert "Lint exception" in (ROOT / "Snakefile").read_text(encoding="utf-8")  # where it is explained


def test_snakefmt_is_clean():
    done = tool("snakefmt", "--check", ".", cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]])
def test_ruff_is_clean(args):
    done = tool("ruff", *args, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_absolute_paths_or_timestamps_in_results():
    """Text artifacts (the PNG figures' metadata is checked in tests/test_plots.py)."""
    for name, data in results_tree(ROOT).items():
        if name.endswith(".png"):
            continue
        text = data.decode("utf-8")
        assert str(ROOT) not in text and os.path.expanduser("~") + "/" not in text, name
        assert not re.search(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", text), name
        assert text.endswith("\n"), name
