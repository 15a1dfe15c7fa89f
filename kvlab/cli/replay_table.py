"""``kvlab replay-table``: fold replay outputs (one file per point) into one CSV table."""

from kvlab.cli.base import Outputs, Parser, run


def main(argv, prog):
    """Fold replay outputs into one CSV table: a row per (point, round), "all" first, in the files' order."""

    def build(prog):
        parser = Parser(prog=prog, description=main.__doc__)
        parser.add_output("--out", required=True, help="the CSV table to write")
        parser.add_input("points", nargs="+", help="kvlab replay outputs, in grid order")
        return parser

    def execute(args, parser):
        from kvlab.report.replay_table import table_csv

        return Outputs({args.out: table_csv(args.points)})

    return run(build, execute, argv, prog)
