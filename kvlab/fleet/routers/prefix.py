"""``prefix``: the instance holding the longest cached prefix of the request (its GPU tier's leading blocks,
continued on its CPU tier: a load beats a recompute), among equals the one holding more of it on the GPU, then the
one sent the fewest requests: the best-prefix routing of Mooncake's Conductor (FAST'25, Fig. 10) and the precise
prefix-cache scorer of llm-d's inference scheduler, without the load terms a clock gives them."""

from kvlab.fleet.routers.base import Router, least_used


def held(cache, keys):
    """``(blocks, GPU blocks)`` of ``keys``, from the head, that ``cache`` would serve (GPU, then CPU), without
    touching its tiers."""
    gpu_end = cache.gpu.prefix_end(keys)
    return cache.cpu.prefix_end(keys, gpu_end), gpu_end


class Prefix(Router):
    name = "prefix"

    def choose(self, keys, fleet):
        lengths = [held(cache, keys) for cache in fleet.caches]
        longest = max(lengths)
        return least_used([index for index, length in enumerate(lengths) if length == longest], fleet)


ROUTER = Prefix
