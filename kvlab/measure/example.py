"""Generate a SYNTHETIC example TTFT measurement in the lab's schema — not a measurement of anything.

The lab's real file (``/opt/fixtures/kvoffload/ttft.jsonl``, taken on 2026-10-03) is not
distributed, so the default pipeline summarizes this stand-in instead. It is made like this:

* the lab's design decides each request's tier — GPU hit, CPU load or recompute — for every config
  (its GPU and CPU rooms) over the passes, in order, of ``docs`` documents of ``tokens`` tokens, one
  cache per config kept across passes: write-through with LRU tiers, a document one block (the lab
  simulator's rules, ``kvlab/loop.py``'s :class:`DocumentReads` through the reference engine);
* each request's TTFT is drawn, with a fixed seed, from a normal distribution around its tier's
  latency (the handout's figures: recompute ~576 ms, load from CPU ~48.6 ms, GPU hit ~30 ms) with
  a relative standard deviation ``jitter``; a recompute in a config with a CPU tier also pays
  ``store_overhead`` (write-through offload copies the new KV cache to CPU memory);
* ``total_ms`` adds a decode time drawn the same way.

Every line is ``{"config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms"}``, values in ms
rounded to 2 decimals. Same arguments, same bytes.
"""

import json
import random

__all__ = ["LATENCIES", "generate", "jsonl"]

TIERS = ("gpu_hit", "cpu_load", "recompute")
LATENCIES = (*TIERS, "store_overhead", "decode")
TIER_OF_ACCESS = {"gpu": "gpu_hit", "cpu": "cpu_load", "miss": "recompute"}


def tier_trace(gpu_tokens, cpu_tokens, docs, tokens, passes):
    """Yield ``(pass name, doc, tier)`` for one config, passes in order, through one two-tier cache."""
    from kvlab.cache.interface import CacheSettings
    from kvlab.loop import DocumentReads, tiers

    reads = [(name, doc) for name, order in passes for doc in (range(docs) if order == "fwd" else range(docs)[::-1])]
    workload = DocumentReads((doc, tokens) for _, doc in reads)
    rooms = {"gpu_tokens": gpu_tokens, "cpu_tokens": cpu_tokens, "block_tokens": workload.block_tokens}
    cache = CacheSettings(**rooms, partial_blocks="keep").build()
    for (name, doc), tier in zip(reads, tiers(workload, cache), strict=True):
        yield name, doc, TIER_OF_ACCESS[tier]


def generate(configs, passes, docs, tokens, latency, jitter, seed):
    """Return the measurement's records, configs in the given order, then passes, then reading order.

    ``configs``: ``[(name, gpu_tokens, cpu_tokens)]``; ``passes``: ``[(name, "fwd" | "rev")]``;
    ``latency``: mean ms of each of :data:`LATENCIES`.
    """
    rng = random.Random(seed)

    def draw(mean):
        return round(max(0.0, rng.gauss(mean, jitter * mean)), 2)

    records = []
    for config, gpu, cpu in configs:
        for pass_name, doc, tier in tier_trace(gpu, cpu, docs, tokens, passes):
            mean = latency[tier] + (latency["store_overhead"] if tier == "recompute" and cpu > 0 else 0.0)
            ttft = draw(mean)
            records.append(
                {
                    "config": config,
                    "pass": pass_name,
                    "doc": doc,
                    "doc_tokens": tokens,
                    "ttft_ms": ttft,
                    "total_ms": round(ttft + draw(latency["decode"]), 2),
                }
            )
    return records


def jsonl(records):
    """The records as JSON lines, the measurement's file format."""
    return "".join(json.dumps(record) + "\n" for record in records)
