"""``prefix``: the instance holding the longest cached prefix of the request (its GPU tier's leading blocks,
continued on its CPU tier and a disk tier: a load beats a recompute), among equals the one holding more of it on the
GPU, then the one sent the fewest requests: the best-prefix routing of Mooncake's Conductor (FAST'25, Fig. 10) and
the precise prefix-cache scorer of llm-d's inference scheduler, without the load terms a clock gives them."""

from kvlab.fleet.routers import products
from kvlab.fleet.routers.base import Router, least_used


class Prefix(Router):
    name = "prefix"

    def choose(self, keys, tokens, fleet):
        lengths = [fleet.held(index, keys) for index in range(fleet.size)]
        longest = max(lengths)
        return least_used([index for index, length in enumerate(lengths) if length == longest], fleet)

    def paste(self, block_tokens):
        return [
            products.llm_d(
                [("precise-prefix-cache-scorer", 1, products.precise_prefix(block_tokens))],
                "the engines publish KV events (vLLM: --kv-events-config); ties at random",
            ),
            products.sglang(
                "--policy cache_aware --cache-threshold 0 --balance-abs-threshold 1000000000",
                "follows any prefix its own tree holds, never balances; no prefix: the smallest tree",
            ),
            products.dynamo(
                "--router-mode kv",
                "weighs the prefix held against the prefill queued: the longest prefix where the load is even",
            ),
            products.production_stack("--routing-logic prefixaware"),
        ]


ROUTER = Prefix
