"""Dense ids ``0, 1, 2, ...`` for a trace's 64-bit hash ids, in order of first appearance, by an open-addressing
hash table in a compiled loop: a tier's state is then a few arrays indexed by id (``kvlab/workloads/stream.py``).

The table's slots come from simple tabulation hashing with tables drawn at random per table (Pătraşcu and
Thorup, "The power of simple tabulation hashing", J. ACM 59(3), 2012: linear probing takes expected constant
time per lookup for any set of keys). A fixed hash (Fibonacci hashing, as before) lets a trace be written whose
ids all land in one slot, which made every lookup scan the whole table: a 8.6 MB trace ran for minutes. The
ids a trace gets do not depend on the draw, only the table's layout does, so every result stays the same.
"""

import os

import numpy as np
from numba import njit

from kvlab.util.kernels import discard_damaged

discard_damaged(__file__)  # a damaged cache of this module's kernels compiles again, not fails

__all__ = ["Interner"]

EMPTY = np.int32(-1)  # a free slot of the hash table
# Dense ids are int32 (12 bytes a slot, the table at most half full): a workload held in memory has far fewer
# than 2**31 distinct blocks.


def random_tables():
    """The eight tables of 256 random 64-bit words (one per byte of an id) of one hash function."""
    return np.frombuffer(os.urandom(8 * 256 * 8), dtype=np.uint64).reshape(8, 256).copy()


class Interner:
    """Dense ids ``0, 1, ...`` for 64-bit hash ids, in order of first appearance (an open-addressing table)."""

    def __init__(self, slots=1 << 16, tables=None):
        self.hashes = np.zeros(slots, dtype=np.int64)
        self.ids = np.full(slots, EMPTY, dtype=np.int32)
        self.tables = random_tables() if tables is None else tables
        self.count = 0  # distinct hash ids so far
        self.probes = 0  # slots looked at by all lookups so far (one each, at best): the table's health

    @property
    def nbytes(self):
        return self.hashes.nbytes + self.ids.nbytes + self.tables.nbytes

    def dense(self, hashes):
        """The dense id of each of ``hashes`` (new ones numbered on)."""
        while 2 * (self.count + len(hashes)) > len(self.ids):  # keep the table at most half full
            self.hashes, self.ids = _rehash(self.hashes, self.ids, 2 * len(self.ids), self.tables)
        if self.count + len(hashes) >= 2**31:
            raise ValueError("more than 2**31 distinct blocks: too many to hold in memory")
        out = np.empty(len(hashes), dtype=np.int32)
        values = np.ascontiguousarray(hashes, dtype=np.int64)
        self.count, probes = _intern(self.hashes, self.ids, self.count, values, out, self.tables)
        self.probes += probes
        return out


@njit(cache=True)
def _slot(value, mask, tables):
    """Simple tabulation: the XOR of one random word per byte of the id."""
    key = np.uint64(value)
    mixed = np.uint64(0)
    for byte in range(8):
        mixed ^= tables[byte, (key >> np.uint64(8 * byte)) & np.uint64(255)]
    return np.int64(mixed & np.uint64(mask))


@njit(cache=True)
def _intern(hashes, ids, count, values, out, tables):
    mask = len(ids) - 1
    probes = 0
    for i in range(len(values)):
        value = values[i]
        slot = _slot(value, mask, tables)
        while True:
            probes += 1
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
    return count, probes


@njit(cache=True)
def _rehash(hashes, ids, slots, tables):
    new_hashes = np.zeros(slots, dtype=np.int64)
    new_ids = np.full(slots, EMPTY, dtype=np.int32)
    mask = slots - 1
    for old in range(len(ids)):
        if ids[old] != EMPTY:
            slot = _slot(hashes[old], mask, tables)
            while new_ids[slot] != EMPTY:
                slot = (slot + 1) & mask
            new_hashes[slot] = hashes[old]
            new_ids[slot] = ids[old]
    return new_hashes, new_ids


@njit(cache=True)
def pieces_of(ids, counts, pieces, split):
    """``kvlab.workloads.stream.split_blocks``' keys: per request its ``pieces`` keys, piece ``j`` of its trace block
    ``i`` keyed ``ids[i] * split + j``."""
    out = np.empty(pieces.sum(), dtype=np.int64)
    start = written = 0
    for request in range(len(counts)):
        for within in range(pieces[request]):
            out[written] = ids[start + within // split] * split + within % split
            written += 1
        start += counts[request]
    return out
