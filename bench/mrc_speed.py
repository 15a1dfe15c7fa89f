"""The exact all-capacity LRU curve beside libCacheSim's LRU run at 50 capacities, in one run.

One seeded trace (``bench/zipf_trace.py``: 2,000,000 requests, Zipf 0.9 over 100,000 objects of
1..10,000 tokens). ``kvlab.curves.mrc.lru_curve`` computes the hits at every capacity in one pass
(numba; compiled once and cached, the compile is timed apart); libCacheSim's C ``process_trace``
runs once per capacity, at 50 capacities from 2% to 100% of the distinct size. Both must agree
on the hits at all 50. Target: the exact curve in less time than the 50 C runs. Needs the bench
extra (``make bench``). Usage: ``.venv/bin/python bench/mrc_speed.py [--capacities 50]``.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import numpy as np  # noqa: E402
from lru_speed import libcachesim_hits  # noqa: E402
from zipf_trace import distinct_size, write_oracle_general, zipf_trace  # noqa: E402

from kvlab.curves.mrc import lru_curve  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacities", type=int, default=50)
    parser.add_argument("--accesses", type=int, default=2_000_000)
    args = parser.parse_args(argv)
    keys, sizes = zipf_trace(accesses=args.accesses)
    distinct = distinct_size(keys, sizes)
    capacities = [distinct * step // args.capacities for step in range(1, args.capacities + 1)]
    print(f"{len(keys):,} requests, distinct size {distinct:,}, {args.capacities} capacities")

    start = time.perf_counter()
    lru_curve(keys[:3], sizes[:3])  # compile (or load numba's cache) on a tiny trace
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    curve = lru_curve(keys, sizes)
    exact_seconds = time.perf_counter() - start

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "zipf.oracleGeneral"
        write_oracle_general(path, keys, sizes)
        start = time.perf_counter()
        simulated = [libcachesim_hits(path, len(keys), capacity) for capacity in capacities]
        simulated_seconds = time.perf_counter() - start

    exact = [int(curve.at(capacity)[0]) for capacity in capacities]
    if exact != simulated:
        wrong = [(c, e, s) for c, e, s in zip(capacities, exact, simulated, strict=True) if e != s]
        sys.exit(f"exact curve and libCacheSim disagree at {len(wrong)} capacities, first: {wrong[0]}")
    print(f"hits agree at all {len(capacities)} capacities ({exact[0]:,} .. {exact[-1]:,})")
    print(
        f"exact curve, every capacity: {exact_seconds:6.2f} s ({len(curve.capacities):,} steps;"
        f" compile or cache load {compile_seconds:.2f} s apart)"
    )
    print(
        f"libCacheSim, {len(capacities)} runs:      {simulated_seconds:6.2f} s"
        f" ({simulated_seconds / len(capacities):.3f} s each)"
    )
    print(f"exact / libCacheSim: {exact_seconds / simulated_seconds:.2f} (target below 1)")
    non_monotone = int(np.sum(np.diff(curve.total()) < 0))
    print(f"capacities where a larger cache hits less (entries larger than the cache): {non_monotone:,}")


if __name__ == "__main__":
    main()
