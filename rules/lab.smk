# The lab's simulator artifacts: single scenario runs and grid sweeps (one job per grid point).


rule lab_run:
    input:
        stamp=stamp("lab_run", run_args),
        code=code("scenario"),
    output:
        artifact("results/{run}.json", caption="../report/lab_run.rst", category="1. The lab"),
    log:
        "logs/lab_run/{run}.log",
    wildcard_constraints:
        run=pipeline.name_pattern(config["runs"]),
    params:
        args=run_args,
    run:
        pipeline.run_job(line("scenario {params.args}"), log[0], stdout=output[0])


rule sweep_point:
    input:
        stamp=stamp("sweep_point", sweep_point_args),
        code=code("scenario"),
    output:
        pipeline.sweep_point_path("{sweep}", "{value}"),
    log:
        "logs/sweep_point/{sweep}/{value}.log",
    wildcard_constraints:
        sweep=pipeline.name_pattern(config["sweeps"]),
        value=r"\d+",
    params:
        args=sweep_point_args,
    run:
        pipeline.run_job(line("scenario {params.args}"), log[0], stdout=output[0])


rule sweep_collect:
    input:
        stamp=stamp("sweep_collect", sweep_record, sweep_points),
        points=sweep_points,
        code=code("collect"),
    output:
        artifact("results/{sweep}.json", caption="../report/sweep.rst", category="1. The lab"),
    log:
        "logs/sweep_collect/{sweep}.log",
    wildcard_constraints:
        sweep=pipeline.name_pattern(config["sweeps"]),
    params:
        record=sweep_record,
    run:
        pipeline.run_job(
            line(
                "collect --pass {params.record[pass]} --value {params.record[value]} --out {output:q} {input.points:q}"
            ),
            log[0],
        )
