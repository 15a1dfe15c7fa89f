"""Tests of kvlab/cache/eviction/ against independent brute-force models written here.

The models are plain lists (no OrderedDict, no heap, nothing imported from the package), short
enough to be checked by eye: lru/fifo/lfu as lists of entries, ARC straight from Fig. 4 of
Megiddo & Modha (FAST 2003), and OPT against an exhaustive search over every offline strategy.
The differential tests compare a policy with its model after every single call.
"""

import random
from collections import Counter
from fractions import Fraction
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.cache.eviction import EVICTION_POLICIES, EvictionPolicy
from kvlab.cache.eviction.opt import NEVER, Future
from kvlab.kvsim import LRUCache

NAMES = ["lru", "fifo", "lfu", "arc", "opt"]
EQUAL_SIZES = {"arc", "opt"}  # the policies that count entries, not tokens
BATCHED = ["access_all", "touch_all", "refresh_all", "store_absent"]

FEW = settings(max_examples=60, deadline=None, database=None)
SOME = settings(max_examples=150, deadline=None, database=None)
MANY = settings(max_examples=300, deadline=None, database=None)

keys_st = st.integers(0, 9)
request_st = st.lists(keys_st, max_size=6, unique=True)  # a request's block keys (distinct, as hash chains are)


# --------------------------------------------------------------------------------------------
# Helpers to drive a tier as the replay does (an opt tier needs its Future advanced per request).
# --------------------------------------------------------------------------------------------


def build(name, capacity, requests=()):
    """A tier collecting its victims; for opt, with the Future of ``requests``."""
    tier = EVICTION_POLICIES[name](capacity)
    tier.victims = []
    future = None
    if name == "opt":
        future = tier.future = Future([list(keys) for keys in requests])
    return tier, future


def begin(tier, future, keys):
    """The request of ``keys`` is being served: advance an opt tier's future, as the replay does."""
    if future is not None:
        future.advance(keys)
        tier.reprioritize(keys)


def check_sizes(tier, sizes):
    """``used`` is the sum of the stored sizes, never above capacity; len/in agree with keys()."""
    stored = tier.keys()
    assert len(set(stored)) == len(stored)
    assert tier.used == sum(sizes[key] for key in stored)
    assert 0 <= tier.used <= tier.capacity
    assert len(tier) == len(stored)
    assert all(key in tier for key in stored)


def record_new(tier, before, sizes, size, victims=()):
    """Remember the size of every key stored by the last call (all of its misses had ``size``).

    A stored key is new, or was evicted and stored again by the same call (then it is among ``victims``).
    """
    evicted = {key for key, _ in victims}
    for key in tier.keys():
        if key not in before or key in evicted:
            sizes[key] = size


# --------------------------------------------------------------------------------------------
# Independent models of lru, fifo and lfu: a list of [key, size, count, last access], store order.
# --------------------------------------------------------------------------------------------


class ListModel:
    """Evict ``victim_index()`` until the entry fits; a too-large entry passes (a victim, nothing evicted)."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.entries = []  # [key, size, accesses since stored, time of last access]
        self.victims = []
        self.clock = 0

    def find(self, key):
        for index, entry in enumerate(self.entries):
            if entry[0] == key:
                return index
        return None

    def used(self):
        return sum(entry[1] for entry in self.entries)

    def keys(self):
        return [entry[0] for entry in self.entries]

    def access(self, key, size):
        self.clock += 1
        index = self.find(key)
        if index is not None:
            self.hit(index)
            return True
        if size > self.capacity:
            self.victims.append((key, size))
            return False
        while self.used() + size > self.capacity:
            evicted = self.entries.pop(self.victim_index())
            self.victims.append((evicted[0], evicted[1]))
        self.entries.append([key, size, 1, self.clock])
        return False

    def access_all(self, keys, size):
        for key in keys:
            self.access(key, size)

    def refresh_all(self, keys, size):
        for key in keys:
            index = self.find(key)
            if index is not None:
                self.clock += 1
                self.hit(index)

    def store_absent(self, keys, size):
        for key in keys:
            if self.find(key) is None:  # absent when its turn comes; a present key is not refreshed
                self.access(key, size)

    def discard(self, key):
        index = self.find(key)
        if index is not None:
            del self.entries[index]

    def hit(self, index):
        raise NotImplementedError

    def victim_index(self):
        raise NotImplementedError


class ModelLRU(ListModel):
    def hit(self, index):
        self.entries.append(self.entries.pop(index))

    def victim_index(self):
        return 0


class ModelFIFO(ListModel):
    def hit(self, index):
        pass

    def victim_index(self):
        return 0


class ModelLFU(ListModel):
    def hit(self, index):
        self.entries[index][2] += 1
        self.entries[index][3] = self.clock

    def victim_index(self):
        ranks = [(entry[2], entry[3]) for entry in self.entries]
        return ranks.index(min(ranks))


MODELS = {"lru": ModelLRU, "fifo": ModelFIFO, "lfu": ModelLFU}
ORDERED = {"lru", "fifo"}  # keys() order is defined: least recent / oldest stored first


def ops_st(sizes):
    """Random calls: single accesses, batched calls on a request's keys, discards."""
    return st.lists(
        st.one_of(
            st.tuples(st.just("access"), keys_st, sizes),
            st.tuples(st.sampled_from(BATCHED), st.lists(keys_st, max_size=6), sizes),  # repeats allowed
            st.tuples(st.just("discard"), keys_st, st.just(0)),
        ),
        max_size=50,
    )


@pytest.mark.parametrize("name", sorted(MODELS))
@MANY
@given(capacity=st.integers(0, 20), ops=ops_st(st.integers(0, 7)))
def test_variable_size_policies_match_their_models(name, capacity, ops):
    """lru, fifo and lfu take any sizes: every call, including the batched ones, must match the list model."""
    tier, _ = build(name, capacity)
    model = MODELS[name](capacity)
    for op, arg, size in ops:
        if op == "access":
            assert tier.access(arg, size) == model.access(arg, size)
        elif op == "discard":
            tier.discard(arg)
            model.discard(arg)
        else:
            getattr(tier, op)(arg, size)
            getattr(model, "access_all" if op == "touch_all" else op)(arg, size)
        assert tier.victims == model.victims
        assert tier.used == model.used()
        if name in ORDERED:
            assert tier.keys() == model.keys()
        else:
            assert sorted(tier.keys()) == sorted(model.keys())


@MANY
@given(
    capacity=st.integers(0, 20),
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("access"), keys_st, st.integers(0, 7)),
            st.tuples(st.sampled_from(["access_all", "touch_all"]), st.lists(keys_st, max_size=6), st.integers(0, 7)),
        ),
        max_size=50,
    ),
)
def test_lru_equals_the_labs_lru_cache(capacity, ops):
    """The lab's LRUCache is the reference: the policy (and its fast batched path) must match it access by access."""
    tier = EVICTION_POLICIES["lru"](capacity)
    lab = LRUCache(capacity)
    for op, arg, size in ops:
        if op == "access":
            assert tier.access(arg, size) == lab.access(arg, size)
        else:
            getattr(tier, op)(arg, size)
            for key in arg:
                lab.access(key, size)
        assert tier.keys() == lab.keys()
        assert tier.used == lab.used
        assert len(tier) == len(lab)


def test_lfu_keeps_the_frequent_entry_and_breaks_ties_by_recency():
    """A worked example of the rule, so that a wrong model would not hide a wrong policy."""
    tier, _ = build("lfu", 3)
    for key in "abcab":
        tier.access(key, 1)
    tier.access("d", 1)  # c has the fewest accesses (1)
    assert tier.victims == [("c", 1)]
    tier.access("e", 1)  # d (count 1) goes: a and b have 2
    assert tier.victims[-1] == ("d", 1)
    tier.access("a", 1)  # a: 3, b: 2, e: 1
    tier.access("e", 1)  # e: 2, more recent than b
    tier.access("f", 1)  # b and e tie at 2: b was accessed longer ago
    assert tier.victims[-1] == ("b", 1)
    tier.discard("a")
    tier.access("a", 1)  # its count was forgotten: 1 again, like f's
    tier.access("g", 1)  # f and a tie at 1: f was accessed longer ago
    assert tier.victims[-1] == ("f", 1)
    assert sorted(tier.keys()) == ["a", "e", "g"]


@pytest.mark.parametrize("name", ["lru", "fifo", "lfu", "arc"])
def test_store_absent_with_a_repeated_key_refreshes_nothing(name):
    """``store_absent`` refreshes nothing, even when a request names a block twice (Future allows repeats)."""
    tier, _ = build(name, 10)
    reference, _ = build(name, 10)
    tier.store_absent(["a", "b", "a"], 1)
    reference.access_all(["a", "b"], 1)
    assert tier.keys() == reference.keys()
    if name == "arc":
        assert list(tier.t1) == ["a", "b"] and not tier.t2
    if name == "lfu":  # a refreshed 'a' would outlive 'b'
        tier.access_all(list("cdefghij"), 1)
        tier.access("k", 1)
        assert tier.victims == [("a", 1)]


# --------------------------------------------------------------------------------------------
# ARC: Fig. 4 of Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache" (FAST 2003).
# --------------------------------------------------------------------------------------------


class PaperARC:
    """ARC(c) as in the paper's pseudo-code; lists hold keys LRU first. ``amended``: the lab's discard rule."""

    def __init__(self, c, amended=False):
        self.c = c
        self.p = Fraction(0)
        self.t1, self.t2, self.b1, self.b2 = [], [], [], []
        self.amended = amended
        self.victims = []
        self.cases = Counter()

    def request(self, x):
        c, t1, t2, b1, b2 = self.c, self.t1, self.t2, self.b1, self.b2
        if x in t1 or x in t2:  # Case I
            (t1 if x in t1 else t2).remove(x)
            t2.append(x)
            self.cases["I"] += 1
            return True
        if c == 0:  # not a single page fits: the block passes through
            self.victims.append(x)
            return False
        if x in b1:  # Case II
            delta1 = 1 if len(b1) >= len(b2) else Fraction(len(b2), len(b1))
            self.p = min(self.p + delta1, c)
            self.replace(x)
            b1.remove(x)
            t2.append(x)
            self.cases["II"] += 1
        elif x in b2:  # Case III
            delta2 = 1 if len(b2) >= len(b1) else Fraction(len(b1), len(b2))
            self.p = max(self.p - delta2, 0)
            self.replace(x)
            b2.remove(x)
            t2.append(x)
            self.cases["III"] += 1
        else:  # Case IV
            total = len(t1) + len(t2) + len(b1) + len(b2)
            if len(t1) + len(b1) == c:  # Case A
                if len(t1) < c:
                    b1.pop(0)
                    self.replace(x)
                    self.cases["IV-A ghost"] += 1
                else:
                    self.victims.append(t1.pop(0))
                    self.cases["IV-A no ghost"] += 1
            elif len(t1) + len(b1) < c and total >= c:  # Case B
                if total == 2 * c:
                    b2.pop(0)
                    self.cases["IV-B full directory"] += 1
                self.replace(x)
                self.cases["IV-B"] += 1
            t1.append(x)
        return False

    def replace(self, x):
        t1, t2 = self.t1, self.t2
        if self.amended and len(t1) + len(t2) < self.c:
            return
        if t1 and ((x in self.b2 and len(t1) == self.p) or len(t1) > self.p):
            if x in self.b2 and len(t1) == self.p:
                self.cases["REPLACE tie"] += 1
            key = t1.pop(0)
            self.b1.append(key)
        else:
            key = t2.pop(0)
            self.b2.append(key)
        self.victims.append(key)

    def discard(self, x):
        if x in self.t1:
            self.t1.remove(x)
        elif x in self.t2:
            self.t2.remove(x)


def compare_arc(tier, model, size):
    assert list(tier.t1) == model.t1
    assert list(tier.t2) == model.t2
    assert list(tier.b1) == model.b1
    assert list(tier.b2) == model.b2
    assert tier.p == model.p
    assert sorted(tier.keys()) == sorted(model.t1 + model.t2)
    assert tier.used == size * (len(model.t1) + len(model.t2))
    assert tier.victims == [(key, size) for key in model.victims]


@MANY
@given(
    size=st.integers(1, 3),
    capacity=st.integers(0, 24),
    alphabet=st.integers(1, 20),
    draws=st.lists(st.integers(0, 10**6), max_size=120),
)
def test_arc_follows_the_paper(size, capacity, alphabet, draws):
    """Without discard, ARC must be the published algorithm: hits, T1/T2/B1/B2 in order and p, every access."""
    tier, _ = build("arc", capacity)
    model = PaperARC(capacity // size)
    for draw in draws:
        key = draw % alphabet
        assert tier.access(key, size) == model.request(key)
        compare_arc(tier, model, size)


def test_arc_follows_the_paper_through_every_case():
    """Long seeded runs reach every branch of Fig. 4, so the comparison above is not vacuous."""
    cases = Counter()
    rng = random.Random(2003)
    for c in (1, 2, 3, 5, 8):
        for alphabet in (c + 1, 2 * c + 1, 3 * c + 2):
            tier, _ = build("arc", 2 * c + 1)  # capacity not a multiple of the block size
            model = PaperARC(c)
            hot = list(range(max(1, c // 2)))
            for _ in range(1500):
                key = rng.choice(hot) if rng.random() < 0.4 else rng.randrange(alphabet)
                assert tier.access(key, 2) == model.request(key)
                compare_arc(tier, model, 2)
            cases += model.cases
    for case in ("I", "II", "III", "IV-A ghost", "IV-A no ghost", "IV-B", "IV-B full directory", "REPLACE tie"):
        assert cases[case] > 0, case


@SOME
@given(
    size=st.integers(1, 3),
    capacity=st.integers(0, 16),
    ops=st.lists(st.tuples(st.sampled_from(["access"] * 3 + ["discard"]), st.integers(0, 12)), max_size=120),
)
def test_arc_discard(size, capacity, ops):
    """discard: the block is gone, no victim, no ghost; the directory stays within the paper's bounds."""
    tier, _ = build("arc", capacity)
    model = PaperARC(capacity // size, amended=True)
    c = capacity // size
    for op, key in ops:
        if op == "discard":
            present, ghosts, seen = key in tier, (list(tier.b1), list(tier.b2)), len(tier.victims)
            tier.discard(key)
            model.discard(key)
            assert key not in tier and key not in tier.t1 and key not in tier.t2
            if present:  # a cached block leaves no ghost (an absent one keeps whatever ghost it had)
                assert key not in tier.b1 and key not in tier.b2
            assert (list(tier.b1), list(tier.b2)) == ghosts
            assert tier.victims[seen:] == []
        else:
            assert tier.access(key, size) == model.request(key)
        compare_arc(tier, model, size)
        assert len(tier.t1) + len(tier.t2) <= c
        assert len(tier.t1) + len(tier.b1) <= c
        assert len(tier.t1) + len(tier.t2) + len(tier.b1) + len(tier.b2) <= 2 * c


def test_arc_discarded_block_is_not_reported():
    tier, _ = build("arc", 6)
    tier.access_all(["a", "b", "c"], 2)
    tier.discard("b")
    assert tier.victims == []
    assert sorted(tier.keys()) == ["a", "c"] and tier.used == 4
    assert "b" not in tier.b1 and "b" not in tier.b2
    tier.access("d", 2)  # room left by the discard: nothing is evicted
    assert tier.victims == [] and sorted(tier.keys()) == ["a", "c", "d"]


# --------------------------------------------------------------------------------------------
# OPT: Belady's MIN with bypass, against every offline strategy.
# --------------------------------------------------------------------------------------------


def best_hits(keys, capacity):
    """Most hits any offline strategy gets on single-block requests of size 1 (exhaustive, memoized)."""

    @cache
    def best(time, stored):
        if time == len(keys):
            return 0
        key = keys[time]
        if key in stored:
            return 1 + best(time + 1, stored)
        options = [best(time + 1, stored)]  # do not store it
        if len(stored) < capacity:
            options.append(best(time + 1, stored | {key}))
        else:
            options.extend(best(time + 1, (stored - {resident}) | {key}) for resident in stored)
        return max(options)

    return best(0, frozenset())


def replay_hits(name, keys, capacity):
    """Hits of policy ``name`` on single-block requests of size 1, looked up before each request's access."""
    tier, future = build(name, capacity, [[key] for key in keys])
    hits = 0
    for key in keys:
        begin(tier, future, [key])
        hit = key in tier
        assert tier.access(key, 1) == hit
        hits += hit
    return hits


@SOME
@given(capacity=st.integers(0, 4), keys=st.lists(st.integers(0, 5), max_size=13))
def test_opt_is_the_offline_optimum(capacity, keys):
    """MIN with bypass gets exactly the most hits any offline strategy can."""
    assert replay_hits("opt", keys, capacity) == best_hits(tuple(keys), capacity)


@SOME
@given(capacity=st.integers(0, 6), keys=st.lists(st.integers(0, 9), max_size=80))
def test_opt_bounds_every_online_policy(capacity, keys):
    """No online policy can beat the offline optimum on the same requests."""
    optimum = replay_hits("opt", keys, capacity)
    for name in ("lru", "fifo", "lfu", "arc"):
        assert optimum >= replay_hits(name, keys, capacity), name


def next_uses(requests, skips, served):
    """Model of Future.next_use after ``served`` requests: position of the first use in a later request."""
    uses = {}
    start = 0
    for index, keys in enumerate(requests):
        first = skips[index] if skips is not None else 0
        if index >= served:
            for offset in range(first, len(keys)):
                uses.setdefault(keys[offset], start + offset)
        start += len(keys)
    return uses


@SOME
@given(
    requests=st.lists(st.lists(st.integers(0, 6), max_size=6), max_size=10),
    skip_draws=st.none() | st.lists(st.integers(0, 6), min_size=10, max_size=10),
)
def test_future_next_use(requests, skip_draws):
    """next_use: position (requests flattened) of the key's first block in the next request needing it, else NEVER."""
    skips = None if skip_draws is None else [min(skip_draws[index], len(keys)) for index, keys in enumerate(requests)]
    future = Future(requests, skips)
    assert NEVER == float("inf")
    for served in range(len(requests) + 1):
        if served:
            future.advance(requests[served - 1])
        expected = next_uses(requests, skips, served)
        for key in range(-1, 8):
            assert future.next_use(key) == expected.get(key, NEVER), (served, key)


def test_opt_bypasses_a_block_needed_later_than_everything_stored():
    """Bypass is reported as a victim, like any entry the tier does not take."""
    requests = [["a"], ["b"], ["c"], ["a"], ["b"], ["c"]]
    tier, future = build("opt", 2, requests)
    hits = []
    for keys in requests:
        begin(tier, future, keys)
        hits.append(keys[0] in tier)
        tier.access_all(keys, 1)
    assert hits == [False, False, False, True, True, False]
    assert tier.victims == [("c", 1), ("c", 1)]


# --------------------------------------------------------------------------------------------
# What every policy shares.
# --------------------------------------------------------------------------------------------


def test_registry():
    """The names are the ones the config accepts, each class under its own name."""
    assert sorted(EVICTION_POLICIES) == sorted(NAMES)
    for name, policy in EVICTION_POLICIES.items():
        assert issubclass(policy, EvictionPolicy)
        assert policy.name == name
        assert policy.equal_sizes == (name in EQUAL_SIZES)
        assert policy.offline == (name == "opt")


def sizes_for(name):
    """One size for the equal-size policies (drawn once), any size for the others."""
    if name in EQUAL_SIZES:
        return st.integers(1, 4).map(st.just)
    return st.just(st.integers(0, 5))


@pytest.mark.parametrize("name", NAMES)
@SOME
@given(data=st.data())
def test_victims_are_exactly_what_leaves(name, data):
    """Every access reports exactly the entries it evicted, plus the entry itself if not admitted; discard none."""
    capacity = data.draw(st.integers(0, 12), "capacity")
    sizes = data.draw(sizes_for(name))
    steps = data.draw(
        st.lists(
            st.one_of(st.tuples(st.just("access"), keys_st, sizes), st.tuples(st.just("discard"), keys_st, st.just(0))),
            max_size=40,
        ),
        "steps",
    )
    tier, future = build(name, capacity, [[key] for op, key, _ in steps if op == "access"])
    stored_sizes = {}
    for op, key, size in steps:
        before = {stored: stored_sizes[stored] for stored in tier.keys()}
        seen = len(tier.victims)
        if op == "discard":
            tier.discard(key)
            assert key not in tier
            assert tier.victims[seen:] == []
            assert sorted(tier.keys()) == sorted(set(before) - {key})
        else:
            begin(tier, future, [key])
            hit = tier.access(key, size)
            assert hit == (key in before)
            after = tier.keys()
            record_new(tier, before, stored_sizes, size)
            left = [(stored, stored_size) for stored, stored_size in before.items() if stored not in after]
            if not hit and key not in after:
                left.append((key, size))
            assert Counter(tier.victims[seen:]) == Counter(left)
            assert set(after) <= set(before) | {key}
            if hit or size > capacity:
                assert set(after) == set(before)
            elif name != "opt":  # opt may bypass; the others always admit what fits
                assert key in after
        check_sizes(tier, stored_sizes)


@pytest.mark.parametrize("name", NAMES)
@SOME
@given(data=st.data())
def test_batched_calls(name, data):
    """refresh_all never stores or evicts; store_absent stores only absent keys, refreshes none; victims reported."""
    capacity = data.draw(st.integers(0, 12), "capacity")
    sizes = data.draw(sizes_for(name))
    calls = data.draw(st.lists(st.tuples(st.sampled_from(BATCHED), request_st, sizes), max_size=30), "calls")
    tier, future = build(name, capacity, [keys for _, keys, _ in calls])
    stored_sizes = {}
    for op, keys, size in calls:
        before = tier.keys()
        t1 = set(getattr(tier, "t1", ()))
        seen = len(tier.victims)
        begin(tier, future, keys)
        getattr(tier, op)(keys, size)
        after = tier.keys()
        victims = tier.victims[seen:]
        old_sizes = dict(stored_sizes)
        record_new(tier, before, stored_sizes, size, victims)
        assert set(after) <= set(before) | set(keys)
        assert set(before) - set(after) <= {key for key, _ in victims}
        for key, victim_size in victims:  # an entry stored before this call, or one of this call's size
            assert victim_size in (old_sizes.get(key), size)
        if op == "refresh_all":
            assert set(after) == set(before) and victims == []
        if op == "store_absent":  # a key evicted by this call's earlier stores is absent when its turn comes
            evicted = {key for key, _ in victims}
            survivors = [key for key in before if key in after and key not in evicted]
            if name in ORDERED:  # nothing refreshed: survivors keep their order, ahead of what was stored
                assert after == survivors + [key for key in after if key not in survivors]
            if name == "arc":  # nothing refreshed: no T1 block is promoted to T2
                assert {key for key in survivors if key in t1} <= set(tier.t1)
        check_sizes(tier, stored_sizes)


@pytest.mark.parametrize("name", NAMES)
@FEW
@given(
    capacity=st.integers(0, 10),
    keys=st.lists(st.integers(0, 9), min_size=1, max_size=12),
    probe=st.lists(st.integers(0, 9), max_size=8),
    start=st.integers(0, 8),
)
def test_prefix_end(name, capacity, keys, probe, start):
    """prefix_end: index of the first of keys[start:] not stored, len(keys) if all are."""
    tier, future = build(name, capacity, [[key] for key in keys])
    for key in keys:
        begin(tier, future, [key])
        tier.access(key, 1)
    start = min(start, len(probe))
    stored = set(tier.keys())
    expected = next((index for index in range(start, len(probe)) if probe[index] not in stored), len(probe))
    assert tier.prefix_end(probe, start) == expected
    assert tier.prefix_end(probe) == tier.prefix_end(probe, 0)


@pytest.mark.parametrize("name", NAMES)
@FEW
@given(capacity=st.integers(0, 6), extra=st.integers(1, 5), keys=st.lists(st.integers(0, 5), max_size=12))
def test_too_large_entry_is_neither_stored_nor_evicts(name, capacity, extra, keys):
    """An entry larger than the whole room passes through: not stored, nothing evicted, reported as a victim."""
    size = capacity + extra
    tier, future = build(name, capacity, [[key] for key in keys] + [["big"]])
    if name not in EQUAL_SIZES:  # fill with fitting entries first (equal-size tiers take a single size)
        for key in keys:
            begin(tier, future, [key])
            tier.access(key, 1)
        before, used, seen = tier.keys(), tier.used, len(tier.victims)
        assert tier.access("big", size) is False
        assert tier.keys() == before and tier.used == used
        assert tier.victims[seen:] == [("big", size)]
    else:
        for key in keys:
            begin(tier, future, [key])
            assert tier.access(key, size) is False
        assert tier.keys() == [] and tier.used == 0
        assert tier.victims == [(key, size) for key in keys]


@pytest.mark.parametrize("name", NAMES)
@FEW
@given(capacity=st.integers(max_value=-1))
def test_negative_capacity_is_refused(name, capacity):
    with pytest.raises(ValueError, match="capacity"):
        EVICTION_POLICIES[name](capacity)


@pytest.mark.parametrize("name", NAMES)
@FEW
@given(capacity=st.integers(2, 10), size=st.integers(max_value=-1))
def test_negative_size_is_refused(name, capacity, size):
    """A negative size is an error on a miss, and the failed call changes nothing."""
    tier, future = build(name, capacity, [["a"], ["b"]])
    begin(tier, future, ["a"])
    tier.access("a", 1)
    begin(tier, future, ["b"])
    with pytest.raises(ValueError, match="size"):
        tier.access("b", size)
    assert tier.keys() == ["a"] and tier.used == 1 and tier.victims == []
    with pytest.raises(ValueError, match="size"):
        tier.access_all(["b"], size)
    assert tier.keys() == ["a"] and tier.used == 1 and tier.victims == []


@pytest.mark.parametrize("name", sorted(EQUAL_SIZES))
@FEW
@given(size=st.integers(1, 5), other=st.integers(0, 6))
def test_equal_size_policies_refuse_a_second_size(name, size, other):
    """arc and opt count blocks: a block of another size is refused, pointing at --partial-blocks drop."""
    if other == size:
        other += 1
    tier, future = build(name, 20, [["a"], ["b"]])
    begin(tier, future, ["a"])
    tier.access("a", size)
    begin(tier, future, ["b"])
    with pytest.raises(ValueError, match="--partial-blocks drop"):
        tier.access("b", other)
    assert tier.keys() == ["a"]


@pytest.mark.parametrize("name", sorted(set(NAMES) - EQUAL_SIZES))
def test_variable_size_policies_take_mixed_sizes(name):
    tier, _ = build(name, 20)
    tier.access_all(["a"], 3)
    tier.access_all(["b"], 5)
    assert sorted(tier.keys()) == ["a", "b"] and tier.used == 8


@pytest.mark.parametrize("capacity", [0, 4])
def test_arc_refuses_a_size_0_entry(capacity):
    """ARC counts blocks (room // size): an empty block has no count, so it is refused, not stored."""
    tier, _ = build("arc", capacity)
    with pytest.raises(ValueError, match="at least one token"):
        tier.access("a", 0)
    assert "a" not in tier and tier.used == 0


@pytest.mark.parametrize("name", [name for name in NAMES if name != "arc"])
@pytest.mark.parametrize("capacity", [0, 4])
def test_zero_size_entry_is_stored(name, capacity):
    """A size of 0 is valid (only negative sizes are refused) and always fits."""
    tier, future = build(name, capacity, [["a"]])
    begin(tier, future, ["a"])
    assert tier.access("a", 0) is False
    assert "a" in tier and tier.used == 0 and tier.victims == []
