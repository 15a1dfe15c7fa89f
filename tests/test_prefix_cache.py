"""The block-level prefix cache (kvlab/cache/prefix.py) against an independent list-based model, and its
equivalence with the lab's document-level simulator when every document is one block."""

import json
import math

import pytest
from conftest import ROOT, load_config
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import scenario
from kvlab.cache.eviction import LRU
from kvlab.cache.prefix import EVICTION_ORDERS, PARTIAL_BLOCKS
from kvlab.cache.write_policies import WriteThrough
from kvlab.kvsim import LRUCache
from kvlab.loop import replay, rows_of
from kvlab.report.sweep import VALUES
from kvlab.workflow import commands
from kvlab.workloads import WORKLOADS


class ListLRU:
    """Brute-force size-aware LRU: a list of [key, size], oldest first (no OrderedDict, no batching)."""

    def __init__(self, capacity):
        self.capacity = capacity
        self.entries = []

    def __contains__(self, key):
        return any(entry[0] == key for entry in self.entries)

    def access(self, key, size):
        for index, entry in enumerate(self.entries):
            if entry[0] == key:
                self.entries.append(self.entries.pop(index))
                return
        if size > self.capacity:
            return
        while sum(entry[1] for entry in self.entries) + size > self.capacity:
            self.entries.pop(0)
        self.entries.append([key, size])


def model_serve(gpu, cpu, keys, tokens, block, keep, tail_first):
    """The documented rules, block by block: lookup GPU then CPU prefix; access every storable block on
    the GPU and, unless the GPU served it, on the CPU; tail to head or head to tail."""
    count = len(keys)
    sizes = [block] * (count - 1) + [tokens - block * (count - 1)] if count else []
    gpu_end = 0
    while gpu_end < count and keys[gpu_end] in gpu:
        gpu_end += 1
    cpu_end = gpu_end
    while cpu_end < count and keys[cpu_end] in cpu:
        cpu_end += 1
    storable = [index for index in range(count) if sizes[index] == block or keep]
    for index in reversed(storable) if tail_first else storable:
        gpu.access(keys[index], sizes[index])
        if index >= gpu_end:
            cpu.access(keys[index], sizes[index])
    return gpu_end, cpu_end - gpu_end, sum(sizes[:gpu_end]), sum(sizes[gpu_end:cpu_end])


def contents(tier):
    """A tier's entries, oldest first, as [key, size] pairs."""
    if isinstance(tier, ListLRU):
        return tier.entries
    return [[key, size] for key, size in tier._sizes.items()]


@st.composite
def requests(draw, block):
    """A request: up to 8 keys from a small alphabet (repeats allowed) and a length that fits them."""
    keys = draw(st.lists(st.integers(0, 12), max_size=8))
    if not keys:
        return keys, 0
    last = draw(st.integers(1, block))
    return keys, block * (len(keys) - 1) + last


@st.composite
def replays(draw):
    block = draw(st.integers(1, 6))
    return (
        block,
        draw(st.integers(0, 40)),
        draw(st.integers(0, 40)),
        draw(st.sampled_from(PARTIAL_BLOCKS)),
        draw(st.sampled_from(EVICTION_ORDERS)),
        draw(st.lists(requests(block), max_size=25)),
    )


@settings(max_examples=1500, deadline=None)
@given(replays())
def test_prefix_cache_equals_the_block_by_block_model(case):
    block, gpu_room, cpu_room, partial, order, workload = case
    cache = WriteThrough(gpu_room, cpu_room, block, partial, order)
    gpu, cpu = ListLRU(gpu_room), ListLRU(cpu_room)
    for keys, tokens in workload:
        expected = model_serve(gpu, cpu, keys, tokens, block, partial == "keep", order == "tail-first")
        assert cache.serve(keys, tokens) == expected
        assert contents(cache.gpu) == contents(gpu)
        assert contents(cache.cpu) == contents(cpu)
        assert cache.gpu.used == sum(size for _, size in gpu.entries) <= gpu_room
        assert cache.cpu.used == sum(size for _, size in cpu.entries) <= cpu_room


@settings(max_examples=800, deadline=None)
@given(
    st.integers(0, 30),
    st.lists(st.tuples(st.sampled_from(["all", "touch", "one"]), st.lists(st.integers(0, 9), max_size=6)), max_size=20),
    st.integers(0, 12),
)
def test_block_lru_batched_calls_equal_lru_cache_access_one_by_one(capacity, calls, size):
    """access_all / touch_all / prefix_end are LRUCache.access and `in`, batched."""
    batched, single = LRU(capacity), LRUCache(capacity)
    for kind, keys in calls:
        expected_end = next((index for index, key in enumerate(keys) if key not in single), len(keys))
        assert batched.prefix_end(keys) == expected_end
        if kind == "all":
            batched.access_all(keys, size)
        elif kind == "touch":
            batched.touch_all(keys, size)
        else:
            for key in keys:
                batched.access(key, size)
        for key in keys:
            single.access(key, size)
        assert batched.keys() == single.keys()
        assert batched.used == single.used


def replayed(workload, cache):
    """``(round, label, gpu_tokens, cpu_tokens)`` of each request of a replay."""
    parts = []
    replay(workload, cache, parts)
    return [(row[0], row[1], row[4], row[5]) for row in rows_of(parts)]


def lab_passes_from_replay(docs, tokens, passes, gpu, cpu, block, partial):
    """scenario.run's output rebuilt from a block-level replay of the lab workload."""
    workload = WORKLOADS["lab"](block, docs=docs, tokens=tokens, passes=",".join(passes))
    rows = replayed(workload, WriteThrough(gpu, cpu, block, partial))
    result = [{"order": order, "gpu_hits": 0, "cpu_hits": 0, "misses": 0, "hit_docs": []} for order in passes]
    for round_index, doc, gpu_tokens, cpu_tokens in rows:
        counts = result[round_index]
        tier = "gpu_hits" if gpu_tokens else "cpu_hits" if cpu_tokens else "misses"
        counts[tier] += 1
        if tier != "misses":
            counts["hit_docs"].append(doc)
    return {"passes": result}


@settings(max_examples=600, deadline=None)
@given(
    docs=st.integers(0, 9),
    tokens=st.integers(1, 60),
    passes=st.lists(st.sampled_from(["fwd", "rev"]), min_size=1, max_size=4),
    gpu=st.integers(0, 400),
    cpu=st.integers(0, 400),
    extra=st.integers(0, 30),
)
def test_one_block_per_document_reproduces_scenario(docs, tokens, passes, gpu, cpu, extra):
    """--block-tokens >= the document and partial blocks kept: the lab's simulator, request for request."""
    expected = scenario.run(gpu, cpu, docs, tokens, passes)
    assert lab_passes_from_replay(docs, tokens, passes, gpu, cpu, tokens + extra, "keep") == expected
    if extra == 0:  # a document of exactly one full block is stored under either partial-block rule
        assert lab_passes_from_replay(docs, tokens, passes, gpu, cpu, tokens, "drop") == expected


def lab_artifact_cases():
    """(artifact, key, settings, passes, record) for every lab run and every sweep point of config.yaml."""
    config = load_config()
    for name, run in config["runs"].items():
        merged = {**config["scenario"], **{key: run[key] for key in commands.SETTINGS if key in run}}
        yield name, None, merged, run["passes"], None
    for name, sweep in config["sweeps"].items():
        for value in sweep["grid"]:
            merged = {"cpu": 0, **config["scenario"], **sweep["fixed"], sweep["vary"]: value}
            yield name, str(value), merged, sweep["passes"], sweep["record"]


@pytest.mark.parametrize(
    ("artifact", "key", "lab", "passes", "record"),
    list(lab_artifact_cases()),
    ids=[f"{case[0]}-{case[1]}" if case[1] else case[0] for case in lab_artifact_cases()],
)
def test_every_lab_artifact_comes_out_of_the_block_replay(artifact, key, lab, passes, record):
    """cyclic, baseline, offload, and each point of cliff and cpu_cliff, as committed under results/."""
    committed = json.loads((ROOT / "results" / f"{artifact}.json").read_text(encoding="utf-8"))
    for block, partial in ((lab["tokens"], "drop"), (lab["tokens"] + 1, "keep")):
        replayed = lab_passes_from_replay(lab["docs"], lab["tokens"], passes, lab["gpu"], lab["cpu"], block, partial)
        if record is None:
            assert replayed == committed
        else:
            assert VALUES[record["value"]](replayed["passes"][record["pass"] - 1]) == committed[key]


@settings(max_examples=300, deadline=None)
@given(
    docs=st.integers(1, 6),
    blocks_per_doc=st.integers(1, 6),
    block=st.integers(1, 5),
    passes=st.lists(st.sampled_from(["fwd", "rev"]), min_size=1, max_size=4),
    gpu=st.integers(0, 120),
    cpu=st.integers(0, 120),
)
def test_tail_first_keeps_every_documents_gpu_blocks_a_prefix(docs, blocks_per_doc, block, passes, gpu, cpu):
    """Tail first, the head of a document is always more recent than its tail, so the GPU never holds a
    block without the blocks before it: nothing cached is unreachable."""
    tokens = block * blocks_per_doc
    workload = WORKLOADS["lab"](block, docs=docs, tokens=tokens, passes=",".join(passes))
    cache = WriteThrough(gpu, cpu, block)
    for request in workload.requests():
        cache.serve(request.keys, request.tokens)
        for chain in workload.document_chains(docs, tokens):
            cached = [key in cache.gpu for key in chain]
            assert cached == sorted(cached, reverse=True), (chain, cache.gpu.keys())


@settings(max_examples=400, deadline=None)
@given(
    docs=st.integers(1, 8),
    block=st.integers(1, 20),
    tokens=st.integers(1, 200),
    shortfall_or_spare=st.integers(-30, 230),
)
def test_tail_first_turns_the_cyclic_cliff_into_a_ramp_one_document_wide(docs, block, tokens, shortfall_or_spare):
    """GPU only, fwd,fwd: a room `shortfall` tokens short of the stored set still reuses, in pass 2, each
    document's head blocks that fit in (stored per document - shortfall); one document short, nothing."""
    per_document = tokens // block * block  # full blocks only
    room = max(0, docs * per_document - shortfall_or_spare)
    shortfall = docs * per_document - room
    workload = WORKLOADS["lab"](block, docs=docs, tokens=tokens, passes="fwd,fwd")
    pass2 = replay(workload, WriteThrough(room, 0, block))[1]
    kept_blocks = max(0, per_document - shortfall) // block if shortfall > 0 else per_document // block
    assert pass2[5] == docs * kept_blocks * block  # GPU hit tokens


def lab_256(order):
    """The lab at LMCache's 256-token chunks, GPU 21,520 tokens only: the last pass's GPU blocks per document."""
    workload = WORKLOADS["lab"](256, docs=10, tokens=5011, passes="fwd,fwd,rev")
    rows = replayed(workload, WriteThrough(21520, 0, 256, "drop", order))
    return {doc: gpu_tokens // 256 for round_index, doc, gpu_tokens, _ in rows if round_index == 2}


def test_tail_first_reuses_the_head_of_a_partly_evicted_document_and_head_first_does_not():
    """84 chunks fit; after pass 2 the GPU holds documents 9..6 (76 chunks) and 8 chunks of document 5:
    its head when the tail goes first (reusable), its tail when the head goes first (unreachable)."""
    assert lab_256("tail-first") == {9: 19, 8: 19, 7: 19, 6: 19, 5: 8, 4: 0, 3: 0, 2: 0, 1: 0, 0: 0}
    assert lab_256("head-first") == {9: 19, 8: 19, 7: 19, 6: 19, 5: 0, 4: 0, 3: 0, 2: 0, 1: 0, 0: 0}


def test_partial_last_block_is_stored_only_when_kept():
    """LMCache stores 4,864 of a 5,011-token document in 256-token chunks: 19 chunks, not the 147-token rest."""
    for partial, stored in (("drop", 4864), ("keep", 5011)):
        cache = WriteThrough(10**6, 10**6, 256, partial)
        keys = list(range(math.ceil(5011 / 256)))
        assert cache.serve(keys, 5011) == (0, 0, 0, 0)
        assert cache.gpu.used == cache.cpu.used == stored
        assert cache.serve(keys, 5011) == (len(keys) - (partial == "drop"), 0, stored, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"block_tokens": 0}, "block_tokens"),
        ({"partial_blocks": "half"}, "drop, keep"),
        ({"eviction_order": "random"}, "tail-first, head-first"),
    ],
)
def test_bad_cache_settings_are_refused_with_the_valid_values(kwargs, message):
    settings = {"gpu_room": 10, "cpu_room": 0, "block_tokens": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        WriteThrough(**settings)
