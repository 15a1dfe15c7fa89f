"""Least recently used: the lab's policy (``kvsim.LRUCache``), with the replay's batched calls."""

from collections import OrderedDict, deque

from .base import EvictionPolicy

__all__ = ["LRU"]


class LRU(EvictionPolicy):
    """Evict the entry accessed longest ago; equal to the lab's ``LRUCache`` access by access."""

    name = "lru"

    def _new_store(self):
        return OrderedDict()  # key -> size, least recently used first

    def _hit(self, key):
        self._sizes.move_to_end(key)

    def _victim(self):
        return next(iter(self._sizes))

    def access_all(self, keys, size):
        """``access(key, size)`` for each key, in one loop over the OrderedDict (the replay's hot path)."""
        self._check_size(size)
        sizes = self._sizes
        move = sizes.move_to_end
        if size > self.capacity:  # too large to store: refresh what is here, pass the rest on
            if sizes:
                for key in keys:
                    if key in sizes:
                        move(key)
            if self.victims is not None:
                self.victims.extend((key, size) for key in keys if key not in sizes)
            return
        pop = sizes.popitem
        limit = self.capacity - size
        used = self.used
        victims = self.victims
        try:
            if victims is None:
                for key in keys:
                    if key in sizes:
                        move(key)
                        continue
                    while used > limit:
                        used -= pop(False)[1]
                    sizes[key] = size
                    used += size
            else:  # the same, handing every evicted entry on
                for key in keys:
                    if key in sizes:
                        move(key)
                        continue
                    while used > limit:
                        evicted = pop(False)
                        used -= evicted[1]
                        victims.append(evicted)
                    sizes[key] = size
                    used += size
        finally:
            self.used = used

    def touch_all(self, keys, size):
        """All present (the usual case): refreshed in one C-level pass; otherwise ``access_all``.

        A key found by the lookup can be gone when the request's own blocks overflow the room.
        """
        sizes = self._sizes
        if all(map(sizes.__contains__, keys)):
            deque(map(sizes.move_to_end, keys), maxlen=0)
        else:
            self.access_all(keys, size)
