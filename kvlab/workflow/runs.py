"""One pipeline run at a time per folder, every config it reads checked as data first, and a clean start after a
run that was killed.

A run holds an exclusive lock on a file under ``.snakemake/`` for its whole life, and so does every process of
its tree: Snakemake inherits the locked file, and so does each job process it starts (``KVLAB_RUN_LOCK_FD``).
The kernel drops the lock only when the last of them exits, however they exit, so a second run stops at once
and names the first while any of it lives (a ``kill -9`` of ``kvlab run`` alone leaves no Snakemake behind
unnoticed), and a run that does hold the lock knows that any Snakemake lock or temporary file in the folder
belongs to a dead run: they are removed before Snakemake starts, and Snakemake reruns what it left incomplete.
Snakemake runs in a process group of its own with its jobs (a Ctrl-C or a ``kill`` of ``kvlab run`` is passed on
to it once, as a Ctrl-C), and on Linux each process of the tree is killed when its parent dies
(``PR_SET_PDEATHSIG``): a ``kill -9`` of ``kvlab run`` kills the whole run, and the next one starts clean.
"""

import contextlib
import ctypes
import fcntl
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["LOCK", "RunError", "hold_lock", "run_pipeline", "snakemake_sources"]

LOCK = Path(".snakemake", "kvlab-run.lock")
LOCK_FD = "KVLAB_RUN_LOCK_FD"  # the locked file's descriptor, inherited by Snakemake and its job processes
CHECKED = "KVLAB_CONFIG_CHECKED"  # set for the Snakemake that kvlab run starts: it checked the config already
GO_FD = "KVLAB_RUN_GO_FD"  # the pipe Snakemake's process waits on, once imported, until kvlab run's checks pass
TEMPORARY = ("results/**/*.tmp", "work/**/*.tmp")  # a job's and a writer's unfinished files (never tracked)
WORKFLOW_CONFIG = "config.yaml"  # the Snakefile's configfile


class RunError(RuntimeError):
    """The run cannot start; the message is one line."""


def hold_lock(folder):
    """The open lock file, locked for this process; RunError naming the run that holds it."""
    path = Path(folder, LOCK)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+", encoding="utf-8")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown"
        handle.close()
        raise RunError(f"another run is in progress in this folder (pid {holder}); wait for it or stop it") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def die_with_parent(sig):
    """A ``preexec_fn``: the child gets ``sig`` when the process that started it dies (Linux; elsewhere nothing)."""

    def arm():
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG

    return arm if sys.platform.startswith("linux") else None


def job_process(command, **kwargs):
    """``subprocess.run`` for a job's own process: it holds the run's lock too and dies with Snakemake."""
    inherited = os.environ.get(LOCK_FD, "")
    fds = ()
    if inherited.isdigit():
        with contextlib.suppress(OSError):  # not open here (a job on another node): nothing to pass on
            fcntl.fcntl(int(inherited), fcntl.F_GETFD)
            fds = (int(inherited),)
    return subprocess.run(command, pass_fds=fds, preexec_fn=die_with_parent(signal.SIGKILL), **kwargs)


def clean_dead_run(folder, snakemake):
    """Remove what a killed run left: temporary files, and Snakemake's own lock (through ``--unlock``)."""
    for pattern in TEMPORARY:
        for path in Path(folder).glob(pattern):
            if path.is_file():
                path.unlink()
    locks = Path(folder, ".snakemake", "locks")
    if locks.is_dir() and any(locks.iterdir()):
        subprocess.run([*snakemake, "--unlock"], cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def warm_kernels(folder):
    """Compile the folder's kernels once before the jobs start, rather than in every job that starts at once: its two
    parts (:mod:`kvlab.workflow.kernels`) side by side."""
    from kvlab.util.kernels import compiled
    from kvlab.workflow.kernels import PARTS

    package = Path(folder, "kvlab")
    if compiled(package):
        return
    print("kvlab: compiling the kernels once (numba, cached beside the code) ...", flush=True)
    parts = [subprocess.Popen([sys.executable, "-m", "kvlab.workflow.kernels", part], cwd=folder) for part in PARTS]
    for process in parts:
        process.wait()  # a failure shows in the jobs


CONFIG_FLAGS = ("--conf", "--prof", "--workflow-p", "--repl", "--dir")  # what starts any flag that sets the config


def may_set_config(argument):
    """Whether a Snakemake argument may bring a config in (a config file, an override, a profile, another folder):
    then Snakemake's own parser reads the flags; else config.yaml is all there is (no import of Snakemake)."""
    if argument.startswith("--"):
        return argument.startswith(CONFIG_FLAGS)
    return argument.startswith("-") and any(letter in argument for letter in "Cd")  # -C, -d, and in a cluster


def snakemake_sources(arguments):
    """The configs Snakemake will read for ``arguments`` (its own flags, in this folder), in the order it merges
    them: ``[(name, data, composed root or None)]``, each read as data (never YTE). Snakemake's own parser reads
    the flags (so an abbreviation, ``-C`` or a profile's ``configfile`` are found as Snakemake finds them); flags
    it refuses are left for Snakemake to refuse."""
    from kvlab.workflow.config import load_mapping

    if not any(map(may_set_config, arguments)) and "SNAKEMAKE_PROFILE" not in os.environ:
        return [(WORKFLOW_CONFIG, *load_mapping(WORKFLOW_CONFIG))]  # the Snakefile's configfile alone
    from snakemake.cli import parse_args, parse_config

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            _, args = parse_args(list(arguments))
    except SystemExit as done:  # its usage error, or its --help and --version (Snakemake then says them itself)
        if done.code:
            lines = said.getvalue().strip().splitlines()
            raise RunError(f"Snakemake's flags: {(lines or ['refused'])[-1].partition('error: ')[2]}") from None
        return []
    except Exception as error:  # noqa: BLE001 - any refusal of Snakemake's parser, in its own words
        said = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise RunError(f"Snakemake's flags: {said}") from None
    sources = []
    if not getattr(args, "replace_workflow_config", False) or not (args.configfile or args.config):
        sources.append((WORKFLOW_CONFIG, *load_mapping(WORKFLOW_CONFIG)))
    for path in args.configfile or ():
        sources.append((str(path), *load_mapping(path)))
    if args.config:
        try:
            entries = parse_config(args.config)
        except ValueError as error:
            raise RunError(f"--config: {error}") from None
        sources.append(("--config " + " ".join(args.config), entries, None))
    return sources


def run_pipeline(arguments=(), folder=".", snakemake=None, check=None):
    """Run Snakemake in ``folder`` with ``arguments`` as the only run there; return its exit code. Snakemake runs
    through :func:`main` (every config file it reads checked as data), holding the lock with this process. ``check``
    (kvlab run's: the configs Snakemake will read) runs while Snakemake's process starts: that process imports
    Snakemake, then waits for this one (a pipe, :data:`GO_FD`) before it reads anything, and ends unstarted when
    ``check`` raises. A run that fails leaves ``results/`` as it was (:func:`put_back`)."""
    snakemake = snakemake or [sys.executable, "-m", "kvlab.workflow.runs"]
    lock = hold_lock(folder)
    try:
        clean_dead_run(folder, snakemake)
        results = Path(folder, "results")
        before = committed(results)
        fd = lock.fileno()
        wait, go = os.pipe()
        child = subprocess.Popen(
            [*snakemake, *arguments],
            cwd=folder,
            pass_fds=(fd, wait),
            env={**os.environ, LOCK_FD: str(fd), CHECKED: "1", GO_FD: str(wait)},
            process_group=0,  # its jobs with it: `kill -- -GROUP` stops the whole run
            preexec_fn=die_with_parent(signal.SIGKILL),
        )
        os.close(wait)
        try:
            if check is not None:
                check()
            warm_kernels(folder)
        except BaseException:
            os.close(go)  # Snakemake's process reads no go and ends
            child.wait()
            raise
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}, Snakemake's process group {child.pid}: kill -- -{child.pid}\n")
        lock.flush()
        forward = {sig: signal.signal(sig, lambda *_: child.send_signal(signal.SIGINT)) for sig in STOPS}
        try:
            os.write(go, b"1")
            os.close(go)
            code = child.wait()
        finally:
            for sig, handler in forward.items():
                signal.signal(sig, handler)
        if code:
            put_back(results, before)
        return code
    finally:
        lock.close()


def committed(folder):
    """Every file under ``folder`` (``results/``: a few MB of JSON, CSV and plots): ``{path: (bytes, times)}``."""
    found = {}
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and not path.is_symlink():
            status = path.stat()
            found[path] = (path.read_bytes(), (status.st_atime_ns, status.st_mtime_ns))
    return found


def put_back(folder, before):
    """``folder`` as it was before a run that failed (``before``: :func:`committed`'s), so that a run that fails
    halfway leaves no mix of old and new results: each file a finished job replaced or removed is back, with its
    old time (older than what changed, so the next run makes it again: rerun-triggers mtime), and each file the
    run added is gone."""
    from kvlab.util.files import write_together

    now = committed(folder)
    changed = {path: data for path, (data, _) in before.items() if now.get(path, (None,))[0] != data}
    write_together({str(path): data for path, data in changed.items()})
    for path in changed:
        os.utime(path, ns=before[path][1])
    added = [path for path in now if path not in before]
    for path in added:
        path.unlink()
    if changed or added:
        print(
            f"kvlab: the run failed; results/ is as it was before it ({len(changed)} files put back, {len(added)}"
            " removed)",
            file=sys.stderr,
            flush=True,
        )


# Passed on to Snakemake as a Ctrl-C, once (its group is its own): its orderly stop. Its own SIGTERM handler was
# seen to hang (two threads waiting on each other), so a stop is never sent as SIGTERM.
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def main(argv=None):
    """``python -m kvlab.workflow.runs SNAKEMAKE-FLAGS``: Snakemake's command line (kvlab run has read every config
    file it names as data first)."""
    from snakemake.cli import main as snakemake

    go = os.environ.pop(GO_FD, "")
    if go.isdigit() and os.read(int(go), 1) != b"1":
        os._exit(0)  # kvlab run stopped before it: a config or a flag it refused (it says which)
    marked_before_running()
    try:
        snakemake(sys.argv[1:] if argv is None else argv)
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    else:
        code = 0
    # Snakemake's scheduler leaves delayed wake-ups (threading.Timer, not daemons) armed after its last pass, and
    # the interpreter's exit would wait for each to fire, a second each (snakemake/snakemake#3744 reports the extra
    # passes): the run is over, so the process ends at once, what its jobs keep for later written first (the kernel
    # database's memo, else written at exit) and its logs and streams flushed.
    import logging

    database = sys.modules.get("kvlab.latency.database")
    if database is not None:
        database.flush()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def marked_before_running():
    """A job's outputs marked incomplete before the job can run. Snakemake 9's local executor hands a job to its
    thread pool first (``executors/local.py`` ``run_job``: ``run_single_job`` submits it) and only then marks its
    outputs (``report_job_submission`` in snakemake_interface_executor_plugins ``executors/real.py`` calls
    ``job.register()``, which writes the markers of ``persistence.started``). A job run on a pool thread (the
    profile's ``force-use-threads``) can finish in those few milliseconds, and a kill then leaves a whole output with
    no marker and no metadata record: the recovery run (``rerun-incomplete``) takes it as up to date, and ``snakemake
    --report`` says "Missing metadata" for it (seen 1 in 27 kills at the Nth output; a delay put into ``started``
    made it happen every time). Marking first closes the window; the executor's own call marks them again."""
    from snakemake.executors.local import Executor

    run_job = Executor.run_job

    def run_marked(self, job):
        job.register()
        run_job(self, job)

    Executor.run_job = run_marked


if __name__ == "__main__":
    main()
