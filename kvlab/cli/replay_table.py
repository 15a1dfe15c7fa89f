"""``kvlab replay-table``: fold replay outputs (one file per point) into one CSV table."""

from dataclasses import dataclass

from kvlab.cli.base import Outputs, Parser, add_arguments, run
from kvlab.util.settings import setting


@dataclass
class TableSettings:
    out: str = setting(help="the CSV table to write", file="output")
    points: list = setting(help="kvlab replay outputs, in grid order", file="input", positional=True, nargs="+")


def build_parser(prog):
    parser = Parser(prog=prog, description=main.__doc__)
    add_arguments(parser, TableSettings)
    return parser


def execute(args, parser):
    from kvlab.report.replay_table import table_csv

    return Outputs({args.out: table_csv(args.points)})


def main(argv, prog):
    """Fold replay outputs into one CSV table: a row per (point, round), "all" first, in the files' order."""
    return run(build_parser, execute, argv, prog)
