"""``kvlab plan``: a CPU offload budget for a workload and a model: the tokens served from GPU, from CPU and
recomputed per round, and the GiB (2**30 bytes) full reuse (or a target hit ratio) takes."""

from dataclasses import fields

from kvlab.api import plans
from kvlab.cache.costs import WINDOW_RULES
from kvlab.cli.base import Outputs, Parser, argument, deprecated, input_file, listing, run, summary
from kvlab.cli.flags import (
    add_block_rule_arguments,
    add_hardware_arguments,
    add_memory_argument,
    add_workload_arguments,
    add_write_policy_argument,
    hit_ratio,
    workload_options,
)
from kvlab.cli.types import block_tokens, tokens
from kvlab.latency.hardware import HardwareSettings
from kvlab.serving import OFFLOADING
from kvlab.sizing.model_size import KV_DTYPES, MAX_GIB, decimal_gib
from kvlab.workloads import whole_number

FORMATS = ("json", "table")
gib_amount = argument(decimal_gib)
gib_amounts = listing(decimal_gib, "GiB amounts")
HARDWARE_OWN = ("model_config", "engine", "tp", "kv_dtype")  # the hardware's settings that are plan's own flags


def add_plan_arguments(parser, grid=False):
    """The setting of a plan: the workload's source, the model, the chunks, the rooms and the write policy; with
    ``grid`` (``kvlab plan``'s) the CPU budget is a list, per GPU or per node."""
    add_workload_arguments(parser)
    model = parser.add_argument_group("model")
    model.add_argument(
        "--model-config", required=True, type=input_file, metavar="FILE", help="the model's Hugging Face config.json"
    )
    model.add_argument(
        "--tp",
        type=argument(whole_number(1, 2**20)),
        default=1,
        help="tensor-parallel degree (default 1); rooms are per GPU",
    )
    model.add_argument(
        "--kv-dtype",
        choices=KV_DTYPES,
        default="auto",
        help="the element the KV cache is stored in (default auto: the model's, a float32 one served in 16 bits)",
    )
    cache = parser.add_argument_group("cache")
    cache.add_argument(
        "--chunk-tokens",
        type=block_tokens,
        help="tokens per chunk (default 256, LMCache's; mooncake: 512 or a multiple of it)",
    )
    add_block_rule_arguments(cache)
    gpu = cache.add_mutually_exclusive_group(required=True)
    gpu.add_argument("--gpu-tokens", type=tokens, help="the GPU's KV room in tokens (vLLM's figure)")
    gpu.add_argument("--gpu-gib", type=gib_amount, help=f"the GPU's KV room in GiB (2**30 bytes; at most {MAX_GIB})")
    if grid:
        cpu = cache.add_mutually_exclusive_group()
        cpu.add_argument(
            "--cpu-gib",
            type=gib_amounts,
            help=f"CPU offload budget per GPU in GiB (2**30 bytes; default 0, at most {MAX_GIB}); a comma-separated"
            " list of distinct budgets plans each (a JSON array, in order)",
        )
        cpu.add_argument(
            "--cpu-gib-per-node",
            type=gib_amounts,
            metavar="AMOUNT[,AMOUNT...]",
            help="instead: the node's host memory for the KV cache in GiB, divided over the instance's ranks on the"
            " node (per GPU: AMOUNT / min(tp, GPUs per node), as each engine sizes its CPU cache per rank); GPUs per"
            f" node: --gpu-system's, else {plans.DEFAULT_GPUS_PER_NODE}",
        )
        deprecated(parser, "--cpu-gb-per-node", "--cpu-gib-per-node")
    else:
        cache.add_argument(
            "--cpu-gib",
            type=gib_amount,
            default=decimal_gib(0),
            help=f"CPU offload budget in GiB (2**30 bytes; default 0, at most {MAX_GIB})",
        )
    if grid:  # kvlab plan's: a disk tier below the CPU
        disk = cache.add_mutually_exclusive_group()
        disk.add_argument(
            "--disk-gib",
            type=gib_amounts,
            help="a disk (or remote) tier below the CPU, per GPU in GiB (2**30 bytes), written through with every"
            " block neither tier above served (kvlab/cache/tiers.py); a comma-separated list plans each",
        )
        disk.add_argument("--disk-tokens", type=tokens, help="instead: the disk tier's room in tokens")
        deprecated(parser, "--disk-gb", "--disk-gib")
    deprecated(parser, "--gpu-gb", "--gpu-gib")
    deprecated(parser, "--cpu-gb", "--cpu-gib")
    add_write_policy_argument(
        cache, "how the CPU tier is filled (default write-through: exact curve; others: bisection over replays)"
    )


PLAN_FLAGS = ("model_config", "tp", "kv_dtype", "chunk_tokens", "gpu_tokens", "gpu_gib")  # a plan's setting


def plan_setting(args):
    """``(workload, model shape, bytes per token, GPU tokens)`` from the parsed plan arguments (kvlab.api's)."""
    setting = {key: getattr(args, key) for key in PLAN_FLAGS}
    return plans.plan_setting(args.workload, workload_options(args), **setting)


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    add_plan_arguments(parser, grid=True)
    parser.add_argument(
        "--target-hit-ratio",
        type=argument(hit_ratio),
        help="also the smallest CPU budget for this token hit ratio over the whole workload (0..1)",
    )
    parser.add_argument("--format", choices=FORMATS, default="json", help="json (default) or a table for people")
    parser.add_argument(
        "--engine",
        choices=OFFLOADING,
        help="also the settings to paste into this engine for the CPU budget, and the host memory it allocates",
    )
    parser.add_argument(
        "--window-rule",
        choices=WINDOW_RULES,
        help="what a sliding-window layer stores: all-layers (LMCache: every token) or in-window (vLLM's hybrid"
        " allocator: only the last window of each request; budgets by bisection over replays); default in-window"
        " with --engine vllm, else all-layers",
    )
    parser.add_argument(
        "--load",
        type=argument(plans.load_spec),
        metavar="SPEC",
        help="also the TTFT percentiles and throughput under this load, per CPU budget (kvlab simulate at the"
        " plan's rooms, with --gpu-system): speedup=S of the trace's clock, rate=R requests/s or clients=N",
    )
    declared = {found.name: found.metadata["help"] for found in fields(HardwareSettings)}
    gpu_system = "also the predicted TTFT per round on this system (with --engine): " + declared["gpu_system"]
    gpu_system += "; its GPUs per node divide --cpu-gib-per-node"
    add_hardware_arguments(parser, skip=HARDWARE_OWN, optional=True, helps={"gpu_system": gpu_system})
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
