"""Are the committed results what the committed code and config make? Regenerate them all in a scratch copy of
the project and compare, file by file, byte for byte.

Truthful by construction: it does not trust file times or Snakemake's metadata, so a hand-edited, missing or
extra file under results/, an edited config value and an edited module are each found, in a fresh clone as in
a working copy. The scratch copy lives in ``work/check/`` (git-ignored) and keeps its compiled-code caches
between checks.
"""

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from kvlab.util.kernels import copy_cache

__all__ = ["SCRATCH", "check", "compare", "differences", "project_files", "regenerate"]

SCRATCH = Path("work", "check")
RESULTS = "results"


def project_files(folder="."):
    """The project as it would be committed: tracked files and untracked ones git does not ignore."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=folder,
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        raise RuntimeError(f"{Path(folder).resolve()}: not a git checkout (git ls-files failed)") from None
    return sorted(name for name in listing.decode().split("\0") if name and Path(folder, name).is_file())


def regenerate(folder=".", scratch=SCRATCH, snakemake=None):
    """Copy the project (but its results) into ``scratch`` and regenerate every artifact there; return the
    scratch folder. RuntimeError with Snakemake's last lines if the regeneration fails."""
    folder, scratch = Path(folder), Path(folder, scratch)
    for stale in (RESULTS, "work", "logs", ".snakemake"):
        shutil.rmtree(scratch / stale, ignore_errors=True)
    for name in project_files(folder):
        if name.startswith(f"{RESULTS}/"):
            continue
        target = scratch / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(folder / name, target)  # keeps file times, so the compiled-code cache stays valid
    copy_cache(folder / "kvlab", scratch / "kvlab")  # and the compiled kernels come along
    snakemake = snakemake or [sys.executable, "-m", "snakemake"]
    done = subprocess.run([*snakemake, "--quiet", "all"], cwd=scratch, capture_output=True, text=True)
    if done.returncode:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])
        raise RuntimeError(f"regenerating results/ failed: {tail}")
    return scratch


def results_of(folder):
    """``{relative path: bytes}`` of the files under ``folder/results`` (temporary files aside)."""
    base = Path(folder)
    return {
        path.relative_to(base).as_posix(): path.read_bytes()
        for path in sorted((base / RESULTS).rglob("*"))
        if path.is_file() and not path.name.endswith(".tmp")
    }


def rerun(name):
    """The command that regenerates the artifact ``name``, quoted for a POSIX shell. Make splits a variable's value
    on spaces and expands ``$`` in it whatever the quotes, so a name that needs quoting goes straight to the
    command ``make run FORCE=`` runs."""
    quoted = shlex.quote(name)
    return f"make run FORCE={name}" if quoted == name else f".venv/bin/kvlab run -- --forcerun {quoted}"


def compare(present, fresh):
    """One line per difference between the results ``present`` and a ``fresh`` regeneration, with the command
    that repairs it (every path in it quoted for the shell: ``shlex.split`` gives it back)."""
    lines = []
    for name in sorted(set(present) | set(fresh)):
        if name not in fresh:
            lines.append(f"{name}: not made by the pipeline; repair: rm {shlex.quote(name)}")
        elif name not in present:
            lines.append(f"{name}: missing; repair: make run")
        elif present[name] != fresh[name]:
            lines.append(f"{name}: differs from a fresh regeneration; repair: {rerun(name)}")
    return lines


def check(folder=".", scratch=SCRATCH):
    """``(lines, compared)``: the lines of :func:`compare` for the project in ``folder`` (empty when results/ is up
    to date), and how many artifacts were compared (those under results/ and those a regeneration makes)."""
    regenerated = regenerate(folder, scratch)
    present, fresh = results_of(folder), results_of(regenerated)
    return compare(present, fresh), len(set(present) | set(fresh))


def differences(folder=".", scratch=SCRATCH):
    """The lines of :func:`compare` for the project in ``folder`` (empty when results/ is up to date)."""
    return check(folder, scratch)[0]
