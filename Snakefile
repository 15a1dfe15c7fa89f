# kvlab: KV-cache offloading lab and planning pipeline.
# `snakemake` (with profiles/default) regenerates every artifact under results/ from config.yaml.
#
# Lint exception (`snakemake --lint`): the rules name no conda environment or container. Every rule
# runs the project's own code on the one pinned environment of requirements.txt (the .venv that
# `make run` creates); tests/test_workflow.py fails on any other lint.


# Every config file Snakemake reads is read as data (kvlab/workflow/config.py): a config.yaml with `__use_yte__: true`
# would otherwise run code as Snakemake reads it, before any check.
from kvlab.workflow.config import guard_snakemake

guard_snakemake()


configfile: "config.yaml"


# `make report` (snakemake --report): this description, then every artifact marked report() with its caption.
report: "report/workflow.rst"


# rules/common.smk puts the running interpreter's folder first on PATH.
envvars:
    "PATH",


include: "rules/common.smk"
include: "rules/lab.smk"
include: "rules/measurement.smk"
include: "rules/replay.smk"
include: "rules/policies.smk"
include: "rules/planner.smk"
include: "rules/ttft.smk"
include: "rules/plots.smk"


rule all:
    default_target: True
    input:
        paths.all_targets(config),
