"""``kvlab mrc``: the exact LRU curve of the GPU tier at every GPU room, or with ``--gpu-tokens`` the CPU
tier's (write-through) at that GPU room; prints the cliffs as JSON, and writes the curve as CSV to FILE."""

from kvlab.cli.base import Outputs, Parser, argument, run, summary
from kvlab.cli.flags import (
    add_block_rule_arguments,
    add_memory_argument,
    add_workload_arguments,
    compile_notice,
    hit_ratio,
    make_meter,
    make_workload,
)
from kvlab.cli.types import block_tokens, tokens
from kvlab.files import dump_json


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    cache = parser.add_argument_group("cache (LRU on both tiers, write-through)")
    cache.add_argument(
        "--block-tokens",
        type=block_tokens,
        help="tokens per block (default 256, LMCache's chunk; mooncake: 512 or a multiple of it)",
    )
    add_block_rule_arguments(cache)
    cache.add_argument(
        "--gpu-tokens", type=tokens, help="the CPU tier's curve at this GPU room in tokens (default: the GPU tier's)"
    )
    cache.add_argument(
        "--target-hit-ratio",
        type=argument(hit_ratio),
        help="also the smallest room for this token hit ratio over all rounds (0..1)",
    )
    parser.add_output("--curve", metavar="FILE", help="write the curve as CSV to FILE")
    add_workload_arguments(parser)
    add_memory_argument(parser)
    return parser


def execute(args, parser):
    from dataclasses import replace

    from kvlab.curves.mrc import FOOTPRINT, cliffs, curve_csv, tier_curve
    from kvlab.memory import PANDAS_BYTES

    workload = make_workload(args, args.block_tokens)
    tier = "gpu" if args.gpu_tokens is None else "cpu"
    meter = make_meter(args, replace(FOOTPRINT, fixed=FOOTPRINT.fixed + PANDAS_BYTES) if args.curve else FOOTPRINT)
    curve = tier_curve(workload, args.partial_blocks, args.eviction_order, args.gpu_tokens, compile_notice, meter)
    cache = {
        "tier": tier,
        "block_tokens": workload.block_tokens,
        "partial_blocks": args.partial_blocks,
        "eviction_order": args.eviction_order,
        "eviction": "lru",
    }
    if tier == "cpu":
        cache.update(write_policy="write-through", gpu_tokens=args.gpu_tokens)
    result = {"workload": workload.describe(), "cache": cache, **cliffs(curve, args.target_hit_ratio)}
    files = {args.curve: curve_csv(curve, tier)} if args.curve else {}
    return Outputs(files, dump_json(result))


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
