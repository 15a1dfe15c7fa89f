# The measurement: the SYNTHETIC example generator, the byte-for-byte copy, and the summary.


rule example_measurement:
    input:
        stamp=stamp("example_measurement", pipeline.example_measurement_args(config)),
        code=code("example-measurement"),
    output:
        pipeline.EXAMPLE_MEASUREMENT,
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
        "results/ttft.jsonl",
    log:
        "logs/measurement_copy.log",
    shell:
        "cp {input.source:q} {output:q}.tmp 2> {log:q} && mv {output:q}.tmp {output:q}"


rule measured:
    input:
        code=code("summarize"),
        measurement="results/ttft.jsonl",
    output:
        report("results/measured.json", caption="../report/measured.rst", category="1. The lab"),
    log:
        "logs/measured.log",
    run:
        pipeline.run_job(line("summarize {input.measurement:q} {output:q}"), log[0])
