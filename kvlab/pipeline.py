"""What the Snakefile builds from config.yaml: targets, command lines, and the cross-field checks
that the JSON schema (schemas/config.schema.yaml) cannot express.

Kept out of the ``.smk`` files so that it is tested on its own; the rules only call it.
"""

import shlex
from itertools import product

from kvlab.workloads import MOONCAKE_BLOCK_TOKENS

SETTINGS = ("gpu", "cpu", "docs", "tokens")
REPLAY_CACHE = ("partial_blocks", "eviction_order")  # cache settings a workload may override
RESERVED = frozenset({"measured", "ttft"})
EXAMPLE_MEASUREMENT = "results/example/ttft.synthetic.jsonl"


class ConfigError(ValueError):
    """A config value that passed the schema but breaks a cross-field rule."""


def check_config(config):
    """Raise ConfigError (one line, naming the config key) on the first broken cross-field rule."""
    runs, sweeps = set(config["runs"]), set(config["sweeps"])
    clashes = sorted((runs & sweeps) | ((runs | sweeps) & RESERVED))
    if clashes:
        raise ConfigError(f"config: artifact name {clashes[0]!r} is used twice or reserved (results/{clashes[0]}.json)")
    for name, sweep in config["sweeps"].items():
        if sweep["vary"] in sweep["fixed"]:
            raise ConfigError(
                f"config: sweeps.{name} varies {sweep['vary']!r} and also fixes it in sweeps.{name}.fixed"
            )
        if sweep["record"]["pass"] > len(sweep["passes"]):
            raise ConfigError(
                f"config: sweeps.{name}.record.pass is {sweep['record']['pass']}"
                f" but sweeps.{name}.passes has only {len(sweep['passes'])}"
            )
    for name, workload in config["replay"]["workloads"].items():
        if workload["source"] == "mooncake":
            bad = [block for block in replay_rooms(config, name)["block_tokens"] if block % MOONCAKE_BLOCK_TOKENS]
            if bad:
                raise ConfigError(
                    f"config: replay.workloads.{name} is a Mooncake trace, its block_tokens must be multiples"
                    f" of {MOONCAKE_BLOCK_TOKENS}, got {bad[0]}"
                )


def scenario_args(config, settings, passes):
    """scenario.py's command line: the shared ``scenario`` defaults overridden by ``settings``."""
    merged = {**config["scenario"], **settings}
    args = [f"--{key} {merged[key]}" for key in SETTINGS if key in merged]
    return " ".join([*args, "--passes " + ",".join(passes)])


def run_args(config, run):
    """Command line of the single run ``run``."""
    spec = config["runs"][run]
    return scenario_args(config, {key: spec[key] for key in SETTINGS if key in spec}, spec["passes"])


def sweep_point_args(config, sweep, value):
    """Command line of one grid point: the sweep's fixed settings plus its varied one at ``value``."""
    spec = config["sweeps"][sweep]
    return scenario_args(config, {**spec["fixed"], spec["vary"]: int(value)}, spec["passes"])


def sweep_point_path(sweep, value):
    return f"work/sweeps/{sweep}/{value}.json"


def sweep_points(config, sweep):
    """The sweep's point files in grid order (the collector keeps that order)."""
    return [sweep_point_path(sweep, value) for value in config["sweeps"][sweep]["grid"]]


def example_measurement_args(config):
    """Command line of kvlab/example_measurement.py from the ``example_measurement`` section."""
    spec = config["example_measurement"]
    args = [f"--config {name}:{rooms['gpu']},{rooms['cpu']}" for name, rooms in spec["configs"].items()]
    args += [f"--pass {name}:{order}" for name, order in spec["passes"].items()]
    args += [f"--{name.replace('_', '-')}-ms {ms}" for name, ms in spec["latency_ms"].items()]
    args += [
        f"--docs {spec['docs']}",
        f"--tokens {spec['tokens']}",
        f"--jitter {spec['jitter']}",
        f"--seed {spec['seed']}",
    ]
    return " ".join(args)


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


def replay_args(config, workload, gpu, cpu, block):
    """kvlab/replay.py's command line for one workload at one point of its grid."""
    spec = config["replay"]["workloads"][workload]
    args = [f"--workload {spec['source']}"]
    for key, value in spec.items():
        if key in ("source", "rooms", *REPLAY_CACHE):
            continue
        if isinstance(value, list):
            value = ",".join(map(str, value))
        args.append(f"--{key.replace('_', '-')} {shlex.quote(str(value))}")
    args += [f"--gpu-tokens {int(gpu)}", f"--cpu-tokens {int(cpu)}", f"--block-tokens {int(block)}"]
    for key in REPLAY_CACHE:
        args.append(f"--{key.replace('_', '-')} {spec.get(key, config['replay'][key])}")
    return " ".join(args)


def name_pattern(names):
    """A wildcard constraint matching exactly these names (and nothing when there are none)."""
    return "|".join(sorted(names)) or "(?!)"


def all_targets(config):
    """Every artifact the default target builds."""
    names = [*config["runs"], *config["sweeps"]]
    lab = [f"results/{name}.json" for name in names] + ["results/ttft.jsonl", "results/measured.json"]
    replay = [replay_table_path(workload) for workload in config["replay"]["workloads"]]
    return lab + replay
