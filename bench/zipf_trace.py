"""The benchmarks' seeded synthetic trace: Zipf-popular objects of random sizes, and its libCacheSim file.

Object ``i`` (rank ``i + 1``) is requested with probability proportional to ``(i + 1) ** -alpha``;
each object has one size drawn uniformly from ``1 .. max_size``. The same seed gives the same trace.
"""

import numpy as np

ORACLE_GENERAL = np.dtype([("time", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])


def zipf_trace(seed=42, accesses=2_000_000, objects=100_000, alpha=0.9, max_size=10_000):
    """``(keys, sizes)`` as int64 arrays of ``accesses`` requests."""
    rng = np.random.default_rng(seed)
    weights = np.arange(1, objects + 1, dtype=np.float64) ** -alpha
    keys = rng.choice(objects, size=accesses, p=weights / weights.sum()).astype(np.int64)
    sizes = rng.integers(1, max_size + 1, size=objects, dtype=np.int64)[keys]
    return keys, sizes


def distinct_size(keys, sizes):
    """The size of every object the trace requests, once each."""
    _, first = np.unique(keys, return_index=True)
    return int(sizes[first].sum())


def write_oracle_general(path, keys, sizes):
    """The trace in libCacheSim's binary oracleGeneral format (no next-access times: -1)."""
    records = np.zeros(len(keys), dtype=ORACLE_GENERAL)
    records["time"] = np.arange(len(keys))
    records["id"] = keys
    records["size"] = sizes
    records["next"] = -1
    records.tofile(path)
