"""Tests of kvlab/sizing/plan.py: the lab's rooms and cliffs, the per-round figures against `kvlab replay` for every
write policy and source, the minimality of the budgets it answers, the GiB conversions, the table, and bad input."""

import gzip
import json
import math
import re
from decimal import Decimal
from fractions import Fraction

import pytest
from conftest import ROOT, kvlab, run_python
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.cache.write_policies import make_cache
from kvlab.loop import replay
from kvlab.sizing.model_size import KVShape
from kvlab.sizing.plan import Planner, plan
from kvlab.workloads import WORKLOADS

MODELS = ROOT / "models"
QWEN_1_5B = MODELS / "Qwen2.5-1.5B-Instruct" / "config.json"  # 28,672 bytes per token
QWEN_7B = MODELS / "Qwen2.5-7B-Instruct" / "config.json"  # 57,344 bytes per token, 4 KV heads
LLAMA_70B = MODELS / "Llama-3.1-70B-Instruct" / "config.json"  # 327,680 bytes per token, 8 KV heads
TRACE = ROOT / "data" / "traces" / "mooncake" / "conversation_trace.jsonl.gz"
CPU_CLIFF = ROOT / "results" / "cpu_cliff.json"
POLICIES = ["write-through", "write-back", "selective"]
FIGURES = ["input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens", "token_hit_ratio"]
TOP_KEYS = [
    "workload",
    "model",
    "cache",
    *FIGURES,
    "rounds",
    "max_token_hit_ratio",
    "cpu_tokens_for_full_reuse",
    "cpu_gib_for_full_reuse",
]
TARGET_KEYS = ["target_hit_ratio", "cpu_tokens_for_target", "cpu_gib_for_target"]
VERDICT = ["verdict"]  # last: does offloading help (kvlab/sizing/verdict.py)
LAB = ["--workload", "lab"]
LONG_DOC_QA = ["--workload", "long_doc_qa", "--num-documents", "6", "--document-length", "3000", "--repeat-count", "3"]
UNLIMITED = 10**12
TRACE_LINES = 300


def gib_up(tokens, per_token):
    """GiB of ``tokens`` tokens, rounded up to 4 decimals (computed here with fractions)."""
    return math.ceil(Fraction(tokens * per_token, 2**30) * 10**4) / 10**4


def tokens_of(text, per_token):
    """Whole tokens a budget of ``text`` GiB holds (computed here with fractions)."""
    return math.floor(Fraction(text) * 2**30 / per_token)


def exact_gib(tokens, per_token):
    """The exact decimal text of ``tokens`` tokens' bytes in GiB: a budget of exactly that many tokens."""
    value = Fraction(tokens * per_token, 2**30)
    places = value.denominator.bit_length() - 1
    text = f"{Decimal(f'{value.numerator * 5**places}e-{places}'):f}"
    assert Fraction(text) == value
    return text


def run_cli(*args, cwd=ROOT):
    """``kvlab plan ARGS`` in this process (fast): a CompletedProcess."""
    return kvlab("plan", *args, cwd=cwd)


def run_main(*args):
    """``kvlab plan ARGS`` in this process, which must succeed; its stdout."""
    done = run_cli(*args)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


def check_figures(figures):
    """Every token is served by one tier or computed; the ratio follows from the counts."""
    hits = figures["gpu_hit_tokens"] + figures["cpu_hit_tokens"]
    assert hits + figures["computed_tokens"] == figures["input_tokens"]
    assert min(figures[key] for key in FIGURES[:-1]) >= 0
    inputs = figures["input_tokens"]
    assert figures["token_hit_ratio"] == (round(hits / inputs, 6) if inputs else None)


def plan_json(*args):
    """The plan's JSON object, checked for its shape and bookkeeping."""
    text = run_main(*args)
    assert text.endswith("}\n") and not text.endswith("\n\n")
    result = json.loads(text)
    notes = ["notes"] if "notes" in result else []  # only where there is something to say
    assert list(result) in (TOP_KEYS + notes + VERDICT, TOP_KEYS + TARGET_KEYS + notes + VERDICT)
    check_figures(result)
    for one in result["rounds"]:
        assert list(one) == ["round", *FIGURES]
        check_figures(one)
    for key in FIGURES[:-1]:
        assert sum(one[key] for one in result["rounds"]) == result[key]
    return result


def replay_cli(workload_args, gpu, cpu, block, policy, *extra):
    proc = kvlab(
        "replay",
        *workload_args,
        "--gpu-tokens",
        gpu,
        "--cpu-tokens",
        cpu,
        "--block-tokens",
        block,
        "--write-policy",
        policy,
        *extra,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def hits(workload, policy, gpu, cpu, **rules):
    """Hit tokens (GPU + CPU) of a replay through the cache at these rooms."""
    rows = replay(workload, make_cache(policy, gpu, cpu, workload.block_tokens, **rules))
    return sum(row[5] + row[6] for row in rows)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """The first lines of the shipped Mooncake conversation trace, uncompressed."""
    path = tmp_path_factory.mktemp("trace") / "conversation_head.jsonl"
    with gzip.open(TRACE, "rt", encoding="utf-8") as source:
        path.write_text("".join(next(source) for _ in range(TRACE_LINES)), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------
# The lab's setting
# --------------------------------------------------------------------------------------------


def test_the_lab_rooms():
    """Qwen2.5-1.5B, TP 1, 256-token chunks, GPU 21,520 tokens, CPU 1.5 GiB, write-through."""
    result = plan_json(*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", 21520, "--cpu-gib", "1.5")
    assert result["model"] == {
        "config": "Qwen2.5-1.5B-Instruct",
        "layers": 28,
        "kv_heads": 2,
        "head_dim": 128,
        "dtype": "bfloat16",
        "tp": 1,
        "kv_heads_per_gpu": 2,
        "bytes_per_token": 28_672,
    }
    cache = result["cache"]
    assert cache["chunk_tokens"] == 256 and cache["write_policy"] == "write-through"
    assert cache["cpu_gib"] == 1.5
    assert cache["cpu_tokens"] == 56_173 == tokens_of("1.5", 28_672)  # "about 56,000"
    assert cache["cpu_tokens"] // 256 * 256 == 56_064
    assert cache["gpu_tokens"] == 21_520 and cache["gpu_gib"] == gib_up(21_520, 28_672) == 0.5747
    assert cache["chunk_gib"] == gib_up(256, 28_672)
    assert result["workload"] == {"source": "lab", "docs": 10, "tokens": 5011, "passes": ["fwd", "fwd", "rev"]}
    assert [one["round"] for one in result["rounds"]] == ["pass1", "pass2", "pass3"]
    stored = 5011 // 256 * 256
    assert stored == 4_864
    pass1, pass2, _ = result["rounds"]
    assert pass1["gpu_hit_tokens"] + pass1["cpu_hit_tokens"] == 0
    assert pass2["cpu_hit_tokens"] == 10 * stored  # the CPU room holds all ten documents' chunks
    assert result["cpu_tokens_for_full_reuse"] == 10 * stored == 48_640
    assert result["cpu_gib_for_full_reuse"] == gib_up(48_640, 28_672)


def test_a_document_is_0_1299_gib():
    """One document's 4,864 stored tokens: the smallest CPU budget that serves it again is 0.1299 GiB."""
    result = plan_json(*LAB, "--docs", 1, "--model-config", QWEN_1_5B, "--gpu-tokens", 0, "--cpu-gib", "0.1299")
    assert result["cpu_tokens_for_full_reuse"] == 4_864
    assert result["cpu_gib_for_full_reuse"] == 0.1299
    assert result["cache"]["cpu_tokens"] >= 4_864
    assert [one["cpu_hit_tokens"] for one in result["rounds"]] == [0, 4_864, 4_864]
    less = plan_json(*LAB, "--docs", 1, "--model-config", QWEN_1_5B, "--gpu-tokens", 0, "--cpu-gib", "0.1298")
    assert less["cache"]["cpu_tokens"] < 4_864
    assert less["cpu_hit_tokens"] == 2 * (4_864 - 256)  # the head's 18 chunks stay, the tail's one does not


@pytest.mark.parametrize("passes", ["fwd,fwd", "fwd,fwd,rev"])
def test_whole_documents_reach_the_lab_cpu_cliff(passes):
    """Chunks of 5,011 tokens (whole documents, as the lab): full reuse at 50,110 tokens, results/cpu_cliff.json's
    cliff (pass-2 misses by CPU room at GPU 21,520, two forward passes)."""
    cliff = json.loads(CPU_CLIFF.read_text(encoding="utf-8"))
    misses = {int(room): count for room, count in cliff.items()}
    first_clean = min(room for room, count in misses.items() if count == 0)
    assert all(count > 0 for room, count in misses.items() if room < first_clean)
    assert all(count == 0 for room, count in misses.items() if room >= first_clean)
    assert max(room for room, count in misses.items() if count > 0) == first_clean - 1  # the data pins the cliff
    result = plan_json(
        *LAB, "--passes", passes, "--chunk-tokens", 5011, "--model-config", QWEN_1_5B, "--gpu-tokens", 21520
    )
    assert result["cpu_tokens_for_full_reuse"] == first_clean == 50_110
    if passes != "fwd,fwd":
        return
    for room, count in misses.items():  # every point of the data, at exactly that CPU room
        point = plan_json(
            *LAB,
            "--passes",
            passes,
            "--chunk-tokens",
            5011,
            "--model-config",
            QWEN_1_5B,
            "--gpu-tokens",
            21520,
            "--cpu-gib",
            exact_gib(room, 28_672),
        )
        assert point["cache"]["cpu_tokens"] == room
        assert point["rounds"][1]["computed_tokens"] == count * 5011, room


# --------------------------------------------------------------------------------------------
# Figures against the replay
# --------------------------------------------------------------------------------------------


def cases(trace_path):
    """(workload flags, model, GPU tokens, CPU tokens, chunk tokens) of the comparisons."""
    return {
        "lab": (LAB, QWEN_1_5B, 21_520, 30_000, 256),
        "long_doc_qa": (LONG_DOC_QA, QWEN_1_5B, 4_000, 9_000, 256),
        "mooncake": (["--workload", "mooncake", "--trace", trace_path], QWEN_7B, 300_000, 2_000_000, 512),
    }


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("source", ["lab", "long_doc_qa", "mooncake"])
def test_figures_equal_the_replay_command(trace, source, policy):
    flags, model, gpu, cpu, chunk = cases(trace)[source]
    per_token = 28_672 if model == QWEN_1_5B else 57_344
    result = plan_json(
        *flags,
        "--model-config",
        model,
        "--chunk-tokens",
        chunk,
        "--gpu-tokens",
        gpu,
        "--cpu-gib",
        exact_gib(cpu, per_token),
        "--write-policy",
        policy,
    )
    assert result["cache"]["cpu_tokens"] == cpu and result["cache"]["gpu_tokens"] == gpu
    assert result["cache"]["write_policy"] == policy
    reference = replay_cli(flags, gpu, cpu, chunk, policy)
    assert result["workload"] == reference["workload"]
    assert [one["round"] for one in result["rounds"]] == [one["round"] for one in reference["rounds"]]
    for key in FIGURES:
        assert result[key] == reference[key], key
        for mine, theirs in zip(result["rounds"], reference["rounds"], strict=True):
            assert mine[key] == theirs[key], (mine["round"], key)
    assert result["cpu_hit_tokens"] > 0  # the CPU room matters in every case compared


def workloads(trace_path):
    return {
        "lab": (WORKLOADS["lab"](256), 21_520),
        "lab-passes": (WORKLOADS["lab"](256, docs=7, tokens=3000, passes="fwd,rev,fwd,fwd"), 6_000),
        "long_doc_qa": (
            WORKLOADS["long_doc_qa"](256, num_documents=6, document_length=3000, repeat_count=3),
            4_000,
        ),
        "long_doc_qa-tile": (
            WORKLOADS["long_doc_qa"](256, num_documents=5, document_length=2500, repeat_count=2, repeat_mode="tile"),
            2_600,
        ),
        "mooncake": (WORKLOADS["mooncake"](512, trace=trace_path), 300_000),
        "mooncake-1024": (WORKLOADS["mooncake"](1024, trace=trace_path), 300_000),
    }


@pytest.mark.parametrize(
    "rules",
    [
        {"partial_blocks": "drop", "eviction_order": "tail-first"},
        {"partial_blocks": "keep", "eviction_order": "tail-first"},
        {"partial_blocks": "drop", "eviction_order": "head-first"},
    ],
    ids=["drop-tail", "keep-tail", "drop-head"],
)
@pytest.mark.parametrize("name", ["lab", "lab-passes", "long_doc_qa", "long_doc_qa-tile", "mooncake", "mooncake-1024"])
def test_write_through_curve_equals_replays(trace, name, rules):
    """The planner's write-through figures come from a curve, not a replay: they equal a replay at every room tried."""
    workload, gpu = workloads(trace)[name]
    planner = Planner(workload, gpu, "write-through", rules["partial_blocks"], rules["eviction_order"])
    block = workload.block_tokens
    top = planner.unlimited_cpu
    rooms = sorted(
        {0, 1, block - 1, block, top - 1, top, top + 1, UNLIMITED, *range(0, top + block, max(top // 12, 1))}
    )
    for room in rooms:
        rows = replay(workload, make_cache("write-through", gpu, room, block, **rules))
        assert planner.per_round(room) == [(row[2], row[5], row[6]) for row in rows], room


# --------------------------------------------------------------------------------------------
# The budgets are the smallest
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("source", ["lab", "long_doc_qa", "mooncake"])
def test_full_reuse_is_the_smallest_room(trace, source, policy):
    flags, model, gpu, _, chunk = cases(trace)[source]
    result = plan_json(
        *flags, "--model-config", model, "--chunk-tokens", chunk, "--gpu-tokens", gpu, "--write-policy", policy
    )
    workload = workloads(trace)[source][0]
    inputs = result["input_tokens"]
    full = result["cpu_tokens_for_full_reuse"]
    most = hits(workload, policy, gpu, UNLIMITED)
    assert result["max_token_hit_ratio"] == round(most / inputs, 6)
    assert hits(workload, policy, gpu, full) == most
    assert full > 0 and hits(workload, policy, gpu, full - 1) < most
    assert result["cpu_gib_for_full_reuse"] == gib_up(full, 57_344 if model == QWEN_7B else 28_672)
    if source != "mooncake":  # every distinct room below: none reaches it, none goes beyond it
        for room in range(0, full + 4 * chunk, chunk):
            served = hits(workload, policy, gpu, room)
            assert served <= most and (served < most or room >= full), room


def test_full_reuse_against_the_replay_command():
    """The lab's full-reuse room, checked with `kvlab replay` itself: the most there, less one token below."""
    result = plan_json(*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", 21520)
    full = result["cpu_tokens_for_full_reuse"]
    at = replay_cli(LAB, 21520, full, 256, "write-through")
    below = replay_cli(LAB, 21520, full - 1, 256, "write-through")
    unlimited = replay_cli(LAB, 21520, UNLIMITED, 256, "write-through")
    assert at["token_hit_ratio"] == unlimited["token_hit_ratio"] == result["max_token_hit_ratio"]
    assert at["computed_tokens"] == unlimited["computed_tokens"] < below["computed_tokens"]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("target", ["0.5", "0.6", "0.63"])
def test_target_is_the_smallest_room(policy, target):
    result = plan_json(
        *LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", 21520, "--write-policy", policy, "--target-hit-ratio", target
    )
    workload = WORKLOADS["lab"](256)
    need = math.ceil(Fraction(target) * result["input_tokens"])
    found = result["cpu_tokens_for_target"]
    assert result["target_hit_ratio"] == float(target)
    if need > hits(workload, policy, 21520, UNLIMITED):
        assert found is None and result["cpu_gib_for_target"] is None
        return
    assert found is not None and result["cpu_gib_for_target"] == gib_up(found, 28_672)
    assert hits(workload, policy, 21520, found) >= need
    if found:
        assert hits(workload, policy, 21520, found - 1) < need
    assert found <= result["cpu_tokens_for_full_reuse"]


def test_targets_found_and_unreachable_in_the_lab():
    found = plan_json(*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", 21520, "--target-hit-ratio", "0.5")
    assert 0 < found["cpu_tokens_for_target"] < found["cpu_tokens_for_full_reuse"]
    zero = plan_json(*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", 21520, "--target-hit-ratio", "0")
    assert zero["cpu_tokens_for_target"] == 0 and zero["cpu_gib_for_target"] == 0.0
    alone = zero["gpu_hit_tokens"] / zero["input_tokens"]  # at CPU 0: pass 3 (reverse) finds 4 documents on the GPU
    assert 0.14 < alone < 0.15
    gpu_enough = plan_json(*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", 21520, "--target-hit-ratio", "0.14")
    assert gpu_enough["cpu_tokens_for_target"] == 0
    more = plan_json(*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", 21520, "--target-hit-ratio", "0.15")
    assert more["cpu_tokens_for_target"] > 0
    for target in ("1", "0.7"):  # pass 1 is always computed: at most 2/3 of the tokens are reused
        unreachable = plan_json(*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", 21520, "--target-hit-ratio", target)
        assert unreachable["max_token_hit_ratio"] < float(target)
        assert unreachable["cpu_tokens_for_target"] is None and unreachable["cpu_gib_for_target"] is None


# One document of T tokens in one chunk, read 10 times: at most 9/10 of the input tokens are reused.
NINE_TENTHS = ["--workload", "long_doc_qa", "--num-documents", "1", "--repeat-count", "9", "--gpu-tokens", "0"]


@pytest.mark.parametrize("policy", ["write-through", "write-back"])
def test_target_0_9_is_exactly_nine_tenths(policy):
    """Exactly 9/10 of the input reachable: target 0.9 is met (a float's 0.9000000000000000222 would not be)."""
    result = plan_json(
        *NINE_TENTHS,
        "--document-length",
        2_000_000,
        "--chunk-tokens",
        2_000_000,
        "--model-config",
        QWEN_1_5B,
        "--write-policy",
        policy,
        "--target-hit-ratio",
        "0.9",
    )
    assert result["input_tokens"] == 20_000_000
    assert result["cpu_hit_tokens"] == 0  # no CPU room given
    assert result["max_token_hit_ratio"] == 0.9
    assert result["cpu_tokens_for_full_reuse"] == result["cpu_tokens_for_target"] == 2_000_000


@pytest.mark.parametrize("policy", ["write-through", "write-back"])
def test_target_0_9_not_met_by_a_ratio_that_rounds_to_it(policy):
    """The reusable share is 18,000,000 / 20,000,010 = 0.89999955: shown as 0.9, but target 0.9 is unreachable;
    0.8999995 is reached."""
    args = [*NINE_TENTHS, "--document-length", 2_000_001, "--chunk-tokens", 2_000_000, "--model-config", QWEN_1_5B]
    result = plan_json(*args, "--write-policy", policy, "--target-hit-ratio", "0.9")
    assert result["input_tokens"] == 20_000_010
    assert result["max_token_hit_ratio"] == 0.9  # rounded to 6 decimals
    assert result["cpu_tokens_for_full_reuse"] == 2_000_000
    assert result["cpu_tokens_for_target"] is None and result["cpu_gib_for_target"] is None
    close = plan_json(*args, "--write-policy", policy, "--target-hit-ratio", "0.8999995")
    assert close["cpu_tokens_for_target"] == 2_000_000


# --------------------------------------------------------------------------------------------
# GiB and tensor parallelism
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu_gib", ["0.5747", "0.3", "1", exact_gib(21_520, 28_672)])
def test_gpu_gib_converts_with_tokens_in(gpu_gib):
    by_gib = plan_json(*LAB, "--model-config", QWEN_1_5B, "--gpu-gib", gpu_gib, "--cpu-gib", "1.5")
    gpu_tokens = tokens_of(gpu_gib, 28_672)
    assert by_gib["cache"]["gpu_tokens"] == gpu_tokens
    assert by_gib["cache"]["gpu_gib"] == gib_up(gpu_tokens, 28_672)
    by_tokens = plan_json(*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", gpu_tokens, "--cpu-gib", "1.5")
    assert by_gib == by_tokens


def test_exact_gpu_gib_is_the_lab_gpu():
    result = plan_json(*LAB, "--model-config", QWEN_1_5B, "--gpu-gib", exact_gib(21_520, 28_672))
    assert result["cache"]["gpu_tokens"] == 21_520
    assert plan_json(*LAB, "--model-config", QWEN_1_5B, "--gpu-gib", "0.5747")["cache"]["gpu_tokens"] > 21_520


@pytest.mark.parametrize("tp, heads, per_token", [(1, 8, 327_680), (2, 4, 163_840), (8, 1, 40_960), (16, 1, 40_960)])
def test_tensor_parallel_rooms_are_per_gpu(tp, heads, per_token):
    result = plan_json(
        *LAB,
        "--model-config",
        LLAMA_70B,
        "--tp",
        tp,
        "--gpu-gib",
        "0.75",
        "--cpu-gib",
        "1.5",
        "--target-hit-ratio",
        "0.5",
    )
    model, cache = result["model"], result["cache"]
    assert model["config"] == "Llama-3.1-70B-Instruct"
    assert (model["tp"], model["kv_heads"], model["kv_heads_per_gpu"]) == (tp, 8, heads)
    assert model["bytes_per_token"] == per_token == 2 * 80 * heads * 128 * 2
    assert cache["cpu_tokens"] == tokens_of("1.5", per_token)
    assert cache["gpu_tokens"] == tokens_of("0.75", per_token)
    assert result["cpu_gib_for_full_reuse"] == gib_up(result["cpu_tokens_for_full_reuse"], per_token)
    assert result["cpu_gib_for_target"] == gib_up(result["cpu_tokens_for_target"], per_token)


# --------------------------------------------------------------------------------------------
# The command line: formats, determinism, help, errors
# --------------------------------------------------------------------------------------------


def test_table_for_people():
    args = [*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", "21520", "--cpu-gib", "1.5", "--target-hit-ratio", "0.5"]
    result = json.loads(run_cli(*args).stdout)
    proc = run_cli(*args, "--format", "table")
    assert proc.returncode == 0 and proc.stderr == ""
    text = proc.stdout
    with pytest.raises(ValueError):
        json.loads(text)
    assert "28,672 bytes per token" in text and "56,173 tokens" in text and "21,520 tokens" in text
    lines = text.splitlines()
    for one in [*result["rounds"], {**result, "round": "all"}]:
        row = next(line.split() for line in lines if line.split()[:1] == [one["round"]])
        assert row[1:5] == [
            str(one[key]) for key in ("input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens")
        ]
        assert float(row[5]) == one["token_hit_ratio"]
    full = f"{result['cpu_gib_for_full_reuse']} GiB of CPU ({result['cpu_tokens_for_full_reuse']:,} tokens)"
    assert any(line.startswith("full reuse") and full in line for line in lines)
    target = f"{result['cpu_gib_for_target']} GiB of CPU ({result['cpu_tokens_for_target']:,} tokens)"
    assert any(line.startswith("hit ratio 0.5") and target in line for line in lines)
    unreachable = run_cli(*args[:-1], "1", "--format", "table")
    assert unreachable.returncode == 0
    assert "hit ratio 1.0: unreachable" in unreachable.stdout


def test_json_is_deterministic(trace):
    """The same JSON from a separate process (its own hash seed) and twice in this one."""
    args = ["--workload", "mooncake", "--trace", trace, "--model-config", QWEN_7B, "--gpu-tokens", "300000"]
    args += ["--cpu-gib", "64", "--write-policy", "write-back", "--target-hit-ratio", "0.05"]
    first, second = run_python("-m", "kvlab", "plan", *args, timeout=120), run_cli(*args)
    assert first.returncode == 0 and first.stderr == ""
    assert first.stdout == second.stdout
    assert first.stdout == run_main(*args)
    assert json.loads(first.stdout)["workload"] == {"source": "mooncake", "trace": trace.name}  # no path


def test_runs_from_another_folder(tmp_path):
    proc = run_cli(*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", "21520", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["cpu_tokens_for_full_reuse"] == 48_640


def test_help_says_gib_are_2_30_bytes():
    proc = run_cli("--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "the GiB (2**30 bytes)" in text
    for flag in (
        "--gpu-gib",
        "--cpu-gib",
        "--model-config",
        "--tp",
        "--chunk-tokens",
        "--target-hit-ratio",
        "--format",
    ):
        assert flag in text
    assert not re.search(r"-gb\b", text)  # the former spellings work (tests/test_spelling.py) but are not shown


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--gpu-tokens", "21520"], "--model-config"),
        (["--model-config", "{qwen}"], "--gpu-tokens"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--gpu-gib", "1"], "not allowed with"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--cpu-gib", "-1"], "--cpu-gib"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--cpu-gib", "-0.5"], "--cpu-gib"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--cpu-gib", "lots"], "--cpu-gib"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--cpu-gib", "nan"], "--cpu-gib"),
        (["--model-config", "{qwen}", "--gpu-gib", "-1"], "--gpu-gib"),
        (["--model-config", "{qwen}", "--gpu-tokens", "-5"], "--gpu-tokens"),
        (["--model-config", "{qwen}", "--gpu-tokens", "1.5"], "--gpu-tokens"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--tp", "0"], "--tp"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--chunk-tokens", "0"], "--chunk-tokens"),
        (["--model-config", "{tmp}/missing.json", "--gpu-tokens", "21520"], "{tmp}/missing.json"),
        (["--model-config", "{tmp}/bad.json", "--gpu-tokens", "21520"], "{tmp}/bad.json"),
        (["--model-config", "{tmp}/short.json", "--gpu-tokens", "21520"], "{tmp}/short.json"),
        (["--model-config", "{qwen7b}", "--tp", "3", "--gpu-tokens", "21520"], "--tp"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--target-hit-ratio", "1.5"], "--target-hit-ratio"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--target-hit-ratio", "-0.1"], "--target-hit-ratio"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--format", "csv"], "--format"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--write-policy", "write-around"], "--write-policy"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--trace", "{tmp}/t.jsonl"], "--trace"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--docs", "many"], "--docs"),
        # Limits: GiB up to 2**40 with at most 18 decimal places, whole numbers up to 2**53, 10**8 accesses.
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--cpu-gib", "1099511627777"], "at most 1099511627776"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--cpu-gib", "1e400"], "--cpu-gib"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--cpu-gib", "0." + "0" * 18 + "1"], "18 decimal"),
        (["--model-config", "{qwen}", "--gpu-gib", "1099511627776.5"], "--gpu-gib"),
        (["--model-config", "{qwen}", "--gpu-tokens", str(2**53 + 1)], "--gpu-tokens"),
        (["--model-config", "{qwen}", "--gpu-tokens", "21520", "--docs", "100000000"], "100000000"),
        (["--model-config", "{tmp}/nan.json", "--gpu-tokens", "21520"], "{tmp}/nan.json: num_hidden_layers must be"),
        (["--model-config", "{tmp}/huge.json", "--gpu-tokens", "21520"], "{tmp}/huge.json: num_hidden_layers must"),
    ],
)
def test_bad_input_is_one_error_line(tmp_path, args, fragment):
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    config = QWEN_1_5B.read_text(encoding="utf-8")
    (tmp_path / "nan.json").write_text(config.replace('"num_hidden_layers": 28', '"num_hidden_layers": NaN'))
    (tmp_path / "huge.json").write_text(config.replace('"num_hidden_layers": 28', '"num_hidden_layers": 1e999'))
    assert "NaN" in (tmp_path / "nan.json").read_text() and "1e999" in (tmp_path / "huge.json").read_text()
    (tmp_path / "short.json").write_text(json.dumps({"num_hidden_layers": 28}), encoding="utf-8")
    names = {"qwen": QWEN_1_5B, "qwen7b": QWEN_7B, "tmp": tmp_path}
    args = [arg.format(**names) for arg in args]
    proc = run_cli(*LAB, *args)
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert proc.stderr.startswith("kvlab plan: error: ")
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1, proc.stderr
    assert fragment.format(**names) in proc.stderr


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--workload", "mooncake", "--trace", "{tmp}/none.jsonl"], "{tmp}/none.jsonl"),
        (["--workload", "mooncake", "--trace", "{tmp}/none.jsonl", "--write-policy", "write-back"], "{tmp}/none.jsonl"),
        (["--workload", "mooncake", "--trace", "{tmp}/broken.jsonl"], "{tmp}/broken.jsonl:2"),
        (["--workload", "mooncake"], "--trace"),
        (["--workload", "mooncake", "--trace", "{tmp}/broken.jsonl", "--chunk-tokens", "256"], "512"),
    ],
)
def test_bad_trace_is_one_error_line(tmp_path, args, fragment):
    with gzip.open(TRACE, "rt", encoding="utf-8") as source:
        (tmp_path / "broken.jsonl").write_text(source.readline() + '{"timestamp": 1}\n', encoding="utf-8")
    args = [arg.format(tmp=tmp_path) for arg in args]
    proc = run_cli(*args, "--model-config", QWEN_7B, "--gpu-tokens", "100000")
    assert proc.returncode != 0
    assert proc.stdout == ""
    assert proc.stderr.startswith("kvlab plan: error: ")
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert fragment.format(tmp=tmp_path) in proc.stderr


# --------------------------------------------------------------------------------------------
# A model with no KV per token (issue 22, item 14)
# --------------------------------------------------------------------------------------------

NEMOTRON = {  # a Nemotron-H-shaped config.json, its pattern drawn below
    "model_type": "nemotron_h",
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "hidden_size": 1024,
    "torch_dtype": "bfloat16",
    "mamba_num_heads": 8,
    "mamba_head_dim": 64,
    "n_groups": 2,
    "ssm_state_size": 16,
    "conv_kernel": 4,
}


@settings(max_examples=40, deadline=None, database=None)
@given(pattern=st.text(alphabet="*M-E", min_size=1, max_size=40), gpu=st.sampled_from(["--gpu-tokens", "--gpu-gib"]))
def test_no_kv_per_token_is_refused_in_words(tmp_path_factory, pattern, gpu):
    """Without an attention layer (only Mamba, MLP, MoE) a token holds no bytes: the plan is refused in one line
    of words, never a Python repr such as Fraction(1, 0); with one, it is planned."""
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps({**NEMOTRON, "num_hidden_layers": len(pattern), "hybrid_override_pattern": pattern}))
    proc = run_cli(*LAB, "--model-config", path, gpu, "1000", "--cpu-gib", "1", "--engine", "sglang")
    if "*" in pattern:
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["model"]["bytes_per_token"] == 2 * pattern.count("*") * 2 * 128 * 2
        return
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr.startswith(f"kvlab plan: error: {path}: the model caches no KV per token")
    assert proc.stderr.count("\n") == 1 and "Fraction" not in proc.stderr
    assert ("recurrent layers" in proc.stderr) == ("M" in pattern)


def test_plan_refuses_no_kv_per_token_as_a_library_too():
    shape = KVShape(0, 1, 64, "bfloat16", state_layers=4, state_conv=8, state_ssm=8)
    with pytest.raises(ValueError, match="caches no KV per token"):
        plan(WORKLOADS["lab"](256), "m", shape, 1, 1000, "1", "write-through", "drop", "tail-first")


# --------------------------------------------------------------------------------------------
# A trace's granularity and the chunk asked for (issue 22, item 20)
# --------------------------------------------------------------------------------------------


@settings(max_examples=20, deadline=None, database=None)
@given(chunk=st.integers(1, 4096))
def test_chunk_tokens_on_a_trace_name_this_commands_flag(trace, chunk):
    """``--chunk-tokens`` on a trace hashed in 512-token blocks: a multiple is the replay's unit, anything else a
    usage error naming --chunk-tokens (kvlab plan has no --block-tokens)."""
    args = ["--workload", "mooncake", "--trace", trace, "--model-config", QWEN_7B, "--gpu-tokens", "100000"]
    proc = run_cli(*args, "--chunk-tokens", chunk)
    if chunk % 512:
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr.startswith("kvlab plan: error: --chunk-tokens must be a multiple of the trace's 512")
        assert "--block-tokens" not in proc.stderr and proc.stderr.count("\\n") == 0
        assert proc.stderr.count("\n") == 1 and f"got {chunk}" in proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    cache = json.loads(proc.stdout)["cache"]
    assert (cache["chunk_tokens"], cache["trace_block_tokens"]) == (chunk, 512)


def test_the_table_says_which_unit_is_the_traces(trace):
    args = ["--workload", "mooncake", "--trace", trace, "--model-config", QWEN_7B, "--gpu-tokens", "100000"]
    text = run_main(*args, "--format", "table")
    assert "a chunk of 512 tokens" in text and "the trace is hashed in 512-token blocks" in text
    assert (
        "trace_block_tokens" not in json.loads(run_main(*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", 1))["cache"]
    )


# --------------------------------------------------------------------------------------------
# Write-through with a CPU no larger than the GPU (issue 22, item 21)
# --------------------------------------------------------------------------------------------

QWEN_SHAPE = KVShape(28, 2, 128, "bfloat16")  # 28,672 bytes per token


@st.composite
def small_workloads(draw):
    if draw(st.booleans()):
        docs, tokens = draw(st.integers(1, 8)), draw(st.integers(1, 3000))
        passes = ",".join(draw(st.lists(st.sampled_from(["fwd", "rev"]), min_size=1, max_size=4)))
        return WORKLOADS["lab"](draw(st.sampled_from([64, 256])), docs=docs, tokens=tokens, passes=passes)
    return WORKLOADS["long_doc_qa"](
        draw(st.sampled_from([64, 256])),
        num_documents=draw(st.integers(1, 6)),
        document_length=draw(st.integers(1, 3000)),
        repeat_count=draw(st.integers(1, 3)),
        repeat_mode=draw(st.sampled_from(["interleave", "tile"])),
    )


@settings(max_examples=60, deadline=None, database=None)
@given(
    workload=small_workloads(), gpu=st.integers(0, 20_000), share=st.fractions(0, 2), policy=st.sampled_from(POLICIES)
)
def test_an_inclusive_cpu_no_larger_than_the_gpu_is_said(workload, gpu, share, policy):
    """Write-through (and selective) with 0 < CPU <= GPU: a note says the CPU mostly duplicates the GPU, with
    what the simulator has it serve (nothing, most often: then the hit ratio is the GPU's alone). No note when
    the CPU is larger, or none, or the CPU is a victim tier (write-back)."""
    cpu = math.floor(gpu * share)
    result = plan(workload, "m", QWEN_SHAPE, 1, gpu, exact_gib(cpu, 28_672), policy, "drop", "tail-first")
    assert result["cache"]["cpu_tokens"] == cpu
    rows = replay(
        workload,
        make_cache(policy, gpu, cpu, workload.block_tokens, partial_blocks="drop", eviction_order="tail-first"),
    )
    served = sum(row[6] for row in rows)
    assert result["cpu_hit_tokens"] == served  # the plan's figure is the simulator's
    if policy == "write-back" or not 0 < cpu <= gpu:
        assert "notes" not in result
        return
    (note,) = result["notes"]
    assert note.startswith(f"{policy}: the CPU room ({cpu:,} tokens) is no larger than the GPU's ({gpu:,})")
    if served:
        assert f"it serves {served:,} tokens" in note
    else:
        assert note.endswith("it serves nothing here, the hit ratio is the GPU's alone")
        assert result["token_hit_ratio"] == (round(result["gpu_hit_tokens"] / result["input_tokens"], 6))


def test_a_cpu_no_larger_than_the_gpu_can_still_serve(tmp_path):
    """Not nothing, always: A, B, A (a GPU hit: the CPU copy of A is not refreshed), C (the GPU evicts B, the
    CPU A), B: a CPU hit, with CPU = GPU = 2 blocks. The note gives the simulator's figure, not a rule."""
    path = tmp_path / "trace.jsonl"
    lines = [
        {"timestamp": at, "input_length": 512, "output_length": 1, "hash_ids": [key]}
        for at, key in enumerate([1, 2, 1, 3, 2])
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    args = ["--workload", "mooncake", "--trace", path, "--model-config", QWEN_1_5B, "--gpu-tokens", 1024]
    result = plan_json(*args, "--cpu-gib", exact_gib(1024, 28_672))
    assert result["cpu_hit_tokens"] == 512
    assert "here it serves 512 tokens" in result["notes"][0]
    table = run_main(*args, "--cpu-gib", exact_gib(1024, 28_672), "--format", "table")
    assert f"note: {result['notes'][0]}" in table.splitlines()


def test_the_lab_plan_has_no_note():
    """The committed plans (CPU room larger than the GPU's) say nothing more."""
    result = plan_json(*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", 21520, "--cpu-gib", "1.5")
    assert "notes" not in result
    assert "note:" not in run_main(*LAB, "--model-config", QWEN_1_5B, "--gpu-tokens", 21520, "--format", "table")
