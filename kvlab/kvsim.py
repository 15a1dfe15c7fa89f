"""KV-cache simulators of the lab: a size-aware LRU cache and a GPU+CPU two-tier cache.

Standard library only, so this file still works when copied alone next to
``scenario.py`` (that is how the lab's handout uses it).
"""

from collections import OrderedDict

__all__ = ["LRUCache", "TwoTierCache"]


class LRUCache:
    """Least-recently-used cache whose entries have sizes (tokens) and whose room is a capacity.

    ``access`` is the only call that changes the order; ``in`` only looks.
    """

    def __init__(self, capacity):
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity!r}")
        self.capacity = capacity
        self.used = 0
        self._sizes = OrderedDict()  # key -> size, oldest first

    def access(self, key, size):
        """Return True on a hit (the entry becomes most recent); on a miss store it and return False.

        A miss evicts oldest-first until the new entry fits; an entry larger than the
        whole capacity is neither stored nor allowed to evict anything.
        """
        sizes = self._sizes
        if key in sizes:
            sizes.move_to_end(key)
            return True
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size!r}")
        if size > self.capacity:
            return False
        limit = self.capacity - size
        while self.used > limit:
            self.used -= sizes.popitem(last=False)[1]
        sizes[key] = size
        self.used += size
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
