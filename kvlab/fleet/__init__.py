"""Many engine instances behind a router, without a clock (issue 39, part 1): each request goes to the instance the
router picks (``kvlab/fleet/routers/``) and is served by that instance's tiers (``kvlab/cache/``: the same rules as
one instance's). Each instance has its own GPU tier; the CPU tier is each instance's own (``private``) or one that
all of them read and write (``shared``): one copy of a block whoever stored it, with the room of the whole pool, the
instances' rooms added up, as aisimulate counts its ``cluster_shared`` host tier and as Mooncake Store and LMCache's
remote backend hold one copy for every instance."""

from kvlab.cache.interface import CacheSettings
from kvlab.fleet.routers import ROUTERS
from kvlab.loop import COUNTERS, figures

__all__ = ["CPU_SCOPES", "Fleet", "ROUTERS", "build"]

CPU_SCOPES = ("private", "shared")


class Fleet:
    """``caches`` (one :class:`kvlab.cache.prefix.PrefixCache` per instance) behind ``router``: a
    :class:`kvlab.cache.interface.Cache` to the replay, which also counts what each instance served."""

    offline = False

    def __init__(self, caches, router):
        self.caches = caches
        self.router = router
        self.block_tokens = caches[0].block_tokens
        self.routed = [0] * len(caches)  # requests per instance so far (the routers' load, without a clock)
        self.counts = [[0] * len(COUNTERS) for _ in caches]

    def foresee(self, columns):
        """Nothing to learn: a fleet's tiers are online."""

    def serve(self, keys, tokens):
        index = self.router.choose(keys, self)
        served = self.caches[index].serve(keys, tokens)
        self.routed[index] += 1
        row = self.counts[index]
        for column, value in enumerate((1, len(keys), tokens, *served[:4])):
            row[column] += value
        return served

    def instances(self):
        """Each instance's figures, as a replay reports the whole (:func:`kvlab.loop.figures`)."""
        return [{"instance": index, **figures(counts)} for index, counts in enumerate(self.counts)]


def build(settings, instances, router, cpu_scope):
    """The fleet of ``instances`` caches of ``settings`` (a :class:`CacheSettings`, each instance's rooms) behind the
    router named ``router``; with ``cpu_scope`` ``shared`` one CPU tier of ``instances`` times the room for all."""
    shared = None
    if cpu_scope == "shared":
        pool = CacheSettings(**{**settings.describe(), "cpu_tokens": settings.cpu_tokens * instances})
        shared = pool.build().cpu
    caches = [settings.build(cpu_tier=shared) for _ in range(instances)]
    return Fleet(caches, ROUTERS[router]())
