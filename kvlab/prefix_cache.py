"""A GPU and a CPU tier of KV blocks that serve each request's longest cached prefix.

The rules are the lab's two-tier rules (``kvsim.TwoTierCache``), applied per block:

* Lookup: the request's leading blocks found on the GPU, continued by the leading blocks after
  them found on the CPU, are reused; everything from the first block found on neither tier is
  recomputed (a cached block after a missing one cannot be used: its KV depends on the prefix).
* Storing (write-through): every block of the request is accessed on the GPU (a CPU load is also
  placed on the GPU, a computed block stored there); every block not served by the GPU is also
  accessed on the CPU. A GPU hit does not touch the CPU copy.
* Only full blocks are stored unless ``partial_blocks="keep"``: vLLM caches only full blocks, and
  LMCache does not save the last partial chunk.
* Eviction order within a request (``eviction_order``): ``tail-first`` (default) accesses the
  blocks tail to head, so the head is the most recent and a request's tail is evicted before its
  head, as vLLM frees a finished request's blocks tail first and LMCache touches a hit prefix
  tail to head; the reusable prefix survives longest. ``head-first`` accesses them head to tail,
  so the head goes first and the cached tail becomes unreachable.

Each tier is the lab's :class:`~kvlab.kvsim.LRUCache` with batched calls (one Python call per
request and tier, not per block); with one block per document the whole thing is
``TwoTierCache``.
"""

from collections import deque

from .kvsim import LRUCache

__all__ = ["EVICTION_ORDERS", "PARTIAL_BLOCKS", "BlockLRU", "PrefixCache"]

EVICTION_ORDERS = ("tail-first", "head-first")
PARTIAL_BLOCKS = ("drop", "keep")


class BlockLRU(LRUCache):
    """The lab's size-aware LRU cache, plus the per-request batched lookup and access of the replay."""

    def prefix_end(self, keys, start=0):
        """Index of the first of ``keys[start:]`` not stored here (``len(keys)`` if all are)."""
        stored = self._sizes
        for index in range(start, len(keys)):
            if keys[index] not in stored:
                return index
        return len(keys)

    def access_all(self, keys, size):
        """``LRUCache.access(key, size)`` for each key in order, in one call."""
        sizes = self._sizes
        move = sizes.move_to_end
        if size > self.capacity:  # too large to store: only refresh what is already here
            if sizes:
                for key in keys:
                    if key in sizes:
                        move(key)
            return
        pop = sizes.popitem
        limit = self.capacity - size
        used = self.used
        try:
            for key in keys:
                if key in sizes:
                    move(key)
                else:
                    while used > limit:
                        used -= pop(False)[1]
                    sizes[key] = size
                    used += size
        finally:
            self.used = used

    def touch_all(self, keys, size):
        """The same as ``access_all`` for keys expected to be here (found by the lookup).

        All present: refreshed in one C-level pass. Otherwise (a key evicted since the lookup by
        the request's own blocks, when it overflows the room) key by key, as ``access`` would.
        """
        sizes = self._sizes
        if all(map(sizes.__contains__, keys)):
            deque(map(sizes.move_to_end, keys), maxlen=0)
        else:
            self.access_all(keys, size)


class PrefixCache:
    """Two tiers of blocks of ``block_tokens`` tokens; rooms in tokens (a CPU room of 0: no CPU tier)."""

    def __init__(self, gpu_tokens, cpu_tokens, block_tokens, partial_blocks="drop", eviction_order="tail-first"):
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens!r}")
        if partial_blocks not in PARTIAL_BLOCKS:
            raise ValueError(f"partial_blocks must be one of {', '.join(PARTIAL_BLOCKS)}, got {partial_blocks!r}")
        if eviction_order not in EVICTION_ORDERS:
            raise ValueError(f"eviction_order must be one of {', '.join(EVICTION_ORDERS)}, got {eviction_order!r}")
        self.gpu = BlockLRU(gpu_tokens)
        self.cpu = BlockLRU(cpu_tokens)
        self.block_tokens = block_tokens
        self.keep_partial = partial_blocks == "keep"
        self.tail_first = eviction_order == "tail-first"

    def serve(self, keys, tokens):
        """Serve one request; return ``(gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens)`` it reused.

        ``keys`` are the request's block keys head first; ``tokens`` its length, which makes every
        block ``block_tokens`` long except perhaps the last.
        """
        count = len(keys)
        if not count:
            return 0, 0, 0, 0
        block = self.block_tokens
        gpu, cpu = self.gpu, self.cpu
        gpu_end = gpu.prefix_end(keys)
        cpu_end = cpu.prefix_end(keys, gpu_end)
        gpu_tokens = min(gpu_end * block, tokens)
        cpu_tokens = min(cpu_end * block, tokens) - gpu_tokens
        last = tokens - block * (count - 1)
        full = count if last == block else count - 1  # blocks before a last partial one
        gpu_hit = min(gpu_end, full)  # full blocks the GPU served, to refresh there
        cpu_hit = min(cpu_end, full)
        partial = full < count and self.keep_partial
        # Per tier: refresh the blocks it served, store (or refresh) the rest; tail to head or head to tail.
        if self.tail_first:
            if partial:
                self._store_partial(keys[-1], last, gpu_end < count)
            if gpu_end < full:
                gpu.access_all(keys[gpu_end:full][::-1], block)
            if gpu_hit:
                gpu.touch_all(keys[:gpu_hit][::-1], block)
            if cpu_end < full:
                cpu.access_all(keys[cpu_end:full][::-1], block)
            if gpu_end < cpu_hit:
                cpu.touch_all(keys[gpu_end:cpu_hit][::-1], block)
        else:
            if gpu_hit:
                gpu.touch_all(keys[:gpu_hit], block)
            if gpu_end < full:
                gpu.access_all(keys[gpu_end:full], block)
            if gpu_end < cpu_hit:
                cpu.touch_all(keys[gpu_end:cpu_hit], block)
            if cpu_end < full:
                cpu.access_all(keys[cpu_end:full], block)
            if partial:
                self._store_partial(keys[-1], last, gpu_end < count)
        return gpu_end, cpu_end - gpu_end, gpu_tokens, cpu_tokens

    def _store_partial(self, key, size, on_cpu_too):
        """Access a request's last partial block on the GPU, and on the CPU unless the GPU served it."""
        self.gpu.access(key, size)
        if on_cpu_too:
            self.cpu.access(key, size)

    def __repr__(self):
        return f"{type(self).__name__}(gpu={self.gpu!r}, cpu={self.cpu!r})"
