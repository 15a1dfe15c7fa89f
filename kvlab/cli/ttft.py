"""``kvlab ttft``: what TTFT to expect. ``predict``: a workload's TTFT priced from the hardware (measured
kernels or a roofline, and the link); ``breakeven``: the bandwidth above which loading a prefix beats
recomputing it; ``systems``: the GPU systems and engine versions the kernel database covers; ``fit``: the
per-tier model fitted to a measurement, predicted vs measured; ``sweep``: predicted TTFT per pass across a
lab sweep; ``budgets``: predicted TTFT per round at each CPU budget of a plan."""

from kvlab.cache.compiled import READING_BYTES
from kvlab.cache.write_policies import WRITE_POLICIES
from kvlab.cli.base import Outputs, Parser, UsageError, argument, deprecated, listing, run, summary
from kvlab.cli.flags import add_hardware_arguments, add_memory_argument, hardware_settings, make_meter, workload_options
from kvlab.cli.plan import add_plan_arguments, plan_setting
from kvlab.cli.replay import add_replay_arguments
from kvlab.cli.types import named_order, named_rooms, rooms, tokens
from kvlab.latency.calibrate import FACTORS
from kvlab.latency.transfer import DISK_HARDWARE
from kvlab.latency.ttft import MAX_READS
from kvlab.serving import SERVERS
from kvlab.sizing.model_size import decimal_gib
from kvlab.util.files import csv_text, dump_json
from kvlab.workloads import MAX_ACCESSES, pass_list, whole_number

VARIED = (
    "gpu_tokens",
    "cpu_tokens",
)  # the rooms a sweep may vary (the lab's sweeps say gpu, cpu: the workflow maps them)


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    documents = argument(whole_number(1))

    predict = commands.add_parser("predict", help="a workload's TTFT priced from the hardware (JSON)")
    predict.set_defaults(parser=predict)
    add_replay_arguments(predict)
    add_hardware_arguments(predict)
    predict.add_output("--per-request", metavar="FILE", help="also write each request's tier split and TTFT (CSV)")

    breakeven = commands.add_parser("breakeven", help="the GB/s above which loading a prefix beats recomputing it")
    breakeven.set_defaults(parser=breakeven)
    breakeven.add_argument("--prefix-tokens", required=True, type=documents, help="the prefix's tokens")
    add_hardware_arguments(breakeven, skip=DISK_HARDWARE)

    systems = commands.add_parser("systems", help="the GPU systems and engine versions the kernel database covers")
    systems.set_defaults(parser=systems)

    fitting = commands.add_parser("fit", help="fit the model to a measurement; predicted vs measured")
    fitting.set_defaults(parser=fitting)
    fitting.add_input("--measurement", required=True, help="the measurement (the lab's JSONL schema)")
    fitting.add_argument("--docs", required=True, type=documents, help="documents in the setting")
    fitting.add_argument("--tokens", required=True, type=documents, help="tokens per document")
    fitting.add_argument(
        "--config",
        required=True,
        action="append",
        type=argument(named_rooms),
        metavar="NAME:GPU_TOKENS,CPU_TOKENS",
        help="a config of the measurement and its rooms in tokens (repeat)",
    )
    fitting.add_argument("--pass", dest="passes", required=True, action="append", type=argument(named_order))
    fitting.add_argument(
        "--server",
        choices=SERVERS,
        help="the tiers of a real server's own design (kvlab replay --server) instead of the lab's simulator",
    )
    fitting.add_argument(
        "--state-extra-tokens", type=tokens, default=0, help="with --server: as kvlab replay's (default 0)"
    )
    fitting.add_argument(
        "--fit-doc",
        dest="fit_docs",
        action="append",
        type=argument(whole_number(0)),
        metavar="DOC",
        help="fit on these documents' requests only (repeat) and compare on the others': out of sample",
    )
    fitting.add_input("--model-config", help="the measured model's config.json: the fit then prices that model only")
    fitting.add_argument("--measured-on", metavar="TEXT", help="the hardware and server measured on, for the record")
    fitting.add_argument(
        "--synthetic",
        action="store_true",
        help="the measurement is generated (the example): it prices its own setting only",
    )
    add_hardware_arguments(fitting, skip=("model_config", *DISK_HARDWARE), optional=True)
    fitting.add_argument(
        "--fit-factor",
        dest="fit_factors",
        action="append",
        choices=sorted(FACTORS),
        help="with --gpu-system: a factor of the hardware model to fit (repeat; default efficiency, link_gbps,"
        " overhead_ms); the others stay at their flags' values",
    )
    fitting.add_argument(
        "--block-tokens", type=documents, help="with --gpu-system: the cache's block (default: one per document)"
    )
    fitting.add_output("--model", required=True, help="the model and the comparison (JSON) to write")
    fitting.add_output("--table", required=True, help="the predicted-vs-measured table (CSV) to write")

    sweep = commands.add_parser("sweep", help="predicted TTFT per pass across a lab sweep's grid (CSV)")
    sweep.set_defaults(parser=sweep)
    sweep.add_input("--model", required=True, help="the fitted model (fit's JSON)")
    sweep.add_argument("--docs", required=True, type=argument(whole_number(0)))
    sweep.add_argument("--tokens", required=True, type=documents)
    sweep.add_argument("--passes", required=True, type=argument(pass_list), help="e.g. fwd,fwd")
    sweep.add_argument("--gpu-tokens", type=tokens, default=21520, help="GPU room in tokens when fixed (default 21520)")
    sweep.add_argument("--cpu-tokens", type=tokens, default=0, help="CPU room in tokens when fixed (default 0)")
    sweep.add_argument("--write-policy", choices=WRITE_POLICIES, default="write-through")
    sweep.add_argument("--vary", required=True, choices=VARIED, help="the room the grid varies")
    for room in VARIED:  # the former spellings (--gpu, --vary gpu), kept for one release
        deprecated(sweep, f"--{room[:3]}", f"--{room.replace('_', '-')}")
        deprecated(sweep, f"--vary {room[:3]}", f"--vary {room}")
    sweep.add_argument("--grid", required=True, type=rooms("rooms in tokens"))
    sweep.add_output("--out", required=True, help="the CSV file to write")

    budgets = commands.add_parser("budgets", help="predicted TTFT per round at each CPU budget of a plan (CSV)")
    budgets.set_defaults(parser=budgets)
    budgets.add_input("--model", help="the fitted model (fit's JSON); or price from the hardware: --gpu-system")
    add_plan_arguments(budgets)
    add_hardware_arguments(budgets, skip=("model_config", "tp", "kv_dtype", *DISK_HARDWARE), optional=True)
    budgets.add_argument(
        "--allow-other-setting",
        action="store_true",
        help="price with a fitted model outside the setting it was fitted in (each row then names the difference)",
    )
    budgets.add_argument("--cpu-gib-grid", required=True, type=listing(decimal_gib, "GiB amounts"), help="GiB each")
    deprecated(budgets, "--cpu-gb-grid", "--cpu-gib-grid")
    budgets.add_output("--out", required=True, help="the CSV file to write")
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
