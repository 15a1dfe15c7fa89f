"""How the CPU tier is filled: the offload designs of real servers, by name.

* ``write-through`` (LMCache, vLLM's native offload): every block the GPU did not serve is also
  accessed on the CPU (a load refreshed there, a computed block stored there): the CPU keeps a
  copy of what the GPU has (inclusive). The lab's rule. Two switches for LMCache's behaviour:
  ``touch_cpu_on_gpu_hit`` (its lookup touches the CPU copy on every request, GPU hits included)
  and ``re_store_on_gpu_hit`` (a GPU-hit block whose CPU copy was evicted is stored again).
* ``write-back`` (SGLang HiCache's write_back): the CPU is an exclusive victim tier. After each
  request it receives what left the GPU (evicted, or too large to take) in eviction order; a CPU
  hit moves the block to the GPU and drops the CPU copy. No block is on both tiers.
* ``selective`` (HiCache's write_through_selective): as write-through, but a computed block is
  written to the CPU only from its second computation on.

The GPU's part is the same in all three (``PrefixCache._fill_gpu``), so the GPU tier evolves the
same way whatever the CPU does.

:class:`CacheSettings` are a cache's settings as the commands take them, and build its engine (one of these
designs, or the compiled write-through, ``kvlab/cache/compiled.py``); ``kvlab/cache/interface.py`` declares
what every engine does.
"""

from dataclasses import dataclass, fields

from .prefix import PrefixCache, check_settings, choose
from .tiers import DISK_SETTINGS, Tiered, disk_policy

__all__ = [
    "CACHE_SETTINGS",
    "LMCACHE_SWITCHES",
    "ROOMS",
    "WRITE_POLICIES",
    "CacheSettings",
    "Selective",
    "WriteBack",
    "WriteThrough",
    "make_cache",
]


class WriteThrough(PrefixCache):
    """Inclusive: the CPU sees every block the GPU did not serve."""

    name = "write-through"

    def __init__(self, *args, touch_cpu_on_gpu_hit=False, re_store_on_gpu_hit=False, **kwargs):
        super().__init__(*args, **kwargs)
        cpu = self.cpu
        # What the CPU does with the blocks the GPU served: (touch, re-store) -> tier call.
        self._on_gpu_hit = {
            (False, False): None,
            (True, False): cpu.refresh_all,
            (False, True): cpu.store_absent,
            (True, True): cpu.access_all,
        }[bool(touch_cpu_on_gpu_hit), bool(re_store_on_gpu_hit)]

    def cpu_after(self, blocks, gpu_end, cpu_end, victims=None, gpu=None):
        if not self.cpu.capacity:
            return  # no CPU tier: it can take nothing
        stored = blocks.stored
        gpu_hit = gpu_end if gpu_end < stored else stored
        cpu_hit = cpu_end if cpu_end < stored else stored
        runs = blocks.runs(self._on_gpu_hit, 0, gpu_hit) if self._on_gpu_hit else []
        runs += blocks.runs(self.cpu.touch_all, gpu_hit, cpu_hit)
        runs += self._computed(blocks, cpu_hit)
        self._apply(blocks.keys, runs)

    def _computed(self, blocks, cpu_hit):
        """The CPU's calls for the computed blocks: store them all."""
        return blocks.runs(self.cpu.access_all, cpu_hit, blocks.stored)

    def stores(self, keys, gpu_end, cpu_end):
        """Of a request's stored ``keys``, those :meth:`cpu_after` will copy to the CPU: the computed ones it does not
        hold (and, with ``re_store_on_gpu_hit``, the GPU hits it does not hold)."""
        from itertools import filterfalse

        cpu = self.cpu
        if not cpu.capacity:
            return []
        held = cpu._sizes.__contains__
        stored = self._stored(list(filterfalse(held, keys[max(gpu_end, cpu_end) :])))
        if self._on_gpu_hit in (cpu.store_absent, cpu.access_all):
            stored = list(filterfalse(held, keys[:gpu_end])) + stored
        return stored

    def _stored(self, keys):
        return keys


class Selective(WriteThrough):
    """Write-through of blocks computed before: the first computation of a block stays on the GPU."""

    name = "selective"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._seen = set()  # blocks computed at least once

    def _computed(self, blocks, cpu_hit):
        return blocks.runs(self._store_recomputed, cpu_hit, blocks.stored)

    def _stored(self, keys):
        return [key for key in keys if key in self._seen]

    def _store_recomputed(self, keys, size):
        seen = self._seen
        again = [key for key in keys if key in seen]
        seen.update(keys)
        self.cpu.access_all(again, size)


class WriteBack(PrefixCache):
    """Exclusive: the CPU holds what the GPU evicted; a CPU hit moves back to the GPU."""

    name = "write-back"

    takes_victims = True

    def cpu_before(self, blocks, gpu_end, cpu_end):
        # Blocks that go to the GPU leave the CPU: its hits, and any unusable copy after a gap.
        cpu = self.cpu
        for key in blocks.keys[min(gpu_end, blocks.stored) : blocks.stored]:
            cpu.discard(key)

    def cpu_after(self, blocks, gpu_end, cpu_end, victims=None, gpu=None):
        cpu = self.cpu
        for key, size in leavers(victims, self.gpu if gpu is None else gpu):
            cpu.access(key, size)

    def stores(self, keys, gpu_end, cpu_end):
        return []  # what it copies out are the GPU's victims, as they leave


def leavers(victims, gpu):
    """The victims that left the GPU for good, each once, in the order of their last eviction.

    A request that overflows the GPU can evict one of its own blocks and store it again.
    """
    gone = {}
    for key, size in victims:
        if key not in gpu:
            gone.pop(key, None)
            gone[key] = size
    return gone.items()


WRITE_POLICIES = {policy.name: policy for policy in (WriteThrough, WriteBack, Selective)}
LMCACHE_SWITCHES = ("touch_cpu_on_gpu_hit", "re_store_on_gpu_hit")


@dataclass(frozen=True, kw_only=True)
class CacheSettings:
    """A cache's settings: rooms in tokens (a CPU room of 0: no CPU tier), block rules, write and eviction policies,
    LMCache's switches, and a disk tier below (``kvlab/cache/tiers.py``; a room of 0: none). The fields are the flags
    (``--gpu-tokens`` ...) and the config keys, in the order the replay reports them, with the flags' defaults
    (``--block-tokens``'s: the workload's block). A bad setting, or settings that do not go together, is a ValueError
    with the message the cache itself gives."""

    gpu_tokens: int
    cpu_tokens: int = 0
    block_tokens: int
    partial_blocks: str = "drop"
    eviction_order: str = "tail-first"
    write_policy: str = "write-through"
    gpu_eviction: str = "lru"
    cpu_eviction: str = "lru"
    touch_cpu_on_gpu_hit: bool = False
    re_store_on_gpu_hit: bool = False
    disk_tokens: int = 0
    disk_eviction: str = "lru"

    def __post_init__(self):
        choose("write_policy", self.write_policy, WRITE_POLICIES)
        if self.write_policy != WriteThrough.name:
            for switch in LMCACHE_SWITCHES:
                if getattr(self, switch):
                    raise ValueError(f"{switch} applies to write_policy write-through only, not {self.write_policy}")
        tiers = (
            ("gpu_eviction", self.gpu_eviction, self.gpu_tokens),
            ("cpu_eviction", self.cpu_eviction, self.cpu_tokens),
        )
        check_settings(self.block_tokens, self.partial_blocks, self.eviction_order, tiers)
        disk_policy(self.disk_eviction, self.disk_tokens, self.partial_blocks)

    def policies(self):
        """The settings besides the rooms and the block (:data:`CACHE_SETTINGS`), by name."""
        return {name: getattr(self, name) for name in CACHE_SETTINGS}

    def describe(self):
        """Every setting by name, in the order the replay reports them; the disk tier's only where there is one."""
        shown = {field.name: getattr(self, field.name) for field in fields(self)}
        if not self.disk_tokens:
            for name in DISK_SETTINGS:
                del shown[name]
        return shown

    def build(self, workload=None, blocks=None, cpu_tier=None, disk_tier=None):
        """The cache (a :class:`kvlab.cache.interface.Cache`). With ``workload`` (whose blocks must be
        ``block_tokens`` long), the compiled one where it has these settings and compiling pays for the workload's
        size (the replay's choice: ``kvlab/cache/compiled.py``); else the reference engine of the write policy, its
        rooms in the unit of ``blocks``' sizes where that is given (:mod:`kvlab.cache.costs`). With ``cpu_tier`` or
        ``disk_tier``, the reference engine reading and writing that tier (one several caches share: kvlab/fleet/)."""
        if not self.disk_tokens:
            return self._two_tiers(workload, blocks, cpu_tier)
        if blocks is not None:
            raise ValueError("a disk tier counts its room in tokens: not with rooms in bytes (window_rule in-window)")
        if workload is not None and workload.block_tokens != self.block_tokens:
            raise ValueError(f"the workload's blocks are {workload.block_tokens} tokens, not {self.block_tokens}")
        # The reference engine above the disk: it serves the workload's own keys, request by request, as the disk does.
        engine = self._two_tiers(None, None, cpu_tier)
        rules = (self.disk_eviction, self.partial_blocks, self.eviction_order)
        return Tiered(engine, self.disk_tokens, *rules, disk_tier=disk_tier)

    def _two_tiers(self, workload, blocks, cpu_tier=None):
        rooms = (self.gpu_tokens, self.cpu_tokens, self.block_tokens)
        rules = self.policies()
        policy = WRITE_POLICIES[rules.pop("write_policy")]
        if workload is not None:
            if workload.block_tokens != self.block_tokens:
                raise ValueError(f"the workload's blocks are {workload.block_tokens} tokens, not {self.block_tokens}")
            if blocks is None and cpu_tier is None:
                from .compiled import CompiledLRU, compiles

                if compiles(self, workload):
                    return CompiledLRU(*rooms, **rules)
        return make_cache(policy.name, *rooms, blocks=blocks, cpu_tier=cpu_tier, **rules)


ROOMS = ("gpu_tokens", "cpu_tokens", "block_tokens")
# Every setting of a two-tier cache besides its rooms and block size, in the order the replay reports them (the disk
# tier's, DISK_SETTINGS, are apart: a replay has them only where it has a disk).
CACHE_SETTINGS = tuple(field.name for field in fields(CacheSettings) if field.name not in ROOMS + DISK_SETTINGS)


def make_cache(write_policy, gpu_room, cpu_room, block_tokens, blocks=None, **settings):
    """The reference engine of ``write_policy`` with ``settings`` (:class:`CacheSettings`' besides the rooms), its
    rooms in tokens, or in the unit of ``blocks``' sizes where that is given (bytes under a window rule:
    kvlab/cache/costs.py); :meth:`CacheSettings.build` is the way with rooms in tokens. A bad setting, or an LMCache
    switch set on another policy, is a ValueError."""
    policy = choose("write_policy", write_policy, WRITE_POLICIES)
    if policy is not WriteThrough:
        for switch in LMCACHE_SWITCHES:
            if settings.pop(switch, False):
                raise ValueError(f"{switch} applies to write_policy write-through only, not {write_policy}")
    return policy(gpu_room, cpu_room, block_tokens, blocks=blocks, **settings)
