"""Many engine instances behind a router, without a clock (issue 39, part 1): each request goes to the instance the
router picks (``kvlab/fleet/routers/``) and is served by that instance's tiers (``kvlab/cache/``: the same rules as
one instance's). Each instance has its own GPU tier; the CPU tier is each instance's own (``private``) or one that
all of them read and write (``shared``): one copy of a block whoever stored it, with the room of the whole pool, the
instances' rooms added up, as aisimulate counts its ``cluster_shared`` host tier and as Mooncake Store and LMCache's
remote backend hold one copy for every instance."""

from kvlab.cache.interface import CacheSettings
from kvlab.fleet.routers import CLOCKLESS, ROUTERS
from kvlab.loop import COUNTERS, DISK_COUNTERS, figures
from kvlab.util.settings import setting
from kvlab.workloads import whole_number

__all__ = [
    "CLOCKLESS",
    "CPU_SCOPES",
    "FLEET_SETTINGS",
    "Fleet",
    "ROUTERS",
    "build",
    "cpu_scope_setting",
    "disk_scope_setting",
    "gpu_served",
    "instances_setting",
    "router_setting",
]

CPU_SCOPES = ("private", "shared")
FLEET_SETTINGS = ("instances", "router", "cpu_scope")  # a fleet's settings, each declared below, in build()'s order
# and kvlab replay's disk_scope (kvlab plan and kvlab mrc model no fleet's disk tier)
MAX_INSTANCES = 1024


def instances_setting(group=None):
    """``--instances``, declared once for every command that takes it."""
    help_text = "engine instances, each with the rooms above (default 1)"
    return setting(1, convert=whole_number(1, MAX_INSTANCES), group=group, help=help_text)


def router_setting(group=None, clock=False):
    """``--router``, declared once: the registry's names (``kvlab/fleet/routers/``); with ``clock`` (``kvlab
    simulate``) those that read the instances' load too."""
    names = tuple(ROUTERS) if clock else CLOCKLESS
    help_text = (
        "which instance serves a request: round-robin (default), session (its first block's) or prefix (the"
        " longest cached prefix, ties to the least used)"
    )
    if clock:
        help_text += (
            "; on the clock, least-loaded (the fewest requests in flight), llm-d (its scheduler's scorers), dynamo"
            " (Dynamo's KV router) or sglang (SGLang router's cache_aware)"
        )
    return setting("round-robin", choices=names, group=group, help=help_text)


def cpu_scope_setting(group=None):
    """``--cpu-scope``, declared once."""
    help_text = "the CPU tier each instance's own (private, default) or one all share, of all their rooms (shared)"
    return setting("private", choices=CPU_SCOPES, group=group, help=help_text)


def disk_scope_setting(group=None):
    """``--disk-scope``, declared once: as ``--cpu-scope``, for the disk (or remote) tier below the CPU."""
    help_text = "the disk tier each instance's own (private, default) or one all share, of all their rooms (shared)"
    return setting("private", choices=CPU_SCOPES, group=group, help=help_text)


class Fleet:
    """``caches`` (one :class:`kvlab.cache.prefix.PrefixCache` per instance) behind ``router``: a
    :class:`kvlab.cache.interface.Cache` to the replay, which also counts what each instance served."""

    offline = False

    def __init__(self, caches, router):
        self.caches = caches
        self.router = router
        self.block_tokens = caches[0].block_tokens
        self.has_disk = getattr(caches[0], "has_disk", False)  # each instance a kvlab.cache.tiers.Tiered
        self.chosen = []  # each request's instance, in order (the per-request table's column)
        width = len(COUNTERS) + self.has_disk * len(DISK_COUNTERS)
        self.counts = [[0] * width for _ in caches]  # per instance, a replay's counters (requests first)
        self.sent = [0] * len(caches)  # requests sent to each instance (kvlab/fleet/routers/base.py)

    def foresee(self, columns):
        """Nothing to learn: a fleet's tiers are online."""

    @property
    def size(self):
        return len(self.caches)

    def held(self, index, keys):
        """``(blocks, GPU blocks)`` of ``keys``, from the head, that instance ``index`` would serve (its tiers in
        order: GPU, CPU, a disk), without touching them."""
        ends = [0]
        for tier in self.caches[index].tiers():
            ends.append(tier.prefix_end(keys, ends[-1]))
        return ends[-1], ends[1]

    def serve(self, keys, tokens):
        index = self.router.choose(keys, tokens, self)
        self.router.sent_to(index, keys, tokens, len(self.chosen), self)
        served = self.caches[index].serve(keys, tokens)
        self.chosen.append(index)
        self.sent[index] += 1
        row = self.counts[index]
        for column, value in enumerate((1, len(keys), tokens, *served)):
            row[column] += value
        return served

    def instances(self):
        """Each instance's figures, as a replay reports the whole (:func:`kvlab.loop.figures`)."""
        return [{"instance": index, **figures(counts)} for index, counts in enumerate(self.counts)]


def build(settings, instances, router, cpu_scope, disk_scope="private"):
    """The fleet of ``instances`` caches of ``settings`` (a :class:`CacheSettings`, each instance's rooms) behind the
    router named ``router``; with ``cpu_scope`` (``disk_scope``) ``shared``, one CPU (disk) tier of ``instances``
    times the room for all."""
    rooms = {"cpu_tokens": settings.cpu_tokens * instances, "disk_tokens": settings.disk_tokens * instances}
    pool = CacheSettings(**{**settings.describe(), **rooms}).build()  # the shared tiers' rooms: the pool's
    cpu = pool.tiers()[1] if cpu_scope == "shared" else None
    disk = pool.disk if disk_scope == "shared" and settings.disk_tokens else None
    caches = [settings.build(cpu_tier=cpu, disk_tier=disk) for _ in range(instances)]
    return Fleet(caches, ROUTERS[router]())


def gpu_served(workload, settings, instances, router):
    """Per request of ``workload``, in order, ``(GPU blocks, 0, GPU tokens, 0)`` its instance's GPU tier served in a
    fleet of ``instances`` GPU tiers of ``settings`` (rooms per instance) behind ``router``, without a CPU tier: what
    a shared CPU tier's curve starts each request from (``kvlab/curves/mrc.py``), for a router that does not read
    the CPU tier."""
    import numpy as np

    from kvlab.loop import replay, rows_of

    gpu_only = CacheSettings(**{**settings.describe(), "cpu_tokens": 0})
    parts = []
    replay(workload, build(gpu_only, instances, router, "private"), parts)
    names = ("gpu_hit_blocks", "cpu_hit_blocks", "gpu_hit_tokens", "cpu_hit_tokens")
    return np.array(list(rows_of(parts, names)), dtype=np.int64).reshape(-1, 4)
