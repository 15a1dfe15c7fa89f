"""A fleet's replay and its shared tier's curve beside one instance's, in one run (issue 39, part 1): the conversation
trace (or ``--trace``) through 1, 4 and 16 instances under each router and CPU scope, the rooms per instance the
single instance's divided among them; CPU seconds of the replay alone (the workload read once before) and of the
shared tier's exact curve, best of ``--repeat``, and the token hit ratio each gives.

    .venv/bin/python bench/fleet_speed.py [--trace PATH] [--gpu-tokens N] [--cpu-tokens N] [--repeat N]
"""

import argparse
import sys
import time
from functools import partial
from itertools import product
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"


def best(repeat, work):
    """The least CPU seconds of ``repeat`` runs of ``work()``, and its last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.process_time()
        result = work()
        times.append(time.process_time() - start)
    return min(times), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--gpu-tokens", type=int, default=1_000_000, help="the one instance's GPU room")
    parser.add_argument("--cpu-tokens", type=int, default=4_000_000, help="the one instance's CPU room")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from kvlab.cache.interface import CacheSettings
    from kvlab.curves.mrc import tier_curve
    from kvlab.fleet import CLOCKLESS, CPU_SCOPES, build
    from kvlab.loop import figures, overall, replay
    from kvlab.workloads import MooncakeWorkload
    from kvlab.workloads.stream import load

    workload = MooncakeWorkload(512, trace=str(args.trace))
    load(workload)  # read once: the replays below time the serving, not the reading

    def settings(instances):
        rooms = {"gpu_tokens": args.gpu_tokens // instances, "cpu_tokens": args.cpu_tokens // instances}
        return CacheSettings(**rooms, block_tokens=workload.block_tokens)

    def replayed(make):
        return best(args.repeat, lambda: replay(workload, make()))

    rows = [
        ("1 instance, compiled", *replayed(lambda: settings(1).build(workload))),
        ("1 instance, reference", *replayed(lambda: settings(1).build())),
    ]
    for instances, router, scope in product((4, 16), CLOCKLESS, CPU_SCOPES):
        fleet = partial(build, settings(instances), instances, router, scope)
        rows.append((f"{instances} instances, {router}, {scope}", *replayed(fleet)))
    print(f"{args.trace.name}: rooms {args.gpu_tokens:,} GPU + {args.cpu_tokens:,} CPU tokens in all")
    print("| fleet | replay CPU s | token hit ratio |")
    print("|---|---:|---:|")
    for name, seconds, totals in rows:
        print(f"| {name} | {seconds:.3f} | {figures(overall(totals))['token_hit_ratio']} |")
    print()
    print("| the CPU tier's exact curve | CPU s | tokens for full reuse |")
    print("|---|---:|---:|")
    for instances, router in ((1, None), (4, "round-robin"), (4, "session"), (16, "round-robin"), (16, "session")):
        fleet = {"instances": instances, "router": router} if router else {}
        gpu = args.gpu_tokens // instances
        seconds, curve = best(args.repeat, partial(tier_curve, workload, gpu_tokens=gpu, **fleet))
        shared = f"{instances} x {gpu:,} GPU tokens, {router}" if router else f"1 x {gpu:,} GPU tokens"
        print(f"| {shared} | {seconds:.3f} | {curve.smallest_reaching(int(curve.final().sum())):,} |")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
