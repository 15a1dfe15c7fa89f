"""``kvlab replay``: a workload through a GPU + CPU prefix cache of KV blocks; one JSON object of reuse figures
on stdout, and with ``--per-request FILE`` one CSV row per request. On a terminal a progress bar shows on
stderr for replays longer than a second; it never reaches stdout or a log file."""

from kvlab.api import replays
from kvlab.cli.base import Outputs, Parser, add_arguments, run, summary
from kvlab.cli.flags import PerRequestSettings, add_memory_argument, add_workload_arguments, workload_options
from kvlab.util import progress


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    add_replay_arguments(parser)
    add_arguments(parser, PerRequestSettings)
    return parser


def add_replay_arguments(parser):
    """A replay's setting: the cache, or a server's own design (kvlab.api.replays.ReplaySettings), the workload and
    the memory stop."""
    add_arguments(parser, replays.ReplaySettings)
    add_workload_arguments(parser)
    add_memory_argument(parser)


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
