"""``kvlab plan``: a CPU offload budget for a workload and a model: the tokens served from GPU, from CPU and
recomputed per round, and the GiB (2**30 bytes) full reuse (or a target hit ratio) takes."""

from kvlab.api import plans
from kvlab.cache.costs import WINDOW_RULES
from kvlab.cli.base import Outputs, Parser, argument, deprecated, run, summary
from kvlab.cli.flags import (
    add_block_rule_arguments,
    add_memory_argument,
    add_workload_arguments,
    add_write_policy_argument,
    hit_ratio,
    workload_options,
)
from kvlab.cli.types import block_tokens, tokens
from kvlab.sizing.engines import ENGINES
from kvlab.sizing.model_size import KV_DTYPES, MAX_GIB, decimal_gib
from kvlab.workloads import whole_number

FORMATS = ("json", "table")
gib_amount = argument(decimal_gib)


def add_plan_arguments(parser):
    """The setting of a plan: the workload's source, the model, the chunks, the rooms and the write policy."""
    add_workload_arguments(parser)
    model = parser.add_argument_group("model")
    parser.inputs.append("model_config")
    model.add_argument("--model-config", required=True, metavar="FILE", help="the model's Hugging Face config.json")
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
    cache.add_argument(
        "--cpu-gib",
        type=gib_amount,
        default=decimal_gib(0),
        help=f"CPU offload budget in GiB (2**30 bytes; default 0, at most {MAX_GIB})",
    )
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
    add_plan_arguments(parser)
    parser.add_argument(
        "--target-hit-ratio",
        type=argument(hit_ratio),
        help="also the smallest CPU budget for this token hit ratio over the whole workload (0..1)",
    )
    parser.add_argument("--format", choices=FORMATS, default="json", help="json (default) or a table for people")
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        help="also the settings to paste into this engine for the CPU budget, and the host memory it allocates",
    )
    parser.add_argument(
        "--window-rule",
        choices=WINDOW_RULES,
        help="what a sliding-window layer stores: all-layers (LMCache: every token) or in-window (vLLM's hybrid"
        " allocator: only the last window of each request; budgets by bisection over replays); default in-window"
        " with --engine vllm, else all-layers",
    )
    add_memory_argument(parser)
    return parser


def execute(args, parser):
    from kvlab.sizing.plan import table

    settings = {key: getattr(args, key) for key in (*PLAN_FLAGS, *plans.PLAN_SETTINGS, "max_memory")}
    result = plans.plan(workload=args.workload, **workload_options(args), **settings)
    return Outputs(stdout=table(result.to_dict()) if args.format == "table" else result.text)


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
