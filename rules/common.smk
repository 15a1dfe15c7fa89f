# Helpers that turn config.yaml into targets and command lines (the logic is kvlab/pipeline.py).
# The config is validated here, before any job runs (`make run` checks the file itself first: `kvlab config`).
import os
import sys

from snakemake.utils import format as line

from kvlab import pipeline
from kvlab.config import validate

# Checked once, by the run itself (kvlab run has, before it started Snakemake: kvlab/runs.py); a job's own
# process (on a cluster, each job's) parses the Snakefile again.
if workflow.is_main_process and not os.environ.get("KVLAB_CONFIG_CHECKED"):
    validate(config)
    pipeline.check_config(config)

# Jobs run `kvlab COMMAND` through pipeline.run_job; `line("...")` formats a command line from the job's
# input, output, params and wildcards, as a shell directive would. A job that runs a process of its own
# (a trace's) runs `python -m kvlab` with the interpreter that runs Snakemake (the project's .venv).
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")


def run_args(wildcards):
    return pipeline.run_args(config, wildcards.run)


def sweep_point_args(wildcards):
    return pipeline.sweep_point_args(config, wildcards.sweep, wildcards.value)


def sweep_points(wildcards):
    return pipeline.sweep_points(config, wildcards.sweep)


def sweep_record(wildcards):
    return config["sweeps"][wildcards.sweep]["record"]


def artifact(path, **shown):
    """An output under results/ (committed): Snakemake keeps it while its job runs and puts it back if the job
    fails (`update`), so a failing job never costs a committed artifact; with ``shown`` (a caption, a category)
    it is in the report too."""
    path = update(path)
    return report(path, **shown) if shown else path


def stamp(rule, *settings):
    """An input: the job's settings (each a value or a function of the wildcards) in a stamp file under
    work/stamps/ that changes only when they do (kvlab/pipeline.py, write_stamp)."""

    def path(wildcards):
        values = [setting(wildcards) if callable(setting) else setting for setting in settings]
        return pipeline.write_stamp(rule, dict(wildcards), values)

    return path


def code(command):
    """The stamp of the kvlab source files a `kvlab COMMAND` job runs (derived from the imports): it changes
    when one of them does."""
    return pipeline.code_stamp(command)


PLOT_INPUTS = pipeline.plot_inputs(config)


def with_trace(inputs, workload):
    """``inputs`` plus the trace file of a trace workload (so that a new trace reruns it)."""
    trace = pipeline.replay_trace(config, workload)
    if trace is not None:
        inputs["trace"] = trace
    return inputs


def replay_inputs(wildcards):
    return with_trace({"code": code("replay")}, wildcards.workload)


def policy_table_inputs(wildcards):
    return with_trace({"code": code("policies")}, wildcards.workload)


def policy_table_args(wildcards):
    return pipeline.policy_table_args(config, wildcards.workload)


def replay_args(wildcards):
    return pipeline.replay_args(
        config, wildcards.workload, wildcards.gpu, wildcards.cpu, wildcards.block
    )


def replay_points(wildcards):
    return pipeline.replay_points(config, wildcards.workload)


def mrc_inputs(wildcards):
    return with_trace({"code": code("mrc")}, wildcards.workload)


def mrc_args(wildcards):
    return pipeline.mrc_args(config, wildcards.workload, wildcards.block, wildcards.get("gpu"))


def plan_inputs(wildcards):
    workload = config["plans"][wildcards.plan]["workload"]
    inputs = {"code": code("plan"), "model": pipeline.plan_model(config, wildcards.plan)}
    return with_trace(inputs, workload)


def plan_args(wildcards):
    return pipeline.plan_args(config, wildcards.plan)


def ttft_sweep_args(wildcards):
    return pipeline.ttft_sweep_args(config, wildcards.sweep)


def ttft_budgets_inputs(wildcards):
    inputs = {"code": code("ttft"), "model": pipeline.TTFT_MODEL}
    inputs["model_config"] = pipeline.plan_model(config, wildcards.plan)
    return with_trace(inputs, config["plans"][wildcards.plan]["workload"])


def plot_artifacts(wildcards):
    return PLOT_INPUTS[wildcards.plot]


def plot_args(wildcards):
    return pipeline.plot_args(config, wildcards.plot)
