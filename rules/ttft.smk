# From hits to time (kvlab/latency/ttft.py): the TTFT model fitted to the measurement, predicted vs
# measured, and its predictions across lab sweeps and a plan's CPU budgets; and TTFT priced from the
# hardware (kvlab/latency/hardware.py), no fit: the lab's passes, a workload's CPU budgets, and a trace
# under load through one engine instance (kvlab simulate).


rule ttft_fit:
    input:
        stamp=line_stamp("ttft_fit"),
        code=code("ttft"),
        measurement=paths.MEASUREMENT,
        model_config=config["measurement"]["model_config"],
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
        line=job_line("ttft_fit"),
    run:
        kvlab(
            "{params.line} --measurement {input.measurement:q} --model {output.model:q} --table {output.table:q}",
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
        line=job_line("ttft_sweep"),
    run:
        kvlab(
            "{params.line} --model {input.model:q} --out {output:q}",
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
            line=job_line("ttft_budgets"),
        run:
            kvlab(
                "{params.line} --model {input.model:q} --out {output:q}",
                log,
            )


# Priced from the hardware (config.yaml's ttft.hardware): the lab's passes per measured config, beside the
# handout's per-tier latencies (written from the config), a replay workload's CPU budgets, and a trace
# workload under load per CPU tier and load.
HARDWARE = config["ttft"].get("hardware", {})

if "lab" in HARDWARE:

    rule ttft_hardware_handout:
        input:
            stamp=stamp("ttft_hardware_handout", commands.handout_latencies(config)),
        output:
            artifact(paths.TTFT_HANDOUT),
        log:
            "logs/ttft/hardware/handout.log",
        localrule: True  # short: in the submitting process on a cluster (docs/cluster.md)
        run:
            jobs.write_document(output[0], commands.handout_latencies(config), log[0])

    rule ttft_hardware_lab:
        input:
            **hardware_inputs("lab"),
            stamp=line_stamp("ttft_hardware_lab"),
        output:
            priced=artifact(paths.hardware_lab_path("{lab_config}")),
            requests=artifact(paths.hardware_lab_path("{lab_config}", "csv")),
        log:
            "logs/ttft/hardware/lab-{lab_config}.log",
        wildcard_constraints:
            lab_config=paths.name_pattern(HARDWARE["lab"]["configs"]),
        params:
            line=job_line("ttft_hardware_lab"),
        run:
            kvlab(
                "{params.line} --per-request {output.requests:q}",
                log,
                stdout=output.priced,
            )


if "budgets" in HARDWARE:

    rule ttft_hardware_budgets:
        input:
            unpack(hardware_budgets_inputs),
            stamp=line_stamp("ttft_hardware_budgets"),
        output:
            artifact(paths.hardware_budgets_path("{workload}")),
        log:
            "logs/ttft/hardware/budgets-{workload}.log",
        wildcard_constraints:
            workload=paths.name_pattern([HARDWARE["budgets"]["workload"]]),
        params:
            line=job_line("ttft_hardware_budgets"),
        run:
            kvlab(
                "{params.line} --out {output:q}",
                log,
            )


if "simulate" in HARDWARE:

    rule ttft_hardware_simulate:
        input:
            unpack(hardware_simulate_inputs),
            stamp=line_stamp("ttft_hardware_simulate"),
        output:
            simulated=artifact(paths.simulate_path("{workload}", "{cpu_blocks}", "{speedup}")),
            percentiles=artifact(
                paths.simulate_path("{workload}", "{cpu_blocks}", "{speedup}", "csv")
            ),
        log:
            "logs/ttft/hardware/simulate-{workload}/cpu{cpu_blocks}-speedup{speedup}.log",
        wildcard_constraints:
            workload=paths.name_pattern([HARDWARE["simulate"]["workload"]]),
            cpu_blocks=r"\d+",
            speedup=r"[0-9][0-9.e+-]*",
        params:
            line=job_line("ttft_hardware_simulate"),
        run:
            kvlab(
                "{params.line} --percentiles {output.percentiles:q}",
                log,
                stdout=output.simulated,
            )
