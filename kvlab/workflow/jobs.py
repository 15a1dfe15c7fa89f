"""The job runner: ``kvlab COMMAND`` run inside Snakemake's process (or, for a trace, a process of its own), its
standard error to the job's log and its result written whole."""

import contextlib
import os
import shlex
import subprocess
import sys
import threading
from pathlib import Path


class JobError(RuntimeError):
    """A job's command failed; its log says why."""


JOB_LOCK = threading.Lock()  # one job in this process at a time: commands write through sys.stdout and stderr
OWN_PROCESS_BYTES = 32 << 20  # a trace file this large is read in a process of its own; a smaller one (the
# conversation trace: 770 KiB) takes less than the second of a process's start-up (the pipeline: 17 s of CPU so,
# 35 s with every trace job in a process of its own)


def _large_trace(argv):
    """Whether the command reads a trace file of :data:`OWN_PROCESS_BYTES` or more (or one it cannot size: its
    process says why)."""
    at = argv.index("--trace") + 1 if "--trace" in argv else len(argv)
    if at >= len(argv):
        return False
    try:
        return os.path.getsize(argv[at]) >= OWN_PROCESS_BYTES
    except OSError:
        return True


def run_job(main, line, log, stdout=None):
    """Run ``kvlab LINE`` (shell-quoted) as a Snakemake job through ``main`` (the command table's entry,
    :func:`kvlab.cli.main`, which the Snakefile hands in): its standard error to ``log`` and, where the command
    writes its result there, its standard output to ``stdout`` whole (a temporary file renamed at the end).

    A job runs inside Snakemake's own process (the profile's ``force-use-threads``): what a command imports
    (numpy, pandas, numba and its kernels, matplotlib) is imported once per run, not once per job, which was
    most of a small job's cost. A job that reads a trace of :data:`OWN_PROCESS_BYTES` or more (``--trace``),
    whose work outweighs any start-up, runs in a process of its own instead, so that large jobs run side by side
    on every core.
    """
    from kvlab.workflow.runs import job_process

    argv = shlex.split(line)
    temporary = Path(f"{stdout}.tmp") if stdout else None
    with open(log, "w", encoding="utf-8") as errors:
        with open(temporary, "w", encoding="utf-8") if temporary else contextlib.nullcontext(errors) as out:
            if _large_trace(argv):
                command = [sys.executable, "-m", "kvlab", *argv]
                code = job_process(command, stdout=out, stderr=errors, stdin=subprocess.DEVNULL).returncode
            else:
                with JOB_LOCK, contextlib.redirect_stdout(out), contextlib.redirect_stderr(errors):
                    code = main(argv)
    if code:
        if temporary:
            temporary.unlink(missing_ok=True)
        raise JobError(f"kvlab {argv[0]} failed (exit code {code}); see {log}")
    if temporary:
        os.replace(temporary, stdout)


def write_document(path, document, log):
    """Write ``document`` (values of the config a job's artifact holds as they are) as JSON in the artifacts'
    one layout, whole; the log says what was written."""
    from kvlab.util.files import dump_json, write_together

    write_together({path: dump_json(document)})
    Path(log).write_text(f"wrote {path}\n", encoding="utf-8")
