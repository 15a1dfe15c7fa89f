"""A fleet on one clock beside one instance, in one run (issue 39, parts 2 and 5): ``kvlab simulate`` of the
conversation trace (or ``--trace``) through 1 instance, through 4 and 16 under each router with private CPU tiers
(the compiled loop, one per instance) and a shared one (the Python engine, one per instance), and through 4 split
into prefill and decode instances (``--split``, the Python engines). Each instance is the same (the pool vLLM's
memory rule gives Llama-3.1-8B on an H100, ``--cpu-blocks`` of CPU), the load ``--speedup`` of the trace's clock
times the instances. Each run is a ``kvlab simulate`` command of its own, and its CPU seconds are the whole
command's (user and system, start-up, the trace's reading and the database's prices included): run first with no
database answers kept (``kvlab/latency/database.py``'s memo emptied: each price asked of aiconfigurator-core), then
again (each price read from the memo the first run wrote), in a cache folder of its own (``KVLAB_CACHE``, a copy of
the user's without its memos). Then TTFT and TPOT p50 and p99, and the token hit ratio.

    .venv/bin/python bench/fleet_simulate.py [--trace PATH] [--cpu-blocks N] [--speedup X] [--instances 4,16]
        [--routers R,...] [--split P+D,...]
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KVLAB = ROOT / ".venv" / "bin" / "kvlab"
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

    from kvlab.fleet import CPU_SCOPES
    from kvlab.fleet.routers import ROUTERS

    common = [str(KVLAB), "simulate", "--workload", "mooncake", "--trace", str(args.trace)]
    common += ["--model-config", str(MODEL), "--gpu-system", "h100_sxm", "--block-tokens", "64"]
    common += ["--cpu-blocks", str(args.cpu_blocks)]

    from kvlab.util import user_cache

    cache = Path(tempfile.mkdtemp(prefix="kvlab-cache-"))
    shutil.copytree(user_cache.folder(), cache, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.memo"))
    environment = {**os.environ, "KVLAB_CACHE": str(cache)}

    def timed(command):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=environment, check=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode:
            sys.exit(f"{' '.join(command)}: {done.stderr.strip()}")
        return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, done.stdout

    def run(label, *flags):
        for memo in cache.rglob("*.memo"):
            memo.unlink()
        first, _ = timed([*common, *flags])
        again, out = timed([*common, *flags])
        result = json.loads(out)
        ttft, tpot = result["ttft_ms"], result["tpot_ms"]
        times = f"{ttft['p50']} | {ttft['p99']} | {tpot['p50']} | {tpot['p99']}"
        print(f"| {label} | {first:.2f} | {again:.2f} | {times} | {result['token_hit_ratio']} |", flush=True)

    print(f"{args.trace.name}: {args.cpu_blocks:,} CPU blocks per instance, speedup {args.speedup} per instance")
    print("| run | CPU s | CPU s again | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | token hit ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    subprocess.run([sys.executable, "-m", "kvlab.workflow.kernels"], cwd=ROOT, check=True)  # no compile is timed
    timed([*common, "--speedup", str(args.speedup)])  # the cache's engine spec made, untimed
    run("1 instance", "--speedup", str(args.speedup))
    routers = args.routers.split(",") if args.routers else list(ROUTERS)
    for instances in (int(count) for count in args.instances.split(",")):
        for router in routers:
            for scope in CPU_SCOPES:
                label = f"{instances} instances, {router}, {scope}"
                flags = ("--instances", str(instances), "--router", router, "--cpu-scope", scope)
                run(label, "--speedup", str(args.speedup * instances), *flags)
    for split in args.split.split(","):
        prefill, decode = (int(count) for count in split.split("+"))
        label = f"{prefill} prefill + {decode} decode instances, dynamo, private"
        flags = ("--prefill-instances", str(prefill), "--decode-instances", str(decode), "--router", "dynamo")
        run(label, "--speedup", str(args.speedup * (prefill + decode)), *flags)
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
