"""llm-d's tiered prefix cache guide beside kvlab, in one run (issue 39, part 4): Qwen3-32B on 8 engines of TP 2 on
H100 (``gpu_memory_utilization`` 0.65: 9,271 blocks of 16 tokens each), with and without vLLM's native CPU offloading
of 41,000 blocks per engine; inference-perf's ``shared_prefix`` data (45 groups, 10 prompts a group, a 256-token
question each, 1,024 output tokens) at a constant concurrency of 45, with a system prompt of 30,000 tokens
("memory-bound": the groups' prefixes pass the 8 engines' HBM) and of 8,000 ("compute-bound": they fit). The
published figures (llm-d's ``guides/tiered-prefix-cache/cpu/README.md``, "Benchmark"): memory-bound, mean TTFT 9.0 s
and 6.7 s with offloading (-25%), mean E2E 37.8 s and 31.0 s (-18%), throughput 38,534.8 and 46,662.5 tokens/s
(+21.1%); compute-bound, mean TTFT 0.12 s and 0.13 s, throughput 23,389.6 and 23,032.6 tokens/s (no change).

kvlab runs ``--instances 8 --router llm-d`` (the guide's scheduler scores the queue, the KV usage and the prefixes its
approximate indexes saw, GPU and CPU, one each: here ``--llm-d-prefix-cache approximate`` with weights 1, 1, 1 and an
index of the GPU's and the CPU's rooms, or ``precise`` with ``--router-scheduler precise``), ``--clients 45``, each
client's request drawn at random (seeded) from the 450 prompts, ``--requests`` of them in all (the guide gives no
count: 900 by default, each prompt about twice). The throughput is input and output tokens per second, as the guide's
"Overall Throughput". The trace is written to ``--work``.

    .venv/bin/python bench/llm_d_tiered.py [--work DIR] [--requests N] [--router-scheduler approximate|precise]
"""

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "Qwen3-32B" / "config.json"
GROUPS, PROMPTS, QUESTION, OUTPUT, BLOCK, CLIENTS = 45, 10, 256, 1024, 16, 45
GPU_BLOCKS, CPU_BLOCKS, ENGINES = 9271, 41000, 8
PUBLISHED = {  # mean TTFT s, mean E2E s, overall tokens/s: without and with the CPU tier
    30000: ((9.0, 37.8, 38534.8), (6.7, 31.0, 46662.5)),
    8000: ((0.12, 18.4, 23389.6), (0.13, 18.6, 23032.6)),
}


def write_trace(path, system, requests, seed=0):
    """``requests`` prompts drawn from the groups' (a system prompt of ``system`` tokens, then a question), as a
    requests trace of 16-token hash blocks hashed per block (``--hash-chaining per-block``)."""
    draw = random.Random(seed)
    shared, full = system // BLOCK, -(-(system + QUESTION) // BLOCK)
    lines = []
    for _ in range(requests):
        group, prompt = draw.randrange(GROUPS), draw.randrange(PROMPTS)
        ids = [group * 10**5 + block for block in range(shared)]
        ids += [10**8 + (group * PROMPTS + prompt) * 10**4 + block for block in range(shared, full)]
        request = {"timestamp": 0, "input_length": system + QUESTION, "output_length": OUTPUT, "hash_ids": ids}
        lines.append(json.dumps(request))
    path.write_text("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=ROOT / "work" / "bench")
    parser.add_argument("--requests", type=int, default=900)
    parser.add_argument("--router-scheduler", choices=("approximate", "precise"), default="approximate")
    args = parser.parse_args()

    import kvlab

    args.work.mkdir(parents=True, exist_ok=True)
    router = {"router": "llm-d", "llm_d_prefix_cache": args.router_scheduler}
    print(f"{args.requests:,} requests, {ENGINES} x Qwen3-32B TP 2 on h100_sxm, {GPU_BLOCKS:,} GPU blocks of {BLOCK}")
    print(f"tokens each, {CLIENTS} clients, llm-d {args.router_scheduler}")
    print("| system prompt | CPU blocks | mean TTFT s (published) | mean E2E s (published) | tokens/s (published) |")
    print("|---:|---:|---:|---:|---:|")
    for system, published in PUBLISHED.items():
        trace = args.work / f"llm_d_tiered_{system}.jsonl"
        write_trace(trace, system, args.requests)
        for cpu_blocks, (ttft, e2e, throughput) in zip((0, CPU_BLOCKS), published, strict=True):
            settings = dict(router)
            if args.router_scheduler == "approximate":  # weights 1, 1, 1; the index as large as both tiers
                settings.update(llm_d_prefix_weight=1, llm_d_queue_weight=1, llm_d_kv_weight=1)
                settings["llm_d_lru_tokens"] = (GPU_BLOCKS + cpu_blocks) * BLOCK
            start = time.process_time()
            result = kvlab.simulate(
                workload="requests",
                trace=str(trace),
                hash_block_tokens=BLOCK,
                hash_chaining="per-block",
                block_tokens=BLOCK,
                model_config=str(MODEL),
                gpu_system="h100_sxm",
                tp=2,
                gpu_blocks=GPU_BLOCKS,
                cpu_blocks=cpu_blocks,
                instances=ENGINES,
                clients=CLIENTS,
                **settings,
            ).to_dict()
            seconds = time.process_time() - start
            tokens = result["requests_per_s"] * (system + QUESTION + OUTPUT)
            print(
                f"| {system:,} | {cpu_blocks:,} | {result['ttft_ms']['mean'] / 1000:.2f} ({ttft}) |"
                f" {result['e2e_ms']['mean'] / 1000:.1f} ({e2e}) | {tokens:,.0f} ({throughput:,}) |"
                f" hit {result['token_hit_ratio']}, {seconds:.1f} s of CPU",
                flush=True,
            )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
