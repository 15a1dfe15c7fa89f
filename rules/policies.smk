# The offload designs side by side (kvlab/policies.py): the lab's CPU cliff per write policy,
# and one table of token hit ratios per write x eviction policy for each configured workload.


rule policy_cliff:
    input:
        stamp=stamp("policy_cliff", pipeline.policy_cliff_args(config)),
        code=code("policies"),
    output:
        artifact(
            pipeline.POLICY_CLIFF,
            caption="../report/policy_cliff.rst",
            category="2. Offload designs",
        ),
    log:
        "logs/policy_cliff.log",
    params:
        args=pipeline.policy_cliff_args(config),
    run:
        pipeline.run_job(line("policies cliff {params.args} --out {output:q}"), log[0])


rule policy_table:
    input:
        unpack(policy_table_inputs),
        stamp=stamp("policy_table", policy_table_args),
    output:
        artifact(pipeline.policy_table_path("{workload}")),
    log:
        "logs/policy_table/{workload}.log",
    wildcard_constraints:
        workload=pipeline.name_pattern(config["policies"]["tables"]["workloads"]),
    params:
        args=policy_table_args,
    run:
        pipeline.run_job(line("policies table {params.args} --out {output:q}"), log[0])
