# Helpers that turn config.yaml into targets and command lines (the logic is kvlab/pipeline.py).
# The config is validated against the schema here, before any job runs.
import os
import sys

from snakemake.utils import validate

from kvlab import pipeline

validate(config, "../schemas/config.schema.yaml")
pipeline.check_config(config)

# `python` in a rule is the interpreter that runs Snakemake (the project's .venv), whatever
# else is on PATH; a conda environment, when used, activates in front of it.
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")


def run_args(wildcards):
    return pipeline.run_args(config, wildcards.run)


def sweep_point_args(wildcards):
    return pipeline.sweep_point_args(config, wildcards.sweep, wildcards.value)


def sweep_points(wildcards):
    return pipeline.sweep_points(config, wildcards.sweep)


def sweep_record(wildcards):
    return config["sweeps"][wildcards.sweep]["record"]


def replay_inputs(wildcards):
    """The replay's code, and the trace file of a trace workload (so that a new trace reruns it)."""
    inputs = {
        "script": "kvlab/replay.py",
        "code": ["kvlab/prefix_cache.py", "kvlab/workloads.py", "kvlab/kvsim.py"],
    }
    trace = pipeline.replay_trace(config, wildcards.workload)
    if trace is not None:
        inputs["trace"] = trace
    return inputs


def replay_args(wildcards):
    return pipeline.replay_args(
        config, wildcards.workload, wildcards.gpu, wildcards.cpu, wildcards.block
    )


def replay_points(wildcards):
    return pipeline.replay_points(config, wildcards.workload)
