"""The command line of every job, built once from config.yaml: each rule runs ``kvlab`` with its job's line (the
``job_line`` params of rules/common.smk) and the files it adds, the same line is the job's stamp, and
:func:`job_lines` gives every job's line so that ``kvlab config`` parses each with its command's own parser before
any job runs."""

import shlex
from itertools import product
from pathlib import Path

from kvlab.cache.write_policies import CACHE_SETTINGS as REPLAY_CACHE  # cache settings a workload may override
from kvlab.cache.write_policies import LMCACHE_SWITCHES
from kvlab.workflow.paths import (
    EXAMPLE_MEASUREMENT,
    mrc_grid,
    plan_model,
    plot_inputs,
    replay_rooms,
    replay_trace,
    simulate_points,
    trace_plotted,
)

SETTINGS = ("gpu", "cpu", "docs", "tokens", "write_policy")  # scenario.py's flags: the lab contract spells rooms so
LAB_ROOMS = {"gpu": "gpu_tokens", "cpu": "cpu_tokens"}  # a lab sweep's varied room, as kvlab's commands spell it


def lab_settings(config, settings):
    """scenario.py's settings flags: the shared ``scenario`` defaults overridden by ``settings``."""
    merged = {**config["scenario"], **settings}
    return " ".join(f"--{key.replace('_', '-')} {merged[key]}" for key in SETTINGS if key in merged)


def run_settings(config, run):
    """The settings flags of the single run ``run``."""
    spec = config["runs"][run]
    return lab_settings(config, {key: spec[key] for key in SETTINGS if key in spec})


def sweep_point_settings(config, sweep, value):
    """The settings flags of one grid point: the sweep's fixed settings plus its varied one at ``value``."""
    spec = config["sweeps"][sweep]
    return lab_settings(config, {**spec["fixed"], spec["vary"]: int(value)})


def sweep_record(config, sweep):
    """What the collector keeps of each grid point: its pass and value."""
    return config["sweeps"][sweep]["record"]


def listed(values):
    """A list flag's value: the items joined by commas."""
    return ",".join(map(str, values))


def example_measurement_flags(config):
    """The ``example_measurement`` section as ``kvlab example-measurement`` flags, by kind."""
    spec = config["example_measurement"]
    return {
        "configs": rooms_flags(spec["configs"]),
        "passes": passes_flags(spec["passes"]),
        "latency": " ".join(f"--{name.replace('_', '-')}-ms {ms}" for name, ms in spec["latency_ms"].items()),
        **{key: spec[key] for key in ("docs", "tokens", "jitter", "seed")},
    }


def rooms_flags(configs):
    """``--config NAME:GPU_TOKENS,CPU_TOKENS`` per measured config."""
    pairs = (f"{name}:{rooms['gpu_tokens']},{rooms['cpu_tokens']}" for name, rooms in configs.items())
    return " ".join("--config " + shlex.quote(pair) for pair in pairs)


def passes_flags(passes):
    """``--pass NAME:ORDER`` per measured pass."""
    return " ".join("--pass " + shlex.quote(f"{name}:{order}") for name, order in passes.items())


def workload_args(config, workload):
    """The ``--workload`` flag and the source's own settings of one replay workload."""
    spec = config["replay"]["workloads"][workload]
    args = [f"--workload {spec['source']}"]
    for key, value in spec.items():
        if key in ("source", "rooms", *REPLAY_CACHE):
            continue
        if isinstance(value, list):
            value = listed(value)
        args.append(f"--{key.replace('_', '-')} {shlex.quote(str(value))}")
    return " ".join(args)


def replay_cache(config, workload):
    """The cache settings of one replay workload: the replay section's, overridden by the workload's."""
    spec = config["replay"]["workloads"][workload]
    return {key: spec.get(key, config["replay"][key]) for key in REPLAY_CACHE}


def cache_args(config, workload, keys=REPLAY_CACHE):
    """Flags of the workload's cache settings ``keys``: a true switch is a bare flag, a false one is left out."""
    settings = replay_cache(config, workload)
    args = []
    for key in keys:
        flag = f"--{key.replace('_', '-')}"
        value = settings[key]
        if value is True:
            args.append(flag)
        elif value is not False:
            args.append(f"{flag} {value}")
    return " ".join(args)


BLOCK_RULES = ("partial_blocks", "eviction_order")  # what a curve, a plan and a designs table take of a cache


def policy_cliff_flags(config):
    """``kvlab policies cliff``'s values: the lab sweep named by ``policies.cpu_cliff``, on its grid."""
    spec = config["policies"]["cpu_cliff"]
    sweep = config["sweeps"][spec["sweep"]]
    lab = {**config["scenario"], **sweep["fixed"]}
    return {
        "docs": lab["docs"],
        "tokens": lab["tokens"],
        "passes": listed(sweep["passes"]),
        "gpu_tokens": lab["gpu"],
        "cpu_tokens": listed(spec.get("grid", sweep["grid"])),
        "record_pass": sweep["record"]["pass"],
        "write_policies": listed(config["policies"]["write_policies"]),
    }


def policy_table_flags(config, workload):
    """``kvlab policies table``'s values for one replay workload."""
    policies = config["policies"]
    rooms = policies["tables"]["rooms"]
    return {
        "workload": workload_args(config, workload),
        "rooms": " ".join(f"--{key.replace('_', '-')} {listed(rooms[key])}" for key in rooms),
        "write_policies": listed(policies["write_policies"]),
        "evictions": listed(policies["evictions"]),
        "cache": cache_args(config, workload, (*BLOCK_RULES, *LMCACHE_SWITCHES)),
    }


def mrc_target(config):
    """``--target-hit-ratio`` of the curves, if the config sets one."""
    return f"--target-hit-ratio {config['mrc']['target_hit_ratio']}" if "target_hit_ratio" in config["mrc"] else ""


PLAN_FLAGS = ("tp", "chunk_tokens", "gpu_tokens", "gpu_gib", "cpu_gib", "write_policy", "target_hit_ratio")


def plan_flags(config, name, flags=PLAN_FLAGS):
    """A plan's own flags (its workload's are :func:`workload_args` and :func:`cache_args`)."""
    spec = config["plans"][name]
    return " ".join(f"--{key.replace('_', '-')} {spec[key]}" for key in flags if key in spec)


def plan_workload(config, name):
    return config["plans"][name]["workload"]


def setting_args(setting):
    """A measurement's setting as ``kvlab ttft fit`` flags: documents, each config's rooms, each pass's order."""
    args = [f"--docs {setting['docs']}", f"--tokens {setting['tokens']}"]
    return " ".join([*args, rooms_flags(setting["configs"]), passes_flags(setting["passes"])])


def real_fit_args(config):
    """``kvlab ttft fit``'s flags for the real measurement: its setting, its server's design, the fitted docs."""
    real = config["real_measurement"]
    args = [setting_args(real), f"--server {real['server']}", f"--state-extra-tokens {real['state_extra_tokens']}"]
    return " ".join(args + [f"--fit-doc {doc}" for doc in real["fit_docs"]])


def fitted_in_args(measured_on, synthetic=False):
    """What a fit records of where its measurement was taken, besides the model: ``--measured-on`` and, for a
    generated measurement, ``--synthetic`` (its model then prices its own setting only)."""
    return f"--measured-on {shlex.quote(measured_on)}" + (" --synthetic" if synthetic else "")


def example_fit_record(config):
    """The fit's record flags of the measurement (``measurement``: the synthetic example by default)."""
    measurement = config["measurement"]
    return fitted_in_args(measurement["measured_on"], measurement["synthetic"])


def real_fit_record(config):
    """The real measurement's: measured on what its note says."""
    return fitted_in_args(config["real_measurement"]["note"])


def ttft_sweep_flags(config, sweep):
    """``kvlab ttft sweep``'s values for one lab sweep: its documents, passes, fixed room and grid."""
    spec = config["sweeps"][sweep]
    lab = {**config["scenario"], **spec["fixed"]}
    kept = [key for key in ("gpu", "cpu", "write_policy") if key in lab]  # as kvlab's commands spell them
    fixed = [f"--{LAB_ROOMS.get(key, key).replace('_', '-')} {lab[key]}" for key in kept]
    return {
        "setting": " ".join([f"--docs {lab['docs']}", f"--tokens {lab['tokens']}", *fixed]),
        "passes": listed(spec["passes"]),
        "vary": LAB_ROOMS[spec["vary"]],
        "grid": listed(spec["grid"]),
    }


def ttft_budgets_flags(config):
    """``kvlab ttft budgets``' values: the plan's setting (not its one budget) and the budgets."""
    budgets = config["ttft"]["budgets"]
    plan = budgets["plan"]
    flags = tuple(flag for flag in PLAN_FLAGS if flag not in ("cpu_gib", "target_hit_ratio"))
    return {"plan": plan_flags(config, plan, flags), "budgets": listed(budgets["cpu_gib"])}


def hardware_flags(config):
    """What prices time in ``ttft.hardware``: the system and the engine (``kvlab ttft predict``'s and ``budgets``')."""
    hardware = config["ttft"]["hardware"]
    return f"--gpu-system {shlex.quote(hardware['gpu_system'])} --engine {hardware['engine']}"


def hardware_lab_flags(config, lab_config):
    """``kvlab ttft predict``'s values for the lab's passes in one measured config: the lab workload (its documents
    and the passes' orders), and the config's rooms with the lab's block (and a tp, if set)."""
    lab = config["ttft"]["hardware"]["lab"]
    rooms = lab["configs"][lab_config]
    workload = f"--workload lab --docs {lab['docs']} --tokens {lab['tokens']} --passes {listed(lab['passes'].values())}"
    room = f"--gpu-tokens {rooms['gpu_tokens']} --cpu-tokens {rooms['cpu_tokens']} --block-tokens {lab['block_tokens']}"
    return {"workload": workload, "rooms": room + (f" --tp {lab['tp']}" if "tp" in lab else "")}


def hardware_budgets_flags(config):
    """``kvlab ttft budgets --gpu-system``'s values: the workload's own flags and block rules, the rooms (as a
    plan's), the budgets."""
    spec = config["ttft"]["hardware"]["budgets"]
    flags = tuple(flag for flag in PLAN_FLAGS if flag not in ("cpu_gib", "target_hit_ratio"))
    return {
        "workload": workload_args(config, spec["workload"]),
        "rules": cache_args(config, spec["workload"], BLOCK_RULES),
        "plan": " ".join(f"--{key.replace('_', '-')} {spec[key]}" for key in flags if key in spec),
        "budgets": listed(spec["cpu_gib"]),
    }


def hardware_simulate_flags(config):
    """``kvlab simulate``'s values for ``ttft.hardware.simulate``: its workload's own flags (a trace: its timestamps
    are the clock). The engine's own settings (vLLM's: its block pool, LRU, write-through) are the command's."""
    return {"workload": workload_args(config, config["ttft"]["hardware"]["simulate"]["workload"])}


def hardware_model(config, part):
    """The model config of ``ttft.hardware.<part>`` (a Snakemake input)."""
    return str(Path(config["ttft"]["hardware"][part]["model_config"]))


def handout_latencies(config):
    """The handout's per-tier TTFT that the hardware-priced lab is drawn beside: ``example_measurement.latency_ms``'s
    recompute, CPU load and GPU hit (the example's other settings are its own), as results/ttft/hardware/handout.json
    holds them."""
    latency = config["example_measurement"]["latency_ms"]
    return {
        "latency_ms": {tier: latency[tier] for tier in HANDOUT_TIERS},
        "source": "config.yaml example_measurement.latency_ms: the handout's per-tier TTFT",
    }


HANDOUT_TIERS = ("recompute", "cpu_load", "gpu_hit")


SYNTHETIC_NOTE = "TTFT from the SYNTHETIC example measurement (kvlab/measure/example.py), not a real server"


MEASURED_PLOTS = ("gpu_cliff", "cpu_cliff", "ttft_per_pass", "predicted_vs_measured", "ttft_budgets")
HARDWARE_PLOTS = ("ttft_hardware_lab", "ttft_hardware_budgets", "simulate_ttft_budgets", "simulate_ttft_load")


def hardware_note(config, plot):
    """The note under a figure priced from the hardware: what was priced, on what, from the config."""
    hardware = config["ttft"]["hardware"]
    system = f"one {hardware['gpu_system']}, {hardware['engine']}"
    if plot == "ttft_hardware_lab":
        lab = hardware["lab"]
        return (
            f"Priced from the hardware ({system}): {Path(lab['model_config']).parent.name},"
            f" {lab['block_tokens']:,}-token blocks; beside the handout (example_measurement.latency_ms)"
        )
    if plot.startswith("simulate_"):
        spec = hardware["simulate"]
        return (
            f"Simulated under load (kvlab simulate), priced from the hardware ({system}):"
            f" {Path(spec['model_config']).parent.name}, replay workload {spec['workload']}"
        )
    spec = hardware["budgets"]
    room = f"{spec['gpu_gib']:g} GiB" if "gpu_gib" in spec else f"{spec['gpu_tokens']:,} tokens"
    return (
        f"Priced from the hardware ({system}), not measured: {Path(spec['model_config']).parent.name},"
        f" replay workload {spec['workload']}, GPU KV room {room} per GPU"
    )


def plot_args(config, plot):
    """kvlab plots' flags besides the inputs: a note under every figure drawn from the synthetic example, under a
    real measurement's its own, and under one priced from the hardware what priced it."""
    if plot in REAL_PLOTS:
        return f"--note {shlex.quote(config['real_measurement']['note'])}"
    if plot in HARDWARE_PLOTS:
        return f"--note {shlex.quote(hardware_note(config, plot))}"
    if plot == "trace_reuse":
        workload = trace_plotted(config)
        note = f"Token hit ratios of the real trace {replay_trace(config, workload)} (replay workload {workload}):"
        return "--note " + shlex.quote(f"{note} exact LRU curves, and replays as points")
    synthetic = config["measurement"]["source"] == EXAMPLE_MEASUREMENT
    return f"--note {shlex.quote(SYNTHETIC_NOTE)}" if synthetic and plot in MEASURED_PLOTS else ""


REAL_PLOTS = ("real_ttft_per_pass", "real_predicted_vs_measured")


# Each rule's command line, without the files the rule adds: one function of the config and the job's wildcards per
# rule (the rule's job_line).
def lab_run(config, run):
    return f"scenario {run_settings(config, run)} --passes {listed(config['runs'][run]['passes'])}"


def sweep_point(config, sweep, value):
    passes = listed(config["sweeps"][sweep]["passes"])
    return f"scenario {sweep_point_settings(config, sweep, value)} --passes {passes}"


def sweep_collect(config, sweep):
    record = sweep_record(config, sweep)
    return f"collect --pass {record['pass']} --value {record['value']}"


def example_measurement(config):
    line = "example-measurement {configs} {passes} {latency} --docs {docs} --tokens {tokens} --jitter {jitter}"
    return line.format(**example_measurement_flags(config)) + " --seed {seed}".format(**config["example_measurement"])


def replay_point(config, workload, gpu_tokens, cpu_tokens, block_tokens):
    line = f"replay {workload_args(config, workload)} --gpu-tokens {gpu_tokens} --cpu-tokens {cpu_tokens}"
    return f"{line} --block-tokens {block_tokens} {cache_args(config, workload)}"


def policy_cliff(config):
    line = "policies cliff --docs {docs} --tokens {tokens} --passes {passes} --gpu-tokens {gpu_tokens}"
    line += " --cpu-tokens {cpu_tokens} --record-pass {record_pass} --write-policies {write_policies}"
    return line.format(**policy_cliff_flags(config))


def policy_table(config, workload):
    line = "policies table {workload} {rooms} --write-policies {write_policies} --evictions {evictions} {cache}"
    return line.format(**policy_table_flags(config, workload))


def mrc_gpu(config, workload, block_tokens):
    line = f"mrc {workload_args(config, workload)} --block-tokens {block_tokens}"
    return f"{line} {cache_args(config, workload, BLOCK_RULES)} {mrc_target(config)}"


def mrc_cpu(config, workload, block_tokens, gpu_tokens):
    return f"{mrc_gpu(config, workload, block_tokens)} --gpu-tokens {gpu_tokens}"


def plan(config, plan):
    workload = plan_workload(config, plan)
    line = f"plan {workload_args(config, workload)} {cache_args(config, workload, BLOCK_RULES)}"
    return f"{line} --model-config {shlex.quote(plan_model(config, plan))} {plan_flags(config, plan)}"


def ttft_fit(config):
    model = shlex.quote(str(Path(config["measurement"]["model_config"])))
    return f"ttft fit {setting_args(config['ttft']['setting'])} --model-config {model} {example_fit_record(config)}"


def real_ttft_fit(config):
    model = shlex.quote(str(Path(config["real_measurement"]["model_config"])))
    return f"ttft fit {real_fit_args(config)} --model-config {model} {real_fit_record(config)}"


def ttft_sweep(config, sweep):
    line = "ttft sweep {setting} --passes {passes} --vary {vary} --grid {grid}"
    return line.format(**ttft_sweep_flags(config, sweep))


def ttft_budgets(config, plan):
    workload = plan_workload(config, plan)
    line = f"ttft budgets {workload_args(config, workload)} {cache_args(config, workload, BLOCK_RULES)}"
    line += f" --model-config {shlex.quote(plan_model(config, plan))}"
    return line + " {plan} --cpu-gib-grid {budgets}".format(**ttft_budgets_flags(config))


def ttft_hardware_lab(config, lab_config):
    flags = hardware_lab_flags(config, lab_config)
    model = shlex.quote(hardware_model(config, "lab"))
    return f"ttft predict {flags['workload']} {flags['rooms']} --model-config {model} {hardware_flags(config)}"


def ttft_hardware_budgets(config, workload):
    flags = hardware_budgets_flags(config)
    model = shlex.quote(hardware_model(config, "budgets"))
    line = f"ttft budgets {flags['workload']} {flags['rules']} --model-config {model} {flags['plan']}"
    return f"{line} {hardware_flags(config)} --cpu-gib-grid {flags['budgets']}"


def ttft_hardware_simulate(config, workload, cpu_blocks, speedup):
    model = shlex.quote(hardware_model(config, "simulate"))
    line = f"simulate {hardware_simulate_flags(config)['workload']} --model-config {model} {hardware_flags(config)}"
    return f"{line} --cpu-blocks {cpu_blocks} --speedup {speedup}"


def search(config, search, candidate=None):
    """``kvlab search``'s line of a search (its rules add where the evaluations go, and which step it is: a
    ``candidate`` simulated, rules/search.smk)."""
    spec = config["searches"][search]
    workload = spec["workload"]
    given = {**{k: v for k, v in workload.items() if k != "source"}, "model_config": spec["model_config"]}
    given |= {"slo": spec["slo"], **spec.get("settings", {}), **spec["space"]}
    words = ["search", "--workload", workload["source"]]
    for key, value in given.items():
        value = listed(value) if isinstance(value, list) else value
        words += [f"--{key.replace('_', '-')}", str(value).lower() if isinstance(value, bool) else str(value)]
    return " ".join(shlex.quote(word) for word in words)


def plot(config, plot):
    return f"plots {plot} " + plot_args(config, plot)


LINES = {
    function.__name__: function
    for function in (lab_run, sweep_point, sweep_collect, example_measurement, replay_point, policy_cliff, policy_table)
    + (mrc_gpu, mrc_cpu, plan, ttft_fit, real_ttft_fit, ttft_sweep, ttft_budgets, ttft_hardware_lab)
    + (ttft_hardware_budgets, ttft_hardware_simulate, search, plot)
}


def jobs(config):
    """``(config key, rule, wildcards)`` of every job whose flags come from the config."""
    for run in config["runs"]:
        yield ("runs", run), "lab_run", {"run": run}
    for sweep, spec in config["sweeps"].items():
        for index, value in enumerate(spec["grid"]):
            yield ("sweeps", sweep, "grid", index), "sweep_point", {"sweep": sweep, "value": value}
        yield ("sweeps", sweep, "record"), "sweep_collect", {"sweep": sweep}
    yield ("example_measurement",), "example_measurement", {}
    for workload in config["replay"]["workloads"]:
        rooms = replay_rooms(config, workload)
        for block, gpu, cpu in product(rooms["block_tokens"], rooms["gpu_tokens"], rooms["cpu_tokens"]):
            point = {"workload": workload, "gpu_tokens": gpu, "cpu_tokens": cpu, "block_tokens": block}
            yield ("replay", "workloads", workload), "replay_point", point
    yield ("policies", "cpu_cliff"), "policy_cliff", {}
    for workload in config["policies"]["tables"]["workloads"]:
        yield ("policies", "tables"), "policy_table", {"workload": workload}
    for workload in config["mrc"]["workloads"]:
        grid = mrc_grid(config, workload)
        for block in grid["block_tokens"]:
            yield ("mrc", "workloads"), "mrc_gpu", {"workload": workload, "block_tokens": block}
            for gpu in grid["gpu_tokens"]:
                yield ("mrc", "workloads"), "mrc_cpu", {"workload": workload, "block_tokens": block, "gpu_tokens": gpu}
    for name in config["plans"]:
        yield ("plans", name), "plan", {"plan": name}
    for name in config.get("searches", {}):
        yield ("searches", name), "search", {"search": name}
    yield ("ttft", "setting"), "ttft_fit", {}
    if "real_measurement" in config:
        yield ("real_measurement",), "real_ttft_fit", {}
    for sweep in config["ttft"]["sweeps"]:
        yield ("ttft", "sweeps"), "ttft_sweep", {"sweep": sweep}
    if "budgets" in config["ttft"]:
        yield ("ttft", "budgets"), "ttft_budgets", {"plan": config["ttft"]["budgets"]["plan"]}
    hardware = config["ttft"].get("hardware", {})
    for name in hardware.get("lab", {}).get("configs", {}):
        yield ("ttft", "hardware", "lab"), "ttft_hardware_lab", {"lab_config": name}
    if "budgets" in hardware:
        yield ("ttft", "hardware", "budgets"), "ttft_hardware_budgets", {"workload": hardware["budgets"]["workload"]}
    if "simulate" in hardware:
        workload = hardware["simulate"]["workload"]
        for cpu_blocks, speedup in simulate_points(config):
            point = {"workload": workload, "cpu_blocks": cpu_blocks, "speedup": speedup}
            yield ("ttft", "hardware", "simulate"), "ttft_hardware_simulate", point
    for name in plot_inputs(config):
        yield ("plots",), "plot", {"plot": name}


def job_lines(config):
    """``(config key, kvlab command line)`` of every job whose flags come from the config, without the files its
    rule adds: ``kvlab config`` parses each with its command's own parser, so that a value a job would refuse is
    refused before any job runs."""
    for key, rule, wildcards in jobs(config):
        yield key, LINES[rule](config, **wildcards)


TWO_WORDS = frozenset({"policies", "ttft", "plots"})  # commands named with a second word (a subcommand, a figure)


def job_args(config, rule, **wildcards):
    """The flags of ``rule``'s job with these wildcards (None: not given): its line after the command's own words."""
    line = LINES[rule](config, **{name: value for name, value in wildcards.items() if value is not None})
    return line.split(" ", 2 if line.split(" ", 1)[0] in TWO_WORDS else 1)[-1]
