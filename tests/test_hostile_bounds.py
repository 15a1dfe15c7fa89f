"""Memory bombs and hangs a single value used to set off (issue 36, items 9-11): an engine setting that sized the
compiled loop's arrays (``--max-num-seqs 10**8``, ``--output-tokens 10**9``), a benchmark option that set up for
minutes before the first request (``--num-users``, ``--num-clients``), a grid of millions of points. Each is either
sized by what the run needs or refused in one line before any work.

A memory bomb is checked in a process of its own under a data limit (``RLIMIT_DATA``) far above what the run needs:
before the fix it ran out of memory under it, after it the run is done."""

import gzip
import io
import itertools
import json
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, kvlab, load_config

from kvlab import api
from kvlab.util.numbers import GIB, MAX_POINTS
from kvlab.workflow.config import line_of
from kvlab.workloads import MAX_CONVERSATIONS, MAX_ROUNDS

MODEL = ("--model-config", "models/Llama-3.1-8B-Instruct/config.json", "--gpu-system", "h100_sxm")
DATA_LIMIT = 2**31  # bytes: a simulate of a few requests takes about 250 MB
HANG_GUARD = 120  # seconds: only a guard against a hang, never a measure of speed


def limited(*args, code="from kvlab.cli import main; sys.exit(main(sys.argv[1:]))"):
    """``kvlab ARGS`` (or Python's ``code``) in a process whose data may not pass :data:`DATA_LIMIT`."""
    limit = f"import resource, sys; resource.setrlimit(resource.RLIMIT_DATA, ({DATA_LIMIT}, {DATA_LIMIT}))"
    command = [sys.executable, "-c", f"{limit}; {code}", *map(str, args)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD)


def one_line(done, code):
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == code, (done.returncode, done.stderr)
    assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


@pytest.fixture(scope="module")
def conversation(tmp_path_factory):
    """The conversation trace's first 40 requests (Mooncake's 512-token blocks)."""
    path = tmp_path_factory.mktemp("trace") / "head.jsonl"
    with gzip.open(ROOT / "data/traces/mooncake/conversation_trace.jsonl.gz", "rt", encoding="utf-8") as trace:
        path.write_text("".join(itertools.islice(trace, 40)), encoding="utf-8")
    return path


# -- item 9: the engine's arrays are sized by what the run holds, not by a setting's bound ---------------------


def test_max_num_seqs_sizes_nothing_by_itself(conversation):
    """``--max-num-seqs 10**8`` on 40 requests is ``--max-num-seqs 40``: no more can run at once (it took 9.5 GB)."""
    common = ("simulate", "--workload", "mooncake", "--trace", conversation, *MODEL, "--gpu-blocks", 400)
    done = limited(*common, "--max-num-seqs", 10**8)
    assert done.returncode == 0, done.stderr
    same = kvlab(*common, "--max-num-seqs", 40)
    assert same.returncode == 0, same.stderr
    document, expected = json.loads(done.stdout), json.loads(same.stdout)
    assert document["engine"].pop("max_num_seqs") == 10**8
    expected["engine"].pop("max_num_seqs")
    assert document == expected


def test_kvlab_simulate_sizes_nothing_by_max_num_seqs(conversation):
    """The same from Python: ``kvlab.simulate(max_num_seqs=10**8)`` served the requests (it raised numpy's
    MemoryError)."""
    code = (
        "import kvlab; print(kvlab.simulate(workload='mooncake', trace=sys.argv[1], model_config=sys.argv[2],"
        " gpu_system='h100_sxm', gpu_blocks=400, max_num_seqs=10**8).requests)"
    )
    done = limited(conversation, MODEL[1], code=code)
    assert (done.returncode, done.stdout, done.stderr) == (0, "40\n", "")


def test_an_output_no_pool_holds_is_refused_in_one_line(conversation):
    """``--output-tokens 10**9``: every request is longer than the pool with its output, and the engine refuses each
    as it arrives (vLLM refuses a model length its KV cache cannot hold); it used to number each request's 2 million
    generated blocks first (10.8 GB) and then say nothing of the refusals, with exit 0. (10**9 is past the bound on an
    output now: the longest allowed.)"""
    from kvlab.simulator.settings import MAX_OUTPUT_TOKENS

    done = limited(
        "simulate", "--workload", "mooncake", "--trace", conversation, *MODEL, "--output-tokens", MAX_OUTPUT_TOKENS
    )
    line = one_line(done, 1)
    assert "every request (40)" in line and "--output-tokens" in line, line


def test_a_request_no_pool_holds_is_counted_when_others_are_served(tmp_path):
    """One request too long for the pool among others that fit: the run is done, the refusal counted."""
    lines = [
        {"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]},
        {"timestamp": 1, "input_length": 4096, "output_length": 4, "hash_ids": [1, 3, 4, 5, 6, 7, 8, 9]},
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    done = kvlab("simulate", "--workload", "mooncake", "--trace", trace, *MODEL, "--gpu-blocks", 4)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert (document["requests"], document["refused"]) == (1, 1)


# -- item 10: a benchmark's conversations within what its set-up does in seconds -------------------------------


@pytest.mark.parametrize(
    ("source", "option"),
    [
        ("multi_round_qa", "num_users"),
        ("bench_multiturn", "num_clients"),
        ("multi_round_qa", "num_rounds"),
        ("bench_multiturn", "max_rounds"),
    ],
)
def test_the_config_check_refuses_conversations_past_the_bound(source, option, tmp_path):
    """``num_users: 10**8`` set up for about 25 minutes and ``num_clients: 10**8`` ran past 120 s at 5.5 GB, and
    ``num_rounds: 10**8`` listed 10**8 rounds, after ``kvlab config`` had let them through: it refuses them now,
    naming the key and its line."""
    config = load_config()
    config["replay"]["workloads"]["many"] = {"source": source, option: 10**8}
    text = yaml.safe_dump(config, sort_keys=False)
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    line = one_line(kvlab("config", path, cwd=ROOT), 1)
    key = ("replay", "workloads", "many", option)
    assert line.startswith(f"kvlab config: error: {path}:{line_of(yaml.compose(text), key)}: {'.'.join(key)}:"), line


# -- item 11: a grid of the commands and the API within the pipeline's bound on jobs, with progress ----------------

LLAMA = MODEL[1]
PLAN = ("plan", "--workload", "lab", "--model-config", LLAMA, "--gpu-tokens", 20000)


def values(count):
    return list(range(count))


def comma(numbers):
    return ",".join(map(str, numbers))


@pytest.mark.parametrize(
    ("flags", "keywords"),
    [
        (("--cpu-gib", comma(values(MAX_POINTS + 1))), {"cpu_gib": values(MAX_POINTS + 1)}),
        (
            ("--cpu-gib", comma(values(100)), "--disk-gib", comma(values(60))),
            {"cpu_gib": values(100), "disk_gib": values(60)},
        ),
    ],
    ids=["one list", "a product of two"],
)
def test_a_plan_grid_past_the_bound_is_refused_alike(flags, keywords):
    """``kvlab plan`` and ``kvlab.plan`` refuse a grid of more points than the bound with the same line, before any
    point runs (20,000 budgets or 3,000 x 3,000 ran for minutes, printing nothing)."""
    line = one_line(kvlab(*PLAN, *flags), 2)
    with pytest.raises(api.SettingError) as refused:
        api.plan(workload="lab", model_config=LLAMA, gpu_tokens=20000, **keywords)
    assert line == f"kvlab plan: error: {refused.value}\n"
    assert f"more than the bound of {MAX_POINTS:,}" in line


@pytest.mark.parametrize(
    ("function", "keywords", "flags"),
    [
        (api.size, {"model_config": LLAMA, "tokens": range(10**6)}, "--tokens"),
        (
            api.replay,
            {"workload": "lab", "gpu_tokens": values(2000), "cpu_tokens": values(2000)},
            "--gpu-tokens, --cpu-tokens",
        ),
    ],
    ids=["size", "replay"],
)
def test_an_api_grid_past_the_bound_is_refused(function, keywords, flags):
    """``kvlab.size`` over 10**6 token counts, ``kvlab.replay`` over 4 million rooms: refused before any point."""
    with pytest.raises(api.SettingError, match=f"^arguments? {flags}: a grid of .* more than the bound of"):
        function(**keywords)


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_grid_shows_its_progress_on_a_terminal(monkeypatch):
    """On a terminal a grid counts its points on stderr (after a second; here at once); its results are the same."""
    monkeypatch.setenv("KVLAB_PROGRESS_DELAY", "0")
    monkeypatch.setattr(sys, "stderr", Terminal())
    grid = api.size(model_config=LLAMA, tokens=[1, 2, 3])
    assert "/3 " in sys.stderr.getvalue() and "point" in sys.stderr.getvalue()
    assert [result.tokens for result in grid] == [1, 2, 3]


# -- the re-probe's residues: rounds, the policies' grids, a grid's values, an output, the activations -----------

ROUNDS = ("--workload", "multi_round_qa", "--num-rounds", MAX_ROUNDS + 1)


@pytest.mark.parametrize(
    "args",
    [
        ("replay", *ROUNDS, "--gpu-tokens", 1000),
        ("mrc", *ROUNDS),
        ("ttft", "predict", *ROUNDS, *MODEL, "--gpu-tokens", 1000),
        ("plan", *ROUNDS, "--model-config", LLAMA, "--gpu-tokens", 1000),
        ("replay", "--workload", "bench_multiturn", "--min-rounds", MAX_ROUNDS + 1, "--gpu-tokens", 1000),
    ],
    ids=["replay", "mrc", "ttft predict", "plan", "min-rounds"],
)
def test_rounds_past_the_bound_are_refused_in_one_line(args):
    """``--num-rounds 10**6`` printed 14 million lines (a JSON entry per round) and 10**7 ran out of memory, past
    ``--max-memory``: every command refuses rounds past the bound, the API with the same words."""
    line = one_line(kvlab(*args), 2)
    assert line.startswith(f"kvlab {args[0]}") and f"<= {MAX_ROUNDS}" in line, line


def test_kvlab_replay_refuses_rounds_as_the_command_does():
    with pytest.raises(api.SettingError) as refused:
        api.replay(workload="multi_round_qa", num_rounds=10**7, gpu_tokens=1000, max_memory="500M")
    assert (
        one_line(kvlab("replay", *ROUNDS[:3], 10**7, "--gpu-tokens", 1000), 2)
        == f"kvlab replay: error: {refused.value}\n"
    )


def test_the_schema_bounds_the_benchmarks_as_the_options_do():
    """config.yaml's schema says the benchmarks' bounds (its first words on a bad config) as the options do."""
    schema = yaml.safe_load((ROOT / "schemas" / "config.schema.yaml").read_text(encoding="utf-8"))
    sources = {
        branch["if"]["properties"]["source"].get("const"): branch["then"]["properties"]
        for branch in schema["$defs"]["replay_workload"]["allOf"]
        if "if" in branch
    }
    bounds = {"num_users": MAX_CONVERSATIONS, "num_clients": MAX_CONVERSATIONS, "num_rounds": MAX_ROUNDS}
    bounds |= {"min_rounds": MAX_ROUNDS, "max_rounds": MAX_ROUNDS}
    found = {
        key: spec.get("maximum")
        for source in ("multi_round_qa", "bench_multiturn")
        for key, spec in sources[source].items()
        if key in bounds
    }
    assert found == bounds


def test_only_the_rounds_a_request_reaches_are_listed():
    """A round no request reaches (multi_round_qa's users ask one question a ``num_users / qps`` gap, for ``--time``
    seconds) has no line: ``--num-rounds 100`` over 60 s listed 100 rounds of which 4 had requests."""
    document = json.loads(kvlab("replay", *ROUNDS[:3], 100, "--time", 60, "--gpu-tokens", 1000).stdout)
    rounds = document["rounds"]
    assert rounds and all(entry["requests"] for entry in rounds), [entry["round"] for entry in rounds]
    assert [entry["round"] for entry in rounds] == [f"round{number}" for number in range(1, len(rounds) + 1)]
    assert sum(entry["requests"] for entry in rounds) == document["requests"]


TABLE = ("policies", "table", "--block-tokens", 16, "--write-policies", "write-through,write-back")
TABLE += ("--evictions", "lru", "--workload", "lab", "--docs", 1, "--tokens", 16, "--passes", "fwd")


@pytest.mark.parametrize(
    "args",
    [
        (*TABLE, "--gpu-tokens", comma(values(50)), "--cpu-tokens", comma(values(51))),
        ("policies", "cliff", "--docs", 1, "--tokens", 16, "--passes", "fwd", "--gpu-tokens", 16, "--record-pass", 1)
        + ("--cpu-tokens", comma(values(MAX_POINTS)), "--write-policies", "write-through,write-back"),
    ],
    ids=["table", "cliff"],
)
def test_a_policies_grid_past_the_bound_is_refused(args, tmp_path):
    """Each list of ``kvlab policies`` was bounded, their product not: 50 GPU x 51 CPU rooms x 2 write policies ran
    5,100 replays. Refused as plan's grid is, before any replay, nothing written."""
    out = tmp_path / "out"
    line = one_line(kvlab(*args, "--out", out), 2)
    assert f"more than the bound of {MAX_POINTS:,}" in line and "--write-policies" in line, line
    assert not out.exists()


def test_a_huge_grid_is_refused_before_its_values_are_read():
    """``gpu_tokens=range(1, 10**9)`` built a value per point before counting them (33 s, then a raw MemoryError);
    a view of 10**12 numpy values that holds one is refused as fast."""
    import numpy as np

    for rooms in (range(1, 10**18), np.broadcast_to(np.int64(1000), (10**12,))):
        with pytest.raises(api.SettingError, match=f"^argument --gpu-tokens: a grid of {len(rooms):,} points"):
            api.replay(workload="lab", gpu_tokens=rooms)


def test_an_output_past_any_context_is_refused_alike(conversation):
    """``--output-tokens 10**8`` with a pool to hold it ran for minutes (a step per token), printing nothing: an output
    longer than any model's context is refused by the command and the API in the same line."""
    from kvlab.simulator.settings import MAX_OUTPUT_TOKENS

    too_long = MAX_OUTPUT_TOKENS + 1
    line = one_line(
        kvlab("simulate", "--workload", "mooncake", "--trace", conversation, *MODEL, "--output-tokens", too_long), 2
    )
    with pytest.raises(api.SettingError) as refused:
        api.simulate(
            workload="mooncake", trace=conversation, model_config=LLAMA, gpu_system="h100_sxm", output_tokens=too_long
        )
    assert line == f"kvlab simulate: error: {refused.value}\n"
    assert "--output-tokens" in line and f"{MAX_OUTPUT_TOKENS}" in line


def test_a_step_budget_whose_activations_fill_the_gpu_names_its_flag():
    """``--max-num-batched-tokens 10**12``: the activations of the profiling pass, not the weights, leave no room, and
    the line said "give a larger --tp"; it names the flag and the rule's figures (those of the default budget's
    rule: the weights and the budget do not change with it)."""
    from kvlab.latency.hardware import HardwareModel, HardwareSettings
    from kvlab.serving.vllm import gpu_pool

    args = ("simulate", "--workload", "lab", *MODEL, "--max-num-batched-tokens", 10**12)
    line = one_line(kvlab(*args), 2)
    rule = gpu_pool(HardwareModel(HardwareSettings(model_config=LLAMA, gpu_system="h100_sxm"), 16), 16, 0.9, 8192)
    assert "--max-num-batched-tokens" in line and "--tp" not in line, line
    for figure in (rule.weights, rule.budget):
        assert f"{figure / GIB:,.1f} GiB" in line, line


def test_the_config_check_refuses_a_policies_grid_the_command_refuses(tmp_path):
    """``policies.tables.rooms`` whose product with the write policies and evictions passes the bound: the job would
    refuse it, so ``kvlab config`` does, naming the key and its line."""
    config = load_config()
    policies = config["policies"]
    designs = len(policies["write_policies"]) * len(policies["evictions"])
    policies["tables"]["rooms"]["cpu_tokens"] = values(MAX_POINTS // designs + 1)
    text = yaml.safe_dump(config, sort_keys=False)
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    line = one_line(kvlab("config", path, cwd=ROOT), 1)
    key = ("policies", "tables")
    assert line.startswith(f"kvlab config: error: {path}:{line_of(yaml.compose(text), key)}: policies.tables:"), line
    assert f"more than the bound of {MAX_POINTS:,}" in line, line
