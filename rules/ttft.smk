# From hits to time (kvlab/latency/ttft.py): the TTFT model fitted to the measurement, predicted vs
# measured, and its predictions across lab sweeps and a plan's CPU budgets.


rule ttft_fit:
    input:
        stamp=stamp("ttft_fit", pipeline.ttft_fit_args(config)),
        code=code("ttft"),
        measurement=pipeline.MEASUREMENT,
    output:
        model=artifact(pipeline.TTFT_MODEL),
        table=artifact(
            pipeline.TTFT_TABLE,
            caption="../report/predicted_vs_measured_table.rst",
            category="4. From hits to time",
        ),
    log:
        "logs/ttft/fit.log",
    params:
        args=pipeline.ttft_fit_args(config),
    run:
        pipeline.run_job(
            line(
                "ttft fit --measurement {input.measurement:q} {params.args} --model {output.model:q} --table {output.table:q}"
            ),
            log[0],
        )


rule ttft_sweep:
    input:
        stamp=stamp("ttft_sweep", ttft_sweep_args),
        code=code("ttft"),
        model=pipeline.TTFT_MODEL,
    output:
        artifact(pipeline.ttft_sweep_path("{sweep}")),
    log:
        "logs/ttft/sweep-{sweep}.log",
    wildcard_constraints:
        sweep=pipeline.name_pattern(config["ttft"]["sweeps"]),
    params:
        args=ttft_sweep_args,
    run:
        pipeline.run_job(
            line("ttft sweep --model {input.model:q} {params.args} --out {output:q}"),
            log[0],
        )


rule ttft_budgets:
    input:
        unpack(ttft_budgets_inputs),
        stamp=stamp(
            "ttft_budgets",
            pipeline.ttft_budgets_args(config) if "budgets" in config["ttft"] else "",
        ),
    output:
        artifact(pipeline.ttft_budgets_path("{plan}")),
    log:
        "logs/ttft/budgets-{plan}.log",
    wildcard_constraints:
        plan=pipeline.name_pattern(
            [config["ttft"]["budgets"]["plan"]] if "budgets" in config["ttft"] else []
        ),
    params:
        args=pipeline.ttft_budgets_args(config) if "budgets" in config["ttft"] else "",
    run:
        pipeline.run_job(
            line("ttft budgets --model {input.model:q} {params.args} --out {output:q}"),
            log[0],
        )
