"""vLLM 0.33's CPU tier: the OffloadingConnector's scheduler side with its CPU backend and LRU policy, as the engine
meets it (``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``, ``vllm/v1/kv_offload/cpu/
manager.py``, ``vllm/v1/kv_offload/cpu/policies/lru.py``), one chunk a GPU block.

Lines are 0.33.0's; ``scheduler.py`` is the connector's, ``manager.py`` and ``lru.py`` the CPU backend's.

- A lookup walks the request's keys from the end of its GPU hit while the CPU holds them; a key still being stored
  (``HIT_PENDING``) or loaded by another request defers the request (``_lookup_complete_chunks``,
  ``scheduler.py:788-849``; ``manager.py:199``).
- A load pins its keys until it completes (``prepare_load``/``complete_load``, ``manager.py:214``, ``:248``).
- Each step, every scheduled request offers its prompt's full blocks computed by the step's end, from where it last
  stopped (from 0 again after each lookup, from the end of a CPU hit when it loads: ``OffloadPolicy.CHUNK_LEVEL``);
  the CPU stores those it lacks, evicting the least recent of its ready, unpinned blocks, never one offered in the
  same call; where it cannot evict enough, nothing is stored and the blocks are offered again (``_build_store_jobs``,
  ``scheduler.py:1815``, ``CHUNK_LEVEL`` at ``:1471``; ``prepare_store``, ``manager.py:261``). A block stored is found
  once its copy completes (``complete_store``, ``manager.py:375``).
- Recency: a request takes a rank the first time it touches the CPU, and every block it loads, stores or offers
  again is ranked by it and its position, tail before head (``on_request_access``, ``lru.py:133``); when the request
  finishes, after the next step's stores, its blocks are ranked anew tail to head, the head last
  (``on_request_finished``, ``lru.py:155``; ``manager.py:422``); eviction takes the least ranked (``evict``,
  ``lru.py:175``).
"""

import heapq

__all__ = ["OffloadingConnector", "RequestState"]


class OffloadingConnector:
    """The CPU tier of ``blocks`` blocks. Per request it keeps (in the request's ``offload`` slot) its rank, the keys it
    touched and where its next offer starts."""

    takes_victims = False

    def __init__(self, blocks):
        self.capacity = blocks
        self.ready = {}  # key -> whether its copy completed (present: the CPU holds or is storing it)
        self.pins = {}  # key -> loads in flight reading it
        self.ranks = {}  # key -> (rank, -position): the least is evicted first
        self.evictable = set()  # ready and unpinned
        self.heap = []  # (rank, key), stale entries skipped
        self.next_rank = 0
        self.loading = {}  # key -> loads in flight (another request's lookup waits for them)

    def __len__(self):
        return len(self.ready)

    # --- lookups and loads --------------------------------------------------------------------------------------

    def prefix_end(self, keys, start):
        """``(end, deferred)``: where the CPU's run of ``keys[start:]`` ends, and whether a key of it is still being
        stored or loaded (the request waits a step)."""
        ready, loading = self.ready, self.loading
        end = start
        deferred = False
        while end < len(keys) and keys[end] in ready:
            deferred = deferred or not ready[keys[end]] or keys[end] in loading
            end += 1
        return end, deferred

    def load(self, state, keys, positions):
        """A load of ``keys`` starts: pinned, counted as loading, touched by the request."""
        for key in keys:
            self.pins[key] = self.pins.get(key, 0) + 1
            self.evictable.discard(key)
            self.loading[key] = self.loading.get(key, 0) + 1
        self._access(state, keys, positions)

    def loaded(self, keys):
        for key in keys:
            for table in (self.pins, self.loading):
                count = table[key] - 1
                if count:
                    table[key] = count
                else:
                    del table[key]
            if key not in self.pins and self.ready.get(key):
                self._evictable(key)

    # --- stores -------------------------------------------------------------------------------------------------

    def offer(self, state, keys, positions):
        """``prepare_store``: the keys of ``keys`` the CPU lacks, taken (to be stored), or None where it cannot evict
        room for them (nothing changes but the recency of what it holds)."""
        ready = self.ready
        missing = [key for key in keys if key not in ready]
        touched = [key for key in keys if key not in ready or ready[key]]
        self._access(state, touched, positions)
        if not missing:
            return missing
        evict = len(missing) - (self.capacity - len(ready))
        if evict > 0:
            if evict > len(self.evictable):
                return None
            victims = self._victims(evict, set(keys))
            if victims is None:
                return None
            for key in victims:
                self.evictable.discard(key)
                del ready[key]
                del self.ranks[key]
        rank = self._rank(state)
        for key in missing:
            ready[key] = False
            self.ranks[key] = (rank, -positions[key])
        return missing

    def stored(self, keys):
        for key in keys:
            if key in self.ready and not self.ready[key]:
                self.ready[key] = True
                if key not in self.pins:
                    self._evictable(key)

    def finished(self, state, positions):
        """``on_request_finished``: the blocks the request touched ranked anew, tail to head."""
        for key in sorted(state.touched, key=positions.__getitem__, reverse=True):
            if key in self.ready:
                self.next_rank += 1
                self.ranks[key] = (self.next_rank, 0)
                if key in self.evictable:
                    heapq.heappush(self.heap, (self.ranks[key], key))
        state.touched = set()

    # --- recency ------------------------------------------------------------------------------------------------

    def _rank(self, state):
        if state.rank is None:
            self.next_rank += 1
            state.rank = self.next_rank
        return state.rank

    def _access(self, state, keys, positions):
        fresh = [key for key in keys if key not in state.touched]
        if not fresh:
            return
        state.touched.update(fresh)
        rank = self._rank(state)
        for key in fresh:
            if key not in self.ready:
                continue
            new = (rank, -positions[key])
            if self.ranks[key] >= new:
                continue
            self.ranks[key] = new
            if key in self.evictable:
                heapq.heappush(self.heap, (new, key))

    def _evictable(self, key):
        self.evictable.add(key)
        heapq.heappush(self.heap, (self.ranks[key], key))

    def _victims(self, count, protected):
        """The ``count`` least recent evictable keys not in ``protected``, or None (the heap as it was)."""
        heap, chosen, kept = self.heap, [], []
        seen = set()
        while heap and len(chosen) < count:
            entry = heapq.heappop(heap)
            rank, key = entry
            if key not in self.evictable or self.ranks.get(key) != rank or key in seen:
                continue
            seen.add(key)
            (kept if key in protected else chosen).append(entry)
        for entry in kept:
            heapq.heappush(heap, entry)
        if len(chosen) < count:
            for entry in chosen:
                heapq.heappush(heap, entry)
            return None
        if len(heap) > max(64, 2 * len(self.evictable)):
            self.heap = [(self.ranks[key], key) for key in self.evictable]
            heapq.heapify(self.heap)
        return [key for _, key in chosen]


class RequestState:
    """A request's side of the connector: its rank, the keys it touched, where its next offer starts."""

    __slots__ = ("rank", "touched", "next_stored", "positions")

    def __init__(self, keys):
        self.rank = None
        self.touched = set()
        self.next_stored = 0
        self.positions = {key: index for index, key in enumerate(keys)}
