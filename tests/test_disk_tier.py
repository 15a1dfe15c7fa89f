"""Tests of the disk tier below the CPU (kvlab/cache/tiers.py) through the replay, the exact curve, the plan and the
hardware model.

* The tiers above evolve as if there were no disk: a replay with a disk gives the two-tier replay's GPU and CPU
  figures request by request, for every write policy and block rule.
* The disk's figures against a brute-force LRU written apart (an OrderedDict over the blocks both tiers above
  missed, prefix rule and eviction order as the lab states them).
* The exact curve of the disk at fixed GPU and CPU rooms equals replays at every room, round by round.
* The plan's disk room for full reuse is the smallest that reaches it; its engine settings and its TTFT price the
  disk's reads on top of the CPU's loads.
"""

from collections import OrderedDict

import pytest
from conftest import ROOT, kvlab, toy_workloads
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.cache.interface import CacheSettings
from kvlab.cache.prefix import Blocks
from kvlab.cache.write_policies import WRITE_POLICIES
from kvlab.curves.mrc import tier_curve
from kvlab.loop import figures, overall, replay, rows_of
from kvlab.workloads import LabWorkload

MODEL = ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json"


def served_rows(workload, cache, names):
    parts = []
    replay(workload, cache, parts)
    return list(rows_of(parts, names))


def brute_disk(workload, above, room, keep_partial, tail_first):
    """Per request, the disk's (blocks, tokens): an LRU OrderedDict of sizes over the blocks after the prefix the
    tiers above served (``above``: their blocks per request), looked up before it is written."""
    lru, used, found = OrderedDict(), 0, []
    for request, first in zip(workload.requests(), above, strict=True):
        keys, tokens, block = request.keys, request.tokens, workload.block_tokens
        end = first
        while end < len(keys) and keys[end] in lru:
            end += 1
        found.append((end - first, min(end * block, tokens) - min(first * block, tokens)))
        blocks = Blocks(keys, tokens, block, keep_partial)
        order = range(min(first, blocks.stored), blocks.stored)
        for index in reversed(order) if tail_first else order:
            key, size = keys[index], block if index < blocks.full else blocks.last
            if key in lru:
                lru.move_to_end(key)
                continue
            if size > room:
                continue
            while used + size > room:
                used -= lru.popitem(last=False)[1]
            lru[key] = size
            used += size
    return found


@settings(max_examples=60, deadline=None)
@given(
    toy_workloads(),
    st.integers(0, 30),
    st.integers(0, 30),
    st.integers(1, 40),  # 0 is no disk tier
    st.sampled_from(sorted(WRITE_POLICIES)),
    st.sampled_from(["drop", "keep"]),
    st.sampled_from(["tail-first", "head-first"]),
)
def test_disk_tier_against_brute_force(workload, gpu, cpu, disk, policy, partial, order):
    rules = {"partial_blocks": partial, "eviction_order": order, "write_policy": policy}
    rooms = {"gpu_tokens": gpu, "cpu_tokens": cpu, "block_tokens": workload.block_tokens}
    two = served_rows(workload, CacheSettings(**rooms, **rules).build(), ("gpu_hit_blocks", "cpu_hit_blocks"))
    tiered = CacheSettings(**rooms, **rules, disk_tokens=disk).build()
    three = served_rows(workload, tiered, ("gpu_hit_blocks", "cpu_hit_blocks", "disk_hit_blocks", "disk_hit_tokens"))
    assert [row[:2] for row in three] == two  # the tiers above do not see the disk
    above = [gpu_blocks + cpu_blocks for gpu_blocks, cpu_blocks in two]
    expected = brute_disk(workload, above, disk, partial == "keep", order == "tail-first")
    assert [row[2:] for row in three] == expected


@settings(max_examples=40, deadline=None)
@given(toy_workloads(), st.integers(0, 30), st.integers(0, 30), st.sampled_from(["drop", "keep"]))
def test_disk_curve_equals_replays_at_every_room(workload, gpu, cpu, partial):
    curve = tier_curve(workload, partial, "tail-first", gpu, cpu_tokens=cpu)
    distinct = sum(len(request.keys) for request in workload.requests()) * workload.block_tokens
    for room in range(1, distinct + 2):  # 0 is no disk tier
        settings_ = CacheSettings(
            gpu_tokens=gpu, cpu_tokens=cpu, disk_tokens=room, block_tokens=workload.block_tokens, partial_blocks=partial
        )
        totals = replay(workload, settings_.build())
        assert curve.at(room).tolist() == [row[8] for row in totals], room
        assert curve.base.tolist() == [row[5] + row[6] for row in totals]


def test_a_disk_serves_what_the_cpu_lost_and_figures_add_up():
    """The lab's cyclic passes: a CPU just short of the documents serves little; a disk as large as them brings the
    whole workload's reuse back, and every figure adds up (computed = input - GPU - CPU - disk)."""
    workload = LabWorkload(block_tokens=256)
    rooms = {"gpu_tokens": 10_000, "cpu_tokens": 20_000, "block_tokens": 256}
    without = figures(overall(replay(workload, CacheSettings(**rooms).build())))
    everything = workload.docs * workload.tokens
    found = figures(overall(replay(workload, CacheSettings(**rooms, disk_tokens=everything).build())))
    assert found["disk_hit_tokens"] > 0
    assert found["token_hit_ratio"] > without["token_hit_ratio"] + 0.3
    assert found["computed_tokens"] == found["input_tokens"] - sum(
        found[f"{tier}_hit_tokens"] for tier in ("gpu", "cpu", "disk")
    )
    assert "disk_hit_tokens" not in without  # a replay without a disk reports as before


def test_replay_command_reports_the_disk_and_its_per_request_column(tmp_path):
    import json

    import pandas as pd

    table = tmp_path / "requests.csv"
    args = ["--workload", "lab", "--block-tokens", "256", "--gpu-tokens", "10000", "--cpu-tokens", "20000"]
    done = kvlab("replay", *args, "--disk-tokens", "30000", "--per-request", table)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["cache"]["disk_tokens"] == 30000 and document["cache"]["disk_eviction"] == "lru"
    rows = pd.read_csv(table)
    assert rows["disk_hit_tokens"].sum() == document["disk_hit_tokens"] > 0
    hits = rows[["gpu_hit_tokens", "cpu_hit_tokens", "disk_hit_tokens"]].sum(axis=1)
    assert (rows["computed_tokens"] == rows["input_tokens"] - hits).all()
    plain = json.loads(kvlab("replay", *args).stdout)
    assert "disk_tokens" not in plain["cache"] and "disk_hit_tokens" not in plain


@pytest.mark.parametrize(
    "args, words",
    [
        (["replay", "--disk-eviction", "opt"], "invalid choice"),
        (["replay", "--disk-tokens", "-1"], "--disk-tokens"),
        (["replay", "--disk-tokens", "5", "--server", "llama-cpp"], "does not apply to --server"),
        (["mrc", "--cpu-tokens", "100"], "give --gpu-tokens too"),
        (["plan", "--model-config", MODEL, "--disk-gib", "1", "--disk-tokens", "5"], "not allowed with"),
        (
            ["plan", "--model-config", MODEL, "--engine", "vllm", "--gpu-system", "h100_sxm", "--disk-us", "9"],
            "argument --disk-us: prices a disk tier's reads",
        ),
        (
            ["ttft predict", "--model-config", MODEL, "--gpu-system", "h100_sxm", "--disk-medium", "rdma"],
            "argument --disk-medium: prices a disk tier's reads",
        ),
    ],
)
def test_bad_disk_settings_are_one_line(args, words):
    command, *rest = args
    base = ["--workload", "lab", "--gpu-tokens", "1000"] if command != "mrc" else ["--workload", "lab"]
    done = kvlab(*command.split(), *base, *rest)
    assert done.returncode == 2
    assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_disk_eviction_opt_is_refused_by_the_api_in_the_commands_words():
    from kvlab import api
    from kvlab.util.errors import SettingError

    with pytest.raises(SettingError) as refused:
        api.replay(workload="lab", gpu_tokens=100, disk_tokens=100, disk_eviction="opt")
    done = kvlab("replay", "--workload", "lab", "--gpu-tokens", "100", "--disk-tokens", "100", "--disk-eviction", "opt")
    assert done.stderr == f"kvlab replay: error: {refused.value}\n" and "invalid choice: 'opt'" in str(refused.value)


@pytest.mark.parametrize("policy", ["write-through", "write-back"])
def test_plan_disk_room_for_full_reuse_is_the_smallest(policy):
    """The plan's disk room for full reuse reaches the unlimited disk's hits and one token less does not: the exact
    curve (write-through) and the bisection over replays (write-back) alike."""
    import json

    args = ["plan", "--workload", "lab", "--model-config", MODEL, "--gpu-tokens", "10000", "--cpu-gib", "1"]
    done = kvlab(*args, "--write-policy", policy, "--disk-gib", "2")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    full = plan["disk_tokens_for_full_reuse"]
    rooms = {"gpu_tokens": 10000, "cpu_tokens": plan["cache"]["cpu_tokens"], "block_tokens": 256}
    workload = LabWorkload(block_tokens=256)

    def ratio_at(room):
        built = CacheSettings(**rooms, disk_tokens=room, write_policy=policy).build()
        return figures(overall(replay(workload, built)))["token_hit_ratio"]

    assert ratio_at(full) == plan["disk_max_token_hit_ratio"] > ratio_at(full - 1)
    at_plan = ratio_at(plan["cache"]["disk_tokens"])
    assert plan["token_hit_ratio"] == at_plan
    assert [r["disk_hit_tokens"] for r in plan["rounds"]] == [
        row[8]
        for row in replay(
            workload, CacheSettings(**rooms, disk_tokens=plan["cache"]["disk_tokens"], write_policy=policy).build()
        )
    ]


@pytest.mark.parametrize("engine", ["vllm", "lmcache", "sglang"])
def test_plan_prints_each_engines_disk_settings(engine):
    import json

    done = kvlab(
        "plan", "--workload", "lab", "--model-config", MODEL, "--gpu-tokens", "10000", "--cpu-gib", "1",
        "--disk-gib", "1.3", "--engine", engine,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    settings_ = json.loads(done.stdout)["engine"]
    given = " ".join([*settings_["flags"], *settings_["environment"]])
    expected = {
        "lmcache": "LMCACHE_MAX_LOCAL_DISK_SIZE",
        "vllm": "TieringOffloadingSpec",
        "sglang": "--hicache-storage",
    }
    assert expected[engine] in given
    sizes = {
        "lmcache": settings_["environment"].get("LMCACHE_MAX_LOCAL_DISK_SIZE"),
        "sglang": settings_["environment"].get("SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"),
    }
    assert sizes.get(engine) in ({"lmcache": "1.3", "sglang": "1.3Gi"}.get(engine), None) and (
        engine == "vllm" or sizes[engine]
    )
    if engine == "vllm":  # the CPU tier's bytes in the tiering spec are the budget's, and the fs tier has no room
        spec = json.loads(settings_["flags"][settings_["flags"].index("--kv-transfer-config") + 1])
        assert spec["kv_connector_extra_config"]["cpu_bytes_to_use"] == 2**30
        assert any("never evicts" in note for note in settings_["notes"])


def test_a_disk_read_adds_its_time_to_the_cpu_load():
    """A request whose prefix comes from the disk costs what it would from the CPU plus the disk's read of those
    tokens: the medium's figures, one read a block."""
    from kvlab.latency.hardware import HardwareModel, HardwareSettings
    from kvlab.latency.transfer import DISK_MEDIA

    for medium in DISK_MEDIA:
        model = HardwareModel(
            HardwareSettings(
                model_config=str(MODEL), gpu_system="h100_sxm", latency_source="roofline", disk_medium=medium
            ),
            block_tokens=256,
        )
        from_cpu = model.parts_ms(4096, 512, 2048)
        from_disk = model.parts_ms(4096, 512, 1024, disk_tokens=1024)
        read = model.disk_ms(1024)
        peak, per_block = DISK_MEDIA[medium]
        size = 1024 * model.bytes_per_token
        assert read == pytest.approx(4 * per_block * 1e-3 + size / (peak * 1e6))
        assert from_disk[2] == pytest.approx(from_cpu[2] + read)
        assert from_disk[1] == from_cpu[1]  # the same prefill: the same tokens are cached


def test_the_mooncake_ssd_tables_in_the_docs_are_the_benchs():
    """docs/tiers.md quotes bench/mooncake_ssd.py's tables as the script prints them now; and what the page says
    of them holds: a fall in round 7 without the SSD, none with it, and the TTFT lower with it from round 7."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mooncake_ssd", ROOT / "bench" / "mooncake_ssd.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    found = bench.plans()
    page = (ROOT / "docs" / "tiers.md").read_text(encoding="utf-8")
    for table in bench.tables(found).strip().split("\n\n"):
        assert table in page
    without, with_ssd = bench.hit_percent(found["+ Mooncake"]), bench.hit_percent(found["+ Mooncake + SSD"])
    assert without[:7] == with_ssd[:7] and without[7] < without[6]
    assert all(value > 84 for value in with_ssd[6:9])
    slower, faster = bench.ttft_seconds(found["+ Mooncake"]), bench.ttft_seconds(found["+ Mooncake + SSD"])
    assert all(fast < slow for fast, slow in zip(faster[7:], slower[7:], strict=True))
