"""The SYNTHETIC example measurement (kvlab/measure/example.py, ``kvlab example-measurement``): tiers decided by the
simulator, TTFT drawn around per-tier latencies."""

import json
import shlex

import pytest
from conftest import ROOT, kvlab, load_config

from kvlab import scenario, summarize
from kvlab.measure import example as example_measurement
from kvlab.workflow import commands, paths

LATENCY = {"gpu_hit": 30.0, "cpu_load": 48.6, "recompute": 576.0, "store_overhead": 30.0, "decode": 210.0}
PASSES = [("pass1-cold", "fwd"), ("pass2-replay", "fwd"), ("pass3-reverse", "rev")]
CONFIGS = [("baseline", 21520, 0), ("lmcache", 21520, 56000)]


def generate(jitter=0.03, seed=7, configs=CONFIGS, passes=PASSES, docs=10, tokens=5011):
    return example_measurement.generate(configs, passes, docs, tokens, LATENCY, jitter, seed)


def nearest_tier(record, cpu):
    """The tier whose mean TTFT is nearest to the record's (the means are far apart at 3% jitter)."""
    means = {tier: LATENCY[tier] for tier in example_measurement.TIERS}
    if cpu:
        means["recompute"] += LATENCY["store_overhead"]
    return min(means, key=lambda tier: abs(means[tier] - record["ttft_ms"]))


@pytest.mark.parametrize("docs", [1, 4, 10, 13])
@pytest.mark.parametrize(("name", "gpu", "cpu"), CONFIGS)
def test_tiers_are_the_simulators(name, gpu, cpu, docs):
    """Per pass, the drawn TTFTs fall on the tiers scenario.py predicts for the same rooms and orders."""
    records = [r for r in generate(configs=[(name, gpu, cpu)], docs=docs) if r["config"] == name]
    predicted = scenario.run(gpu, cpu, docs, 5011, [order for _, order in PASSES])["passes"]
    for (pass_name, order), expected in zip(PASSES, predicted, strict=True):
        rows = [r for r in records if r["pass"] == pass_name]
        reading = list(range(docs)) if order == "fwd" else list(range(docs - 1, -1, -1))
        assert [r["doc"] for r in rows] == reading
        tiers = [nearest_tier(r, cpu) for r in rows]
        assert tiers.count("gpu_hit") == expected["gpu_hits"]
        assert tiers.count("cpu_load") == expected["cpu_hits"]
        assert tiers.count("recompute") == expected["misses"]
        assert [r["doc"] for r, t in zip(rows, tiers, strict=True) if t != "recompute"] == expected["hit_docs"]


def test_records_follow_the_lab_schema():
    for record in generate():
        assert list(record) == ["config", "pass", "doc", "doc_tokens", "ttft_ms", "total_ms"]
        assert record["doc_tokens"] == 5011
        assert record["total_ms"] > record["ttft_ms"] >= 0


def test_no_jitter_gives_the_tier_latencies_exactly():
    values = {(r["config"], r["pass"], r["doc"]): r["ttft_ms"] for r in generate(jitter=0.0)}
    assert values[("baseline", "pass2-replay", 0)] == 576.0
    assert values[("lmcache", "pass1-cold", 0)] == 606.0  # recompute + storing to CPU
    assert values[("lmcache", "pass2-replay", 0)] == 48.6
    assert values[("lmcache", "pass3-reverse", 9)] == 30.0


def test_same_seed_same_records_other_seed_other_records():
    assert generate(seed=1) == generate(seed=1)
    assert generate(seed=1) != generate(seed=2)


def test_summary_shows_the_labs_findings(tmp_path):
    """Cold pass: lmcache pays the store (ratio < 1); replay: loads beat recomputes by ~576/48.6."""
    path = tmp_path / "ttft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in generate()), encoding="utf-8")
    ratio = summarize.summarize(summarize.read_samples(str(path)))["ratio"]
    assert ratio["pass1-cold"]["p50"] < 1
    assert 10 < ratio["pass2-replay"]["p50"] < 14


def test_cli_with_the_pipelines_arguments_is_deterministic(tmp_path, config):
    args = shlex.split(commands.job_args(config, "example_measurement"))
    outputs = []
    for name in ("a.jsonl", "b.jsonl"):
        done = kvlab("example-measurement", *args, "--out", tmp_path / name)
        assert done.returncode == 0, done.stderr
        assert done.stdout == done.stderr == ""
        outputs.append((tmp_path / name).read_bytes())
    assert outputs[0] == outputs[1]
    assert outputs[0].count(b"\n") == 2 * 3 * 10


def test_committed_example_is_what_the_pipelines_command_writes(tmp_path):
    """results/example/ttft.synthetic.jsonl is byte for byte what ``kvlab example-measurement`` writes today."""
    args = shlex.split(commands.job_args(load_config(), "example_measurement"))
    done = kvlab("example-measurement", *args, "--out", tmp_path / "ttft.jsonl")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ttft.jsonl").read_bytes() == (ROOT / paths.EXAMPLE_MEASUREMENT).read_bytes()


@pytest.mark.parametrize(
    "bad",
    [
        ["--config", "baseline"],
        ["--config", "baseline:1,x"],
        ["--pass", "p1:up"],
        ["--docs", "ten"],
        ["--docs", str(2**53 + 1)],
        ["--docs", str(10**8)],  # x 3 passes x 2 configs: more than 10**8 requests
        ["--seed", str(2**53 + 1)],
    ],
)
def test_cli_rejects_bad_arguments(tmp_path, config, bad):
    args = shlex.split(commands.job_args(config, "example_measurement"))
    out = tmp_path / "x.jsonl"
    done = kvlab("example-measurement", *args, *bad, "--out", out)
    assert done.returncode == 2
    assert done.stderr.startswith("kvlab example-measurement: error: ")
    assert "error" in done.stderr and done.stderr.count("\n") == 1
    assert done.stdout == ""
    assert not out.exists()
