# The capacity planner: exact LRU curves of the replay workloads (kvlab/curves/mrc.py), every room at
# once, with their cliffs; and CPU offload budgets for a workload and a model (kvlab/sizing/plan.py).


rule mrc_gpu:
    input:
        unpack(mrc_inputs),
        stamp=line_stamp("mrc_gpu"),
    output:
        curve=artifact(paths.mrc_path("{workload}", "{block_tokens}")),
        cliffs=artifact(paths.mrc_path("{workload}", "{block_tokens}", suffix="json")),
    log:
        "logs/mrc/{workload}/block{block_tokens}-gpu.log",
    wildcard_constraints:
        workload=paths.name_pattern(config["mrc"]["workloads"]),
        block_tokens=r"\d+",
    params:
        line=job_line("mrc_gpu"),
    run:
        kvlab(
            "{params.line} --curve {output.curve:q}",
            log,
            stdout=output.cliffs,
        )


rule mrc_cpu:
    input:
        unpack(mrc_inputs),
        stamp=line_stamp("mrc_cpu"),
    output:
        curve=artifact(paths.mrc_path("{workload}", "{block_tokens}", "{gpu_tokens}")),
        cliffs=artifact(
            paths.mrc_path("{workload}", "{block_tokens}", "{gpu_tokens}", suffix="json")
        ),
    log:
        "logs/mrc/{workload}/block{block_tokens}-cpu-at-gpu{gpu_tokens}.log",
    wildcard_constraints:
        workload=paths.name_pattern(config["mrc"]["workloads"]),
        block_tokens=r"\d+",
        gpu_tokens=r"\d+",
    params:
        line=job_line("mrc_cpu"),
    run:
        kvlab(
            "{params.line} --curve {output.curve:q}",
            log,
            stdout=output.cliffs,
        )


rule plan:
    input:
        unpack(plan_inputs),
        stamp=line_stamp("plan"),
    output:
        artifact(
            paths.plan_path("{plan}"), caption="../report/plan.rst", category="3. Capacity planner"
        ),
    log:
        "logs/plan/{plan}.log",
    wildcard_constraints:
        plan=paths.name_pattern(config["plans"]),
    params:
        line=job_line("plan"),
    run:
        kvlab(
            "{params.line}",
            log,
            stdout=output[0],
        )
