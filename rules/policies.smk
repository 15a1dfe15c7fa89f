# The offload designs side by side (kvlab/designs.py): the lab's CPU cliff per write policy,
# and one table of token hit ratios per write x eviction policy for each configured workload.
CLIFF = commands.policy_cliff_flags(config)


rule policy_cliff:
    input:
        stamp=line_stamp("policy_cliff"),
        code=code("policies"),
    output:
        artifact(
            paths.POLICY_CLIFF, caption="../report/policy_cliff.rst", category="2. Offload designs"
        ),
    log:
        "logs/policy_cliff.log",
    params:
        line=job_line("policy_cliff"),
    run:
        kvlab(
            "{params.line} --out {output:q}",
            log,
        )


rule policy_table:
    input:
        unpack(policy_table_inputs),
        stamp=line_stamp("policy_table"),
    output:
        artifact(paths.policy_table_path("{workload}")),
    log:
        "logs/policy_table/{workload}.log",
    wildcard_constraints:
        workload=paths.name_pattern(config["policies"]["tables"]["workloads"]),
    params:
        line=job_line("policy_table"),
    run:
        kvlab(
            "{params.line} --out {output:q}",
            log,
        )
