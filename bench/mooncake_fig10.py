"""Mooncake FAST'25 Fig. 10 beside kvlab, in one run (issue 39, part 4): 10 prefill instances, a 3,000,000-token CPU
cache each (``--cpu-scope private``: Mooncake's local cache) or one pool of them all (``shared``: its global cache),
1-token outputs, routed to the longest cached prefix. The paper: the global cache's hit ratio over the local one's
2.22x on the conversation trace and 2.36x on the synthetic one; its prefill GPU time 0.76x and 0.52x.

kvlab's runs: on a clock (``kvlab simulate``, Llama-3.1-8B-Instruct on h100_sxm, vLLM's pool, 64-token blocks, the
trace's own clock) under ``dynamo`` (the prefix held weighed against the queued prefill, as Mooncake's Conductor
weighs a prefix hit against queueing) and ``prefix`` (the longest prefix alone); and without one (``kvlab replay``,
the trace's 512-token blocks, the same GPU room) under ``prefix`` and ``round-robin``. The prefill GPU time is each
request's prefill priced alone by the measured database at its cached prefix, added up.

    .venv/bin/python bench/mooncake_fig10.py [--traces conversation,synthetic] [--speedup X]
"""

import argparse
import sys
import time
from itertools import product
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "data" / "traces" / "mooncake"
MODEL = ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json"
PUBLISHED = {"conversation": (2.22, 0.76), "synthetic": (2.36, 0.52)}  # global over local: hit ratio, prefill time
INSTANCES, CPU_TOKENS = 10, 3_000_000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", default="conversation,synthetic")
    parser.add_argument("--speedup", type=float, default=1.0, help="the trace's clock times this (on a clock)")
    args = parser.parse_args()

    import kvlab
    from kvlab.latency.hardware import HardwareModel, HardwareSettings

    model = HardwareModel(HardwareSettings(model_config=str(MODEL), gpu_system="h100_sxm"), 64)

    def measured(command, trace, **settings):
        """The run's JSON, and its hit ratio, its prefill time priced per request and its CPU seconds."""
        start = time.process_time()
        result = command(
            workload="mooncake", trace=trace, cpu_tokens=CPU_TOKENS, instances=INSTANCES, per_request=True, **settings
        )
        seconds = time.process_time() - start
        frame = result.requests_frame() if command is kvlab.simulate else result.requests()
        hits = frame["gpu_hit_tokens"] + frame["cpu_hit_tokens"]
        prefill = sum(model.prefill_ms(int(t), int(h)) for t, h in zip(frame["input_tokens"], hits, strict=True))
        document = result.to_dict()
        return document, (document["token_hit_ratio"], prefill / 1e3, seconds)

    print(
        f"{INSTANCES} instances, {CPU_TOKENS:,} CPU tokens each, 1-token outputs; global (shared) over local (private)"
    )
    print(
        "| trace | run | hit ratio local | global | global/local (paper) | prefill s local | global | ratio (paper) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    clock = {"model_config": str(MODEL), "gpu_system": "h100_sxm", "block_tokens": 64, "output_tokens": 1}
    for name in args.traces.split(","):
        trace = str(TRACES / f"{name}_trace.jsonl.gz")
        runs = {}
        for router, scope in product(("dynamo", "prefix"), ("private", "shared")):
            settings = {**clock, "speedup": args.speedup, "router": router, "cpu_scope": scope}
            document, runs[f"simulate, {router}", scope] = measured(kvlab.simulate, trace, **settings)
        gpu_tokens = document["cache"]["gpu_tokens"]  # the replays' GPU room: the pool vLLM's rule gives
        for router, scope in product(("prefix", "round-robin"), ("private", "shared")):
            settings = {"gpu_tokens": gpu_tokens, "router": router, "cpu_scope": scope}
            _, runs[f"replay, {router}", scope] = measured(kvlab.replay, trace, **settings)
        hit_paper, time_paper = PUBLISHED[name]
        for run in dict.fromkeys(label for label, _ in runs):
            (local, local_s, a), (pooled, pooled_s, b) = runs[run, "private"], runs[run, "shared"]
            print(
                f"| {name} | {run} ({a + b:.1f} s of CPU) | {local:.4f} | {pooled:.4f} | {pooled / local:.2f}"
                f" ({hit_paper}) | {local_s:,.0f} | {pooled_s:,.0f} | {pooled_s / local_s:.2f} ({time_paper}) |",
                flush=True,
            )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
