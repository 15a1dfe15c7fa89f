"""kvlab simulate beside vLLM 0.33's own scheduler, block pool and OffloadingConnector, request by request.

The first ``--requests`` (1,000) requests of a Mooncake trace (the conversation trace by default), or any workload
kvlab reads (``--workload NAME --option KEY=VALUE ...``, its own options sizing it), in 64-token blocks, go through
both tools under clock-free arrivals, where no price can change the order of the engine's
decisions: closed-loop clients (``--clients 1``: one request at a time; 16; as many as the requests: a burst), each
at a GPU pool that preempts and one that does not, with and without a CPU tier. vLLM's side is
``bench/vllm/driver.py`` in the bench's own venv (``.venv-vllm``, ``make bench-vllm``): vLLM's ``Scheduler``,
``KVCacheManager`` and ``BlockPool`` (and its ``OffloadingConnector`` with the CPU backend) driven by a mock model
runner. kvlab's is ``kvlab.simulate`` with ``--engine-version 0.33.0`` on the same workload and settings
(pricing by the roofline: the clock orders nothing here). vLLM's ``num_gpu_blocks`` N is kvlab's ``--gpu-blocks N``:
both keep block 0 out of use.

Per setting it prints both tools' sums (GPU hit and CPU hit tokens at each request's first scheduled lookup,
preemptions, steps) and the requests whose GPU hit, CPU hit or preemptions differ; the exit status is 1 where any
differ. Usage::

    .venv/bin/python bench/vllm_side_by_side.py [--python .venv-vllm/bin/python] [--trace FILE] [--requests 1000]
        [--workload NAME --option KEY=VALUE ...] [--output-tokens N] [--only TEXT] [--keep DIR] [--seeds 8]
"""

import argparse
import csv
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
MODEL = ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json"
BLOCK = 64
VERSION = "0.33.0"
# The mock connector worker completes every copy in the step that asks for it: kvlab's links as fast as they go (a
# 64-block copy then takes picoseconds, far less than a step), no cost per copy.
LINK_GBPS = 1e9
# (name, clients, GPU blocks, CPU blocks); clients None: a burst (every request a client)
SETTINGS = (
    ("serial", 1, 2_000, 0),
    ("serial+cpu", 1, 2_000, 30_000),
    ("burst", None, 2_000, 0),
    ("burst+cpu", None, 2_000, 30_000),
    ("16 clients", 16, 2_000, 0),
    ("16 clients+cpu", 16, 2_000, 30_000),
    ("16 clients, larger pool", 16, 6_000, 0),  # no preemption
    ("16 clients, larger pool+cpu", 16, 6_000, 30_000),
)


def head(trace, count, out):
    """The first ``count`` lines of ``trace`` (gzip or plain) written to ``out``."""
    opener = gzip.open if str(trace).endswith(".gz") else open
    with opener(trace, "rt") as source, open(out, "w") as sink:
        for number, line in enumerate(source):
            if number == count:
                break
            sink.write(line)


def requests_file(workload, options, output, out):
    """The requests as kvlab reads them (``workload`` with ``options``, 64-token blocks), one JSON line each."""
    from kvlab.api.common import workload_of

    made = workload_of(workload, options, BLOCK)
    with open(out, "w") as sink:
        for timed in made.timed():
            keys = [
                int(key) for key in timed.keys[: timed.tokens // BLOCK]
            ]  # full blocks: a partial one is the request's
            sink.write(
                json.dumps({"keys": keys, "tokens": int(timed.tokens), "output": int(output or timed.output_tokens)})
                + "\n"
            )


def run_kvlab(workload, options, output, clients, gpu_blocks, cpu_blocks):
    import kvlab

    result = kvlab.simulate(
        workload=workload,
        **options,
        model_config=str(MODEL),
        gpu_system="h100_sxm",
        latency_source="roofline",
        engine_version=VERSION,
        link_gbps=LINK_GBPS,
        copy_us=0,
        block_tokens=BLOCK,
        gpu_blocks=gpu_blocks,
        cpu_blocks=cpu_blocks,
        clients=clients,
        output_tokens=output,
        per_request=True,
    )
    rows = {}
    for row in csv.DictReader(io.StringIO(result.per_request)):
        rows[int(row["request"])] = (int(row["gpu_hit_tokens"]), int(row["cpu_hit_tokens"]), int(row["preemptions"]))
    return rows, json.loads(result.text).get("steps")


def run_vllm(python, requests, out, clients, gpu_blocks, cpu_blocks, seed):
    """vLLM's side under ``PYTHONHASHSEED=seed``: ``({request: (gpu hit, cpu hit, preemptions)}, steps)``."""
    argv = [python, str(ROOT / "bench" / "vllm" / "driver.py"), "--requests", str(requests), "--out", str(out)]
    argv += ["--clients", str(clients), "--gpu-blocks", str(gpu_blocks), "--cpu-blocks", str(cpu_blocks)]
    argv += ["--block-tokens", str(BLOCK)]
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": str(seed)})
    if done.returncode:
        tail = done.stderr.strip().splitlines()[-1:] or ["no message"]
        raise SystemExit(f"vLLM's driver failed: {tail[0]}")
    rows, steps = {}, None
    with open(out) as file:
        for line in file:
            entry = json.loads(line)
            if "steps" in entry:
                steps = entry["steps"]
            else:
                rows[entry["request"]] = (entry["gpu_hit"], entry["cpu_hit"], entry["preemptions"])
    return rows, steps


def sums(rows):
    return [sum(row[index] for row in rows.values()) for index in range(3)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=str(ROOT / ".venv-vllm" / "bin" / "python"), help="the bench venv's python")
    parser.add_argument("--workload", default="mooncake", help="any workload kvlab reads (kvlab simulate --workload)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a workload option")
    parser.add_argument("--trace", help="the mooncake workload's trace (the conversation trace by default)")
    parser.add_argument("--requests", type=int, default=1000, help="the mooncake trace's first N requests")
    parser.add_argument("--output-tokens", type=int, help="every request's output (default: the workload's)")
    parser.add_argument("--only", help="run the settings whose name contains this")
    parser.add_argument("--keep", help="keep the work files in this folder")
    parser.add_argument("--seeds", type=int, default=8, help="the most hash seeds vLLM runs under, with a CPU tier")
    args = parser.parse_args(argv)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="kvlab-vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    options = dict(option.partition("=")[::2] for option in args.option)
    if args.workload == "mooncake" or args.trace:
        source = args.trace or options.get("trace") or str(DEFAULT_TRACE)
        options["trace"] = str(work / "trace.jsonl")
        head(source, args.requests, options["trace"])
        named = Path(source).name
    else:
        named = f"--workload {args.workload}"
    requests = work / "requests.jsonl"
    requests_file(args.workload, options, args.output_tokens, requests)
    count = sum(1 for _ in open(requests))
    print(f"{count} requests of {named}, {BLOCK}-token blocks; vLLM {VERSION} beside kvlab simulate")
    print("| setting | GPU blocks | CPU blocks | tool | GPU hit tokens | CPU hit tokens | preemptions | steps", end="")
    print(" | requests that differ |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    failed = False
    for name, clients, gpu_blocks, cpu_blocks in SETTINGS:
        if args.only and args.only not in name:
            continue
        clients = clients or count
        started = time.monotonic()
        ours, our_steps = run_kvlab(args.workload, options, args.output_tokens, clients, gpu_blocks, cpu_blocks)
        our_s = time.monotonic() - started
        # Without a CPU tier vLLM's run does not depend on the hash seed; with one it does (the module's docstring):
        # seeds are tried in turn until one run agrees on every request, at most --seeds.
        tried = []
        for seed in range(args.seeds if cpu_blocks else 1):
            started = time.monotonic()
            theirs, their_steps = run_vllm(
                args.python, requests, work / f"vllm-{name}-{seed}.jsonl", clients, gpu_blocks, cpu_blocks, seed
            )
            differ = [number for number in theirs if theirs[number] != ours.get(number)]
            tried.append((seed, theirs, their_steps, time.monotonic() - started, differ))
            if not differ and their_steps == our_steps:
                break
        seed, theirs, their_steps, their_s, differ = tried[-1]
        failed |= bool(differ) or their_steps != our_steps
        for tool, rows, steps, seconds in (("vLLM", theirs, their_steps, their_s), ("kvlab", ours, our_steps, our_s)):
            total = sums(rows)
            shown = f"{tool} ({seconds:.1f} s{f', PYTHONHASHSEED={seed}' if tool == 'vLLM' and cpu_blocks else ''})"
            print(
                f"| {name} | {gpu_blocks:,} | {cpu_blocks:,} | {shown} | {total[0]:,} | {total[1]:,} | {total[2]:,} |"
                f" {steps:,} | {len(differ) if tool == 'kvlab' else ''} |"
            )
        for other, rows, _, _, others in tried[:-1]:
            print(
                f"  vLLM under PYTHONHASHSEED={other}: {sums(rows)[1]:,} CPU hit tokens, {len(others)} requests differ"
            )
        for number in differ[:3]:
            print(
                f"  request {number}: vLLM {theirs[number]}, kvlab {ours.get(number)} (GPU hit, CPU hit, preemptions)"
            )
        sys.stdout.flush()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
