# kvlab: KV-cache offloading lab and planning pipeline.
# `snakemake` (with profiles/default) regenerates every artifact under results/ from config.yaml.
#
# Lint exception (`snakemake --lint`): the rules name no conda environment or container. Every rule
# runs the project's own code on the one pinned environment of requirements.txt (the .venv that
# `make run` creates); tests/test_workflow.py fails on any other lint.


# config.yaml read as data (kvlab/workflow/config.py: no YTE templating, no alias bomb), where Snakemake's
# `configfile:` would run a `__use_yte__: true` file's code as it reads it; the values of --configfile and --config
# (in `config` already) go over it, as they go over a `configfile:`. kvlab run reads those as data too, before
# Snakemake starts.
import copy

from snakemake.utils import update_config

from kvlab.workflow.config import load_workflow_config

given = copy.deepcopy(config)
update_config(config, load_workflow_config("config.yaml"))
update_config(config, given)


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
include: "rules/search.smk"
include: "rules/ttft.smk"
include: "rules/plots.smk"


rule all:
    default_target: True
    input:
        paths.all_targets(config),
