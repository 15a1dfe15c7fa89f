"""Tests of `kvlab plan`'s grid of budgets (--cpu-gib A,B,...), its budget per node (--cpu-gib-per-node) and its
predicted TTFT per round (--gpu-system, kvlab/api/plans.py with kvlab/latency/pricing.py): one budget is the plan
as before, a grid is its budgets one by one, a node's amount is the per-GPU budget it divides into, and the TTFT's
percentiles are those of an independent pricing of `kvlab replay --per-request`'s table."""

import dataclasses
import inspect
import json
import statistics
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction

import pytest
import yaml
from conftest import ROOT, kvlab

from kvlab import api
from kvlab.api import plans
from kvlab.cli import plan as plan_command
from kvlab.latency.hardware import HardwareModel, HardwareSettings
from kvlab.latency.systems import read_system, systems_dir
from kvlab.sizing import plan as planner
from kvlab.sizing.model_size import read_model_config
from kvlab.sizing.verdict import verdict
from kvlab.util.files import dump_json
from kvlab.workloads import WORKLOADS

LLAMA = "models/Llama-3.1-8B-Instruct/config.json"  # 8 KV heads: tp 1, 2, 4, 8
SYSTEM = "h100_sxm"
GPU_TOKENS = 10000  # under two documents of 5,011 tokens: the passes after the first reach the CPU tier
SETTING = ["--workload", "lab", "--docs", "4", "--model-config", LLAMA, "--gpu-tokens", str(GPU_TOKENS)]
KEYWORDS = {"workload": "lab", "docs": 4, "model_config": LLAMA, "gpu_tokens": GPU_TOKENS}
BUDGETS = ["0", "1", "2.5"]  # GiB per GPU: 0, 8,192 and 20,480 tokens of 131,072 bytes
NODE_KEYS = ("cpu_gib_per_node", "ranks_per_node", "gpus_per_node")
ROUNDING_MS = 0.1  # two means, each rounded to 0.1 ms, differ by at most this for the same times
STATS = ("p50_ms", "p90_ms", "p99_ms", "mean_ms")


def plan_run(*args):
    """``kvlab plan SETTING ARGS`` in this process: a CompletedProcess."""
    return kvlab("plan", *SETTING, *map(str, args), cwd=ROOT)


def plan_text(*args):
    done = plan_run(*args)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


def plan_json(*args):
    return json.loads(plan_text(*args))


def without(document, keys=NODE_KEYS):
    """The plan with the node's record left out of its cache (what a per-node budget adds)."""
    return {**document, "cache": {key: value for key, value in document["cache"].items() if key not in keys}}


@pytest.fixture(scope="module")
def singles():
    """Each budget's plan alone, as JSON text (no TTFT)."""
    return {budget: plan_text("--cpu-gib", budget) for budget in BUDGETS}


@pytest.fixture(scope="module")
def priced():
    """``{source: the grid's plans}``: one call per latency source over every budget (the database's is read once)."""
    found = {}
    for source in ("database", "roofline"):
        args = ["--cpu-gib", ",".join(BUDGETS), "--engine", "vllm", "--gpu-system", SYSTEM, "--latency-source", source]
        found[source] = plan_json(*args)
    return found


@pytest.fixture(scope="module")
def two_gpu_system(tmp_path_factory):
    """h100_sxm's system file with two GPUs per node (a .yaml of one's own: priced by the roofline)."""
    document = yaml.safe_load((systems_dir() / f"{SYSTEM}.yaml").read_text(encoding="utf-8"))
    document["node"]["num_gpus_per_node"] = 2
    path = tmp_path_factory.mktemp("system") / "two_gpus.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


# --- one budget, a grid of them -------------------------------------------------------------------------------


def test_one_budget_is_the_plan_as_before(singles):
    """One value prints one JSON object: the planner's own (kvlab/sizing/plan.py, unchanged by the grid), the API's
    text, and the deprecated spelling's."""
    text = singles["1"]
    made = WORKLOADS["lab"](None, docs=4)
    shape = read_model_config(ROOT / LLAMA)
    direct = planner.plan(
        made, "Llama-3.1-8B-Instruct", shape, 1, GPU_TOKENS, Decimal("1"), "write-through", "drop", "tail-first"
    )
    assert text == dump_json({**direct, "verdict": verdict(direct)})  # the API adds the verdict
    assert text == api.plan(**KEYWORDS, cpu_gib="1").text
    old = plan_run("--cpu-gb", "1")
    assert (old.returncode, old.stdout) == (0, text)
    assert old.stderr == "kvlab: --cpu-gb is deprecated; use --cpu-gib\n"
    assert "ttft" not in json.loads(text) and all(key not in json.loads(text)["cache"] for key in NODE_KEYS)
    assert plan_text() == singles["0"]  # no budget: 0, as before


def test_a_grid_is_its_budgets_one_by_one(singles):
    grid = plan_json("--cpu-gib", ",".join(BUDGETS))
    assert isinstance(grid, list) and len(grid) == len(BUDGETS)
    assert grid == [json.loads(singles[budget]) for budget in BUDGETS]
    assert [plan["cache"]["cpu_gib"] for plan in grid] == [float(budget) for budget in BUDGETS]
    reversed_grid = plan_json("--cpu-gib", ",".join(reversed(BUDGETS)))
    assert reversed_grid == grid[::-1]  # in the order given
    assert plan_text("--cpu-gib", ",".join(BUDGETS)) == dump_json(api.plan(**KEYWORDS, cpu_gib=BUDGETS).to_dict())
    table = plan_text("--cpu-gib", ",".join(BUDGETS), "--format", "table")
    assert table.count("model:") == 1  # one table for the grid, its rows the budgets' (tests/test_plan_grid.py)


# --- a budget per node ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "tp", "system", "ranks"),
    [("8", 1, None, 1), ("8", 4, None, 4), ("10", 8, None, 8), ("3", 2, SYSTEM, 2), ("6", 4, "two", 2)],
)
def test_a_nodes_amount_is_divided_over_its_ranks(amount, tp, system, ranks, two_gpu_system):
    """--cpu-gib-per-node X with tp T is --cpu-gib X / min(T, GPUs per node) in every figure (the system's GPUs per
    node, else 8), and the answer records both."""
    system = str(two_gpu_system) if system == "two" else system
    hardware = ["--gpu-system", system, "--engine", "lmcache", "--latency-source", "roofline"] if system else []
    gpus = read_system(system).gpus_per_node if system else 8
    assert min(tp, gpus) == ranks
    per_gpu = Fraction(amount) / ranks
    assert per_gpu.denominator in (1, 2, 4, 8)  # exact in decimals
    node = plan_json("--cpu-gib-per-node", amount, "--tp", tp, *hardware)
    gpu = plan_json("--cpu-gib", str(float(per_gpu)), "--tp", tp, *hardware)
    assert without(node) == gpu
    cache = node["cache"]
    assert (cache["cpu_gib_per_node"], cache["ranks_per_node"], cache["gpus_per_node"]) == (float(amount), ranks, gpus)
    assert cache["cpu_gib"] == float(per_gpu)
    priced = {"gpu_system": system, "engine": "lmcache", "latency_source": "roofline"} if system else {}
    assert api.plan(**KEYWORDS, tp=tp, cpu_gib_per_node=amount, **priced).to_dict() == node


def test_each_engine_is_given_its_share_of_the_node():
    """4 ranks on a node of 8 GiB: LMCache's max_local_cpu_size and SGLang's --hicache-size are per rank (2 GiB),
    vLLM's --kv-offloading-size the ranks' total (8 GiB), and every engine pins the node's 8 GiB (SGLang: its
    whole decimal GB per rank, rounded down)."""
    found = {
        engine: plan_json("--cpu-gib-per-node", "8", "--tp", 4, "--engine", engine)["engine"]
        for engine in ("vllm", "lmcache", "sglang")
    }
    vllm, lmcache, sglang = found["vllm"], found["lmcache"], found["sglang"]
    assert vllm["flags"][vllm["flags"].index("--kv-offloading-size") + 1] == "8"
    assert lmcache["environment"]["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "2"
    assert sglang["flags"][sglang["flags"].index("--hicache-size") + 1] == str(2 * 2**30 // 10**9)
    assert vllm["host_ram_gib"] == lmcache["host_ram_gib"] == 8.0
    assert sglang["host_ram_gib"] <= 8.0


def test_a_grid_of_node_amounts_and_the_former_spelling():
    grid = plan_json("--cpu-gib-per-node", "4,16", "--tp", 2)
    assert [plan["cache"]["cpu_gib"] for plan in grid] == [2.0, 8.0]
    done = plan_run("--cpu-gb-per-node", "4,16", "--tp", 2)
    assert json.loads(done.stdout) == grid
    assert done.stderr == "kvlab: --cpu-gb-per-node is deprecated; use --cpu-gib-per-node\n"


# --- the TTFT ---------------------------------------------------------------------------------------------------


def test_the_ttft_is_there_only_with_a_system_and_names_its_source(singles, priced):
    assert all("ttft" not in json.loads(text) for text in singles.values())
    for source, grid in priced.items():
        for plan, budget in zip(grid, BUDGETS, strict=True):
            ttft = plan["ttft"]
            assert list(ttft) == ["latency", "all", "rounds"]
            assert ttft["latency"]["latency_source"] == source
            assert ttft["latency"]["prefill"].startswith(f"{source}: ")
            assert (ttft["latency"]["gpu_system"], ttft["latency"]["engine"]) == (SYSTEM, "vllm")
            assert [row["round"] for row in ttft["rounds"]] == [row["round"] for row in plan["rounds"]]
            for row in [ttft["all"], *ttft["rounds"]]:
                assert [row[key] for key in STATS] == sorted(row[key] for key in STATS[:3]) + [row["mean_ms"]]
                assert all(isinstance(row[key], float) and row[key] > 0 for key in STATS)
            own = {key: value for key, value in plan.items() if key not in ("ttft", "engine", "verdict")}
            alone = json.loads(singles[budget])
            assert own == {key: value for key, value in alone.items() if key != "verdict"}  # the plan's own figures


def independent(plan, source):
    """Each round's TTFTs, priced here: `kvlab replay --per-request`'s table at the plan's rooms, each request
    through HardwareModel.parts_ms."""
    cache = plan["cache"]
    replayed = api.replay(
        workload="lab",
        docs=4,
        gpu_tokens=cache["gpu_tokens"],
        cpu_tokens=cache["cpu_tokens"],
        block_tokens=cache["chunk_tokens"],
        per_request=True,
    )
    settings = HardwareSettings(model_config=LLAMA, gpu_system=SYSTEM, engine="vllm", latency_source=source)
    model = HardwareModel(settings, cache["chunk_tokens"])
    table = replayed.requests()
    times, hits = {}, {}
    for row in table.itertuples():
        times.setdefault(row.round, []).append(
            model.parts_ms(row.input_tokens, row.gpu_hit_tokens, row.cpu_hit_tokens)[2]
        )
        hits.setdefault(row.round, [0, 0])
        hits[row.round][0] += row.gpu_hit_tokens
        hits[row.round][1] += row.cpu_hit_tokens
    return times, hits


@pytest.mark.parametrize("source", ["database", "roofline"])
def test_each_rounds_p50_is_the_median_of_an_independent_pricing(priced, source):
    for plan in priced[source]:
        times, hits = independent(plan, source)
        for row, figures in zip(plan["ttft"]["rounds"], plan["rounds"], strict=True):
            name = row["round"]
            assert hits[name] == [figures["gpu_hit_tokens"], figures["cpu_hit_tokens"]]  # the plan's rooms
            assert abs(row["p50_ms"] - statistics.median(times[name])) <= 0.05 + 1e-9
            assert abs(row["mean_ms"] - statistics.fmean(times[name])) <= 0.05 + 1e-9
        every = [time for name in times for time in times[name]]
        assert abs(plan["ttft"]["all"]["p50_ms"] - statistics.median(every)) <= 0.05 + 1e-9


@pytest.mark.parametrize("source", ["database", "roofline"])
def test_more_cpu_never_slows_a_round_whose_hits_grow(priced, source):
    """Along the budgets: a round whose hit tokens grow gets faster by more than the means' rounding; one whose hits
    stay the same keeps its time (within the rounding); none gets slower. The grid has rounds of both kinds."""
    grid = priced[source]
    grew = 0
    for smaller, larger in zip(grid[:-1], grid[1:], strict=True):
        for before, after, time_before, time_after in zip(
            smaller["rounds"], larger["rounds"], smaller["ttft"]["rounds"], larger["ttft"]["rounds"], strict=True
        ):
            hits_before = before["gpu_hit_tokens"] + before["cpu_hit_tokens"]
            hits_after = after["gpu_hit_tokens"] + after["cpu_hit_tokens"]
            assert hits_after >= hits_before
            if hits_after > hits_before:
                grew += 1
                assert time_after["mean_ms"] < time_before["mean_ms"] - ROUNDING_MS, (before, after)
            else:
                assert abs(time_after["mean_ms"] - time_before["mean_ms"]) <= ROUNDING_MS
    assert grew >= 2


def test_the_api_is_the_command(priced):
    keywords = {"engine": "vllm", "gpu_system": SYSTEM, "latency_source": "roofline"}
    grid = api.plan(**KEYWORDS, cpu_gib=BUDGETS, **keywords)
    assert grid.to_dict() == priced["roofline"]
    one = api.plan(**KEYWORDS, cpu_gib="1", **keywords)
    assert one.to_dict() == priced["roofline"][1]
    frame = one.to_frame()
    assert list(frame["round"]) == ["all", "pass1", "pass2", "pass3"]
    assert list(frame["p50_ms"]) == [one.to_dict()["ttft"]["all"]["p50_ms"]] + [
        row["p50_ms"] for row in one.to_dict()["ttft"]["rounds"]
    ]


def test_the_table_shows_each_rounds_ttft_and_its_source(priced):
    table = plan_text(
        "--cpu-gib",
        "1",
        "--engine",
        "vllm",
        "--gpu-system",
        SYSTEM,
        "--latency-source",
        "roofline",
        "--format",
        "table",
    )
    ttft = priced["roofline"][1]["ttft"]
    for row in [*ttft["rounds"], {**ttft["all"], "round": "all"}]:
        assert f"  {row['round']}: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms\n" in table
    assert f"  source: {ttft['latency']['prefill']}; {ttft['latency']['composition']}\n" in table
    assert "roofline" in table.splitlines()[-3]  # before the verdict


def test_every_hardware_setting_reaches_the_model(priced):
    """Each field of HardwareSettings but the plan's own flags is a flag of `kvlab plan` and a keyword of kvlab.plan
    (a field added there and not here fails this test), and is passed on: a slower roofline is slower."""
    own = {"model_config", "engine", "tp", "kv_dtype"}
    names = {setting.name for setting in dataclasses.fields(HardwareSettings)} - own
    assert set(plans.HARDWARE_SETTINGS) == names
    assert names <= set(inspect.signature(api.plan).parameters)
    shown = plan_command.build_parser("kvlab plan").format_help().split()
    assert {f"--{name.replace('_', '-')}" for name in names} <= set(shown)
    slow = plan_json(
        "--cpu-gib",
        "1",
        "--engine",
        "vllm",
        "--gpu-system",
        SYSTEM,
        "--latency-source",
        "roofline",
        "--efficiency",
        "0.3",
    )["ttft"]
    usual = priced["roofline"][1]["ttft"]
    assert "efficiency compute 0.3 " in slow["latency"]["prefill"]
    assert all(row["p50_ms"] > other["p50_ms"] for row, other in zip(slow["rounds"], usual["rounds"], strict=True))


def test_a_plan_without_a_system_imports_no_pricing():
    """Neither aiconfigurator-core nor the pricing is imported by a plan that prices no TTFT (its hardware flags
    are declared from kvlab/latency/hardware.py's settings, which import neither)."""
    code = (
        "import contextlib, io, json, sys; from kvlab.cli import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()): code = main(['plan', *{SETTING!r}, '--cpu-gib', '0,1'])\n"
        "print(json.dumps([code, sorted(m for m in sys.modules if m.startswith(('aiconfigurator', 'kvlab.latency')))]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    code, modules = json.loads(done.stdout)
    assert code == 0
    assert not [name for name in modules if name.startswith("aiconfigurator")]
    assert not {"kvlab.latency.pricing", "kvlab.latency.database", "kvlab.latency.systems"} & set(modules), modules


# --- bad input --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--gpu-system", "no_such_gpu", "--engine", "vllm"], "--gpu-system: 'no_such_gpu' is not a system"),
        (["--gpu-system", SYSTEM], "give --engine too"),
        (
            ["--cpu-gib", "1", "--cpu-gib-per-node", "8"],
            "argument --cpu-gib-per-node: not allowed with argument --cpu-gib",
        ),
        (
            ["--cpu-gib-per-node", "8", "--cpu-gib", "1"],
            "argument --cpu-gib: not allowed with argument --cpu-gib-per-node",
        ),
        (["--latency-source", "roofline"], "argument --latency-source: prices the TTFT, which takes --gpu-system"),
        (["--cpu-gib", "1,1"], "argument --cpu-gib: GiB amounts: an item is given twice"),
        (["--cpu-gib-per-node", "-8"], "argument --cpu-gib-per-node: expected a number of GiB >= 0"),
        (["--gpu-system", SYSTEM, "--engine", "vllm", "--layerwise"], "--layerwise"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, fragment):
    done = plan_run(*args)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("kvlab plan: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert fragment in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("keywords", "fragment"),
    [
        ({"gpu_system": "no_such_gpu", "engine": "vllm"}, "--gpu-system: 'no_such_gpu' is not a system"),
        ({"gpu_system": SYSTEM}, "give --engine too"),
        ({"cpu_gib": 1, "cpu_gib_per_node": 8}, "argument --cpu-gib-per-node: not allowed with argument --cpu-gib"),
        ({"efficiency": 0.5}, "argument --efficiency: prices the TTFT, which takes --gpu-system"),
        ({"gpu_system": SYSTEM, "engine": "vllm", "efficiency": 2}, "argument --efficiency: expected a fraction"),
    ],
)
def test_the_api_refuses_the_same(keywords, fragment):
    with pytest.raises(api.SettingError, match=fragment.replace("(", r"\(")):
        api.plan(**KEYWORDS, **keywords)
