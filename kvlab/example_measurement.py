"""Generate a SYNTHETIC example TTFT measurement in the lab's schema — not a measurement of anything.

The lab's real file (``/opt/fixtures/kvoffload/ttft.jsonl``, taken on 2026-10-03) is not
distributed, so the default pipeline summarizes this stand-in instead. It is made like this:

* the simulator (:class:`kvlab.kvsim.TwoTierCache`) decides each request's tier — GPU hit, CPU
  load or recompute — for every config (its GPU and CPU rooms) over the passes, in order, of
  ``docs`` documents of ``tokens`` tokens, one cache per config kept across passes;
* each request's TTFT is drawn, with a fixed seed, from a normal distribution around its tier's
  latency (the handout's figures: recompute ~576 ms, load from CPU ~48.6 ms, GPU hit ~30 ms) with
  a relative standard deviation ``jitter``; a recompute in a config with a CPU tier also pays
  ``store_overhead`` (write-through offload copies the new KV cache to CPU memory);
* ``total_ms`` adds a decode time drawn the same way.

Every line is ``{"config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms"}``, values in ms
rounded to 2 decimals. Same arguments, same bytes.
"""

import argparse
import json
import random
import sys

from kvlab.files import write_atomically
from kvlab.kvsim import TwoTierCache
from kvlab.scenario import OneLineParser

TIERS = ("gpu_hit", "cpu_load", "recompute")
LATENCIES = (*TIERS, "store_overhead", "decode")
TIER_OF_ACCESS = {"gpu": "gpu_hit", "cpu": "cpu_load", "miss": "recompute"}


def named_pair(text):
    """argparse type: ``NAME:VALUE``."""
    name, sep, value = text.partition(":")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME:VALUE, got {text!r}")
    return name, value


def tier_trace(gpu, cpu, docs, tokens, passes):
    """Yield ``(pass name, doc, tier)`` for one config, passes in order, through one two-tier cache."""
    cache = TwoTierCache(gpu, cpu)
    for name, order in passes:
        doc_order = range(docs) if order == "fwd" else range(docs - 1, -1, -1)
        for doc in doc_order:
            yield name, doc, TIER_OF_ACCESS[cache.access(doc, tokens)]


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


def main(argv=None):
    parser = OneLineParser(prog="example_measurement", description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=named_pair, action="append", required=True, metavar="NAME:GPU,CPU")
    parser.add_argument(
        "--pass", dest="passes", type=named_pair, action="append", required=True, metavar="NAME:fwd|rev"
    )
    parser.add_argument("--docs", type=int, required=True)
    parser.add_argument("--tokens", type=int, required=True)
    for latency in LATENCIES:
        parser.add_argument(f"--{latency.replace('_', '-')}-ms", type=float, required=True, help="mean latency, ms")
    parser.add_argument("--jitter", type=float, required=True, help="relative standard deviation of every draw")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    configs = []
    for name, rooms in args.config:
        gpu, _, cpu = rooms.partition(",")
        if not (gpu.isdigit() and cpu.isdigit()):
            parser.error(f"--config {name}: expected GPU,CPU rooms in tokens, got {rooms!r}")
        configs.append((name, int(gpu), int(cpu)))
    for name, order in args.passes:
        if order not in ("fwd", "rev"):
            parser.error(f"--pass {name}: order must be fwd or rev, got {order!r}")
    latency = {name: getattr(args, f"{name}_ms") for name in LATENCIES}
    records = generate(configs, args.passes, args.docs, args.tokens, latency, args.jitter, args.seed)
    write_atomically(args.out, "".join(json.dumps(record) + "\n" for record in records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
