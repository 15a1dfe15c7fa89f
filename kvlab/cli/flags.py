"""Flag groups that several commands share: the workload's source and its settings (kvlab/workloads/), the
hardware's (:class:`kvlab.latency.hardware.HardwareSettings`, made by the one builder) and the memory stop. A
command's own settings are declared with its function (kvlab/api/: ``PlanSettings``, ``ReplaySettings``,
``CurveSettings``)."""

from dataclasses import dataclass, fields, make_dataclass

from kvlab.api import common
from kvlab.cli.base import add_arguments
from kvlab.util.memory import MemorySettings
from kvlab.util.settings import setting
from kvlab.workloads import WORKLOADS, switch

__all__ = [
    "add_hardware_arguments",
    "add_memory_argument",
    "add_workload_arguments",
    "hardware_settings",
    "make_meter",
    "make_workload",
]


FORMATS = ("json", "table")


@dataclass
class FormatSettings:
    """``--format`` of a command that answers people too."""

    format: str = setting("json", help="json (default) or a table for people", choices=FORMATS)


@dataclass
class PerRequestSettings:
    """``--per-request FILE``: a command's rows per request, besides its answer."""

    per_request: str = setting(None, help="also write one CSV row per request to FILE", file="output", metavar="FILE")


def workload_settings():
    """``--workload`` and every source's settings (kvlab/workloads/), as declared fields: each in the argument group
    of the sources that have it (the traces share ``--trace``)."""
    owners = {}  # option name -> the sources that have it, in registry order
    for source in WORKLOADS.values():
        for option in source.options:
            owners.setdefault(option.name, (option, []))[1].append(source.name)
    declared = [("workload", str, setting(help="the source of requests", choices=sorted(WORKLOADS)))]
    for option, sources in owners.values():
        own = option.metadata
        bare = {"nargs": "?", "const": "true"} if own["convert"] is switch else {}  # a benchmark's on/off flag alone
        shown = {"metavar": option.name.upper(), "group": f"--workload {', '.join(sources)}", "choices": own["choices"]}
        file = "input" if option.name == "trace" else None  # a file: never also an output
        declared.append((option.name, object, setting(None, help=own["help"], file=file, **shown, **bare)))
    return make_dataclass("WorkloadSettings", declared)


def add_workload_arguments(parser):
    add_arguments(parser, workload_settings())


def add_memory_argument(parser):
    """``--max-memory``: the stop before a workload too large for this machine (kvlab/util/memory.py)."""
    add_arguments(parser, MemorySettings)


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

    title = "hardware (kvlab/latency/hardware.py)"
    add_arguments(parser, HardwareSettings, skip=skip, optional=optional, helps=helps, title=title)


def hardware_settings(args, **given):
    """The :class:`kvlab.latency.hardware.HardwareSettings` the flags (and ``given``) describe."""
    from kvlab.latency.hardware import HardwareSettings

    names = {setting.name for setting in fields(HardwareSettings)}
    values = {name: getattr(args, name) for name in names if hasattr(args, name)}
    return HardwareSettings(**{**values, **given})
