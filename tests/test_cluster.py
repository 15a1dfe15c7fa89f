"""The workflow runs unchanged through a Snakemake executor plugin, as on a cluster: profiles/cluster-generic submits
every job through its submit.sh, which runs Snakemake's job script as a process of its own, from an empty
environment, sharing only the file system. In a copy of the regenerated project (without Snakemake's metadata),
one output of every rule is removed; `kvlab run` with the profile and those outputs as its targets redoes those jobs,
each as a submitted job, and every artifact is then byte for byte the committed one."""

import re
import shutil
from collections import Counter

import pytest
from conftest import ROOT, run_pipeline, tool

from kvlab.workflow.freshness import compare, results_of

pytestmark = pytest.mark.pipeline

PROFILE = "profiles/cluster-generic"
SUBMITTED = "logs/cluster/submitted.log"  # "ID SCRIPT" per job that submit.sh started


def outputs_by_rule(folder):
    """``{rule: [its outputs]}`` from Snakemake's summary of the folder (every rule but `all`, which has none)."""
    done = tool("snakemake", "--summary", "--cores", "1", cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    outputs = {}
    for line in done.stdout.splitlines()[1:]:  # output_file, date, rule, ...
        path, _, rule, *_ = line.split("\t")
        outputs.setdefault(rule, []).append(path)
    return outputs


@pytest.fixture(scope="module")
def cluster_run(regenerated, tmp_path_factory):
    """``(folder, the outputs removed by rule, the run's output)``: the run through the profile in a copy of the
    regenerated project whose first output of each rule was removed."""
    folder = tmp_path_factory.mktemp("cluster") / "copy"
    shutil.copytree(regenerated, folder, symlinks=True, ignore=shutil.ignore_patterns(".snakemake"))
    removed = {rule: paths[0] for rule, paths in outputs_by_rule(folder).items()}
    for path in removed.values():
        (folder / path).unlink()
    done = run_pipeline(folder, "--profile", PROFILE, *removed.values())
    assert done.returncode == 0, done.stdout + done.stderr
    return folder, removed, done.stdout + done.stderr


def local_rules():
    """The rules the workflow runs in the submitting process (``localrule: True`` in their block), besides `all`."""
    found = set()
    for path in sorted((ROOT / "rules").glob("*.smk")):
        for block in re.split(
            r"^(?=\s*(?:rule|checkpoint) \w+:)", path.read_text(encoding="utf-8"), flags=re.MULTILINE
        ):
            name = re.match(r"\s*(?:rule|checkpoint) (\w+):", block)
            if name and re.search(r"^\s+localrule: True", block, flags=re.MULTILINE):
                found.add(name.group(1))
    return found


def submitted(folder):
    """``{job id: rule}`` of the jobs submit.sh started (its job scripts are snakejob.RULE.JOBID.sh)."""
    lines = (folder / SUBMITTED).read_text(encoding="utf-8").splitlines()
    return {job: script.split(".")[1] for job, script in (line.split() for line in lines)}


def test_the_run_through_the_plugin_makes_the_committed_results(cluster_run):
    folder, removed, _ = cluster_run
    assert all((folder / path).is_file() for path in removed.values())
    assert compare(results_of(ROOT), results_of(folder)) == []


def test_every_job_went_through_the_submit_script_and_succeeded(cluster_run):
    """Each job the run started (a `rule` block in its log) is one job that submit.sh started, under the id
    Snakemake reports, but for the short rules the workflow marks local (drawn, copied, folded in the submitting
    process, a `localrule` block); every rule of the workflow was among them, and every job's own exit
    status, written beside its output, is 0."""
    folder, removed, output = cluster_run
    jobs, local = submitted(folder), local_rules()
    assert {"plot", "measurement_copy"} <= local  # the figures and the copy at least
    started = re.findall(r"^(?:rule|checkpoint) (\w+):$", output, flags=re.MULTILINE)  # a checkpoint is a job too
    assert Counter(jobs.values()) == Counter(started)
    assert set(re.findall(r"^local(?:rule|checkpoint) (\w+):$", output, flags=re.MULTILINE)) == local & set(removed)
    assert set(re.findall(r"with external jobid '([^']+)'", output)) == set(jobs)
    assert set(jobs.values()) == set(removed) - local
    for job in jobs:
        assert (folder / "logs" / "cluster" / f"{job}.exit").read_text(encoding="utf-8") == "0\n", job
