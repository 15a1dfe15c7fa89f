"""A router's own record of the prefixes it sent where (no events from the engines): llm-d's approximate prefix
cache (``pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/indexer.go``: an LRU of block hashes
per pod, one map from a hash to its pods) and SGLang router's radix tree (``sgl-router/src/policies/tree.rs``: one
tree, each node's tenants, LRU eviction per tenant). A block key stands for its whole prefix (the trace's hash ids
and kvlab's keys are chained), so a tree's path is its last key."""

from collections import OrderedDict

__all__ = ["RoutedIndex"]


class RoutedIndex:
    """Per instance an LRU of at most ``capacity`` block keys (None: unbounded); ``owners`` maps a key to the
    instances holding it, in the order they got it."""

    def __init__(self, size, capacity=None):
        self.lrus = [OrderedDict() for _ in range(size)]
        self.owners = {}
        self.capacity = capacity

    def record(self, index, keys, leaves_first=False):
        """Instance ``index`` was sent a request of ``keys``: each is its most recent, the last most of all (llm-d
        adds them in order), or with ``leaves_first`` the first most of all (a tree evicts its leaves first)."""
        lru, owners = self.lrus[index], self.owners
        for key in reversed(keys) if leaves_first else keys:
            if key in lru:
                lru.move_to_end(key)
                continue
            lru[key] = None
            owners.setdefault(key, {})[index] = None
        while self.capacity is not None and len(lru) > self.capacity:
            key, _ = lru.popitem(last=False)
            held = owners[key]
            del held[index]
            if not held:
                del owners[key]

    def matched(self, keys):
        """``(counts, holders, length)``: per instance, the keys it holds of the head of ``keys`` that some instance
        holds (llm-d's ``matchLongestPrefix``: the walk stops at the first key none holds), the instances holding the
        last of that head, in the order they got it (SGLang's deepest matched node's tenants), and its length."""
        counts = [0] * len(self.lrus)
        owners, last, length = self.owners, (), 0
        for key in keys:
            held = owners.get(key)
            if not held:
                break
            for index in held:
                counts[index] += 1
            last = held
            length += 1
        return counts, list(last), length

    def size(self, index):
        """Keys instance ``index`` holds in the record (SGLang's tenant size; Dynamo's tree size)."""
        return len(self.lrus[index])
