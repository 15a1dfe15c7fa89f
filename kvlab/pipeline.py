"""What the Snakefile builds from config.yaml: targets, command lines, and the cross-field checks
that the JSON schema (schemas/config.schema.yaml) cannot express.

Kept out of the ``.smk`` files so that it is tested on its own; the rules only call it.
"""

import ast
import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
from functools import cache
from itertools import product
from pathlib import Path

from kvlab.cache.eviction import EVICTION_POLICIES
from kvlab.cache.write_policies import CACHE_SETTINGS as REPLAY_CACHE  # cache settings a workload may override
from kvlab.cache.write_policies import LMCACHE_SWITCHES, make_cache
from kvlab.config import dotted
from kvlab.sizing.model_size import ModelConfigError, no_tokens, read_model_config
from kvlab.traces import FORMATS

SETTINGS = ("gpu", "cpu", "docs", "tokens", "write_policy")
EQUAL_SIZED = tuple(name for name, policy in EVICTION_POLICIES.items() if policy.equal_sizes)  # need drop
POLICY_CLIFF = "results/policies/cpu_cliff.json"
RESERVED = frozenset({"measured", "ttft"})
EXAMPLE_MEASUREMENT = "results/example/ttft.synthetic.jsonl"


def module_file(module, root="."):
    """The source file of a ``kvlab`` module (a package's ``__init__.py``), relative to ``root``."""
    path = Path(*module.split("."))
    return str(path / "__init__.py") if (Path(root) / path).is_dir() else str(path.with_suffix(".py"))


@cache
def imported(module, root="."):
    """The ``kvlab`` modules ``module`` imports, anywhere in its code (a command imports its domain lazily)."""
    return {name for name in imported_names(module, root) if is_module(name, root)}


def imported_names(module, root="."):
    """Every name ``module``'s import statements name, from the file's parse, kept in work/stamps/imports.json by
    the file's time and size (a no-op run parses no module)."""
    name = module_file(module, root)
    source = Path(root) / name
    status = source.stat()
    known = import_cache(root)
    entry = known.get(name)
    if entry and entry[:2] == [status.st_mtime_ns, status.st_size]:
        return set(entry[2])
    package = module if source.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from kvlab import files`
    known[name] = [status.st_mtime_ns, status.st_size, sorted(found)]
    known[CHANGED] = True
    return found


CHANGED = ""  # the import cache's mark of an entry added since it was read


@cache
def import_cache(root="."):
    try:
        known = json.loads((Path(root) / STAMPS / "imports.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def save_import_cache(root="."):
    """Write the import cache if a module was parsed."""
    known = import_cache(root)
    if known.pop(CHANGED, False):
        path = Path(root) / STAMPS / "imports.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_text(path, json.dumps(known, sort_keys=True) + "\n")


def is_module(name, root="."):
    """Whether ``name`` is a module or package of kvlab (not a function or constant imported from one)."""
    path = Path(root, *name.split("."))
    return name.split(".")[0] == "kvlab" and (path.with_suffix(".py").is_file() or path.is_dir())


@cache
def command_code(command, root="."):
    """Every ``kvlab`` source file a ``python -m kvlab COMMAND`` job runs: derived from the imports, so that
    editing one reruns exactly the jobs that import it."""
    from kvlab.cli import COMMANDS

    seen, todo = set(), ["kvlab", "kvlab.__main__", "kvlab.cli", f"kvlab.cli.{COMMANDS[command][0]}"]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += imported(module, root) - seen
            parent = module.rpartition(".")[0]  # importing a.b.c runs a/__init__ and a/b/__init__ first
            if parent:
                todo.append(parent)
    save_import_cache(root)
    return sorted(module_file(module, root) for module in seen)


STAMPS = "work/stamps"


@cache
def code_stamp(command, root="."):
    """The stamp of the code a ``kvlab COMMAND`` job runs: the files of :func:`command_code` with their times and
    sizes, rewritten only when one of them changes. One input per job instead of the dozens of files behind it
    keeps Snakemake's own start-up small (it handles every input of every job on every run)."""
    files = {}
    for name in command_code(command, root):
        status = os.stat(Path(root, name))
        files[name] = [status.st_mtime_ns, status.st_size]
    return write_stamp("code", {"command": command}, files)


def write_stamp(rule, wildcards, settings):
    """The stamp file of one job: its settings (command line, input list) as text, rewritten only when they
    change. A rule takes it as an input, so a changed setting reruns the job through file times alone: a fresh
    clone (no stamps yet) reruns everything, and no decision needs Snakemake's metadata."""
    name = "-".join(str(value) for value in wildcards.values()) or rule
    path = Path(STAMPS, rule, f"{name}.json")
    text = json.dumps(settings, indent=1) + "\n"
    try:
        if path.read_text(encoding="utf-8") == text:
            return str(path)
    except OSError:
        path.parent.mkdir(parents=True, exist_ok=True)
    replace_text(path, text)
    return str(path)


def replace_text(path, text):
    """``path`` now holds ``text``: written to a temporary file and renamed, so never half written."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)


class ConfigError(ValueError):
    """A config value that passed the schema but breaks a cross-field rule; ``key``, the config key it names."""

    def __init__(self, message, key=()):
        super().__init__(message)
        self.key = tuple(key)


MAX_JOBS = 5_000  # jobs of one run: config.yaml makes about 270; Snakemake's DAG of 10**6 was not built in 300 s


def job_counts(config):
    """The jobs each section of the config makes, counted without building them (a grid of 300 numbers makes
    millions)."""
    rooms = {name: replay_rooms(config, name) for name in config["replay"]["workloads"]}
    points = {name: len(r["gpu_tokens"]) * len(r["cpu_tokens"]) * len(r["block_tokens"]) for name, r in rooms.items()}
    tables = config["policies"]["tables"]
    curves = 0
    for workload in config["mrc"]["workloads"]:
        if workload in config["replay"]["workloads"]:
            grid = mrc_grid(config, workload)
            curves += len(grid["block_tokens"]) * (1 + len(grid["gpu_tokens"]))
    return {
        "runs": len(config["runs"]),
        "sweeps": sum(len(sweep["grid"]) + 1 for sweep in config["sweeps"].values()),
        "replay": sum(points[name] + 1 for name in points),
        "policies": 1 + len(tables["workloads"]),
        "mrc": curves,
        "plans": len(config["plans"]),
    }


def check_size(config):
    """A config whose jobs pass :data:`MAX_JOBS` is refused, naming the sections that make them."""
    counts = job_counts(config)
    total = sum(counts.values())
    if total > MAX_JOBS:
        parts = ", ".join(f"{name} {count:,}" for name, count in sorted(counts.items(), key=lambda kv: -kv[1]) if count)
        raise ConfigError(f"config: the grids make {total:,} jobs ({parts}), more than the bound of {MAX_JOBS:,}")


def check_config(config):
    """Raise ConfigError (one line, naming the config key) on the first broken cross-field rule."""
    check_size(config)
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
        check_trace_blocks(f"replay.workloads.{name}", workload, replay_rooms(config, name)["block_tokens"])
        check_cache(config, name)
    check_policies(config)
    check_mrc(config)
    check_plans(config)
    check_ttft(config)
    check_real(config)
    check_inputs(config)  # last: it reads the files


def check_inputs(config):
    """Every input file config.yaml names is what its job reads (but the example measurement, which the pipeline
    makes): a measurement the jobs can fit in its setting (its records read as ``kvlab summarize`` reads them), a
    trace whose first lines are of its format. A file that is not one (``/etc/passwd``) is refused here, before
    any job copies or reads it."""
    from kvlab.files import InputError
    from kvlab.latency.ttft import fit
    from kvlab.traces import TraceError, check_head

    def settled(setting):
        configs = {name: (rooms["gpu"], rooms["cpu"]) for name, rooms in setting["configs"].items()}
        return configs, list(setting["passes"].items()), setting["docs"], setting["tokens"]

    named = []  # (config key, path, the check of its content)
    if config["measurement"]["source"] != EXAMPLE_MEASUREMENT:
        setting = settled(config["ttft"]["setting"])
        named.append((("measurement", "source"), config["measurement"]["source"], lambda path: fit(path, *setting)))
    real = config.get("real_measurement")
    if real is not None:
        design = (real["server"], real["state_extra_tokens"])
        named.append(
            (
                ("real_measurement", "source"),
                real["source"],
                lambda path: fit(path, *settled(real), server=design, fit_docs=set(real["fit_docs"])),
            )
        )
    for name, spec in config["replay"]["workloads"].items():
        if "trace" in spec:
            head = lambda path, trace=FORMATS[spec["source"]]: check_head(path, trace)  # noqa: E731
            named.append((("replay", "workloads", name, "trace"), spec["trace"], head))
    for key, path, content in named:
        if not Path(path).is_file():
            raise ConfigError(f"config: {dotted(key)}: {path}: no such file", key)
        try:
            content(path)
        except (InputError, TraceError, ValueError) as error:
            raise ConfigError(f"config: {dotted(key)}: {error}", key) from None


def check_cache(config, workload):
    """The workload's cache settings combine (LMCache switches on write-through, arc/opt on full blocks):
    the cache itself says, built with empty rooms."""
    settings = replay_cache(config, workload)
    try:
        make_cache(settings.pop("write_policy"), 0, 0, 1, **settings)
    except ValueError as error:
        raise ConfigError(f"config: replay.workloads.{workload}: {error}") from None


def check_policies(config):
    """The ``policies`` section names a CPU-room sweep of the lab and replay workloads that exist."""
    policies = config["policies"]
    sweep = policies["cpu_cliff"]["sweep"]
    if sweep not in config["sweeps"] or config["sweeps"][sweep]["vary"] != "cpu":
        raise ConfigError(f"config: policies.cpu_cliff.sweep must name a sweep that varies cpu, got {sweep!r}")
    if "gpu" not in {**config["scenario"], **config["sweeps"][sweep]["fixed"]}:
        raise ConfigError(f"config: sweeps.{sweep}.fixed must fix gpu for policies.cpu_cliff")
    for workload in policies["tables"]["workloads"]:
        check_replay_workload(config, "policies.tables.workloads", workload)
        equal_sized = [name for name in policies["evictions"] if name in EQUAL_SIZED]
        if equal_sized and replay_cache(config, workload)["partial_blocks"] != "drop":
            raise ConfigError(
                f"config: policies.evictions has {', '.join(equal_sized)}, which need partial_blocks drop;"
                f" replay.workloads.{workload} keeps partial blocks"
            )


def check_replay_workload(config, key, workload):
    """``workload``, named at config key ``key``, is a replay workload; return its spec."""
    if workload not in config["replay"]["workloads"]:
        raise ConfigError(f"config: {key} names {workload!r}, which is not in replay.workloads")
    return config["replay"]["workloads"][workload]


def check_trace_blocks(key, spec, blocks):
    """A trace's blocks (at config key ``key``) are whole numbers of the trace's own."""
    if spec["source"] in FORMATS:
        trace = FORMATS[spec["source"]]
        bad = [block for block in blocks if block % trace.block_tokens]
        if bad:
            raise ConfigError(
                f"config: {key}: a {trace.title} trace's blocks must be multiples of {trace.block_tokens}, got {bad[0]}"
            )


def check_mrc(config):
    """The curves' workloads exist and can be cut into their blocks."""
    for workload in config["mrc"]["workloads"]:
        spec = check_replay_workload(config, "mrc.workloads", workload)
        key = f"replay.workloads.{workload}.rooms.block_tokens" if "block_tokens" in spec.get("rooms", {}) else None
        check_trace_blocks(key or "mrc.block_tokens", spec, mrc_grid(config, workload)["block_tokens"])


def check_plans(config):
    """Each plan's workload exists, and its model config can be read and split over its tp."""
    for name, plan in config["plans"].items():
        key = f"plans.{name}"
        spec = check_replay_workload(config, f"{key}.workload", plan["workload"])
        if "chunk_tokens" in plan:  # otherwise the source's own default, which always fits
            check_trace_blocks(f"{key}.chunk_tokens", spec, [plan["chunk_tokens"]])
        try:
            shape = read_model_config(plan["model_config"])
            shape.bytes_per_token(plan.get("tp", 1))
        except ModelConfigError as error:
            raise ConfigError(f"config: {key}.model_config: {error}") from None
        except ValueError as error:
            raise ConfigError(f"config: {key}.tp: {error}") from None
        if no_tokens(shape):
            raise ConfigError(f"config: {key}.model_config: {no_tokens(shape)}", ("plans", name, "model_config"))


def check_real(config):
    """The real measurement's fitted documents are documents of its setting, and not all of them."""
    real = config.get("real_measurement")
    if real is None:
        return
    outside = [doc for doc in real["fit_docs"] if doc >= real["docs"]]
    if outside:
        raise ConfigError(f"config: real_measurement.fit_docs: {outside[0]} is not one of the {real['docs']} docs")
    if len(set(real["fit_docs"])) >= real["docs"]:
        raise ConfigError("config: real_measurement.fit_docs: every document is fitted; none is left to compare")


def check_ttft(config):
    """The TTFT predictions name lab sweeps of GPU or CPU rooms and a plan; the plots, sweeps and curves that exist;
    the example measurement, when it is the measurement, was taken in the setting the model is fitted in."""
    ttft, plots = config["ttft"], config["plots"]
    if config["measurement"]["source"] == EXAMPLE_MEASUREMENT:
        example, setting = config["example_measurement"], ttft["setting"]
        for key in ("configs", "passes"):
            missing = [name for name, value in example[key].items() if setting[key].get(name) != value]
            if missing:
                raise ConfigError(
                    f"config: ttft.setting.{key}: {missing[0]!r} differs from example_measurement.{key},"
                    " the measurement the model is fitted to"
                )
        if example["docs"] > setting["docs"]:
            raise ConfigError("config: ttft.setting.docs: fewer than example_measurement.docs")
    for sweep in ttft["sweeps"]:
        if sweep not in config["sweeps"] or config["sweeps"][sweep]["vary"] not in ("gpu", "cpu"):
            raise ConfigError(f"config: ttft.sweeps names {sweep!r}, which is not a sweep of gpu or cpu rooms")
    if "budgets" in ttft and ttft["budgets"]["plan"] not in config["plans"]:
        raise ConfigError(f"config: ttft.budgets.plan names {ttft['budgets']['plan']!r}, which is not in plans")
    for plot, room in (("gpu_cliff", "gpu"), ("cpu_cliff", "cpu")):
        sweep = plots[plot]
        if sweep not in ttft["sweeps"] or config["sweeps"][sweep]["vary"] != room:
            raise ConfigError(f"config: plots.{plot} must name a sweep of {room} rooms in ttft.sweeps, got {sweep!r}")
    if mrc_plotted(config) != [] or not config["mrc"]["workloads"]:
        return
    raise ConfigError(f"config: plots.mrc_block_tokens {plots['mrc_block_tokens']} is no workload's block in mrc")


def scenario_args(config, settings, passes):
    """scenario.py's command line: the shared ``scenario`` defaults overridden by ``settings``."""
    merged = {**config["scenario"], **settings}
    args = [f"--{key.replace('_', '-')} {merged[key]}" for key in SETTINGS if key in merged]
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
    """Command line of kvlab/measure/example.py from the ``example_measurement`` section."""
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
    args = [workload_args(config, workload)]
    args += [f"--gpu-tokens {int(gpu)}", f"--cpu-tokens {int(cpu)}", f"--block-tokens {int(block)}"]
    args += [cache_args(config, workload, REPLAY_CACHE)]
    return " ".join(args)


def workload_args(config, workload):
    """The ``--workload`` flag and the source's own settings of one replay workload."""
    spec = config["replay"]["workloads"][workload]
    args = [f"--workload {spec['source']}"]
    for key, value in spec.items():
        if key in ("source", "rooms", *REPLAY_CACHE):
            continue
        if isinstance(value, list):
            value = ",".join(map(str, value))
        args.append(f"--{key.replace('_', '-')} {shlex.quote(str(value))}")
    return " ".join(args)


def replay_cache(config, workload):
    """The cache settings of one replay workload: the replay section's, overridden by the workload's."""
    spec = config["replay"]["workloads"][workload]
    return {key: spec.get(key, config["replay"][key]) for key in REPLAY_CACHE}


def cache_args(config, workload, keys):
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


def policy_cliff_args(config):
    """kvlab/policies.py cliff's command line: the lab sweep named by ``policies.cpu_cliff``, on its grid."""
    spec = config["policies"]["cpu_cliff"]
    sweep = config["sweeps"][spec["sweep"]]
    lab = {**config["scenario"], **sweep["fixed"]}
    grid = spec.get("grid", sweep["grid"])
    return " ".join(
        [
            f"--docs {lab['docs']}",
            f"--tokens {lab['tokens']}",
            "--passes " + ",".join(sweep["passes"]),
            f"--gpu-tokens {lab['gpu']}",
            "--cpu-tokens " + ",".join(map(str, grid)),
            f"--record-pass {sweep['record']['pass']}",
            "--write-policies " + ",".join(config["policies"]["write_policies"]),
        ]
    )


def policy_table_path(workload):
    return f"results/policies/{workload}.csv"


def policy_table_args(config, workload):
    """kvlab/policies.py table's command line for one replay workload."""
    policies = config["policies"]
    rooms = policies["tables"]["rooms"]
    return " ".join(
        [
            workload_args(config, workload),
            *(f"--{key.replace('_', '-')} " + ",".join(map(str, rooms[key])) for key in rooms),
            "--write-policies " + ",".join(policies["write_policies"]),
            "--evictions " + ",".join(policies["evictions"]),
            cache_args(config, workload, ("partial_blocks", "eviction_order", *LMCACHE_SWITCHES)),
        ]
    )


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


def mrc_args(config, workload, block, gpu=None):
    """kvlab/curves/mrc.py's command line for one curve."""
    args = [workload_args(config, workload), f"--block-tokens {int(block)}"]
    args.append(cache_args(config, workload, ("partial_blocks", "eviction_order")))
    if gpu is not None:
        args.append(f"--gpu-tokens {int(gpu)}")
    if "target_hit_ratio" in config["mrc"]:
        args.append(f"--target-hit-ratio {config['mrc']['target_hit_ratio']}")
    return " ".join(args)


def plan_path(name):
    return f"results/plan/{name}.json"


PLAN_FLAGS = ("tp", "chunk_tokens", "gpu_tokens", "gpu_gb", "cpu_gb", "write_policy", "target_hit_ratio")


def plan_args(config, name, flags=PLAN_FLAGS):
    """kvlab/sizing/plan.py's command line for one plan: its workload's settings and block rules, then its own."""
    spec = config["plans"][name]
    workload = spec["workload"]
    args = [workload_args(config, workload), cache_args(config, workload, ("partial_blocks", "eviction_order"))]
    args.append(f"--model-config {shlex.quote(spec['model_config'])}")
    args += [f"--{key.replace('_', '-')} {spec[key]}" for key in flags if key in spec]
    return " ".join(args)


def plan_model(config, name):
    """The model config a plan reads (a Snakemake input)."""
    return str(Path(config["plans"][name]["model_config"]))


TTFT_MODEL = "results/ttft/model.json"
TTFT_TABLE = "results/ttft/predicted_vs_measured.csv"
MEASUREMENT = "results/ttft.jsonl"


def ttft_fit_args(config):
    """kvlab/latency/ttft.py fit's setting: documents, each config's rooms, each pass's order."""
    return setting_args(config["ttft"]["setting"])


def setting_args(setting):
    """A measurement's setting as ``kvlab ttft fit`` flags: documents, each config's rooms, each pass's order."""
    args = [f"--docs {setting['docs']}", f"--tokens {setting['tokens']}"]
    for name, rooms in setting["configs"].items():
        args.append("--config " + shlex.quote(f"{name}:{rooms['gpu']},{rooms['cpu']}"))
    args += ["--pass " + shlex.quote(f"{name}:{order}") for name, order in setting["passes"].items()]
    return " ".join(args)


# A real server's measurement (config.yaml's real_measurement): its summary, and the TTFT model fitted through
# the server's own design on some documents and compared on the others.
REAL_MEASURED = "results/real/measured.json"
REAL_MODEL = "results/real/model.json"
REAL_TABLE = "results/real/predicted_vs_measured.csv"


def real_fit_args(config):
    """``kvlab ttft fit``'s flags for the real measurement: its setting, its server's design, the fitted docs."""
    real = config["real_measurement"]
    args = [setting_args(real), f"--server {real['server']}", f"--state-extra-tokens {real['state_extra_tokens']}"]
    return " ".join(args + [f"--fit-doc {doc}" for doc in real["fit_docs"]])


def real_targets(config):
    return [REAL_MEASURED, REAL_MODEL, REAL_TABLE] if "real_measurement" in config else []


def ttft_sweep_path(sweep):
    return f"results/ttft/sweep-{sweep}.csv"


def ttft_sweep_args(config, sweep):
    """kvlab/latency/ttft.py sweep's command line for one lab sweep: its documents, passes, fixed room and grid."""
    spec = config["sweeps"][sweep]
    lab = {**config["scenario"], **spec["fixed"]}
    args = [f"--docs {lab['docs']}", f"--tokens {lab['tokens']}", "--passes " + ",".join(spec["passes"])]
    args += [f"--{key.replace('_', '-')} {lab[key]}" for key in ("gpu", "cpu", "write_policy") if key in lab]
    args += [f"--vary {spec['vary']}", "--grid " + ",".join(map(str, spec["grid"]))]
    return " ".join(args)


def ttft_budgets_path(plan):
    return f"results/ttft/budgets-{plan}.csv"


def ttft_budgets_args(config):
    """kvlab/latency/ttft.py budgets' command line: the plan's setting (not its one budget) and the budgets."""
    budgets = config["ttft"]["budgets"]
    flags = tuple(flag for flag in PLAN_FLAGS if flag not in ("cpu_gb", "target_hit_ratio"))
    return plan_args(config, budgets["plan"], flags) + " --cpu-gb-grid " + ",".join(map(str, budgets["cpu_gb"]))


def ttft_targets(config):
    ttft = config["ttft"]
    targets = [TTFT_MODEL, TTFT_TABLE, *map(ttft_sweep_path, ttft["sweeps"])]
    if "budgets" in ttft:
        targets.append(ttft_budgets_path(ttft["budgets"]["plan"]))
    return targets


def plot_path(name):
    return f"results/plots/{name}.png"


SYNTHETIC_NOTE = "TTFT from the SYNTHETIC example measurement (kvlab/measure/example.py), not a real server"
MEASURED_PLOTS = ("gpu_cliff", "cpu_cliff", "ttft_per_pass", "predicted_vs_measured", "ttft_budgets")


def plot_args(config, plot):
    """kvlab plots' flags besides the inputs: a note under every figure drawn from the synthetic example, and
    under a real measurement's its own."""
    if plot in REAL_PLOTS:
        return f"--note {shlex.quote(config['real_measurement']['note'])}"
    if plot == "trace_reuse":
        workload = trace_plotted(config)
        note = f"Token hit ratios of the real trace {replay_trace(config, workload)} (replay workload {workload}):"
        return "--note " + shlex.quote(f"{note} exact LRU curves, and replays as points")
    synthetic = config["measurement"]["source"] == EXAMPLE_MEASUREMENT
    return f"--note {shlex.quote(SYNTHETIC_NOTE)}" if synthetic and plot in MEASURED_PLOTS else ""


REAL_PLOTS = ("real_ttft_per_pass", "real_predicted_vs_measured")


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


def job_lines(config):
    """``(config key, kvlab command line)`` of every job whose flags come from the config, without the files its
    rule adds: ``kvlab config`` parses each with its command's own parser, so that a value a job would refuse is
    refused before any job runs (the rules build the same lines from the same functions)."""
    for run in config["runs"]:
        yield ("runs", run), "scenario " + run_args(config, run)
    for sweep, spec in config["sweeps"].items():
        for index, value in enumerate(spec["grid"]):
            yield ("sweeps", sweep, "grid", index), "scenario " + sweep_point_args(config, sweep, value)
    yield ("example_measurement",), "example-measurement " + example_measurement_args(config)
    for workload in config["replay"]["workloads"]:
        rooms = replay_rooms(config, workload)
        for block, gpu, cpu in product(rooms["block_tokens"], rooms["gpu_tokens"], rooms["cpu_tokens"]):
            yield ("replay", "workloads", workload), "replay " + replay_args(config, workload, gpu, cpu, block)
    yield ("policies", "cpu_cliff"), "policies cliff " + policy_cliff_args(config)
    for workload in config["policies"]["tables"]["workloads"]:
        yield ("policies", "tables"), "policies table " + policy_table_args(config, workload)
    for workload in config["mrc"]["workloads"]:
        grid = mrc_grid(config, workload)
        for block in grid["block_tokens"]:
            for gpu in [None, *grid["gpu_tokens"]]:
                yield ("mrc", "workloads"), "mrc " + mrc_args(config, workload, block, gpu)
    for name in config["plans"]:
        yield ("plans", name), "plan " + plan_args(config, name)
    yield ("ttft", "setting"), "ttft fit " + ttft_fit_args(config)
    if "real_measurement" in config:
        yield ("real_measurement",), "ttft fit " + real_fit_args(config)
    for sweep in config["ttft"]["sweeps"]:
        yield ("ttft", "sweeps"), "ttft sweep " + ttft_sweep_args(config, sweep)
    if "budgets" in config["ttft"]:
        yield ("ttft", "budgets"), "ttft budgets " + ttft_budgets_args(config)
    for plot in plot_inputs(config):
        yield ("plots",), f"plots {plot} " + plot_args(config, plot)


def name_pattern(names):
    """A wildcard constraint matching exactly these names (and nothing when there are none)."""
    return "|".join(sorted(names)) or "(?!)"


def all_targets(config):
    """Every artifact the default target builds."""
    names = [*config["runs"], *config["sweeps"]]
    lab = [f"results/{name}.json" for name in names] + ["results/ttft.jsonl", "results/measured.json"]
    replay = [replay_table_path(workload) for workload in config["replay"]["workloads"]]
    policies = [POLICY_CLIFF, *map(policy_table_path, config["policies"]["tables"]["workloads"])]
    planner = mrc_targets(config) + list(map(plan_path, config["plans"]))
    plots = list(map(plot_path, plot_inputs(config)))
    return lab + replay + policies + planner + ttft_targets(config) + real_targets(config) + plots


class JobError(RuntimeError):
    """A job's command failed; its log says why."""


JOB_LOCK = threading.Lock()  # one job in this process at a time: commands write through sys.stdout and stderr


def run_job(line, log, stdout=None):
    """Run ``kvlab LINE`` (shell-quoted) as a Snakemake job: its standard error to ``log`` and, where the command
    writes its result there, its standard output to ``stdout`` whole (a temporary file renamed at the end).

    A job runs inside Snakemake's own process (the profile's ``force-use-threads``): what a command imports
    (numpy, pandas, numba and its kernels, matplotlib) is imported once per run, not once per job, which was
    most of a small job's cost. A job that reads a trace (``--trace``), whose work outweighs any start-up,
    runs in a process of its own instead, so that large jobs run side by side on every core.
    """
    from kvlab.runs import job_process

    argv = shlex.split(line)
    temporary = Path(f"{stdout}.tmp") if stdout else None
    with open(log, "w", encoding="utf-8") as errors:
        with open(temporary, "w", encoding="utf-8") if temporary else contextlib.nullcontext(errors) as out:
            if "--trace" in argv:
                command = [sys.executable, "-m", "kvlab", *argv]
                code = job_process(command, stdout=out, stderr=errors, stdin=subprocess.DEVNULL).returncode
            else:
                from kvlab.cli import main

                with JOB_LOCK, contextlib.redirect_stdout(out), contextlib.redirect_stderr(errors):
                    code = main(argv)
    if code:
        if temporary:
            temporary.unlink(missing_ok=True)
        raise JobError(f"kvlab {argv[0]} failed (exit code {code}); see {log}")
    if temporary:
        os.replace(temporary, stdout)
