"""The offload designs side by side: write policies x eviction policies over grids of rooms, in one process.

Two artifacts, one subcommand each:

* ``cliff``: the lab's CPU cliff per write policy, ``{"<write policy>": {"<cpu room>": misses}}``
  (misses of one pass), one block per document and LRU tiers as in the lab: the write-through
  row is the lab's results/cpu_cliff.json, the others answer step 7 for their designs.
* ``table``: token hit ratios per (rooms, write policy, eviction policy, round) of one replay
  workload, the eviction policy the same on both tiers, beside ``bound_token_hit_ratio`` (on the
  "all" rows, with partial blocks dropped): what one tier of ``G//B + C//B`` blocks reuses under
  Belady's MIN. No design at
  those rooms reuses more over the whole workload: its two tiers hold at most that many blocks,
  and a block enters them only when requested. (Per round there is no such bound: a design may
  give up reuse in one round for more in another.)
"""

import sys
from pathlib import Path

if not __package__:  # run as `python kvlab/policy_grid.py`: import the package from the repository root
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from kvlab.eviction import EVICTION_POLICIES
from kvlab.files import dump_json, write_atomically
from kvlab.replay import (
    COUNTERS,
    add_block_rule_arguments,
    add_lmcache_switches,
    add_workload_arguments,
    argument,
    figures,
    make_workload,
    overall,
    replay,
)
from kvlab.scenario import OneLineParser
from kvlab.workloads import WORKLOADS, LabWorkload, WorkloadError, pass_list, whole_number
from kvlab.write_policies import LMCACHE_SWITCHES, WRITE_POLICIES, make_cache

PROG = "policy_grid.py"
ROUND_FIGURES = ("gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens", "token_hit_ratio")
TABLE_COLUMNS = (
    "block_tokens",
    "gpu_tokens",
    "cpu_tokens",
    "write_policy",
    "eviction",
    "round",
    *ROUND_FIGURES,
    "bound_token_hit_ratio",
)


def cpu_cliff(docs, tokens, passes, gpu_tokens, cpu_rooms, write_policies, record_pass):
    """Misses of pass ``record_pass`` per write policy and CPU room: the lab's scenario, one block per document."""
    cliff = {}
    for policy in write_policies:
        cliff[policy] = {}
        for cpu_tokens in cpu_rooms:
            workload = LabWorkload(tokens, docs=docs, tokens=tokens, passes=passes)
            totals = replay(workload, make_cache(policy, gpu_tokens, cpu_tokens, tokens))
            row = dict(zip(COUNTERS, totals[record_pass - 1], strict=True))
            cliff[policy][str(cpu_tokens)] = row["blocks"] - row["gpu_blocks"] - row["cpu_blocks"]
    return cliff


def hit_table(make, rooms, write_policies, evictions, block_rules, switches):
    """Rows of the policy table for the workload ``make(block_tokens)`` builds, in grid order."""
    rows = []
    for block in rooms["block_tokens"]:
        for gpu in rooms["gpu_tokens"]:
            for cpu in rooms["cpu_tokens"]:
                bound = bound_ratio(make(block), gpu, cpu, block, **block_rules)
                for policy in write_policies:
                    extra = switches if policy == "write-through" else {}
                    for eviction in evictions:
                        tiers = {"gpu_eviction": eviction, "cpu_eviction": eviction}
                        cache = make_cache(policy, gpu, cpu, block, **block_rules, **tiers, **extra)
                        for name, one in rounds(make(block), cache):
                            rows.append(
                                {
                                    "block_tokens": block,
                                    "gpu_tokens": gpu,
                                    "cpu_tokens": cpu,
                                    "write_policy": policy,
                                    "eviction": eviction,
                                    "round": name,
                                    **{key: one[key] for key in ROUND_FIGURES},
                                    "bound_token_hit_ratio": bound if name == "all" else None,
                                }
                            )
    return rows


def bound_ratio(workload, gpu, cpu, block, partial_blocks, eviction_order):
    """Token hit ratio of one ``opt`` tier of ``G//B + C//B`` blocks; None when partial blocks are kept
    (blocks of different sizes: MIN is not optimal then, and there is no bound)."""
    if partial_blocks != "drop":
        return None
    room = (gpu // block + cpu // block) * block
    cache = make_cache("write-through", room, 0, block, eviction_order=eviction_order, gpu_eviction="opt")
    return rounds(workload, cache)[0][1]["token_hit_ratio"]


def rounds(workload, cache):
    """``[(round, figures)]`` of one replay: "all" first, then each round."""
    totals = replay(workload, cache)
    per_round = [(name, figures(row)) for name, row in zip(workload.rounds, totals, strict=True)]
    return [("all", figures(overall(totals))), *per_round]


def table_csv(rows):
    import pandas as pd

    return pd.DataFrame(rows, columns=list(TABLE_COLUMNS)).to_csv(index=False, lineterminator="\n")


def listing(convert, what):
    """An argparse type for a comma-separated list of distinct items, each checked by ``convert``."""

    def parse(text):
        items = [convert(item.strip()) for item in text.split(",")]
        if len(set(items)) != len(items):
            raise ValueError(f"{what}: an item is given twice in {text!r}")
        return items

    parse.__name__ = what
    return argument(parse)


def one_of(valid, what):
    """A converter accepting only the names of ``valid``; the error lists them."""

    def convert(name):
        if name not in valid:
            raise ValueError(f"{name!r} is not a {what} (valid: {', '.join(valid)})")
        return name

    return convert


def build_parser():
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    rooms = listing(whole_number(0), "rooms in tokens")
    write_policies = listing(one_of(WRITE_POLICIES, "write policy"), "write policies")

    cliff = commands.add_parser("cliff", help="the lab's CPU cliff per write policy (JSON)")
    parser.commands = {"cliff": cliff}
    cliff.add_argument("--docs", required=True, type=argument(whole_number(0)))
    cliff.add_argument("--tokens", required=True, type=argument(whole_number(1)), help="tokens per document")
    cliff.add_argument("--passes", required=True, type=argument(pass_list), help="e.g. fwd,fwd")
    cliff.add_argument("--gpu-tokens", required=True, type=argument(whole_number(0)))
    cliff.add_argument("--cpu-tokens", required=True, type=rooms, help="the CPU rooms, comma-separated")
    cliff.add_argument("--record-pass", required=True, type=argument(whole_number(1)), help="the pass counted")
    cliff.add_argument("--write-policies", required=True, type=write_policies)
    cliff.add_argument("--out", required=True, help="the JSON file to write")

    table = commands.add_parser("table", help="token hit ratios per write x eviction policy (CSV)")
    parser.commands["table"] = table
    table.add_argument("--workload", required=True, choices=sorted(WORKLOADS))
    for tier in ("gpu", "cpu", "block"):
        convert = listing(whole_number(1 if tier == "block" else 0), f"{tier} sizes in tokens")
        table.add_argument(f"--{tier}-tokens", required=True, type=convert, help="comma-separated grid")
    table.add_argument("--write-policies", required=True, type=write_policies)
    table.add_argument(
        "--evictions", required=True, type=listing(one_of(EVICTION_POLICIES, "eviction policy"), "eviction policies")
    )
    add_block_rule_arguments(table)
    add_lmcache_switches(table)
    table.add_argument("--out", required=True, help="the CSV file to write")
    add_workload_arguments(table)
    return parser


def cliff_json(parser, args):
    if args.record_pass > len(args.passes):
        parser.error(f"--record-pass {args.record_pass} but --passes has only {len(args.passes)}")
    cliff = cpu_cliff(
        args.docs, args.tokens, args.passes, args.gpu_tokens, args.cpu_tokens, args.write_policies, args.record_pass
    )
    return dump_json(cliff)


def table_text(parser, args):
    def make(block):
        args.block_tokens = block
        return make_workload(args)

    block_rules = {"partial_blocks": args.partial_blocks, "eviction_order": args.eviction_order}
    switches = {switch: getattr(args, switch) for switch in LMCACHE_SWITCHES}
    rooms = {key: getattr(args, key) for key in ("gpu_tokens", "cpu_tokens", "block_tokens")}
    try:  # bad settings first (usage errors, exit 2), then the replays (bad input, exit 1)
        for block in rooms["block_tokens"]:
            make(block)
        for eviction in args.evictions:
            make_cache("write-through", 0, 0, 1, **block_rules, gpu_eviction=eviction, **switches)
    except ValueError as error:
        parser.error(str(error))
    try:
        return table_csv(hit_table(make, rooms, args.write_policies, args.evictions, block_rules, switches))
    except WorkloadError as error:
        parser.fail(str(error))


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    command = parser.commands[args.command]  # post-parse errors name the subcommand, as argparse's do
    text = cliff_json(command, args) if args.command == "cliff" else table_text(command, args)
    try:
        write_atomically(args.out, text)
    except OSError as error:
        command.fail(f"cannot write {args.out}: {error.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
