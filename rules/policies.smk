# The offload designs side by side (kvlab/policy_grid.py): the lab's CPU cliff per write policy,
# and one table of token hit ratios per write x eviction policy for each configured workload.


rule policy_cliff:
    input:
        script="kvlab/policy_grid.py",
        code=POLICY_CODE,
    output:
        report(
            pipeline.POLICY_CLIFF,
            caption="../report/policy_cliff.rst",
            category="2. Offload designs",
        ),
    log:
        "logs/policy_cliff.log",
    params:
        args=pipeline.policy_cliff_args(config),
    shell:
        "python {input.script:q} cliff {params.args} --out {output:q} 2> {log:q}"


rule policy_table:
    input:
        unpack(policy_table_inputs),
    output:
        pipeline.policy_table_path("{workload}"),
    log:
        "logs/policy_table/{workload}.log",
    wildcard_constraints:
        workload=pipeline.name_pattern(config["policies"]["tables"]["workloads"]),
    params:
        args=policy_table_args,
    shell:
        "python {input.script:q} table {params.args} --out {output:q} 2> {log:q}"
