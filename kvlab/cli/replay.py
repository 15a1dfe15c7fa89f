"""``kvlab replay``: a workload through a GPU + CPU prefix cache of KV blocks; one JSON object of reuse figures
on stdout, and with ``--per-request FILE`` one CSV row per request. On a terminal a progress bar shows on
stderr for replays longer than a second; it never reaches stdout or a log file."""

from kvlab.api import replays
from kvlab.cli.base import Outputs, Parser, run, summary
from kvlab.cli.flags import (
    add_cache_policy_arguments,
    add_disk_arguments,
    add_memory_argument,
    add_workload_arguments,
    workload_options,
)
from kvlab.cli.types import block_tokens, tokens
from kvlab.serving import SERVERS
from kvlab.util import progress


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    add_replay_arguments(parser)
    parser.add_output("--per-request", metavar="FILE", help="also write one CSV row per request to FILE")
    return parser


def add_replay_arguments(parser):
    """A replay's setting: the cache, or a server's own design, the workload and the memory stop."""
    cache = parser.add_argument_group("cache")
    add_cache_arguments(cache)
    add_disk_arguments(cache)
    server = parser.add_argument_group("a server's own design (instead of the write and eviction policies)")
    server.add_argument(
        "--server",
        choices=SERVERS,
        help="llama-cpp: llama-cpp-python's context of one prompt and RAM cache of whole saved states"
        " (kvlab/serving/llama_cpp.py); the rooms are its context and its --cache_size in tokens of KV",
    )
    server.add_argument(
        "--state-extra-tokens",
        type=tokens,
        default=0,
        help="tokens a saved state holds beyond the request (its question, its completion, its fixed bytes)",
    )
    server.add_argument("--bos", action="store_true", help="every prompt starts with the same BOS token")
    add_workload_arguments(parser)
    add_memory_argument(parser)


def add_cache_arguments(cache, gpu_help="GPU room in tokens", required=True):
    """The cache's flags in ``cache`` (an argument group): its rooms, its block and its policies."""
    cache.add_argument("--gpu-tokens", required=required, type=tokens, help=gpu_help)
    cache.add_argument("--cpu-tokens", default=0, type=tokens, help="CPU room in tokens; 0 = no CPU tier (default)")
    cache.add_argument(
        "--block-tokens",
        type=block_tokens,
        help="tokens per block (default: the workload's: 256, LMCache's chunk; mooncake: 512, the trace's, a"
        " multiple of it or a divisor, as 64)",
    )
    add_cache_policy_arguments(cache)


progress_bar = progress.progress_bar  # kvlab/util/progress.py (kvlab measure's and kvlab ttft's too)


footprint = replays.replay_footprint  # what a replay holds (kvlab/util/memory.py)


def execute(args, parser):
    settings = {key: getattr(args, key) for key in (*replays.replay_settings(), "max_memory")}
    keep = args.per_request is not None
    result = replays.replay(
        workload=args.workload, **workload_options(args), **settings, per_request=keep, progress=progress_bar
    )
    return Outputs({args.per_request: result.per_request} if keep else {}, result.text)


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
