"""The lab's design, write-through with LRU on both tiers, in one compiled loop over dense block keys
(``kvlab/cache/lru_kernel.py``): the replay's fast engine.

The same rules as ``PrefixCache`` + ``WriteThrough`` + ``LRU`` (``kvlab/cache/prefix.py``,
``write_policies.py``, ``eviction/lru.py``), which stay the reference it is tested against request by
request. Other policies, workloads whose token counts could overflow 64 bits, and workloads too small for
compiling to pay (numba's import and the kernels' loading cost more than the Python loop) use the reference
engine. numpy and numba are imported only when the compiled engine runs.
"""

from kvlab.util.files import BATCH_BYTES
from kvlab.util.memory import Footprint

__all__ = ["FOOTPRINT", "STATE_BYTES_PER_KEY", "CompiledLRU", "compiles", "has"]

NONE = -1
# What write-through's CPU does with the blocks the GPU served (LMCache's switches): by (touch, re-store).
ON_GPU_HIT = {(False, False): 0, (True, False): 1, (False, True): 2, (True, True): 3}
COMPILE_WORTH = 2**18  # block accesses from which compiling (importing numba, loading the kernels) pays

# What a compiled replay holds (kvlab/util/memory.py), at its worst, above start-up; bench/memory_footprint.py checks it
# against the peak resident memory. The state is a key's entry per tier, before, after and size, int32 (24 bytes;
# int64 only for blocks past 2**31 tokens, and no trace has those), grown by doubling: up to twice the keys, and
# while it grows the old array as well, so up to 3 x 24 bytes a key.
STATE_BYTES_PER_KEY = 3 * 2 * 3 * 4
# The hash table of dense ids (kvlab/workloads/dense.py): 12 bytes a slot, at most half full, doubled before each batch
# until it has room for the whole batch new: up to 4 slots a key (48 bytes) and an id of the batch, and while it
# doubles the old table as well, 6 slots (72 bytes). It doubles between batches, the state within one, so the
# worst is one doubling beside the other at its largest: 72 + 48 bytes a key.
TABLE_BYTES_PER_KEY = 6 * 12
# Ids in a batch of the reader (BATCH_BYTES of lines): an id takes a digit and a comma at least, but the ids of a
# request are distinct (hash ids are chained), so the ids of a long request take more: 3 bytes an id at the least.
IDS_PER_BATCH = BATCH_BYTES // 3
# The reader's batch, besides: its bytes read, joined to the rest of the last read, split into lines and joined
# again for the scanner, the scanner's arrays (an int64 per comma), the dense ids (kvlab/workloads/: traces, stream).
READER_BYTES = 10 * BATCH_BYTES
READING_BYTES = READER_BYTES + 48 * IDS_PER_BATCH  # reading a trace at all, whichever engine serves it
FOOTPRINT = Footprint(
    key=STATE_BYTES_PER_KEY + 2 * TABLE_BYTES_PER_KEY // 3,
    fixed=TABLE_BYTES_PER_KEY * IDS_PER_BATCH + READER_BYTES,
)


def has(settings):
    """Whether the compiled engine has these settings (:class:`kvlab.cache.interface.CacheSettings`): write-through,
    LRU on both tiers."""
    return settings.write_policy == "write-through" and settings.gpu_eviction == settings.cpu_eviction == "lru"


def compiles(settings, workload):
    """Whether the replay serves ``workload`` through the compiled engine with these settings: it has them, and
    compiling pays (from COMPILE_WORTH block accesses; a trace's are known only once read) for token counts that
    fit its 64-bit counters."""
    if not has(settings):
        return False
    accesses = workload.accesses()
    return (accesses is None or accesses >= COMPILE_WORTH) and workload.token_bound() < 2**62


class CompiledLRU:
    """Write-through, LRU on both tiers, over dense keys; rooms in tokens (a CPU room of 0: no CPU tier)."""

    offline = False

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

    def foresee(self, columns):
        """Nothing to learn: LRU needs no future."""

    def serve(self, keys, tokens):
        """Serve one request of dense keys (whole numbers from 0, as a workload's batches have them); return
        ``(gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens)`` it reused, as the reference engine's ``serve``."""
        import numpy as np

        from kvlab.workloads.stream import Columns

        first = np.zeros(1, dtype=np.int64)  # round and label
        lengths = np.array([tokens], dtype=np.int64), np.array([len(keys)], dtype=np.int64)
        served = np.zeros((1, 4), dtype=np.int64)
        request = Columns(first, first, *lengths, np.asarray(keys, dtype=np.int32))
        self.serve_batch(request, np.zeros((1, 7), dtype=np.int64), served)
        return tuple(served[0].tolist())

    def serve_batch(self, columns, totals, served=None):
        """Serve a batch of requests (:class:`kvlab.workloads.stream.Columns`): add each round's counters to ``totals``
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
        self.serve_batch(columns, np.zeros((rounds, 7), dtype=np.int64), out)
        return out
