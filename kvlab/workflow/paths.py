"""The workflow's targets and result paths, from config.yaml: one function per kind of artifact, so that a path
is spelled in one place (the rules, the checks and the command lines call these)."""

from itertools import product
from pathlib import Path

POLICY_CLIFF = "results/policies/cpu_cliff.json"


RESERVED = frozenset({"measured", "ttft"})


EXAMPLE_MEASUREMENT = "results/example/ttft.synthetic.jsonl"


def sweep_point_path(sweep, value):
    return f"work/sweeps/{sweep}/{value}.json"


def sweep_points(config, sweep):
    """The sweep's point files in grid order (the collector keeps that order)."""
    return [sweep_point_path(sweep, value) for value in config["sweeps"][sweep]["grid"]]


def replay_rooms(config, workload):
    """The (GPU, CPU, block) grids of one replay workload: the shared ``replay.rooms``, overridden per workload."""
    return {**config["replay"]["rooms"], **config["replay"]["workloads"][workload].get("rooms", {})}


def replay_point_path(workload, gpu, cpu, block):
    return f"results/replay/{workload}/gpu{gpu}-cpu{cpu}-block{block}.json"


def replay_points(config, workload):
    """The workload's point files, block size outermost, then GPU room, then CPU room, each in grid order."""
    rooms = replay_rooms(config, workload)
    grid = product(rooms["block_tokens"], rooms["gpu_tokens"], rooms["cpu_tokens"])
    return [replay_point_path(workload, gpu, cpu, block) for block, gpu, cpu in grid]


def replay_table_path(workload):
    return f"results/replay/{workload}.csv"


def replay_trace(config, workload):
    """The trace file a workload reads (a Snakemake input), or None for a generated workload."""
    return config["replay"]["workloads"][workload].get("trace")


def policy_table_path(workload):
    return f"results/policies/{workload}.csv"


def mrc_path(workload, block, gpu=None, suffix="csv"):
    """The GPU tier's curve (``gpu`` None), or the CPU tier's at GPU room ``gpu``, and its cliffs (json)."""
    tier = "gpu" if gpu is None else f"cpu-at-gpu{gpu}"
    return f"results/mrc/{workload}/block{block}-{tier}.{suffix}"


def mrc_grid(config, workload):
    """The block sizes and GPU rooms of a workload's curves: the ``mrc`` section's, or the workload's own
    ``rooms`` in ``replay.workloads`` (a trace has its own scale and block size)."""
    rooms = config["replay"]["workloads"][workload].get("rooms", {})
    return {key: rooms.get(key, config["mrc"][key]) for key in ("block_tokens", "gpu_tokens")}


def mrc_targets(config):
    """Every curve and its cliffs: per workload and block, the GPU tier's, then the CPU tier's per GPU room."""
    targets = []
    for workload in config["mrc"]["workloads"]:
        grid = mrc_grid(config, workload)
        for block in grid["block_tokens"]:
            for gpu in [None, *grid["gpu_tokens"]]:
                targets += [mrc_path(workload, block, gpu, suffix) for suffix in ("csv", "json")]
    return targets


def mrc_plotted(config):
    """The mrc workloads drawn in the curves' figure: those with curves at ``plots.mrc_block_tokens``."""
    block = config["plots"]["mrc_block_tokens"]
    return [workload for workload in config["mrc"]["workloads"] if block in mrc_grid(config, workload)["block_tokens"]]


def plan_path(name):
    return f"results/plan/{name}.json"


def plan_model(config, name):
    """The model config a plan reads (a Snakemake input)."""
    return str(Path(config["plans"][name]["model_config"]))


def search_path(name):
    return f"results/search/{name}.json"


def search_folder(name):
    """Where a search's candidates and evaluations go (work/: not committed)."""
    return f"work/search/{name}"


def search_model(config, name):
    """The model config a search reads (a Snakemake input)."""
    return str(Path(config["searches"][name]["model_config"]))


TTFT_MODEL = "results/ttft/model.json"


TTFT_TABLE = "results/ttft/predicted_vs_measured.csv"


MEASUREMENT = "results/ttft.jsonl"  # the measurement the lab fits, as copied from measurement.source
MEASURED = "results/measured.json"  # its summary (the lab contract's)


# A real server's measurement (config.yaml's real_measurement): its summary, and the TTFT model fitted through
# the server's own design on some documents and compared on the others.
REAL_MEASURED = "results/real/measured.json"


REAL_MODEL = "results/real/model.json"


REAL_TABLE = "results/real/predicted_vs_measured.csv"


def real_targets(config):
    return [REAL_MEASURED, REAL_MODEL, REAL_TABLE] if "real_measurement" in config else []


def ttft_sweep_path(sweep):
    return f"results/ttft/sweep-{sweep}.csv"


def ttft_budgets_path(plan):
    return f"results/ttft/budgets-{plan}.csv"


def ttft_targets(config):
    ttft = config["ttft"]
    targets = [TTFT_MODEL, TTFT_TABLE, *map(ttft_sweep_path, ttft["sweeps"])]
    if "budgets" in ttft:
        targets.append(ttft_budgets_path(ttft["budgets"]["plan"]))
    return targets


# TTFT priced from the hardware (config.yaml's ttft.hardware): the lab's passes per measured config, the handout's
# per-tier latencies they are drawn beside, and a workload's CPU budgets.
TTFT_HANDOUT = "results/ttft/hardware/handout.json"


def hardware_lab_path(lab_config, suffix="json"):
    """The lab's passes priced in measured config ``lab_config`` (json), and each request's tiers and TTFT (csv)."""
    return f"results/ttft/hardware/lab-{lab_config}{'-requests' if suffix == 'csv' else ''}.{suffix}"


def hardware_budgets_path(workload):
    return f"results/ttft/hardware/budgets-{workload}.csv"


def hardware_system(config):
    """The system file a hardware job reads (a Snakemake input), or None for a system of aiconfigurator-core's."""
    system = config["ttft"]["hardware"]["gpu_system"]
    return system if Path(system).suffix in (".yaml", ".yml") else None


def speedup_name(value):
    """A speedup as its paths and flags spell it: the float's shortest repr (0.4, 1.0), so that 1 and 1.0 are one
    point."""
    return repr(float(value))


def simulate_path(workload, cpu_blocks, speedup, suffix="json"):
    """One point of ``ttft.hardware.simulate``: ``kvlab simulate``'s JSON (json), and its times' percentiles (csv);
    ``speedup`` as :func:`speedup_name` spells it."""
    name = f"cpu{cpu_blocks}-speedup{speedup}{'-percentiles' if suffix == 'csv' else ''}"
    return f"results/ttft/hardware/simulate-{workload}/{name}.{suffix}"


def simulate_budgets(config):
    """The ``(CPU blocks, speedup)`` points of the TTFT distribution per CPU tier: each budget at the one load."""
    budgets = config["ttft"]["hardware"]["simulate"]["budgets"]
    return [(cpu, speedup_name(budgets["speedup"])) for cpu in budgets["cpu_blocks"]]


def simulate_load(config):
    """The ``(CPU blocks, speedup)`` points of TTFT against the load: each CPU tier at every load, in grid order."""
    load = config["ttft"]["hardware"]["simulate"]["load"]
    return [(cpu, speedup_name(speedup)) for cpu in load["cpu_blocks"] for speedup in load["speedup"]]


def simulate_points(config):
    """Every point of ``ttft.hardware.simulate`` once (the budgets', then the load grid's new ones)."""
    return list(dict.fromkeys(simulate_budgets(config) + simulate_load(config)))


def hardware_targets(config):
    hardware = config["ttft"].get("hardware", {})
    targets = []
    if "lab" in hardware:
        targets.append(TTFT_HANDOUT)
        for name in hardware["lab"]["configs"]:
            targets += [hardware_lab_path(name), hardware_lab_path(name, "csv")]
    if "budgets" in hardware:
        targets.append(hardware_budgets_path(hardware["budgets"]["workload"]))
    if "simulate" in hardware:
        workload = hardware["simulate"]["workload"]
        for point in simulate_points(config):
            targets += [simulate_path(workload, *point), simulate_path(workload, *point, "csv")]
    return targets


def plot_path(name):
    return f"results/plots/{name}.png"


def trace_plotted(config):
    """The workload of the trace's figure: the first mrc workload read from a trace file (None if none is)."""
    return next((workload for workload in config["mrc"]["workloads"] if replay_trace(config, workload)), None)


def plot_inputs(config):
    """Each plot's input artifacts, in the order kvlab/report/plots.py takes them (a plot whose inputs are not
    configured is left out)."""
    plots = config["plots"]
    inputs = {
        "gpu_cliff": [f"results/{plots['gpu_cliff']}.json", ttft_sweep_path(plots["gpu_cliff"])],
        "cpu_cliff": [POLICY_CLIFF, ttft_sweep_path(plots["cpu_cliff"])],
        "ttft_per_pass": [MEASUREMENT],
        "predicted_vs_measured": [TTFT_TABLE],
    }
    if mrc_plotted(config):
        block = plots["mrc_block_tokens"]
        inputs["mrc"] = [
            mrc_path(workload, block, gpu)
            for workload in mrc_plotted(config)
            for gpu in [None, *mrc_grid(config, workload)["gpu_tokens"][:1]]
        ]
    if "budgets" in config["ttft"]:
        inputs["ttft_budgets"] = [ttft_budgets_path(config["ttft"]["budgets"]["plan"])]
    hardware = config["ttft"].get("hardware", {})
    if "lab" in hardware:  # the handout's latencies, then each config's passes and requests
        priced = [hardware_lab_path(name, suffix) for name in hardware["lab"]["configs"] for suffix in ("json", "csv")]
        inputs["ttft_hardware_lab"] = [TTFT_HANDOUT, *priced]
    if "budgets" in hardware:
        inputs["ttft_hardware_budgets"] = [hardware_budgets_path(hardware["budgets"]["workload"])]
    if "simulate" in hardware:  # each budget's simulation and its percentiles, in pairs; the load grid's simulations
        workload = hardware["simulate"]["workload"]
        budgets = [
            simulate_path(workload, *point, suffix) for point in simulate_budgets(config) for suffix in ("json", "csv")
        ]
        inputs["simulate_ttft_budgets"] = budgets
        inputs["simulate_ttft_load"] = [simulate_path(workload, *point) for point in simulate_load(config)]
    if "real_measurement" in config:
        inputs["real_ttft_per_pass"] = [config["real_measurement"]["source"]]
        inputs["real_predicted_vs_measured"] = [REAL_TABLE]
    trace = trace_plotted(config)
    if trace:  # its replay table, its GPU curve, its CPU curves, at its first block size
        grid = mrc_grid(config, trace)
        block = grid["block_tokens"][0]
        curves = [mrc_path(trace, block, gpu) for gpu in [None, *grid["gpu_tokens"]]]
        inputs["trace_reuse"] = [replay_table_path(trace), *curves]
    return inputs


def name_pattern(names):
    """A wildcard constraint matching exactly these names (and nothing when there are none)."""
    return "|".join(sorted(names)) or "(?!)"


def all_targets(config):
    """Every artifact the default target builds."""
    names = [*config["runs"], *config["sweeps"]]
    lab = [f"results/{name}.json" for name in names] + [MEASUREMENT, MEASURED]
    replay = [replay_table_path(workload) for workload in config["replay"]["workloads"]]
    policies = [POLICY_CLIFF, *map(policy_table_path, config["policies"]["tables"]["workloads"])]
    planner = mrc_targets(config) + list(map(plan_path, config["plans"]))
    planner += list(map(search_path, config.get("searches", {})))
    plots = list(map(plot_path, plot_inputs(config)))
    ttft = ttft_targets(config) + hardware_targets(config)
    return lab + replay + policies + planner + ttft + real_targets(config) + plots
