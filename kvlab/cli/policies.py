"""``kvlab policies``: the offload designs side by side. ``cliff``: the lab's CPU cliff per write policy
(JSON); ``table``: token hit ratios per write x eviction policy over a grid of rooms (CSV)."""

from dataclasses import dataclass

from kvlab.api.replays import ReplaySettings, replay_settings
from kvlab.cache.compiled import FOOTPRINT as COMPILED_FOOTPRINT
from kvlab.cache.eviction import EVICTION_POLICIES
from kvlab.cache.interface import CacheSettings
from kvlab.cache.write_policies import LMCACHE_SWITCHES, WRITE_POLICIES
from kvlab.cli.base import Outputs, Parser, UsageError, add_arguments, listing, one_of, run, summary
from kvlab.cli.flags import (
    add_memory_argument,
    add_workload_arguments,
    make_meter,
    make_workload,
)
from kvlab.cli.types import rooms
from kvlab.util.files import dump_json
from kvlab.util.memory import PANDAS_BYTES, Footprint
from kvlab.util.numbers import grid_points
from kvlab.util.settings import setting
from kvlab.workloads import pass_list, whole_number

WRITE_POLICY_LIST = listing(one_of(WRITE_POLICIES, "write policy"), "write policies")


@dataclass(kw_only=True)
class CliffSettings:
    docs: int = setting(help="documents", convert=whole_number(0))
    tokens: int = setting(help="tokens per document", convert=whole_number(1))
    passes: list = setting(help="e.g. fwd,fwd", convert=pass_list)
    gpu_tokens: int = setting(help="the GPU room in tokens", convert=whole_number(0))
    cpu_tokens: list = setting(help="the CPU rooms, comma-separated", convert=rooms("rooms in tokens"))
    record_pass: int = setting(help="the pass counted", convert=whole_number(1))
    write_policies: list = setting(help="the write policies, comma-separated", convert=WRITE_POLICY_LIST)
    out: str = setting(help="the JSON file to write", file="output")


@dataclass(kw_only=True)
class TableSettings:
    gpu_tokens: list = setting(help="comma-separated grid", convert=rooms("gpu sizes in tokens"))
    cpu_tokens: list = setting(help="comma-separated grid", convert=rooms("cpu sizes in tokens"))
    block_tokens: list = setting(help="comma-separated grid", convert=rooms("block sizes in tokens", 1))
    write_policies: list = setting(help="the write policies, comma-separated", convert=WRITE_POLICY_LIST)
    evictions: list = setting(
        help="the eviction policies, comma-separated",
        convert=listing(one_of(EVICTION_POLICIES, "eviction policy"), "eviction policies"),
    )
    out: str = setting(help="the CSV file to write", file="output")


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    cliff = parser.subcommand("cliff", help="the lab's CPU cliff per write policy (JSON)")
    add_arguments(cliff, CliffSettings)

    table = parser.subcommand("table", help="token hit ratios per write x eviction policy (CSV)")
    add_arguments(table, TableSettings)
    shared = ("partial_blocks", "eviction_order", *LMCACHE_SWITCHES)  # kvlab replay's, declared there
    add_arguments(table, ReplaySettings, skip=[name for name in replay_settings() if name not in shared])
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
