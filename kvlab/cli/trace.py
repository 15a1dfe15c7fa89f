"""``kvlab trace``: a trace's figures (``stats``: requests, blocks, distinct blocks, the share reused at unlimited
room) or the trace written in another format (``convert``: kvlab's requests JSONL, or Mooncake's)."""

from dataclasses import dataclass

from kvlab.cli.base import Outputs, Parser, UsageError, add_arguments, run, summary
from kvlab.cli.flags import add_workload_arguments, workload_options
from kvlab.cli.types import block_tokens
from kvlab.util.files import dump_json
from kvlab.util.settings import setting

TARGETS = ("requests", "mooncake")


@dataclass(kw_only=True)
class ConvertSettings:
    to: str = setting(help="requests (kvlab's) or mooncake", choices=TARGETS)
    out: str = setting(help="the converted trace", file="output", metavar="FILE")


@dataclass(kw_only=True)
class BlockSettings:
    block_tokens: int = setting(
        None, help="tokens per block (default: the trace's own; requests: 16)", convert=block_tokens
    )


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    stats = parser.subcommand("stats", help="requests, blocks, distinct blocks and the reuse at unlimited room (JSON)")
    convert = parser.subcommand("convert", help="the trace in another format (JSONL)")
    add_arguments(convert, ConvertSettings)
    for command in (stats, convert):
        add_arguments(command, BlockSettings)
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
