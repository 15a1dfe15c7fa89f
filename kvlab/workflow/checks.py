"""The cross-field config checks that the JSON schema (schemas/config.schema.yaml) cannot express, and the bounds
on what one run may ask for: run before any job, by ``kvlab config`` and by the Snakefile."""

from pathlib import Path

from kvlab.cache.eviction import EVICTION_POLICIES
from kvlab.cache.write_policies import make_cache
from kvlab.sizing.model_size import ModelConfigError, no_tokens, read_model_config
from kvlab.util.errors import SettingError
from kvlab.util.numbers import grid_points
from kvlab.workflow.commands import replay_cache
from kvlab.workflow.config import dotted
from kvlab.workflow.paths import EXAMPLE_MEASUREMENT, RESERVED, mrc_grid, mrc_plotted, replay_rooms, simulate_points
from kvlab.workloads import WORKLOADS, TraceWorkload
from kvlab.workloads.traces import FORMATS

EQUAL_SIZED = tuple(name for name, policy in EVICTION_POLICIES.items() if policy.equal_sizes)  # need drop


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
    hardware = config["ttft"].get("hardware", {})
    priced = len(hardware["lab"]["configs"]) + 1 if "lab" in hardware else 0  # and the handout's latencies
    simulated = len(simulate_points(config)) if "simulate" in hardware else 0
    return {
        "hardware": priced + ("budgets" in hardware) + simulated,
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
    check_searches(config)
    check_ttft(config)
    check_real(config)
    check_hardware(config)
    check_inputs(config)  # last: it reads the files


def check_inputs(config):
    """Every input file config.yaml names is what its job reads (but the example measurement, which the pipeline
    makes): a measurement the jobs can fit in its setting (its records read as ``kvlab summarize`` reads them), a
    trace whose first lines are of its format. A file that is not one (``/etc/passwd``) is refused here, before
    any job copies or reads it."""
    from kvlab.latency.ttft import fit
    from kvlab.util.files import InputError
    from kvlab.workloads.traces import TraceError

    def settled(setting):
        configs = {name: (rooms["gpu_tokens"], rooms["cpu_tokens"]) for name, rooms in setting["configs"].items()}
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
            named.append((("replay", "workloads", name, "trace"), spec["trace"], trace_head(spec)))
    for key, path, content in named:
        if not Path(path).is_file():
            raise ConfigError(f"config: {dotted(key)}: {path}: no such file", key)
        try:
            content(path)
        except (InputError, TraceError, ValueError) as error:
            raise ConfigError(f"config: {dotted(key)}: {error}", key) from None


def trace_head(spec):
    """The check of a trace workload's first lines, read as its job's reader reads them (a Mooncake or Bailian
    trace in its format; the user's own, ``requests``, with the hash blocks and chaining its spec declares)."""
    if spec["source"] == "requests":
        from kvlab.workloads import RequestsWorkload
        from kvlab.workloads.requests import RequestTrace, check_head

        declared = spec.get("hash_block_tokens", 0), spec.get("hash_chaining", "")
        return lambda path: check_head(path, RequestTrace(RequestsWorkload.default_block_tokens, *declared))
    from kvlab.workloads.traces import check_head

    return lambda path: check_head(path, FORMATS[spec["source"]])


def check_cache(config, workload):
    """The workload's cache settings combine (LMCache switches on write-through, arc/opt on full blocks):
    the cache itself says, built with empty rooms."""
    settings = replay_cache(config, workload)
    try:
        make_cache(settings.pop("write_policy"), 0, 0, 1, **settings)
    except ValueError as error:
        raise ConfigError(f"config: replay.workloads.{workload}: {error}", ("replay", "workloads", workload)) from None


def check_policies(config):
    """The ``policies`` section names a CPU-room sweep of the lab and replay workloads that exist."""
    policies = config["policies"]
    sweep = policies["cpu_cliff"]["sweep"]
    if sweep not in config["sweeps"] or config["sweeps"][sweep]["vary"] != "cpu":
        raise ConfigError(
            f"config: policies.cpu_cliff.sweep must name a sweep that varies cpu, got {sweep!r}",
            ("policies", "cpu_cliff", "sweep"),
        )
    if "gpu" not in {**config["scenario"], **config["sweeps"][sweep]["fixed"]}:
        raise ConfigError(
            f"config: sweeps.{sweep}.fixed must fix gpu for policies.cpu_cliff", ("sweeps", sweep, "fixed")
        )
    designs = {"write_policies": policies["write_policies"]}
    grids = {  # a replay per point, bounded as the commands bound them
        "cpu_cliff": {"cpu_tokens": policies["cpu_cliff"].get("grid", config["sweeps"][sweep]["grid"])} | designs,
        "tables": {**policies["tables"]["rooms"], **designs, "evictions": policies["evictions"]},
    }
    for part, grid in grids.items():
        try:
            grid_points({key: len(values) for key, values in grid.items()})
        except SettingError as error:
            raise ConfigError(
                f"config: policies.{part}: kvlab policies refuses it: {error}", ("policies", part)
            ) from None
    for workload in policies["tables"]["workloads"]:
        spec = check_replay_workload(config, "policies.tables.workloads", workload)
        check_trace_blocks("policies.tables.rooms.block_tokens", spec, policies["tables"]["rooms"]["block_tokens"])
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
        check_served(config, ("plans", name), plan)


def check_searches(config):
    """Each search's settings, as kvlab search checks them before any work (its dry run): a GPU system it does not
    know, a router, an SLO it cannot read, a model it cannot size, a budget its prices refuse."""
    from kvlab.api.searches import search
    from kvlab.util.errors import KvlabError

    for name, spec in config.get("searches", {}).items():
        workload = spec["workload"]
        keywords = {k: v for k, v in workload.items() if k != "source"}
        keywords |= {"model_config": spec["model_config"], "slo": spec["slo"], **spec.get("settings", {})}
        keywords |= spec["space"]
        try:
            search(workload=workload["source"], **keywords, dry_run=True)
        except (KvlabError, TypeError) as error:
            raise ConfigError(f"config: searches.{name}: {error}") from None


def check_served(config, key, spec):
    """A workload served by a model (a plan, the hardware's budgets, at config key ``key``): the workload exists and
    can be cut into its chunks, and the model config can be read and split over its tp."""
    spec_key = ".".join(key)
    workload = check_replay_workload(config, f"{spec_key}.workload", spec["workload"])
    if "chunk_tokens" in spec:  # otherwise the source's own default, which always fits
        check_trace_blocks(f"{spec_key}.chunk_tokens", workload, [spec["chunk_tokens"]])
    check_model(key, spec)


def check_model(key, spec):
    """The model config at ``key + ("model_config",)`` can be read and split over ``spec``'s tp (1 if none)."""
    where = ".".join(key)
    try:
        shape = read_model_config(spec["model_config"])
        shape.bytes_per_token(spec.get("tp", 1))
    except ModelConfigError as error:
        raise ConfigError(f"config: {where}.model_config: {error}", (*key, "model_config")) from None
    except ValueError as error:
        raise ConfigError(f"config: {where}.tp: {error}", (*key, "tp")) from None
    if no_tokens(shape):
        raise ConfigError(f"config: {where}.model_config: {no_tokens(shape)}", (*key, "model_config"))


def check_hardware(config):
    """``ttft.hardware`` names a system its jobs can price on (read as the jobs read it: aiconfigurator-core's spec
    files, without importing it), models that can be read, a replay workload for its budgets, and a trace workload
    (one with a clock) to simulate."""
    hardware = config["ttft"].get("hardware")
    if hardware is None:
        return
    from kvlab.latency.systems import read_system
    from kvlab.util.errors import SettingError

    try:
        read_system(hardware["gpu_system"])
    except SettingError as error:
        message = str(error).removeprefix("--gpu-system: ")
        raise ConfigError(f"config: ttft.hardware.gpu_system: {message}", ("ttft", "hardware", "gpu_system")) from None
    if "lab" in hardware:
        check_model(("ttft", "hardware", "lab"), hardware["lab"])
    if "budgets" in hardware:
        check_served(config, ("ttft", "hardware", "budgets"), hardware["budgets"])
    if "simulate" in hardware:
        spec = hardware["simulate"]
        check_served(config, ("ttft", "hardware", "simulate"), spec)
        check_speedups(spec)
        if not issubclass(WORKLOADS[config["replay"]["workloads"][spec["workload"]]["source"]], TraceWorkload):
            raise ConfigError(
                f"config: ttft.hardware.simulate.workload names {spec['workload']!r}, which has no clock: name a trace"
                " workload of replay.workloads (its timestamps, divided by each speedup, are the arrivals)",
                ("ttft", "hardware", "simulate", "workload"),
            )


def check_speedups(spec):
    """Each speedup of ``ttft.hardware.simulate`` within kvlab simulate's one range (kvlab/simulator/arrivals.py)."""
    from kvlab.simulator.arrivals import paced
    from kvlab.util.errors import SettingError

    budgets, load = spec["budgets"]["speedup"], spec["load"]["speedup"]
    named = [
        (("budgets", "speedup"), budgets),
        *((("load", "speedup", index), value) for index, value in enumerate(load)),
    ]
    for key, value in named:
        try:
            paced("speedup", value)
        except SettingError as error:
            message = str(error).removeprefix("argument --speedup: ")
            where = ("ttft", "hardware", "simulate", *key)
            raise ConfigError(f"config: {dotted(where)}: {message}", where) from None


def check_measured_models(config):
    """The measurements' models (their fits record them) can be read; the example measurement is synthetic."""
    measurement = config["measurement"]
    if measurement["source"] == EXAMPLE_MEASUREMENT and not measurement["synthetic"]:
        raise ConfigError(
            f"config: measurement.synthetic: the example measurement ({EXAMPLE_MEASUREMENT}) is synthetic;"
            " set synthetic: true, or point source at a real measurement",
            ("measurement", "synthetic"),
        )
    check_model(("measurement",), measurement)
    if "real_measurement" in config:
        check_model(("real_measurement",), config["real_measurement"])


def check_real(config):
    """The real measurement's fitted documents are documents of its setting, and not all of them."""
    check_measured_models(config)
    real = config.get("real_measurement")
    if real is None:
        return
    outside = [doc for doc in real["fit_docs"] if doc >= real["docs"]]
    if outside:
        raise ConfigError(
            f"config: real_measurement.fit_docs: {outside[0]} is not one of the {real['docs']} docs",
            ("real_measurement", "fit_docs"),
        )
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
        raise ConfigError(
            f"config: ttft.budgets.plan names {ttft['budgets']['plan']!r}, which is not in plans",
            ("ttft", "budgets", "plan"),
        )
    for plot, room in (("gpu_cliff", "gpu"), ("cpu_cliff", "cpu")):
        sweep = plots[plot]
        if sweep not in ttft["sweeps"] or config["sweeps"][sweep]["vary"] != room:
            raise ConfigError(f"config: plots.{plot} must name a sweep of {room} rooms in ttft.sweeps, got {sweep!r}")
    if mrc_plotted(config) != [] or not config["mrc"]["workloads"]:
        return
    raise ConfigError(f"config: plots.mrc_block_tokens {plots['mrc_block_tokens']} is no workload's block in mrc")
