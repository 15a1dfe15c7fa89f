"""``kvlab replay``: a workload through a GPU + CPU prefix cache of KV blocks; one JSON object of reuse figures
on stdout, and with ``--per-request FILE`` one CSV row per request. On a terminal a progress bar shows on
stderr for replays longer than a second; it never reaches stdout or a log file."""

import os
import sys

from kvlab.cache.llama_cpp import SERVERS
from kvlab.cache.write_policies import CACHE_SETTINGS
from kvlab.cli.base import Outputs, Parser, UsageError, run, summary
from kvlab.cli.flags import (
    add_cache_policy_arguments,
    add_memory_argument,
    add_workload_arguments,
    build_cache,
    cache_settings,
    make_meter,
    make_workload,
)
from kvlab.cli.types import block_tokens, tokens
from kvlab.files import dump_json


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    cache = parser.add_argument_group("cache")
    cache.add_argument("--gpu-tokens", required=True, type=tokens, help="GPU room in tokens")
    cache.add_argument("--cpu-tokens", default=0, type=tokens, help="CPU room in tokens; 0 = no CPU tier (default)")
    cache.add_argument(
        "--block-tokens",
        type=block_tokens,
        help="tokens per block (default 256, LMCache's chunk; mooncake: 512, the trace's, or a multiple of it)",
    )
    add_cache_policy_arguments(cache)
    server = parser.add_argument_group("a server's own design (instead of the write and eviction policies)")
    server.add_argument(
        "--server",
        choices=SERVERS,
        help="llama-cpp: llama-cpp-python's context of one prompt and RAM cache of whole saved states"
        " (kvlab/cache/llama_cpp.py); the rooms are its context and its --cache_size in tokens of KV",
    )
    server.add_argument(
        "--state-extra-tokens",
        type=tokens,
        default=0,
        help="tokens a saved state holds beyond the request (its question, its completion, its fixed bytes)",
    )
    server.add_argument("--bos", action="store_true", help="every prompt starts with the same BOS token")
    parser.add_output("--per-request", metavar="FILE", help="also write one CSV row per request to FILE")
    add_workload_arguments(parser)
    add_memory_argument(parser)
    return parser


DELAY = "KVLAB_PROGRESS_DELAY"  # seconds before a bar shows (default 1: a quick command shows none)


def progress_bar(total, stream=None, delay=None):
    """A tqdm bar on ``stream`` (stderr) only when it is a terminal (tqdm is imported only then); else None."""
    stream = sys.stderr if stream is None else stream
    if not getattr(stream, "isatty", lambda: False)():
        return None
    from tqdm import tqdm

    if delay is None:
        try:
            delay = max(0.0, float(os.environ.get(DELAY, "1")))
        except ValueError:
            delay = 1.0

    return tqdm(total=total or None, unit="req", file=stream, delay=delay, leave=False, dynamic_ncols=True)


def footprint(cache, per_request):
    """What a replay holds: the tiers' state and the table of dense ids per distinct block, what reading holds
    at once; the table's row per request, if written (its columns, pandas' frame and its copy, the CSV text)."""
    from kvlab.cache.compiled import FOOTPRINT, READING_BYTES
    from kvlab.memory import PANDAS_BYTES, Footprint

    row, table = (408, PANDAS_BYTES) if per_request else (0, 0)
    if getattr(cache, "columns", False):
        return Footprint(request=row, key=FOOTPRINT.key, fixed=FOOTPRINT.fixed + table)
    fixed = FOOTPRINT.fixed if cache.offline else READING_BYTES  # opt loads the whole workload as the compiled do
    return Footprint(access=120 if cache.offline else 0, request=row, key=250, fixed=fixed + table)  # Python objects


def server_cache(args, parser, workload):
    """The server's design; the write and eviction settings, which it does not have, must be left alone."""
    from kvlab.cache.llama_cpp import LlamaCppServer

    for key in CACHE_SETTINGS:
        if getattr(args, key) != parser.get_default(key):
            raise UsageError(f"--{key.replace('_', '-')} does not apply to --server {args.server}")
    return LlamaCppServer(args.gpu_tokens, args.cpu_tokens, workload.block_tokens, args.state_extra_tokens, args.bos)


def server_settings(args):
    return {"server": args.server, "state_extra_tokens": args.state_extra_tokens, "bos": args.bos}


def execute(args, parser):
    from kvlab.replay import per_request_csv, replay, report

    if not args.server and (args.state_extra_tokens or args.bos):
        raise UsageError("--state-extra-tokens and --bos apply to --server only")
    workload = make_workload(args, args.block_tokens)
    cache = server_cache(args, parser, workload) if args.server else build_cache(args, workload)
    rows = [] if args.per_request else None
    meter = make_meter(args, footprint(cache, rows is not None))
    bar = progress_bar(len(workload))
    try:
        totals = replay(workload, cache, rows, bar.update if bar else None, meter)
    finally:
        if bar:
            bar.close()
    settings = {
        "gpu_tokens": args.gpu_tokens,
        "cpu_tokens": args.cpu_tokens,
        "block_tokens": workload.block_tokens,
        **(server_settings(args) if args.server else cache_settings(args)),
    }
    files = {args.per_request: per_request_csv(workload, rows)} if rows is not None else {}
    return Outputs(files, dump_json(report(workload, settings, totals)))


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
