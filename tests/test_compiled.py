"""The compiled engines against the reference ones they replace on the hot paths.

* ``CompiledLRU`` (kvlab/cache/compiled.py) against ``WriteThrough`` with LRU tiers (kvlab/cache/prefix.py),
  request by request, with every block rule and LMCache switch, on random prefix workloads and on the
  Mooncake trace; however the requests are cut into batches.
* The dense ids of ``Interner`` against a dict; ``group_blocks`` against slicing.
* The equal-sizes curve (kvlab/curves/equal_sizes.py) against the general one, on the GPU and the CPU tier.
* The command chooses the compiled engine exactly where it applies.
"""

import numpy as np
import pytest
from conftest import ROOT, toy_workloads
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.cache.compiled import COMPILE_WORTH, CompiledLRU, has
from kvlab.cache.write_policies import WRITE_POLICIES, CacheSettings, WriteThrough
from kvlab.curves.mrc import tier_curve
from kvlab.loop import replay, rows_of
from kvlab.workloads import LabWorkload, MooncakeWorkload
from kvlab.workloads.dense import Interner
from kvlab.workloads.stream import concatenate, group_blocks

TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
RULES = st.fixed_dictionaries(
    {
        "partial_blocks": st.sampled_from(["drop", "keep"]),
        "eviction_order": st.sampled_from(["tail-first", "head-first"]),
        "touch_cpu_on_gpu_hit": st.booleans(),
        "re_store_on_gpu_hit": st.booleans(),
    }
)


def rooms(workload, draw_gpu, draw_cpu):
    """Rooms as shares of the workload's distinct tokens (so that every regime comes up)."""
    total = sum(len(request.keys) for request in workload.requests()) * workload.block_tokens + 1
    return int(draw_gpu * total), int(draw_cpu * total)


def both(workload, gpu, cpu, rules):
    """``(totals, rows)`` of the reference and of the compiled replay."""
    results = []
    for cache in (
        WriteThrough(gpu, cpu, workload.block_tokens, **rules),
        CompiledLRU(gpu, cpu, workload.block_tokens, **rules),
    ):
        parts = []
        totals = replay(workload, cache, parts)
        results.append((totals, list(rows_of(parts))))
    return results


@settings(max_examples=400, deadline=None)
@given(workload=toy_workloads(), gpu=st.floats(0, 1.2), cpu=st.floats(0, 1.2), rules=RULES)
def test_compiled_replay_equals_the_reference_request_by_request(workload, gpu, cpu, rules):
    gpu, cpu = rooms(workload, gpu, cpu)
    reference, compiled = both(workload, gpu, cpu, rules)
    assert compiled == reference


@settings(max_examples=150, deadline=None)
@given(workload=toy_workloads(), gpu=st.floats(0, 1.2), cpu=st.floats(0, 1.2), rules=RULES, data=st.data())
def test_batches_carry_the_state(workload, gpu, cpu, rules, data):
    """However the requests are cut into batches, the tiers carry on from one batch to the next."""
    gpu, cpu = rooms(workload, gpu, cpu)
    columns = concatenate(workload.batches())
    cuts = sorted(data.draw(st.lists(st.integers(0, len(columns.counts)), max_size=4)))
    starts = columns.starts
    whole = CompiledLRU(gpu, cpu, workload.block_tokens, **rules).served(columns, len(workload.rounds))
    cache = CompiledLRU(gpu, cpu, workload.block_tokens, **rules)
    pieces = []
    for low, high in zip([0, *cuts], [*cuts, len(columns.counts)], strict=True):
        piece = columns._replace(
            rounds=columns.rounds[low:high],
            labels=columns.labels[low:high],
            tokens=columns.tokens[low:high],
            counts=columns.counts[low:high],
            keys=columns.keys[starts[low] : starts[high]],
        )
        pieces.append(cache.served(piece, len(workload.rounds)))
    assert np.concatenate(pieces).tolist() == whole.tolist()


def test_compiled_replay_equals_the_reference_on_the_mooncake_trace():
    workload = MooncakeWorkload(trace=str(TRACE))
    reference, compiled = both(workload, 2_000_000, 20_000_000, {"partial_blocks": "drop"})
    assert compiled == reference
    assert reference[0][0][3] > 0 and reference[0][0][4] > 0  # both tiers serve


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(0, 30), max_size=300), st.integers(1, 3))
def test_interner_numbers_ids_in_order_of_first_appearance(ids, pieces):
    expected = {}
    for value in ids:
        expected.setdefault(value, len(expected))
    interner = Interner(slots=2)
    got = [interner.dense(np.array(part, dtype=np.int64)).tolist() for part in np.array_split(ids, pieces)]
    assert sum(got, []) == [expected[value] for value in ids]
    assert interner.count == len(expected)


@given(st.lists(st.integers(0, 9), max_size=20), st.integers(1, 5))
def test_group_blocks_keeps_the_last_id_of_each_group(counts, group):
    ids = np.arange(sum(counts), dtype=np.int64) * 7
    grouped, grouped_counts = group_blocks(ids, np.array(counts, dtype=np.int64), group)
    expected, start = [], 0
    for count in counts:
        chain = ids[start : start + count].tolist()
        keys = chain[group - 1 :: group] + ([chain[-1]] if count % group else [])
        expected.append(keys)
        start += count
    assert grouped_counts.tolist() == [len(keys) for keys in expected]
    assert grouped.tolist() == sum(expected, [])


@pytest.mark.parametrize("order", ["tail-first", "head-first"])
@settings(max_examples=150, deadline=None)
@given(workload=toy_workloads(), gpu=st.none() | st.floats(0, 1.2))
def test_equal_sizes_curve_equals_the_general_one(workload, gpu, order):
    gpu = None if gpu is None else rooms(workload, gpu, 0)[0]
    equal = tier_curve(workload, "drop", order, gpu, method="equal")
    general = tier_curve(workload, "drop", order, gpu, method="general")
    for name in ("capacities", "values", "inputs", "base"):
        assert getattr(equal, name).tolist() == getattr(general, name).tolist(), name


def test_equal_sizes_curve_refuses_partial_blocks():
    with pytest.raises(ValueError, match="one size"):
        tier_curve(LabWorkload(256, docs=2, tokens=300), "keep", method="equal")


@pytest.mark.parametrize("policy", sorted(WRITE_POLICIES))
@pytest.mark.parametrize("gpu_eviction", ["lru", "fifo", "opt"])
def test_the_compiled_engine_takes_write_through_lru_only(policy, gpu_eviction):
    settings = {"gpu_eviction": gpu_eviction, "cpu_eviction": "lru"}
    compiled = has(CacheSettings(gpu_tokens=100, cpu_tokens=100, block_tokens=1, write_policy=policy, **settings))
    assert compiled == (policy == "write-through" and gpu_eviction == "lru")
    workload = LabWorkload(1, docs=COMPILE_WORTH, tokens=1, passes="fwd")
    assert isinstance(fastest_cache(workload, policy, 100, 100, **settings), CompiledLRU) == compiled


def fastest_cache(workload, write_policy, gpu_tokens, cpu_tokens, **settings):
    """The engine the replay command builds for ``workload`` (kvlab/cli/flags.py's ``build_cache``)."""
    rooms = {"gpu_tokens": gpu_tokens, "cpu_tokens": cpu_tokens, "block_tokens": workload.block_tokens}
    return CacheSettings(**rooms, write_policy=write_policy, **settings).build(workload)


def test_small_workloads_and_those_whose_tokens_could_overflow_64_bits_use_the_reference():
    """Compiling pays from COMPILE_WORTH block accesses on (numba's import and loading are most of a small
    replay's time); a trace, whose size is known only once read, is compiled."""
    for docs, expected in ((COMPILE_WORTH - 1, WriteThrough), (COMPILE_WORTH, CompiledLRU)):
        assert type(fastest_cache(LabWorkload(1, docs=docs, tokens=1, passes="fwd"), "write-through", 0, 0)) is expected
    huge = LabWorkload(2**53, docs=COMPILE_WORTH, tokens=2**53, passes="fwd")
    assert huge.accesses() >= COMPILE_WORTH and huge.token_bound() >= 2**62
    assert isinstance(fastest_cache(huge, "write-through", 0, 0), WriteThrough)
    assert isinstance(fastest_cache(MooncakeWorkload(trace=str(TRACE)), "write-through", 0, 0), CompiledLRU)
