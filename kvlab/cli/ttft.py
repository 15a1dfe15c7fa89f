"""``kvlab ttft``: what TTFT to expect. ``predict``: a workload's TTFT priced from the hardware (measured
kernels or a roofline, and the link); ``breakeven``: the bandwidth above which loading a prefix beats
recomputing it; ``systems``: the GPU systems and engine versions the kernel database covers; ``fit``: the
per-tier model fitted to a measurement, predicted vs measured; ``sweep``: predicted TTFT per pass across a
lab sweep; ``budgets``: predicted TTFT per round at each CPU budget of a plan."""

from dataclasses import dataclass

from kvlab.cache.compiled import READING_BYTES
from kvlab.cache.write_policies import WRITE_POLICIES
from kvlab.cli.base import Outputs, Parser, UsageError, add_arguments, deprecated, listing, run, summary
from kvlab.cli.flags import (
    PerRequestSettings,
    add_hardware_arguments,
    add_memory_argument,
    hardware_settings,
    make_meter,
    workload_options,
)
from kvlab.cli.plan import add_plan_arguments, plan_setting
from kvlab.cli.replay import add_replay_arguments
from kvlab.cli.types import named_order, named_rooms, rooms
from kvlab.latency.calibrate import FACTORS
from kvlab.latency.transfer import DISK_HARDWARE
from kvlab.latency.ttft import MAX_READS
from kvlab.serving import SERVERS
from kvlab.sizing.model_size import decimal_gib
from kvlab.util.files import csv_text, dump_json
from kvlab.util.settings import setting
from kvlab.workloads import MAX_ACCESSES, pass_list, whole_number

VARIED = (
    "gpu_tokens",
    "cpu_tokens",
)  # the rooms a sweep may vary (the lab's sweeps say gpu, cpu: the workflow maps them)


DOCUMENTS = whole_number(1)


@dataclass(kw_only=True)
class BreakevenSettings:
    prefix_tokens: int = setting(help="the prefix's tokens", convert=DOCUMENTS)


@dataclass(kw_only=True)
class FitSettings:
    measurement: str = setting(help="the measurement (the lab's JSONL schema)", file="input")
    docs: int = setting(help="documents in the setting", convert=DOCUMENTS)
    tokens: int = setting(help="tokens per document", convert=DOCUMENTS)
    config: list = setting(
        help="a config of the measurement and its rooms in tokens (repeat)",
        convert=named_rooms,
        repeat=True,
        metavar="NAME:GPU_TOKENS,CPU_TOKENS",
    )
    passes: list = setting(help="a pass of the measurement (repeat)", convert=named_order, repeat=True, option="--pass")
    server: str = setting(
        None,
        help="the tiers of a real server's own design (kvlab replay --server) instead of the lab's simulator",
        choices=SERVERS,
    )
    state_extra_tokens: int = setting(0, help="with --server: as kvlab replay's (default 0)", convert=whole_number(0))
    fit_docs: list = setting(
        None,
        help="fit on these documents' requests only (repeat) and compare on the others': out of sample",
        convert=whole_number(0),
        repeat=True,
        option="--fit-doc",
        metavar="DOC",
    )
    model_config: str = setting(
        None, help="the measured model's config.json: the fit then prices that model only", file="input"
    )
    measured_on: str = setting(None, help="the hardware and server measured on, for the record", metavar="TEXT")
    synthetic: bool = setting(
        False, help="the measurement is generated (the example): it prices its own setting only", switch="on"
    )


@dataclass(kw_only=True)
class FitFactors:
    fit_factors: list = setting(
        None,
        help="with --gpu-system: a factor of the hardware model to fit (repeat; default efficiency, link_gbps,"
        " overhead_ms); the others stay at their flags' values",
        choices=sorted(FACTORS),
        repeat=True,
        option="--fit-factor",
    )
    block_tokens: int = setting(
        None, help="with --gpu-system: the cache's block (default: one per document)", convert=DOCUMENTS
    )
    model: str = setting(help="the model and the comparison (JSON) to write", file="output")
    table: str = setting(help="the predicted-vs-measured table (CSV) to write", file="output")


@dataclass(kw_only=True)
class SweepSettings:
    model: str = setting(help="the fitted model (fit's JSON)", file="input")
    docs: int = setting(help="documents", convert=whole_number(0))
    tokens: int = setting(help="tokens per document", convert=DOCUMENTS)
    passes: list = setting(help="e.g. fwd,fwd", convert=pass_list)
    gpu_tokens: int = setting(
        21520, help="GPU room in tokens when fixed (default 21520)", convert=whole_number(0), renamed="--gpu"
    )
    cpu_tokens: int = setting(
        0, help="CPU room in tokens when fixed (default 0)", convert=whole_number(0), renamed="--cpu"
    )
    write_policy: str = setting("write-through", help="how the CPU tier is filled", choices=WRITE_POLICIES)
    vary: str = setting(help="the room the grid varies", choices=VARIED)
    grid: list = setting(help="the rooms, comma-separated", convert=rooms("rooms in tokens"))
    out: str = setting(help="the CSV file to write", file="output")


@dataclass(kw_only=True)
class BudgetSettings:
    model: str = setting(
        None, help="the fitted model (fit's JSON); or price from the hardware: --gpu-system", file="input"
    )


@dataclass(kw_only=True)
class BudgetGrid:
    allow_other_setting: bool = setting(
        False,
        help="price with a fitted model outside the setting it was fitted in (each row then names the difference)",
        switch="on",
    )
    cpu_gib_grid: list = setting(help="GiB each", convert=listing(decimal_gib, "GiB amounts"), renamed="--cpu-gb-grid")
    out: str = setting(help="the CSV file to write", file="output")


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))

    predict = parser.subcommand("predict", help="a workload's TTFT priced from the hardware (JSON)")
    add_replay_arguments(predict)
    add_hardware_arguments(predict)
    helps = {"per_request": "also write each request's tier split and TTFT (CSV)"}
    add_arguments(predict, PerRequestSettings, helps=helps)

    breakeven = parser.subcommand("breakeven", help="the GB/s above which loading a prefix beats recomputing it")
    add_arguments(breakeven, BreakevenSettings)
    add_hardware_arguments(breakeven, skip=DISK_HARDWARE)

    parser.subcommand("systems", help="the GPU systems and engine versions the kernel database covers")

    fitting = parser.subcommand("fit", help="fit the model to a measurement; predicted vs measured")
    add_arguments(fitting, FitSettings)
    add_hardware_arguments(fitting, skip=("model_config", *DISK_HARDWARE), optional=True)
    add_arguments(fitting, FitFactors)

    sweep = parser.subcommand("sweep", help="predicted TTFT per pass across a lab sweep's grid (CSV)")
    add_arguments(sweep, SweepSettings)
    for room in VARIED:  # the former spelling of its value (--vary gpu), kept for one release
        deprecated(sweep, f"--vary {room[:3]}", f"--vary {room}")

    budgets = parser.subcommand("budgets", help="predicted TTFT per round at each CPU budget of a plan (CSV)")
    add_arguments(budgets, BudgetSettings)
    add_plan_arguments(budgets)
    add_hardware_arguments(budgets, skip=("model_config", "tp", "kv_dtype", *DISK_HARDWARE), optional=True)
    add_arguments(budgets, BudgetGrid)
    add_memory_argument(budgets)
    return parser


def check_reads(docs, passes, points=1, most=MAX_ACCESSES):
    """The lab's simulator reads ``docs`` documents per pass at each point: refuse more than it should."""
    if docs * len(passes) * points > most:
        raise UsageError(f"--docs {docs} x {len(passes)} passes x {points} points reads more than {most}")


def fit(args):
    from kvlab.latency.ttft import TABLE_COLUMNS, fit_report

    if args.gpu_system is not None:
        return calibrate(args)
    if args.fit_factors or args.block_tokens:
        raise UsageError("--fit-factor and --block-tokens calibrate the hardware model: give --gpu-system")
    configs = dict(args.config)
    if len(configs) != len(args.config):
        raise UsageError("--config: a config name is given twice")
    check_reads(args.docs, args.passes, most=MAX_READS)  # a fit holds every read of its setting
    if args.state_extra_tokens and not args.server:
        raise UsageError("--state-extra-tokens applies to --server only")
    fit_docs = None if args.fit_docs is None else set(args.fit_docs)
    if fit_docs is not None and max(fit_docs) >= args.docs:
        raise UsageError(f"--fit-doc: the documents are 0..{args.docs - 1}")
    server = (args.server, args.state_extra_tokens) if args.server else None
    fitted_in = {"model_config": args.model_config, "measured_on": args.measured_on, "synthetic": args.synthetic}
    document, rows = fit_report(
        args.measurement, configs, args.passes, args.docs, args.tokens, server, fit_docs, fitted_in
    )
    return {args.model: dump_json(document), args.table: csv_text(rows, TABLE_COLUMNS)}


CALIBRATION_COLUMNS = (
    "config",
    "pass",
    "n",
    "measured_p50_ms",
    "predicted_p50_ms",
    "p50_ratio",
    "p50_error",
)


def calibrate(args):
    """``ttft fit --gpu-system``: the hardware model's factors fitted to the measurement (the roofline's)."""
    from kvlab.latency.calibrate import FIT, calibrate_measurement

    if args.model_config is None:
        raise UsageError("--gpu-system: the hardware model needs --model-config")
    configs = dict(args.config)
    check_reads(args.docs, args.passes, most=MAX_READS)
    fit_docs = None if args.fit_docs is None else set(args.fit_docs)
    if fit_docs is not None and max(fit_docs) >= args.docs:
        raise UsageError(f"--fit-doc: the documents are 0..{args.docs - 1}")
    source = "roofline" if args.latency_source == "auto" else args.latency_source  # only the roofline has factors
    settings = hardware_settings(args, model_config=args.model_config, latency_source=source)
    server = (args.server, args.state_extra_tokens) if args.server else None
    document = calibrate_measurement(
        args.measurement,
        configs,
        args.passes,
        args.docs,
        args.tokens,
        settings,
        args.block_tokens,
        server,
        fit_docs,
        tuple(args.fit_factors or FIT),
    )
    document["fitted_in"] = {"measured_on": args.measured_on, "synthetic": args.synthetic}
    rows = [
        {key: row[key] for key in CALIBRATION_COLUMNS} | {"tiers": tiers_text(row["tiers"])}
        for row in document["passes"]
    ]
    return {args.model: dump_json(document), args.table: csv_text(rows, (*CALIBRATION_COLUMNS, "tiers"))}


def tiers_text(tiers):
    """``recompute 5; cpu_load 2``: a pass's tiers in one CSV cell."""
    return "; ".join(f"{tier} {count}" for tier, count in tiers.items())


def sweep(args):
    from kvlab.latency.model import TIERS
    from kvlab.latency.ttft import read_model, sweep_rows

    check_reads(args.docs, args.passes, len(args.grid))
    model = read_model(args.model)
    rooms = {"gpu_tokens": args.gpu_tokens, "cpu_tokens": args.cpu_tokens}
    rows = sweep_rows(model, args.docs, args.tokens, args.passes, rooms, args.vary, args.grid, args.write_policy)
    columns = (args.vary, "pass", *TIERS, "predicted_p50_ms", "predicted_mean_ms")
    return {args.out: csv_text(rows, columns)}


# What ``ttft budgets`` holds per request, at its worst (bench/memory_footprint.py measures it): the replay's table
# (its four columns and what the tiers served: 64 bytes), the TTFTs of the budget before while this one's replay runs
# and while its own are made (two lists of a tuple of five Python numbers: 2 x 200), and a round's lists of them
# (16); a reference engine's replay keeps its rows as tuples of Python numbers (300) until they become arrays.
BUDGET_BYTES_PER_REQUEST = 600
# A reference engine (write-back, selective): what a tier keeps of a block it stores, as Python objects, the meter
# counting blocks by the accesses (kvlab/cli/replay.py's figure); the reader's batch and its hash ids as Python ints.
REFERENCE_BYTES_PER_KEY = 250
REFERENCE_FIXED_BYTES = READING_BYTES


def budgets_footprint(workload, write_policy, rules):
    """What ``ttft budgets`` holds (kvlab/util/memory.py): a replay per budget, one at a time, with its per-request
    table, and the TTFTs of the budget before while the next replay runs (every request's tuple of Python
    objects, then the lists of one round's: ``kvlab/latency/ttft.py``'s ``budget_rows``); the replay's engine is
    the same at every budget (the compiled one where the settings allow: kvlab/cache/compiled.py)."""
    from kvlab.cache.compiled import FOOTPRINT, compiles
    from kvlab.cache.interface import CacheSettings
    from kvlab.util.memory import Footprint

    settings = CacheSettings(gpu_tokens=0, block_tokens=workload.block_tokens, write_policy=write_policy, **rules)
    reference = Footprint(key=REFERENCE_BYTES_PER_KEY, fixed=REFERENCE_FIXED_BYTES)
    engine = FOOTPRINT if compiles(settings, workload) else reference
    return Footprint(engine.access, BUDGET_BYTES_PER_REQUEST, engine.key, engine.fixed)


def budgets(args):
    from kvlab.latency.ttft import budget_rows, fitted_model

    if (args.model is None) == (args.gpu_system is None):
        raise UsageError("give one of --model (a fitted model) and --gpu-system (priced from the hardware)")
    workload, _, per_token, gpu_tokens = plan_setting(args)
    if args.model is not None:
        model, outside = fitted_model(args.model, args.model_config, workload, args.allow_other_setting)
    else:
        from kvlab.latency.hardware import HardwareModel

        if args.allow_other_setting:
            raise UsageError("--allow-other-setting applies to a fitted --model only")
        model, outside = HardwareModel(hardware_settings(args), workload.block_tokens), None
    rules = {"partial_blocks": args.partial_blocks, "eviction_order": args.eviction_order}
    meter = make_meter(args, budgets_footprint(workload, args.write_policy, rules))
    rows = budget_rows(model, workload, gpu_tokens, per_token, args.cpu_gib_grid, args.write_policy, rules, meter)
    if outside:
        rows = [{**row, "outside_fit": "; ".join(filter(None, (outside, row.get("outside_fit"))))} for row in rows]
    if args.gpu_system is not None:
        rows = [{**row, "latency_source": model.source} for row in rows]
    return {args.out: csv_text(rows, tuple(rows[0]) if rows else ("cpu_gib",))}


def predict(args):
    from kvlab.api import replays, ttfts
    from kvlab.cli.replay import progress_bar
    from kvlab.latency.hardware import settings_names

    settings = {key: getattr(args, key) for key in (*replays.replay_settings(), *settings_names(), "max_memory")}
    keep = args.per_request is not None
    result = ttfts.ttft_predict(
        workload=args.workload, **workload_options(args), **settings, per_request=keep, progress=progress_bar
    )
    return Outputs({args.per_request: result.per_request} if keep else {}, result.text)


def breakeven(args):
    from kvlab.api import ttfts
    from kvlab.latency.hardware import settings_names

    settings = {name: getattr(args, name) for name in settings_names() if name not in DISK_HARDWARE}  # as the flags did
    return Outputs(stdout=ttfts.ttft_breakeven(prefix_tokens=args.prefix_tokens, **settings))


def systems(args):
    from kvlab.api import ttfts

    return Outputs(stdout=ttfts.ttft_systems())


COMMANDS = {"predict": predict, "breakeven": breakeven, "systems": systems}


def execute(args, parser):
    if args.command in COMMANDS:
        return COMMANDS[args.command](args)
    return Outputs({"fit": fit, "sweep": sweep, "budgets": budgets}[args.command](args))


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
