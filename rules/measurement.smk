# The measurement: the SYNTHETIC example generator, the byte-for-byte copy, and the summary.
EXAMPLE = commands.example_measurement_flags(config)


rule example_measurement:
    input:
        stamp=line_stamp("example_measurement"),
        code=code("example-measurement"),
    output:
        artifact(paths.EXAMPLE_MEASUREMENT),
    log:
        "logs/example_measurement.log",
    localrule: True  # short: in the submitting process on a cluster (docs/cluster.md)
    params:
        line=job_line("example_measurement"),
    run:
        kvlab(
            "{params.line} --out {output:q}",
            log,
        )


rule measurement_copy:
    input:
        source=config["measurement"]["source"],
        stamp=stamp("measurement_copy", config["measurement"]["source"]),
    output:
        artifact(paths.MEASUREMENT),
    log:
        "logs/measurement_copy.log",
    localrule: True  # short: in the submitting process on a cluster (docs/cluster.md)
    shell:
        "cp {input.source:q} {output:q}.tmp 2> {log:q} && mv {output:q}.tmp {output:q}"


rule measured:
    input:
        code=code("summarize"),
        measurement=paths.MEASUREMENT,
    output:
        artifact(paths.MEASURED, caption="../report/measured.rst", category="1. The lab"),
    log:
        "logs/measured.log",
    localrule: True  # short: in the submitting process on a cluster (docs/cluster.md)
    run:
        kvlab("summarize {input.measurement:q} {output:q}", log)


# A real server's measurement (config.yaml's real_measurement), when there is one: its summary, and the TTFT
# model fitted through the server's own design on some documents, compared on the others.
if "real_measurement" in config:

    rule real_measured:
        input:
            code=code("summarize"),
            measurement=config["real_measurement"]["source"],
        output:
            artifact(
                paths.REAL_MEASURED, caption="../report/measured.rst", category="5. A real server"
            ),
        log:
            "logs/real/measured.log",
        localrule: True  # short: in the submitting process on a cluster (docs/cluster.md)
        run:
            kvlab("summarize {input.measurement:q} {output:q}", log)

    rule real_ttft_fit:
        input:
            stamp=line_stamp("real_ttft_fit"),
            code=code("ttft"),
            measurement=config["real_measurement"]["source"],
            model_config=config["real_measurement"]["model_config"],
        output:
            model=artifact(paths.REAL_MODEL),
            table=artifact(
                paths.REAL_TABLE,
                caption="../report/predicted_vs_measured_table.rst",
                category="5. A real server",
            ),
        log:
            "logs/real/fit.log",
        params:
            line=job_line("real_ttft_fit"),
        run:
            kvlab(
                "{params.line} --measurement {input.measurement:q} --model {output.model:q} --table {output.table:q}",
                log,
            )
