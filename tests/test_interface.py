"""The one two-tier interface (kvlab/cache/interface.py): every engine is an ``Cache``, the replay serves any of
them through its one loop, and ``CacheSettings`` are the commands' flags, refuse what the flags refuse and build
the engines the commands use.

* Every engine (the reference write policies with every eviction policy, the compiled one, llama.cpp's design, the
  planner's account of stored blocks) is an instance of the Protocol; only the compiled one serves batches.
* The settings' fields are ``kvlab replay``'s cache flags with their defaults, in the order its JSON reports
  them; each combination of names is refused by the settings exactly when the command refuses it, with its line.
* Through the one loop (``kvlab.loop.replay``) the reference and the compiled engine agree request by request,
  blocks and tokens, and one request at a time (``serve``) as in batches; the lab's document reads through the
  reference engine are the lab simulator's answers (``kvlab/kvsim.py``, every write policy).
"""

import dataclasses
import itertools
import json

import pytest
from conftest import kvlab, toy_workloads
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.cache.compiled import CompiledLRU, compiles
from kvlab.cache.costs import WindowCosts
from kvlab.cache.eviction import EVICTION_POLICIES
from kvlab.cache.interface import CACHE_SETTINGS, ROOMS, BatchCache, Cache, CacheSettings
from kvlab.cache.prefix import EVICTION_ORDERS, PARTIAL_BLOCKS, Blocks
from kvlab.cache.tiers import DISK_SETTINGS
from kvlab.cache.write_policies import LMCACHE_SWITCHES, WRITE_POLICIES, WriteThrough
from kvlab.kvsim import TWO_TIER_CACHES
from kvlab.loop import TIER_COLUMNS, DocumentReads, replay, rows_of, tiers
from kvlab.serving.llama_cpp import LlamaCppServer
from kvlab.sizing.plan import StoredBlocks
from kvlab.workloads import LabWorkload
from kvlab.workloads.stream import concatenate, requests_of

RULES = st.fixed_dictionaries(
    {
        "partial_blocks": st.sampled_from(PARTIAL_BLOCKS),
        "eviction_order": st.sampled_from(EVICTION_ORDERS),
        "touch_cpu_on_gpu_hit": st.booleans(),
        "re_store_on_gpu_hit": st.booleans(),
    }
)


def rooms(workload, gpu, cpu):
    """Rooms as shares of the workload's tokens, so that every regime comes up."""
    total = sum(len(request.keys) for request in workload.requests()) * workload.block_tokens + 1
    return int(gpu * total), int(cpu * total)


# -- every engine is one ----------------------------------------------------------------------------------------


def engines():
    for policy, eviction in itertools.product(WRITE_POLICIES, EVICTION_POLICIES):
        yield CacheSettings(gpu_tokens=8, cpu_tokens=8, block_tokens=2, write_policy=policy, gpu_eviction=eviction,
                            cpu_eviction=eviction).build()  # fmt: skip
    yield CompiledLRU(8, 8, 2)
    yield LlamaCppServer(8, 8, 2)
    yield StoredBlocks(2, False)


@pytest.mark.parametrize("engine", list(engines()), ids=lambda engine: type(engine).__name__)
def test_every_engine_is_an_engine_and_only_the_compiled_one_serves_batches(engine):
    assert isinstance(engine, Cache)
    assert isinstance(engine, BatchCache) == isinstance(engine, CompiledLRU)
    workload = LabWorkload(2, docs=3, tokens=5, passes="fwd,rev")
    totals = replay(workload, engine)
    assert [row[:3] for row in totals] == [[3, 9, 15], [3, 9, 15]]


def test_the_replay_refuses_what_is_not_an_engine():
    with pytest.raises(TypeError, match="dict is not a two-tier cache"):
        replay(LabWorkload(2, docs=1, tokens=2), {"serve": None})


# -- the settings are the flags -----------------------------------------------------------------------------------


def replay_parser():
    from kvlab.cli.replay import build_parser

    return build_parser("kvlab replay")


def test_the_settings_fields_are_the_replay_flags_with_their_defaults():
    parser = replay_parser()
    shown = parser.format_help().split()
    names = [field.name for field in dataclasses.fields(CacheSettings)]
    assert CACHE_SETTINGS == tuple(name for name in names if name not in (*ROOMS, *DISK_SETTINGS))
    for field in dataclasses.fields(CacheSettings):
        assert f"--{field.name.replace('_', '-')}" in shown, field.name
        if field.name in ("gpu_tokens", "block_tokens"):  # required; the workload's blocks by default
            assert field.default is dataclasses.MISSING
        else:
            assert parser.get_default(field.name) == field.default, field.name
    done = kvlab("replay", "--workload", "lab", "--docs", "2", "--tokens", "10", "--gpu-tokens", "5")
    assert done.returncode == 0
    assert list(json.loads(done.stdout)["cache"]) == [name for name in names if name not in DISK_SETTINGS]
    done = kvlab(
        "replay", "--workload", "lab", "--docs", "2", "--tokens", "10", "--gpu-tokens", "5", "--disk-tokens", "7"
    )
    assert list(json.loads(done.stdout)["cache"]) == names  # a disk tier's settings are reported where it has one


LAB = ["--workload", "lab", "--docs", "2", "--tokens", "8", "--passes", "fwd,rev", "--block-tokens", "4"]


@pytest.mark.parametrize("policy", WRITE_POLICIES)
@pytest.mark.parametrize("partial", PARTIAL_BLOCKS)
def test_the_settings_refuse_exactly_what_the_command_refuses_with_its_line(policy, partial):
    """Every combination of eviction policies and LMCache switches: the command and the settings agree."""
    for gpu, cpu, touch, store in itertools.product(EVICTION_POLICIES, EVICTION_POLICIES, (False, True), (False, True)):
        chosen = {"write_policy": policy, "partial_blocks": partial, "gpu_eviction": gpu, "cpu_eviction": cpu}
        switches = {"touch_cpu_on_gpu_hit": touch, "re_store_on_gpu_hit": store}
        flags = [f"--{name.replace('_', '-')}={value}" for name, value in chosen.items()]
        flags += [f"--{name.replace('_', '-')}" for name, on in switches.items() if on]
        done = kvlab("replay", *LAB, "--gpu-tokens", "8", "--cpu-tokens", "8", *flags)
        try:
            CacheSettings(gpu_tokens=8, cpu_tokens=8, block_tokens=4, **chosen, **switches)
        except ValueError as error:
            assert (done.returncode, done.stderr) == (2, f"kvlab replay: error: {error}\n"), flags
        else:
            assert done.returncode == 0, (flags, done.stderr)


@pytest.mark.parametrize(
    ("change", "flag", "message"),
    [
        ({"block_tokens": 0}, ["--block-tokens", "0"], "block_tokens must be >= 1, got 0"),
        ({"gpu_tokens": -1}, ["--gpu-tokens=-1"], "capacity must be >= 0, got -1"),
        ({"cpu_tokens": -1}, ["--cpu-tokens=-1"], "capacity must be >= 0, got -1"),
        ({"write_policy": "lazy"}, ["--write-policy", "lazy"], "write_policy must be one of write-through, write-back"),
        ({"gpu_eviction": "mru"}, ["--gpu-eviction", "mru"], "gpu_eviction must be one of lru, fifo, lfu, arc, opt"),
        ({"cpu_eviction": "mru"}, ["--cpu-eviction", "mru"], "cpu_eviction must be one of lru, fifo, lfu, arc, opt"),
        ({"partial_blocks": "half"}, ["--partial-blocks", "half"], "partial_blocks must be one of drop, keep"),
        ({"eviction_order": "x"}, ["--eviction-order", "x"], "eviction_order must be one of tail-first, head-first"),
    ],
)
def test_a_bad_value_is_refused_by_the_flags_and_by_the_settings(change, flag, message):
    """The flags' types refuse these first (argparse's line); the settings made in code refuse them too."""
    base = {"gpu_tokens": 8, "cpu_tokens": 8, "block_tokens": 4}
    with pytest.raises(ValueError, match=message):
        CacheSettings(**{**base, **change})
    done = kvlab("replay", *[arg for arg in LAB if arg not in ("--block-tokens", "4")], "--gpu-tokens", "8", *flag)
    assert done.returncode == 2 and done.stderr.count("\n") == 1


def test_the_settings_are_frozen_and_describe_themselves_in_the_reports_order():
    chosen = CacheSettings(gpu_tokens=1, block_tokens=2, write_policy="selective")
    with pytest.raises(AttributeError):
        chosen.gpu_tokens = 3
    assert list(chosen.describe()) == [*ROOMS, *CACHE_SETTINGS]
    assert chosen.policies() == {name: chosen.describe()[name] for name in CACHE_SETTINGS}


def test_build_chooses_the_engine_as_the_replay_does():
    """The reference without a workload or with costs; with a workload, the compiled one where it compiles."""
    small = LabWorkload(4, docs=2, tokens=8)
    large = LabWorkload(1, docs=2**18, tokens=1, passes="fwd")
    for policy, eviction in itertools.product(WRITE_POLICIES, ("lru", "fifo")):
        for workload in (small, large):
            chosen = CacheSettings(gpu_tokens=8, block_tokens=workload.block_tokens, write_policy=policy,
                                   cpu_eviction=eviction)  # fmt: skip
            assert type(chosen.build()) is WRITE_POLICIES[policy]
            assert type(chosen.build(workload, blocks=WindowCosts(1, 1, 4))) is WRITE_POLICIES[policy]
            expected = CompiledLRU if compiles(chosen, workload) else WRITE_POLICIES[policy]
            assert type(chosen.build(workload)) is expected
            assert compiles(chosen, workload) == (workload is large and policy == "write-through" and eviction == "lru")
    with pytest.raises(ValueError, match="blocks are 4 tokens, not 2"):
        CacheSettings(gpu_tokens=8, block_tokens=2).build(small)


# -- the engines agree through the one loop ------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(workload=toy_workloads(), gpu=st.floats(0, 1.2), cpu=st.floats(0, 1.2), rules=RULES)
def test_reference_and_compiled_agree_through_the_one_loop_in_blocks_and_tokens(workload, gpu, cpu, rules):
    gpu, cpu = rooms(workload, gpu, cpu)
    chosen = CacheSettings(gpu_tokens=gpu, cpu_tokens=cpu, block_tokens=workload.block_tokens, **rules)
    results = []
    for engine in (chosen.build(), CompiledLRU(gpu, cpu, workload.block_tokens, **rules)):
        parts = []
        totals = replay(workload, engine, parts)
        results.append((totals, list(rows_of(parts)), list(rows_of(parts, TIER_COLUMNS))))
    assert results[0] == results[1]
    blocks = [sum(column) for column in zip(*results[0][2], strict=True)] or [0, 0]
    assert blocks == [sum(row[3] for row in results[0][0]), sum(row[4] for row in results[0][0])]


@settings(max_examples=200, deadline=None)
@given(workload=toy_workloads(), gpu=st.floats(0, 1.2), cpu=st.floats(0, 1.2), rules=RULES)
def test_the_compiled_engine_serves_one_request_as_the_reference_does(workload, gpu, cpu, rules):
    """``serve`` of one request of dense keys, the Protocol's call, request after request."""
    gpu, cpu = rooms(workload, gpu, cpu)
    reference = WriteThrough(gpu, cpu, workload.block_tokens, **rules)
    compiled = CompiledLRU(gpu, cpu, workload.block_tokens, **rules)
    for _, _, keys, tokens in requests_of(concatenate(workload.batches())):
        assert compiled.serve(keys, tokens) == reference.serve(keys, tokens)


SIZES = st.lists(st.tuples(st.integers(0, 7), st.integers(1, 12)), max_size=50)
UNIFORM = st.tuples(st.lists(st.integers(0, 7), max_size=50), st.integers(0, 12))  # every document one length


@pytest.mark.parametrize("policy", sorted(TWO_TIER_CACHES))
@settings(max_examples=200, deadline=None)
@given(gpu=st.integers(0, 30), cpu=st.integers(0, 30), reads=SIZES | UNIFORM.map(lambda r: [(d, r[1]) for d in r[0]]))
def test_document_reads_through_the_reference_engine_are_the_lab_simulators_answers(policy, gpu, cpu, reads):
    """What the fit, the sweeps and the example measurement use instead of kvsim: the same answer per read, for
    documents of their own lengths, or all of one length (an empty document too, as the example allows)."""
    lengths = {}
    reads = [(doc, lengths.setdefault(doc, tokens)) for doc, tokens in reads]  # a document keeps its length
    workload = DocumentReads(reads)
    engine = CacheSettings(gpu_tokens=gpu, cpu_tokens=cpu, block_tokens=workload.block_tokens,
                           partial_blocks="keep", write_policy=policy).build()  # fmt: skip
    lab = TWO_TIER_CACHES[policy](gpu, cpu)
    assert tiers(workload, engine) == [lab.access(doc, tokens) for doc, tokens in reads]


def stored_sizes(workload, keep, costs):
    """The planner's former loop: every block a request can store, at the most it can cost (its last size)."""
    block, sizes = workload.block_tokens, {}
    for request in workload.requests():
        blocks = Blocks(request.keys, request.tokens, block, keep)
        for index in range(blocks.stored):
            size = block if index < blocks.full else blocks.last
            sizes[request.keys[index]] = costs.most(size) if costs else size
    return sum(sizes.values())


@settings(max_examples=200, deadline=None)
@given(workload=toy_workloads(), keep=st.booleans(), window=st.none() | st.integers(1, 9))
def test_the_planners_stored_blocks_through_the_one_loop_are_its_former_loops(workload, keep, window):
    costs = None if window is None else WindowCosts(3, 5, window)
    stored = StoredBlocks(workload.block_tokens, keep, costs)
    totals = replay(workload, stored)
    assert stored.room == stored_sizes(workload, keep, costs)
    assert all(row[3:] == [0, 0, 0, 0] for row in totals)


def test_the_lmcache_switches_are_settings_fields():
    assert set(LMCACHE_SWITCHES) <= set(CACHE_SETTINGS)
