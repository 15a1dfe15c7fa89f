"""``kvlab plan --engine`` (kvlab/serving/): the budget per GPU as each engine reads its own setting
(vLLM: GiB in total over the ranks; LMCache: GiB per rank; SGLang: whole decimal GB per rank, rounded down),
the host memory each allocates, computed here from the rules in docs/engines.md, the chunk each is set to, and
the hit ratio at what the setting really holds."""

import json
import math
import shlex
from fractions import Fraction

import pytest
from conftest import ROOT, kvlab
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.cache.write_policies import make_cache
from kvlab.loop import replay
from kvlab.serving import OFFLOADING, engine_settings
from kvlab.sizing.model_size import read_model_config
from kvlab.workloads import WORKLOADS

MODELS = ROOT / "models"
LLAMA = read_model_config(MODELS / "Llama-3.1-70B-Instruct" / "config.json")
DEEPSEEK_V32 = read_model_config(MODELS / "DeepSeek-V3.2" / "config.json")
BUDGETS = st.integers(0, 10**6).map(lambda units: units / 100)  # GiB with two decimals
POLICIES = ["write-through", "write-back", "selective"]


@settings(max_examples=200, deadline=None)
@given(budget=BUDGETS, tp=st.sampled_from([1, 2, 4, 8]), policy=st.sampled_from(POLICIES))
def test_each_engine_reads_the_per_gpu_budget_its_own_way(budget, tp, policy):
    text = str(budget)
    vllm = engine_settings("vllm", text, tp, 256, policy, LLAMA)
    assert float(vllm["flags"][vllm["flags"].index("--kv-offloading-size") + 1]) == pytest.approx(budget * tp)
    assert vllm["host_ram_gib"] == pytest.approx(budget * tp)
    lmcache = engine_settings("lmcache", text, tp, 256, policy, LLAMA)
    assert float(lmcache["environment"]["LMCACHE_MAX_LOCAL_CPU_SIZE"]) == pytest.approx(budget)
    assert lmcache["environment"]["LMCACHE_CHUNK_SIZE"] == "256"
    assert json.loads(lmcache["flags"][1]) == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    assert lmcache["host_ram_gib"] == pytest.approx(budget * tp)
    sglang = engine_settings("sglang", text, tp, 256, policy, LLAMA)
    size = hicache_size(sglang)
    assert size * 10**9 <= Fraction(text) * 2**30 < (size + 1) * 10**9  # whole GB, rounded down
    assert sglang["host_ram_gib"] == pytest.approx(size * 10**9 * tp / 2**30, abs=1e-4)
    assert sglang["flags"][-2:] == ["--page-size", "256"]
    if size:
        policy_flag = sglang["flags"][sglang["flags"].index("--hicache-write-policy") + 1]
        assert policy_flag == {"write-through": "write_through", "selective": "write_through_selective"}.get(
            policy, "write_back"
        )
    for written_through in (vllm, lmcache):
        assert bool(written_through["notes"]) == (policy != "write-through")


def test_mla_is_one_copy_for_vllm_and_sglang_counts_the_indexer():
    vllm = engine_settings("vllm", "10", 8, 256, "write-through", DEEPSEEK_V32)
    assert vllm["host_ram_gib"] == 10.0 and "replicated" in vllm["notes"][0]
    sglang = engine_settings("sglang", "10", 8, 256, "write-through", DEEPSEEK_V32)
    size = math.floor(10 * 2**30 / 10**9)
    assert hicache_size(sglang) == size == 10
    tokens = size * 10**9 // DEEPSEEK_V32.bytes_per_token(8, windows=True)
    indexer = tokens * 61 * 132 * 8
    assert sglang["host_ram_gib"] == round((size * 10**9 * 8 + indexer) / 2**30, 4)


@pytest.mark.parametrize("engine", OFFLOADING)
def test_the_plan_ends_with_the_engine_settings(engine):
    args = ["--workload", "lab", "--model-config", MODELS / "Qwen2.5-7B-Instruct" / "config.json"]
    args += ["--gpu-tokens", "21520", "--cpu-gib", "1.5", "--tp", "2"]
    plain = json.loads(kvlab("plan", *args).stdout)
    done = kvlab("plan", *args, "--engine", engine)
    assert done.returncode == 0, done.stderr
    planned = json.loads(done.stdout)
    settings_ = engine_settings(engine, "1.5", 2, None, "write-through", read_model_config(args[3]), "auto", 256)
    found = planned.pop("engine")
    at = {key: found.pop(key) for key in ("cpu_tokens", "token_hit_ratio")}
    assert found.pop("notes")[: len(settings_["notes"])] == settings_.pop("notes")
    assert found == settings_
    if engine != "sglang":  # the setting holds the budget: the plan's own figures
        assert at == {"cpu_tokens": plain["cache"]["cpu_tokens"], "token_hit_ratio": plain["token_hit_ratio"]}
    assert planned == plain  # the plan itself does not change
    table = kvlab("plan", *args, "--engine", engine, "--format", "table").stdout
    assert shlex.join(settings_["flags"]) in table


def hicache_size(settings_):
    """The --hicache-size an SGLang setting carries: 0 when it sets none (a budget under 1 GB)."""
    flags = settings_["flags"]
    if "--hicache-size" not in flags:
        assert "--enable-hierarchical-cache" not in flags  # 0 would mean --hicache-ratio's pool, not none
        return 0
    return int(flags[flags.index("--hicache-size") + 1])


QWEN_1_5B = MODELS / "Qwen2.5-1.5B-Instruct" / "config.json"  # 28,672 bytes per token
LAB = ["--workload", "lab", "--model-config", QWEN_1_5B, "--gpu-tokens", "21520"]


@settings(max_examples=40, deadline=None, database=None)
@given(units=st.integers(0, 3 * 10**4), tp=st.sampled_from([1, 2]))
def test_hicache_size_never_exceeds_the_budget_and_the_hit_ratio_is_what_it_gives(units, tp):
    """For a budget of GiB per GPU, the printed --hicache-size (decimal GB per rank) is at most the budget and
    within one GB of it; the hit ratio shown for the setting is a replay at the tokens that size pools
    (SGLang: hicache_size * 1e9 // bytes per token), and a note says it was rounded down."""
    budget = f"{units / 10**4:.4f}"
    done = kvlab("plan", *LAB, "--cpu-gib", budget, "--tp", tp, "--engine", "sglang")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    found = result["engine"]
    size = hicache_size(found)
    assert size * 10**9 <= Fraction(budget) * 2**30 < (size + 1) * 10**9
    per_token = result["model"]["bytes_per_token"]
    assert found["cpu_tokens"] == size * 10**9 // per_token
    assert found["cpu_gib_effective"] == round(size * 10**9 / 2**30, 4)
    rows = replay(WORKLOADS["lab"](256), make_cache("write-through", 21520, found["cpu_tokens"], 256))
    hits, inputs = sum(row[5] + row[6] for row in rows), sum(row[2] for row in rows)
    assert found["token_hit_ratio"] == round(hits / inputs, 6)
    rounded = size and size * 10**9 < Fraction(budget) * 2**30
    assert any(
        note.startswith(f"--hicache-size is whole decimal GB per rank, rounded down: {size} GB")
        for note in found["notes"]
    ) == bool(rounded)
    table = kvlab("plan", *LAB, "--cpu-gib", budget, "--tp", tp, "--engine", "sglang", "--format", "table").stdout
    assert f"what it holds per GPU: {found['cpu_gib_effective']} GiB = {found['cpu_tokens']:,} tokens" in table
    if size:
        assert f"--hicache-size {size} " in table


def test_the_issue_example_12_5_gib():
    """12.5 GiB per rank is 13.42 GB: --hicache-size 13 (12.1 GiB), not 14 (13.04 GiB, past the budget)."""
    found = engine_settings("sglang", "12.5", 8, None, "write-through", LLAMA)
    assert hicache_size(found) == 13 and found["cpu_gib_effective"] == round(13e9 / 2**30, 4)
    assert found["host_ram_gib"] <= 12.5 * 8


# --------------------------------------------------------------------------------------------
# Each engine's chunk, not the trace's hashing granularity (issue 22, item 20)
# --------------------------------------------------------------------------------------------

TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    import gzip

    path = tmp_path_factory.mktemp("trace") / "head.jsonl"
    with gzip.open(TRACE, "rt", encoding="utf-8") as source:
        path.write_text("".join(next(source) for _ in range(100)), encoding="utf-8")
    return path


@pytest.mark.parametrize("chunk", [None, 512, 1024])
def test_the_engines_carry_their_own_chunk(trace, chunk):
    """Without --chunk-tokens the trace replays in its 512-token hash blocks, and the engines get their own
    chunk (LMCache 256; SGLang no --page-size, its default), with a note that the replay is coarser; with it,
    they get that size and no such note."""
    args = [
        "--workload",
        "mooncake",
        "--trace",
        trace,
        "--model-config",
        MODELS / "Qwen2.5-7B-Instruct" / "config.json",
    ]
    args += ["--gpu-tokens", "100000", "--cpu-gib", "20", *(["--chunk-tokens", chunk] if chunk else [])]
    lmcache = json.loads(kvlab("plan", *args, "--engine", "lmcache").stdout)
    sglang = json.loads(kvlab("plan", *args, "--engine", "sglang").stdout)
    assert lmcache["cache"]["trace_block_tokens"] == 512
    assert lmcache["cache"]["chunk_tokens"] == (chunk or 512)
    coarse = "the replay's unit (the trace's 512-token hash blocks: it cannot resolve finer ones) is coarser"
    lm, sg = lmcache["engine"], sglang["engine"]
    assert lm["environment"]["LMCACHE_CHUNK_SIZE"] == str(chunk or 256) and lm["chunk_tokens"] == (chunk or 256)
    assert sg["chunk_tokens"] == chunk
    assert ("--page-size" in sg["flags"]) == (chunk is not None)
    if chunk:
        assert sg["flags"][sg["flags"].index("--page-size") + 1] == str(chunk)
    for found in (lm, sg):
        assert any(note.startswith(coarse) for note in found["notes"]) == (chunk is None)


def test_lab_default_chunk_is_lmcaches_and_coarser_than_sglangs_pages():
    lmcache = json.loads(kvlab("plan", *LAB, "--cpu-gib", "2", "--engine", "lmcache").stdout)["engine"]
    assert lmcache["environment"]["LMCACHE_CHUNK_SIZE"] == "256"
    assert not any("coarser" in note for note in lmcache["notes"])
    sglang = json.loads(kvlab("plan", *LAB, "--cpu-gib", "2", "--engine", "sglang").stdout)["engine"]
    assert "--page-size" not in sglang["flags"]
    assert any(
        note.startswith("the replay's unit (256 tokens) is coarser than SGLang's 1-token pages")
        for note in sglang["notes"]
    )
