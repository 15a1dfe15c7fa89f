"""Wrong numbers printed without a word (issue 36, items 6-8): arrival rates past the clock's precision, a tp the
model's heads do not split over, roofline factors where the database prices, a seed with nothing to
draw, a plan's disk tier left out of its load, timestamps in other scripts' digits, a grid point given twice. Each
is refused in one line (or said), whichever way it enters: a flag, the Python API, config.yaml.

Expectations come from the parsed model configs, system files and the commands themselves."""

import json
import re

import pytest
import yaml
from conftest import ROOT, kvlab, load_config

import kvlab as api
from kvlab.simulator.arrivals import PACE
from kvlab.util.errors import SettingError

LLAMA = "models/Llama-3.1-8B-Instruct/config.json"
QWEN = "models/Qwen2.5-1.5B-Instruct/config.json"  # 12 attention heads, 2 KV heads
LAB = {"workload": "lab", "docs": 2, "tokens": 512}
ROOFLINE = {"model_config": LLAMA, "gpu_system": "h100_sxm", "latency_source": "roofline"}


def flags(settings):
    return [item for key, value in settings.items() for item in (f"--{key.replace('_', '-')}", str(value))]


def refused(done, code=2):
    """The command's one line on stderr (nothing on stdout, no traceback), without its ``kvlab CMD: error:``."""
    assert done.returncode == code, (done.returncode, done.stderr)
    assert done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    return done.stderr.split(": error: ", 1)[1].rstrip("\n")


def api_refusal(function, **keywords):
    with pytest.raises(SettingError) as raised:
        function(**keywords)
    return str(raised.value)


def heads(model_config):
    return json.loads((ROOT / model_config).read_text())["num_attention_heads"]


@pytest.fixture
def trace(tmp_path):
    """Six requests on a clock, each with its output length, some sharing a prefix block (a Mooncake trace)."""
    path = tmp_path / "t.jsonl"
    lines = [
        {"timestamp": 1000 * n, "input_length": 1024, "output_length": 2, "hash_ids": [n % 3, n]} for n in range(6)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def config_refusal(tmp_path, mutate):
    config = load_config()
    mutate(config)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return refused(kvlab("config", path, cwd=ROOT), code=1)


# -- item 6: one range for a rate and a speedup, wherever it enters ------------------------------------------------


@pytest.mark.parametrize("name", ["rate", "speedup"])
def test_a_rate_past_the_clock_is_refused_alike_by_the_command_and_the_api(name):
    simulated = {**LAB, **ROOFLINE, "gpu_blocks": 64, "output_tokens": 2, name: "1e-300"}
    line = refused(kvlab("simulate", *flags(simulated)))
    assert line == api_refusal(api.simulate, **{**simulated, name: 1e-300})
    assert f"--{name}" in line and f"{PACE[0]:g} to {PACE[1]:g}" in line


@pytest.mark.parametrize("name", ["rate", "speedup"])
def test_plan_load_takes_the_same_range(name, trace):
    """``plan --load`` is refused before it plans, naming the range; the API's ``load`` too."""
    planned = {"workload": "mooncake", "trace": trace, **ROOFLINE, "gpu_tokens": 5120, "engine": "vllm"}
    line = refused(kvlab("plan", *flags(planned), "--load", f"{name}=1e-300"))
    assert "--load" in line and f"{PACE[0]:g} to {PACE[1]:g}" in line
    assert f"{PACE[0]:g} to {PACE[1]:g}" in api_refusal(api.plan, **planned, load={name: 1e-300})


def test_the_slowest_rate_keeps_the_clock_and_prints_figures():
    """At the lowest rate every request runs alone, as at a rate 100 times higher: the same times to the 0.1 ms
    printed; and the throughputs print figures, not 0.0."""
    settings = {**LAB, **ROOFLINE, "gpu_blocks": 64, "output_tokens": 2}
    slow = api.simulate(**settings, rate=PACE[0]).to_dict()
    fast = api.simulate(**settings, rate=100 * PACE[0]).to_dict()
    for time in ("ttft_ms", "tpot_ms"):
        assert slow[time] == fast[time], time
    assert slow["requests_per_s"] > 0 and slow["output_tokens_per_s"] > 0


def test_the_config_check_refuses_a_speedup_past_the_clock(tmp_path):
    line = config_refusal(tmp_path, lambda c: c["ttft"]["hardware"]["simulate"]["load"]["speedup"].append(1e-300))
    assert "ttft.hardware.simulate.load.speedup" in line and f"{PACE[0]:g} to {PACE[1]:g}" in line


# -- item 7: a tp the engines refuse is refused in every path ------------------------------------------------------


def test_a_tp_that_does_not_split_the_attention_heads_is_refused_everywhere():
    """vLLM refuses a tp that does not divide num_attention_heads (ModelConfig.verify_with_parallel_config) even when
    it divides or is a multiple of the KV heads: ``--tp 8`` on Qwen2.5-1.5B's 12 heads, ``--tp 64`` on Llama's 32."""
    for model, tp in ((QWEN, 8), (LLAMA, 2 * heads(LLAMA))):
        assert heads(model) % tp
        hardware = {"model_config": model, "gpu_system": "h100_sxm", "tp": tp}
        expected = f"--tp: {heads(model)} attention heads do not split over tp {tp}"
        assert refused(kvlab("ttft", "breakeven", *flags(hardware), "--prefix-tokens", "1000")) == expected
        assert api_refusal(api.ttft_breakeven, **hardware, prefix_tokens=1000) == expected
        plan = {**LAB, "model_config": model, "gpu_tokens": 5120, "tp": tp}
        assert refused(kvlab("plan", *flags(plan))) == expected
        assert api_refusal(api.plan, **plan) == expected
        simulated = {**LAB, **hardware, "gpu_blocks": 64, "output_tokens": 2, "rate": 1}
        assert refused(kvlab("simulate", *flags(simulated))) == expected


def test_the_config_check_refuses_the_tp_the_jobs_would(tmp_path):
    model = json.loads((ROOT / load_config()["ttft"]["hardware"]["lab"]["model_config"]).read_text())
    kv = model["num_key_value_heads"]
    tp = next(tp for tp in range(2, 1024) if model["num_attention_heads"] % tp and tp % kv == 0)  # KV heads split
    line = config_refusal(tmp_path, lambda c: c["ttft"]["hardware"]["lab"].update(tp=tp))
    assert re.match(rf"{tmp_path / 'c.yaml'}:\d+: ttft\.hardware\.lab\.tp: ", line), line  # the file and the line
    assert "attention heads do not split" in line


# -- item 8 --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("flag", "value"), [("--efficiency", "0.1"), ("--overhead-ms", "5")])
def test_a_roofline_factor_where_the_database_prices_is_refused(flag, value):
    """The database prices Llama-3.1-8B on h100_sxm (its kernels are measured): a roofline factor would be ignored;
    with --latency-source roofline it applies."""
    common = ("ttft", "breakeven", "--model-config", LLAMA, "--gpu-system", "h100_sxm", "--prefix-tokens", "1000")
    assert json.loads(kvlab(*common).stdout)["latency_source"] == "database"
    line = refused(kvlab(*common, flag, value))
    assert line.startswith(f"argument {flag}:") and "roofline" in line
    assert kvlab(*common, flag, value, "--latency-source", "roofline").returncode == 0


def test_a_seed_without_a_rate_is_refused():
    simulated = {**LAB, **ROOFLINE, "gpu_blocks": 64, "output_tokens": 2, "clients": 2, "seed": 3}
    line = refused(kvlab("simulate", *flags(simulated)))
    assert line.startswith("argument --seed:") and "--rate" in line
    assert api_refusal(api.simulate, **simulated) == line


def test_plan_load_says_it_leaves_out_the_disk_tier(trace):
    """kvlab simulate has no disk tier: the plan's time under load says so (JSON and table)."""
    common = ["plan", "--workload", "mooncake", "--trace", trace, "--model-config", LLAMA, "--gpu-tokens", "2048"]
    common += [
        "--gpu-system",
        "h100_sxm",
        "--latency-source",
        "roofline",
        "--engine",
        "vllm",
        "--disk-tokens",
        "4096",
        "--load",
        "rate=1",
    ]
    done = kvlab(*common)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert (
        "disk tier" in document["load"]["note"] and f"{document['cache']['disk_tokens']:,}" in document["load"]["note"]
    )
    table = kvlab(*common, "--format", "table").stdout
    assert f"note: {document['load']['note']}" in table


@pytest.mark.parametrize("stamp", ["1_0", "\u0661\u0660", "nan", " 1e400"])
def test_csv_timestamps_take_ascii_numbers_only(tmp_path, stamp):
    """Python's float() takes ``1_0`` and Arabic-Indic digits; a CSV trace's numbers are JSON's."""
    trace = tmp_path / "t.csv"
    trace.write_text(f"timestamp,input_length,output_length,hash_ids\n0,16,1,1\n{stamp},16,1,2\n", encoding="utf-8")
    args = ("trace", "stats", "--workload", "requests", "--trace", trace, "--hash-block-tokens", "16")
    line = refused(kvlab(*args, "--hash-chaining", "chained", "--timestamp-unit", "s"), code=1)
    assert line.startswith(f"{trace}:3: timestamp"), line


def test_a_grid_point_given_twice_is_refused_by_the_api():
    """``[1, 1.0]`` is one budget twice, as ``--cpu-gib 1,1.0`` is (kvlab.cli.base.listing)."""
    plan = {**LAB, "model_config": QWEN, "gpu_tokens": 5120}
    for twice in ([1, 1.0], ["0.5", 0.5]):
        line = api_refusal(api.plan, **plan, cpu_gib=twice)
        assert line.startswith("argument --cpu-gib:") and "given twice" in line
    assert "given twice" in refused(kvlab("plan", *flags(plan), "--cpu-gib", "1,1.0"))


# -- the re-probe's findings on these surfaces ---------------------------------------------------------------------


def test_a_roofline_factor_at_its_bound_is_taken_alike_by_the_command_and_the_api():
    """``--overhead-ms 1e9`` is within the flag's range: the roofline takes it (it once refused its own bound, and the
    API raised a bare ValueError)."""
    common = {**ROOFLINE, "prefix_tokens": 1000, "overhead_ms": 1e9}
    done = kvlab("ttft", "breakeven", *flags(common))
    assert done.returncode == 0, done.stderr
    assert done.stdout == api.ttft_breakeven(**common)


@pytest.mark.parametrize("seed", [-1, 1.5, "abc", 2**70, True])
def test_a_seed_is_a_whole_number_from_0_in_every_path(seed):
    """random.Random draws with a negative seed's absolute value: -1 would be 1's draw under another name."""
    simulated = {**LAB, **ROOFLINE, "gpu_blocks": 64, "output_tokens": 2, "rate": 1, "seed": seed}
    line = api_refusal(api.simulate, **simulated)
    assert line.startswith("argument --seed: expected a whole number")
    if seed == -1:  # the command and the function say it in one line, argparse's
        assert refused(kvlab("simulate", *flags(simulated))) == line


def test_a_timestamp_that_goes_back_names_its_trace(tmp_path):
    trace = tmp_path / "t.jsonl"
    stamps = [0, 2000, 1000]
    trace.write_text(
        "".join(
            json.dumps({"timestamp": s, "input_length": 512, "output_length": 2, "hash_ids": [n]}) + "\n"
            for n, s in enumerate(stamps)
        )
    )
    simulated = {"workload": "mooncake", "trace": trace, **ROOFLINE, "gpu_blocks": 64, "output_tokens": 2}
    line = refused(kvlab("simulate", *flags(simulated)))
    assert line.startswith(f"{trace}: request 3: its timestamp goes back")
    assert api_refusal(api.simulate, **simulated) == line


def test_requests_the_pool_refuses_are_said_on_stderr(tmp_path):
    """Refused requests (longer with their output than the pool) leave the figures to the served ones: said so."""
    trace = tmp_path / "t.jsonl"
    lengths = [512, 4096, 512, 4096, 4096]  # a pool of 3 blocks of 512 tokens holds the first kind only
    trace.write_text(
        "".join(
            json.dumps(
                {"timestamp": 10 * n, "input_length": size, "output_length": 2, "hash_ids": list(range(size // 512))}
            )
            + "\n"
            for n, size in enumerate(lengths)
        )
    )
    simulated = {"workload": "mooncake", "trace": trace, **ROOFLINE, "block_tokens": 512, "gpu_blocks": 3}
    done = kvlab("simulate", *flags(simulated))
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert (document["requests"], document["refused"]) == (lengths.count(512), lengths.count(4096))
    assert done.stderr == (
        f"kvlab simulate: note: {lengths.count(4096)} of {len(lengths)} requests refused, each longer with its output"
        " than the GPU pool (as vLLM refuses it); the figures are the served requests'\n"
    )


def test_a_model_whose_weights_kvlab_does_not_read_asks_for_gpu_blocks():
    """DeepSeek-V3 (latent attention): the database prices it, but vLLM's memory rule needs its weights; the line
    says what to give (--gpu-blocks), not a --latency-source already given."""
    simulated = {**LAB, "model_config": "models/DeepSeek-V3/config.json", "gpu_system": "h100_sxm", "tp": 8}
    line = refused(kvlab("simulate", *flags(simulated), "--output-tokens", "2", "--latency-source", "database"))
    assert "vLLM's GPU memory rule" in line and line.endswith("give --gpu-blocks") and "--latency-source" not in line


def test_a_single_plans_frame_keeps_whole_numbers_whole(trace):
    """The time under load is a figure of the whole run, on the ``all`` row: its counts stay counts beside the
    rounds' missing values (pandas' Int64), and the setting to paste is a column."""
    planned = {"workload": "mooncake", "trace": trace, **ROOFLINE, "gpu_tokens": 5120, "engine": "vllm"}
    plan = api.plan(**planned, cpu_gib=1, load={"rate": 1})
    frame = plan.to_frame()
    assert frame["load.requests"].dtype.name == "Int64"
    assert frame["load.requests"].iloc[0] == plan.to_dict()["load"]["requests"]
    row = api.plan(**planned, cpu_gib=[1, 2]).to_frame().iloc[0]
    assert "--kv-offloading-size 1" in row["engine.setting"]


def test_a_memory_share_past_its_range_names_the_range_it_holds():
    """1e-300 is in (0, 1] but not in the range the flag holds: the line states the range that refused it."""
    simulated = {**LAB, **ROOFLINE, "output_tokens": 2, "gpu_memory_utilization": 1e-300}
    line = refused(kvlab("simulate", *flags(simulated)))
    assert line == api_refusal(api.simulate, **simulated).replace("got 1e-300", "got '1e-300'")
    assert line.startswith("argument --gpu-memory-utilization: expected a number from 1e-09 to 1")
