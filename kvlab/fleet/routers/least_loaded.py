"""``least-loaded``: the instance with the fewest requests in flight that the router sent it and that have not
finished (llm-d's ``active-request-scorer`` alone under its max-score picker:
``pkg/epp/framework/plugins/scheduling/scorer/activerequest/active_request.go``, ``Score``; SGLang router's
shortest-queue branch of ``sgl-router/src/policies/cache_aware.rs``), among equals the one with the least of its GPU
pool held, then the one sent the fewest requests (llm-d breaks ties at random; kvlab's runs are the same every
time)."""

from kvlab.fleet.routers import products
from kvlab.fleet.routers.base import Router


class LeastLoaded(Router):
    name = "least-loaded"
    clock = True

    def choose(self, keys, tokens, fleet):
        return min(
            range(fleet.size),
            key=lambda index: (fleet.inflight[index], fleet.load(index).kv_usage, fleet.sent[index], index),
        )

    def paste(self, block_tokens):
        return [
            products.dynamo("--router-mode least-loaded"),
            products.llm_d([("active-request-scorer", 1, "")], "ties at random"),
            products.sglang(
                "--policy power_of_two", "the fewer in flight of two instances drawn at random: no exact equivalent"
            ),
        ]


ROUTER = LeastLoaded
