"""What each offload design and eviction policy costs, side by side in one run, on a Mooncake trace.

Every (write policy, eviction policy) pair replays the same requests (read once into memory) at one
(GPU, CPU) point, the eviction policy the same on both tiers; the time of ``opt`` includes reading
the future (``foresee``: a pass over the workload, and for the CPU a GPU-only replay). Times are
the best of ``--repeat`` interleaved runs, and each is also given as a ratio to write-through + lru
(the lab's design) measured in the same run. Usage::

    .venv/bin/python bench/policy_speed.py [--trace FILE] [--repeat 3] [--gpu-tokens G] [--cpu-tokens C]
"""

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.replay_speed import DEFAULT_TRACE, Loaded  # noqa: E402
from kvlab.cache.eviction import EVICTION_POLICIES  # noqa: E402
from kvlab.cache.write_policies import WRITE_POLICIES, make_cache  # noqa: E402
from kvlab.loop import figures, overall, replay  # noqa: E402
from kvlab.workloads import MooncakeWorkload  # noqa: E402

BLOCK = 512


def timed(workload, design, eviction, gpu, cpu):
    cache = make_cache(design, gpu, cpu, BLOCK, gpu_eviction=eviction, cpu_eviction=eviction)
    start = time.perf_counter()
    totals = replay(workload, cache)
    return time.perf_counter() - start, figures(overall(totals))["token_hit_ratio"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gpu-tokens", type=int, default=1_000_000)
    parser.add_argument("--cpu-tokens", type=int, default=10_000_000)
    args = parser.parse_args(argv)
    workload = Loaded(list(MooncakeWorkload(BLOCK, trace=str(args.trace)).requests()))
    pairs = [(design, eviction) for design in WRITE_POLICIES for eviction in EVICTION_POLICIES]
    best, ratios = {}, {}
    for _ in range(args.repeat):
        for pair in pairs:
            seconds, ratio = timed(workload, *pair, args.gpu_tokens, args.cpu_tokens)
            best[pair] = min(seconds, best.get(pair, seconds))
            ratios[pair] = ratio
    base = best["write-through", "lru"]
    print(f"{args.trace.name}: GPU {args.gpu_tokens:,} tokens, CPU {args.cpu_tokens:,} tokens, {BLOCK}-token blocks")
    print(f"{'write policy':>14} {'eviction':>8} {'replay s':>9} {'÷ write-through lru':>20} {'token hit ratio':>16}")
    for design, eviction in pairs:
        seconds = best[design, eviction]
        print(f"{design:>14} {eviction:>8} {seconds:9.3f} {seconds / base:20.2f} {ratios[design, eviction]:16.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
