"""llm-d's precise prefix-cache routing benchmark beside kvlab, in one run (issue 39, part 4): Qwen3-32B, 8 instances
of TP 2 on H100 with 307,328 KV tokens each; inference-perf's ``shared_prefix`` data (150 groups of a 6,000-token
system prompt, 5 prompts a group with a 1,200-token question each, 1,000 output tokens, ``ignore_eos``) under its
Poisson ladder (a warm-up at 15 QPS, then 3 to 60 QPS); four schedulers. The published run (llm-d's benchmark report
"X-70R-6kSys", summary across QPS): output tokens/s 8,730 precise, 6,944 estimated, 4,429 random, 4,266 load; TTFT
p90 0.542 s, 31.08 s, 92.55 s, 94.87 s.

The schedulers as kvlab runs them: ``precise`` is ``--router llm-d --llm-d-prefix-cache precise`` (weights 3, 2, 2);
``estimated`` is ``--llm-d-prefix-cache approximate`` with weights 1, 1, 1 and the report's index room
(``lruCapacityPerServer`` 31,250 blocks of 64 characters, 16 tokens each: 500,000 tokens); ``load`` has the prefix
weight 0 and weights 1, 1; ``random`` is ``round-robin`` (the random picker spreads the same on average). The trace
is written once (seeded) to ``--work``.

    .venv/bin/python bench/llm_d_precise.py [--work DIR] [--scale X] [--output N] [--schedulers precise,...]
"""

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "Qwen3-32B" / "config.json"
GROUPS, PROMPTS, SYSTEM, QUESTION, OUTPUT, BLOCK = 150, 5, 6000, 1200, 1000, 64
WARMUP = [(15, 50)]
LADDER = [(3, 20), (10, 20), (15, 20), (20, 38), (22, 34), (25, 30), (30, 25), (35, 21), (40, 38), (43, 36)]
LADDER += [(46, 33), (49, 30), (52, 29), (55, 27), (57, 26), (60, 25)]
PUBLISHED = {  # output tokens/s, TTFT p90 s, TTFT mean s: the report's summary across QPS
    "precise": (8730.0, 0.542, 0.298),
    "estimated": (6944.4, 31.083, 13.316),
    "random": (4428.7, 92.551, 45.281),
    "load": (4266.4, 94.865, 46.987),
}
SCHEDULERS = {
    "precise": {"router": "llm-d", "llm_d_prefix_cache": "precise"},
    "estimated": {
        "router": "llm-d",
        "llm_d_prefix_weight": 1,
        "llm_d_queue_weight": 1,
        "llm_d_kv_weight": 1,
        "llm_d_lru_tokens": 31250 * 16,
    },
    "random": {"router": "round-robin"},
    "load": {"router": "llm-d", "llm_d_prefix_weight": 0, "llm_d_queue_weight": 1, "llm_d_kv_weight": 1},
}


def write_trace(path, scale, output=OUTPUT, seed=0):
    """The shared_prefix requests under the Poisson ladder (each stage's rate times ``scale``), as a requests trace
    of 64-token hash blocks hashed per block (``--hash-chaining per-block``)."""
    draw = random.Random(seed)
    full = -(-(SYSTEM + QUESTION) // BLOCK)
    shared = SYSTEM // BLOCK  # the system prompt's whole blocks; the block it ends in holds the question's head too
    lines, start = [], 0.0
    for rate, duration in WARMUP + LADDER:
        now = start + draw.expovariate(rate * scale)
        while now < start + duration:
            group, prompt = draw.randrange(GROUPS), draw.randrange(PROMPTS)
            ids = [group * 1000 + block for block in range(shared)]
            ids += [10**6 + (group * PROMPTS + prompt) * 1000 + block for block in range(shared, full)]
            request = {"timestamp": round(now, 6), "input_length": SYSTEM + QUESTION, "output_length": output}
            lines.append(json.dumps({**request, "hash_ids": ids}))
            now += draw.expovariate(rate * scale)
        start += duration
    path.write_text("\n".join(lines) + "\n")
    return len(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=ROOT / "work" / "bench")
    parser.add_argument("--scale", type=float, default=1.0, help="every stage's rate times this")
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS))
    parser.add_argument("--output", type=int, default=OUTPUT, help="each request's output tokens (the config's 1,000)")
    args = parser.parse_args()

    import kvlab

    args.work.mkdir(parents=True, exist_ok=True)
    trace = args.work / "llm_d_shared_prefix.jsonl"
    requests = write_trace(trace, args.scale, args.output)
    common = {
        "workload": "requests",
        "trace": str(trace),
        "hash_block_tokens": BLOCK,
        "hash_chaining": "per-block",
        "block_tokens": BLOCK,
        "model_config": str(MODEL),
        "gpu_system": "h100_sxm",
        "tp": 2,
        "gpu_tokens": 307_328,
        "instances": 8,
    }
    shape = f"{requests:,} requests of {args.output:,} output tokens"
    print(f"{shape}, 8 x Qwen3-32B TP 2 on h100_sxm, 307,328 KV tokens each")
    print(
        "| scheduler | output tokens/s (published) | TTFT p90 s (published) | TTFT mean s (published) | hit | CPU s |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.schedulers.split(","):
        start = time.process_time()
        result = kvlab.simulate(**common, **SCHEDULERS[name]).to_dict()
        seconds = time.process_time() - start
        throughput, p90, mean = PUBLISHED[name]
        found = (result["output_tokens_per_s"], result["ttft_ms"]["p90"] / 1000, result["ttft_ms"]["mean"] / 1000)
        print(
            f"| {name} | {found[0]:,.0f} ({throughput:,.0f}) | {found[1]:.3f} ({p90}) | {found[2]:.3f} ({mean}) |"
            f" {result['token_hit_ratio']} | {seconds:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
