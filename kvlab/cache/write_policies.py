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
"""

from .prefix import PrefixCache, choose

__all__ = [
    "CACHE_SETTINGS",
    "LMCACHE_SWITCHES",
    "WRITE_POLICIES",
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

    def _write(self, blocks, gpu_end, cpu_end):
        self._fill_gpu(blocks, gpu_end)
        stored = blocks.stored
        if not self.cpu.capacity:
            return  # no CPU tier: it can take nothing
        gpu_hit = gpu_end if gpu_end < stored else stored
        cpu_hit = cpu_end if cpu_end < stored else stored
        runs = blocks.runs(self._on_gpu_hit, 0, gpu_hit) if self._on_gpu_hit else []
        runs += blocks.runs(self.cpu.touch_all, gpu_hit, cpu_hit)
        runs += self._computed(blocks, cpu_hit)
        self._apply(blocks.keys, runs)

    def _computed(self, blocks, cpu_hit):
        """The CPU's calls for the computed blocks: store them all."""
        return blocks.runs(self.cpu.access_all, cpu_hit, blocks.stored)


class Selective(WriteThrough):
    """Write-through of blocks computed before: the first computation of a block stays on the GPU."""

    name = "selective"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._seen = set()  # blocks computed at least once

    def _computed(self, blocks, cpu_hit):
        return blocks.runs(self._store_recomputed, cpu_hit, blocks.stored)

    def _store_recomputed(self, keys, size):
        seen = self._seen
        again = [key for key in keys if key in seen]
        seen.update(keys)
        self.cpu.access_all(again, size)


class WriteBack(PrefixCache):
    """Exclusive: the CPU holds what the GPU evicted; a CPU hit moves back to the GPU."""

    name = "write-back"

    def _write(self, blocks, gpu_end, cpu_end):
        cpu = self.cpu
        # Blocks that go to the GPU leave the CPU: its hits, and any unusable copy after a gap.
        for key in blocks.keys[min(gpu_end, blocks.stored) : blocks.stored]:
            cpu.discard(key)
        gpu = self.gpu
        victims = gpu.victims = []
        self._fill_gpu(blocks, gpu_end)
        gpu.victims = None
        for key, size in leavers(victims, gpu):
            cpu.access(key, size)


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


def make_cache(write_policy, gpu_tokens, cpu_tokens, block_tokens, **settings):
    """The cache of ``write_policy`` with ``settings``; an LMCache switch set on another policy is a ValueError."""
    policy = choose("write_policy", write_policy, WRITE_POLICIES)
    if policy is not WriteThrough:
        for switch in LMCACHE_SWITCHES:
            if settings.pop(switch, False):
                raise ValueError(f"{switch} applies to write_policy write-through only, not {write_policy}")
    return policy(gpu_tokens, cpu_tokens, block_tokens, **settings)


# Every setting of a cache besides its rooms and block size, in the order the replay reports them.
CACHE_SETTINGS = ("partial_blocks", "eviction_order", "write_policy", "gpu_eviction", "cpu_eviction", *LMCACHE_SWITCHES)
