"""A router's own record of the prefixes it sent where (kvlab/fleet/routers/index.py, llm-d's approximate index and
SGLang's tree) against a brute-force model: per instance a list of keys, least recent first, each with when the
instance got it; a match walked key by key over every instance."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.fleet.routers.index import RoutedIndex


class Model:
    def __init__(self, size, capacity):
        self.lists = [[] for _ in range(size)]  # per instance: [key, when it got it], least recent first
        self.capacity, self.clock = capacity, 0

    def record(self, index, keys, leaves_first):
        self.clock += 1
        entries = self.lists[index]
        for key in reversed(keys) if leaves_first else keys:
            found = [entry for entry in entries if entry[0] == key]
            entries[:] = [entry for entry in entries if entry[0] != key]
            entries.append(found[0] if found else [key, self.clock])
        while self.capacity is not None and len(entries) > self.capacity:
            entries.pop(0)

    def matched(self, keys):
        counts, holders, length = [0] * len(self.lists), [], 0
        for key in keys:
            holding = [index for index, entries in enumerate(self.lists) if any(e[0] == key for e in entries)]
            if not holding:
                break
            for index in holding:
                counts[index] += 1
            holders, length = holding, length + 1
        got = {index: next(e[1] for e in self.lists[index] if e[0] == keys[length - 1]) for index in holders}
        return counts, sorted(holders, key=lambda index: (got[index], holders.index(index))), length


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 20),
    st.sampled_from([None, 1, 3, 12]),
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 19), st.lists(st.integers(0, 30), max_size=12), st.booleans()),
        max_size=40,
    ),
)
def test_the_record_and_its_matches_are_the_brute_force_ones(size, capacity, steps):
    """Any sequence of records (in order or leaves first, keys repeated) and matches: the same keys held per instance
    in the same recency, and the same counts, holders (in the order they got the key) and length."""
    index, model = RoutedIndex(size, capacity), Model(size, capacity)
    for recording, instance, keys, leaves_first in steps:
        if recording:
            index.record(instance % size, keys, leaves_first)
            model.record(instance % size, keys, leaves_first)
            assert [list(lru) for lru in index.lrus] == [[e[0] for e in entries] for entries in model.lists]
            assert [index.size(i) for i in range(size)] == [len(entries) for entries in model.lists]
        assert index.matched(keys) == model.matched(keys)
