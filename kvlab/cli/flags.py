"""Flag groups that several commands share, each declared once: the workload's source and its settings, and
the cache's rules and policies, whose names and defaults are :class:`kvlab.cache.interface.CacheSettings`' fields (a
plan's setting is kvlab/cli/plan.py's)."""

from dataclasses import fields

from kvlab.api import common
from kvlab.cache.interface import CacheSettings
from kvlab.cache.prefix import EVICTION_ORDERS, PARTIAL_BLOCKS
from kvlab.cli.base import add_arguments, argument, input_file
from kvlab.cli.types import number_in
from kvlab.util.memory import memory_size
from kvlab.workloads import WORKLOADS, switch

__all__ = [
    "add_block_rule_arguments",
    "add_hardware_arguments",
    "add_lmcache_switches",
    "add_memory_argument",
    "add_workload_arguments",
    "hardware_settings",
    "hit_ratio",
    "make_meter",
    "make_workload",
]


DEFAULT = {setting.name: setting.default for setting in fields(CacheSettings)}  # the flags' defaults: the settings'

compile_notice = common.compile_notice  # said on a terminal before numba compiles the curve kernels


hit_ratio = number_in(0, 1, "a ratio between 0 and 1")  # a token hit ratio


def add_workload_arguments(parser):
    """``--workload`` and one argument group per set of sources sharing settings (the traces share ``--trace``)."""
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS), help="the source of requests")
    owners = {}  # option name -> the sources that have it, in registry order
    for source in WORKLOADS.values():
        for option in source.options:
            owners.setdefault(option.name, (option, []))[1].append(source.name)
    groups = {}
    for option, sources in owners.values():
        names = ", ".join(sources)
        if names not in groups:
            groups[names] = parser.add_argument_group(f"--workload {names}")
        bare = {"nargs": "?", "const": "true"} if option.type is switch else {}  # a benchmark's on/off flag alone
        if option.name == "trace":  # a file: never also an output
            bare["type"] = input_file
        groups[names].add_argument(option.flag, dest=option.name, metavar=option.name.upper(), help=option.help, **bare)


def add_memory_argument(parser):
    """``--max-memory``: the stop before a workload too large for this machine (kvlab/util/memory.py)."""
    parser.add_argument(
        "--max-memory",
        type=argument(memory_size),
        help="stop with one line, before reading on, when the state would pass this much memory above the"
        " command's start-up (Python, numpy, numba: about 150 MB) (e.g. 8G, 512M; default: 80%% of the smaller of"
        " the memory available and the control group's limit)",
    )


def make_meter(args, footprint):
    """The :class:`kvlab.util.memory.Meter` of ``--max-memory`` (or its default) for a command holding ``footprint``."""
    from kvlab.util.memory import Meter, default_limit

    return Meter(args.max_memory or default_limit(), footprint)


def workload_options(args):
    """Every source's settings as the flags gave them (None: not given), by name: kvlab.api's keywords."""
    return {option.name: getattr(args, option.name) for source in WORKLOADS.values() for option in source.options}


def make_workload(args, block_tokens=None):
    """The chosen source with its own settings; a setting of another source, or a bad one, is a usage error
    (kvlab.api.workload_of, one rule for the commands and the functions)."""
    return common.workload_of(args.workload, workload_options(args), block_tokens)


def add_block_rule_arguments(group):
    """Which blocks are stored, and in which order a request's blocks are accessed."""
    group.add_argument(
        "--partial-blocks",
        choices=PARTIAL_BLOCKS,
        default=DEFAULT["partial_blocks"],
        help="store a request's last partial block or not (default %(default)s: only full blocks are cached)",
    )
    group.add_argument(
        "--eviction-order",
        choices=EVICTION_ORDERS,
        default=DEFAULT["eviction_order"],
        help="within a request, evict the tail before the head (default %(default)s, as vLLM and LMCache) or the"
        " head first",
    )


def add_lmcache_switches(group):
    """LMCache's behaviour on write-through (kvlab/cache/write_policies.py)."""
    group.add_argument(
        "--touch-cpu-on-gpu-hit",
        action="store_true",
        help="write-through only: a GPU hit also refreshes the block's CPU copy (LMCache's lookup)",
    )
    group.add_argument(
        "--re-store-on-gpu-hit",
        action="store_true",
        help="write-through only: a GPU-hit block whose CPU copy was evicted is stored on the CPU again (LMCache)",
    )


def add_hardware_arguments(parser, skip=(), optional=False, helps=None):
    """The flags of :class:`kvlab.latency.hardware.HardwareSettings` but ``skip`` (a command's own flags); with
    ``optional`` none is required (the command prices from the hardware only where ``--gpu-system`` is given);
    ``helps`` replaces a flag's help."""
    from kvlab.latency.hardware import HardwareSettings

    group = parser.add_argument_group("hardware (kvlab/latency/hardware.py)")
    add_arguments(group, HardwareSettings, skip=skip, optional=optional, helps=helps)


def hardware_settings(args, **given):
    """The :class:`kvlab.latency.hardware.HardwareSettings` the flags (and ``given``) describe."""
    from kvlab.latency.hardware import HardwareSettings

    names = {setting.name for setting in fields(HardwareSettings)}
    values = {name: getattr(args, name) for name in names if hasattr(args, name)}
    return HardwareSettings(**{**values, **given})
