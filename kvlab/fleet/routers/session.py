"""``session``: a request goes where its session goes, a session known by its first block (a conversation's or a
document's requests all start with it), as sticky-session routing does: the same first block, the same instance."""

import zlib

from kvlab.fleet.routers.base import Router, least_used


def session_of(keys):
    """A number of the request's first block, spread over its bits and the same in every run (Python's ``hash`` of a
    text is not; a workload's block numbers may all share a factor with the instances)."""
    return zlib.crc32(repr(keys[0]).encode("utf-8"))


class Session(Router):
    name = "session"

    def choose(self, keys, fleet):
        if not keys:
            return least_used(range(len(fleet.caches)), fleet)
        return session_of(keys) % len(fleet.caches)


ROUTER = Session
