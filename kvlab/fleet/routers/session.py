"""``session``: a request goes where its session goes, a session known by its first block (a conversation's or a
document's requests all start with it), as sticky-session routing does: the same first block, the same instance."""

import zlib

from kvlab.fleet.routers import products
from kvlab.fleet.routers.base import Router, least_used


def session_of(keys):
    """A number of the request's first block, spread over its bits and the same in every run (Python's ``hash`` of a
    text is not; a workload's block numbers may all share a factor with the instances)."""
    return zlib.crc32(repr(keys[0]).encode("utf-8"))


class Session(Router):
    name = "session"

    def choose(self, keys, tokens, fleet):
        if not keys:
            return least_used(range(fleet.size), fleet)
        return session_of(keys) % fleet.size

    def paste(self, block_tokens):
        key = "each request sends its conversation's id in the header named; kvlab keys a session by its first block"
        return [
            products.dynamo(
                "--router-session-affinity-ttl-secs 3600", f"header X-Dynamo-Session-ID: {key} (Dynamo's newest)"
            ),
            products.sglang(
                "--policy consistent_hashing", f"header X-SMG-Routing-Key: {key} (smg's newest; older: --policy manual)"
            ),
            products.production_stack(
                "--routing-logic session --session-key x-session-id", f"header x-session-id: {key}"
            ),
            products.llm_d(
                [("session-affinity-scorer", 1, "")],
                "soft: the scheduler hands each client an x-session-token header that names its pod, and the client"
                " sends it back",
            ),
        ]


ROUTER = Session
