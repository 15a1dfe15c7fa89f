"""What every router shares: :class:`Router`, what it sees of a fleet, and the least-used rule that breaks ties.

A router sees the fleet through these names, the clockless fleet's (:class:`kvlab.fleet.Fleet`) and the timed
one's (``kvlab/simulator/fleet.py``) alike: ``size`` (its instances), ``sent[i]`` (requests sent to instance ``i``
so far) and ``held(i, keys)`` (``(blocks, GPU blocks)`` of ``keys`` from the head that instance ``i`` would serve now:
its GPU tier's, continued on its CPU tier and a disk tier: what a router that reads the engines' KV events knows);
on a clock only, ``inflight[i]`` (requests sent to ``i`` that have not finished: what a router counts itself),
``load(i)`` (:class:`Load`) and ``now`` (seconds)."""

from dataclasses import dataclass

__all__ = ["Load", "Paste", "Router", "least_used"]


@dataclass(frozen=True)
class Load:
    """An instance's load as its engine reports it (vLLM's ``/metrics``: ``num_requests_waiting``,
    ``num_requests_running``, ``kv_cache_usage_perc``): requests waiting, requests running, and the share of its GPU
    pool that requests hold (blocks free but cached count as free, as vLLM's ``BlockPool.get_usage``)."""

    waiting: int
    running: int
    kv_usage: float


@dataclass(frozen=True)
class Paste:
    """A real router's setting for the rule a kvlab router models: ``router`` (the product and what to set),
    ``setting`` (its command line or configuration, to paste), ``source`` (the file it is read from) and ``note``
    (how it differs from the rule, where it does)."""

    router: str
    setting: str
    source: str
    note: str = ""

    def describe(self):
        return {"router": self.router, "setting": self.setting, "source": self.source, "note": self.note}


class Router:
    """Picks the instance that serves a request: :meth:`choose` returns its index, from the request's block keys and
    prompt tokens and what it sees of the fleet. A router with ``clock`` reads the load: only ``kvlab simulate``
    has it. A router that keeps its own record (of prefixes, of load) learns where each request went
    (:meth:`sent_to`) and, on a clock, when its first token and its last came back. ``settings`` is the router's
    settings (its module's ``Settings``, declared once), None for a router without."""

    name = ""
    clock = False
    Settings = None

    def __init__(self, settings=None):
        self.settings = settings

    def choose(self, keys, tokens, fleet):
        raise NotImplementedError

    def paste(self, block_tokens):
        """The real routers' settings for this rule (:class:`Paste`), with this router's settings, for engines of KV
        blocks of ``block_tokens``."""
        return []

    def sent_to(self, index, keys, tokens, number, fleet):
        """Request ``number`` (``keys``, ``tokens``) went to instance ``index``."""

    def first_token(self, index, number):
        """Request ``number``'s first token came back from instance ``index``."""

    def finished(self, index, number):
        """Request ``number`` finished on instance ``index``."""


def least_used(candidates, fleet):
    """Of ``candidates`` (instance indexes), the one sent the fewest requests so far, the first among equals."""
    return min(candidates, key=lambda index: (fleet.sent[index], index))
