# Block-level replay (kvlab/loop.py): one job per workload and (GPU, CPU, block) point of its
# grid, folded into one table per workload.


rule replay_point:
    input:
        unpack(replay_inputs),
        stamp=line_stamp("replay_point"),
    output:
        artifact(
            paths.replay_point_path("{workload}", "{gpu_tokens}", "{cpu_tokens}", "{block_tokens}")
        ),
    log:
        "logs/replay/{workload}/gpu{gpu_tokens}-cpu{cpu_tokens}-block{block_tokens}.log",
    wildcard_constraints:
        workload=paths.name_pattern(config["replay"]["workloads"]),
        gpu_tokens=r"\d+",
        cpu_tokens=r"\d+",
        block_tokens=r"\d+",
    params:
        line=job_line("replay_point"),
    run:
        kvlab(
            "{params.line}",
            log,
            stdout=output[0],
        )


rule replay_table:
    input:
        stamp=stamp("replay_table", of(paths.replay_points, "workload")),
        points=of(paths.replay_points, "workload"),
        code=code("replay-table"),
    output:
        artifact(paths.replay_table_path("{workload}")),
    log:
        "logs/replay_table/{workload}.log",
    wildcard_constraints:
        workload=paths.name_pattern(config["replay"]["workloads"]),
    localrule: True  # short: in the submitting process on a cluster (docs/cluster.md)
    run:
        kvlab("replay-table --out {output:q} {input.points:q}", log)
