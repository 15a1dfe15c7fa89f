"""Tests of kvlab/curves/stack_distance.py: presence intervals of an LRU cache with sized entries, at every capacity.

The reference is the lab's own ``LRUCache`` replayed at every capacity from 0 to (sum of the distinct
sizes + 2): above the sum everything fits, so nothing changes there and the last interval must be
unbounded. Streams mix size 0, sizes on both sides of powers of two, and entries too large for the
smaller caches (which makes presence non-monotone in the capacity).

Three former bugs are regression tests at the end: the key -1 (once the trees' "no key"), a size-0 key
with nothing positive in between (once two overlapping intervals), sizes at 2**62 and above.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.curves.stack_distance import INFINITY, last_positions, presence_intervals, size_classes
from kvlab.kvsim import LRUCache

# Sizes just below, at and just above powers of two, 0, and a few larger entries.
SIZES = st.one_of(
    st.sampled_from([0, 0, 0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65]),
    st.integers(min_value=0, max_value=70),
)


@st.composite
def streams(draw, max_keys=10, max_length=40):
    """``(keys, sizes)``: each key keeps one size; keys are arbitrary (sparse, negative) int64 labels."""
    count = draw(st.integers(min_value=1, max_value=max_keys))
    label = st.one_of(st.just(-1), st.integers(-(2**40), 2**40))  # -1 included: no key is special
    labels = draw(st.lists(label, min_size=count, max_size=count, unique=True))
    size_of = draw(st.lists(SIZES, min_size=count, max_size=count))
    length = draw(st.integers(0, max_length))  # drawn first: a plain list strategy stays mostly short
    ids = draw(st.lists(st.integers(0, count - 1), min_size=length, max_size=length))
    return [labels[i] for i in ids], [size_of[i] for i in ids]


def distinct_total(keys, sizes):
    return sum(dict(zip(keys, sizes, strict=True)).values())


def lru_snapshots(keys, sizes, capacity, times):
    """Keys held by ``LRUCache(capacity)`` just before each access in ``times`` (``len(keys)``: after all)."""
    cache = LRUCache(capacity)
    wanted = sorted(set(times))
    held = {}
    position = 0
    for time in wanted:
        while position < time:
            cache.access(keys[position], sizes[position])
            position += 1
        held[time] = set(cache.keys())
    return held


def lru_hits(keys, sizes, capacity):
    cache = LRUCache(capacity)
    return [cache.access(key, size) for key, size in zip(keys, sizes, strict=True)]


def per_query(owner, start, end, queries):
    """The intervals of each query, as lists of (start, end)."""
    intervals = [[] for _ in range(queries)]
    for q, lo, hi in zip(owner.tolist(), start.tolist(), end.tolist(), strict=True):
        intervals[q].append((lo, hi))
    return intervals


def present(intervals, capacity):
    return any(lo <= capacity < hi for lo, hi in intervals)


def check_layout(owner, start, end, queries):
    """Owners grouped in query order; each query's intervals non-empty, sorted, disjoint and not touching."""
    assert owner.dtype == start.dtype == end.dtype == np.int64
    assert len(owner) == len(start) == len(end)
    assert np.all(np.diff(owner) >= 0)
    assert np.all((owner >= 0) & (owner < queries))
    assert np.all(start >= 0)
    assert np.all(start < end)
    assert np.all(end <= INFINITY)
    same = owner[1:] == owner[:-1]
    assert np.all(end[:-1][same] < start[1:][same])  # a touching pair would have been one interval
    both = owner[1:] == owner[:-1]
    assert np.all(start[:-1][both] <= start[1:][both])


def brute_queries(keys, sizes, times, previous):
    """Check presence_intervals against LRUCache at every capacity 0 .. total + 2 for these queries."""
    total = distinct_total(keys, sizes)
    owner, start, end = presence_intervals(keys, sizes, times, previous)
    check_layout(owner, start, end, len(times))
    intervals = per_query(owner, start, end, len(times))
    for q, last in enumerate(previous):
        if last < 0:
            assert intervals[q] == []  # never accessed: absent everywhere
            continue
        # Everything fits from the total on: the key is there, for good.
        assert intervals[q][-1][1] == INFINITY
        assert intervals[q][-1][0] <= max(total, 0)
        assert all(hi <= total + 1 for _, hi in intervals[q][:-1])  # every step lies in the checked range
    for capacity in range(total + 3):
        held = lru_snapshots(keys, sizes, capacity, times)
        for q, (time, last) in enumerate(zip(times, previous, strict=True)):
            expected = last >= 0 and keys[last] in held[time]
            assert present(intervals[q], capacity) == expected, (q, time, last, capacity, intervals[q])
    return intervals


# --------------------------------------------------------------------------------------------
# Differential tests against the LRUCache replay
# --------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(stream=streams())
def test_every_access_matches_lru_at_every_capacity(stream):
    """Query each access about its key's previous access: present exactly when LRUCache hits."""
    keys, sizes = stream
    previous = last_positions(keys).tolist()
    intervals = brute_queries(keys, sizes, list(range(len(keys))), previous)
    for capacity in range(distinct_total(keys, sizes) + 3):
        hits = lru_hits(keys, sizes, capacity)
        assert [present(one, capacity) for one in intervals] == hits


@st.composite
def streams_with_queries(draw):
    """A stream plus queries at arbitrary sorted times (0 .. len): a key seen before (its last access), or
    a key never accessed (-1); and one query per key just after the last access."""
    keys, sizes = draw(streams())
    n = len(keys)
    times = sorted(draw(st.lists(st.integers(0, n), max_size=12)))
    previous = []
    for time in times:
        seen = {key: position for position, key in enumerate(keys[:time])}
        choice = draw(st.integers(-1, len(seen) - 1))
        previous.append(-1 if choice < 0 else sorted(seen.values())[choice])
    last = {key: position for position, key in enumerate(keys)}
    times += [n] * len(last)
    previous += sorted(last.values())
    return keys, sizes, times, previous


@settings(max_examples=150, deadline=None)
@given(case=streams_with_queries())
def test_arbitrary_query_times_match_lru(case):
    """Queries between accesses and after the last one ask what the cache holds at that moment."""
    keys, sizes, times, previous = case
    brute_queries(keys, sizes, times, previous)


@settings(max_examples=60, deadline=None)
@given(stream=streams(max_keys=6, max_length=20), scale=st.integers(2, 2**50))
def test_large_sizes_scale_exactly(stream, scale):
    """Sizes times ``scale`` (up to 2**56, across float rounding of log2): an LRU cache with all sizes multiples
    of ``scale`` behaves at capacity C as at ``scale * (C // scale)``. So every step lies on a multiple of ``scale``,
    and checking LRUCache at both ends of each block ``[scale*C, scale*(C+1))`` checks every capacity."""
    keys, sizes = stream
    big = [size * scale for size in sizes]
    times = list(range(len(keys))) + [len(keys)] * len(set(keys))
    last = {key: position for position, key in enumerate(keys)}
    previous = last_positions(keys).tolist() + sorted(last.values())
    owner, start, end = presence_intervals(keys, big, times, previous)
    check_layout(owner, start, end, len(times))
    assert np.all(start % scale == 0)
    assert np.all(end[end < INFINITY] % scale == 0)
    intervals = per_query(owner, start, end, len(times))
    for capacity in range(distinct_total(keys, sizes) + 3):
        for room in (scale * capacity, scale * (capacity + 1) - 1):
            held = lru_snapshots(keys, big, room, times)
            for q, (time, before) in enumerate(zip(times, previous, strict=True)):
                expected = before >= 0 and keys[before] in held[time]
                assert present(intervals[q], room) == expected, (q, room)


def test_non_monotone_presence():
    """A small cache keeps A because B (size 3) never enters it; a cache of 3 admits B and loses A."""
    keys, sizes = [10, 20, 10], [1, 3, 1]
    assert [lru_hits(keys, sizes, capacity)[2] for capacity in range(6)] == [False, True, True, False, True, True]
    owner, start, end = presence_intervals(keys, sizes, [2], [0])
    assert owner.tolist() == [0, 0]
    assert list(zip(start.tolist(), end.tolist(), strict=True)) == [(1, 3), (4, INFINITY)]


def test_size_zero_is_present_at_capacity_zero():
    """A size-0 entry fits in an empty room; others of size 0 never push it out."""
    keys, sizes = [1, 2, 3, 1], [0, 0, 5, 0]
    owner, start, end = presence_intervals(keys, sizes, [3], [0])
    intervals = list(zip(start.tolist(), end.tolist(), strict=True))
    assert all(lru_hits(keys, sizes, capacity)[3] for capacity in range(8))
    assert owner.tolist() == [0]
    assert intervals == [(0, INFINITY)]  # one interval: touching pieces are merged


def test_no_queries_and_empty_stream():
    empty = np.array([], dtype=np.int64)
    for keys, sizes in (([], []), ([1, 2], [3, 4])):
        owner, start, end = presence_intervals(keys, sizes, empty, empty)
        assert len(owner) == len(start) == len(end) == 0
    owner, start, end = presence_intervals([], [], [0], [-1])
    assert len(owner) == 0


# --------------------------------------------------------------------------------------------
# The helpers
# --------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.integers(-5, 5), max_size=40))
def test_last_positions(keys):
    seen, expected = {}, []
    for position, key in enumerate(keys):
        expected.append(seen.get(key, -1))
        seen[key] = position
    got = last_positions(np.array(keys, dtype=np.int64))
    assert got.dtype == np.int64
    assert got.tolist() == expected


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(
        st.one_of(
            st.integers(0, 2**62 - 1),
            st.integers(1, 61).flatmap(lambda c: st.sampled_from([2**c - 1, 2**c, 2**c + 1])),
        ),
        max_size=20,
    )
)
def test_size_classes(sizes):
    """Class c holds [2**c, 2**(c+1)); size 0 is -1. Exact in integers, also where log2 of a float rounds
    (up to 2**63 - 1)."""
    assert size_classes(np.array(sizes, dtype=np.int64)).tolist() == [size.bit_length() - 1 for size in sizes]


def test_size_classes_at_float_rounding():
    sizes = [2**53 - 1, 2**53, 2**53 + 1, 2**62 - 1, 2**61 + 1, 2**60 - 1]
    assert size_classes(sizes).tolist() == [52, 53, 53, 61, 61, 59]


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "keys, sizes, times, previous, message",
    [
        ([1, 2, 1], [3, 4, 5], [3], [2], "sizes"),  # key 1 with sizes 3 and 5
        ([1, 2], [3, -1], [2], [0], ">= 0"),  # a negative size
        ([1, 2, 3], [1, 1, 1], [2, 1], [0, 0], "sorted"),  # query times out of order
        ([1, 2, 3], [1, 1, 1], [1], [1], "before"),  # previous == time
        ([1, 2, 3], [1, 1, 1], [1], [2], "before"),  # previous > time
        ([1, 2], [1], [2], [0], "lengths"),  # keys and sizes
        ([1, 2], [1, 1], [2, 2], [0], "lengths"),  # times and previous
        ([1, 2], [1, 1], [3], [0], "within"),  # after the end of the stream
        ([1, 2], [1, 1], [-1], [-2], "within"),  # before the start
    ],
)
def test_bad_input(keys, sizes, times, previous, message):
    with pytest.raises(ValueError, match=message):
        presence_intervals(keys, sizes, times, previous)


# --------------------------------------------------------------------------------------------
# Former bugs
# --------------------------------------------------------------------------------------------


def test_key_minus_one_evicts_like_any_key():
    """LRUCache(1): key 0 (size 1), then key -1 (size 1) evicts it, so key 0 misses at capacity 1."""
    keys, sizes = [0, -1, 0], [1, 1, 1]
    assert not lru_hits(keys, sizes, 1)[2]
    owner, start, end = presence_intervals(keys, sizes, [2], [0])
    assert list(zip(start.tolist(), end.tolist(), strict=True)) == [(2, INFINITY)]


def test_size_zero_key_has_one_interval():
    owner, start, end = presence_intervals([0, 0], [0, 0], [1], [0])
    assert list(zip(start.tolist(), end.tolist(), strict=True)) == [(0, INFINITY)]


def test_size_classes_at_and_above_infinity():
    assert size_classes([2**62, 2**63 - 1]).tolist() == [62, 62]
