"""``kvlab simulate``: a workload through one engine instance on a clock (requests in flight hold their blocks,
steps share a token budget, copies queue on the links, every step priced from the hardware); one JSON object on
stdout, with ``--per-request FILE`` one CSV row per request, and with ``--percentiles FILE`` the times' percentiles."""

import dataclasses
import sys

from kvlab.api import simulates
from kvlab.api.replays import ReplaySettings
from kvlab.cli.base import Outputs, Parser, add_arguments, run, summary
from kvlab.cli.flags import (
    PerRequestSettings,
    add_hardware_arguments,
    add_memory_argument,
    add_workload_arguments,
    workload_options,
)
from kvlab.latency.transfer import DISK_HARDWARE
from kvlab.simulator.arrivals import Arrivals
from kvlab.simulator.fleet import ROUTER_SETTING_NAMES, ROUTER_SETTINGS, FleetSettings
from kvlab.simulator.instance import CACHE_RULES
from kvlab.simulator.settings import EngineSettings
from kvlab.util.settings import setting


@dataclasses.dataclass
class PercentileSettings:
    percentiles: str = setting(
        None,
        help="also write the times' percentiles to FILE: a CSV row per percentile (0 to 100, and 99.5, 99.9)",
        file="output",
        metavar="FILE",
    )


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    taken = (*CACHE_RULES, "gpu_tokens", "cpu_tokens", "block_tokens")  # the others are a disk's or a server's
    skip = [found.name for found in dataclasses.fields(ReplaySettings) if found.name not in taken]
    helps = {"gpu_tokens": "GPU pool in tokens (or --gpu-blocks)"}
    cache = "cache (kvlab replay's flags; the pool is vLLM's: LRU, full blocks)"
    add_arguments(parser, ReplaySettings, skip=skip, optional=True, helps=helps, title=cache)
    add_arguments(parser, EngineSettings, title="engine (kvlab/simulator/settings.py)")
    add_arguments(parser, Arrivals, title="arrivals (one of; default: the trace's clock)")
    add_arguments(parser, FleetSettings)
    for settings in ROUTER_SETTINGS.values():  # None unless given: a router's settings apply to it alone
        add_arguments(parser, settings, defaults=dict.fromkeys(ROUTER_SETTING_NAMES))
    add_hardware_arguments(parser, skip=DISK_HARDWARE)
    add_workload_arguments(parser)
    add_memory_argument(parser)
    add_arguments(parser, PerRequestSettings)
    add_arguments(parser, PercentileSettings)
    return parser


def settings_of(args):
    """kvlab.simulate's keywords from the flags (the files to write aside)."""
    names = ("gpu_tokens", "cpu_tokens", "block_tokens", *CACHE_RULES, "max_memory")
    names += tuple(field.name for field in dataclasses.fields(EngineSettings))
    names += tuple(field.name for field in dataclasses.fields(Arrivals))
    names += (*(field.name for field in dataclasses.fields(FleetSettings)), *ROUTER_SETTING_NAMES)
    from kvlab.latency.hardware import settings_names

    settings = {name: getattr(args, name) for name in (*names, *settings_names()) if hasattr(args, name)}
    return {"workload": args.workload, **workload_options(args), **settings}


def prepare(args):
    """``kvlab config``'s check of a job's flags: every setting checked as :func:`execute` checks it, nothing run."""
    simulates.simulate(**settings_of(args), per_request=args.per_request is not None, dry_run=True)


def execute(args, parser):
    kept = {"per_request": args.per_request, "percentiles": args.percentiles}
    wanted = {name: path is not None for name, path in kept.items()}
    result = simulates.simulate(**settings_of(args), **wanted)
    refused = result.to_dict()["refused"]
    if refused:  # the figures are the served requests' only: said, not left to a key of the JSON
        sys.stderr.write(
            f"{parser.prog}: note: {refused:,} of {refused + result.requests:,} requests refused, each longer with its"
            " output than the GPU pool (as vLLM refuses it); the figures are the served requests'\n"
        )
    files = {path: getattr(result, name) for name, path in kept.items() if path is not None}
    return Outputs(files, result.text)


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
