"""The exact LRU curve of a tier whose blocks all have one size, in one compiled pass and a few bytes per access.

When every stored block has the same size ``B`` (the default: only full blocks are stored), LRU at room ``C``
holds the ``C // B`` most recently used blocks, so a block last accessed at ``p`` is present at time ``t`` from
room ``B x (1 + distinct blocks accessed in (p, t))`` on (Mattson's stack distance; the distinct count is a
Fenwick tree over the tier's accesses with a mark at each block's latest one). A request's block is served from
the largest such room among the blocks before it in the request (a prefix is served whole). Each served block
adds its tokens at that room, per round; the curve is the running sum over rooms.

The general algorithm (``kvlab/curves/stack_distance.py``) gives the same curve for any sizes, with more state
per access; ``kvlab/curves/mrc.py`` chooses.
"""

import numpy as np
from numba import njit

from kvlab.util.kernels import discard_damaged

discard_damaged(__file__)  # a damaged cache of this module's kernels compiles again, not fails

__all__ = ["equal_sizes", "levels"]


def equal_sizes(columns, block, keep_partial):
    """Whether every block the tier stores has one size (``block``): no partial block is stored."""
    if not keep_partial:
        return True
    stored = columns.counts > 0
    last = columns.tokens[stored] - block * (columns.counts[stored] - 1)
    return bool(np.all(last == block))


def levels(columns, rounds, first, block, keep_partial, tail_first, keys):
    """Tokens served per round at each room ``B x level``: an array ``(rounds, keys + 2)``, where ``first`` is
    each request's first block that this tier is asked for (the GPU served those before it)."""
    served = np.zeros((rounds, keys + 2), dtype=np.int64)
    latest = np.full(keys, -1, dtype=np.int32 if len(columns.keys) < 2**31 else np.int64)  # a key's latest access
    _levels(
        columns.keys,
        columns.counts,
        columns.tokens,
        columns.rounds,
        first,
        block,
        keep_partial,
        tail_first,
        latest,
        served,
    )
    return served


@njit(cache=True)
def _levels(keys, counts, tokens, rounds, first, block, keep_partial, tail_first, latest, served):
    tree = np.zeros(len(keys) + 1, dtype=np.int32)  # Fenwick tree over the tier's access times
    now = 0
    start = 0
    for request in range(len(counts)):
        count = counts[request]
        if count == 0:
            continue
        length = tokens[request]
        last = length - block * (count - 1)
        full = count if last == block else count - 1
        stored = count if keep_partial else full
        level = 0  # the room (in blocks) from which the prefix so far is served
        for index in range(first[request], count):
            previous = latest[keys[start + index]]
            if previous < 0:
                break  # never stored here: neither it nor anything after it is served
            between = _prefix(tree, now) - _prefix(tree, previous + 1)
            if between + 1 > level:
                level = between + 1
            served[rounds[request], level] += block if index < count - 1 else last
        hit = min(first[request], stored)
        for step in range(stored - hit):
            index = stored - 1 - step if tail_first else hit + step
            key = keys[start + index]
            if latest[key] >= 0:
                _add(tree, latest[key], -1)
            _add(tree, now, 1)
            latest[key] = now
            now += 1
        start += count


@njit(cache=True, inline="always")
def _add(tree, index, value):
    index += 1
    while index < len(tree):
        tree[index] += value
        index += index & -index


@njit(cache=True, inline="always")
def _prefix(tree, index):
    """Sum of the marks at times ``[0, index)``."""
    total = 0
    while index > 0:
        total += tree[index]
        index -= index & -index
    return total
