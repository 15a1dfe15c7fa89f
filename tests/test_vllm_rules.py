"""vLLM's rules by version (kvlab/serving/vllm.py) as ``kvlab simulate`` applies them, and vLLM 0.33's CPU tier
(kvlab/simulator/offloading.py): a run at zero load against what any prefix cache must find, and its eviction order
against a brute-force reading of vLLM's LRU ranks. ``make bench-vllm`` holds the same rules against vLLM's own code."""

import json
import math

import pytest
from engine_reference import ToyCost
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine import chains

from kvlab.serving.vllm import NEWEST, RULES, rules_for
from kvlab.simulator.events import Simulator
from kvlab.simulator.offloading import OffloadingConnector, RequestState
from kvlab.simulator.pool import BlockPool
from kvlab.simulator.settings import EngineSettings
from kvlab.util.errors import SettingError
from kvlab.workloads import Timed

MODEL = {"model_config": "models/Llama-3.1-8B-Instruct/config.json", "gpu_system": "h100_sxm"}
LAB = {
    "workload": "lab",
    "docs": 3,
    "tokens": 600,
    "block_tokens": 64,
    "gpu_blocks": 40,
    "clients": 2,
    "output_tokens": 4,
}


@pytest.mark.parametrize(
    ("version", "expected"),
    [("0.14.0", "0.14.0"), ("0.20", "0.14.0"), ("0.24.0", "0.24.0"), ("0.27.0", "0.24.0"), ("0.40.1", NEWEST)],
)
def test_a_version_takes_the_rules_of_the_newest_change_not_after_it(version, expected):
    assert rules_for(version).version == expected


@pytest.mark.parametrize("version", ["latest", "0.33.0rc1", "", "1e3", "0..1"])
def test_a_version_that_is_not_one_is_refused(version):
    with pytest.raises(SettingError, match="--engine-version: expected a vLLM version such as"):
        rules_for(version)


def test_the_output_names_the_rules_and_where_they_come_from():
    """``--engine-version`` where given; else the database's version where it prices the run; else the newest. The
    pool's usable blocks leave out vLLM's null block."""
    import kvlab

    asked = json.loads(kvlab.simulate(**MODEL, **LAB, latency_source="roofline", engine_version="0.24.0").text)
    assert asked["engine"]["version"] == "0.24.0" and asked["engine"]["rules"] == "--engine-version"
    assert asked["cache"]["gpu_blocks"] == 40 and asked["cache"]["gpu_blocks_usable"] == 39
    newest = json.loads(kvlab.simulate(**MODEL, **LAB, latency_source="roofline").text)
    assert newest["engine"]["version"] == NEWEST and "newest" in newest["engine"]["rules"]
    measured = json.loads(kvlab.simulate(**MODEL, **LAB).text)
    database = measured["latency"]["prefill"].rsplit("/", 1)[-1]
    assert measured["engine"]["version"] == database and "database" in measured["engine"]["rules"]


def test_a_pool_of_one_block_is_refused_with_the_null_block_said():
    import kvlab

    with pytest.raises(SettingError, match="at least 2 blocks .*null block"):
        kvlab.simulate(**MODEL, **{**LAB, "gpu_blocks": 1}, latency_source="roofline")


def test_without_a_cpu_tier_the_versions_since_0_24_agree():
    """0.33 changed the CPU tier and the queue of requests holding blocks, nothing a GPU pool alone meets."""
    import kvlab

    texts = {
        version: json.loads(kvlab.simulate(**MODEL, **LAB, latency_source="roofline", engine_version=version).text)
        for version in ("0.24.0", "0.33.0")
    }
    for document in texts.values():
        del document["engine"]["version"], document["engine"]["rules"]
    assert texts["0.24.0"] == texts["0.33.0"]


@settings(max_examples=100, deadline=None)
@given(chains(whole_blocks=False), st.data())
def test_at_zero_load_a_cpu_tier_that_holds_everything_finds_every_prefix_seen(workload, data):
    """One request at a time, a CPU tier as large as all the blocks, vLLM 0.33's connector: each request's GPU and
    CPU hits together are the longest prefix of its full blocks that a request before it had (its GPU hit a token
    short of its sequence, its CPU hit to its last full block), and the GPU's part is what the pool still holds."""
    block, requests = workload
    needs = [math.ceil((tokens + output - 1) / block) for _, tokens, output in requests]
    gpu = data.draw(st.integers(max(needs), max(needs) + 6), label="gpu blocks")
    everything = sum(len(keys) for keys, _, _ in requests)
    engine = EngineSettings(generated_blocks=data.draw(st.sampled_from(["keep", "drop"]), label="generated"))
    simulator = Simulator(
        BlockPool(gpu, block), ToyCost(block), OffloadingConnector(everything), engine, True, rules=rules_for(NEWEST)
    )
    timed = [
        (number * 1e6, Timed(keys, tokens, None, output)) for number, (keys, tokens, output) in enumerate(requests)
    ]
    rows = {row[0]: row for row in simulator.run(timed).rows}
    seen = set()
    for number, (keys, tokens, _) in enumerate(requests):
        full = keys[: tokens // block]
        prefix = 0
        while prefix < len(full) and tuple(full[: prefix + 1]) in seen:
            prefix += 1
        gpu_hit, cpu_hit = rows[number][8], rows[number][9]
        assert gpu_hit + cpu_hit == prefix * block, number
        assert gpu_hit <= (tokens - 1) // block * block
        seen.update(tuple(full[: end + 1]) for end in range(len(full)))


def brute_victims(ranks, evictable, count, protected):
    """vLLM's LRUCachePolicy.evict read plainly: the ``count`` least ranks among the evictable keys not protected."""
    candidates = sorted((ranks[key], key) for key in evictable if key not in protected)
    return None if len(candidates) < count else [key for _, key in candidates[:count]]


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_cpu_tier_evicts_in_vllms_rank_order(data):
    """Random offers, loads and finishes of a few requests on a small CPU tier: every eviction takes the least ranked
    evictable keys not offered in the same call (a sort of all of them, beside the connector's lazy heap)."""
    capacity = data.draw(st.integers(1, 6), label="capacity")
    tier = OffloadingConnector(capacity)
    states = [RequestState(list(range(start, start + 8))) for start in (0, 4, 10)]
    loads = []
    for _ in range(data.draw(st.integers(1, 40), label="actions")):
        index = data.draw(st.integers(0, 2))
        state, action = states[index], data.draw(st.sampled_from(["offer", "offer", "load", "loaded", "finish"]))
        keys = list(state.positions)
        if action == "offer":
            start = data.draw(st.integers(0, 7))
            offered = keys[start : start + data.draw(st.integers(1, 4))]
            before_ready, before_ranks, before_evictable = dict(tier.ready), dict(tier.ranks), set(tier.evictable)
            taken = tier.offer(state, offered, state.positions)
            evicted = [key for key in before_ready if key not in tier.ready]
            if evicted:
                # ranks may rise by the offer's own touch; the victims are the least of the ranks the offer left
                ranks = {key: tier.ranks.get(key, before_ranks[key]) for key in before_ranks}
                expected = brute_victims(ranks, before_evictable, len(evicted), set(offered))
                assert sorted(evicted, key=ranks.__getitem__) == expected
            if taken:
                tier.stored(taken)
        elif action == "load":
            end, deferred = tier.prefix_end(keys, 0)
            if end and not deferred:
                tier.load(state, keys[:end], state.positions)
                loads.append(keys[:end])
        elif action == "loaded" and loads:
            tier.loaded(loads.pop(0))
        elif action == "finish":
            tier.finished(state, state.positions)
        assert len(tier) <= capacity
        assert tier.evictable == {key for key, ready in tier.ready.items() if ready and key not in tier.pins}


def test_every_version_kvlab_models_is_listed_once_and_in_order():
    versions = [tuple(int(part) for part in rules.version.split(".")) for rules in RULES]
    assert versions == sorted(set(versions)) and RULES[-1].version == NEWEST
