"""Flag groups that several commands share: the workload's source and its settings (kvlab/workloads/), the
hardware's (:class:`kvlab.latency.hardware.HardwareSettings`, made by the one builder) and the memory stop. A
command's own settings are declared with its function (kvlab/api/: ``PlanSettings``, ``ReplaySettings``,
``CurveSettings``)."""

from dataclasses import fields

from kvlab.api import common
from kvlab.cli.base import add_arguments, argument, input_file
from kvlab.util.memory import memory_size
from kvlab.workloads import WORKLOADS, switch

__all__ = [
    "add_hardware_arguments",
    "add_memory_argument",
    "add_workload_arguments",
    "hardware_settings",
    "make_meter",
    "make_workload",
]


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
