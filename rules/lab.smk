# The lab's simulator artifacts: single scenario runs and grid sweeps (one job per grid point).


rule lab_run:
    input:
        stamp=line_stamp("lab_run"),
        code=code("scenario"),
    output:
        artifact("results/{run}.json", caption="../report/lab_run.rst", category="1. The lab"),
    log:
        "logs/lab_run/{run}.log",
    wildcard_constraints:
        run=paths.name_pattern(config["runs"]),
    params:
        line=job_line("lab_run"),
    run:
        kvlab("{params.line}", log, stdout=output[0])


rule sweep_point:
    input:
        stamp=line_stamp("sweep_point"),
        code=code("scenario"),
    output:
        paths.sweep_point_path("{sweep}", "{value}"),
    log:
        "logs/sweep_point/{sweep}/{value}.log",
    wildcard_constraints:
        sweep=paths.name_pattern(config["sweeps"]),
        value=r"\d+",
    params:
        line=job_line("sweep_point"),
    run:
        kvlab("{params.line}", log, stdout=output[0])


rule sweep_collect:
    input:
        stamp=line_stamp("sweep_collect", of(paths.sweep_points, "sweep")),
        points=of(paths.sweep_points, "sweep"),
        code=code("collect"),
    output:
        artifact("results/{sweep}.json", caption="../report/sweep.rst", category="1. The lab"),
    log:
        "logs/sweep_collect/{sweep}.log",
    wildcard_constraints:
        sweep=paths.name_pattern(config["sweeps"]),
    localrule: True  # short: in the submitting process on a cluster (docs/cluster.md)
    params:
        line=job_line("sweep_collect"),
    run:
        kvlab(
            "{params.line} --out {output:q} {input.points:q}",
            log,
        )
