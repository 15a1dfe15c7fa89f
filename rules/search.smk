# The cheapest fleet that meets an SLO (kvlab search, kvlab/api/searches.py): a search's simulations fanned out, one
# job each, over whatever executor runs the workflow (profiles/slurm, profiles/cluster-generic), then its answer read
# from them. The answer is the one kvlab search gives on one machine. Listing the candidates and reading the answer
# are short: they run in the submitting process (localrule).


checkpoint search_candidates:
    input:
        unpack(search_inputs),
        stamp=line_stamp("search"),
    output:
        "work/search/{search}/candidates.txt",
    log:
        "logs/search/{search}/candidates.log",
    wildcard_constraints:
        search=paths.name_pattern(config.get("searches", {})),
    localrule: True
    params:
        line=job_line("search"),
    run:
        kvlab(
            "{params.line} --evaluations work/search/{wildcards.search}/evaluations --candidates",
            log,
            stdout=output[0],
        )


rule search_point:
    input:
        unpack(search_inputs),
        candidates="work/search/{search}/candidates.txt",
    output:
        "work/search/{search}/evaluations/{candidate}.json",
    log:
        "logs/search/{search}/{candidate}.log",
    wildcard_constraints:
        search=paths.name_pattern(config.get("searches", {})),
        candidate=r"[0-9a-f]{32}",
    params:
        line=job_line("search"),
    run:
        kvlab(
            "{params.line} --evaluations work/search/{wildcards.search}/evaluations --evaluate {wildcards.candidate}",
            log,
        )


rule search:
    input:
        unpack(search_inputs),
        evaluations=search_evaluations,
    output:
        artifact(
            paths.search_path("{search}"),
            caption="../report/search.rst",
            category="3. Capacity planner",
        ),
    log:
        "logs/search/{search}.log",
    wildcard_constraints:
        search=paths.name_pattern(config.get("searches", {})),
    localrule: True
    params:
        line=job_line("search"),
    run:
        kvlab(
            "{params.line} --evaluations work/search/{wildcards.search}/evaluations --from-evaluations",
            log,
            stdout=output[0],
        )
