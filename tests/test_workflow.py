"""The Snakemake workflow end to end, as a user meets it: the committed results are what a regeneration makes
(after a run killed half-way), reruns are decided by file times and stamps alone (no metadata, as in a fresh
clone), each edit reruns exactly what it should, two runs never share a folder, bad or missing config inputs
stop before any job, and lint is clean."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import (
    KVLAB,
    LEFTOVERS,
    ROOT,
    kvlab,
    load_config,
    project_files,
    results_tree,
    run_pipeline,
    scratch_copy,
    snakemake_group,
    tool,
)

from kvlab.cli import COMMANDS
from kvlab.workflow import paths, stamps
from kvlab.workflow.freshness import compare, results_of
from kvlab.workflow.runs import hold_lock

pytestmark = pytest.mark.pipeline

ALLOWED_LINT = "Specify a conda environment or container for each rule."  # explained in the Snakefile


def snakemake(folder, *args):
    done = tool("snakemake", "--cores", "2", *args, cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def planned(folder, *args):
    """The rules of the jobs a run would start now, one entry per job (a dry run)."""
    done = snakemake(folder, "--dry-run", *args)
    return re.findall(r"^(?:local)?rule (\w+):$", done.stdout, flags=re.MULTILINE)


def test_committed_results_are_fresh(regenerated):
    """Regenerating from the tracked files gives exactly the committed results/ (kvlab check's comparison)."""
    assert compare(results_of(ROOT), results_of(regenerated)) == []


def test_a_killed_run_recovers_without_flags(killed_and_rerun):
    """The kill left a Snakemake lock and some results; the next run removed the lock and the temporary files
    and finished (the results it made are checked fresh above)."""
    copy, left = killed_and_rerun
    assert left["locks"], "the kill came after Snakemake took its lock"
    assert 0 < left["results"] < len(results_of(ROOT))
    assert not [name for name in LEFTOVERS if (copy / name).exists()]
    assert not list(copy.rglob("*.tmp"))


def test_second_run_does_nothing(regenerated):
    assert planned(regenerated) == []


def without_metadata(source, destination, work=True):
    """A copy of a regenerated folder without Snakemake's metadata (and without work/ unless ``work``)."""
    shutil.copytree(source, destination, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    if not work:
        shutil.rmtree(destination / "work")
    return destination


def test_decisions_need_no_metadata(regenerated, tmp_path):
    """Without Snakemake's metadata nothing reruns; without work/ too (a fresh clone) everything does, whatever the
    file times a checkout left."""
    assert planned(without_metadata(regenerated, tmp_path / "kept")) == []
    fresh = without_metadata(regenerated, tmp_path / "fresh", work=False)
    last = time.time() - 1
    for path in (fresh / "results").rglob("*"):
        os.utime(path, (last, last))  # a checkout that wrote the results last, just before the run
    assert sorted(planned(fresh)) == sorted(planned(regenerated, "--forceall"))


def edit_config(folder, mutate):
    """Apply ``mutate`` to the folder's config.yaml (a dict), write it back as YAML."""
    path = folder / "config.yaml"
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    mutate(config)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return config


def changed_since(folder, before):
    return sorted(str(p.relative_to(folder)) for p, mtime in before.items() if p.stat().st_mtime_ns != mtime)


def outputs_and_times(folder):
    return {p: p.stat().st_mtime_ns for p in (folder / "results").rglob("*") if p.is_file()}


def test_appending_a_sweep_value_reruns_only_that_point_and_what_reads_the_sweep(regenerated, tmp_path):
    """The new point, its collector, the sweep's TTFT prediction and the plot that draws it: nothing else."""
    copy = without_metadata(regenerated, tmp_path / "copy")
    config = load_config()
    sweep = config["plots"]["gpu_cliff"]
    value = max(config["sweeps"][sweep]["grid"]) + 1
    before = outputs_and_times(copy)
    config = edit_config(copy, lambda config: config["sweeps"][sweep]["grid"].append(value))

    done = run_pipeline(copy)

    assert done.returncode == 0, done.stdout + done.stderr
    made = [f"results/{sweep}.json", *([paths.ttft_sweep_path(sweep)] if sweep in config["ttft"]["sweeps"] else [])]
    readers = [
        paths.plot_path(name)
        for name, inputs in paths.plot_inputs(config).items()
        if any(path in inputs for path in made)
    ]
    expected = sorted([*made, *readers])
    assert changed_since(copy, before) == expected
    artifact = yaml.safe_load((copy / f"results/{sweep}.json").read_text(encoding="utf-8"))
    assert list(artifact) == [str(room) for room in config["sweeps"][sweep]["grid"]]
    assert planned(copy) == []


def test_appending_a_replay_room_reruns_only_the_new_points_and_the_tables(regenerated, tmp_path):
    copy = without_metadata(regenerated, tmp_path / "copy")
    config = load_config()
    room = max(config["replay"]["rooms"]["gpu_tokens"]) + 1
    before = outputs_and_times(copy)
    config = edit_config(copy, lambda config: config["replay"]["rooms"]["gpu_tokens"].append(room))

    assert run_pipeline(copy).returncode == 0

    sharing = [
        name for name, spec in config["replay"]["workloads"].items() if "gpu_tokens" not in spec.get("rooms", {})
    ]
    assert changed_since(copy, before) == sorted(map(paths.replay_table_path, sharing))
    new_points = sorted(path for name in sharing for path in paths.replay_points(config, name) if f"gpu{room}-" in path)
    assert new_points == sorted(str(p.relative_to(copy)) for p in (copy / "results").rglob(f"gpu{room}-*.json"))
    assert new_points


def test_a_mooncake_trace_is_one_config_entry(regenerated, tmp_path):
    """A trace workload named in config.yaml replays from its path; the artifact names only the file."""
    copy = without_metadata(regenerated, tmp_path / "copy")
    trace = "data/traces/mooncake/synthetic_trace.jsonl.gz"
    rooms = {"gpu_tokens": [1000000], "cpu_tokens": [0, 10000000], "block_tokens": [512, 1024]}
    edit_config(
        copy,
        lambda c: c["replay"]["workloads"].update(synthetic={"source": "mooncake", "trace": trace, "rooms": rooms}),
    )

    assert run_pipeline(copy).returncode == 0

    table = (copy / "results" / "replay" / "synthetic.csv").read_text(encoding="utf-8")
    assert len(table.splitlines()) == 1 + 4 * 2  # header + 4 points x (all + the trace round)
    point = (copy / "results" / "replay" / "synthetic" / "gpu1000000-cpu10000000-block512.json").read_text()
    assert '"trace": "synthetic_trace.jsonl.gz"' in point and str(copy) not in point
    expected = kvlab(
        "replay",
        "--workload",
        "mooncake",
        "--trace",
        ROOT / trace,
        "--gpu-tokens",
        1000000,
        "--cpu-tokens",
        10000000,
        "--block-tokens",
        512,
    )
    assert point == expected.stdout


def test_editing_a_leaf_module_reruns_exactly_the_jobs_that_import_it(regenerated, tmp_path):
    """Which code a job runs is derived from the imports: touch one eviction policy, and the jobs whose commands
    import it (and what reads their outputs: the example's summary) rerun; the lab's scenario jobs, which do not,
    stay."""
    copy = without_metadata(regenerated, tmp_path / "copy")
    (copy / "kvlab").unlink()
    shutil.copytree(KVLAB, copy / "kvlab", ignore=shutil.ignore_patterns("__pycache__"))  # file times kept
    leaf = "kvlab/cache/eviction/arc.py"
    later = time.time() + 100
    os.utime(copy / leaf, (later, later))

    jobs = set(planned(copy))

    commands = {"replay_point": "replay", "policy_cliff": "policies", "mrc_gpu": "mrc", "plan": "plan"}
    commands["example_measurement"] = "example-measurement"  # its tiers come from the reference engine
    for rule, command in commands.items():
        assert leaf in stamps.command_code(f"kvlab.cli.{COMMANDS[command][0]}")
        assert rule in jobs
    for rule, command in {
        "lab_run": "scenario",
        "sweep_point": "scenario",
        "sweep_collect": "collect",
    }.items():
        assert leaf not in stamps.command_code(f"kvlab.cli.{COMMANDS[command][0]}")
        assert rule not in jobs


def test_command_code_follows_the_imports():
    """A module a command imports (directly or not) is in its code; one it does not import is not."""
    replay = stamps.command_code(f"kvlab.cli.{COMMANDS['replay'][0]}")
    assert {"kvlab/loop.py", "kvlab/workloads/__init__.py", "kvlab/cache/prefix.py", "kvlab/cli/replay.py"} <= set(
        replay
    )
    assert "kvlab/curves/mrc.py" not in replay and "kvlab/report/plots.py" not in replay
    scenario = stamps.command_code(f"kvlab.cli.{COMMANDS['scenario'][0]}")
    assert "kvlab/kvsim.py" in scenario and "kvlab/summarize.py" not in scenario
    modules = [f"kvlab.cli.{module}" for module, _ in COMMANDS.values()]
    assert all((ROOT / path).is_file() for module in modules for path in stamps.command_code(module))


def test_a_second_run_in_the_same_folder_stops_and_names_the_first(tmp_path):
    """The first run (here: this process, holding the lock) is unharmed: its lock stays held."""
    copy = scratch_copy(tmp_path)
    lock = hold_lock(copy)
    try:
        done = kvlab("run", cwd=copy)
        again = kvlab("run", cwd=copy)
        assert (copy / ".snakemake" / "kvlab-run.lock").read_text(encoding="utf-8") == f"{os.getpid()}\n"
    finally:
        lock.close()
    message = (
        f"kvlab run: error: another run is in progress in this folder (pid {os.getpid()}); wait for it or stop it\n"
    )
    assert (done.returncode, done.stderr) == (again.returncode, again.stderr) == (1, message)
    assert not (copy / "results").exists() and not (copy / "work").exists()


def group_alive(group):
    """Whether a process of ``group`` still runs (a zombie, dead but not yet reaped, does not count: this
    machine's init may never reap it)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            return True
    return False


def test_a_kill_9_of_kvlab_run_leaves_no_snakemake_behind(regenerated, tmp_path):
    """``kill -9`` of the pid the lock names (kvlab run's) kills its Snakemake and jobs too (each is told when its
    parent dies), and while any process of that run lives the folder stays locked: a second run is refused rather than
    unlocking it and deleting its temporary files. Then a plain run makes the committed results again."""
    copy = without_metadata(regenerated, tmp_path / "copy")
    first = subprocess.Popen(
        [sys.executable, "-m", "kvlab", "run", "--", "--cores", "1", "--quiet", "--forcerun", "replay_point"],
        cwd=copy,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120  # a guard against a hang, not a measure of speed
    while time.monotonic() < deadline and not list((copy / ".snakemake" / "locks").glob("*")):
        time.sleep(0.02)
    group = snakemake_group(copy)
    assert group and group_alive(group), "Snakemake started and took its lock"
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    while group_alive(group):
        assert time.monotonic() < deadline, "the killed run's Snakemake is still running"
        second = kvlab("run", cwd=copy)
        if group_alive(group):  # the run still lives: the second one must have been refused, touching nothing
            assert second.returncode == 1 and "another run is in progress" in second.stderr, second.stderr
            assert f"process group {group}" in second.stderr
        time.sleep(0.05)
    done = run_pipeline(copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert compare(results_of(ROOT), results_of(copy)) == []


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda c: c["measurement"].update(source="/opt/fixtures/kvoffload/ttft.jsonl"),
            "measurement.source: /opt/fixtures/kvoffload/ttft.jsonl: no such file",
        ),
        (
            lambda c: c["replay"]["workloads"]["conversation"].update(trace="data/none.jsonl.gz"),
            "replay.workloads.conversation.trace: data/none.jsonl.gz: no such file",
        ),
        (
            lambda c: c["plans"]["lab"].update(model_config="models/none/config.json"),
            "plans.lab.model_config: models/none/config.json: cannot read: No such file or directory",
        ),
    ],
    ids=["measurement", "trace", "model"],
)
def test_a_missing_input_named_in_the_config_stops_before_any_job(tmp_path, mutate, message):
    copy = scratch_copy(tmp_path)
    edit_config(copy, mutate)
    done = run_pipeline(copy)
    assert done.returncode == 1
    assert done.stderr.endswith(f"{message}\n") and done.stderr.count("\n") == 1, done.stderr
    assert not (copy / "results").exists() and not (copy / "work").exists()


BAD_CONFIGS = {
    # a mutation of the parsed config, and what the message must name (both derived from the config)
    "a negative room": (
        lambda c: c["runs"][next(iter(c["runs"]))].update(gpu=-5),
        lambda c: "-5",
    ),
    "an unknown recorded value": (
        lambda c: c["sweeps"][next(iter(c["sweeps"]))]["record"].update(value="hit_ratio"),
        lambda c: "hit_ratio",
    ),
    "a recorded pass past the passes": (
        lambda c: c["sweeps"][next(iter(c["sweeps"]))]["record"].update(
            {"pass": len(c["sweeps"][next(iter(c["sweeps"]))]["passes"]) + 1}
        ),
        lambda c: (
            f"sweeps.{next(iter(c['sweeps']))}.record.pass is {len(c['sweeps'][next(iter(c['sweeps']))]['passes']) + 1}"
        ),
    ),
}


@pytest.mark.parametrize("name", BAD_CONFIGS)
def test_bad_config_stops_before_any_job(tmp_path, name):
    """Snakemake run directly (not through kvlab run) validates the config before any job too."""
    mutate, message = BAD_CONFIGS[name]
    copy = scratch_copy(tmp_path)
    config = edit_config(copy, mutate)
    done = tool("snakemake", "--cores", "1", cwd=copy)
    assert done.returncode != 0
    assert message(config) in done.stdout + done.stderr
    assert not (copy / "results").exists() and not (copy / "work").exists()


def test_check_names_each_difference_and_the_repair_works(regenerated, tmp_path):
    """kvlab check's lines for an edited config value, a hand-edited, a missing and an extra result; then the
    repairs they name, run: the folder is what a regeneration makes again."""
    copy = without_metadata(regenerated, tmp_path / "copy")
    committed = load_config()["runs"]["offload"]["cpu"]
    edit_config(copy, lambda c: c["runs"]["offload"].update(cpu=committed // 2))  # room for fewer documents
    assert run_pipeline(copy).returncode == 0  # the config change reruns its job
    (copy / "results/baseline.json").write_text("{}\n", encoding="utf-8")
    (copy / "results/cyclic.json").unlink()
    (copy / "results/extra.json").write_text("{}\n", encoding="utf-8")

    lines = compare(results_of(copy), results_of(regenerated))

    assert lines == [
        "results/baseline.json: differs from a fresh regeneration; repair: make run FORCE=results/baseline.json",
        "results/cyclic.json: missing; repair: make run",
        "results/extra.json: not made by the pipeline; repair: rm results/extra.json",
        "results/offload.json: differs from a fresh regeneration; repair: make run FORCE=results/offload.json",
    ]
    edit_config(copy, lambda c: c["runs"]["offload"].update(cpu=committed))  # the config as committed again
    assert run_pipeline(copy).returncode == 0
    assert compare(results_of(copy), results_of(regenerated))[:1] == [lines[0]]  # a hand edit survives a plain run
    assert run_pipeline(copy, "--forcerun", "results/baseline.json").returncode == 0
    (copy / "results/extra.json").unlink()
    assert compare(results_of(copy), results_of(regenerated)) == []


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


def test_the_repository_needs_nothing_outside_it():
    """No tracked file reads the shared folder beside the repository (a user's clone has none)."""
    pattern = re.compile(r"\.\./shared|parent / \"shared\"|\"shared\" /")
    offenders = [
        name
        for name in project_files()
        if name.endswith((".py", ".smk", ".md", ".yaml", ".toml", ".txt")) or name in ("Snakefile", "Makefile")
        if name != "tests/test_workflow.py" and pattern.search((ROOT / name).read_text(encoding="utf-8"))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("left", "planned_steps"),
    [
        ([".venv/bin/python"], ["rm -rf .venv", "-m venv .venv", "pip install"]),  # killed while creating .venv
        ([".venv/bin/python", ".venv/.created"], ["pip install", "touch .venv/.run-installed"]),  # killed in pip
        ([".venv/bin/python", ".venv/.created", ".venv/.run-installed"], ["kvlab run"]),  # installed: just run
    ],
    ids=["venv", "pip", "done"],
)
def test_make_run_redoes_an_install_that_was_killed(tmp_path, left, planned_steps):
    """What a kill during `make run`'s install leaves is never taken as installed: .venv counts only with its
    .created stamp (written last), the packages only with .run-installed (written after pip)."""
    for name in ("Makefile", "requirements.txt", "pyproject.toml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    later = time.time() + 10
    for name in left:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("", encoding="utf-8")
        os.utime(tmp_path / name, (later, later))
    done = subprocess.run(["make", "-n", "run"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for step in planned_steps:
        assert step in done.stdout, (step, done.stdout)
    if "pip install" not in planned_steps:
        assert "pip install" not in done.stdout and "venv" not in done.stdout.replace(".venv/bin/kvlab", "")
