"""``kvlab example-measurement``: the SYNTHETIC example TTFT measurement in the lab's schema, not a measurement
of anything (``kvlab/measure/example.py``)."""

from kvlab.cli.base import Outputs, Parser, UsageError, argument, run, summary
from kvlab.cli.types import named_order, named_rooms, number_in
from kvlab.latency.model import MAX_MS
from kvlab.workloads import MAX_ACCESSES, any_int, whole_number

milliseconds = number_in(0, MAX_MS, f"milliseconds from 0 to {MAX_MS}")
jitter = number_in(0, 10, "a relative standard deviation from 0 to 10")


def build_parser(prog):
    from kvlab.measure.example import LATENCIES

    parser = Parser(prog=prog, description=summary(__doc__))
    parser.add_argument(
        "--config",
        type=argument(named_rooms),
        action="append",
        required=True,
        metavar="NAME:GPU_TOKENS,CPU_TOKENS",
        help="a config and its rooms in tokens (repeat)",
    )
    parser.add_argument(
        "--pass", dest="passes", type=argument(named_order), action="append", required=True, metavar="NAME:fwd|rev"
    )
    parser.add_argument("--docs", type=argument(whole_number(0)), required=True)
    parser.add_argument("--tokens", type=argument(whole_number(0)), required=True)
    for latency in LATENCIES:
        flag = f"--{latency.replace('_', '-')}-ms"
        parser.add_argument(flag, type=argument(milliseconds), required=True, help="mean latency, ms")
    parser.add_argument("--jitter", type=argument(jitter), required=True, help="relative standard deviation of a draw")
    parser.add_argument("--seed", type=argument(any_int), required=True)
    parser.add_output("--out", required=True)
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
