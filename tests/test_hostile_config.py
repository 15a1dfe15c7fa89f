"""Tracebacks, unclear lines and config values that passed ``kvlab config`` and then failed in the job (issue 36,
items 12-15): every refusal is one line naming what is wrong, and the config check refuses first what a job would.

Expectations come from the commands themselves (a converted trace replays as its source does) and the parsed
config.yaml, never from hard-coded results."""

import csv
import io
import json

import pytest
import yaml
from conftest import ROOT, kvlab, load_config

# -- item 12: kvlab trace convert of a generated workload ---------------------------------------------------------

GENERATED = {  # tiny settings of every generated source, each with requests that share blocks
    "lab": ["--docs", 3, "--tokens", 100, "--passes", "fwd,rev"],
    "long_doc_qa": ["--num-documents", 3, "--document-length", 90, "--repeat-count", 2, "--repeat-mode", "random"],
    "bench_multiturn": ["--num-clients", 3, "--num-rounds", 3, "--request-length", 40, "--output-length", 8],
    "multi_round_qa": ["--num-users", 2, "--num-rounds", 3, "--shared-system-prompt", 30, "--user-history-prompt", 20]
    + ["--answer-len", 10, "--question-len", 5, "--time", 30],
}
HITS = ("input_tokens", "gpu_hit_tokens", "cpu_hit_tokens")


def per_request_hits(path):
    return [tuple(row[name] for name in HITS) for row in csv.DictReader(io.StringIO(path.read_text()))]


@pytest.mark.parametrize("source", GENERATED)
def test_a_generated_workload_converts_and_replays_as_itself(source, tmp_path):
    """The converted trace (kvlab's requests JSONL, chained hash_ids of the workload's blocks) is the same requests:
    replayed, each request has the source's hits (a differential: the replay of the source is the reference)."""
    block, workload = 16, ["--workload", source, *GENERATED[source]]
    converted = tmp_path / "trace.jsonl"
    done = kvlab("trace", "convert", *workload, "--block-tokens", block, "--to", "requests", "--out", converted)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    rooms = ["--gpu-tokens", 6 * block, "--cpu-tokens", 20 * block, "--block-tokens", block]
    original, again = tmp_path / "original.csv", tmp_path / "again.csv"
    assert kvlab("replay", *workload, *rooms, "--per-request", original).returncode == 0
    trace = ["--workload", "requests", "--trace", converted, "--hash-block-tokens", block, "--hash-chaining", "chained"]
    done = kvlab("replay", *trace, *rooms, "--per-request", again)
    assert done.returncode == 0, done.stderr
    hits = per_request_hits(original)
    assert per_request_hits(again) == hits
    assert any(int(gpu) + int(cpu) for _, gpu, cpu in hits)  # the requests share blocks: the comparison means something


# -- item 13: the user's own trace in the pipeline, as the Mooncake traces -----------------------------------------


def config_file(folder, config, name="c.yaml"):
    path = folder / name
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def own_trace(folder, lines=None):
    """A tiny trace in kvlab's requests format (docs/replay.md): two requests sharing a 32-token prefix."""
    lines = lines or [
        {"timestamp": 0, "input_length": 40, "output_length": 4, "prompt_token_ids": list(range(40))},
        {"timestamp": 0.5, "input_length": 36, "output_length": 4, "prompt_token_ids": [*range(32), 7, 7, 7, 7]},
    ]
    path = folder / "own.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def with_own_trace(config, trace, **settings):
    """``config`` with a replay workload ``own`` of the trace (declared as the Mooncake trace is), simulated under
    load by ``ttft.hardware.simulate``."""
    config["replay"]["workloads"]["own"] = {"source": "requests", "trace": str(trace), **settings}
    config["ttft"]["hardware"]["simulate"]["workload"] = "own"
    return config


def test_the_config_check_takes_an_own_trace(tmp_path):
    path = config_file(tmp_path, with_own_trace(load_config(), own_trace(tmp_path)))
    done = kvlab("config", path, cwd=ROOT)
    assert (done.returncode, done.stderr) == (0, "")


def test_the_config_check_reads_an_own_trace_as_its_job_does(tmp_path):
    """A line that is not a request of the format is refused by the check, naming the trace's key and line."""
    trace = own_trace(tmp_path, [{"timestamp": 0, "input_length": 3, "output_length": 1, "prompt_token_ids": [1]}])
    path = config_file(tmp_path, with_own_trace(load_config(), trace))
    line = one_line_error(kvlab("config", path, cwd=ROOT))
    assert "replay.workloads.own.trace" in line and f"{trace}:1:" in line, line


def one_line_error(done, code=1):
    """The command failed with ``code`` and one line on stderr, no traceback; that line."""
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode == code, (done.returncode, done.stderr)
    assert done.stderr.endswith("\n") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


# -- item 14: what a job refuses, the config check refuses first, naming config.yaml's key ------------------------

SYSTEM = ROOT / "data" / "systems" / "ci-2vcpu.yaml"


def system_file(folder, block, key, value):
    """The committed system file with ``block.key`` set to ``value`` (deleted where ``value`` is None)."""
    system = yaml.safe_load(SYSTEM.read_text(encoding="utf-8"))
    if value is None:
        del system[block][key]
    else:
        system[block][key] = value
    path = folder / "system.yaml"
    path.write_text(yaml.safe_dump(system, sort_keys=False), encoding="utf-8")
    return path


def hardware(config):
    return config["ttft"]["hardware"]


JOB_REFUSALS = {
    # what changes (given the test's folder), the key the line must name
    "a 70B model simulated on one GPU": (
        lambda c, _: hardware(c)["simulate"].update(model_config="models/Llama-3.1-70B-Instruct/config.json"),
        "ttft.hardware.simulate",
    ),
    "DeepSeek-V3 simulated on one GPU": (
        lambda c, _: hardware(c)["simulate"].update(model_config="models/DeepSeek-V3/config.json"),
        "ttft.hardware.simulate",
    ),
    "a CPU tier of 10**15 blocks": (
        lambda c, _: hardware(c)["simulate"]["load"].update(cpu_blocks=[0, 10**15]),
        "ttft.hardware.simulate",
    ),
    "a system file without the GPU's memory": (
        lambda c, folder: hardware(c).update(gpu_system=str(system_file(folder, "gpu", "mem_capacity", None))),
        "ttft.hardware.simulate",
    ),
    "a system of 1e-300 FLOP/s": (
        lambda c, folder: hardware(c).update(gpu_system=str(system_file(folder, "gpu", "bfloat16_tc_flops", 1e-300))),
        "ttft.hardware.gpu_system",
    ),
    "10**8 documents replayed": (
        lambda c, _: next(s for s in c["replay"]["workloads"].values() if s["source"] == "lab").update(docs=10**8),
        "replay.workloads.",
    ),
    "10**8 documents priced": (lambda c, _: hardware(c)["lab"].update(docs=10**8), "ttft.hardware.lab"),
}


@pytest.mark.parametrize("name", JOB_REFUSALS)
def test_the_config_check_refuses_what_the_job_refuses(name, tmp_path):
    mutate, key = JOB_REFUSALS[name]
    config = load_config()
    mutate(config, tmp_path)
    path = config_file(tmp_path, config)
    line = one_line_error(kvlab("config", path, cwd=ROOT))
    assert line.startswith(f"kvlab config: error: {path}:"), line
    assert f": {key}" in line, line


def test_a_system_figure_out_of_any_machine_s_range_names_its_file_line_and_field(tmp_path):
    """1e-300 FLOP/s would overflow every time (numpy's warnings, then a line naming nothing): refused as it is
    read, at its line in the file."""
    system = system_file(tmp_path, "gpu", "bfloat16_tc_flops", 1e-300)
    model = ROOT / "models" / "Qwen2.5-1.5B-Instruct" / "config.json"
    done = kvlab("ttft", "predict", "--workload", "lab", "--docs", 2, "--gpu-tokens", 10000, "--model-config", model,
                 "--gpu-system", system)  # fmt: skip
    line = one_line_error(done, code=2)
    number = 1 + system.read_text().splitlines().index("  bfloat16_tc_flops: 1.0e-300")
    assert f"{system}:{number}: gpu.bfloat16_tc_flops" in line, line


def test_a_number_yaml_reads_as_text_is_said_so(tmp_path):
    """YAML 1.1 (PyYAML, Snakemake) reads ``989e12`` and ``4e-1`` as text: the line says how to write the number."""
    system = tmp_path / "system.yaml"
    system.write_text(
        SYSTEM.read_text(encoding="utf-8").replace(
            "bfloat16_tc_flops:", "bfloat16_tc_flops: 989e12\n  was_bfloat16_tc_flops:", 1
        ),
        encoding="utf-8",
    )
    done = kvlab("ttft", "predict", "--workload", "lab", "--docs", 2, "--gpu-tokens", 10000, "--model-config",
                 ROOT / "models" / "Qwen2.5-1.5B-Instruct" / "config.json", "--gpu-system", system)  # fmt: skip
    line = one_line_error(done, code=2).rstrip("\n")
    assert line.endswith("got '989e12' (YAML 1.1 reads 989e12 as text: write 989.0e12)"), line
    config = load_config()
    hardware(config)["simulate"]["budgets"]["speedup"] = "4e-1"  # as YAML reads 4e-1
    line = one_line_error(kvlab("config", config_file(tmp_path, config), cwd=ROOT)).rstrip("\n")
    assert line.endswith("is not of type 'number' (YAML 1.1 reads 4e-1 as text: write 4.0e-1)"), line


# -- item 15: one line, in the command's own words, before any work ------------------------------------------------

LLAMA = ["--model-config", ROOT / "models" / "Llama-3.1-8B-Instruct" / "config.json", "--gpu-system", "h100_sxm"]


def mooncake_trace(folder, lengths):
    """A Mooncake trace of prompts of ``lengths`` tokens (its 512-token blocks, none shared)."""
    lines, start = [], 0
    for number, length in enumerate(lengths):
        blocks = -(-length // 512)
        ids = list(range(start, start + blocks))
        start += blocks
        lines.append({"timestamp": number, "input_length": length, "output_length": 4, "hash_ids": ids})
    path = folder / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("clients", [None, 1])  # the compiled loop (the trace's clock), the Python engine
def test_a_prompt_longer_than_the_budget_without_chunked_prefill_is_refused(clients, tmp_path):
    """vLLM refuses a step budget below its model length without chunked prefill at start; the engine that took it
    used to say it was stuck on the CPU tier, which it does not have."""
    trace = mooncake_trace(tmp_path, [60, 1000])
    arrivals = ["--clients", clients] if clients else []
    done = kvlab("simulate", "--workload", "mooncake", "--trace", trace, *LLAMA, "--no-chunked-prefill",
                 "--max-num-batched-tokens", 100, *arrivals)  # fmt: skip
    line = one_line_error(done, code=2)
    assert "request 2: its prompt of 1000 tokens" in line and "--max-num-batched-tokens 100" in line, line
    assert "--no-chunked-prefill" in line and "CPU tier" not in line, line


def test_a_prompt_cut_into_more_blocks_than_memory_holds_names_its_size(tmp_path):
    """A 2**53-token prompt of one hash block, cut into 16-token blocks: once a bare "out of memory"."""
    tokens = 2**53
    trace = tmp_path / "own.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": tokens, "output_length": 1, "hash_ids": [7]}) + "\n")
    own = ["--workload", "requests", "--trace", trace, "--hash-block-tokens", tokens, "--hash-chaining", "chained"]
    for command in (["replay", "--gpu-tokens", 1000], ["simulate", *LLAMA]):
        line = one_line_error(kvlab(*command, *own))
        assert f"request 1 of the trace: its prompt of {tokens} tokens" in line and "--block-tokens 16" in line, line


@pytest.mark.parametrize(
    ("workload", "load", "said"),
    [
        (["--workload", "lab", "--docs", 2], "clients=0", "clients: expected a whole number from 1"),
        (["--workload", "lab", "--docs", 2], "rate=1", "workload lab has no output lengths"),
        (["--workload", "bench_multiturn", "--num-clients", 2], "speedup=2", "no timestamps to speed up"),
    ],
)
def test_plan_refuses_a_load_before_it_plans_in_its_own_words(workload, load, said, tmp_path, monkeypatch):
    """The plan itself is never run: its --load is refused first, naming plan's flag, never simulate's."""
    from kvlab.sizing import plan as planner

    monkeypatch.setattr(planner, "plan", lambda *args, **kwargs: pytest.fail("the plan ran"))
    model = ["--model-config", ROOT / "models" / "Qwen2.5-1.5B-Instruct" / "config.json"]
    done = kvlab("plan", *workload, *model, "--gpu-tokens", 20000, "--gpu-system", "h100_sxm", "--engine", "vllm",
                 "--load", load)  # fmt: skip
    line = one_line_error(done, code=2)
    assert "argument --load: " in line and said in line, line
    assert not any(flag in line for flag in ("--clients", "--rate", "--speedup", "--output-tokens")), line
