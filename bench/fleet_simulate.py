"""A fleet on one clock beside one instance, in one run (issue 39, part 2): ``kvlab simulate`` of the conversation
trace (or ``--trace``) through 1 instance (the compiled loop), through 4 and 16 (the Python engine, one per instance)
under each router with private CPU tiers and a shared one, and through 4 split into prefill and decode instances
(``--split``); each instance the same (the pool vLLM's memory rule gives Llama-3.1-8B on an H100, ``--cpu-blocks`` of
CPU), the load ``--speedup`` of the trace's clock times the instances. CPU seconds of the whole call (the trace read,
the database's prices), TTFT and TPOT p50 and p99, and the token hit ratio.

    .venv/bin/python bench/fleet_simulate.py [--trace PATH] [--cpu-blocks N] [--speedup X] [--instances 4,16]
        [--routers R,...] [--split P+D,...]
"""

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
MODEL = ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--cpu-blocks", type=int, default=27060, help="each instance's CPU tier, in 64-token blocks")
    parser.add_argument("--speedup", type=float, default=0.2, help="one instance's load: the trace's clock times it")
    parser.add_argument("--instances", default="4,16")
    parser.add_argument("--routers", default=None, help="comma-separated (default: every router)")
    parser.add_argument("--split", default="1+3,2+2,3+1", help="prefill+decode instances, beside 4 alike (dynamo)")
    args = parser.parse_args()

    import kvlab
    from kvlab.fleet import CPU_SCOPES
    from kvlab.fleet.routers import ROUTERS

    common = {
        "workload": "mooncake",
        "trace": str(args.trace),
        "model_config": str(MODEL),
        "gpu_system": "h100_sxm",
        "block_tokens": 64,
        "cpu_blocks": args.cpu_blocks,
    }

    def run(label, **settings):
        start = time.process_time()
        result = kvlab.simulate(**common, **settings).to_dict()
        seconds = time.process_time() - start
        ttft, tpot = result["ttft_ms"], result["tpot_ms"]
        times = f"{ttft['p50']} | {ttft['p99']} | {tpot['p50']} | {tpot['p99']}"
        print(f"| {label} | {seconds:.2f} | {times} | {result['token_hit_ratio']} |", flush=True)

    print(f"{args.trace.name}: {args.cpu_blocks:,} CPU blocks per instance, speedup {args.speedup} per instance")
    print("| run | CPU s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | token hit ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    run("1 instance, compiled", speedup=args.speedup)
    routers = args.routers.split(",") if args.routers else list(ROUTERS)
    for instances in (int(count) for count in args.instances.split(",")):
        for router in routers:
            for scope in CPU_SCOPES:
                label = f"{instances} instances, {router}, {scope}"
                run(label, speedup=args.speedup * instances, instances=instances, router=router, cpu_scope=scope)
    for split in args.split.split(","):
        prefill, decode = (int(count) for count in split.split("+"))
        label = f"{prefill} prefill + {decode} decode instances, dynamo, private"
        run(
            label,
            speedup=args.speedup * (prefill + decode),
            prefill_instances=prefill,
            decode_instances=decode,
            router="dynamo",
        )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
