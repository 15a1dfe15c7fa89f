"""``prefix``: the instance holding the longest cached prefix of the request (its GPU tier's leading blocks,
continued on its CPU tier and a disk tier: a load beats a recompute), among equals the one holding more of it on the
GPU, then the one sent the fewest requests: the best-prefix routing of Mooncake's Conductor (FAST'25, Fig. 10) and
the precise prefix-cache scorer of llm-d's inference scheduler, without the load terms a clock gives them."""

from kvlab.fleet.routers.base import Router, least_used


def held(cache, keys):
    """``(blocks, GPU blocks)`` of ``keys``, from the head, that ``cache`` would serve (its tiers in order: GPU, CPU,
    a disk), without touching them."""
    ends = [0]
    for tier in cache.tiers():
        ends.append(tier.prefix_end(keys, ends[-1]))
    return ends[-1], ends[1]


class Prefix(Router):
    name = "prefix"

    def choose(self, keys, fleet):
        lengths = [held(cache, keys) for cache in fleet.caches]
        longest = max(lengths)
        return least_used([index for index, length in enumerate(lengths) if length == longest], fleet)


ROUTER = Prefix
