"""The lab's design, write-through with LRU on both tiers, in one compiled loop over dense block keys
(``kvlab/cache/lru_kernel.py``): the replay's fast engine.

The same rules as ``PrefixCache`` + ``WriteThrough`` + ``LRU`` (``kvlab/cache/prefix.py``,
``write_policies.py``, ``eviction/lru.py``), which stay the reference it is tested against request by
request. Other policies, workloads whose token counts could overflow 64 bits, and workloads too small for
compiling to pay (numba's import and the kernels' loading cost more than the Python loop) use the reference
engine. numpy and numba are imported only when the compiled engine runs.
"""

__all__ = ["CompiledLRU", "compiled_cache", "fastest_cache"]

NONE = -1
# What write-through's CPU does with the blocks the GPU served (LMCache's switches): by (touch, re-store).
ON_GPU_HIT = {(False, False): 0, (True, False): 1, (False, True): 2, (True, True): 3}
STATE_BYTES_PER_KEY = 2 * 3 * 4  # per tier: before, after, size (int32 unless a block passes 2**31 tokens)
COMPILE_WORTH = 2**18  # block accesses from which compiling (importing numba, loading the kernels) pays


def compiled_cache(write_policy, gpu_tokens, cpu_tokens, block_tokens, **settings):
    """The compiled engine for these settings, or None where only the reference engine has them."""
    if write_policy != "write-through" or settings.get("gpu_eviction", "lru") != "lru":
        return None
    if settings.get("cpu_eviction", "lru") != "lru":
        return None
    return CompiledLRU(gpu_tokens, cpu_tokens, block_tokens, **settings)


def fastest_cache(workload, write_policy, gpu_tokens, cpu_tokens, **settings):
    """The cache for ``workload`` with these settings: compiled where it can be, else the reference
    (``make_cache``, which checks the settings either way: ValueError)."""
    from kvlab.cache.write_policies import make_cache

    rooms = (gpu_tokens, cpu_tokens, workload.block_tokens)
    cache = make_cache(write_policy, *rooms, **settings)
    accesses = workload.accesses()
    if (accesses is None or accesses >= COMPILE_WORTH) and workload.token_bound() < 2**62:  # 64-bit counters
        return compiled_cache(write_policy, *rooms, **settings) or cache
    return cache


class CompiledLRU:
    """Write-through, LRU on both tiers, over dense keys; rooms in tokens (a CPU room of 0: no CPU tier)."""

    offline = False
    columns = True  # serves kvlab.stream.Columns, not one request at a time

    def __init__(
        self,
        gpu_tokens,
        cpu_tokens,
        block_tokens,
        partial_blocks="drop",
        eviction_order="tail-first",
        gpu_eviction="lru",
        cpu_eviction="lru",
        touch_cpu_on_gpu_hit=False,
        re_store_on_gpu_hit=False,
    ):
        import numpy as np

        self.capacity = np.array([gpu_tokens, cpu_tokens], dtype=np.int64)
        self.block_tokens = block_tokens
        self.keep_partial = partial_blocks == "keep"
        self.tail_first = eviction_order == "tail-first"
        self.on_gpu_hit = ON_GPU_HIT[bool(touch_cpu_on_gpu_hit), bool(re_store_on_gpu_hit)]
        self.used = np.zeros(2, dtype=np.int64)
        self.ends = np.full((2, 2), NONE, dtype=np.int64)  # per tier: least and most recent key
        # tier, key, (BEFORE, AFTER, SIZE): int32 halves what a key's entry takes (and the cache misses)
        self.dtype = np.int32 if block_tokens < 2**31 else np.int64
        self.state = np.zeros((2, 0, 3), dtype=self.dtype)

    @property
    def nbytes(self):
        return self.state.nbytes

    def reserve(self, keys):
        """Room in the state for keys ``0 .. keys - 1`` (grown by doubling)."""
        import numpy as np

        have = self.state.shape[1]
        if keys <= have:
            return
        grown = np.zeros((2, max(keys, 2 * have), 3), dtype=self.dtype)
        grown[:, :have] = self.state
        self.state = grown

    def serve(self, columns, totals, served=None):
        """Serve a batch of requests (:class:`kvlab.stream.Columns`): add each round's counters to ``totals``
        (rounds x the replay's COUNTERS) and, with ``served`` (requests x 4), write each request's GPU and
        CPU blocks and tokens."""
        import numpy as np

        from kvlab.cache.lru_kernel import serve

        if len(columns.keys):
            self.reserve(int(columns.keys.max()) + 1)
        serve(
            self.state,
            self.used,
            self.ends,
            self.capacity,
            columns.rounds,
            columns.tokens,
            columns.counts,
            columns.keys,
            self.block_tokens,
            self.keep_partial,
            self.tail_first,
            self.on_gpu_hit,
            totals,
            np.zeros((0, 4), dtype=np.int64) if served is None else served,
            served is not None,
        )

    def served(self, columns, rounds):
        """Per request of ``columns``: the GPU's and CPU's blocks and tokens (requests x 4)."""
        import numpy as np

        out = np.zeros((len(columns.counts), 4), dtype=np.int64)
        self.serve(columns, np.zeros((rounds, 7), dtype=np.int64), out)
        return out
