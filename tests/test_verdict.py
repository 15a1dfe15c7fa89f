"""Does offloading help? (issue 40, part 3): every plan answers in one line with its reason, and the figures it quotes
are those of the plan and of the same plan without a CPU tier, computed again here."""

import json

import pytest
from conftest import kvlab

from kvlab import api

QWEN = "models/Qwen2.5-1.5B-Instruct/config.json"
LAB = {"workload": "lab", "model_config": QWEN}
PRICED = {"engine": "vllm", "gpu_system": "h100_sxm", "latency_source": "roofline"}


def said(**keywords):
    return api.plan(**{**LAB, **keywords}).to_dict()


def test_each_reason_from_the_plans_own_figures():
    gpu = said(gpu_tokens=4000, cpu_gib=0)
    assert said(passes="fwd", gpu_tokens=4000, cpu_gib=1)["verdict"]["reason"] == "no_reuse"
    assert said(gpu_tokens=10**7, cpu_gib=1)["verdict"]["reason"] == "fits_in_gpu"
    none = gpu["verdict"]
    assert none["reason"] == "no_budget" and none["offload_helps"]
    assert f"{gpu['cpu_gib_for_full_reuse']} GiB of CPU per GPU" in none["line"]
    assert f"from {gpu['token_hit_ratio']} to {gpu['max_token_hit_ratio']}" in none["line"]
    small = said(gpu_tokens=4000, cpu_gib=0.05)
    assert small["cpu_hit_tokens"] == 0 and small["verdict"]["reason"] == "below_cliff"
    full = said(gpu_tokens=4000, cpu_gib=gpu["cpu_gib_for_full_reuse"])
    assert full["verdict"]["reason"] == "helps" and full["cpu_hit_tokens"] > 0
    assert f"{full['cpu_hit_tokens']:,} input tokens" in full["verdict"]["line"]


def test_the_time_and_the_cost_are_the_plans_against_none():
    budget = said(gpu_tokens=4000, cpu_gib=0)["cpu_gib_for_full_reuse"]
    priced = said(gpu_tokens=4000, cpu_gib=budget, **PRICED, prices="default")
    alone = said(gpu_tokens=4000, cpu_gib=0, **PRICED, prices="default")
    line = priced["verdict"]["line"]
    assert f"TTFT mean {alone['ttft']['all']['mean_ms']} -> {priced['ttft']['all']['mean_ms']} ms" in line
    assert f"cost {alone['cost']['per_hour']['total']:g} -> {priced['cost']['per_hour']['total']:g} USD" in line


def test_a_link_slower_than_recompute_says_no():
    budget = said(gpu_tokens=4000, cpu_gib=0)["cpu_gib_for_full_reuse"]
    slow = said(gpu_tokens=4000, cpu_gib=budget, **PRICED, link_gbps=0.001)
    assert slow["cpu_hit_tokens"] > 0
    assert slow["verdict"]["reason"] == "link_slower" and not slow["verdict"]["offload_helps"]
    alone = said(gpu_tokens=4000, cpu_gib=0, **PRICED, link_gbps=0.001)
    assert f"against {alone['ttft']['all']['mean_ms']} ms without it" in slow["verdict"]["line"]


@pytest.mark.parametrize("rate, reason", [("rate=0.01", "light_load"), ("rate=50", "helps")])
def test_under_load_it_weighs_the_time_with_and_without(rate, reason):
    workload = {"workload": "multi_round_qa", "num_users": 2, "num_rounds": 2, "time": 60}
    keywords = {**workload, "model_config": "models/Llama-3.1-8B-Instruct/config.json", "gpu_tokens": 4000}
    budget = api.plan(**keywords).to_dict()["cpu_gib_for_full_reuse"]
    light = api.plan(**keywords, cpu_gib=budget, **PRICED, load=rate).to_dict()
    alone = api.plan(**keywords, cpu_gib=0, **PRICED, load=rate).to_dict()
    assert light["verdict"]["reason"] == reason
    assert (
        f"{alone['load']['output_tokens_per_s']} -> {light['load']['output_tokens_per_s']}" in light["verdict"]["line"]
    )
    figures = f"TTFT p99 {alone['load']['ttft_ms']['p99']} -> {light['load']['ttft_ms']['p99']} ms"
    assert figures in light["verdict"]["line"]


def test_the_table_ends_with_the_line():
    result = kvlab("plan", "--workload", "lab", "--model-config", QWEN, "--gpu-tokens", "4000", "--cpu-gib", "2")
    table = kvlab(
        "plan",
        "--workload",
        "lab",
        "--model-config",
        QWEN,
        "--gpu-tokens",
        "4000",
        "--cpu-gib",
        "2",
        "--format",
        "table",
    )
    assert table.returncode == 0
    line = json.loads(result.stdout)["verdict"]["line"]
    assert table.stdout.splitlines()[-1] == f"offloading helps? {line}"
