"""KV-cache simulators of the lab: a size-aware LRU cache and a GPU+CPU two-tier cache.

Standard library only, so this file still works when copied alone next to
``scenario.py`` (that is how the lab's handout uses it).
"""

from collections import OrderedDict

__all__ = ["TWO_TIER_CACHES", "LRUCache", "SelectiveCache", "TwoTierCache", "WriteBackCache"]


class LRUCache:
    """Least-recently-used cache whose entries have sizes (tokens) and whose room is a capacity.

    ``access`` is the only call that changes the order; ``in`` only looks.
    """

    __slots__ = ("capacity", "used", "_sizes", "_move", "_pop")  # attribute access on the hot path

    def __init__(self, capacity):
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity!r}")
        self.capacity = capacity
        self.used = 0
        self._sizes = OrderedDict()  # key -> size, oldest first
        self._move = self._sizes.move_to_end  # bound once: a hit is one lookup and one call
        self._pop = self._sizes.popitem

    def access(self, key, size):
        """Return True on a hit (the entry becomes most recent); on a miss store it and return False.

        A miss evicts oldest-first until the new entry fits; an entry larger than the whole
        capacity is neither stored nor allowed to evict anything.
        """
        sizes = self._sizes
        if key in sizes:
            self._move(key)
            return True
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size!r}")
        capacity = self.capacity
        if size > capacity:
            return False
        used = self.used + size
        if used > capacity:
            pop = self._pop
            while used > capacity:
                used -= pop(False)[1]
        sizes[key] = size
        self.used = used
        return False

    def __contains__(self, key):
        return key in self._sizes

    def __len__(self):
        return len(self._sizes)

    def keys(self):
        """Stored keys, oldest first."""
        return list(self._sizes)

    def __repr__(self):
        return f"{type(self).__name__}(capacity={self.capacity!r}, used={self.used!r}, keys={self.keys()!r})"


class TwoTierCache:
    """A GPU tier backed by a CPU tier, each an :class:`LRUCache` (the lab's write-through rules).

    1. GPU hit: ``"gpu"``; the CPU tier is not touched.
    2. GPU miss, CPU hit: ``"cpu"``; the CPU copy becomes most recent and is also placed on the GPU.
    3. Both miss: ``"miss"``; the entry is stored on both tiers.

    A CPU room of 0 leaves only the GPU tier, i.e. the single-tier cache.
    """

    def __init__(self, gpu_capacity, cpu_capacity):
        self.gpu = LRUCache(gpu_capacity)
        self.cpu = LRUCache(cpu_capacity)

    def access(self, key, size):
        """Return ``"gpu"``, ``"cpu"`` or ``"miss"`` for one request of ``key`` (``size`` tokens)."""
        if key in self.gpu:
            self.gpu.access(key, size)
            return "gpu"
        if key in self.cpu:
            self.cpu.access(key, size)
            self.gpu.access(key, size)
            return "cpu"
        self.gpu.access(key, size)
        self.cpu.access(key, size)
        return "miss"

    def __contains__(self, key):
        return key in self.gpu or key in self.cpu

    def __repr__(self):
        return f"{type(self).__name__}(gpu={self.gpu!r}, cpu={self.cpu!r})"


class WriteBackCache(TwoTierCache):
    """SGLang HiCache's write_back: the CPU tier is an exclusive victim tier.

    1. GPU hit: ``"gpu"``, as in :class:`TwoTierCache`.
    2. GPU miss, CPU hit: ``"cpu"``; the entry moves to the GPU (its CPU copy is dropped).
    3. Both miss: ``"miss"``; the entry is stored on the GPU only.

    What the GPU evicts (or cannot hold) then goes to the CPU, oldest first. No key is on both tiers.
    """

    def access(self, key, size):
        gpu, cpu = self.gpu, self.cpu
        if key in gpu:
            gpu.access(key, size)
            return "gpu"
        tier = "miss"
        if key in cpu:
            tier = "cpu"
            cpu.used -= cpu._sizes.pop(key)
        before = list(gpu._sizes.items())  # oldest first
        gpu.access(key, size)
        for old, old_size in before:
            if old not in gpu:
                cpu.access(old, old_size)
        if key not in gpu:
            cpu.access(key, size)
        return tier


class SelectiveCache(TwoTierCache):
    """HiCache's write_through_selective: write-through, but only from an entry's second computation on.

    A miss stores the entry on the GPU; on the CPU too if it was computed (missed) before.
    """

    def __init__(self, gpu_capacity, cpu_capacity):
        super().__init__(gpu_capacity, cpu_capacity)
        self._computed = set()

    def access(self, key, size):
        if key in self.gpu or key in self.cpu:
            return super().access(key, size)
        self.gpu.access(key, size)
        if key in self._computed:
            self.cpu.access(key, size)
        self._computed.add(key)
        return "miss"


# The write policies by name: how the CPU tier is filled (kvlab/cache/write_policies.py does it per block).
TWO_TIER_CACHES = {"write-through": TwoTierCache, "write-back": WriteBackCache, "selective": SelectiveCache}
