"""A router's own record of the prefixes it sent where (no events from the engines): llm-d's approximate prefix
cache (``pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/indexer.go``: an LRU of block hashes
per pod, one map from a hash to its pods) and SGLang router's radix tree (``sgl-router/src/policies/tree.rs``: one
tree, each node's tenants, LRU eviction per tenant). A block key stands for its whole prefix (the trace's hash ids
and kvlab's keys are chained), so a tree's path is its last key."""

from collections import OrderedDict, deque
from itertools import repeat

__all__ = ["RoutedIndex"]


class RoutedIndex:
    """Per instance an LRU of at most ``capacity`` block keys (None: unbounded), each key with when the instance got
    it (a number that grows with every record: the order the instances holding a key got it)."""

    def __init__(self, size, capacity=None):
        self.lrus = [OrderedDict() for _ in range(size)]
        self.capacity = capacity
        self.records = 0

    def record(self, index, keys, leaves_first=False):
        """Instance ``index`` was sent a request of ``keys``: each is its most recent, the last most of all (llm-d
        adds them in order), or with ``leaves_first`` the first most of all (a tree evicts its leaves first)."""
        lru, order = self.lrus[index], keys[::-1] if leaves_first else keys
        self.records += 1
        # loops in C (a prompt has hundreds of blocks): the new ones got now, then each in turn the most recent
        deque(map(lru.setdefault, order, repeat(self.records)), maxlen=0)
        deque(map(lru.move_to_end, order), maxlen=0)
        if self.capacity is not None:
            for _ in range(len(lru) - self.capacity):
                lru.popitem(last=False)

    def matched(self, keys):
        """``(counts, holders, length)``: per instance, the keys it holds of the head of ``keys`` that some instance
        holds (llm-d's ``matchLongestPrefix``: the walk stops at the first key none holds), the instances holding the
        last of that head, in the order they got it (SGLang's deepest matched node's tenants), and its length."""
        lrus = self.lrus
        counts = [0] * len(lrus)
        last, length = [], 0
        for key in keys:
            holders = [index for index, lru in enumerate(lrus) if key in lru]
            if not holders:
                break
            for index in holders:
                counts[index] += 1
            last, length = holders, length + 1
        if length:
            last.sort(key=lambda index: lrus[index][keys[length - 1]])
        return counts, last, length

    def size(self, index):
        """Keys instance ``index`` holds in the record (SGLang's tenant size; Dynamo's tree size)."""
        return len(self.lrus[index])
