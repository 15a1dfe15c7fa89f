"""Replay speed on a Mooncake trace: the prefix-cache replay beside bare OrderedDict LRU loops, in one run.

All sides replay the same block accesses (the trace's hash IDs, 512-token blocks; a last partial
block has its own size). The bare loop is the least any LRU replay must do: one single-tier
size-aware LRU, one dict lookup and one move or insert per access, no prefix logic, no statistics.
The bare two-tier loop adds a CPU tier under the lab's write-through rule, block by block: the dict
work of a two-tier replay without its prefix logic. The replay is ``kvlab.loop.replay`` as the
command line runs it (prefix lookup on both tiers, write-through, tail-first refresh, per-round
figures), on requests already read into memory, so all sides time the same work minus parsing.
Reading the trace is timed apart, and the whole command line (``CLI s``) once per point.

Each side runs ``--repeat`` times, interleaved; the best time counts. Usage::

    .venv/bin/python bench/replay_speed.py [--trace FILE] [--repeat 5]
"""

import argparse
import json
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvlab.cache.write_policies import WriteThrough  # noqa: E402
from kvlab.loop import replay  # noqa: E402
from kvlab.workloads import MooncakeWorkload  # noqa: E402

DEFAULT_TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
BLOCK = 512
# (GPU room, CPU room) in tokens. The trace's distinct blocks hold ~93.6 M tokens.
POINTS = [(1_000_000, 0), (1_000_000, 10_000_000), (10_000_000, 40_000_000), (10**12, 0)]


class Loaded:
    """The trace's requests, read once, served again and again (the workload interface of replay())."""

    rounds = ["trace"]

    def __init__(self, requests):
        self._requests = requests

    def requests(self):
        return iter(self._requests)


def bare_lru(accesses, capacity):
    """A bare size-aware LRU over (key, size) accesses; return the number of hits."""
    cache = OrderedDict()
    move = cache.move_to_end
    pop = cache.popitem
    used = 0
    hits = 0
    for key, size in accesses:
        if key in cache:
            move(key)
            hits += 1
        elif size <= capacity:
            while used + size > capacity:
                used -= pop(False)[1]
            cache[key] = size
            used += size
    return hits


def bare_two_tier(accesses, gpu_capacity, cpu_capacity):
    """The same bare loop with a CPU tier under the lab's write-through rule, block by block (no prefix logic)."""
    gpu, cpu = OrderedDict(), OrderedDict()
    gpu_move, cpu_move, gpu_pop, cpu_pop = gpu.move_to_end, cpu.move_to_end, gpu.popitem, cpu.popitem
    gpu_used = cpu_used = hits = 0
    for key, size in accesses:
        if key in gpu:
            gpu_move(key)
            hits += 1
            continue
        if size <= gpu_capacity:
            while gpu_used + size > gpu_capacity:
                gpu_used -= gpu_pop(False)[1]
            gpu[key] = size
            gpu_used += size
        if key in cpu:
            cpu_move(key)
            hits += 1
        elif size <= cpu_capacity:
            while cpu_used + size > cpu_capacity:
                cpu_used -= cpu_pop(False)[1]
            cpu[key] = size
            cpu_used += size
    return hits


def timed(run):
    start = time.perf_counter()
    result = run()
    return time.perf_counter() - start, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(DEFAULT_TRACE), help="a Mooncake JSONL trace (.jsonl or .jsonl.gz)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per side; the best counts (default 5)")
    args = parser.parse_args()

    workload = MooncakeWorkload(trace=args.trace)
    start = time.perf_counter()
    requests = list(workload.requests())
    read_s = time.perf_counter() - start
    accesses = [
        (key, BLOCK if i < len(r.keys) - 1 else r.tokens - BLOCK * i) for r in requests for i, key in enumerate(r.keys)
    ]
    count = len(accesses)
    print(
        f"trace {Path(args.trace).name}: {len(requests):,} requests, {count:,} block accesses; read in {read_s:.3f} s"
    )
    print(
        f"{'GPU tokens':>14} {'CPU tokens':>11} {'bare acc/s':>11} {'2-tier acc/s':>12} {'replay acc/s':>12}"
        f" {'÷bare':>6} {'÷2-tier':>7} {'replay s':>8} {'CLI s':>6}  token hit ratio"
    )
    for gpu, cpu in POINTS:
        bare_s = tiers_s = replay_s = float("inf")
        for _ in range(args.repeat):  # interleaved, so all sides see the same machine
            bare_s = min(bare_s, timed(lambda gpu=gpu: bare_lru(accesses, gpu))[0])
            tiers_s = min(tiers_s, timed(lambda gpu=gpu, cpu=cpu: bare_two_tier(accesses, gpu, cpu))[0])
            seconds, totals = timed(lambda gpu=gpu, cpu=cpu: replay(Loaded(requests), WriteThrough(gpu, cpu, BLOCK)))
            replay_s = min(replay_s, seconds)
        row = totals[0]
        hit_ratio = (row[5] + row[6]) / row[2]
        command = [sys.executable, "-m", "kvlab", "replay", "--workload", "mooncake", "--trace", args.trace]
        cli_s, done = timed(
            lambda gpu=gpu, cpu=cpu, command=command: subprocess.run(
                [*command, "--gpu-tokens", str(gpu), "--cpu-tokens", str(cpu)], capture_output=True, text=True, cwd=ROOT
            )
        )
        assert done.returncode == 0 and json.loads(done.stdout)["token_hit_ratio"] == round(hit_ratio, 6)
        print(
            f"{gpu:>14,} {cpu:>11,} {count / bare_s:>11,.0f} {count / tiers_s:>12,.0f} {count / replay_s:>12,.0f}"
            f" {bare_s / replay_s:>6.2f} {tiers_s / replay_s:>7.2f} {replay_s:>8.3f} {cli_s:>6.2f}  {hit_ratio:.4f}"
        )


if __name__ == "__main__":
    main()
