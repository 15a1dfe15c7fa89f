"""Least frequently used, counting accesses since the entry was stored (reset on eviction)."""

from collections import OrderedDict

from .base import EvictionPolicy

__all__ = ["LFU"]


class LFU(EvictionPolicy):
    """Evict the entry with the fewest accesses since it was stored; among equals, the least recently used."""

    name = "lfu"

    def __init__(self, capacity):
        super().__init__(capacity)
        self._count = {}  # key -> accesses since stored
        self._buckets = {}  # count -> OrderedDict of its keys, least recently used first

    def _hit(self, key):
        count = self._count[key]
        self._unlink(key, count)
        self._link(key, count + 1)

    def _victim(self):
        return next(iter(self._buckets[min(self._buckets)]))

    def _store(self, key, size):
        super()._store(key, size)
        self._link(key, 1)

    def _remove(self, key):
        self._unlink(key, self._count.pop(key))
        return super()._remove(key)

    def _link(self, key, count):
        self._count[key] = count
        self._buckets.setdefault(count, OrderedDict())[key] = None

    def _unlink(self, key, count):
        bucket = self._buckets[count]
        del bucket[key]
        if not bucket:
            del self._buckets[count]
