"""The GPU's KV blocks as vLLM v1 keeps them: a fixed pool in which the blocks of requests in flight are held and the
rest is the prefix cache.

vLLM v1 (``vllm/v1/core/block_pool.py``, ``kv_cache_manager.py``): a full block is cached under its hash; a block is
held while a request (or a copy) refers to it (``ref_cnt``), and when its last holder lets go it joins the end of
the free queue (``FreeKVCacheBlockQueue``) still cached, so the queue's head is the least recently freed: a new
block takes an empty slot or evicts that head. A request's blocks are freed tail first
(``KVCacheManager.free`` frees them in reverse order), so its head leaves the cache last. A request's partial last
block and its generated tokens are held as anonymous slots (their hashes are the request's own: no other prompt of
a trace can hit them); a preempted request that comes back finds its generated blocks again only when
``keep_generated`` keys them (vLLM's default: every full block is hashed, generated ones too).
"""

from collections import OrderedDict

__all__ = ["BlockPool"]


class BlockPool:
    """``blocks`` slots of ``block_tokens`` tokens: keyed blocks held (``held``: key -> holders) or free and cached
    (``cached``, least recently freed first), anonymous held slots (``anonymous``), and the rest empty. Keys being
    loaded (``pending``) are held but not found by a lookup until their copy completes."""

    def __init__(self, blocks, block_tokens):
        self.blocks = blocks
        self.block_tokens = block_tokens
        self.held = {}
        self.cached = OrderedDict()
        self.anonymous = 0
        self.pending = set()
        self.victims = None  # a list that receives (key, block_tokens) of every evicted block (write-back), or None

    def __contains__(self, key):
        return key in self.cached or (key in self.held and key not in self.pending)

    @property
    def available(self):
        """Slots a request can take: empty or cached and free."""
        return self.blocks - len(self.held) - self.anonymous

    def prefix_end(self, keys, start=0):
        """Index of the first of ``keys[start:]`` a lookup does not find."""
        cached, held, pending = self.cached, self.held, self.pending
        for index in range(start, len(keys)):
            key = keys[index]
            if key not in cached and (key not in held or key in pending):
                return index
        return len(keys)

    def needed(self, keys, anonymous=0):
        """Of :attr:`available`, what holding ``keys`` (distinct) and ``anonymous`` more would take (a held key is
        shared; a cached one is taken out of the free queue)."""
        return anonymous + len(keys) - len(self.held.keys() & keys)

    def hold(self, keys, anonymous=0, pending=False):
        """Hold ``keys`` (distinct; found or new) and ``anonymous`` slots; False, changing nothing, where they do not
        fit. (A run of keys not held goes in at once, by the dictionaries' own loops; keys all held already, as a
        store's, are only counted again.)"""
        held = self.held
        shared = held.keys() & keys if keys and not held.keys().isdisjoint(keys) else ()
        if anonymous + len(keys) - len(shared) > self.blocks - len(held) - self.anonymous:
            return False
        cached = self.cached
        if len(keys) > 1 and len(set(keys)) < len(keys):  # a request naming a block twice (a crafted trace): each
            for key in keys:  # time one more holder, as the compiled loop counts (kernel.pool_hold)
                if key in held:
                    held[key] += 1
                else:
                    cached.pop(key, None)
                    held[key] = 1
                    if pending:
                        self.pending.add(key)
        elif len(shared) < len(keys):  # some not held: out of the free queue (if there), held once
            for key in cached.keys() & keys:
                del cached[key]
            if shared:
                counts = {key: held[key] + 1 for key in shared}
                held.update(dict.fromkeys(keys, 1))
                held.update(counts)
            else:
                held.update(dict.fromkeys(keys, 1))
            if pending:
                self.pending.update(key for key in keys if key not in shared)
        else:
            for key in shared:
                held[key] += 1
        self.anonymous += anonymous
        excess = len(held) + len(cached) + self.anonymous - self.blocks
        if excess > 0:
            pop = cached.popitem
            victims = self.victims
            if victims is None:
                for _ in range(excess):
                    pop(False)
            else:
                unit = self.block_tokens
                for _ in range(excess):
                    victims.append((pop(False)[0], unit))
        return True

    def loaded(self, keys):
        """Their copy from the CPU completed: a lookup finds them."""
        self.pending.difference_update(keys)

    def release(self, keys, anonymous=0):
        """Let go of ``keys`` (in the order they join the free queue: tail first) and ``anonymous`` slots."""
        held, cached = self.held, self.cached
        for key in keys:
            count = held[key]
            if count > 1:
                held[key] = count - 1
            else:  # its last holder: it joins the free queue
                del held[key]
                cached[key] = None
        if self.pending:
            self.pending.difference_update(keys)
        self.anonymous -= anonymous

    def uncounted(self, keys):
        """A hold of ``keys`` that was never counted ends (their holder held them throughout): as :meth:`release`,
        the counts aside."""
        if self.pending:
            self.pending.difference_update(keys)

    def park(self, keys, anonymous):
        """Let go of ``anonymous`` slots, ``keys`` (as many or fewer) kept cached in that order (generated blocks a
        preempted or finished request keyed), the rest emptied."""
        cached = self.cached
        for key in keys:
            cached.pop(key, None)
            cached[key] = None
        self.anonymous -= anonymous
