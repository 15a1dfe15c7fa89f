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
        **CLIFF,
    run:
        kvlab(
            "policies cliff --docs {params.docs} --tokens {params.tokens} --passes {params.passes}"
            " --gpu-tokens {params.gpu_tokens} --cpu-tokens {params.cpu_tokens} --record-pass {params.record_pass}"
            " --write-policies {params.write_policies} --out {output:q}",
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
        table=of(commands.policy_table_flags, "workload"),
    run:
        kvlab(
            "policies table {params.table[workload]} {params.table[rooms]}"
            " --write-policies {params.table[write_policies]} --evictions {params.table[evictions]}"
            " {params.table[cache]} --out {output:q}",
            log,
        )
