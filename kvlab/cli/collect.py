"""``kvlab collect``: fold a lab sweep's scenario outputs (one file per grid value) into one artifact."""

from kvlab.cli.base import Outputs, Parser, argument, run
from kvlab.report.sweep import VALUES
from kvlab.util.files import dump_json
from kvlab.workloads import whole_number


def build_parser(prog):
    parser = Parser(prog=prog, description=main.__doc__)
    parser.add_argument(
        "--pass", dest="pass_number", type=argument(whole_number(1)), required=True, help="the pass (1-based)"
    )
    parser.add_argument("--value", choices=sorted(VALUES), required=True, help="what to record of that pass")
    parser.add_output("--out", required=True, help="the sweep artifact to write")
    parser.add_input("points", nargs="+", help="point files in grid order, each named <grid value>.json")
    return parser


def execute(args, parser):
    from kvlab.report.sweep import collect as fold

    return Outputs({args.out: dump_json(fold(args.points, args.pass_number, args.value))})


def main(argv, prog):
    """Fold a lab sweep's scenario outputs into ``{"<grid value>": number}`` in grid order."""
    return run(build_parser, execute, argv, prog)
