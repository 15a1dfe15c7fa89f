"""What pricing every request of a Mooncake trace costs beyond its replay, side by side in one run.

The replay is ``kvlab ttft predict``'s (``kvlab.api.replays.replay_parts``, the per-request table kept: the
trace read and replayed at one (GPU, CPU) point, 512-token blocks); the pricing is its
``kvlab.latency.pricing.price_requests`` and the percentiles, once with the measured database
(aiconfigurator-core, Llama-3.1-8B-Instruct on h100_sxm with vLLM) and once with the roofline, each with a
fresh :class:`kvlab.latency.hardware.HardwareModel` (its caches empty). Building the database's model is timed
apart: the first one compiles the model and loads the database (its first query), the later ones find the
compiled model in the process. Times are ``time.process_time()`` (every thread of the process: the
database's core may use several), each of ``--repeat`` runs shown: the first finds the process cold (the
kernels, the trace, the database not loaded), the later ones do not. The whole commands (``kvlab replay`` and
``kvlab ttft predict``, in processes of their own, from start-up) are timed once each.
The issue's bar: pricing the whole trace takes at most 2 s of CPU beyond its replay. Usage::

    .venv/bin/python bench/ttft_speed.py [--trace FILE] [--repeat 3] [--gpu-tokens G] [--cpu-tokens C]
"""

import argparse
import inspect
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.replay_speed import DEFAULT_TRACE  # noqa: E402
from kvlab.api import replays  # noqa: E402
from kvlab.latency.hardware import HardwareModel, HardwareSettings  # noqa: E402
from kvlab.latency.pricing import percentiles, price_requests  # noqa: E402

BLOCK = 512
MODEL = ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json"
SYSTEM = "h100_sxm"
BAR_S = 2.0  # the issue's: CPU seconds of pricing beyond the replay


def replay_settings(trace, gpu, cpu):
    """``replay_parts``' settings: ``kvlab.replay``'s defaults, the rooms and the trace."""
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(replays.replay).parameters.items()
        if name in replays.replay_settings()
    }
    return {**defaults, "gpu_tokens": gpu, "cpu_tokens": cpu, "block_tokens": BLOCK, "trace": str(trace)}


def replay(trace, gpu, cpu):
    settings = replay_settings(trace, gpu, cpu)
    start = time.process_time()
    made, described, _, parts = replays.replay_parts("mooncake", True, None, None, settings)
    return time.process_time() - start, made, described, parts


def build(source, block_tokens):
    start = time.process_time()
    settings = HardwareSettings(model_config=str(MODEL), gpu_system=SYSTEM, latency_source=source)
    model = HardwareModel(settings, block_tokens)
    return time.process_time() - start, model


def price(model, parts, has_cpu):
    start = time.process_time()
    priced = price_requests(model, parts, has_cpu)
    figures = percentiles([row[-1] for row in priced])
    return time.process_time() - start, priced, figures


def command_cpu(argv):
    """CPU seconds (user + system) of ``python -m kvlab ARGV`` in a process of its own."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "kvlab", *argv], cwd=ROOT, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"kvlab {' '.join(argv)}: {done.stderr.strip()}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--gpu-tokens", type=int, default=1_000_000)
    parser.add_argument("--cpu-tokens", type=int, default=10_000_000)
    args = parser.parse_args(argv)

    runs = []
    shown = {}
    for _ in range(args.repeat):
        replay_s, made, described, parts = replay(args.trace, args.gpu_tokens, args.cpu_tokens)
        has_cpu = described["cpu_tokens"] > 0
        run = {"replay": replay_s}
        for source in ("database", "roofline"):
            run[source + " model"], model = build(source, made.block_tokens)
            run[source], priced, figures = price(model, parts, has_cpu)
            shown[source] = (model.source, len(priced), figures)
        runs.append(run)
    requests = shown["database"][1]
    print(
        f"{args.trace.name}: {requests:,} requests, GPU {args.gpu_tokens:,} tokens, CPU {args.cpu_tokens:,} tokens,"
        f" {BLOCK}-token blocks; {MODEL.parent.name} on {SYSTEM}, vllm; CPU seconds per run (run 1: the process cold)"
    )
    for source in ("database", "roofline"):
        name, _, figures = shown[source]
        assert name == source, (name, source)
        print(f"  {source}: TTFT p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms, mean {figures['mean_ms']} ms")
    print(
        f"{'run':>3} {'replay':>7} {'db model':>9} {'db price':>9} {'roof model':>11} {'roof price':>11}"
        f" {'db beyond':>10} {'÷ replay':>9} {'roof beyond':>12} {'÷ replay':>9}"
    )
    for number, run in enumerate(runs, 1):
        database = run["database model"] + run["database"]
        roof = run["roofline model"] + run["roofline"]
        print(
            f"{number:>3} {run['replay']:7.3f} {run['database model']:9.3f} {run['database']:9.3f}"
            f" {run['roofline model']:11.3f} {run['roofline']:11.3f} {database:10.3f} {database / run['replay']:9.2f}"
            f" {roof:12.3f} {roof / run['replay']:9.2f}"
        )
    best = {key: min(run[key] for run in runs) for key in runs[0]}
    print(
        f"pricing alone (best): database {best['database']:.3f} s ({best['database'] / requests * 1e6:.1f} us a"
        f" request, {best['database'] / best['replay']:.2f}x the best replay), roofline {best['roofline']:.3f} s"
        f" ({best['roofline'] / requests * 1e6:.1f} us, {best['roofline'] / best['replay']:.2f}x); the first"
        f" database model (compile + load) {runs[0]['database model']:.3f} s; the bar: {BAR_S} s beyond the replay"
    )

    rooms = ["--gpu-tokens", str(args.gpu_tokens), "--cpu-tokens", str(args.cpu_tokens), "--block-tokens", str(BLOCK)]
    workload = ["--workload", "mooncake", "--trace", str(args.trace), *rooms]
    hardware = ["--model-config", str(MODEL), "--gpu-system", SYSTEM]
    alone = command_cpu(["replay", *workload])
    commands = {source: command_cpu(["ttft", "predict", *workload, *hardware, "--latency-source", source])
                for source in ("database", "roofline")}  # fmt: skip
    print(f"whole commands (start-up included): kvlab replay {alone:.3f} s", end="")
    for source, seconds in commands.items():
        print(f"; ttft predict ({source}) {seconds:.3f} s, {seconds - alone:+.3f} s beyond", end="")
    print()


if __name__ == "__main__":
    main()
