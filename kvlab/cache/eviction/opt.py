"""Belady's offline optimum: evict the block whose next request is furthest away.

The replay knows the whole workload, so the bound any online policy can reach is computable.
``Future`` holds, for every block, the positions of the requests that still need it; the cache
advances it request by request, and this tier re-ranks the blocks the request touched. A block
whose next use is later than that of every block it would evict is not stored at all (MIN with
bypass): it passes on, as any other entry the tier does not take. Equal sizes only: for blocks
of different sizes furthest-next-use is not optimal (the problem is NP-hard).
"""

import heapq
from collections import deque
from itertools import count

from .base import EvictionPolicy

__all__ = ["NEVER", "OPT", "Future"]

NEVER = float("inf")


class Future:
    """When each block is needed next.

    Positions count blocks through the whole workload, request by request; a block's use in a
    request is the position of its first occurrence there, so the blocks of one request rank
    head first and a request's tail is the first to go among them.
    """

    def __init__(self, requests, skips=None):
        """``requests``: each request's block keys, in serving order; ``skips``: for each request, how
        many leading blocks this tier is not asked for (the GPU serves them), or None."""
        uses = {}
        start = 0
        skips = iter(skips) if skips is not None else None
        for keys in requests:
            first = next(skips) if skips is not None else 0
            for offset in range(first, len(keys)):
                key = keys[offset]
                times = uses.get(key)
                if times is None:
                    uses[key] = deque((start + offset,))
                elif times[-1] < start:  # first occurrence in this request
                    times.append(start + offset)
            start += len(keys)
        self._uses = uses
        self._now = 0  # position of the next request's first block

    def advance(self, keys):
        """The request of ``keys`` is being served: its uses are now in the past."""
        end = self._now + len(keys)
        uses = self._uses
        for key in keys:
            times = uses.get(key)
            if times:
                while times and times[0] < end:
                    times.popleft()
                if not times:
                    del uses[key]
        self._now = end

    def next_use(self, key):
        """Position of the next request that needs ``key`` (``NEVER`` if none)."""
        times = self._uses.get(key)
        return times[0] if times else NEVER


class OPT(EvictionPolicy):
    """Belady's MIN with bypass over equal-sized blocks; ``future`` must be set before the first access."""

    name = "opt"
    equal_sizes = True
    offline = True

    def __init__(self, capacity):
        super().__init__(capacity)
        self.future = None
        self._heap = []  # (-next use, stamp, key); an entry is current if its stamp is the key's
        self._stamp = {}
        self._stamps = count()

    def reprioritize(self, keys):
        """Re-rank the stored ones of ``keys`` after ``future`` advanced past them."""
        stored = self._sizes
        for key in keys:
            if key in stored:
                self._rank(key)

    def _hit(self, key):
        self._rank(key)

    def _admit(self, key, size):
        if self.used > self.capacity - size and self.future.next_use(key) >= self._furthest()[0]:
            self._reject(key, size)  # needed no sooner than anything it would evict: bypass
            return
        super()._admit(key, size)

    def _victim(self):
        key = self._furthest()[1]
        heapq.heappop(self._heap)
        return key

    def _store(self, key, size):
        super()._store(key, size)
        self._rank(key)

    def _remove(self, key):
        del self._stamp[key]
        return super()._remove(key)

    def _rank(self, key):
        stamp = next(self._stamps)
        self._stamp[key] = stamp
        heapq.heappush(self._heap, (-self.future.next_use(key), stamp, key))
        if len(self._heap) > 4 * len(self._stamp) + 64:  # drop stale entries
            self._heap = [entry for entry in self._heap if self._stamp.get(entry[2]) == entry[1]]
            heapq.heapify(self._heap)

    def _furthest(self):
        """(next use, key) of the stored block needed last; stale heap entries are dropped on the way."""
        heap, stamps = self._heap, self._stamp
        while stamps.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)
        return -heap[0][0], heap[0][2]
