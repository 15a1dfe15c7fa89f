"""A third tier below the CPU: a local disk or a remote store, written through from the two tiers above.

The rule is the one every engine's lowest tier follows for lookups, and LMCache's for writes:

* Lookup: the request's prefix found on the GPU, continued on the CPU (``kvlab/cache/prefix.py``), is continued
  by the blocks after it found on the disk; everything from the first block found on none is recomputed.
* Writes: every block neither tier above served is accessed on the disk (a disk load refreshed there, a
  computed block stored there), in the request's eviction order. The tiers above treat a block loaded from the
  disk as one they did not have (the GPU takes it; a write-through CPU stores it), so they evolve the same way
  whatever the disk does, and the disk sees exactly the blocks both of them missed: the exact curve of the disk
  at fixed GPU and CPU rooms (``kvlab/curves/mrc.py``) rests on this.

Sources of the write rule, engine by engine (docs/tiers.md says where each differs):

* LMCache (LMCache/LMCache 000620e, ``lmcache/v1/storage_backend/storage_manager.py``): ``batched_put`` hands every
  stored chunk to every backend, the CPU and the local disk alike; ``async_lookup_and_prefetch`` takes the prefix
  tier by tier (a gap ends it); ``batched_get`` writes a hit from a lower backend back into ``LocalCPUBackend``. Its
  disk evicts by ``cache_policy`` (LRU) within ``max_local_disk_size`` GiB (``local_disk_backend.py``).
* SGLang HiCache (``python/sglang/srt/mem_cache/hiradix_cache.py`` ``writing_check``): each completed GPU->host copy is
  backed up to L3 (``write_backup_storage``), pages already there skipped; an L3 prefix of at least
  ``prefetch_threshold`` (256) tokens is prefetched into host memory, then loaded as a host hit. Under
  ``write_back`` the host copy is made when the GPU evicts, so L3 gets a block then rather than at its computation.
* vLLM (``vllm/v1/kv_offload/tiering/manager.py``, ``TieringOffloadingSpec``): a block stored to the CPU is cascaded
  to every secondary tier; a lookup checks the CPU, then each tier in order, and a hit is promoted to the CPU.
"""

from .prefix import Blocks, apply_runs, tier_policies

__all__ = ["DISK_SETTINGS", "Tiered", "disk_policy"]

DISK_SETTINGS = ("disk_tokens", "disk_eviction")  # the third tier's settings (kvlab.cache.interface.CacheSettings)


def disk_policy(name, room, partial_blocks="drop"):
    """The disk tier's eviction policy (a class), checked as every tier's (``tier_policies``), and online: ``opt`` is
    refused, the disk's future depends on both tiers above."""
    (policy,) = tier_policies(partial_blocks, [("disk_eviction", name, room)])
    if policy.offline:
        raise ValueError(f"disk_eviction {name} needs the workload's future; the disk tier takes an online policy")
    return policy


class Tiered:
    """A two-tier cache (:class:`kvlab.cache.interface.Cache`: the reference designs or the compiled one) and a disk
    tier of ``disk_room`` tokens below it. ``serve`` returns the engine's four figures and then the disk's blocks and
    tokens: ``(gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens, disk_blocks, disk_tokens)``."""

    has_disk = True  # the replay counts the disk's figures too (kvlab/loop.py)

    def __init__(
        self, engine, disk_room, disk_eviction="lru", partial_blocks="drop", eviction_order="tail-first", disk_tier=None
    ):
        self.engine = engine
        policy = disk_policy(disk_eviction, disk_room, partial_blocks)
        self.disk = policy(disk_room) if disk_tier is None else disk_tier  # a tier several caches share (kvlab/fleet/)
        self.block_tokens = engine.block_tokens
        self.keep_partial = partial_blocks == "keep"
        self.tail_first = eviction_order == "tail-first"

    @property
    def offline(self):
        return self.engine.offline

    def tiers(self):
        """The tiers a lookup walks, in order: the engine's, then the disk."""
        return (*self.engine.tiers(), self.disk)

    def foresee(self, columns):
        self.engine.foresee(columns)

    def serve(self, keys, tokens):
        gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens = self.engine.serve(keys, tokens)
        if not keys:
            return gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens, 0, 0
        disk, block = self.disk, self.block_tokens
        above = gpu_blocks + cpu_blocks
        end = disk.prefix_end(keys, above)
        disk_tokens = min(end * block, tokens) - min(above * block, tokens)
        blocks = Blocks(keys, tokens, block, self.keep_partial)
        stored = blocks.stored
        hit, start = min(end, stored), min(above, stored)
        apply_runs(
            keys, blocks.runs(disk.touch_all, start, hit) + blocks.runs(disk.access_all, hit, stored), self.tail_first
        )
        return gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens, end - above, disk_tokens

    def __repr__(self):
        return f"Tiered({self.engine!r}, disk={self.disk!r})"
