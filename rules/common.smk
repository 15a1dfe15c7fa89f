# Input functions that turn config.yaml into targets and flag values (the logic is kvlab/workflow/: paths.py,
# commands.py, checks.py), as the snakemake-workflows pipelines keep theirs; each rule's `run:` runs `kvlab` with
# its job's line (job_line: built once, by commands.py) and the files the rule adds.
# The config is validated here, before any job runs (`make run` checks the file itself first: `kvlab config`).
import functools
import os
import sys

from snakemake.utils import format as line

from kvlab.cli import COMMANDS, main
from kvlab.workflow import checks, commands, jobs, paths, stamps
from kvlab.workflow.config import validate

# Checked once, by the run itself (kvlab run has, before it started Snakemake: kvlab/workflow/runs.py); a job's own
# process (on a cluster, each job's) parses the Snakefile again.
if workflow.is_main_process and not os.environ.get("KVLAB_CONFIG_CHECKED"):
    validate(config)
    checks.check_config(config)

# A job that runs a process of its own (a large trace's) runs `python -m kvlab` with the interpreter that runs Snakemake
# (the project's .venv).
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")


def kvlab(command, log, stdout=None):
    """Run `kvlab COMMAND` in Snakemake's process (kvlab/workflow/jobs.py): COMMAND is formatted from the job's
    input, output, params and wildcards as a shell directive would be; its standard error goes to the log, and
    with ``stdout`` its standard output to that file, written whole."""
    jobs.run_job(main, line(command, stepout=2), log[0], stdout=stdout)


def artifact(path, **shown):
    """An output under results/ (committed): Snakemake keeps it while its job runs and puts it back if the job
    fails (`update`), so a failing job never costs a committed artifact; with ``shown`` (a caption, a category)
    it is in the report too."""
    path = update(path)
    return report(path, **shown) if shown else path


def stamp(rule, *settings):
    """An input: the job's settings (each a value or a function of the wildcards) in a stamp file under
    work/stamps/ that changes only when they do (kvlab/workflow/stamps.py, write_stamp)."""

    def path(wildcards):
        values = [setting(wildcards) if callable(setting) else setting for setting in settings]
        return stamps.write_stamp(rule, dict(wildcards), values)

    return path


def job_line(rule):
    """A params function: the job's command line after `kvlab`, built once (kvlab/workflow/commands.py) for the job,
    for its stamp (line_stamp) and for `kvlab config`'s check before any job runs; the rule adds its files.
    """

    def line(wildcards):
        return commands.LINES[rule](config, **dict(wildcards))

    return line


def line_stamp(rule, *more):
    """A stamp input of the job's whole command line (:func:`job_line`'s), and of ``more`` settings (the inputs a
    job folds): a changed flag reruns exactly its jobs."""
    return stamp(rule, job_line(rule), *more)


@functools.cache  # once per command and run: the code does not change while the DAG is built
def code(command):
    """The stamp of the kvlab source files a `kvlab COMMAND` job runs (derived from the imports): it changes
    when one of them does."""
    return stamps.code_stamp(command, f"kvlab.cli.{COMMANDS[command][0]}")


def with_trace(inputs, workload):
    """``inputs`` plus the trace file of a trace workload (so that a new trace reruns it)."""
    trace = paths.replay_trace(config, workload)
    if trace is not None:
        inputs["trace"] = trace
    return inputs


def of(function, *names):
    """An input function: ``function(config, *wildcards named by names)``."""
    return lambda wildcards: function(config, *(getattr(wildcards, name) for name in names))


PLOT_INPUTS = paths.plot_inputs(config)


def replay_inputs(wildcards):
    return with_trace({"code": code("replay")}, wildcards.workload)


def policy_table_inputs(wildcards):
    return with_trace({"code": code("policies")}, wildcards.workload)


def mrc_inputs(wildcards):
    return with_trace({"code": code("mrc")}, wildcards.workload)


def plan_inputs(wildcards):
    workload = commands.plan_workload(config, wildcards.plan)
    inputs = {"code": code("plan"), "model": paths.plan_model(config, wildcards.plan)}
    return with_trace(inputs, workload)


def search_inputs(wildcards):
    inputs = {"code": code("search"), "model": paths.search_model(config, wildcards.search)}
    trace = config["searches"][wildcards.search]["workload"].get("trace")
    if trace:
        inputs["trace"] = trace
    return inputs


def search_evaluations(wildcards):
    """The evaluations a search's answer reads: one per candidate its checkpoint listed."""
    listed = checkpoints.search_candidates.get(search=wildcards.search).output[0]
    with open(listed, encoding="utf-8") as lines:
        ids = [line.split()[0] for line in lines if line.strip()]
    folder = paths.search_folder(wildcards.search)
    return [f"{folder}/evaluations/{identifier}.json" for identifier in ids]


def ttft_budgets_inputs(wildcards):
    inputs = {"code": code("ttft"), "model": paths.TTFT_MODEL}
    inputs["model_config"] = paths.plan_model(config, wildcards.plan)
    return with_trace(inputs, commands.plan_workload(config, wildcards.plan))


def hardware_inputs(part, workload=None, command="ttft"):
    """The inputs of a job priced from the hardware (``ttft.hardware.<part>``): the code of its ``kvlab COMMAND``,
    its model's config.json, the system's file if the config names one, and the trace of ``workload`` if it reads
    one."""
    inputs = {"code": code(command), "model_config": commands.hardware_model(config, part)}
    system = paths.hardware_system(config)
    if system is not None:
        inputs["system"] = system
    return with_trace(inputs, workload) if workload else inputs


def hardware_budgets_inputs(wildcards):
    return hardware_inputs("budgets", wildcards.workload)


def hardware_simulate_inputs(wildcards):
    return hardware_inputs("simulate", wildcards.workload, "simulate")


def plot_artifacts(wildcards):
    return PLOT_INPUTS[wildcards.plot]
