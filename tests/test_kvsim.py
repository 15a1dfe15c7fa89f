"""Tests of kvlab/kvsim.py against the lab contract (SPEC.md steps 1 and 5).

The differential tests compare the simulator, after every single access, with an independent
brute-force model written here: a plain list of ``[key, size]`` pairs, oldest first.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab.cache.write_policies import make_cache
from kvlab.kvsim import TWO_TIER_CACHES, LRUCache, SelectiveCache, TwoTierCache, WriteBackCache

# --------------------------------------------------------------------------------------------
# Independent brute-force model (no OrderedDict, no kvsim).
# --------------------------------------------------------------------------------------------


class ModelLRU:
    """The lab's LRU rules written out straightforwardly over a list of [key, size], oldest first."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.entries = []

    def used(self):
        total = 0
        for _key, size in self.entries:
            total += size
        return total

    def keys(self):
        return [key for key, _size in self.entries]

    def contains(self, key):
        return any(stored == key for stored, _size in self.entries)

    def access(self, key, size):
        for index in range(len(self.entries)):
            if self.entries[index][0] == key:
                # Hit: move to the newest end, keeping the stored size.
                entry = self.entries.pop(index)
                self.entries.append(entry)
                return True
        if size > self.capacity:
            # Can never fit: do not store, do not evict.
            return False
        while self.used() + size > self.capacity:
            self.entries.pop(0)  # evict the oldest
        self.entries.append([key, size])
        return False


class ModelTwoTier:
    def __init__(self, gpu_capacity, cpu_capacity):
        self.gpu = ModelLRU(gpu_capacity)
        self.cpu = ModelLRU(cpu_capacity)

    def access(self, key, size):
        if self.gpu.contains(key):
            self.gpu.access(key, size)
            return "gpu"
        if self.cpu.contains(key):
            self.cpu.access(key, size)  # hit: becomes most recent
            # Placed on the GPU: for the GPU tier this is a miss of a request of `size` tokens.
            # (SPEC.md does not say which size is placed when request and CPU copy differ;
            # this models the request's size.)
            self.gpu.access(key, size)
            return "cpu"
        self.gpu.access(key, size)
        self.cpu.access(key, size)
        return "miss"


# --------------------------------------------------------------------------------------------
# LRUCache: API edge cases
# --------------------------------------------------------------------------------------------


def test_miss_returns_false_and_stores():
    cache = LRUCache(10)
    assert cache.access("a", 3) is False
    assert cache.keys() == ["a"]
    assert cache.used == 3
    assert "a" in cache


def test_hit_returns_true_and_moves_to_most_recent():
    cache = LRUCache(10)
    for key in "abc":
        assert cache.access(key, 1) is False
    assert cache.keys() == ["a", "b", "c"]
    assert cache.access("a", 1) is True
    assert cache.keys() == ["b", "c", "a"]
    assert cache.used == 3
    # The moved entry is now the last to be evicted: 'b' and 'c' go first.
    assert cache.access("d", 9) is False
    assert cache.keys() == ["a", "d"]
    assert cache.used == 10


def test_hit_on_most_recent_keeps_order():
    cache = LRUCache(10)
    cache.access("a", 1)
    cache.access("b", 1)
    assert cache.access("b", 1) is True
    assert cache.keys() == ["a", "b"]


def test_lru_is_not_fifo():
    """The handout's hint: forgetting to move a hit to the end turns LRU into FIFO."""
    cache = LRUCache(2)
    cache.access("a", 1)
    cache.access("b", 1)
    cache.access("a", 1)  # hit: 'a' is now newer than 'b'
    cache.access("c", 1)  # must evict 'b', not 'a'
    assert cache.keys() == ["a", "c"]
    assert "b" not in cache


def test_miss_evicts_oldest_first_only_until_room():
    cache = LRUCache(10)
    for key, size in [("a", 3), ("b", 3), ("c", 3)]:
        cache.access(key, size)
    assert cache.used == 9
    # Needs 5: evicting 'a' leaves 6 used -> 6 + 5 > 10, so 'b' goes too; 'c' stays.
    assert cache.access("d", 5) is False
    assert cache.keys() == ["c", "d"]
    assert cache.used == 8


def test_miss_evicts_nothing_when_there_is_room():
    cache = LRUCache(10)
    cache.access("a", 4)
    cache.access("b", 4)
    assert cache.access("c", 2) is False
    assert cache.keys() == ["a", "b", "c"]
    assert cache.used == 10


def test_miss_can_evict_everything():
    cache = LRUCache(10)
    for key in "abcde":
        cache.access(key, 2)
    assert cache.access("z", 10) is False
    assert cache.keys() == ["z"]
    assert cache.used == 10


def test_oversized_item_is_not_stored_and_evicts_nothing():
    cache = LRUCache(10)
    cache.access("a", 4)
    cache.access("b", 5)
    before_keys, before_used = cache.keys(), cache.used
    assert cache.access("big", 11) is False
    assert cache.keys() == before_keys == ["a", "b"]
    assert cache.used == before_used == 9
    assert "big" not in cache
    assert len(cache) == 2
    # And again: still a miss (it was never stored), still nothing evicted.
    assert cache.access("big", 11) is False
    assert cache.keys() == ["a", "b"]
    assert cache.used == 9


def test_oversized_item_in_empty_cache():
    cache = LRUCache(5)
    assert cache.access("big", 6) is False
    assert cache.keys() == []
    assert cache.used == 0


def test_contains_does_not_reorder():
    cache = LRUCache(10)
    for key in "abc":
        cache.access(key, 1)
    before = cache.keys()
    assert "a" in cache
    assert "b" in cache
    assert "zzz" not in cache
    assert cache.keys() == before == ["a", "b", "c"]
    # 'a' is still the oldest: it is the one evicted next.
    cache.access("d", 8)
    assert cache.keys() == ["b", "c", "d"]


def test_used_is_sum_of_stored_sizes():
    cache = LRUCache(100)
    sizes = {"a": 7, "b": 0, "c": 13, "d": 21}
    for key, size in sizes.items():
        cache.access(key, size)
        assert cache.used == sum(sizes[k] for k in cache.keys())
    assert cache.used == 41
    cache.access("e", 70)  # evicts a (7), b (0), c (13): 21 + 70 = 91
    assert cache.keys() == ["d", "e"]
    assert cache.used == 91


def test_keys_returns_a_list_oldest_first():
    cache = LRUCache(10)
    assert cache.keys() == []
    assert type(cache.keys()) is list
    for key in [3, 1, 2]:
        cache.access(key, 1)
    keys = cache.keys()
    assert type(keys) is list
    assert keys == [3, 1, 2]
    # A fresh list: mutating it does not change the cache.
    keys.append(99)
    keys.clear()
    assert cache.keys() == [3, 1, 2]


def test_capacity_zero():
    cache = LRUCache(0)
    assert cache.access("zero", 0) is False
    assert cache.keys() == ["zero"]
    assert cache.used == 0
    assert cache.access("zero", 0) is True
    assert cache.access("one", 1) is False
    assert "one" not in cache
    assert cache.keys() == ["zero"]
    assert cache.used == 0


def test_exact_fit_is_allowed():
    cache = LRUCache(10)
    assert cache.access("a", 10) is False
    assert cache.keys() == ["a"]
    assert cache.used == 10
    assert cache.access("a", 10) is True
    cache2 = LRUCache(10)
    cache2.access("a", 6)
    assert cache2.access("b", 4) is False  # 6 + 4 == 10: fits without evicting
    assert cache2.keys() == ["a", "b"]
    assert cache2.used == 10


def test_one_over_forces_eviction():
    cache = LRUCache(10)
    cache.access("a", 6)
    cache.access("b", 5)  # 6 + 5 == 11 > 10: 'a' is evicted
    assert cache.keys() == ["b"]
    assert cache.used == 5


@pytest.mark.parametrize("capacity", [-1, -100])
def test_negative_capacity_raises(capacity):
    with pytest.raises(ValueError):
        LRUCache(capacity)


@pytest.mark.parametrize("size", [-1, -50])
def test_negative_size_raises_and_changes_nothing(size):
    cache = LRUCache(10)
    cache.access("a", 2)
    with pytest.raises(ValueError):
        cache.access("neg", size)
    assert cache.keys() == ["a"]
    assert cache.used == 2
    assert "neg" not in cache


def test_hit_with_different_size_keeps_stored_size():
    cache = LRUCache(10)
    cache.access("a", 3)
    cache.access("b", 2)
    assert cache.access("a", 8) is True
    assert cache.used == 5
    assert cache.keys() == ["b", "a"]
    assert cache.access("a", 1) is True
    assert cache.used == 5
    # Even a size larger than the capacity is a hit of the stored entry.
    assert cache.access("b", 50) is True
    assert cache.keys() == ["a", "b"]
    assert cache.used == 5
    # Stored sizes govern eviction: c (8) needs 'a' (3) evicted, then 2 + 8 == 10 fits with 'b' kept.
    assert cache.access("c", 8) is False
    assert cache.keys() == ["b", "c"]
    assert cache.used == 10


def test_stored_size_governs_later_eviction():
    cache = LRUCache(10)
    cache.access("a", 2)
    cache.access("a", 9)  # hit: still size 2
    cache.access("b", 8)  # 2 + 8 == 10: fits, nothing evicted
    assert cache.keys() == ["a", "b"]
    assert cache.used == 10


def test_keys_of_any_hashable_type():
    cache = LRUCache(10)
    for key in [0, "0", (0,), None]:
        assert cache.access(key, 1) is False
    assert cache.keys() == [0, "0", (0,), None]
    assert cache.access(0, 1) is True
    assert cache.keys() == ["0", (0,), None, 0]


# --------------------------------------------------------------------------------------------
# TwoTierCache
# --------------------------------------------------------------------------------------------


def test_two_tier_attributes_are_lru_caches():
    cache = TwoTierCache(7, 11)
    assert isinstance(cache.gpu, LRUCache)
    assert isinstance(cache.cpu, LRUCache)
    assert cache.gpu is not cache.cpu
    assert cache.gpu.capacity == 7
    assert cache.cpu.capacity == 11
    assert cache.gpu.keys() == [] and cache.cpu.keys() == []


def test_two_tier_miss_stores_on_both():
    cache = TwoTierCache(10, 20)
    assert cache.access("a", 4) == "miss"
    assert cache.gpu.keys() == ["a"]
    assert cache.cpu.keys() == ["a"]
    assert cache.gpu.used == 4
    assert cache.cpu.used == 4


def test_two_tier_gpu_hit_does_not_touch_cpu_order():
    cache = TwoTierCache(2, 10)
    cache.access("a", 1)
    cache.access("b", 1)
    assert cache.cpu.keys() == ["a", "b"]
    assert cache.access("a", 1) == "gpu"
    assert cache.gpu.keys() == ["b", "a"]  # the GPU tier is an LRU: 'a' is now newest there
    assert cache.cpu.keys() == ["a", "b"]  # ... but the CPU order is untouched
    assert cache.cpu.used == 2


def test_two_tier_cpu_hit_refreshes_cpu_and_places_on_gpu():
    cache = TwoTierCache(2, 10)
    for key in "abc":
        assert cache.access(key, 1) == "miss"
    assert cache.gpu.keys() == ["b", "c"]
    assert cache.cpu.keys() == ["a", "b", "c"]
    assert cache.access("a", 1) == "cpu"
    assert cache.cpu.keys() == ["b", "c", "a"]  # CPU copy is most recent
    assert cache.gpu.keys() == ["c", "a"]  # placed on the GPU (evicting its oldest, 'b')
    assert cache.gpu.used == 2
    assert cache.cpu.used == 3
    # Now it is a GPU hit.
    assert cache.access("a", 1) == "gpu"


def test_two_tier_cpu_hit_that_cannot_fit_on_gpu():
    cache = TwoTierCache(3, 10)
    assert cache.access("big", 5) == "miss"
    assert cache.gpu.keys() == []  # too big for the GPU: not stored, nothing evicted
    assert cache.cpu.keys() == ["big"]
    assert cache.access("big", 5) == "cpu"
    assert cache.gpu.keys() == []
    assert cache.cpu.keys() == ["big"]


def test_two_tier_contains_does_not_reorder():
    cache = TwoTierCache(1, 10)
    cache.access("a", 1)
    cache.access("b", 1)
    gpu_before, cpu_before = cache.gpu.keys(), cache.cpu.keys()
    assert "a" in cache.cpu and "a" not in cache.gpu
    assert "b" in cache.gpu
    assert cache.gpu.keys() == gpu_before == ["b"]
    assert cache.cpu.keys() == cpu_before == ["a", "b"]


def test_two_tier_cpu_zero_scenario_example():
    """The lab's cyclic cliff on a two-tier cache with CPU room 0: four docs fit, ten are read."""
    cache = TwoTierCache(21520, 0)
    results = [cache.access(doc, 5011) for doc in list(range(10)) * 2]
    assert results == ["miss"] * 20
    assert cache.cpu.keys() == []
    assert cache.gpu.keys() == [6, 7, 8, 9]


@pytest.mark.parametrize("gpu_capacity, cpu_capacity", [(-1, 0), (0, -1)])
def test_two_tier_negative_capacity_raises(gpu_capacity, cpu_capacity):
    with pytest.raises(ValueError):
        TwoTierCache(gpu_capacity, cpu_capacity)


# --------------------------------------------------------------------------------------------
# Property-based differential tests
# --------------------------------------------------------------------------------------------

KEYS = st.sampled_from("abcdef")
SIZES = st.integers(min_value=0, max_value=25)  # 0 included, and larger than most capacities
CAPACITIES = st.one_of(st.just(0), st.integers(min_value=0, max_value=20))
OPS = st.lists(st.tuples(KEYS, SIZES), max_size=50)

SETTINGS = settings(
    max_examples=1500,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def assert_same_lru(real, model, where):
    assert real.keys() == model.keys(), where
    assert real.used == model.used(), where
    assert len(real) == len(model.entries), where
    for key in "abcdef":
        assert (key in real) == model.contains(key), where


def test_model_sanity():
    """The model itself follows the rules (so a shared misunderstanding would show up here too)."""
    model = ModelLRU(10)
    assert model.access("a", 4) is False
    assert model.access("b", 4) is False
    assert model.access("a", 9) is True
    assert model.keys() == ["b", "a"] and model.used() == 8
    assert model.access("big", 11) is False
    assert model.keys() == ["b", "a"]
    assert model.access("c", 6) is False
    assert model.keys() == ["a", "c"] and model.used() == 10


@SETTINGS
@given(capacity=CAPACITIES, ops=OPS)
def test_lru_matches_model(capacity, ops):
    real = LRUCache(capacity)
    model = ModelLRU(capacity)
    for step, (key, size) in enumerate(ops):
        where = (capacity, ops[: step + 1])
        assert real.access(key, size) is model.access(key, size), where
        assert_same_lru(real, model, where)


@SETTINGS
@given(gpu_capacity=CAPACITIES, cpu_capacity=st.integers(min_value=0, max_value=40), ops=OPS)
def test_two_tier_matches_model(gpu_capacity, cpu_capacity, ops):
    real = TwoTierCache(gpu_capacity, cpu_capacity)
    model = ModelTwoTier(gpu_capacity, cpu_capacity)
    for step, (key, size) in enumerate(ops):
        where = (gpu_capacity, cpu_capacity, ops[: step + 1])
        assert real.access(key, size) == model.access(key, size), where
        assert_same_lru(real.gpu, model.gpu, where)
        assert_same_lru(real.cpu, model.cpu, where)


@settings(max_examples=800, deadline=None, database=None)
@given(
    gpu_capacity=CAPACITIES,
    cpu_capacity=st.integers(min_value=0, max_value=40),
    key_sizes=st.fixed_dictionaries({key: SIZES for key in "abcdef"}),
    keys=st.lists(KEYS, max_size=50),
)
def test_two_tier_matches_model_fixed_size_per_key(gpu_capacity, cpu_capacity, key_sizes, keys):
    """As the lab uses it: each key always has the same size (no ambiguity about which size is placed)."""
    real = TwoTierCache(gpu_capacity, cpu_capacity)
    model = ModelTwoTier(gpu_capacity, cpu_capacity)
    for step, key in enumerate(keys):
        where = (gpu_capacity, cpu_capacity, key_sizes, keys[: step + 1])
        assert real.access(key, key_sizes[key]) == model.access(key, key_sizes[key]), where
        assert_same_lru(real.gpu, model.gpu, where)
        assert_same_lru(real.cpu, model.cpu, where)


@settings(max_examples=800, deadline=None, database=None)
@given(
    gpu_capacity=CAPACITIES,
    ops=st.lists(st.tuples(KEYS, st.integers(min_value=1, max_value=25)), max_size=50),
)
def test_two_tier_cpu_zero_is_single_tier(gpu_capacity, ops):
    """CPU room 0 behaves exactly like a single LRUCache of the GPU room (positive sizes)."""
    two = TwoTierCache(gpu_capacity, 0)
    one = LRUCache(gpu_capacity)
    for step, (key, size) in enumerate(ops):
        where = (gpu_capacity, ops[: step + 1])
        tier = two.access(key, size)
        hit = one.access(key, size)
        assert tier in ("gpu", "miss"), where
        assert (tier == "gpu") is hit, where
        assert two.gpu.keys() == one.keys(), where
        assert two.gpu.used == one.used, where
        assert two.cpu.keys() == [] and two.cpu.used == 0, where


# -- the other write policies at document level, against the block-level engine -----------------------------


TIER_OF = {(1, 0): "gpu", (0, 1): "cpu", (0, 0): "miss"}


@pytest.mark.parametrize("policy", sorted(TWO_TIER_CACHES))
@settings(max_examples=300, deadline=None, database=None)
@given(
    gpu=st.integers(0, 30),
    cpu=st.integers(0, 30),
    accesses=st.lists(st.tuples(st.integers(0, 7), st.integers(1, 12)), max_size=60),
)
def test_each_write_policy_is_the_block_engine_with_one_block_per_document(policy, gpu, cpu, accesses):
    """kvsim's document-level classes and kvlab/cache/write_policies.py's per-block designs are written apart; with one
    (kept, partial) block per request they must agree on every result and on both tiers' contents in order."""
    sizes = {}
    document_level = TWO_TIER_CACHES[policy](gpu, cpu)
    block_level = make_cache(policy, gpu, cpu, 13, partial_blocks="keep")
    for key, size in accesses:
        size = sizes.setdefault(key, size)  # a document keeps its length
        expected = document_level.access(key, size)
        assert TIER_OF[block_level.serve([key], size)[:2]] == expected
        assert block_level.gpu.keys() == document_level.gpu.keys()
        assert block_level.cpu.keys() == document_level.cpu.keys()
        assert (block_level.gpu.used, block_level.cpu.used) == (document_level.gpu.used, document_level.cpu.used)


@settings(max_examples=300, deadline=None, database=None)
@given(
    gpu=st.integers(0, 30),
    cpu=st.integers(0, 30),
    accesses=st.lists(st.tuples(st.integers(0, 7), st.integers(0, 12)), max_size=60),
)
def test_write_back_is_exclusive_and_moves_cpu_hits_up(gpu, cpu, accesses):
    cache = WriteBackCache(gpu, cpu)
    for key, size in accesses:
        on_cpu = key in cache.cpu and key not in cache.gpu
        tier = cache.access(key, size)
        assert not set(cache.gpu.keys()) & set(cache.cpu.keys())
        assert cache.cpu.used == sum(cache.cpu._sizes.values()) <= cpu
        if on_cpu:
            assert tier == "cpu" and (key in cache.gpu or size > gpu)


def test_selective_writes_to_the_cpu_from_the_second_computation_on():
    cache = SelectiveCache(0, 100)  # no GPU room: every access is computed unless the CPU has it
    assert [cache.access("a", 10) for _ in range(3)] == ["miss", "miss", "cpu"]
    assert cache.cpu.keys() == ["a"]
