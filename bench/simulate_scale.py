"""``kvlab simulate`` on a Mooncake trace of about a million requests (``bench/scale_traces.py``'s ``26m``: the two
published traces cycled, 25.6 M block accesses), in one run: its CPU seconds, simulated requests per CPU second
and peak resident memory, beside ``--max-memory``'s projection; and the same command under a limit below what it
needs, which must stop early with one line (the memory rule holds).

The engine holds what is in flight, the GPU pool and the CPU tier, and per request its four times (typed arrays):
nothing per block of the trace (its own ids key the blocks), so the memory stays flat as the trace grows; a queue
that grows (arrivals faster than the engine serves) is checked against the limit as it grows.

    .venv/bin/python bench/simulate_scale.py [--size 26m] [--rate 1.0] [--limit 2G]
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KVLAB = ROOT / ".venv" / "bin" / "kvlab"
MODEL = ("--model-config", "models/Llama-3.1-8B-Instruct/config.json", "--gpu-system", "h100_sxm")


def run(command):
    """``(returncode, stdout, stderr, CPU seconds, peak RSS MiB)`` of one child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc.returncode, proc.stdout, proc.stderr, cpu, after.ru_maxrss / 1024, time.perf_counter() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="26m", help="bench/scale_traces.py's size (default 26m: ~1 M requests)")
    parser.add_argument("--rate", default="1.0", help="Poisson requests per second (default 1.0: one H100 keeps up)")
    parser.add_argument("--limit", default="2G", help="--max-memory of the full run (default 2G)")
    parser.add_argument("--low", default="64M", help="--max-memory of the run that must stop (default 64M)")
    args = parser.parse_args(argv)
    traces = ROOT / "work" / "bench" / "traces"
    subprocess.run([sys.executable, "bench/scale_traces.py", "--out", str(traces), args.size], cwd=ROOT, check=True)
    trace = traces / f"mooncake-{args.size}.jsonl"
    meta = json.loads((traces / f"mooncake-{args.size}.jsonl.meta.json").read_text())
    common = [str(KVLAB), "simulate", "--workload", "mooncake", "--trace", str(trace), *MODEL, "--rate", args.rate]
    common += ["--cpu-blocks", "3380"]
    code, out, err, cpu, rss, wall = run([*common, "--max-memory", args.limit])
    if code:
        sys.exit(f"kvlab simulate failed: {err.strip()}")
    document = json.loads(out)
    print(f"trace: {meta['requests']:,} requests, {meta['accesses']:,} block accesses ({args.size})")
    print(
        f"kvlab simulate: {document['requests']:,} requests in {cpu:.1f} s of CPU ({wall:.1f} s wall),"
        f" {document['requests'] / cpu:,.0f} simulated requests per CPU second; peak RSS {rss:,.0f} MiB"
        f" (--max-memory {args.limit}); TTFT p50 {document['ttft_ms']['p50']} ms, p99 {document['ttft_ms']['p99']} ms,"
        f" {document['requests_per_s']} requests/s"
    )
    code, out, err, cpu, _, wall = run([*common, "--max-memory", args.low])
    lines = err.strip().splitlines()
    verdict = "stopped in one line" if code and len(lines) == 1 and not out else "DID NOT STOP AS IT SHOULD"
    print(
        f"under --max-memory {args.low}: exit {code}, {verdict} after {cpu:.1f} s of CPU: {lines[-1] if lines else ''}"
    )


if __name__ == "__main__":
    main()
