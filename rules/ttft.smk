# From hits to time (kvlab/latency/ttft.py): the TTFT model fitted to the measurement, predicted vs
# measured, and its predictions across lab sweeps and a plan's CPU budgets.


rule ttft_fit:
    input:
        stamp=line_stamp("ttft_fit"),
        code=code("ttft"),
        measurement=paths.MEASUREMENT,
    output:
        model=artifact(paths.TTFT_MODEL),
        table=artifact(
            paths.TTFT_TABLE,
            caption="../report/predicted_vs_measured_table.rst",
            category="4. From hits to time",
        ),
    log:
        "logs/ttft/fit.log",
    params:
        setting=commands.setting_args(config["ttft"]["setting"]),
    run:
        kvlab(
            "ttft fit --measurement {input.measurement:q} {params.setting}"
            " --model {output.model:q} --table {output.table:q}",
            log,
        )


rule ttft_sweep:
    input:
        stamp=line_stamp("ttft_sweep"),
        code=code("ttft"),
        model=paths.TTFT_MODEL,
    output:
        artifact(paths.ttft_sweep_path("{sweep}")),
    log:
        "logs/ttft/sweep-{sweep}.log",
    wildcard_constraints:
        sweep=paths.name_pattern(config["ttft"]["sweeps"]),
    params:
        sweep=of(commands.ttft_sweep_flags, "sweep"),
    run:
        kvlab(
            "ttft sweep --model {input.model:q} {params.sweep[setting]} --passes {params.sweep[passes]}"
            " --vary {params.sweep[vary]} --grid {params.sweep[grid]} --out {output:q}",
            log,
        )


if "budgets" in config["ttft"]:
    BUDGETS = commands.ttft_budgets_flags(config)

    rule ttft_budgets:
        input:
            unpack(ttft_budgets_inputs),
            stamp=line_stamp("ttft_budgets"),
        output:
            artifact(paths.ttft_budgets_path("{plan}")),
        log:
            "logs/ttft/budgets-{plan}.log",
        wildcard_constraints:
            plan=paths.name_pattern([config["ttft"]["budgets"]["plan"]]),
        params:
            **BUDGETS,
            workload=plan_workload_args,
            rules=plan_block_rules,
        run:
            kvlab(
                "ttft budgets --model {input.model:q} {params.workload} {params.rules}"
                " --model-config {input.model_config:q} {params.plan} --cpu-gib-grid {params.budgets} --out {output:q}",
                log,
            )
