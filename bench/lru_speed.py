"""The lab's ``LRUCache.access`` beside a bare OrderedDict loop, cachetools and libCacheSim, in one run.

One seeded trace (``bench/zipf_trace.py``: 2,000,000 requests, Zipf 0.9 over 100,000 objects of
1..10,000 tokens), one capacity (10% of the distinct size). All four apply the same rule (a miss
evicts least recent entries until the new one fits; an entry larger than the cache is not stored)
and must count the same hits:

* ``LRUCache``: ``kvlab.kvsim.LRUCache(capacity).access(key, size)`` per request, a method call each.
* ``bare loop``: the same OrderedDict work written inline in the loop: the least any Python LRU does.
* ``cachetools``: ``cachetools.LRUCache(maxsize, getsizeof)``, a hit read and a miss stored.
* ``libCacheSim``: its C ``process_trace`` over the trace's oracleGeneral file.

Targets: ``LRUCache`` at least 0.7x the bare loop's speed and 3x cachetools'. Each Python side runs
``--repeat`` times, interleaved; the best time counts. Needs the bench extra (``make bench``).
Usage: ``.venv/bin/python bench/lru_speed.py [--repeat 5] [--accesses N]``.
"""

import argparse
import sys
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import cachetools  # noqa: E402
import libcachesim  # noqa: E402
from zipf_trace import distinct_size, write_oracle_general, zipf_trace  # noqa: E402

from kvlab.kvsim import LRUCache  # noqa: E402


def lab_cache(keys, sizes, capacity):
    access = LRUCache(capacity).access
    hits = 0
    for key, size in zip(keys, sizes, strict=True):
        if access(key, size):
            hits += 1
    return hits


def bare_loop(keys, sizes, capacity):
    cache = OrderedDict()
    move = cache.move_to_end
    pop = cache.popitem
    used = hits = 0
    for key, size in zip(keys, sizes, strict=True):
        if key in cache:
            move(key)
            hits += 1
            continue
        if size > capacity:
            continue
        while used > capacity - size:
            used -= pop(False)[1]
        cache[key] = size
        used += size
    return hits


def cachetools_cache(keys, sizes, capacity):
    cache = cachetools.LRUCache(maxsize=capacity, getsizeof=int)
    hits = 0
    for key, size in zip(keys, sizes, strict=True):
        if key in cache:
            cache[key]  # a read refreshes the entry
            hits += 1
            continue
        try:
            cache[key] = size
        except ValueError:  # larger than the whole cache: not stored, nothing evicted
            pass
    return hits


def libcachesim_hits(path, requests, capacity):
    reader = libcachesim.TraceReader(str(path), libcachesim.TraceType.ORACLE_GENERAL_TRACE)
    miss_ratio, _ = libcachesim.LRU(capacity).process_trace(reader)
    return round((1 - miss_ratio) * requests)


def timed(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--accesses", type=int, default=2_000_000)
    args = parser.parse_args(argv)
    key_array, size_array = zipf_trace(accesses=args.accesses)
    capacity = distinct_size(key_array, size_array) // 10
    keys, sizes = key_array.tolist(), size_array.tolist()
    print(f"{len(keys):,} requests, {len(set(keys)):,} objects, capacity {capacity:,} (10% of distinct)")
    sides = {"LRUCache": lab_cache, "bare loop": bare_loop, "cachetools": cachetools_cache}
    best, hits = {}, {}
    for _ in range(args.repeat):
        for name, function in sides.items():
            seconds, hits[name] = timed(function, keys, sizes, capacity)
            best[name] = min(best.get(name, seconds), seconds)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "zipf.oracleGeneral"
        write_oracle_general(path, key_array, size_array)
        for _ in range(args.repeat):
            seconds, hits["libCacheSim"] = timed(libcachesim_hits, path, len(keys), capacity)
            best["libCacheSim"] = min(best.get("libCacheSim", seconds), seconds)
    if len(set(hits.values())) != 1:
        sys.exit(f"the caches disagree on the hits: {hits}")
    print(f"all four: {hits['LRUCache']:,} hits")
    print(f"{'side':<12} {'best s':>8} {'M req/s':>8} {'vs bare':>8}")
    for name, seconds in best.items():
        print(f"{name:<12} {seconds:8.3f} {len(keys) / seconds / 1e6:8.2f} {best['bare loop'] / seconds:8.2f}")
    lab = best["LRUCache"]
    print(
        f"LRUCache: {best['bare loop'] / lab:.2f}x the bare loop (target 0.7),"
        f" {best['cachetools'] / lab:.2f}x cachetools (target 3)"
    )


if __name__ == "__main__":
    main()
