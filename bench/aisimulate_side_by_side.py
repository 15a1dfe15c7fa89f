"""kvlab simulate beside NVIDIA AISimulate (DynoSim) on a Mooncake trace: prefix reuse, TTFT and speed, in one run.

Both simulate one aggregated vLLM worker serving Llama-3.1-8B-Instruct on an H100 SXM (TP 1) over the
trace's arrival times slowed by ``--speedup`` (0.2: five times apart), 64-token KV blocks, once with the
GPU pool only and once with a CPU (host) tier of ``--cpu-factor`` times the GPU pool in blocks
(``--cpu-only``: that run alone). AISimulate (``requirements-aisimulate.txt``, its own venv
``.venv-aisimulate``) runs as ``aisimulate predict --stack engine -c CONFIG --output-dir D
--capture-per-request --detail memory`` with the config this script writes (engine ``model:
models/Llama-3.1-8B-Instruct``, a local folder holding kvlab's config.json; ``hardware: h100_sxm``,
``backend: vllm``, prefix caching on, its scheduler defaults: 8,192 tokens and 256 sequences a step,
chunked prefill; the host tier as ``host_offload`` with its default links, 32 GB/s each way and no
first-byte latency; traffic ``{type: trace, format: mooncake, block_size: 512}`` on the trace
decompressed into the work folder, load ``trace_timestamps`` at ``--speedup``). The GPU pool is
AISimulate's own rule (90% of the GPU's memory less weights, activations and runtime overhead, in
64-token blocks: 6,765 here), read from its ``aisimulate.capacity.estimate_num_gpu_blocks`` and checked
against each run's memory detail, or ``--gpu-blocks N`` for both tools (AISimulate then gets ``capacity:
{type: fixed, blocks: N}``). kvlab runs as ``kvlab simulate --workload mooncake --trace T --model-config
models/Llama-3.1-8B-Instruct/config.json --gpu-system h100_sxm --engine vllm --tp 1 --block-tokens 64
--gpu-blocks N --cpu-blocks M --speedup S`` and prints one JSON object (``ttft_ms``, ``tpot_ms``,
``e2e_ms`` each ``{p50, p90, p99, mean}``; ``gpu_hit_tokens``, ``cpu_hit_tokens``, ``computed_tokens``,
``input_tokens``, ``requests_per_s``, ``preemptions``); where that command fails, its rows say so and
AISimulate's still print. kvlab's warm-up (``python -m kvlab.workflow.kernels``) runs first, so that no compile
is timed: numba's JIT cache serves kvlab's kernels.

AISimulate's figures come from its ``prediction.json``: reuse per tier is the sum over requests of
``first_admission_g1_reused_input_tokens`` (GPU; ``first_admission_reused_input_tokens`` without a host
tier) and ``first_admission_host_reused_input_tokens`` (CPU) over ``total_input_tokens``, the tier split
it attributes at each request's first admission (its ``prefix_cache_reused_ratio`` uses the last
admission's ``reused_input_tokens`` instead, which differs only for preempted requests); TTFT, TPOT and
E2E are its ``median_/p90_/p99_/mean_*_ms`` (TTFT from arrival, queueing included); preemptions are the
requests' ``readmission_count`` summed. CPU seconds are each command's user + system time, children
included (``RUSAGE_CHILDREN`` around it: AISimulate runs its replay in a child process), start-up
included, each tool's least over ``--repeat`` runs (3) interleaved with the other's, so that a loaded moment of
this shared machine slows neither alone; simulated requests per CPU second divide the requests by that. The
figures other than CPU are the same in every run of a tool (both are deterministic). Differences are kvlab less
AISimulate (points for reuse, % of AISimulate's TTFT); the speed ratio is kvlab's requests per CPU second
over AISimulate's.

With ``--instances N`` both run a fleet (issue 39): AISimulate's ``parallelism.replicas`` N on its engine stack
(round-robin), its host tier ``dp_rank_local`` or, with ``--cpu-scope shared``, ``cluster_shared`` of N times the
blocks (its shared links 80 GB/s each way); kvlab's ``--instances N --router round-robin --cpu-scope S`` (a shared
tier's read of another instance's block crosses its network link first: docs/fleet.md). The speedup is multiplied
by N, so each instance's load is the one instance's. With ``--router dynamo`` the fleet is behind Dynamo's KV router:
AISimulate's Dynamo stack (``aisimulate predict --stack dynamo``, ``router: {policy: kv_router}``, its defaults:
overlap credit 1, prefill load scale 1, temperature 0), which needs ai-dynamo 1.6.1 and an older AISimulate dev wheel
in a venv of their own (``requirements-aisimulate-dynamo.txt``, ``.venv-aisimulate-dynamo``), its GPU pool fixed at
the engine stack's rule (the Dynamo stack exports no memory detail) and its per-request rows in ``requests.jsonl``;
and ``kvlab simulate --router dynamo``. Dynamo's router breaks ties at random, so its figures change a little from
run to run; those of its least-CPU run are shown. Usage::

    .venv/bin/python bench/aisimulate_side_by_side.py [--aisimulate .venv-aisimulate/bin/aisimulate]
        [--speedup 0.2] [--cpu-factor 4] [--cpu-only] [--gpu-blocks N] [--trace FILE] [--keep DIR] [--repeat 3]
        [--instances N] [--cpu-scope private|shared] [--router round-robin|dynamo]
"""

import argparse
import gzip
import json
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
MODEL = ROOT / "models" / "Llama-3.1-8B-Instruct"
SYSTEM = "h100_sxm"
ENGINE = "vllm"
BLOCK = 64  # AISimulate's vLLM block size (aisimulate/config/engine.py resolve_block_size)
TRACE_BLOCK = 512  # the Mooncake traces' hash-ID block
LINK_GBPS = 32.0  # AISimulate's host_offload defaults, written out
NA = "n/a"


def timed(argv):
    """Run ARGV; return (completed process, CPU seconds of it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def default_gpu_blocks(aisimulate):
    """AISimulate's GPU pool for this worker, from its own capacity rule (in its venv's Python)."""
    code = (
        "from aisimulate.capacity import estimate_num_gpu_blocks as e;"
        f" print(e(backend_name={ENGINE!r}, system={SYSTEM!r}, model_path={str(MODEL)!r}, tp_size=1,"
        f" block_size={BLOCK}, max_num_batched_tokens=8192, max_num_sequences=256))"
    )
    done = subprocess.run([str(Path(aisimulate).parent / "python"), "-c", code], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"AISimulate's pool estimate failed: {done.stderr.strip()[-500:]}")
    return int(done.stdout.split()[-1])


def aisimulate_config(trace, speedup, gpu_blocks, cpu_blocks, fixed, instances=1, scope="private", router=None):
    """The prediction config, as JSON (a subset of YAML, which AISimulate reads): ``instances`` replicas
    (round-robin on its engine stack; with ``router``, the Dynamo stack's), their host tiers each its own
    (``dp_rank_local``) or one pool of all their blocks (``cluster_shared``)."""
    kv_cache = {"prefix_caching": True}
    if fixed:
        kv_cache["capacity"] = {"type": "fixed", "blocks": gpu_blocks}
    if cpu_blocks:
        kv_cache["host_offload"] = {
            "num_host_blocks": cpu_blocks * (instances if scope == "shared" else 1),
            "d2h_bandwidth_gbps": LINK_GBPS,
            "h2d_bandwidth_gbps": LINK_GBPS,
            "latency_to_first_byte_ms": 0.0,
        }
        if scope == "shared":
            kv_cache["host_offload"]["scope"] = "cluster_shared"
    worker = {"kv_cache": kv_cache}
    if instances > 1:
        worker["parallelism"] = {"replicas": instances}
    config = {
        "engine": {
            "model": str(MODEL),
            "hardware": SYSTEM,
            "backend": ENGINE,
            "workers": {"aggregated": worker},
        },
        "traffic": {
            "source": {"type": "trace", "paths": [str(trace)], "format": "mooncake", "block_size": TRACE_BLOCK},
            "load": {"type": "trace_timestamps", "speedup": speedup},
        },
    }
    if router is not None:
        config["router"] = {"policy": router}
    return config


def run_aisimulate(aisimulate, work, name, config, gpu_blocks, stack="engine"):
    path = work / f"{name}.yaml"
    path.write_text(json.dumps(config, indent=1) + "\n")
    out = work / name
    argv = [aisimulate, "predict", "--stack", stack, "-c", str(path), "--output-dir", str(out)]
    done, cpu = timed([*argv, "--overwrite", "--capture-per-request", "--detail", "memory", "--format", "json"])
    if done.returncode:
        raise SystemExit(f"aisimulate ({name}) failed: {(done.stderr or done.stdout).strip()[-1500:]}")
    report = json.loads((out / "prediction.json").read_text())
    pool = (report.get("memory_diagnostics") or {}).get("aggregated", {}).get("estimated_num_gpu_blocks")
    if pool is not None and pool != gpu_blocks:
        print(f"warning: aisimulate ({name}) sized its GPU pool at {pool} blocks, kvlab gets {gpu_blocks}")
    if "summary" in report:  # the Dynamo stack: the figures under "summary", the rows in requests.jsonl
        report = report["summary"]
        lines = (out / "requests.jsonl").read_text().splitlines()
        report["per_request"] = [json.loads(line) for line in lines if line.strip()]
    rows = report["per_request"]
    first = sum(row.get("first_admission_reused_input_tokens") or 0 for row in rows)
    gpu = sum(row.get("first_admission_g1_reused_input_tokens", 0) or 0 for row in rows)
    if not any("first_admission_reused_input_tokens" in row for row in rows):  # the Dynamo stack's rows
        first = sum((row["admission_history"] or [{}])[0].get("reused_input_tokens") or 0 for row in rows)
    cpu_hits = sum(row.get("first_admission_host_reused_input_tokens") or 0 for row in rows)
    if not any("first_admission_g1_reused_input_tokens" in row for row in rows):
        gpu = first  # no host tier: every reused token is a GPU hit
    quantiles = (("p50", "median"), ("p90", "p90"), ("p99", "p99"), ("mean", "mean"))
    figures = {
        metric + "_ms": {q: report[f"{prefix}_{metric}_ms"] for q, prefix in quantiles}
        for metric in ("ttft", "tpot", "e2e_latency")
    }
    figures["e2e_ms"] = figures.pop("e2e_latency_ms")
    return {
        **figures,
        "requests": report["completed_requests"],
        "input_tokens": report["total_input_tokens"],
        "gpu_hit_tokens": gpu,
        "cpu_hit_tokens": cpu_hits,
        "requests_per_s": report["request_throughput_rps"],
        "preemptions": sum(row.get("readmission_count") or 0 for row in rows),
        "cpu_s": cpu,
    }


def run_kvlab(kvlab, trace, speedup, gpu_blocks, cpu_blocks, instances=1, scope="private", router="round-robin"):
    """kvlab simulate's figures and CPU seconds."""
    argv = [kvlab, "simulate", "--workload", "mooncake", "--trace", str(trace)]
    if instances > 1:
        argv += ["--instances", str(instances), "--router", router, "--cpu-scope", scope]
    argv += ["--model-config", str(MODEL / "config.json"), "--gpu-system", SYSTEM, "--engine", ENGINE, "--tp", "1"]
    argv += ["--block-tokens", str(BLOCK), "--gpu-blocks", str(gpu_blocks), "--cpu-blocks", str(cpu_blocks)]
    argv += [
        "--link-gbps",
        str(LINK_GBPS),
        "--copy-us",
        "0",
    ]  # AISimulate's host links: bytes / 32 GB/s, no per-copy cost
    try:
        done, cpu = timed([*argv, "--speedup", str(speedup)])
    except OSError as error:
        return None, f"{kvlab}: {error}"
    if done.returncode:
        return None, f"kvlab simulate failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-600:]}"
    text = done.stdout.strip()
    try:
        figures = json.loads(text)
    except json.JSONDecodeError:
        lines = [line for line in text.splitlines() if line.startswith("{")]
        if not lines:
            return None, f"kvlab simulate printed no JSON object: {text[-300:]!r}"
        figures = json.loads(lines[-1])
    return {**figures, "cpu_s": cpu}, None


def reuse(figures, key):
    return 100.0 * figures[key] / figures["input_tokens"] if figures["input_tokens"] else 0.0


def per_cpu_s(figures):
    return figures["requests"] / figures["cpu_s"] if figures["cpu_s"] else float("inf")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aisimulate", default=str(ROOT / ".venv-aisimulate" / "bin" / "aisimulate"))
    parser.add_argument("--kvlab", default=str(ROOT / ".venv" / "bin" / "kvlab"))
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--speedup", type=float, default=0.2)
    parser.add_argument("--cpu-factor", type=float, default=4.0, help="CPU tier = this x the GPU pool, in blocks")
    parser.add_argument("--cpu-only", action="store_true", help="only the run with the CPU tier")
    parser.add_argument("--gpu-blocks", type=int, help="GPU pool for both (default: AISimulate's own rule)")
    parser.add_argument("--keep", type=Path, help="keep configs and AISimulate's outputs in this folder")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool, interleaved; its least CPU counts")
    parser.add_argument("--instances", type=int, default=1, help="replicas behind round-robin (the load times them)")
    parser.add_argument("--cpu-scope", choices=("private", "shared"), default="private", help="with --instances")
    parser.add_argument("--router", choices=("round-robin", "dynamo"), default="round-robin", help="with --instances")
    parser.add_argument(
        "--aisimulate-dynamo", default=str(ROOT / ".venv-aisimulate-dynamo" / "bin" / "aisimulate"), help="its stack"
    )
    args = parser.parse_args(argv)
    for path, requirements in (
        (args.aisimulate, "requirements-aisimulate.txt"),
        *([(args.aisimulate_dynamo, "requirements-aisimulate-dynamo.txt")] if args.router == "dynamo" else []),
    ):
        if not Path(path).exists():
            raise SystemExit(f"{path} not found: make bench-aisimulate installs it ({requirements})")
    dynamo = args.router == "dynamo"
    fixed = args.gpu_blocks is not None or dynamo  # the Dynamo stack exports no pool of its own: the engine stack's

    gpu_blocks = args.gpu_blocks or default_gpu_blocks(args.aisimulate)
    cpu_blocks = round(args.cpu_factor * gpu_blocks)
    work = Path(tempfile.mkdtemp(prefix="aisimulate-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    try:
        trace = work / args.trace.name.removesuffix(".gz")
        with (gzip.open if args.trace.suffix == ".gz" else open)(args.trace, "rb") as source, trace.open("wb") as out:
            shutil.copyfileobj(source, out)
        with trace.open("rb") as lines:
            trace_requests = sum(1 for line in lines if line.strip())
        python = str(Path(args.kvlab).parent / "python")
        # kvlab's warm-up (numba's JIT cache), so that no compile falls in a timed run
        subprocess.run([python, "-m", "kvlab.workflow.kernels"], cwd=ROOT, check=True)
        results = []
        for cpu in [cpu_blocks] if args.cpu_only else [0, cpu_blocks]:
            name = f"cpu{cpu}"
            speedup = args.speedup * args.instances  # each instance's load the one instance's
            fleet = args.instances, args.cpu_scope
            router = "kv_router" if dynamo else None
            config = aisimulate_config(trace, speedup, gpu_blocks, cpu, fixed, *fleet, router)
            theirs, ours, error = None, None, None
            for _ in range(args.repeat):  # interleaved; each tool's least CPU (a loaded moment slows either)
                if dynamo:
                    run = run_aisimulate(args.aisimulate_dynamo, work, name, config, gpu_blocks, "dynamo")
                else:
                    run = run_aisimulate(args.aisimulate, work, name, config, gpu_blocks)
                theirs = run if theirs is None or run["cpu_s"] < theirs["cpu_s"] else theirs
                run, error = run_kvlab(args.kvlab, args.trace, speedup, gpu_blocks, cpu, *fleet, args.router)
                if run is None:
                    break
                ours = run if ours is None or run["cpu_s"] < ours["cpu_s"] else ours
            if ours is not None:
                ours.setdefault("requests", trace_requests)  # its JSON has no count: every request of the trace
            results.append((cpu, theirs, ours, error))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    print(
        f"{args.trace.name}, speedup {args.speedup}: {MODEL.name} on {SYSTEM}, {ENGINE}, TP 1, {BLOCK}-token blocks,"
        f" GPU pool {gpu_blocks:,} blocks ({gpu_blocks * BLOCK:,} tokens), CPU tier {cpu_blocks:,} blocks"
        f" ({args.cpu_factor:g}x)"
        + (
            f"; {args.instances} instances, {args.router}, the speedup times them, CPU tiers {args.cpu_scope}"
            if args.instances > 1
            else ""
        )
        + "\n"
    )
    print("| CPU tier | tool | GPU reuse % | CPU reuse % | TTFT p50 ms | TTFT p99 ms | CPU s | requests / CPU s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    details = []
    for cpu, theirs, ours, error in results:
        tier = f"{cpu:,} blocks" if cpu else "none"
        rows = [("aisimulate", theirs)] + ([("kvlab", ours)] if ours else [])
        for tool, figures in rows:
            print(
                f"| {tier} | {tool} | {reuse(figures, 'gpu_hit_tokens'):.2f} | {reuse(figures, 'cpu_hit_tokens'):.2f}"
                f" | {figures['ttft_ms']['p50']:.1f} | {figures['ttft_ms']['p99']:.1f} | {figures['cpu_s']:.2f}"
                f" | {per_cpu_s(figures):,.0f} |"
            )
            details.append(
                f"{tier}, {tool}: {figures['requests']:,} requests, TTFT p90 {figures['ttft_ms']['p90']:.1f}"
                f" mean {figures['ttft_ms']['mean']:.1f} ms, TPOT p50 {figures['tpot_ms']['p50']:.2f} mean"
                f" {figures['tpot_ms']['mean']:.2f} ms, E2E p50 {figures['e2e_ms']['p50']:.1f} p99"
                f" {figures['e2e_ms']['p99']:.1f} ms, {figures['requests_per_s']:.3f} requests/s,"
                f" {figures['preemptions']} preemptions"
            )
        if ours is None:
            print(f"| {tier} | kvlab | {NA} | {NA} | {NA} | {NA} | {NA} | {NA} |")
            details.append(f"{tier}, kvlab: {error}")
            continue
        ttft = {q: 100.0 * (ours["ttft_ms"][q] / theirs["ttft_ms"][q] - 1.0) for q in ("p50", "p99")}
        speed = per_cpu_s(ours) / per_cpu_s(theirs)
        print(
            f"| {tier} | kvlab - aisimulate | {reuse(ours, 'gpu_hit_tokens') - reuse(theirs, 'gpu_hit_tokens'):+.2f} pt"
            f" | {reuse(ours, 'cpu_hit_tokens') - reuse(theirs, 'cpu_hit_tokens'):+.2f} pt | {ttft['p50']:+.1f}%"
            f" | {ttft['p99']:+.1f}% | {ours['cpu_s'] - theirs['cpu_s']:+.2f} | {speed:.2f}x |"
        )
    print()
    for line in details:
        print(line)


if __name__ == "__main__":
    main()
