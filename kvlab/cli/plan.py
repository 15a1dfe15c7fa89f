"""``kvlab plan``: a CPU offload budget for a workload and a model: the tokens served from GPU, from CPU and
recomputed per round, and the GiB full reuse (or a target hit ratio) takes. GB means GiB (2**30 bytes)."""

from kvlab.cache.costs import WINDOW_RULES
from kvlab.cli.base import Outputs, Parser, UsageError, argument, run, summary
from kvlab.cli.flags import (
    add_block_rule_arguments,
    add_memory_argument,
    add_workload_arguments,
    add_write_policy_argument,
    compile_notice,
    hit_ratio,
    make_meter,
    make_workload,
)
from kvlab.cli.types import block_tokens, tokens
from kvlab.files import dump_json
from kvlab.sizing.engines import ENGINES
from kvlab.sizing.model_size import KV_DTYPES, MAX_GIB, decimal_gib
from kvlab.workloads import WORKLOADS, whole_number

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
    gpu.add_argument("--gpu-gb", type=gib_amount, help=f"the GPU's KV room in GiB (2**30 bytes; at most {MAX_GIB})")
    cache.add_argument(
        "--cpu-gb",
        type=gib_amount,
        default=decimal_gib(0),
        help=f"CPU offload budget in GiB (2**30 bytes; default 0, at most {MAX_GIB})",
    )
    add_write_policy_argument(
        cache, "how the CPU tier is filled (default write-through: exact curve; others: bisection over replays)"
    )


def trace_chunks(args):
    """A trace replays in multiples of the blocks it was hashed in: ``--chunk-tokens`` finer (or between) is a
    usage error naming this command's flag (the workload's own error names ``kvlab replay``'s --block-tokens)."""
    trace_format = getattr(WORKLOADS[args.workload], "format", None)
    unit = getattr(trace_format, "block_tokens", None)
    if unit and args.chunk_tokens is not None and args.chunk_tokens % unit:
        raise UsageError(
            f"--chunk-tokens must be a multiple of the trace's {unit}-token hash blocks (the finest it can replay),"
            f" got {args.chunk_tokens}; without it the replay is in {unit}-token blocks"
        )


def plan_setting(args):
    """``(workload, model shape, bytes per token, GPU tokens)`` from the parsed plan arguments."""
    from kvlab.sizing.model_size import ModelConfigError, no_tokens, read_model_config, tokens_in

    trace_chunks(args)
    try:
        workload = make_workload(args, args.chunk_tokens)
    except UsageError as error:  # a workload's message names replay's flag for the chunk
        raise UsageError(str(error).replace("--block-tokens", "--chunk-tokens")) from None
    shape = read_model_config(args.model_config)
    try:
        per_token = shape.bytes_per_token(args.tp, args.kv_dtype, windows=True)
    except ValueError as error:
        raise UsageError(f"--tp: {error}") from None
    refused = no_tokens(shape)
    if refused:
        raise ModelConfigError(f"{args.model_config}: {refused}")
    gpu_tokens = args.gpu_tokens if args.gpu_tokens is not None else tokens_in(args.gpu_gb, per_token)
    return workload, shape, per_token, gpu_tokens


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
    from kvlab.curves.mrc import FOOTPRINT
    from kvlab.sizing.plan import model_name, plan, table

    window_rule = args.window_rule or ("in-window" if args.engine == "vllm" else "all-layers")

    workload, shape, _, gpu_tokens = plan_setting(args)
    meter = make_meter(args, FOOTPRINT)
    result = plan(
        workload,
        model_name(args.model_config),
        shape,
        args.tp,
        gpu_tokens,
        args.cpu_gb,
        args.write_policy,
        args.partial_blocks,
        args.eviction_order,
        args.target_hit_ratio,
        compile_notice,
        meter,
        args.kv_dtype,
        args.engine,
        window_rule,
        args.chunk_tokens,
    )
    return Outputs(stdout=table(result) if args.format == "table" else dump_json(result))


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
