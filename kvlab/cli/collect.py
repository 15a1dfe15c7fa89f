"""``kvlab collect``: fold a lab sweep's scenario outputs (one file per grid value) into one artifact."""

from dataclasses import dataclass

from kvlab.cli.base import Outputs, Parser, add_arguments, run
from kvlab.report.sweep import VALUES
from kvlab.util.files import dump_json
from kvlab.util.settings import setting
from kvlab.workloads import whole_number


@dataclass
class CollectSettings:
    pass_number: int = setting(help="the pass (1-based)", convert=whole_number(1), option="--pass")
    value: str = setting(help="what to record of that pass", choices=sorted(VALUES))
    out: str = setting(help="the sweep artifact to write", file="output")
    points: list = setting(
        help="point files in grid order, each named <grid value>.json", file="input", positional=True, nargs="+"
    )


def build_parser(prog):
    parser = Parser(prog=prog, description=main.__doc__)
    add_arguments(parser, CollectSettings)
    return parser


def execute(args, parser):
    from kvlab.report.sweep import collect as fold

    return Outputs({args.out: dump_json(fold(args.points, args.pass_number, args.value))})


def main(argv, prog):
    """Fold a lab sweep's scenario outputs into ``{"<grid value>": number}`` in grid order."""
    return run(build_parser, execute, argv, prog)
