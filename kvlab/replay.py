"""Replay a workload through a GPU + CPU prefix cache of KV blocks; print one JSON object of reuse figures.

Usage: ``python kvlab/replay.py --workload {lab,long_doc_qa,mooncake} [source flags] --gpu-tokens G
--cpu-tokens C [--block-tokens B] [--write-policy P] [--gpu-eviction E] [--cpu-eviction E]
[--per-request FILE]``. The rules of the cache are in ``kvlab/prefix_cache.py``, the write
policies in ``kvlab/write_policies.py``, the eviction policies in ``kvlab/eviction/``; the sources
in ``kvlab/workloads.py``.

Reported for the whole replay and for each round (pass): requests, block accesses, input tokens,
tokens served from the GPU and the CPU and tokens computed, the token hit ratio, and the same in
blocks. ``--per-request`` writes one CSV row per request. On a terminal a progress bar appears on
stderr for replays longer than a second; it never reaches stdout or a log file.
"""

import argparse
import sys
from pathlib import Path

if not __package__:  # run as `python kvlab/replay.py`: import the package from the repository root
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from tqdm import tqdm

from kvlab.eviction import EVICTION_POLICIES
from kvlab.files import dump_json, write_atomically
from kvlab.prefix_cache import EVICTION_ORDERS, PARTIAL_BLOCKS
from kvlab.scenario import OneLineParser
from kvlab.workloads import WORKLOADS, WorkloadError, whole_number
from kvlab.write_policies import WRITE_POLICIES, make_cache

PROG = "replay.py"
# What a round adds up, per request: 1, blocks, input tokens, GPU blocks, CPU blocks, GPU tokens, CPU tokens.
COUNTERS = ("requests", "blocks", "tokens", "gpu_blocks", "cpu_blocks", "gpu_tokens", "cpu_tokens")


def build_parser():
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--workload", required=True, choices=sorted(WORKLOADS), help="the source of requests")
    rooms = parser.add_argument_group("cache")
    rooms.add_argument("--gpu-tokens", required=True, type=argument(whole_number(0)), help="GPU room in tokens")
    rooms.add_argument(
        "--cpu-tokens", default=0, type=argument(whole_number(0)), help="CPU room in tokens; 0 = no CPU tier (default)"
    )
    rooms.add_argument(
        "--block-tokens",
        type=argument(whole_number(1)),
        help="tokens per block (default 256, LMCache's chunk; mooncake: 512, the trace's, or a multiple of it)",
    )
    add_cache_policy_arguments(rooms)
    parser.add_argument("--per-request", metavar="FILE", help="also write one CSV row per request to FILE")
    add_workload_arguments(parser)
    return parser


def add_cache_policy_arguments(group):
    """The cache's rules besides its rooms: block rules, write and eviction policies, LMCache switches."""
    add_block_rule_arguments(group)
    group.add_argument(
        "--write-policy",
        choices=WRITE_POLICIES,
        default="write-through",
        help="how the CPU tier is filled (default write-through, the lab's rule; see kvlab/write_policies.py)",
    )
    for tier in ("gpu", "cpu"):
        group.add_argument(
            f"--{tier}-eviction",
            choices=EVICTION_POLICIES,
            default="lru",
            help=f"eviction policy of the {tier.upper()} tier (default lru; opt: Belady's offline optimum)",
        )
    add_lmcache_switches(group)


def add_block_rule_arguments(group):
    """Which blocks are stored, and in which order a request's blocks are accessed."""
    group.add_argument(
        "--partial-blocks",
        choices=PARTIAL_BLOCKS,
        default="drop",
        help="store a request's last partial block or not (default drop: only full blocks are cached)",
    )
    group.add_argument(
        "--eviction-order",
        choices=EVICTION_ORDERS,
        default="tail-first",
        help="within a request, evict the tail before the head (default, as vLLM and LMCache) or the head first",
    )


def add_lmcache_switches(group):
    """LMCache's behaviour on write-through (kvlab/write_policies.py)."""
    group.add_argument(
        "--touch-cpu-on-gpu-hit",
        action="store_true",
        help="write-through only: a GPU hit also refreshes the block's CPU copy (LMCache's lookup)",
    )
    group.add_argument(
        "--re-store-on-gpu-hit",
        action="store_true",
        help="write-through only: a GPU-hit block whose CPU copy was evicted is stored on the CPU again (LMCache)",
    )


CACHE_POLICY = (
    "partial_blocks",
    "eviction_order",
    "write_policy",
    "gpu_eviction",
    "cpu_eviction",
    "touch_cpu_on_gpu_hit",
    "re_store_on_gpu_hit",
)


def add_workload_arguments(parser):
    """One argument group per workload source, with that source's own settings."""
    for source in WORKLOADS.values():
        group = parser.add_argument_group(f"--workload {source.name}")
        for option in source.options:
            group.add_argument(option.flag, dest=option.name, metavar=option.name.upper(), help=option.help)


def build_cache(args, block_tokens):
    """The cache the arguments describe; ValueError for a bad combination."""
    policy = {key: getattr(args, key) for key in CACHE_POLICY}
    return make_cache(policy.pop("write_policy"), args.gpu_tokens, args.cpu_tokens, block_tokens, **policy)


def argument(convert):
    """An argparse type from a converter that raises ValueError with its own message."""

    def parse(text):
        try:
            return convert(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = convert.__name__
    return parse


def make_workload(args):
    """The chosen source with its own settings; a setting of another source is an error."""
    source = WORKLOADS[args.workload]
    for other in WORKLOADS.values():
        if other is source:
            continue
        for option in other.options:
            if getattr(args, option.name) is not None:
                raise WorkloadError(f"{option.flag} is a setting of --workload {other.name}, not {source.name}")
    settings = {option.name: getattr(args, option.name) for option in source.options}
    return source(args.block_tokens, **settings)


def progress_bar(total, stream=None, delay=1.0):
    """A tqdm bar on ``stream`` (stderr) only when it is a terminal; elsewhere a no-op of the same interface."""
    stream = sys.stderr if stream is None else stream
    return tqdm(
        total=total or None,
        unit="req",
        file=stream,
        disable=not stream.isatty(),
        delay=delay,
        leave=False,
        dynamic_ncols=True,
    )


def replay(workload, cache, per_request=None, bar=None):
    """Serve every request of ``workload`` through ``cache``; return one list of COUNTERS per round.

    With ``per_request`` (a list), append ``(round, label, blocks, tokens, gpu_tokens, cpu_tokens)``
    for each request.
    """
    totals = [[0] * len(COUNTERS) for _ in workload.rounds]
    requests = workload.requests()
    if cache.offline:  # opt: learn the whole workload first (read once, served from memory)
        requests = list(requests)
        cache.foresee((request.keys, request.tokens) for request in requests)
    serve = cache.serve
    update = bar.update if bar is not None else None
    for request in requests:
        keys, tokens = request.keys, request.tokens
        gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens = serve(keys, tokens)
        row = totals[request.round]
        row[0] += 1
        row[1] += len(keys)
        row[2] += tokens
        row[3] += gpu_blocks
        row[4] += cpu_blocks
        row[5] += gpu_tokens
        row[6] += cpu_tokens
        if per_request is not None:
            per_request.append((request.round, request.label, len(keys), tokens, gpu_tokens, cpu_tokens))
        if update is not None:
            update()
    return totals


def figures(counts):
    """The reported figures of one round (or of all): counts in tokens and blocks, hit ratios rounded to 6."""
    requests, blocks, tokens, gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens = counts
    return {
        "requests": requests,
        "block_accesses": blocks,
        "input_tokens": tokens,
        "gpu_hit_tokens": gpu_tokens,
        "cpu_hit_tokens": cpu_tokens,
        "computed_tokens": tokens - gpu_tokens - cpu_tokens,
        "token_hit_ratio": ratio(gpu_tokens + cpu_tokens, tokens),
        "gpu_hit_blocks": gpu_blocks,
        "cpu_hit_blocks": cpu_blocks,
        "computed_blocks": blocks - gpu_blocks - cpu_blocks,
        "block_hit_ratio": ratio(gpu_blocks + cpu_blocks, blocks),
    }


def overall(totals):
    """The counters of the whole replay: the rounds' added up."""
    return [sum(column) for column in zip(*totals, strict=True)] if totals else [0] * len(COUNTERS)


def ratio(part, whole):
    return round(part / whole, 6) if whole else None


def report(workload, settings, totals):
    """The JSON object the command prints: the workload, the cache settings, the figures of all and per round."""
    return {
        "workload": workload.describe(),
        "cache": settings,
        **figures(overall(totals)),
        "rounds": [{"round": name, **figures(row)} for name, row in zip(workload.rounds, totals, strict=True)],
    }


def per_request_csv(workload, rows):
    """The per-request table as CSV text (pandas), one row per request in replay order."""
    import pandas as pd

    columns = ["round", workload.label_name, "blocks", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens"]
    table = pd.DataFrame(rows, columns=columns)
    table.insert(0, "request", range(len(table)))
    table["round"] = table["round"].map(dict(enumerate(workload.rounds)))
    table["computed_tokens"] = table["input_tokens"] - table["gpu_hit_tokens"] - table["cpu_hit_tokens"]
    return table.to_csv(index=False, lineterminator="\n")


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        workload = make_workload(args)
    except WorkloadError as error:  # a bad setting is a usage error (exit 2), like argparse's own
        parser.error(str(error))
    try:
        cache = build_cache(args, workload.block_tokens)
    except ValueError as error:
        parser.error(str(error))
    rows = [] if args.per_request else None
    try:
        with progress_bar(len(workload)) as bar:
            totals = replay(workload, cache, rows, bar)
    except WorkloadError as error:  # bad input: a malformed trace line, an unreadable trace
        parser.fail(str(error))
    if rows is not None:
        try:
            write_atomically(args.per_request, per_request_csv(workload, rows))
        except OSError as error:
            parser.fail(f"cannot write {args.per_request}: {error.strerror}")
    settings = {
        "gpu_tokens": args.gpu_tokens,
        "cpu_tokens": args.cpu_tokens,
        "block_tokens": workload.block_tokens,
        **{key: getattr(args, key) for key in CACHE_POLICY},
    }
    sys.stdout.write(dump_json(report(workload, settings, totals)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
