"""Every config Snakemake reads is checked as data before any of it runs (issue 22): YTE templating in
config.yaml, in a ``--configfile`` or in an abbreviation of it never runs code, a ``--config`` override is
checked with the rest, and whatever a job would refuse costs no committed artifact (Snakemake puts it back)."""

import subprocess
import sys

import pytest
import yaml
from conftest import load_config, scratch_copy, tool

pytestmark = pytest.mark.pipeline

YTE = '__use_yte__: true\n?__import__("os").system("touch pwned") or "x": 1\n'


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A scratch copy of the project with its committed results."""
    return scratch_copy(tmp_path_factory.mktemp("project"), results=True)


def kvlab_run(folder, *args):
    command = [sys.executable, "-m", "kvlab", "run", *args]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=300)


def refused(done):
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


@pytest.mark.parametrize(
    "flags",
    [
        ["--", "--cores", "1", "--configfile", "evil.yaml"],
        ["--", "--cores", "1", "--configfiles=evil.yaml"],
        ["--", "--cores", "1", "--configfi", "evil.yaml"],  # an abbreviation Snakemake takes
        ["--config", "evil.yaml"],
    ],
)
def test_yte_in_a_configfile_never_runs(project, flags):
    (project / "evil.yaml").write_text(YTE, encoding="utf-8")
    line = refused(kvlab_run(project, *flags))
    assert not (project / "pwned").exists()
    assert "evil.yaml" in line or "Snakemake's flags" in line, line


def test_yte_in_config_yaml_never_runs_even_under_plain_snakemake(project, tmp_path):
    """kvlab run refuses it in one line; plain snakemake (the Snakefile reads its configfile through kvlab's
    loader) refuses it too, before any code of it runs."""
    config = project / "config.yaml"
    kept = config.read_text(encoding="utf-8")
    try:
        config.write_text(YTE + kept, encoding="utf-8")
        assert "__use_yte__" in refused(kvlab_run(project))
        done = tool("snakemake", "--cores", "1", "--dry-run", cwd=project)
        assert done.returncode != 0 and "__use_yte__" in done.stdout + done.stderr
    finally:
        config.write_text(kept, encoding="utf-8")
    assert not (project / "pwned").exists()


def test_a_config_override_is_checked_with_the_rest(project):
    """``--config`` values reach the merged config: a system file as the measurement is refused, as a user's
    own file would be, before any job copies it."""
    line = refused(kvlab_run(project, "--", "--cores", "1", "--config", "measurement={source: /etc/passwd}"))
    assert "measurement.source" in line and "--config" in line
    assert refused(kvlab_run(project, "--", "--cores", "1", "-C", "runs=[]"))


def test_a_failing_job_keeps_the_committed_artifact(project):
    """A value only the job refuses (plain snakemake does not run the job-line check of `kvlab config`): the
    job fails, and Snakemake restores the committed file it had set aside (``update``) instead of deleting it."""
    config = load_config()
    run = next(iter(config["runs"]))
    target = project / "results" / f"{run}.json"
    before = target.read_bytes()
    config["runs"][run]["docs"] = 10**8  # more documents than the lab script reads
    (project / "config.yaml").rename(project / "config.kept")
    try:
        (project / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        assert "kvlab scenario refuses it" in refused(kvlab_run(project))  # kvlab run says so before any job
        done = tool(
            "snakemake", "--cores", "1", "--forcerun", f"results/{run}.json", "--", f"results/{run}.json", cwd=project
        )
    finally:
        (project / "config.kept").replace(project / "config.yaml")
    assert done.returncode != 0
    assert "Restored previous version" in done.stdout + done.stderr
    assert target.read_bytes() == before


FAILING_RUN = """
from pathlib import Path
Path("results/kept.json").write_text("new\\n")
Path("results/gone.json").unlink()
Path("results/added").mkdir()
Path("results/added/point.json").write_text("new\\n")
raise SystemExit(CODE)
"""


@pytest.mark.parametrize("code", [1, 0])
def test_a_run_that_fails_halfway_leaves_results_as_they_were(tmp_path, capfd, code):
    """Jobs that finished before one failed leave no mix of old and new results: what they replaced is put back
    with its old time (so the next run makes it again), what they added is gone; a run that succeeds keeps all."""
    from kvlab.workflow.runs import run_pipeline

    results = tmp_path / "results"
    results.mkdir()
    for name in ("kept.json", "gone.json", "same.json"):
        (results / name).write_text(f"{name} as committed\n", encoding="utf-8")
    before = {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in results.iterdir()}
    fake = [sys.executable, "-c", FAILING_RUN.replace("CODE", str(code))]

    assert run_pipeline([], folder=tmp_path, snakemake=fake) == code

    after = {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in results.rglob("*") if path.is_file()}
    said = capfd.readouterr().err
    if code:
        assert after == before
        assert said == "kvlab: the run failed; results/ is as it was before it (2 files put back, 1 removed)\n"
    else:
        assert after["kept.json"][0] == b"new\n" and "gone.json" not in after and "point.json" in after
        assert said == ""
