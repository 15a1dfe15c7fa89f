# The figures of results/plots/ (kvlab/report/plots.py), each drawn from committed artifacts; with
# their captions, the report of `make report`.


rule plot:
    input:
        stamp=line_stamp("plot", plot_artifacts),
        code=code("plots"),
        artifacts=plot_artifacts,
    output:
        artifact(
            paths.plot_path("{plot}"),
            caption="../report/plot.rst",
            category="Figures",
            labels={"figure": "{plot}"},
        ),
    log:
        "logs/plots/{plot}.log",
    wildcard_constraints:
        plot=paths.name_pattern(PLOT_INPUTS),
    localrule: True  # short: in the submitting process on a cluster (docs/cluster.md)
    params:
        line=job_line("plot"),
    run:
        kvlab("{params.line} --out {output:q} {input.artifacts:q}", log)
