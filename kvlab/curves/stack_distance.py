"""Where an LRU cache with sized entries holds a key, at every capacity at once (numba carries the loop).

The rule is the lab's ``LRUCache``: a miss evicts the least recent entries until the new one fits,
and an entry larger than the whole capacity is neither stored nor allowed to evict. At capacity C
the cache then holds the longest run of the recency stack, most recent first, whose sizes add up
to at most C, counting only the entries of size <= C (a larger one never entered). So a key last
accessed at ``p`` is present just before access ``t`` at capacity C exactly when

    size + (sizes of the distinct keys accessed in (p, t) whose size is <= C)  <= C.

Without the size rule this is the byte stack distance, and the key is present from one capacity
on. With it the set can have holes (a key survives in a small cache that a larger intervening
entry could not enter, and is evicted by it in a larger one), so the answer per query is a list
of capacity intervals. Sizes are grouped in classes ``[2**c, 2**(c+1))``: inside a class's range
at most one intervening key of that class fits beside another entry, so the two smallest keys of
the class decide, and each query costs O(classes x log n).
"""

import numpy as np
from numba import njit

from kvlab.util.kernels import discard_damaged

discard_damaged(__file__)  # a damaged cache of this module's kernels compiles again, not fails

__all__ = ["INFINITY", "last_positions", "presence_intervals"]

INFINITY = np.int64(2**62)  # the end of an interval that never ends


def last_positions(keys):
    """For each access, the position of the previous access of the same key (-1 for a first access)."""
    keys = np.asarray(keys)
    order = np.argsort(keys, kind="stable")
    previous = np.full(len(keys), -1, dtype=np.int64)
    same = keys[order[1:]] == keys[order[:-1]]
    previous[order[1:][same]] = order[:-1][same]
    return previous


def size_classes(sizes):
    """Class of each size: ``c`` for sizes in ``[2**c, 2**(c+1))``; -1 for size 0 (it never takes room)."""
    powers = np.left_shift(np.int64(1), np.arange(63, dtype=np.int64))  # 2**0 .. 2**62, exact in int64
    return np.searchsorted(powers, np.asarray(sizes, dtype=np.int64), side="right").astype(np.int64) - 1


def presence_intervals(keys, sizes, query_times, query_previous):
    """The capacities at which each queried key is present, as half-open intervals.

    ``keys`` and ``sizes`` are the access stream (each key must keep one size). Query ``j`` asks
    about the key last accessed at ``query_previous[j]`` (-1: never, so absent everywhere), just
    before access ``query_times[j]`` (``len(keys)`` for after the last). Queries must be sorted by
    time. Returns ``(owner, start, end)``: interval ``[start, end)`` belongs to query ``owner``;
    ``end`` is :data:`INFINITY` for the last one; each query's intervals are sorted and disjoint.
    """
    keys = np.ascontiguousarray(keys, dtype=np.int64)
    sizes = np.ascontiguousarray(sizes, dtype=np.int64)
    times = np.ascontiguousarray(query_times, dtype=np.int64)
    previous_of_query = np.ascontiguousarray(query_previous, dtype=np.int64)
    if len(keys) != len(sizes) or len(times) != len(previous_of_query):
        raise ValueError("keys and sizes, query times and previous positions must have equal lengths")
    if len(sizes) and (sizes.min() < 0 or sizes.max() >= INFINITY):
        raise ValueError("sizes must be >= 0 and below 2**62")
    if len(times) and (np.any(np.diff(times) < 0) or times[0] < 0 or times[-1] > len(keys)):
        raise ValueError("query times must be sorted and within the stream")
    if np.any(previous_of_query >= times):
        raise ValueError("a query's previous access must come before its time")
    previous = last_positions(keys)
    _check_one_size(keys, sizes, previous)
    keys = np.unique(keys, return_inverse=True)[1].astype(np.int64)  # ids 0.. : -1 stays the trees' "no key"
    classes = size_classes(sizes)
    count = int(classes.max()) + 1 if len(classes) else 0
    by_class = np.lexsort((np.arange(len(keys)), classes))
    by_class = by_class[classes[by_class] >= 0]
    class_start = np.searchsorted(classes[by_class], np.arange(count + 1)).astype(np.int64)
    local = np.zeros(len(keys), dtype=np.int64)
    local[by_class] = np.arange(len(by_class)) - class_start[classes[by_class]]
    return _intervals(
        keys, sizes, previous, classes, by_class.astype(np.int64), class_start, local, times, previous_of_query
    )


def _check_one_size(keys, sizes, previous):
    again = previous >= 0
    changed = again & (sizes != sizes[np.maximum(previous, 0)])
    if changed.any():
        at = int(np.argmax(changed))
        raise ValueError(
            f"key {keys[at]} has sizes {sizes[previous[at]]} and {sizes[at]}: the exact curve needs one size per key"
        )


@njit(cache=True)
def _add(tree, base, length, index, value):
    """Fenwick update of element ``index`` (0-based) of the tree stored at ``tree[base : base + length]``."""
    index += 1
    while index <= length:
        tree[base + index - 1] += value
        index += index & -index


@njit(cache=True)
def _prefix(tree, base, index):
    """Sum of elements ``[0, index)`` of the Fenwick tree at ``tree[base:]``."""
    total = 0
    while index > 0:
        total += tree[base + index - 1]
        index -= index & -index
    return total


@njit(cache=True)
def _merge(a1, k1, a2, b1, j1, b2):
    """Two smallest sizes of distinct keys of two groups: ``(min, its key, min over other keys)``."""
    if k1 == j1:
        return a1, k1, min(a2, b2)
    if a1 <= b1:
        return a1, k1, min(a2, b1)
    return b1, j1, min(b2, a1)


@njit(cache=True)
def _intervals(keys, sizes, previous, classes, by_class, class_start, local, times, previous_of_query):
    n = keys.shape[0]
    count = class_start.shape[0] - 1
    # Segment trees of (smallest size, its key, smallest size of another key), per class, bottom-up.
    seg_min = np.full(2 * by_class.shape[0] + 1, INFINITY, dtype=np.int64)
    seg_key = np.full(2 * by_class.shape[0] + 1, -1, dtype=np.int64)
    seg_second = np.full(2 * by_class.shape[0] + 1, INFINITY, dtype=np.int64)
    for c in range(count):
        base, length = 2 * class_start[c], class_start[c + 1] - class_start[c]
        for i in range(length):
            position = by_class[class_start[c] + i]
            seg_min[base + length + i] = sizes[position]
            seg_key[base + length + i] = keys[position]
        for node in range(length - 1, 0, -1):
            left, right = base + 2 * node, base + 2 * node + 1
            seg_min[base + node], seg_key[base + node], seg_second[base + node] = _merge(
                seg_min[left], seg_key[left], seg_second[left], seg_min[right], seg_key[right], seg_second[right]
            )
    total_tree = np.zeros(n, dtype=np.int64)  # sizes at the last access of each key, by position
    class_tree = np.zeros(by_class.shape[0], dtype=np.int64)  # the same per class, by class position
    capacity = 4 * times.shape[0] + 16
    owner = np.empty(capacity, dtype=np.int64)
    start = np.empty(capacity, dtype=np.int64)
    end = np.empty(capacity, dtype=np.int64)
    used = 0
    above = np.zeros(count + 1, dtype=np.int64)  # per class c: sizes of intervening keys of classes >= c
    low = np.zeros(count, dtype=np.int64)
    high = np.zeros(count, dtype=np.int64)
    applied = 0
    for q in range(times.shape[0]):
        time = times[q]
        while applied < time:  # the accesses before this query enter the trees
            u = applied
            size, c = sizes[u], classes[u]
            before = previous[u]
            if before >= 0:
                _add(total_tree, 0, n, before, -size)
                if c >= 0:
                    _add(class_tree, class_start[c], class_start[c + 1] - class_start[c], local[before], -size)
            _add(total_tree, 0, n, u, size)
            if c >= 0:
                _add(class_tree, class_start[c], class_start[c + 1] - class_start[c], local[u], size)
            applied += 1
        last = previous_of_query[q]
        if last < 0:
            continue
        size = sizes[last]
        reach = size + _prefix(total_tree, 0, time) - _prefix(total_tree, 0, last + 1)
        first = max(classes[last], 0)
        # Classes present between the two accesses, and the sizes from each class up.
        top = -1
        for c in range(count - 1, -1, -1):
            base = class_start[c]
            length = class_start[c + 1] - base
            low[c] = _search(by_class, base, length, last + 1)
            high[c] = _search(by_class, base, length, time)
            if high[c] > low[c] and top < 0:
                top = c
        above[top + 1] = 0
        for c in range(top, first - 1, -1):
            base = class_start[c]
            above[c] = above[c + 1] + _prefix(class_tree, base, high[c]) - _prefix(class_tree, base, low[c])
        need = max(used + 2 * (top - first + 1) + 4, 0)
        if need > capacity:
            capacity = 2 * need
            owner = _grow(owner, capacity, used)
            start = _grow(start, capacity, used)
            end = _grow(end, capacity, used)
        if size == 0:
            used = _push(owner, start, end, used, q, 0, 1)
        for c in range(first, top + 1):
            floor_c = np.int64(1) << c
            ceiling = np.int64(1) << (c + 1)
            alone = reach - above[c]  # the key's size plus every intervening key of a smaller class
            if alone >= ceiling:
                continue
            smallest, second = INFINITY, INFINITY
            if high[c] > low[c]:
                smallest, second = _two_smallest(
                    seg_min,
                    seg_key,
                    seg_second,
                    2 * class_start[c],
                    class_start[c + 1] - class_start[c],
                    low[c],
                    high[c],
                )
            used = _push(owner, start, end, used, q, max(floor_c, alone), min(smallest, ceiling))
            if smallest < INFINITY:
                used = _push(owner, start, end, used, q, alone + smallest, min(second, ceiling))
        floor_top = np.int64(1) << (top + 1)  # top -1: from 1 on (capacity 0 was settled above)
        used = _push(owner, start, end, used, q, max(floor_top, reach), INFINITY)
    return owner[:used].copy(), start[:used].copy(), end[:used].copy()


@njit(cache=True)
def _search(positions, base, length, value):
    """Number of the class's positions below ``value`` (binary search in ``positions[base : base + length]``)."""
    lo, hi = 0, length
    while lo < hi:
        mid = (lo + hi) >> 1
        if positions[base + mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _two_smallest(seg_min, seg_key, seg_second, base, length, lo, hi):
    best, best_key, second = INFINITY, np.int64(-1), INFINITY
    lo += length
    hi += length
    while lo < hi:
        if lo & 1:
            best, best_key, second = _merge(
                best, best_key, second, seg_min[base + lo], seg_key[base + lo], seg_second[base + lo]
            )
            lo += 1
        if hi & 1:
            hi -= 1
            best, best_key, second = _merge(
                best, best_key, second, seg_min[base + hi], seg_key[base + hi], seg_second[base + hi]
            )
        lo >>= 1
        hi >>= 1
    return best, second


@njit(cache=True)
def _push(owner, start, end, used, q, lo, hi):
    """Append ``[lo, hi)`` to query ``q``'s intervals, joining it to the last one when they touch."""
    if lo >= hi:
        return used
    if used and owner[used - 1] == q and end[used - 1] == lo:
        end[used - 1] = hi
        return used
    owner[used], start[used], end[used] = q, lo, hi
    return used + 1


@njit(cache=True)
def _grow(array, capacity, used):
    bigger = np.empty(capacity, dtype=array.dtype)
    bigger[:used] = array[:used]
    return bigger
