"""``kvlab simulate`` on a Mooncake trace of about a million requests (``bench/scale_traces.py``'s ``26m``: the two
published traces cycled, 25.6 M block accesses), in one run: its CPU seconds, simulated requests per CPU second
and peak resident memory, with a ``--max-memory`` the compiled loop fits in (``--roomy``) and with one it does not
(``--limit``: the Python engine serves it); and the same command under a limit below what either needs, which must
stop early with one line (the memory rule holds).

The compiled loop (kvlab/simulator/kernel.py) keeps a few arrays per distinct block of the trace. The Python engine
holds what is in flight, the GPU pool and the CPU tier, and per request its four times (typed arrays): nothing per
block of the trace (its own ids key the blocks), so its memory stays flat as the trace grows; a queue that grows
(arrivals faster than the engine serves) is checked against the limit as it grows. Both give the same figures.

With ``--instances N --router R`` the run is a fleet on one clock (issue 39, part 5): the compiled loop per instance
under the roomy limit, the Python engine per instance under the other, the same figures from both.

    .venv/bin/python bench/simulate_scale.py [--size 26m] [--rate 1.0] [--roomy 12G] [--limit 2G] [--low 64M]
        [--instances N --router R]
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
    parser.add_argument("--roomy", default="12G", help="--max-memory the compiled loop fits in (default 12G)")
    parser.add_argument("--limit", default="2G", help="--max-memory it does not fit in (default 2G)")
    parser.add_argument("--low", default="64M", help="--max-memory of the run that must stop (default 64M)")
    parser.add_argument("--instances", type=int, default=1, help="a fleet of this many instances (default 1)")
    parser.add_argument("--router", default="round-robin", help="the fleet's router (default round-robin)")
    args = parser.parse_args(argv)
    traces = ROOT / "work" / "bench" / "traces"
    subprocess.run([sys.executable, "bench/scale_traces.py", "--out", str(traces), args.size], cwd=ROOT, check=True)
    trace = traces / f"mooncake-{args.size}.jsonl"
    meta = json.loads((traces / f"mooncake-{args.size}.jsonl.meta.json").read_text())
    common = [str(KVLAB), "simulate", "--workload", "mooncake", "--trace", str(trace), *MODEL, "--rate", args.rate]
    common += ["--cpu-blocks", "3380"]
    if args.instances > 1:
        common += ["--instances", str(args.instances), "--router", args.router]
    print(f"trace: {meta['requests']:,} requests, {meta['accesses']:,} block accesses ({args.size})")
    if args.instances > 1:
        print(f"{args.instances} instances behind {args.router}, a CPU tier of 3,380 blocks each")
    figures = []
    # the Python engine first: a child's peak is the largest of every child's so far (getrusage)
    for engine, limit in (("the Python engine", args.limit), ("the compiled loop", args.roomy)):
        code, out, err, cpu, rss, wall = run([*common, "--max-memory", limit])
        if code:
            sys.exit(f"kvlab simulate failed: {err.strip()}")
        document = json.loads(out)
        figures.append({name: document[name] for name in ("ttft_ms", "tpot_ms", "e2e_ms", "gpu_hit_tokens")})
        print(
            f"kvlab simulate, --max-memory {limit} ({engine}): {document['requests']:,} requests in {cpu:.1f} s of CPU"
            f" ({wall:.1f} s wall), {document['requests'] / cpu:,.0f} simulated requests per CPU second; peak RSS"
            f" {rss:,.0f} MiB; TTFT p50 {document['ttft_ms']['p50']} ms, p99 {document['ttft_ms']['p99']} ms,"
            f" {document['requests_per_s']} requests/s"
        )
    print(f"the same figures from both: {figures[0] == figures[1]}")
    code, out, err, cpu, _, wall = run([*common, "--max-memory", args.low])
    lines = err.strip().splitlines()
    verdict = "stopped in one line" if code and len(lines) == 1 and not out else "DID NOT STOP AS IT SHOULD"
    print(
        f"under --max-memory {args.low}: exit {code}, {verdict} after {cpu:.1f} s of CPU: {lines[-1] if lines else ''}"
    )


if __name__ == "__main__":
    main()
