"""``kvlab example-measurement``: the SYNTHETIC example TTFT measurement in the lab's schema, not a measurement
of anything (``kvlab/measure/example.py``)."""

from dataclasses import dataclass, make_dataclass

from kvlab.cli.base import Outputs, Parser, UsageError, add_arguments, run, summary
from kvlab.cli.types import named_order, named_rooms, number_in
from kvlab.latency.model import MAX_MS
from kvlab.util.settings import setting
from kvlab.workloads import MAX_ACCESSES, any_int, whole_number

milliseconds = number_in(0, MAX_MS, f"milliseconds from 0 to {MAX_MS}")
jitter = number_in(0, 10, "a relative standard deviation from 0 to 10")


@dataclass
class ExampleSettings:
    config: list = setting(
        help="a config and its rooms in tokens (repeat)",
        convert=named_rooms,
        repeat=True,
        metavar="NAME:GPU_TOKENS,CPU_TOKENS",
    )
    passes: list = setting(
        help="a pass over the documents (repeat)",
        convert=named_order,
        repeat=True,
        option="--pass",
        metavar="NAME:fwd|rev",
    )
    docs: int = setting(help="documents", convert=whole_number(0))
    tokens: int = setting(help="tokens per document", convert=whole_number(0))
    jitter: float = setting(help="relative standard deviation of a draw", convert=jitter)
    seed: int = setting(help="the draws' seed", convert=any_int)
    out: str = setting(help="the measurement (JSONL) to write", file="output")


def build_parser(prog):
    from kvlab.measure.example import LATENCIES

    latencies = [(f"{name}_ms", float, setting(help="mean latency, ms", convert=milliseconds)) for name in LATENCIES]
    parser = Parser(prog=prog, description=summary(__doc__))
    add_arguments(parser, ExampleSettings)
    add_arguments(parser, make_dataclass("Latencies", latencies))
    return parser


def execute(args, parser):
    from kvlab.measure.example import LATENCIES, generate, jsonl

    for flag, named in (("--config", args.config), ("--pass", args.passes)):
        names = [name for name, _ in named]
        if len(set(names)) != len(names):
            raise UsageError(f"{flag}: a name is given twice")
    if args.docs * len(args.passes) * len(args.config) > MAX_ACCESSES:
        raise UsageError(f"--docs {args.docs} makes more than {MAX_ACCESSES} requests")
    configs = [(name, gpu, cpu) for name, (gpu, cpu) in args.config]
    latency = {name: getattr(args, f"{name}_ms") for name in LATENCIES}
    records = generate(configs, args.passes, args.docs, args.tokens, latency, args.jitter, args.seed)
    return Outputs({args.out: jsonl(records)})


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
