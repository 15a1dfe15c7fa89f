"""Mooncake's SSD-offload benchmark replayed by kvlab.

The benchmark: kvcache-ai/Mooncake docs/source/performance/mooncake/ssd-offload-benchmark-results.md. Replayed as it
ran: SGLang's bench_multiturn with its flags, Qwen3-8B on one A100-40GB, HiCache's host pool at --hicache-ratio 2, an
80 GB Mooncake pool as the third tier, and with SSD offload below it.

The rooms, in tokens of Qwen3-8B's KV (147,456 bytes each; docs/tiers.md says where each comes from):

* GPU: 124,480 tokens, SGLang's pool on a 40 GB A100 at TP 1 (mem_fraction_static 0.833 from its
  ``_handle_gpu_memory_settings``: chunked prefill 4,096, CUDA graphs up to 32; ``profile_max_num_token`` with
  38.9 GiB free before the weights' 15.26 GiB). aiconfigurator-core's a100_sxm (80 GB) prices the kernels.
* Host: 2 x 124,480 + one page = 249,024 tokens (``HostKVCache``: ratio x the device pool), inclusive of the GPU's.
* Mooncake: ``--global_segment_size=80GB`` is 80 x 2**30 bytes (Mooncake's ``string_to_byte_size``): 582,542 tokens;
  its master evicts from 90% full (``eviction_high_watermark_ratio``), so 72 GiB (524,288 tokens) is shown as well.
* SSD below it: up to MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES's 2 TiB more: more than the whole workload.

Prints the per-round tables beside the published figure's; docs/tiers.md holds the same, and
tests/test_disk_tier.py checks it against this script's output. Run: ``.venv/bin/python bench/mooncake_ssd.py``.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvlab import api  # noqa: E402

WORKLOAD = {
    "source": "bench_multiturn",
    "num_clients": 20,
    "num_rounds": 10,
    "request_length": 4096,
    "output_length": 1,
    "max_parallel": 4,
    "request_rate": 16,
    "ready_queue_policy": "random",
    "enable_round_barrier": True,
}
MODEL = ROOT / "models" / "Qwen3-8B" / "config.json"
GPU_TOKENS = 124_480
HOST_GIB = "34.1982421875"  # 249,024 tokens x 147,456 bytes
GIB_80 = 80  # --global_segment_size=80GB: GiB
GIB_72 = 72  # its 90% eviction watermark
SSD_GIB = 80 + 2048  # the pool and the SSD tier's 2 TiB limit
CONFIGS = {  # name -> (CPU GiB, disk GiB, disk medium)
    "GPU only": ("0", None, None),
    "+ L2": (HOST_GIB, None, None),
    "+ Mooncake": (HOST_GIB, GIB_80, "rdma"),
    "+ Mooncake (72 GiB)": (HOST_GIB, GIB_72, "rdma"),
    "+ Mooncake + SSD": (HOST_GIB, SSD_GIB, "rdma"),
}
# The pool and its SSD are one tier here (the SSD never fills, so together they hold every block written, as one
# unbounded LRU tier does); its reads are priced as the pool's (RDMA), and, as a bound, every one as an NVMe read.
SSD_BOUND = "+ Mooncake + SSD, every L3 read from NVMe"
PRICED = {SSD_BOUND: (HOST_GIB, SSD_GIB, "nvme")}
# The published per-round hit rates (%), read off the doc's figure ssd_offload_per_turn.png (about +-1 point; the
# text states 83 -> 36 for + Mooncake from round 6 to 7, and above 84 through round 8 with SSD). Rounds 0..8: the
# figure shows nine of the ten.
PUBLISHED = {
    "GPU only": [0, 30, 15, 15, 4, 11, 9, 4, 4],
    "+ L2": [0, 50, 67, 47, 29, 25, 9, 13, 16],
    "+ Mooncake": [0, 50, 67, 75, 80, 83, 81, 36, 21],
    "+ Mooncake + SSD": [0, 50, 67, 75, 80, 83, 86, 88, 84],
}
# Average TTFT (s) the text states: + Mooncake 6 s -> 16 s from round 5/6 to 7; with SSD 7.4 s in round 7, 9.4 s in 8.
PUBLISHED_TTFT = {"+ Mooncake": {5: 6.0, 7: 16.0}, "+ Mooncake + SSD": {7: 7.4, 8: 9.4}}


def plans():
    """Each configuration's plan (kvlab.plan): per-round tiers and the TTFT priced per request."""
    found = {}
    for name, (cpu, disk, medium) in {**CONFIGS, **PRICED}.items():
        extra = {"disk_gib": disk, "disk_medium": medium} if disk is not None else {}
        found[name] = api.plan(
            workload=WORKLOAD,
            model_config=MODEL,
            gpu_tokens=GPU_TOKENS,
            cpu_gib=cpu,
            chunk_tokens=64,
            engine="sglang",
            gpu_system="a100_sxm",
            **extra,
        ).to_dict()
    return found


def hit_percent(plan):
    return [round(100 * row["token_hit_ratio"], 1) for row in plan["rounds"]]


def ttft_seconds(plan):
    return [round(row["mean_ms"] / 1000, 2) for row in plan["ttft"]["rounds"]]


def tables(found):
    """The two markdown tables: hit ratio per round, and the mean TTFT per round, kvlab beside the published."""
    rounds = len(next(iter(found.values()))["rounds"])
    head = "| round | " + " | ".join(f"{name}: published / kvlab" for name in CONFIGS) + " |"
    lines = [head, "|---:|" + "---:|" * len(CONFIGS)]
    for index in range(rounds):
        cells = []
        for name in CONFIGS:
            plan = found[name]
            published = PUBLISHED.get(name)
            shown = published[index] if published and index < len(published) else "—"
            cells.append(f"{shown} / {hit_percent(plan)[index]}")
        lines.append(f"| {index} | " + " | ".join(cells) + " |")
    priced = ("+ Mooncake", "+ Mooncake + SSD", SSD_BOUND)
    lines += ["", "| round | " + " | ".join(f"{name}: published / kvlab (s)" for name in priced) + " |"]
    lines.append("|---:|" + "---:|" * len(priced))
    for index in range(rounds):
        cells = []
        for name in priced:
            shown = PUBLISHED_TTFT.get(name, {}).get(index, "—")
            cells.append(f"{shown} / {ttft_seconds(found[name])[index]}")
        lines.append(f"| {index} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    sys.stdout.write(tables(plans()))


if __name__ == "__main__":
    main()
