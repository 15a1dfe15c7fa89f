"""A router's own record of the prefixes it sent where (no events from the engines): llm-d's approximate prefix
cache (``pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/indexer.go``: an LRU of block hashes
per pod, one map from a hash to its pods) and SGLang router's radix tree (``sgl-router/src/policies/tree.rs``: one
tree, each node's tenants, LRU eviction per tenant). A block key stands for its whole prefix (the trace's hash ids
and kvlab's keys are chained), so a tree's path is its last key."""

from collections import OrderedDict, deque
from itertools import filterfalse, repeat
from operator import or_

__all__ = ["RoutedIndex"]


class RoutedIndex:
    """Per instance an LRU of at most ``capacity`` block keys (None: unbounded), each key with when the instance got
    it (a number that grows with every record: the order the instances holding a key got it); ``owners`` maps a key
    to the instances holding it, one bit each."""

    def __init__(self, size, capacity=None):
        self.lrus = [OrderedDict() for _ in range(size)]
        self.owners = {}
        self.capacity = capacity
        self.records = 0

    def record(self, index, keys, leaves_first=False):
        """Instance ``index`` was sent a request of ``keys``: each is its most recent, the last most of all (llm-d
        adds them in order), or with ``leaves_first`` the first most of all (a tree evicts its leaves first)."""
        lru, owners, bit = self.lrus[index], self.owners, 1 << index
        order = keys[::-1] if leaves_first else keys
        self.records += 1
        # loops in C (a prompt has hundreds of blocks): the new ones owned and got now, then each the most recent
        fresh = list(filterfalse(lru.__contains__, order))
        owners.update(zip(fresh, map(or_, map(owners.get, fresh, repeat(0)), repeat(bit)), strict=True))
        deque(map(lru.setdefault, fresh, repeat(self.records)), maxlen=0)
        deque(map(lru.move_to_end, order), maxlen=0)
        if self.capacity is not None:
            for _ in range(len(lru) - self.capacity):
                key, _ = lru.popitem(last=False)
                left = owners[key] & ~bit
                if left:
                    owners[key] = left
                else:
                    del owners[key]

    def matched(self, keys):
        """``(counts, holders, length)``: per instance, the keys it holds of the head of ``keys`` that some instance
        holds (llm-d's ``matchLongestPrefix``: the walk stops at the first key none holds), the instances holding the
        last of that head, in the order they got it (SGLang's deepest matched node's tenants), and its length."""
        counts = [0] * len(self.lrus)
        owners, last, length = self.owners, 0, 0
        for key in keys:
            held = owners.get(key)
            if not held:
                break
            last, length = held, length + 1
            while held:
                low = held & -held
                counts[low.bit_length() - 1] += 1
                held ^= low
        holders = [index for index in range(len(self.lrus)) if last >> index & 1]
        if length:
            holders.sort(key=lambda index: self.lrus[index][keys[length - 1]])
        return counts, holders, length

    def size(self, index):
        """Keys instance ``index`` holds in the record (SGLang's tenant size; Dynamo's tree size)."""
        return len(self.lrus[index])
