"""The one interface every eviction policy of a tier implements (adding a policy: one class, one registry line).

A tier holds blocks of KV cache; its room and every entry's size are in tokens. ``access`` is
the lab's rule for every policy: a hit refreshes the entry (as the policy defines it); a miss
stores the entry, evicting the policy's victims until it fits, and an entry larger than the whole
room is neither stored nor allowed to evict anything. Subclasses override the hooks
``_hit``, ``_victim`` and, where they keep more than the sizes, ``_store`` and ``_remove``
(cachetools' pattern); ``access`` itself only where the algorithm is not "evict until it fits"
(ARC).

What leaves the tier, by eviction or because it was not admitted, is appended to ``victims``
when that is a list: a write-back GPU tier hands it to the CPU tier.
"""

__all__ = ["EvictionPolicy"]


class EvictionPolicy:
    """A size-aware cache of blocks; ``name`` is the policy's name in the registry."""

    name = ""
    equal_sizes = False  # True: every stored entry must have the same size (the algorithm counts entries)
    offline = False  # True: needs ``future`` (the workload's next uses), set before the first access

    def __init__(self, capacity):
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity!r}")
        self.capacity = capacity
        self.used = 0
        self.victims = None  # a list to receive (key, size) of what leaves the tier, or None
        self._sizes = self._new_store()  # key -> size of every stored entry
        self._entry_size = None  # the one size of an equal_sizes policy, once known

    def _new_store(self):
        return {}

    # -- queries ---------------------------------------------------------------------------------

    def __contains__(self, key):
        return key in self._sizes

    def __len__(self):
        return len(self._sizes)

    def keys(self):
        """Stored keys, in the order the policy keeps them (oldest first where it keeps one)."""
        return list(self._sizes)

    def size_of(self, key):
        """The stored size of ``key``; None if it is not stored."""
        return self._sizes.get(key)

    def prefix_end(self, keys, start=0):
        """Index of the first of ``keys[start:]`` not stored here (``len(keys)`` if all are)."""
        stored = self._sizes
        for index in range(start, len(keys)):
            if keys[index] not in stored:
                return index
        return len(keys)

    # -- changes ---------------------------------------------------------------------------------

    def access(self, key, size):
        """Return True on a hit (refreshed); on a miss store the entry if it can and return False."""
        if key in self._sizes:
            self._hit(key)
            return True
        self._check_size(size)
        if size > self.capacity:
            self._reject(key, size)
        else:
            self._admit(key, size)
        return False

    def access_all(self, keys, size):
        """``access(key, size)`` for each key in order."""
        for key in keys:
            self.access(key, size)

    def touch_all(self, keys, size):
        """``access_all`` for keys found by the request's lookup (LRU makes this one C-level pass)."""
        self.access_all(keys, size)

    def refresh_all(self, keys, size):
        """Refresh those of ``keys`` stored here; store nothing."""
        stored = self._sizes
        for key in keys:
            if key in stored:
                self._hit(key)

    def store_absent(self, keys, size):
        """Store each of ``keys`` not stored here when its turn comes; refresh nothing."""
        stored = self._sizes
        for key in keys:
            if key not in stored:
                self.access(key, size)

    def discard(self, key):
        """Drop ``key`` if stored (it moved to another tier); it is not a victim."""
        if key in self._sizes:
            self._remove(key)

    # -- hooks -----------------------------------------------------------------------------------

    def _hit(self, key):
        """A stored entry was accessed."""
        raise NotImplementedError

    def _victim(self):
        """The stored key to evict next."""
        raise NotImplementedError

    def _store(self, key, size):
        self._sizes[key] = size
        self.used += size

    def _remove(self, key):
        size = self._sizes.pop(key)
        self.used -= size
        return size

    # -- shared steps ----------------------------------------------------------------------------

    def _admit(self, key, size):
        """Evict victims until ``size`` fits, then store the entry."""
        limit = self.capacity - size
        while self.used > limit:
            self._evict(self._victim())
        self._store(key, size)

    def _evict(self, key):
        size = self._remove(key)
        if self.victims is not None:
            self.victims.append((key, size))

    def _reject(self, key, size):
        """The entry is not stored: it passes through, to the next tier if there is one."""
        if self.victims is not None:
            self.victims.append((key, size))

    def _check_size(self, size):
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size!r}")
        if self.equal_sizes:
            if self._entry_size is None:
                self._entry_size = size
            elif size != self._entry_size:
                raise ValueError(
                    f"{self.name} needs equal-sized entries (got {size} after {self._entry_size}); "
                    "use --partial-blocks drop"
                )

    def __repr__(self):
        return f"{type(self).__name__}(capacity={self.capacity!r}, used={self.used!r}, keys={self.keys()!r})"
