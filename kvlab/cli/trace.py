"""``kvlab trace``: a trace's figures (``stats``: requests, blocks, distinct blocks, the share reused at unlimited
room) or the trace written in another format (``convert``: kvlab's requests JSONL, or Mooncake's)."""

from kvlab.cli.base import Outputs, Parser, UsageError, run, summary
from kvlab.cli.flags import add_workload_arguments, workload_options
from kvlab.cli.types import block_tokens
from kvlab.util.files import dump_json

TARGETS = ("requests", "mooncake")


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    stats = commands.add_parser(
        "stats", help="requests, blocks, distinct blocks and the reuse at unlimited room (JSON)"
    )
    convert = commands.add_parser("convert", help="the trace in another format (JSONL)")
    convert.add_argument("--to", required=True, choices=TARGETS, help="requests (kvlab's) or mooncake")
    convert.add_output("--out", required=True, metavar="FILE", help="the converted trace")
    for command in (stats, convert):
        command.set_defaults(parser=command)
        command.add_argument(
            "--block-tokens", type=block_tokens, help="tokens per block (default: the trace's own; requests: 16)"
        )
        add_workload_arguments(command)
    return parser


def execute(args, parser):
    from kvlab.api.common import workload_of
    from kvlab.workloads import requests

    if args.command == "convert" and (args.out.endswith(".gz") or args.to == "requests" and requests.is_csv(args.out)):
        read = "compressed" if args.out.endswith(".gz") else "CSV"  # as kvlab.util.files.open_input and is_csv read
        raise UsageError(f"argument --out: {args.out}: kvlab would read it as {read}, and convert writes plain JSONL")
    made = workload_of(args.workload, workload_options(args), args.block_tokens, "trace")
    if args.command == "stats":
        return Outputs(stdout=dump_json(requests.stats(made)))
    return Outputs({args.out: "".join(requests.convert(made, args.to))})


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
