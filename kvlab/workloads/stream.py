"""A workload as typed arrays, batch by batch: what the compiled engines read (``kvlab/cache/compiled.py``,
``kvlab/curves/equal_sizes.py``).

A batch holds consecutive requests: per request its round, label, tokens and number of blocks, and the keys of
all their blocks as dense ids ``0, 1, 2, ...`` in order of first appearance, so a tier's state is a few arrays
indexed by key instead of a dict of Python objects (a trace's hash ids are made dense by ``kvlab/workloads/dense.py``).
"""

import itertools
from typing import NamedTuple

import numpy as np

__all__ = [
    "Columns",
    "columns_of",
    "concatenate",
    "group_blocks",
    "load",
    "requests_of",
    "round_sums",
    "split_blocks",
]


class Columns(NamedTuple):
    """Consecutive requests of a workload (a batch, or all of it)."""

    rounds: np.ndarray  # int64: index into the workload's rounds
    labels: np.ndarray  # int64 or float64: what the per-request table shows (a document, a timestamp)
    tokens: np.ndarray  # int64: prompt length
    counts: np.ndarray  # int64: blocks per request
    keys: np.ndarray  # int32: dense block keys of every request, request after request, head first

    @property
    def starts(self):
        """Where each request's keys begin in ``keys`` (and, last, where they end)."""
        return np.concatenate(([0], np.cumsum(self.counts)))


def concatenate(batches):
    """One :class:`Columns` of all ``batches`` (an empty one if there are none)."""
    batches = list(batches)
    if not batches:
        empty = np.zeros(0, dtype=np.int64)
        return Columns(empty, empty, empty, empty, empty.astype(np.int32))
    return Columns(*(np.concatenate(column) for column in zip(*batches, strict=True)))


def load(workload, meter=None):
    """The whole workload as one :class:`Columns`, and its number of distinct keys; ``meter``
    (:class:`kvlab.util.memory.Meter`) is checked after every batch, so a workload too large stops early."""
    parts, accesses, requests, keys = [], 0, 0, 0
    for columns in workload.batches():
        parts.append(columns)
        accesses += len(columns.keys)
        requests += len(columns.counts)
        if len(columns.keys):
            keys = max(keys, int(columns.keys.max()) + 1)
        if meter is not None:
            meter.check(accesses, requests, keys, workload.read_fraction)
    return concatenate(parts), keys


def requests_of(columns):
    """Yield ``(round, label, keys, tokens)`` of each request, as Python objects (for the reference engines)."""
    keys = columns.keys.tolist()
    start = 0
    rows = zip(
        columns.rounds.tolist(), columns.labels.tolist(), columns.tokens.tolist(), columns.counts.tolist(), strict=True
    )
    for round_index, label, tokens, count in rows:
        yield round_index, label, keys[start : start + count], tokens
        start += count


def columns_of(requests, batch=1 << 16):
    """:class:`Columns` of Python requests (``round, label, keys, tokens`` each), keys made dense in order of
    first appearance: any workload's batches, the slow way."""
    dense = {}
    requests = iter(requests)
    while True:
        chunk = list(itertools.islice(requests, batch))
        if not chunk:
            return
        rounds, labels, keys, tokens = zip(*chunk, strict=True)
        ids = [dense.setdefault(key, len(dense)) for request in keys for key in request]
        yield Columns(
            np.array(rounds, dtype=np.int64),
            np.array(labels),
            np.array(tokens, dtype=np.int64),
            np.array([len(request) for request in keys], dtype=np.int64),
            np.array(ids, dtype=np.int32),
        )


def round_sums(rounds, values, count):
    """Per round, the sum of ``values`` (int64, exact)."""
    sums = np.zeros(count, dtype=np.int64)
    np.add.at(sums, rounds, values)
    return sums


def group_blocks(ids, counts, group):
    """Blocks of ``group`` trace blocks: the last id of each group of ``group`` (and of the rest), per request.

    A trace's hash ids are chained (each stands for its whole prefix), so the last id of a group keys it.
    """
    if group == 1:
        return ids, counts
    grouped = -(-counts // group)
    request = np.repeat(np.arange(len(counts)), grouped)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1])) if len(counts) else counts
    within = np.arange(int(grouped.sum())) - np.repeat(np.cumsum(grouped) - grouped, grouped)
    return ids[starts[request] + np.minimum((within + 1) * group, counts[request]) - 1], grouped


def split_blocks(ids, counts, tokens, split, block):
    """Blocks of ``1/split`` of a trace block, per request: ``ceil(tokens / block)`` of them, piece ``j`` of trace
    block ``i`` keyed ``ids[i] * split + j`` (``ids`` dense, from 0: the keys stay distinct and within 64 bits).

    A trace block's id stands for its whole prefix, so its ``j``-th piece is the same wherever that id is.
    """
    from kvlab.workloads.dense import pieces_of  # one compiled pass (numpy's took 0.06-0.3 s of temporaries a trace)

    pieces = -(-tokens // block)
    return pieces_of(np.ascontiguousarray(ids, dtype=np.int64), counts, pieces, split), pieces
