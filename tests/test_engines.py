"""``kvlab plan --engine`` (kvlab/sizing/engines.py): the budget per GPU as each engine reads its own setting
(vLLM: GiB in total over the ranks; LMCache: GiB per rank; SGLang: whole decimal GB per rank), and the host
memory each allocates, computed here from the rules in docs/engines.md."""

import json
import math
import shlex

import pytest
from conftest import ROOT, kvlab
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.sizing.engines import ENGINES, engine_settings
from kvlab.sizing.model_size import read_model_config

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
    size = int(sglang["flags"][sglang["flags"].index("--hicache-size") + 1])
    assert size * 10**9 >= budget * 2**30 > (size - 1) * 10**9 or size == 0
    assert sglang["host_ram_gib"] == pytest.approx(size * 10**9 * tp / 2**30, abs=1e-4)
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
    size = math.ceil(10 * 2**30 / 10**9)
    tokens = size * 10**9 // DEEPSEEK_V32.bytes_per_token(8, windows=True)
    indexer = tokens * 61 * 132 * 8
    assert sglang["host_ram_gib"] == round((size * 10**9 * 8 + indexer) / 2**30, 4)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_plan_ends_with_the_engine_settings(engine):
    args = ["--workload", "lab", "--model-config", MODELS / "Qwen2.5-7B-Instruct" / "config.json"]
    args += ["--gpu-tokens", "21520", "--cpu-gb", "1.5", "--tp", "2"]
    plain = json.loads(kvlab("plan", *args).stdout)
    done = kvlab("plan", *args, "--engine", engine)
    assert done.returncode == 0, done.stderr
    planned = json.loads(done.stdout)
    assert planned.pop("engine") == engine_settings(engine, "1.5", 2, 256, "write-through", read_model_config(args[3]))
    assert planned == plain  # the plan itself does not change
    table = kvlab("plan", *args, "--engine", engine, "--format", "table").stdout
    assert (
        shlex.join(engine_settings(engine, "1.5", 2, 256, "write-through", read_model_config(args[3]))["flags"])
        in table
    )
