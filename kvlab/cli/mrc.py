"""``kvlab mrc``: the exact LRU curve of the GPU tier at every GPU room, with ``--gpu-tokens`` the CPU tier's
(write-through) at that GPU room, and with ``--cpu-tokens`` too the disk tier's below both; prints the cliffs as
JSON, and writes the curve as CSV to FILE."""

from dataclasses import dataclass

from kvlab.api import curves
from kvlab.cli.base import Outputs, Parser, add_arguments, run, summary
from kvlab.cli.flags import add_memory_argument, add_workload_arguments, workload_options
from kvlab.util.settings import setting


@dataclass
class CurveFile:
    curve: str = setting(None, help="write the curve as CSV to FILE", file="output", metavar="FILE")


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    add_arguments(parser, curves.CurveSettings)
    add_arguments(parser, CurveFile)
    add_workload_arguments(parser)
    add_memory_argument(parser)
    return parser


def execute(args, parser):
    settings = {key: getattr(args, key) for key in (*curves.CURVE_SETTINGS, "max_memory")}
    result = curves.curve(workload=args.workload, **workload_options(args), **settings, table=args.curve is not None)
    return Outputs({args.curve: result.csv} if args.curve else {}, result.text)


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
