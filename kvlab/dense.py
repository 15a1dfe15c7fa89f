"""Dense ids ``0, 1, 2, ...`` for a trace's 64-bit hash ids, in order of first appearance, by an open-addressing
hash table in a compiled loop: a tier's state is then a few arrays indexed by id (``kvlab/stream.py``)."""

import numpy as np
from numba import njit

__all__ = ["Interner"]

EMPTY = np.int32(-1)  # a free slot of the hash table
# Dense ids are int32 (12 bytes a slot, the table at most half full): a workload held in memory has far fewer
# than 2**31 distinct blocks.


class Interner:
    """Dense ids ``0, 1, ...`` for 64-bit hash ids, in order of first appearance (an open-addressing table)."""

    def __init__(self, slots=1 << 16):
        self.hashes = np.zeros(slots, dtype=np.int64)
        self.ids = np.full(slots, EMPTY, dtype=np.int32)
        self.count = 0  # distinct hash ids so far

    @property
    def nbytes(self):
        return self.hashes.nbytes + self.ids.nbytes

    def dense(self, hashes):
        """The dense id of each of ``hashes`` (new ones numbered on)."""
        while 2 * (self.count + len(hashes)) > len(self.ids):  # keep the table at most half full
            self.hashes, self.ids = _rehash(self.hashes, self.ids, 2 * len(self.ids))
        if self.count + len(hashes) >= 2**31:
            raise ValueError("more than 2**31 distinct blocks: too many to hold in memory")
        out = np.empty(len(hashes), dtype=np.int32)
        self.count = _intern(self.hashes, self.ids, self.count, np.ascontiguousarray(hashes, dtype=np.int64), out)
        return out


@njit(cache=True)
def _slot(value, mask):
    """Fibonacci hashing: the top bits of the product spread any pattern of ids over the table."""
    mixed = np.uint64(value) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64((mixed ^ (mixed >> np.uint64(29))) & np.uint64(mask))


@njit(cache=True)
def _intern(hashes, ids, count, values, out):
    mask = len(ids) - 1
    for i in range(len(values)):
        value = values[i]
        slot = _slot(value, mask)
        while True:
            found = ids[slot]
            if found == EMPTY:
                hashes[slot] = value
                ids[slot] = count
                out[i] = count
                count += 1
                break
            if hashes[slot] == value:
                out[i] = found
                break
            slot = (slot + 1) & mask
    return count


@njit(cache=True)
def _rehash(hashes, ids, slots):
    new_hashes = np.zeros(slots, dtype=np.int64)
    new_ids = np.full(slots, EMPTY, dtype=np.int32)
    mask = slots - 1
    for old in range(len(ids)):
        if ids[old] != EMPTY:
            slot = _slot(hashes[old], mask)
            while new_ids[slot] != EMPTY:
                slot = (slot + 1) & mask
            new_hashes[slot] = hashes[old]
            new_ids[slot] = ids[old]
    return new_hashes, new_ids
