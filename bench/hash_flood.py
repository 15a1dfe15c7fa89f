"""Hash flooding: ids crafted to share one slot under a fixed hash, against kvlab's interner (simple tabulation
with random tables, kvlab/workloads/dense.py), beside the fixed Fibonacci hash it replaced, in one run.

``python bench/hash_flood.py [--ids N]``: per hash and per id set (crafted, random), the CPU seconds of interning
N ids and the mean slots looked at per lookup. The crafted ids collide under the fixed hash at every table size
up to 2**22 slots: ``x ^ (x >> 29)`` keeps its low 22 bits zero when they equal bits 29-50 of ``x``, and
``x = id * 0x9E3779B97F4A7C15`` is solved for ``id`` with the multiplier's inverse modulo 2**64.
"""

import argparse
import time

import numpy as np
from numba import njit

from kvlab.workloads.dense import Interner

GOLDEN = 0x9E3779B97F4A7C15
LOW = 22


def crafted(count, seed=1):
    """``count`` distinct ids that the fixed hash sends to slot 0 of any table of at most 2**22 slots."""
    rng = np.random.default_rng(seed)
    inverse = pow(GOLDEN, -1, 2**64)
    ids = set()
    while len(ids) < count:
        high = int(rng.integers(1, 2**41)) << LOW
        x = high | ((high >> 29) & (2**LOW - 1))
        ids.add((x * inverse) % 2**64 - (2**64 if (x * inverse) % 2**64 >= 2**63 else 0))
    return np.array(sorted(ids), dtype=np.int64)


@njit(cache=False)
def _fixed(values, slots):
    """The replaced interner's table: Fibonacci hashing and linear probing; the slots it looked at."""
    hashes = np.zeros(slots, dtype=np.int64)
    used = np.zeros(slots, dtype=np.bool_)
    mask = slots - 1
    probes = 0
    for value in values:
        mixed = np.uint64(value) * np.uint64(GOLDEN)
        slot = np.int64((mixed ^ (mixed >> np.uint64(29))) & np.uint64(mask))
        while True:
            probes += 1
            if not used[slot]:
                used[slot] = True
                hashes[slot] = value
                break
            if hashes[slot] == value:
                break
            slot = (slot + 1) & mask
    return probes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=100_000)
    args = parser.parse_args()
    sets = {"crafted": crafted(args.ids), "random": np.random.default_rng(2).integers(-(2**63), 2**63, args.ids)}
    slots = 1 << int(np.ceil(np.log2(2 * args.ids)))
    _fixed(sets["random"][:10], 16)
    Interner().dense(sets["random"][:10])  # compiled before the clock starts
    print(f"{args.ids:,} ids, a table of {slots:,} slots (at most half full)")
    print(f"{'hash':<22} {'ids':<8} {'CPU s':>8} {'probes per lookup':>18}")
    for name, values in sets.items():
        start = time.process_time()
        probes = _fixed(values, slots)
        print(f"{'fixed (Fibonacci)':<22} {name:<8} {time.process_time() - start:8.3f} {probes / len(values):18.2f}")
        interner = Interner(slots=slots)
        start = time.process_time()
        interner.dense(values)
        seconds = time.process_time() - start
        print(f"{'tabulation (kvlab)':<22} {name:<8} {seconds:8.3f} {interner.probes / len(values):18.2f}")


if __name__ == "__main__":
    main()
