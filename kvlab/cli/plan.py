"""``kvlab plan``: a CPU offload budget for a workload and a model: the tokens served from GPU, from CPU and
recomputed per round, and the GiB (2**30 bytes) full reuse (or a target hit ratio) takes."""

from dataclasses import dataclass, fields

from kvlab.api import plans
from kvlab.cli.base import Outputs, Parser, add_arguments, run, summary
from kvlab.cli.flags import (
    FormatSettings,
    add_hardware_arguments,
    add_memory_argument,
    add_workload_arguments,
    workload_options,
)
from kvlab.latency.hardware import HardwareSettings
from kvlab.sizing.model_size import decimal_gib
from kvlab.util.settings import setting


@dataclass
class ModelFile:
    model_config: str = setting(
        help="the model's Hugging Face config.json", file="input", metavar="FILE", group="model"
    )


@dataclass
class LoadSettings:
    load: tuple = setting(
        None,
        help="also the TTFT percentiles and throughput under this load, per CPU budget (kvlab simulate at the"
        " plan's rooms, with --gpu-system): speedup=S of the trace's clock, rate=R requests/s or clients=N",
        convert=plans.load_spec,
        metavar="SPEC",
    )


def add_plan_arguments(parser, grid=False):
    """The setting of a plan: the workload's source, the model, the chunks, the rooms and the write policy; with
    ``grid`` (``kvlab plan``'s) the CPU budget is a list, per GPU or per node, with a disk tier below and the
    plan's answers besides (kvlab.api.plans.PlanSettings)."""
    add_workload_arguments(parser)
    add_arguments(parser, ModelFile)
    skip = () if grid else ("cpu_gib_per_node", "disk_gib", "disk_tokens", *PLAN_ONLY)
    defaults = None if grid else {"cpu_gib": ZERO}
    add_arguments(parser, plans.PlanSettings, skip=skip, grid=grid, defaults=defaults)


# kvlab plan's own: what it answers besides the plan, and a fleet (kvlab ttft budgets prices one instance)
PLAN_ONLY = ("target_hit_ratio", "engine", "window_rule", *plans.FLEET_SETTINGS)
ZERO = decimal_gib(0)  # ttft budgets' one CPU budget, by default


PLAN_FLAGS = ("model_config", "tp", "kv_dtype", "chunk_tokens", "gpu_tokens", "gpu_gib")  # a plan's setting


def plan_setting(args):
    """``(workload, model shape, bytes per token, GPU tokens)`` from the parsed plan arguments (kvlab.api's)."""
    setting = {key: getattr(args, key) for key in PLAN_FLAGS}
    return plans.plan_setting(args.workload, workload_options(args), **setting)


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    add_plan_arguments(parser, grid=True)
    add_arguments(parser, FormatSettings)
    add_arguments(parser, LoadSettings)
    declared = {found.name: found.metadata["help"] for found in fields(HardwareSettings)}
    gpu_system = "also the predicted TTFT per round on this system (with --engine): " + declared["gpu_system"]
    gpu_system += "; its GPUs per node divide --cpu-gib-per-node"
    add_hardware_arguments(parser, skip=plans.HARDWARE_OWN, optional=True, helps={"gpu_system": gpu_system})
    add_memory_argument(parser)
    return parser


def hardware_given(args):
    """The hardware flags given (the others None: their defaults are kvlab.latency.hardware's); one given without
    --gpu-system is a usage error, in the words of kvlab.plan's."""
    given = getattr(args, "_given", set())
    return {key: getattr(args, key) if key in given or key == "layerwise" else None for key in plans.HARDWARE_SETTINGS}


def one_or_list(values):
    """A flag's list as the API takes it: one value alone (a plan), several a list (a grid), none None."""
    return values[0] if values is not None and len(values) == 1 else values


def execute(args, parser):
    from kvlab.api.common import _flag
    from kvlab.sizing.plan import grid_table, table
    from kvlab.util.files import dump_json

    keys = [key for key in (*PLAN_FLAGS, *plans.PLAN_SETTINGS, "max_memory") if key not in plans.HARDWARE_SETTINGS]
    settings = {key: getattr(args, key) for key in keys}
    settings |= {key: one_or_list(settings[key]) for key in ("cpu_gib", "cpu_gib_per_node", "disk_gib")}
    result = plans.plan(workload=args.workload, **workload_options(args), **settings, **hardware_given(args))
    if isinstance(result, plans.Plan):
        return Outputs(stdout=table(result.to_dict()) if args.format == "table" else result.text)
    documents = result.to_dict()  # a grid: one plan per budget, in the order given
    if args.format == "json":
        return Outputs(stdout=dump_json(documents))
    labels = [
        " ".join(f"{_flag(axis)} {value}" for axis, value in zip(result.axes, point, strict=True))
        for point in result.points
    ]
    return Outputs(stdout=grid_table(documents, result.to_frame().to_dict("records"), labels))


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
