"""``kvlab simulate``: a workload through one engine instance on a clock (requests in flight hold their blocks,
steps share a token budget, copies queue on the links, every step priced from the hardware); one JSON object on
stdout, with ``--per-request FILE`` one CSV row per request, and with ``--percentiles FILE`` the times' percentiles."""

import argparse
import dataclasses
import sys

from kvlab.api import simulates
from kvlab.cli.base import Outputs, Parser, argument, run, summary
from kvlab.cli.flags import (
    add_hardware_arguments,
    add_memory_argument,
    add_workload_arguments,
    workload_options,
)
from kvlab.cli.replay import add_cache_arguments
from kvlab.cli.types import number_in
from kvlab.latency.transfer import DISK_HARDWARE
from kvlab.simulator.arrivals import MAX_CLIENTS, PACE, Arrivals, pace
from kvlab.simulator.instance import CACHE_RULES
from kvlab.simulator.settings import GENERATED_BLOCKS, MAX_OUTPUT_TOKENS, SCHEDULERS, UTILIZATION, EngineSettings
from kvlab.workloads import whole_number

ENGINE_HELP = {  # kvlab.simulator.settings.EngineSettings' fields as flags
    "scheduler": "vllm: vLLM v1's (mixed steps, the newest running request preempted; default); sglang: SGLang's"
    " (prefill steps first, decode reserved at admission, the fewest-output request retracted)",
    "gpu_blocks": "the GPU pool in blocks (default: the engine's memory rule for the model and system,"
    " kvlab/serving/vllm.py; or --gpu-tokens)",
    "cpu_blocks": "the CPU tier in blocks (or --cpu-tokens; default none)",
    "max_num_batched_tokens": "a step's token budget (vLLM's flag; default %(default)s)",
    "max_num_seqs": "the most requests in a step (vLLM's flag; default %(default)s)",
    "chunked_prefill": "cut a prompt longer than the budget left into chunks (default: on, as vLLM v1)",
    "generated_blocks": "keep: a request's full generated blocks stay cached when it lets go (vLLM); drop: freed"
    " empty, as the sequential replay (default %(default)s)",
    "output_tokens": "every request's output length (default: the trace's output_length; at most"
    f" {MAX_OUTPUT_TOKENS:,}, kvlab/simulator/settings.py)",
    "gpu_memory_utilization": "the share of GPU memory the engine takes (vLLM's flag; default %(default)s)",
}
CHOICES = {"generated_blocks": GENERATED_BLOCKS, "scheduler": SCHEDULERS}
TYPES = {
    "gpu_blocks": argument(whole_number(0)),
    "cpu_blocks": argument(whole_number(0)),
    "max_num_batched_tokens": argument(whole_number(1)),
    "max_num_seqs": argument(whole_number(1)),
    "output_tokens": argument(whole_number(1)),
    "gpu_memory_utilization": argument(
        number_in(*UTILIZATION, f"a number from {UTILIZATION[0]:g} to {UTILIZATION[1]:g}")
    ),
}


def build_parser(prog):
    parser = Parser(prog=prog, description=summary(__doc__))
    cache = parser.add_argument_group("cache (kvlab replay's flags; the pool is vLLM's: LRU, full blocks)")
    add_cache_arguments(cache, "GPU pool in tokens (or --gpu-blocks)", required=False)
    engine = parser.add_argument_group("engine (kvlab/simulator/settings.py)")
    for setting in dataclasses.fields(EngineSettings):
        flag = "--" + setting.name.replace("_", "-")
        if setting.type is bool:
            engine.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=setting.default, help=ENGINE_HELP[setting.name]
            )
            continue
        engine.add_argument(
            flag,
            default=setting.default,
            type=TYPES.get(setting.name),
            choices=CHOICES.get(setting.name),
            metavar=None if setting.name in CHOICES else setting.name.upper(),
            help=ENGINE_HELP[setting.name],
        )
    arrivals = parser.add_argument_group("arrivals (one of; default: the trace's clock)")
    paced, within = argument(pace), f"{PACE[0]:g} to {PACE[1]:g}"
    arrivals.add_argument("--speedup", type=paced, help=f"the trace's timestamps divided by this ({within})")
    arrivals.add_argument("--rate", type=paced, help=f"Poisson arrivals, requests per second ({within})")
    arrivals.add_argument("--clients", type=argument(whole_number(1, MAX_CLIENTS)), help="closed-loop clients")
    seed = argument(whole_number(0))
    arrivals.add_argument("--seed", type=seed, help="the Poisson draw of --rate's seed (default 0)")
    add_hardware_arguments(parser, skip=DISK_HARDWARE)
    add_workload_arguments(parser)
    add_memory_argument(parser)
    parser.add_output("--per-request", metavar="FILE", help="also write one CSV row per request to FILE")
    parser.add_output(
        "--percentiles",
        metavar="FILE",
        help="also write the times' percentiles to FILE: a CSV row per percentile (0 to 100, and 99.5, 99.9)",
    )
    return parser


def settings_of(args):
    """kvlab.simulate's keywords from the flags (the files to write aside)."""
    names = ("gpu_tokens", "cpu_tokens", "block_tokens", *CACHE_RULES, "max_memory")
    names += tuple(field.name for field in dataclasses.fields(EngineSettings))
    names += tuple(field.name for field in dataclasses.fields(Arrivals))
    from kvlab.latency.hardware import settings_names

    settings = {name: getattr(args, name) for name in (*names, *settings_names()) if hasattr(args, name)}
    return {"workload": args.workload, **workload_options(args), **settings}


def prepare(args):
    """``kvlab config``'s check of a job's flags: every setting checked as :func:`execute` checks it, nothing run."""
    simulates.simulate(**settings_of(args), per_request=args.per_request is not None, dry_run=True)


def execute(args, parser):
    kept = {"per_request": args.per_request, "percentiles": args.percentiles}
    wanted = {name: path is not None for name, path in kept.items()}
    result = simulates.simulate(**settings_of(args), **wanted)
    refused = result.to_dict()["refused"]
    if refused:  # the figures are the served requests' only: said, not left to a key of the JSON
        sys.stderr.write(
            f"{parser.prog}: note: {refused:,} of {refused + result.requests:,} requests refused, each longer with its"
            " output than the GPU pool (as vLLM refuses it); the figures are the served requests'\n"
        )
    files = {path: getattr(result, name) for name, path in kept.items() if path is not None}
    return Outputs(files, result.text)


def main(argv, prog):
    return run(build_parser, execute, argv, prog)
