"""Tests of kvlab/curves/mrc.py: exact LRU hit curves against brute-force replays at every capacity.

* ``lru_curve`` against the lab's ``LRUCache`` at every capacity 0 .. (sum of distinct sizes + 2).
* ``tier_curve`` against the block-level replay (``replay`` of ``WriteThrough``): small random workloads
  at every room, and the Mooncake traces (a truncated copy) at every step of the curve and one token
  below it.
* The lab's cliffs (results/cliff.json, results/cpu_cliff.json) come out of the curve.
* ``smallest_for_ratio`` is exact; ``cliffs`` and the command line agree with the library.
"""

import gzip
import json
import os
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, kvlab, load_config, run_python, toy_workloads
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.cache.write_policies import WriteThrough
from kvlab.curves.mrc import Curve, cliffs, curve_csv, lru_curve, tier_curve
from kvlab.kvsim import LRUCache
from kvlab.loop import replay
from kvlab.workloads import LabWorkload, MooncakeWorkload

TRACES = ROOT / "data" / "traces" / "mooncake"
TRACE_NAMES = ["conversation_trace.jsonl", "synthetic_trace.jsonl"]
TRACE_REQUESTS = 200  # enough for curves of more than 50 steps; each step is checked by two replays
PARTIAL = ["drop", "keep"]
ORDERS = ["tail-first", "head-first"]
TOP_KEYS = [
    "workload",
    "cache",
    "input_tokens",
    "served_in_front_tokens",
    "reusable_tokens",
    "max_token_hit_ratio",
    "tokens_for_full_reuse",
]
ROUND_KEYS = ["round", "input_tokens", "served_in_front_tokens", "reusable_tokens", "tokens_for_full_reuse"]


# --------------------------------------------------------------------------------------------
# Brute-force references
# --------------------------------------------------------------------------------------------


def lru_hits(keys, sizes, capacity):
    cache = LRUCache(capacity)
    return [cache.access(key, size) for key, size in zip(keys, sizes, strict=True)]


def distinct_total(keys, sizes):
    return sum(dict(zip(keys, sizes, strict=True)).values())


def replay_rows(workload, gpu, cpu, partial="drop", order="tail-first"):
    cache = WriteThrough(gpu, cpu, workload.block_tokens, partial_blocks=partial, eviction_order=order)
    return replay(workload, cache)


def gpu_tokens(rows):
    return [row[5] for row in rows]


def cpu_tokens(rows):
    return [row[6] for row in rows]


def check_shape(curve, rounds):
    """The documented layout: one row per round, capacities start at 0 and rise strictly."""
    assert curve.rounds == tuple(rounds)
    assert curve.capacities[0] == 0
    assert np.all(np.diff(curve.capacities) > 0)
    assert curve.values.shape == (len(rounds), len(curve.capacities))
    assert curve.inputs.shape == curve.base.shape == (len(rounds),)
    assert np.array_equal(curve.total(), curve.values.sum(axis=0))
    assert np.array_equal(curve.final(), curve.values[:, -1])


# --------------------------------------------------------------------------------------------
# lru_curve
# --------------------------------------------------------------------------------------------

SIZES = st.one_of(
    st.sampled_from([0, 0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65]),
    st.integers(min_value=0, max_value=70),
)


@st.composite
def streams(draw):
    count = draw(st.integers(1, 10))
    labels = draw(st.lists(st.integers(0, 2**40), min_size=count, max_size=count, unique=True))
    size_of = draw(st.lists(SIZES, min_size=count, max_size=count))
    length = draw(st.integers(0, 40))
    ids = draw(st.lists(st.integers(0, count - 1), min_size=length, max_size=length))
    return [labels[i] for i in ids], [size_of[i] for i in ids]


@settings(max_examples=150, deadline=None)
@given(stream=streams())
def test_lru_curve_matches_lru_cache_at_every_capacity(stream):
    """Hits and hit sizes of LRUCache.access at every capacity 0 .. total + 2 (beyond: everything fits)."""
    keys, sizes = stream
    counted = lru_curve(keys, sizes)
    weighed = lru_curve(keys, sizes, weigh_by_size=True)
    total = distinct_total(keys, sizes)
    for curve, inputs in ((counted, len(keys)), (weighed, sum(sizes))):
        check_shape(curve, ["all"])
        assert curve.inputs.tolist() == [inputs]
        assert curve.base.tolist() == [0]
        assert curve.capacities[-1] <= total + 1  # every step lies in the checked range
    for capacity in range(total + 3):
        hits = lru_hits(keys, sizes, capacity)
        assert counted.at(capacity).tolist() == [sum(hits)], capacity
        assert weighed.at(capacity).tolist() == [sum(s for s, hit in zip(sizes, hits, strict=True) if hit)], capacity
    everything = lru_hits(keys, sizes, total)
    assert counted.final().tolist() == [sum(everything)]
    assert weighed.final().tolist() == [sum(s for s, hit in zip(sizes, everything, strict=True) if hit)]


def test_lru_curve_is_not_monotone():
    """LRUCache keeps A (size 1) at capacity 1 and 2, where B (size 3) cannot enter; at 3 B evicts A."""
    keys, sizes = [10, 20, 10], [1, 3, 1]
    expected = [sum(lru_hits(keys, sizes, capacity)) for capacity in range(7)]
    assert expected == [0, 1, 1, 0, 1, 1, 1]
    curve = lru_curve(keys, sizes)
    assert [int(curve.at(capacity)[0]) for capacity in range(7)] == expected
    assert curve.capacities.tolist() == [0, 1, 3, 4]
    assert curve.values.tolist() == [[0, 1, 0, 1]]
    assert curve.smallest_reaching(1) == 1  # the first capacity, not the last step up


def test_lru_curve_counts_a_size_zero_hit_once():
    assert lru_curve([5, 5], [0, 0]).at(0).tolist() == [sum(lru_hits([5, 5], [0, 0], 0))]


# --------------------------------------------------------------------------------------------
# Curve methods
# --------------------------------------------------------------------------------------------


def small_curve(base=0, inputs=10):
    return Curve(("all",), np.array([0, 5, 10, 20]), np.array([[0, 7, 9, 10]]), np.array([inputs]), np.array([base]))


def test_at_is_a_step_function():
    curve = small_curve()
    assert [int(curve.at(c)[0]) for c in (0, 4, 5, 9, 10, 19, 20, 10**12)] == [0, 0, 7, 7, 9, 9, 10, 10]


def test_smallest_for_ratio_is_exact():
    """0.9 means 9/10 (not the double slightly above it); 0.7 * 10 is 7.000000000000001 in floats."""
    curve = small_curve()
    assert curve.smallest_for_ratio(0.9) == 10  # 9 of 10: reached at 10, not 20
    assert curve.smallest_for_ratio(0.7) == 5  # 7 of 10: reached at 5, not 10
    assert curve.smallest_for_ratio(1.0) == 20
    assert curve.smallest_for_ratio(0) == 0
    assert curve.smallest_for_ratio(0.71) == 10
    # What the tier in front served counts: 3 + 6 of 10 is 0.9.
    assert small_curve(base=3).smallest_for_ratio(0.9) == 5
    assert small_curve(base=3).smallest_for_ratio(0.3) == 0
    # Unreachable: 10 of 11 at most.
    assert small_curve(inputs=11).smallest_for_ratio(1.0) is None
    assert small_curve(inputs=11).smallest_for_ratio(0.9) == 20  # 9.9 -> 10 tokens


def test_smallest_reaching():
    curve = small_curve()
    assert curve.smallest_reaching(0) == 0
    assert curve.smallest_reaching(8) == 10
    assert curve.smallest_reaching(10) == 20
    assert curve.smallest_reaching(11) is None
    assert curve.smallest_reaching(3, values=np.array([0, 2, 3, 1])) == 10
    assert curve.smallest_reaching(4, values=np.array([0, 2, 3, 1])) is None


@settings(max_examples=100, deadline=None)
@given(stream=streams(), percent=st.integers(0, 100))
def test_smallest_for_ratio_against_brute_force(stream, percent):
    """The smallest capacity whose hit tokens reach percent/100 of the input, exactly, or None."""
    keys, sizes = stream
    curve = lru_curve(keys, sizes, weigh_by_size=True)
    inputs = sum(sizes)
    expected = None
    for capacity in range(distinct_total(keys, sizes) + 3):
        hit = sum(s for s, h in zip(sizes, lru_hits(keys, sizes, capacity), strict=True) if h)
        if 100 * hit >= percent * inputs:
            expected = capacity
            break
    assert curve.smallest_for_ratio(percent / 100) == expected


# --------------------------------------------------------------------------------------------
# tier_curve on small random workloads
# --------------------------------------------------------------------------------------------


def block_total(workload):
    """Sum of the distinct blocks' sizes: from this room on everything fits."""
    sizes = {}
    for request in workload.requests():
        for index, key in enumerate(request.keys):
            sizes[key] = min(workload.block_tokens, request.tokens - index * workload.block_tokens)
    return sum(sizes.values())


@pytest.mark.parametrize("partial", PARTIAL)
@pytest.mark.parametrize("order", ORDERS)
@settings(max_examples=80, deadline=None)
@given(workload=toy_workloads())
def test_gpu_tier_curve_matches_replay_at_every_room(workload, partial, order):
    curve = tier_curve(workload, partial_blocks=partial, eviction_order=order)
    check_shape(curve, workload.rounds)
    total = block_total(workload)
    assert curve.capacities[-1] <= total + 1
    assert curve.base.tolist() == [0] * len(workload.rounds)
    for room in range(total + 3):
        rows = replay_rows(workload, room, 0, partial, order)
        assert curve.at(room).tolist() == gpu_tokens(rows), room
        assert curve.inputs.tolist() == [row[2] for row in rows]


@pytest.mark.parametrize("partial", PARTIAL)
@pytest.mark.parametrize("order", ORDERS)
@settings(max_examples=80, deadline=None)
@given(workload=toy_workloads(), gpu_share=st.floats(0, 1.1))
def test_cpu_tier_curve_matches_replay_at_every_room(workload, partial, order, gpu_share):
    total = block_total(workload)
    gpu = int(gpu_share * total)
    curve = tier_curve(workload, partial_blocks=partial, eviction_order=order, gpu_tokens=gpu)
    check_shape(curve, workload.rounds)
    assert curve.capacities[-1] <= total + 1
    for room in range(total + 3):
        rows = replay_rows(workload, gpu, room, partial, order)
        assert curve.at(room).tolist() == cpu_tokens(rows), (gpu, room)
        assert curve.base.tolist() == gpu_tokens(rows)
        assert curve.inputs.tolist() == [row[2] for row in rows]


def brute_cliffs(workload, gpu, target):
    """cliffs() computed from replays at every room of the tier (the GPU's, or the CPU's at GPU room ``gpu``)."""
    total = block_total(workload)
    per_room = []
    for room in range(total + 3):
        rows = replay_rows(workload, room, 0) if gpu is None else replay_rows(workload, gpu, room)
        per_room.append(gpu_tokens(rows) if gpu is None else cpu_tokens(rows))
    inputs = [row[2] for row in rows]
    base = [0] * len(inputs) if gpu is None else gpu_tokens(rows)
    final = per_room[-1]

    def first(reached):
        return next((room for room, hits in enumerate(per_room) if reached(hits)), None)

    found = {
        "input_tokens": sum(inputs),
        "served_in_front_tokens": sum(base),
        "reusable_tokens": sum(final),
        "max_token_hit_ratio": round((sum(base) + sum(final)) / sum(inputs), 6) if sum(inputs) else None,
        "tokens_for_full_reuse": first(lambda hits: sum(hits) >= sum(final)),
        "target_hit_ratio": target,
        "tokens_for_target": first(lambda hits: (sum(base) + sum(hits)) >= Fraction(str(target)) * sum(inputs)),
        "rounds": [
            {
                "round": name,
                "input_tokens": inputs[index],
                "served_in_front_tokens": base[index],
                "reusable_tokens": final[index],
                "tokens_for_full_reuse": first(lambda hits, index=index: hits[index] >= final[index]),
            }
            for index, name in enumerate(workload.rounds)
        ],
    }
    return found


@settings(max_examples=80, deadline=None)
@given(workload=toy_workloads(), cpu_tier=st.booleans(), gpu_share=st.floats(0, 1), percent=st.integers(0, 100))
def test_cliffs_against_replays(workload, cpu_tier, gpu_share, percent):
    gpu = int(gpu_share * block_total(workload)) if cpu_tier else None
    curve = tier_curve(workload, gpu_tokens=gpu)
    assert cliffs(curve, percent / 100) == brute_cliffs(workload, gpu, percent / 100)
    without = cliffs(curve)
    assert "target_hit_ratio" not in without and "tokens_for_target" not in without


# --------------------------------------------------------------------------------------------
# tier_curve on the Mooncake traces (first requests), every step and one token below it
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def short_traces(tmp_path_factory):
    """The first TRACE_REQUESTS lines of each shipped trace, uncompressed."""
    folder = tmp_path_factory.mktemp("traces")
    paths = {}
    for name in TRACE_NAMES:
        with gzip.open(TRACES / f"{name}.gz", "rt", encoding="utf-8") as handle:
            lines = [handle.readline() for _ in range(TRACE_REQUESTS)]
        assert all(line.endswith("\n") for line in lines)  # the trace is long enough
        paths[name] = folder / name
        paths[name].write_text("".join(lines), encoding="utf-8")
    return paths


def step_rooms(curve):
    """Each step's room and one token below it: a step function checked by its steps."""
    return sorted({int(c) for c in curve.capacities} | {int(c) - 1 for c in curve.capacities if c > 0})


@pytest.mark.parametrize("block", [512, 1024])
@pytest.mark.parametrize("name", TRACE_NAMES)
def test_mooncake_curves_match_replay(short_traces, name, block):
    workload = MooncakeWorkload(block, trace=str(short_traces[name]))
    gpu_curve = tier_curve(workload)
    check_shape(gpu_curve, ["trace"])
    assert len(gpu_curve.capacities) > 50 and gpu_curve.final()[0] > 0  # not a trivial curve
    for room in step_rooms(gpu_curve):
        assert gpu_curve.at(room).tolist() == gpu_tokens(replay_rows(workload, room, 0)), room
    gpu = 40_000  # about 40 blocks of 1024: the CPU tier has work to do
    cpu_curve = tier_curve(workload, gpu_tokens=gpu)
    check_shape(cpu_curve, ["trace"])
    assert len(cpu_curve.capacities) > 50 and cpu_curve.final()[0] > 0
    for room in step_rooms(cpu_curve):
        rows = replay_rows(workload, gpu, room)
        assert cpu_curve.at(room).tolist() == cpu_tokens(rows), room
        assert cpu_curve.base.tolist() == gpu_tokens(rows)
    assert cpu_curve.inputs.tolist() == gpu_curve.inputs.tolist() == [rows[0][2]]
    assert cpu_curve.base.tolist() == gpu_curve.at(gpu).tolist()


# --------------------------------------------------------------------------------------------
# The lab's cliffs
# --------------------------------------------------------------------------------------------


def read_result(name):
    return json.loads((ROOT / "results" / name).read_text(encoding="utf-8"))


def cliff_of(points, full):
    """From an artifact ``{"<room>": value}``: the smallest room where ``full(value)``, and the room below it."""
    rooms = sorted((int(room), value) for room, value in points.items())
    cliff = min(room for room, value in rooms if full(value))
    assert all(full(value) for room, value in rooms if room >= cliff)
    below = max(room for room, value in rooms if room < cliff)
    return cliff, below


def test_lab_cliffs_come_out_of_the_curve():
    """results/cliff.json (pass-2 hits by GPU room) and results/cpu_cliff.json (pass-2 misses by CPU room at GPU
    21,520): every point, and the cliff, which the artifacts pin to one token, from the curves at block 5011."""
    config = load_config()
    docs, tokens = config["scenario"]["docs"], config["scenario"]["tokens"]
    gpu_sweep, cpu_sweep = config["sweeps"]["cliff"], config["sweeps"]["cpu_cliff"]
    assert (gpu_sweep["record"], cpu_sweep["record"]) == ({"pass": 2, "value": "hits"}, {"pass": 2, "value": "misses"})
    assert gpu_sweep["fixed"]["cpu"] == 0
    gpu_room = cpu_sweep["fixed"]["gpu"]
    pass2 = 1
    workload = LabWorkload(tokens, docs=docs, tokens=tokens, passes="fwd,fwd,rev")

    gpu_points = read_result("cliff.json")
    gpu_curve = tier_curve(workload)
    for room, hits in gpu_points.items():
        assert gpu_curve.at(int(room))[pass2] == hits * tokens, room
    cliff, below = cliff_of(gpu_points, lambda hits: hits == docs)
    assert below == cliff - 1  # the artifact pins the step to one token
    full = docs * tokens
    assert gpu_curve.final()[pass2] == full
    assert gpu_curve.smallest_reaching(full, gpu_curve.values[pass2]) == cliff
    assert cliffs(gpu_curve)["rounds"][pass2]["tokens_for_full_reuse"] == cliff
    assert cliffs(gpu_curve)["tokens_for_full_reuse"] == cliff

    cpu_points = read_result("cpu_cliff.json")
    cpu_curve = tier_curve(workload, gpu_tokens=gpu_room)
    for room, misses in cpu_points.items():
        served = cpu_curve.base[pass2] + cpu_curve.at(int(room))[pass2]
        assert cpu_curve.inputs[pass2] - served == misses * tokens, room
    cpu_cliff, cpu_below = cliff_of(cpu_points, lambda misses: misses == 0)
    assert cpu_below == cpu_cliff - 1
    assert cpu_curve.base[pass2] == 0  # pass 2 is the cyclic replay: nothing left on the GPU
    assert cpu_curve.smallest_reaching(full, cpu_curve.values[pass2]) == cpu_cliff
    assert cliffs(cpu_curve)["rounds"][pass2]["tokens_for_full_reuse"] == cpu_cliff
    assert cliff == cpu_cliff == 50110  # what the README states, from both artifacts


@pytest.mark.parametrize("gpu", [None, 21520])
def test_lab_cliff_at_256_token_chunks(gpu):
    """Only full chunks are stored: 19 of 256 tokens per 5,011-token document, 48,640 tokens in all."""
    workload = LabWorkload(256, docs=10, tokens=5011, passes="fwd,fwd,rev")
    curve = tier_curve(workload, gpu_tokens=gpu)
    found = cliffs(curve)
    stored = 10 * (5011 // 256) * 256
    assert stored == 48640
    assert found["tokens_for_full_reuse"] == found["rounds"][1]["tokens_for_full_reuse"] == stored
    assert found["rounds"][1]["reusable_tokens"] == stored
    for room, expected in ((stored, True), (stored - 1, False)):
        rows = replay_rows(workload, room, 0) if gpu is None else replay_rows(workload, gpu, room)
        served = sum(gpu_tokens(rows) if gpu is None else cpu_tokens(rows))
        assert int(curve.total()[np.searchsorted(curve.capacities, room, side="right") - 1]) == served
        assert (served == found["reusable_tokens"]) is expected


# --------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------


def run_main(argv):
    """``kvlab mrc ARGV`` in-process: ``(exit status, stdout, stderr)``."""
    done = kvlab("mrc", *argv)
    return done.returncode, done.stdout, done.stderr


def as_json(document):
    return json.loads(json.dumps(document))


def check_csv(path, curve, tier):
    table = pd.read_csv(path, keep_default_na=False)
    rounds = [f"{name}_{tier}_hit_tokens" for name in curve.rounds]
    assert list(table.columns) == [f"{tier}_tokens", *rounds, f"{tier}_hit_tokens", "token_hit_ratio"]
    assert table[f"{tier}_tokens"].tolist() == curve.capacities.tolist()
    for index, column in enumerate(rounds):
        assert table[column].tolist() == curve.values[index].tolist()
    assert table[f"{tier}_hit_tokens"].tolist() == curve.total().tolist()
    inputs, base = int(curve.inputs.sum()), int(curve.base.sum())
    exact = (table[f"{tier}_hit_tokens"] + base) / inputs
    assert (table["token_hit_ratio"] - exact).abs().max() <= 5e-7 + 1e-12
    return table


def test_cli_gpu_tier(tmp_path):
    argv = ["--workload", "lab", "--docs", "6", "--tokens", "3000", "--passes", "fwd,fwd,rev"]
    out_csv = tmp_path / "curve.csv"
    status, out, err = run_main([*argv, "--target-hit-ratio", "0.3", "--curve", out_csv])
    assert (status, err) == (0, "")
    report = json.loads(out)
    assert list(report) == [*TOP_KEYS, "target_hit_ratio", "tokens_for_target", "rounds"]
    workload = LabWorkload(None, docs=6, tokens=3000, passes="fwd,fwd,rev")
    curve = tier_curve(workload)
    assert report["workload"] == as_json(workload.describe())
    assert report["cache"] == {
        "tier": "gpu",
        "block_tokens": 256,
        "partial_blocks": "drop",
        "eviction_order": "tail-first",
        "eviction": "lru",
    }
    assert {key: report[key] for key in report if key not in ("workload", "cache")} == as_json(cliffs(curve, 0.3))
    assert [list(one) for one in report["rounds"]] == [ROUND_KEYS] * 3
    assert report["input_tokens"] == 3 * 6 * 3000
    table = check_csv(out_csv, curve, "gpu")
    # The reported rooms, read off the CSV: the first row reaching the reuse, and 3/10 of the input.
    hits = table["gpu_hit_tokens"]
    assert report["tokens_for_full_reuse"] == table["gpu_tokens"][hits >= hits.iloc[-1]].iloc[0]
    assert report["tokens_for_target"] == table["gpu_tokens"][10 * hits >= 3 * report["input_tokens"]].iloc[0]
    assert report["reusable_tokens"] == hits.iloc[-1]
    # ... and the replay agrees at the cliff and one token below.
    room = report["tokens_for_full_reuse"]
    assert sum(gpu_tokens(replay_rows(workload, room, 0))) == report["reusable_tokens"]
    assert sum(gpu_tokens(replay_rows(workload, room - 1, 0))) < report["reusable_tokens"]


def test_cli_cpu_tier(tmp_path):
    argv = ["--workload", "lab", "--docs", "5", "--tokens", "2000", "--block-tokens", "300"]
    argv += ["--partial-blocks", "keep", "--eviction-order", "head-first", "--gpu-tokens", "3000"]
    out_csv = tmp_path / "cpu.csv"
    status, out, err = run_main([*argv, "--curve", out_csv])
    assert (status, err) == (0, "")
    report = json.loads(out)
    assert list(report) == [*TOP_KEYS, "rounds"]
    workload = LabWorkload(300, docs=5, tokens=2000)
    curve = tier_curve(workload, "keep", "head-first", 3000)
    assert report["cache"] == {
        "tier": "cpu",
        "block_tokens": 300,
        "partial_blocks": "keep",
        "eviction_order": "head-first",
        "eviction": "lru",
        "write_policy": "write-through",
        "gpu_tokens": 3000,
    }
    assert {key: report[key] for key in report if key not in ("workload", "cache")} == as_json(cliffs(curve))
    rows = replay_rows(workload, 3000, 0, "keep", "head-first")
    assert report["served_in_front_tokens"] == sum(gpu_tokens(rows)) > 0
    table = check_csv(out_csv, curve, "cpu")
    assert table["token_hit_ratio"].iloc[-1] == report["max_token_hit_ratio"]
    for room in table["cpu_tokens"].tolist()[1:4]:
        rows = replay_rows(workload, 3000, room, "keep", "head-first")
        assert table.loc[table["cpu_tokens"] == room, "cpu_hit_tokens"].item() == sum(cpu_tokens(rows))


def test_cli_is_deterministic(short_traces, tmp_path):
    """Two processes (different hash seeds): byte-identical JSON and CSV."""
    outputs = []
    for seed in ("1", "2"):
        target = tmp_path / f"curve{seed}.csv"
        args = ["--workload", "mooncake", "--trace", short_traces["conversation_trace.jsonl"], "--block-tokens", "1024"]
        args += ["--gpu-tokens", "40000", "--target-hit-ratio", "0.2", "--curve", target]
        proc = run_python("-m", "kvlab", "mrc", *args, env={**os.environ, "PYTHONHASHSEED": seed}, timeout=120)
        assert (proc.returncode, proc.stderr) == (0, "")
        outputs.append((proc.stdout, target.read_bytes()))
    assert outputs[0] == outputs[1]
    report = json.loads(outputs[0][0])
    assert report["workload"] == {"source": "mooncake", "trace": "conversation_trace.jsonl"}
    workload = MooncakeWorkload(1024, trace=str(short_traces["conversation_trace.jsonl"]))
    curve = tier_curve(workload, gpu_tokens=40000)
    assert outputs[0][1].decode("utf-8") == curve_csv(curve, "cpu")
    assert report["tokens_for_target"] == curve.smallest_for_ratio(0.2)


@pytest.mark.parametrize(
    "args",
    [
        [],  # --workload is required
        ["--workload", "nope"],
        ["--workload", "lab", "--block-tokens", "0"],
        ["--workload", "lab", "--block-tokens", "1.5"],
        ["--workload", "lab", "--gpu-tokens", "-1"],
        ["--workload", "lab", "--target-hit-ratio", "1.5"],
        ["--workload", "lab", "--target-hit-ratio", "nan"],
        ["--workload", "lab", "--target-hit-ratio", "-0.1"],
        ["--workload", "lab", "--partial-blocks", "some"],
        ["--workload", "lab", "--eviction-order", "random"],
        ["--workload", "lab", "--docs", "-1"],
        ["--workload", "lab", "--passes", "fwd,up"],
        ["--workload", "lab", "--trace", "x.jsonl"],  # a setting of another source
        ["--workload", "mooncake"],  # needs --trace
        ["--workload", "mooncake", "--trace", "x.jsonl", "--block-tokens", "700"],  # not a multiple of 512
        ["--workload", "lab", "--unknown"],
        ["--workload", "lab", "--gpu-tokens", str(2**53 + 1)],  # beyond the whole numbers kvlab takes
        ["--workload", "lab", "--docs", str(2**53 + 1)],
        ["--workload", "lab", "--docs", "100000", "--tokens", "100000", "--block-tokens", "1"],  # > 10**8 accesses
    ],
)
def test_cli_bad_arguments(args, tmp_path):
    """Exit 2, nothing on stdout, one line on stderr; a --curve file already there is left as it was."""
    target = tmp_path / "curve.csv"
    target.write_text("sentinel\n", encoding="utf-8")
    status, out, err = run_main([*args, "--curve", target])
    assert status == 2
    assert out == ""
    assert err.startswith("kvlab mrc: error:") and err.endswith("\n") and err.count("\n") == 1, err
    assert target.read_text(encoding="utf-8") == "sentinel\n"
    assert sorted(tmp_path.iterdir()) == [target]


def test_cli_bad_argument_in_a_process():
    proc = run_python("-m", "kvlab", "mrc", "--workload", "lab", "--target-hit-ratio", "2", timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("kvlab mrc: error:") and proc.stderr.count("\n") == 1


def trace_line(ids, tokens):
    return json.dumps({"timestamp": 0, "input_length": tokens, "output_length": 1, "hash_ids": ids}) + "\n"


@pytest.mark.parametrize(
    "content, where",
    [
        (None, ""),  # no such file
        (trace_line([1, 2], 1000) + trace_line([1, 3], 1024) + "{not json\n", ":3"),
        (trace_line([1, 2], 1000) + '{"timestamp": 0}\n', ":2"),  # fields missing
        (trace_line([1, 2], 1000) + trace_line([1], 1000), ":2"),  # hash_ids do not match the length
    ],
)
@pytest.mark.parametrize("gpu", [[], ["--gpu-tokens", "1024"]])
def test_cli_bad_trace_leaves_the_curve_file(content, where, gpu, tmp_path):
    """A bad trace: exit nonzero, one line naming the file (and line); the --curve file is untouched."""
    trace = tmp_path / "trace.jsonl"
    if content is not None:
        trace.write_text(content, encoding="utf-8")
    target = tmp_path / "curve.csv"
    target.write_text("sentinel\n", encoding="utf-8")
    status, out, err = run_main(["--workload", "mooncake", "--trace", trace, *gpu, "--curve", target])
    assert status not in (0, None)
    assert out == ""
    assert err.startswith("kvlab mrc: error:") and err.count("\n") == 1, err
    assert f"{trace}{where}:" in err
    assert target.read_text(encoding="utf-8") == "sentinel\n"
    assert sorted(tmp_path.iterdir()) == sorted({target, trace} if content is not None else {target})


def test_cli_refuses_a_curve_over_its_trace(tmp_path):
    """--curve naming the --trace file (or a link to it): a usage error, and the trace is left as it was."""
    trace = tmp_path / "trace.jsonl"
    content = trace_line([1, 2], 1024) + trace_line([1, 3], 1024)
    trace.write_text(content, encoding="utf-8")
    link = tmp_path / "link.jsonl"
    link.symlink_to(trace)
    for target in (trace, link):
        status, out, err = run_main(["--workload", "mooncake", "--trace", trace, "--curve", target])
        assert (status, out) == (2, "")
        assert err == f"kvlab mrc: error: {target} is both an input and an output\n"
        assert trace.read_text(encoding="utf-8") == content
    assert sorted(tmp_path.iterdir()) == [link, trace]


def test_cli_unwritable_curve(tmp_path):
    target = tmp_path / "missing" / "curve.csv"
    status, out, err = run_main(["--workload", "lab", "--docs", "2", "--curve", target])
    assert status == 1
    assert out == ""
    assert err.startswith(f"kvlab mrc: error: {target}: cannot write") and err.count("\n") == 1


def test_cli_replaces_the_curve_file(tmp_path):
    target = tmp_path / "curve.csv"
    target.write_text("sentinel\n" * 1000, encoding="utf-8")  # longer than the curve: no leftover tail
    status, _, err = run_main(["--workload", "lab", "--docs", "3", "--tokens", "700", "--curve", target])
    assert (status, err) == (0, "")
    curve = tier_curve(LabWorkload(None, docs=3, tokens=700))
    assert target.read_text(encoding="utf-8") == curve_csv(curve, "gpu")
    assert sorted(tmp_path.iterdir()) == [target]


@pytest.mark.parametrize("gpu_tokens", [None, 21520])
@pytest.mark.parametrize(
    "rules, name",
    [({"partial_blocks": "nope"}, "partial_blocks"), ({"eviction_order": "tail-last"}, "eviction_order")],
)
def test_tier_curve_refuses_unknown_block_rules(rules, name, gpu_tokens):
    with pytest.raises(ValueError, match=name):
        tier_curve(LabWorkload(256), gpu_tokens=gpu_tokens, **rules)
