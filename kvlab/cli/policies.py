"""``kvlab policies``: the offload designs side by side. ``cliff``: the lab's CPU cliff per write policy
(JSON); ``table``: token hit ratios per write x eviction policy over a grid of rooms (CSV)."""

from kvlab.api.replays import ReplaySettings, replay_settings
from kvlab.cache.compiled import FOOTPRINT as COMPILED_FOOTPRINT
from kvlab.cache.eviction import EVICTION_POLICIES
from kvlab.cache.interface import CacheSettings
from kvlab.cache.write_policies import LMCACHE_SWITCHES, WRITE_POLICIES
from kvlab.cli.base import Outputs, Parser, UsageError, add_arguments, argument, listing, one_of, run, summary
from kvlab.cli.flags import (
    add_memory_argument,
    add_workload_arguments,
    make_meter,
    make_workload,
)
from kvlab.cli.types import rooms, tokens
from kvlab.util.files import dump_json
from kvlab.util.memory import PANDAS_BYTES, Footprint
from kvlab.util.numbers import grid_points
from kvlab.workloads import pass_list, whole_number


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    write_policies = listing(one_of(WRITE_POLICIES, "write policy"), "write policies")

    cliff = commands.add_parser("cliff", help="the lab's CPU cliff per write policy (JSON)")
    cliff.set_defaults(parser=cliff)
    cliff.add_argument("--docs", required=True, type=argument(whole_number(0)))
    cliff.add_argument("--tokens", required=True, type=argument(whole_number(1)), help="tokens per document")
    cliff.add_argument("--passes", required=True, type=argument(pass_list), help="e.g. fwd,fwd")
    cliff.add_argument("--gpu-tokens", required=True, type=tokens)
    cliff.add_argument(
        "--cpu-tokens", required=True, type=rooms("rooms in tokens"), help="the CPU rooms, comma-separated"
    )
    cliff.add_argument("--record-pass", required=True, type=argument(whole_number(1)), help="the pass counted")
    cliff.add_argument("--write-policies", required=True, type=write_policies)
    cliff.add_output("--out", required=True, help="the JSON file to write")

    table = commands.add_parser("table", help="token hit ratios per write x eviction policy (CSV)")
    table.set_defaults(parser=table)
    for tier in ("gpu", "cpu", "block"):
        grid = rooms(f"{tier} sizes in tokens", 1 if tier == "block" else 0)
        table.add_argument(f"--{tier}-tokens", required=True, type=grid, help="comma-separated grid")
    table.add_argument("--write-policies", required=True, type=write_policies)
    table.add_argument(
        "--evictions", required=True, type=listing(one_of(EVICTION_POLICIES, "eviction policy"), "eviction policies")
    )
    shared = ("partial_blocks", "eviction_order", *LMCACHE_SWITCHES)  # kvlab replay's, declared there
    add_arguments(table, ReplaySettings, skip=[name for name in replay_settings() if name not in shared])
    table.add_output("--out", required=True, help="the CSV file to write")
    add_workload_arguments(table)
    add_memory_argument(table)
    return parser


# What ``policies table`` holds (kvlab/util/memory.py) above start-up, measured by bench/memory_footprint.py, with a
# margin. One replay at a time through the reference engines (each design's cache is made as the one before is dropped),
# so the most that one design holds; the rows are a few per design. Belady's bound (opt, and --evictions opt) reads the
# whole workload first (kvlab/workloads/stream.py): then per access the keys as Python ints while they are served and
# the future (typed arrays, and their sort while it is built), per distinct block what a tier keeps of it (a stored
# block's dict entries, opt's heap entries, stale ones too, and cursor). A streamed design's meter counts distinct
# blocks by the accesses, so per access it projects both figures. Fixed: the reader's batch and the room the hash table
# of dense ids makes for it (kvlab/cache/compiled.py's), and pandas, imported to write the CSV.
TABLE_FOOTPRINT = Footprint(access=240, request=140, key=340, fixed=COMPILED_FOOTPRINT.fixed + PANDAS_BYTES)


def cliff_json(args):
    from kvlab.designs import cpu_cliff
    from kvlab.workloads import LabWorkload, WorkloadError

    grid_points({"cpu_tokens": len(args.cpu_tokens), "write_policies": len(args.write_policies)})  # one replay each
    if args.record_pass > len(args.passes):
        raise UsageError(f"--record-pass {args.record_pass} but --passes has only {len(args.passes)}")
    try:  # the lab workload's own limits, before any replay
        LabWorkload(args.tokens, docs=args.docs, tokens=args.tokens, passes=args.passes)
    except WorkloadError as error:
        raise UsageError(str(error)) from None
    cliff = cpu_cliff(
        args.docs, args.tokens, args.passes, args.gpu_tokens, args.cpu_tokens, args.write_policies, args.record_pass
    )
    return dump_json(cliff)


def table_csv(args):
    from kvlab.designs import hit_table, table_csv

    def make(block):
        return make_workload(args, block)

    block_rules = {"partial_blocks": args.partial_blocks, "eviction_order": args.eviction_order}
    switches = {switch: getattr(args, switch) for switch in LMCACHE_SWITCHES}
    grid = {key: getattr(args, key) for key in ("gpu_tokens", "cpu_tokens", "block_tokens")}
    designs = {"write_policies": args.write_policies, "evictions": args.evictions}
    grid_points({key: len(values) for key, values in (grid | designs).items()})  # a replay each, before any
    for block in grid["block_tokens"]:  # bad settings first (usage errors), then the replays (bad input)
        make(block)
    on = [switch for switch, value in switches.items() if value]
    if on and "write-through" not in args.write_policies:
        raise UsageError(f"--{on[0].replace('_', '-')} applies to write-through, which --write-policies leaves out")
    for eviction in args.evictions:
        try:
            CacheSettings(gpu_tokens=0, block_tokens=1, **block_rules, gpu_eviction=eviction, **switches)
        except ValueError as error:
            raise UsageError(str(error)) from None
    meter = make_meter(args, TABLE_FOOTPRINT)
    return table_csv(hit_table(make, grid, args.write_policies, args.evictions, block_rules, switches, meter))


def execute(args, parser):
    text = cliff_json(args) if args.command == "cliff" else table_csv(args)
    return Outputs({args.out: text})


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
