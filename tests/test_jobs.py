"""How the pipeline runs a job (kvlab/workflow/jobs.py, stamps.py): in Snakemake's process or its own, the
result written whole or not at all, the log kept; and the one stamp of code per command."""

import json
import os
import subprocess
import sys
import threading

import pytest
from conftest import ROOT, kvlab

from kvlab.cli import COMMANDS, main
from kvlab.workflow import jobs, stamps

TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
LAB = "replay --workload lab --docs 3 --tokens 100 --block-tokens 10 --gpu-tokens 120"
COLLECT = f"kvlab.cli.{COMMANDS['collect'][0]}"  # the module of `kvlab collect`, as the Snakefile names it


def test_a_job_writes_what_the_command_prints(tmp_path):
    out, log = tmp_path / "point.json", tmp_path / "point.log"
    jobs.run_job(main, LAB, log, stdout=out)
    assert out.read_text() == kvlab(*LAB.split()).stdout
    assert log.read_text() == "" and not (tmp_path / "point.json.tmp").exists()


def test_a_large_trace_job_runs_in_a_process_of_its_own_and_gives_the_same_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(jobs, "OWN_PROCESS_BYTES", 1)  # every trace counts as large
    line = f"replay --workload mooncake --trace {TRACE} --gpu-tokens 1000000 --cpu-tokens 4000000"
    called = []
    jobs.run_job(lambda argv: called.append(argv) or 1, line, tmp_path / "log", stdout=tmp_path / "out.json")
    assert called == []  # never in this process
    assert (tmp_path / "out.json").read_text() == kvlab(*line.split()).stdout


@pytest.mark.parametrize("trace", [False, True])
def test_a_failing_job_raises_keeps_its_log_and_leaves_no_output(tmp_path, trace):
    out, log = tmp_path / "point.json", tmp_path / "point.log"
    out.write_text("OLD\n")
    line = f"replay --workload mooncake --trace {tmp_path / 'missing.jsonl'} --gpu-tokens 1" if trace else LAB + " -x"
    with pytest.raises(jobs.JobError, match=f"kvlab replay failed .*see {log}"):
        jobs.run_job(main, line, log, stdout=out)
    assert log.read_text().startswith("kvlab replay: error: ")
    assert out.read_text() == "OLD\n" and not (tmp_path / "point.json.tmp").exists()


def test_jobs_in_threads_keep_their_outputs_apart(tmp_path):
    """Snakemake runs jobs in threads: each gets its own output and log, whatever the interleaving."""
    lines = [LAB.replace("--gpu-tokens 120", f"--gpu-tokens {gpu}") for gpu in range(0, 400, 20)]
    threads = [
        threading.Thread(
            target=jobs.run_job, args=(main, line, tmp_path / f"{n}.log"), kwargs={"stdout": tmp_path / f"{n}.json"}
        )
        for n, line in enumerate(lines)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for n, line in enumerate(lines):
        assert (tmp_path / f"{n}.json").read_text() == kvlab(*line.split()).stdout


def test_the_code_stamp_follows_the_files_times(tmp_path):
    """One stamp per command lists its files with their times and sizes: rewritten (so newer) when one changes,
    left alone otherwise."""
    root = tmp_path / "copy"
    for name in stamps.command_code(COLLECT):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes((ROOT / name).read_bytes())
    previous = os.getcwd()
    os.chdir(root)
    try:
        path = stamps.code_stamp.__wrapped__("collect", COLLECT, str(root))
        stamp = root / path
        listed = json.loads(stamp.read_text())
        assert sorted(listed) == stamps.command_code(COLLECT)
        before = stamp.stat().st_mtime_ns
        os.utime(stamp, ns=(before - 10**9, before - 10**9))
        stamps.code_stamp.__wrapped__("collect", COLLECT, str(root))
        assert stamp.stat().st_mtime_ns == before - 10**9  # nothing changed: not rewritten
        os.utime(root / "kvlab/report/sweep.py", ns=(10**18, 10**18))
        stamps.code_stamp.__wrapped__("collect", COLLECT, str(root))
        assert stamp.stat().st_mtime_ns > before - 10**9
        assert json.loads(stamp.read_text())["kvlab/report/sweep.py"][0] == 10**18
    finally:
        os.chdir(previous)


def test_the_import_cache_reparses_a_changed_module_and_survives_a_bad_file(tmp_path):
    """work/stamps/imports.json keeps each module's import names by its time and size: a no-op run parses nothing,
    an edited module is parsed again (its new import counts), and a broken cache file is ignored."""
    root = tmp_path / "copy"
    for name in stamps.command_code(COLLECT):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes((ROOT / name).read_bytes())
    cache = root / stamps.STAMPS / "imports.json"

    def files():
        for function in (stamps.imported, stamps.import_cache, stamps.command_code):
            function.cache_clear()  # a new run of Snakemake
        return stamps.command_code(COLLECT, str(root))

    first = files()
    assert sorted(json.loads(cache.read_text())) == first  # every module of the command, parsed once
    written = cache.stat().st_mtime_ns
    assert files() == first and cache.stat().st_mtime_ns == written  # nothing parsed, nothing written
    (root / "kvlab/extra.py").write_text('"""A module the edit imports."""\n')
    leaf = root / "kvlab/report/sweep.py"
    leaf.write_text(leaf.read_text() + "\nimport kvlab.extra\n")
    assert files() == sorted({*first, "kvlab/extra.py"})
    cache.write_text("{not json")
    assert files() == sorted({*first, "kvlab/extra.py"})
    assert "kvlab.extra" in json.loads(cache.read_text())["kvlab/report/sweep.py"][2]


def test_a_small_trace_runs_in_the_pipelines_process_and_a_large_one_in_its_own(tmp_path, monkeypatch):
    """jobs.OWN_PROCESS_BYTES: a job whose trace file is that large or larger (or cannot be sized) starts a process
    of its own; one that reads a smaller trace, or none, runs in Snakemake's."""
    monkeypatch.setattr(jobs, "OWN_PROCESS_BYTES", 1000)
    small, large = tmp_path / "small.jsonl", tmp_path / "large.jsonl"
    small.write_bytes(b"x" * 999)
    large.write_bytes(b"x" * 1000)
    assert not jobs._large_trace(["replay", "--trace", str(small)])
    assert jobs._large_trace(["replay", "--trace", str(large)])
    assert jobs._large_trace(["replay", "--trace", str(tmp_path / "missing.jsonl")])
    assert not jobs._large_trace(["replay", "--workload", "lab"])


SLOW_MARKS = """
import base64, pathlib, time
from snakemake.persistence import PersistenceBase
started = PersistenceBase.started
def late(self, job, external_jobid=None):  # the executor's marking, slowed: the window a kill can fall in
    time.sleep(0.3)
    started(self, job, external_jobid)
PersistenceBase.started = late

rule made:
    output: "out.txt"
    run:
        marker = pathlib.Path(".snakemake", "incomplete", base64.urlsafe_b64encode(b"out.txt").decode())
        pathlib.Path(output[0]).write_text(str(marker.is_file()))
"""


@pytest.mark.parametrize("marked_first", [True, False])
def test_a_jobs_output_is_marked_incomplete_before_the_job_runs(tmp_path, marked_first):
    """kvlab.workflow.runs.marked_before_running: a job on Snakemake's thread pool finds its output already marked
    incomplete (Snakemake's file marker), however late the executor's own marking comes; without it, the job runs
    and finishes unmarked (what a kill at that moment left: an output the recovery run did not redo)."""
    (tmp_path / "Snakefile").write_text(SLOW_MARKS, encoding="utf-8")
    code = "import sys; from kvlab.workflow import runs; runs.marked_before_running = lambda: None; runs.main()"
    done = subprocess.run(
        [sys.executable, *(["-m", "kvlab.workflow.runs"] if marked_first else ["-c", code])]
        + ["--cores", "1", "--force-use-threads", "--quiet"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.txt").read_text(encoding="utf-8") == str(marked_first)
