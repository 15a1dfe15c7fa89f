# The figures of results/plots/ (kvlab/report/plots.py), each drawn from committed artifacts; with
# their captions, the report of `make report`.


rule plot:
    input:
        stamp=stamp("plot", plot_artifacts, plot_args),
        code=code("plots"),
        artifacts=plot_artifacts,
    output:
        artifact(
            pipeline.plot_path("{plot}"),
            caption="../report/plot.rst",
            category="Figures",
            labels={"figure": "{plot}"},
        ),
    log:
        "logs/plots/{plot}.log",
    wildcard_constraints:
        plot=pipeline.name_pattern(PLOT_INPUTS),
    params:
        args=plot_args,
    run:
        pipeline.run_job(
            line("plots {wildcards.plot} {params.args} --out {output:q} {input.artifacts:q}"),
            log[0],
        )
