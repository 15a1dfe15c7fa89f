# The measurement: the SYNTHETIC example generator, the byte-for-byte copy, and the summary.


rule example_measurement:
    input:
        stamp=stamp("example_measurement", pipeline.example_measurement_args(config)),
        code=code("example-measurement"),
    output:
        artifact(pipeline.EXAMPLE_MEASUREMENT),
    log:
        "logs/example_measurement.log",
    params:
        args=pipeline.example_measurement_args(config),
    run:
        pipeline.run_job(line("example-measurement {params.args} --out {output:q}"), log[0])


rule measurement_copy:
    input:
        source=config["measurement"]["source"],
        stamp=stamp("measurement_copy", config["measurement"]["source"]),
    output:
        artifact("results/ttft.jsonl"),
    log:
        "logs/measurement_copy.log",
    shell:
        "cp {input.source:q} {output:q}.tmp 2> {log:q} && mv {output:q}.tmp {output:q}"


rule measured:
    input:
        code=code("summarize"),
        measurement="results/ttft.jsonl",
    output:
        artifact("results/measured.json", caption="../report/measured.rst", category="1. The lab"),
    log:
        "logs/measured.log",
    run:
        pipeline.run_job(line("summarize {input.measurement:q} {output:q}"), log[0])


# A real server's measurement (config.yaml's real_measurement), when there is one: its summary, and the TTFT
# model fitted through the server's own design on some documents, compared on the others.
if "real_measurement" in config:

    rule real_measured:
        input:
            code=code("summarize"),
            measurement=config["real_measurement"]["source"],
        output:
            artifact(
                pipeline.REAL_MEASURED,
                caption="../report/measured.rst",
                category="5. A real server",
            ),
        log:
            "logs/real/measured.log",
        run:
            pipeline.run_job(line("summarize {input.measurement:q} {output:q}"), log[0])

    rule real_ttft_fit:
        input:
            stamp=stamp("real_ttft_fit", pipeline.real_fit_args(config)),
            code=code("ttft"),
            measurement=config["real_measurement"]["source"],
        output:
            model=artifact(pipeline.REAL_MODEL),
            table=artifact(
                pipeline.REAL_TABLE,
                caption="../report/predicted_vs_measured_table.rst",
                category="5. A real server",
            ),
        log:
            "logs/real/fit.log",
        params:
            args=pipeline.real_fit_args(config),
        run:
            pipeline.run_job(
                line(
                    "ttft fit --measurement {input.measurement:q} {params.args} --model {output.model:q} --table {output.table:q}"
                ),
                log[0],
            )
