"""``kvlab mrc``: the exact LRU curve of the GPU tier at every GPU room, with ``--gpu-tokens`` the CPU tier's
(write-through) at that GPU room, and with ``--cpu-tokens`` too the disk tier's below both; prints the cliffs as
JSON, and writes the curve as CSV to FILE."""

from kvlab.api import curves
from kvlab.cli.base import Outputs, Parser, argument, run, summary
from kvlab.cli.flags import (
    add_block_rule_arguments,
    add_memory_argument,
    add_workload_arguments,
    hit_ratio,
    workload_options,
)
from kvlab.cli.types import block_tokens, tokens


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    cache = parser.add_argument_group("cache (LRU on every tier, write-through)")
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
        "--cpu-tokens",
        type=tokens,
        help="with --gpu-tokens: the disk tier's curve below this CPU room in tokens (kvlab/cache/tiers.py)",
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
    settings = {key: getattr(args, key) for key in (*curves.CURVE_SETTINGS, "max_memory")}
    result = curves.curve(workload=args.workload, **workload_options(args), **settings, table=args.curve is not None)
    return Outputs({args.curve: result.csv} if args.curve else {}, result.text)


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
