"""kvlab search's speed and answers on the conversation trace (issue 40, parts 1, 3 and 6): each search is a ``kvlab
search`` command of its own, run with no evaluation kept (a fresh ``--evaluations`` folder), its CPU seconds the
whole command's (user and system: start-up, the trace's reading, the bounds and every simulation), and the
database's answers kept from a first run (``KVLAB_CACHE``: each price is read, as it is on a second search). Prints
for each: the configurations, what each rule left aside, the candidates, the configurations simulated, the CPU
seconds, the winner, the frontier and the verdict.

    .venv/bin/python bench/search_speed.py [--trace PATH] [--only 8b|70b]

The 8B search is the speed bar: at least 500 configurations within 60 s of CPU.
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from kvlab.api.searches import label

ROOT = Path(__file__).resolve().parents[1]
KVLAB = ROOT / ".venv" / "bin" / "kvlab"
TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
SEARCHES = {
    "8b": {
        "slo": "ttft_p99<=2s,tpot_p99<=50ms",
        "model_config": "models/Llama-3.1-8B-Instruct/config.json",
        "gpu_system": "a100_sxm,h100_sxm,h200_sxm,b200_sxm",
        "tp": "1,2,4",
        "instances": "1,2,3,4,6,8",
        "cpu_gib": "0,64,128,256",
        "router": "round-robin,dynamo",
    },
    # its p99 TTFT alone is above 2 s on every system and TP here (its longest prompts: 2.4 s on b200_sxm at TP 8),
    # which the bounds find unsimulated; its p90 is the target
    "70b": {
        "slo": "ttft_p90<=2s,tpot_p99<=50ms",
        "model_config": "models/Llama-3.1-70B-Instruct/config.json",
        "gpu_system": "h200_sxm,b200_sxm",
        "tp": "4,8",
        "instances": "2,4,6,8",
        "prefill_decode": "2:1,4:2",
        "cpu_gib": "0,128",
        "router": "round-robin,dynamo",
    },
}


def flags(settings):
    found = []
    for key, value in settings.items():
        found += [f"--{key.replace('_', '-')}", str(value)]
    return found


def run(name, trace, folder):
    command = [str(KVLAB), "search", "--workload", "mooncake", "--trace", str(trace)]
    command += [*flags(SEARCHES[name]), "--evaluations", str(folder)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        sys.exit(f"{name}: {done.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return json.loads(done.stdout), cpu, done.stderr.strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--only", choices=sorted(SEARCHES))
    args = parser.parse_args()
    for name in [args.only] if args.only else SEARCHES:
        with tempfile.TemporaryDirectory() as warm, tempfile.TemporaryDirectory() as folder:
            run(name, args.trace, Path(warm))  # the database's answers kept; its evaluations thrown away
            document, cpu, said = run(name, args.trace, Path(folder))
        counts = document["search"]
        print(f"{name}: {SEARCHES[name]['model_config']}, SLO {document['slo']}")
        print(f"  {counts['configurations']:,} configurations, {counts['candidates']:,} candidates after the bounds,")
        print(f"  {counts['evaluated']:,} simulated; {cpu:.1f} s of CPU ({said})")
        aside = {
            key: value for key, value in counts.items() if key not in ("configurations", "candidates", "evaluated")
        }
        print(f"  left aside: {json.dumps(aside)}")
        for row in document["frontier"]:
            metric = document["slo"].split("<")[0]
            print(
                f"  frontier: {row['cost_per_hour']:>9g} /h  {metric} {row[metric]:>8}  {label(row['configuration'])}"
            )
        winner = document["winner"]
        if winner is not None:
            figures = winner["figures"]
            print(
                f"  winner: {label(winner['configuration'])}, {winner['cost_per_hour']:g} /h,"
                f" {winner['configuration']['gpus']} GPUs; TTFT p99 {figures['ttft_ms']['p99']} ms, TPOT p99"
                f" {figures['tpot_ms']['p99']} ms, {figures['output_tokens_per_s']} output tokens/s"
            )
        print(f"  verdict: {document['verdict']['line']}")


if __name__ == "__main__":
    main()
