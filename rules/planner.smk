# The capacity planner: exact LRU curves of the replay workloads (kvlab/curves/mrc.py), every room at
# once, with their cliffs; and CPU offload budgets for a workload and a model (kvlab/sizing/plan.py).


rule mrc_gpu:
    input:
        unpack(mrc_inputs),
        stamp=stamp("mrc_gpu", mrc_args),
    output:
        curve=artifact(pipeline.mrc_path("{workload}", "{block}")),
        cliffs=artifact(pipeline.mrc_path("{workload}", "{block}", suffix="json")),
    log:
        "logs/mrc/{workload}/block{block}-gpu.log",
    wildcard_constraints:
        workload=pipeline.name_pattern(config["mrc"]["workloads"]),
        block=r"\d+",
    params:
        args=mrc_args,
    run:
        pipeline.run_job(
            line("mrc {params.args} --curve {output.curve:q}"),
            log[0],
            stdout=output.cliffs,
        )


rule mrc_cpu:
    input:
        unpack(mrc_inputs),
        stamp=stamp("mrc_cpu", mrc_args),
    output:
        curve=artifact(pipeline.mrc_path("{workload}", "{block}", "{gpu}")),
        cliffs=artifact(pipeline.mrc_path("{workload}", "{block}", "{gpu}", suffix="json")),
    log:
        "logs/mrc/{workload}/block{block}-cpu-at-gpu{gpu}.log",
    wildcard_constraints:
        workload=pipeline.name_pattern(config["mrc"]["workloads"]),
        block=r"\d+",
        gpu=r"\d+",
    params:
        args=mrc_args,
    run:
        pipeline.run_job(
            line("mrc {params.args} --curve {output.curve:q}"),
            log[0],
            stdout=output.cliffs,
        )


rule plan:
    input:
        unpack(plan_inputs),
        stamp=stamp("plan", plan_args),
    output:
        artifact(
            pipeline.plan_path("{plan}"),
            caption="../report/plan.rst",
            category="3. Capacity planner",
        ),
    log:
        "logs/plan/{plan}.log",
    wildcard_constraints:
        plan=pipeline.name_pattern(config["plans"]),
    params:
        args=plan_args,
    run:
        pipeline.run_job(line("plan {params.args}"), log[0], stdout=output[0])
