# Block-level replay (kvlab/replay.py): one job per workload and (GPU, CPU, block) point of its
# grid, folded into one table per workload.


rule replay_point:
    input:
        unpack(replay_inputs),
        stamp=stamp("replay_point", replay_args),
    output:
        artifact(pipeline.replay_point_path("{workload}", "{gpu}", "{cpu}", "{block}")),
    log:
        "logs/replay/{workload}/gpu{gpu}-cpu{cpu}-block{block}.log",
    wildcard_constraints:
        workload=pipeline.name_pattern(config["replay"]["workloads"]),
        gpu=r"\d+",
        cpu=r"\d+",
        block=r"\d+",
    params:
        args=replay_args,
    run:
        pipeline.run_job(line("replay {params.args}"), log[0], stdout=output[0])


rule replay_table:
    input:
        stamp=stamp("replay_table", replay_points),
        points=replay_points,
        code=code("replay-table"),
    output:
        artifact(pipeline.replay_table_path("{workload}")),
    log:
        "logs/replay_table/{workload}.log",
    wildcard_constraints:
        workload=pipeline.name_pattern(config["replay"]["workloads"]),
    run:
        pipeline.run_job(line("replay-table --out {output:q} {input.points:q}"), log[0])
