"""Belady's offline optimum: evict the block whose next request is furthest away.

The replay knows the whole workload, so the bound any online policy can reach is computable.
``Future`` holds, for every block, the positions of the requests that still need it; the cache
advances it request by request, and this tier re-ranks the blocks the request touched. A block
whose next use is later than that of every block it would evict is not stored at all (MIN with
bypass): it passes on, as any other entry the tier does not take. Equal sizes only: for blocks
of different sizes furthest-next-use is not optimal (the problem is NP-hard).
"""

import heapq
from itertools import count

from .base import EvictionPolicy

__all__ = ["NEVER", "OPT", "Future"]

NEVER = float("inf")


class Future:
    """When each block is needed next.

    Positions count blocks through the whole workload, request by request; a block's use in a request is the
    position of its first occurrence there, so the blocks of one request rank head first and a request's tail
    is the first to go among them. The uses are typed arrays (about 8 bytes per block access: the future of a
    48M-access trace fits in memory), sorted by block, with a cursor per block that only moves forward.
    """

    def __init__(self, requests, skips=None):
        """``requests``: each request's block keys, in serving order; ``skips``: for each request, how
        many leading blocks this tier is not asked for (the GPU serves them), or None."""
        import numpy as np

        ids, flat, counts = {}, [], []
        for keys in requests:
            counts.append(len(keys))
            flat.extend(ids.setdefault(key, len(ids)) for key in keys)
        self._ids = ids
        self._build(np.array(flat, dtype=np.int64), np.array(counts, dtype=np.int64), skips)

    @classmethod
    def of_columns(cls, keys, counts, skips=None):
        """The future of requests given as dense keys (``kvlab/workloads/stream.py``): what the tier is asked for is
        then those same keys."""
        future = cls.__new__(cls)
        future._ids = None
        future._build(keys, counts, skips)
        return future

    def _build(self, keys, counts, skips):
        import numpy as np

        request = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        position = np.arange(len(keys), dtype=np.int64)
        if skips is None:
            asked = position
        else:
            starts = np.cumsum(counts) - counts
            asked = position[position - starts[request] >= np.asarray(skips, dtype=np.int64)[request]]
        order = asked[np.lexsort((asked, request[asked], keys[asked]))]  # by block, then position
        first = np.ones(len(order), dtype=bool)  # a block's first position in each request
        first[1:] = (keys[order[1:]] != keys[order[:-1]]) | (request[order[1:]] != request[order[:-1]])
        self._uses = order[first]
        blocks = int(keys.max()) + 1 if len(keys) else 0
        self._begin = np.searchsorted(keys[self._uses], np.arange(blocks + 1)).tolist()
        self._cursor = self._begin[:-1]
        self._now = 0  # position of the next request's first block

    def advance(self, keys):
        """The request of ``keys`` is being served: its uses are now in the past."""
        self._now += len(keys)

    def next_use(self, key):
        """Position of the next request that needs ``key`` (``NEVER`` if none)."""
        block = key if self._ids is None else self._ids.get(key)
        if block is None or not 0 <= block < len(self._cursor):
            return NEVER
        cursor, end, uses, now = self._cursor[block], self._begin[block + 1], self._uses, self._now
        while cursor < end and uses[cursor] < now:
            cursor += 1
        self._cursor[block] = cursor
        return int(uses[cursor]) if cursor < end else NEVER


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
