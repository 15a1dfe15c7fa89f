"""The planner's part of the pipeline: config sections ``mrc`` and ``plans`` (schema and cross-field checks), the
targets and command lines kvlab/workflow/ (paths.py, commands.py) makes of them, the committed curves and plans they
reproduce, and the Snakemake rules (rules/planner.smk) on a copy of the project."""

import csv
import itertools
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
import yaml
from conftest import BIN, ROOT, SCHEMA, kvlab, load_config, project_files
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from kvlab.cli import mrc as mrc_cli
from kvlab.cli import plan as plan_cli
from kvlab.cli.flags import make_workload
from kvlab.workflow import checks, commands, paths

pytestmark = pytest.mark.pipeline

MRC = ROOT / "results" / "mrc"
PLAN = ROOT / "results" / "plan"
QWEN_1_5B = "models/Qwen2.5-1.5B-Instruct/config.json"
QWEN_7B = "models/Qwen2.5-7B-Instruct/config.json"  # 4 KV heads, 28 attention heads
LLAMA_8B = "models/Llama-3.1-8B-Instruct/config.json"  # 8 KV heads, 32 attention heads
TRACE = "data/traces/mooncake/conversation_trace.jsonl.gz"  # a shipped trace: config inputs must exist
MOONCAKE = {"source": "mooncake", "trace": TRACE, "rooms": {"block_tokens": [512]}}


@pytest.fixture(autouse=True)
def at_root(monkeypatch):
    """check_config and `kvlab plan` read a plan's model_config relative to the working folder, as Snakemake does."""
    monkeypatch.chdir(ROOT)


def checked(config):
    """``config`` after the schema and the cross-field checks (raises what they raise)."""
    validate(config, str(SCHEMA))
    checks.check_config(config)
    return config


def read_json(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_curve(path):
    """A curve CSV as (header, rows of ints, token_hit_ratio column)."""
    with open(path, newline="", encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    assert header[-1] == "token_hit_ratio"
    return header, [[int(value) for value in row[:-1]] for row in rows], [float(row[-1]) for row in rows]


def absent(taken, start, step=1):
    """The first of ``start``, ``start + step``, ... that ``taken`` does not hold: a value a test adds to a grid
    (config.yaml may hold any value already)."""
    return next(value for value in itertools.count(start, step) if value not in taken)


def every_grid(config, key):
    """Every value of the curves' grid ``key`` (block_tokens or gpu_tokens): the mrc section's, and those of the
    mrc workloads with rooms of their own."""
    values = set(config["mrc"][key])
    for workload in config["mrc"]["workloads"]:
        values |= set(config["replay"]["workloads"][workload].get("rooms", {}).get(key, []))
    return values


def new_block(config):
    """A block size no curve has yet: a multiple of 512, so that a Mooncake trace (512-token hash blocks) that
    takes the mrc section's block sizes can be cut into it too."""
    return absent(every_grid(config, "block_tokens"), 512, 512)


def new_gpu_room(config):
    """A GPU room no curve has yet, past the mrc section's largest."""
    return absent(every_grid(config, "gpu_tokens"), max(config["mrc"]["gpu_tokens"], default=0) + 1)


def test_the_values_the_append_tests_add_are_new_and_valid():
    """What the append tests add is absent from the config as it is (a user may hold any value already: "has
    non-unique elements") and makes a config that passes every check."""
    config = load_config()
    block, room = new_block(config), new_gpu_room(config)
    assert block not in every_grid(config, "block_tokens") and room not in every_grid(config, "gpu_tokens")
    config["mrc"]["block_tokens"].append(block)
    config["mrc"]["gpu_tokens"].append(room)
    validate(config, str(SCHEMA))
    checks.check_config(config)


def other_ratio(ratio):
    """A target hit ratio other than ``ratio`` (which may be None: no target)."""
    return next(value for value in (0.9, 0.8) if value != ratio)


def step_value(rows, column, room):
    """The curve's ``column`` at ``room``: the row of the largest capacity <= room (a step function)."""
    return [row for row in rows if row[0] <= room][-1][column]


# --- the committed config ------------------------------------------------------------------------------------------


def test_committed_config_has_the_lab_curves_and_plan(config):
    checked(config)
    assert {"lab", "long_doc_qa"} <= set(config["mrc"]["workloads"])
    assert {256, 5011} <= set(config["mrc"]["block_tokens"]) and 21520 in config["mrc"]["gpu_tokens"]
    lab = config["plans"]["lab"]
    assert (lab["workload"], lab["model_config"], lab["chunk_tokens"], lab["gpu_tokens"], lab["cpu_gib"]) == (
        "lab",
        QWEN_1_5B,
        256,
        21520,
        1.5,
    )


# --- targets -------------------------------------------------------------------------------------------------------


def expected_curves(workloads, blocks, gpus):
    paths = []
    for workload in workloads:
        for block in blocks:
            paths += [f"results/mrc/{workload}/block{block}-gpu.{suffix}" for suffix in ("csv", "json")]
            for gpu in gpus:
                paths += [f"results/mrc/{workload}/block{block}-cpu-at-gpu{gpu}.{suffix}" for suffix in ("csv", "json")]
    return paths


def grid_of(config, workload):
    """A workload's curve grid: its own ``rooms`` in ``replay.workloads`` (a trace's scale), else the mrc section's."""
    rooms = config["replay"]["workloads"][workload].get("rooms", {})
    return [rooms.get(key, config["mrc"][key]) for key in ("block_tokens", "gpu_tokens")]


def configured_curves(config):
    """The curves config.yaml asks for, workload by workload, each over its own grid."""
    return [
        path
        for workload in config["mrc"]["workloads"]
        for path in expected_curves([workload], *grid_of(config, workload))
    ]


def test_mrc_targets_are_workloads_by_blocks_by_tiers_by_csv_and_json(config):
    spec = config["mrc"]
    targets = paths.mrc_targets(config)
    assert targets == configured_curves(config)
    grids = [grid_of(config, workload) for workload in spec["workloads"]]
    assert len(targets) == len(set(targets)) == sum(len(blocks) * (1 + len(gpus)) * 2 for blocks, gpus in grids)
    assert "conversation" in spec["workloads"] and grid_of(config, "conversation") != [
        spec["block_tokens"],
        spec["gpu_tokens"],
    ]  # a trace's own rooms replace the section's grid


def test_mrc_targets_follow_every_grid(config):
    config["mrc"] = {"workloads": ["long_doc_qa"], "block_tokens": [16, 256, 5011], "gpu_tokens": [0, 21520, 45000]}
    targets = paths.mrc_targets(config)
    assert targets == expected_curves(["long_doc_qa"], [16, 256, 5011], [0, 21520, 45000])
    assert len(targets) == 1 * 3 * 4 * 2
    config["mrc"]["workloads"] = []
    assert paths.mrc_targets(config) == []


def test_all_targets_include_every_curve_and_plan(config):
    targets = paths.all_targets(config)
    assert len(targets) == len(set(targets))
    curves = configured_curves(config)
    plans = [f"results/plan/{name}.json" for name in config["plans"]]
    assert set(curves) | set(plans) <= set(targets)
    planner = [target for target in targets if target.startswith(("results/mrc/", "results/plan/"))]
    assert sorted(planner) == sorted(curves + plans)
    extra = next(f"extra{number}" for number in itertools.count() if f"extra{number}" not in config["plans"])
    assert f"results/plan/{extra}.json" not in targets
    config["plans"][extra] = dict(config["plans"]["lab"])
    assert f"results/plan/{extra}.json" in paths.all_targets(config)


def test_committed_planner_artifacts_are_exactly_the_targets(config):
    committed = [name for name in project_files() if name.startswith(("results/mrc/", "results/plan/"))]
    expected = configured_curves(config)
    assert committed == sorted(expected + [f"results/plan/{name}.json" for name in config["plans"]])


# --- command lines -------------------------------------------------------------------------------------------------


def parse_mrc(args):
    return mrc_cli.build_parser("kvlab mrc").parse_args(shlex.split(args))


def parse_plan(args):
    return plan_cli.build_parser("kvlab plan").parse_args(shlex.split(args))


def test_mrc_args_carry_the_workload_the_block_and_the_tier(config):
    for name, spec in config["replay"]["workloads"].items():
        blocks, gpus = grid_of(config, name)
        gpu = parse_mrc(commands.job_args(config, "mrc_gpu", workload=name, block_tokens=str(blocks[0])))
        cpu = parse_mrc(
            commands.job_args(
                config,
                "mrc_cpu" if str(gpus[0]) is not None else "mrc_gpu",
                workload=name,
                block_tokens=str(blocks[-1]),
                gpu_tokens=str(gpus[0]),
            )
        )
        assert (gpu.workload, gpu.block_tokens, gpu.gpu_tokens) == (spec["source"], blocks[0], None)
        assert (cpu.workload, cpu.block_tokens, cpu.gpu_tokens) == (spec["source"], blocks[-1], gpus[0])
        for args in (gpu, cpu):
            assert (args.partial_blocks, args.eviction_order) == ("drop", "tail-first")
            assert args.target_hit_ratio == config["mrc"]["target_hit_ratio"]
            assert args.curve is None  # the rule adds its own
            settings = {key: value for key, value in spec.items() if key not in ("source", "rooms")}
            if "trace" in settings:  # a trace is described by its file name, never its path
                settings["trace"] = Path(settings["trace"]).name
            described = make_workload(args, args.block_tokens).describe()
            assert {key: described[key] for key in settings} == settings


def test_mrc_args_of_one_curve_do_not_depend_on_the_rest_of_the_grid(config):
    blocks, gpus = grid_of(config, "lab")
    before = commands.job_args(
        config,
        "mrc_cpu" if gpus[0] is not None else "mrc_gpu",
        workload="lab",
        block_tokens=blocks[0],
        gpu_tokens=gpus[0],
    )
    config["mrc"]["block_tokens"].append(new_block(config))
    config["mrc"]["gpu_tokens"].append(new_gpu_room(config))
    others = [name for name in config["mrc"]["workloads"] if name != "lab"]
    assert others  # one to take away
    config["mrc"]["workloads"].remove(others[0])
    checked(config)  # a config the pipeline would run
    assert (
        commands.job_args(
            config,
            "mrc_cpu" if gpus[0] is not None else "mrc_gpu",
            workload="lab",
            block_tokens=blocks[0],
            gpu_tokens=gpus[0],
        )
        == before
    )


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ({"partial_blocks": "keep"}, ("keep", "tail-first")),
        ({"eviction_order": "head-first"}, ("drop", "head-first")),
        ({"partial_blocks": "keep", "eviction_order": "head-first"}, ("keep", "head-first")),
    ],
)
def test_a_workload_override_of_the_block_rules_reaches_its_curves_and_plans(config, override, expected):
    config["replay"]["workloads"]["lab"].update(override)
    config["policies"]["evictions"] = ["lru", "fifo"]  # arc and opt need partial_blocks drop
    checked(config)
    for args in (
        parse_mrc(commands.job_args(config, "mrc_gpu", workload="lab", block_tokens=256)),
        parse_mrc(
            commands.job_args(
                config,
                "mrc_cpu" if 21520 != None else "mrc_gpu",
                workload="lab",
                block_tokens=256,
                gpu_tokens=21520,
            )
        ),
        parse_plan(commands.job_args(config, "plan", plan="lab")),
    ):
        assert (args.partial_blocks, args.eviction_order) == expected
    args = parse_mrc(
        commands.job_args(config, "mrc_gpu", workload="long_doc_qa", block_tokens=256)
    )  # another workload keeps the section's
    assert (args.partial_blocks, args.eviction_order) == ("drop", "tail-first")


def test_the_replay_sections_block_rules_reach_every_workload(config):
    config["replay"]["partial_blocks"] = "keep"
    config["replay"]["eviction_order"] = "head-first"
    config["replay"]["workloads"]["long_doc_qa"]["partial_blocks"] = "drop"
    for name, expected in {"lab": ("keep", "head-first"), "long_doc_qa": ("drop", "head-first")}.items():
        args = parse_mrc(commands.job_args(config, "mrc_gpu", workload=name, block_tokens=5011))
        assert (args.partial_blocks, args.eviction_order) == expected
    args = parse_plan(commands.job_args(config, "plan", plan="lab"))
    assert (args.partial_blocks, args.eviction_order) == ("keep", "head-first")


def test_the_replays_other_cache_settings_do_not_reach_the_curves_or_plans(config):
    """Curves are LRU write-through; a plan names its own write policy: the workload's other settings stay out."""
    config["replay"]["workloads"]["lab"].update(write_policy="write-back", gpu_eviction="fifo", cpu_eviction="lfu")
    for args in (
        commands.job_args(
            config, "mrc_cpu" if 21520 != None else "mrc_gpu", workload="lab", block_tokens=256, gpu_tokens=21520
        ),
        commands.job_args(config, "plan", plan="lab"),
    ):
        assert "write-back" not in args and "fifo" not in args and "lfu" not in args and "eviction " not in args
    assert (
        parse_plan(commands.job_args(config, "plan", plan="lab")).write_policy == config["plans"]["lab"]["write_policy"]
    )


def test_target_hit_ratio_absent_means_no_flag(config):
    del config["mrc"]["target_hit_ratio"]
    for gpu in (None, 21520):
        args = commands.job_args(
            config, "mrc_cpu" if gpu is not None else "mrc_gpu", workload="lab", block_tokens=256, gpu_tokens=gpu
        )
        assert "--target-hit-ratio" not in args
        assert parse_mrc(args).target_hit_ratio is None
    config["mrc"]["target_hit_ratio"] = 0.25
    assert parse_mrc(commands.job_args(config, "mrc_gpu", workload="lab", block_tokens=256)).target_hit_ratio == 0.25
    del config["plans"]["lab"]["target_hit_ratio"]
    args = commands.job_args(config, "plan", plan="lab")
    assert "--target-hit-ratio" not in args and parse_plan(args).target_hit_ratio is None


def test_plan_args_carry_the_workload_the_model_and_the_rooms(config):
    for name, spec in config["plans"].items():
        args = parse_plan(commands.job_args(config, "plan", plan=name))
        workload = config["replay"]["workloads"][spec["workload"]]
        assert args.workload == workload["source"]
        assert (args.model_config, args.tp, args.chunk_tokens) == (
            spec["model_config"],
            spec["tp"],
            spec["chunk_tokens"],
        )
        assert (args.gpu_tokens, args.gpu_gib) == (spec["gpu_tokens"], None)
        assert args.cpu_gib == [Decimal(str(spec["cpu_gib"]))]  # a list of budgets: one here
        assert args.write_policy == spec["write_policy"]
        assert args.target_hit_ratio == spec.get("target_hit_ratio")
        described = make_workload(args, args.chunk_tokens).describe()
        assert {key: described[key] for key in ("docs", "tokens", "passes")} == {
            key: workload[key] for key in ("docs", "tokens", "passes")
        }


def test_plan_args_gpu_gib_instead_of_gpu_tokens(config):
    spec = config["plans"]["lab"]
    del spec["gpu_tokens"]
    spec["gpu_gib"] = 0.75
    checked(config)
    line = commands.job_args(config, "plan", plan="lab")
    assert "--gpu-gib 0.75" in line and "--gpu-tokens" not in line
    args = parse_plan(line)
    assert (args.gpu_gib, args.gpu_tokens) == (Decimal("0.75"), None)


def test_plan_args_leave_out_what_the_plan_does_not_set(config):
    config["plans"]["bare"] = {"workload": "long_doc_qa", "model_config": QWEN_7B, "gpu_tokens": 1000, "cpu_gib": 2}
    line = commands.job_args(checked(config), "plan", plan="bare")
    for flag in ("--tp", "--chunk-tokens", "--write-policy", "--target-hit-ratio", "--gpu-gib"):
        assert flag not in line
    args = parse_plan(line)
    assert (args.workload, args.model_config, args.gpu_tokens, args.cpu_gib) == ("long_doc_qa", QWEN_7B, 1000, [2])
    assert (args.tp, args.chunk_tokens, args.write_policy) == (1, None, "write-through")  # `kvlab plan`'s defaults
    assert paths.plan_model(config, "bare") == QWEN_7B


def test_plan_args_quote_a_model_path(config):
    config["plans"]["lab"]["model_config"] = "my models/it's/config.json"
    assert parse_plan(commands.job_args(config, "plan", plan="lab")).model_config == "my models/it's/config.json"


# --- the command lines reproduce the committed artifacts -----------------------------------------------------------


def run_main(command, argv):
    """``kvlab COMMAND ARGV`` in this process, which must succeed; its stdout."""
    done = kvlab(command, *argv)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


CURVES = [
    (workload, block, gpu)
    for workload in load_config()["mrc"]["workloads"]
    for block in grid_of(load_config(), workload)[0]
    for gpu in (None, *grid_of(load_config(), workload)[1])
]


@pytest.mark.parametrize(("workload", "block", "gpu"), CURVES)
def test_mrc_args_reproduce_the_committed_curve_and_cliffs(config, tmp_path, workload, block, gpu):
    curve = tmp_path / "curve.csv"
    argv = [
        *shlex.split(
            commands.job_args(
                config,
                "mrc_cpu" if gpu is not None else "mrc_gpu",
                workload=workload,
                block_tokens=block,
                gpu_tokens=gpu,
            )
        ),
        "--curve",
        str(curve),
    ]
    cliffs = run_main("mrc", argv)
    assert cliffs == (ROOT / paths.mrc_path(workload, block, gpu, "json")).read_text(encoding="utf-8")
    assert curve.read_bytes() == (ROOT / paths.mrc_path(workload, block, gpu)).read_bytes()


def test_the_lab_curve_command_line_reproduces_it_as_a_script(config, tmp_path):
    """As the rule runs it: ``python -m kvlab mrc ARGS --curve FILE`` from the repository root."""
    curve = tmp_path / "curve.csv"
    args = [
        *shlex.split(
            commands.job_args(
                config,
                "mrc_cpu" if 21520 != None else "mrc_gpu",
                workload="lab",
                block_tokens=5011,
                gpu_tokens=21520,
            )
        ),
        "--curve",
        str(curve),
    ]
    done = subprocess.run([sys.executable, "-m", "kvlab", "mrc", *args], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (MRC / "lab" / "block5011-cpu-at-gpu21520.json").read_text(encoding="utf-8")
    assert curve.read_bytes() == (MRC / "lab" / "block5011-cpu-at-gpu21520.csv").read_bytes()


@pytest.mark.parametrize("name", sorted(load_config()["plans"]))
def test_plan_args_reproduce_the_committed_plan(config, name):
    assert run_main("plan", shlex.split(commands.job_args(config, "plan", plan=name))) == (
        PLAN / f"{name}.json"
    ).read_text(encoding="utf-8")


def test_the_lab_plan_command_line_reproduces_it_as_a_script(config):
    args = shlex.split(commands.job_args(config, "plan", plan="lab"))
    done = subprocess.run([sys.executable, "-m", "kvlab", "plan", *args], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (PLAN / "lab.json").read_text(encoding="utf-8")


# --- what the committed artifacts say ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(MRC.glob("*/*.json")), ids=lambda path: f"{path.parent.name}/{path.name}")
def test_each_curves_cliffs_agree_with_its_csv(config, path):
    cliffs = read_json(path)
    header, rows, ratios = read_curve(path.with_suffix(".csv"))
    match = re.fullmatch(r"block(\d+)-(gpu|cpu-at-gpu(\d+))", path.stem)
    tier = "gpu" if match[3] is None else "cpu"
    assert cliffs["cache"]["tier"] == tier and cliffs["cache"]["block_tokens"] == int(match[1])
    assert cliffs["cache"].get("gpu_tokens") == (None if match[3] is None else int(match[3]))
    rounds = [entry["round"] for entry in cliffs["rounds"]]
    assert header == [f"{tier}_tokens", *(f"{name}_{tier}_hit_tokens" for name in rounds), f"{tier}_hit_tokens"] + [
        "token_hit_ratio"
    ]
    rooms = [row[0] for row in rows]
    assert rooms[0] == 0 and rooms == sorted(set(rooms))
    assert all(row[-1] == sum(row[1:-1]) for row in rows)
    inputs, base = cliffs["input_tokens"], cliffs["served_in_front_tokens"]
    assert inputs == sum(entry["input_tokens"] for entry in cliffs["rounds"])
    assert base == sum(entry["served_in_front_tokens"] for entry in cliffs["rounds"])
    assert ratios == [round((row[-1] + base) / inputs, 6) for row in rows]

    def first_room(column, value):
        return next((row[0] for row in rows if row[column] >= value), None)  # None: no room reaches it

    assert cliffs["reusable_tokens"] == rows[-1][-1]
    assert cliffs["tokens_for_full_reuse"] == first_room(-1, rows[-1][-1])
    assert cliffs["max_token_hit_ratio"] == ratios[-1]
    for index, entry in enumerate(cliffs["rounds"], start=1):
        assert entry["reusable_tokens"] == rows[-1][index]
        assert entry["tokens_for_full_reuse"] == first_room(index, rows[-1][index])
    target = cliffs["target_hit_ratio"]
    assert target == config["mrc"]["target_hit_ratio"]
    need = math.ceil(Fraction(str(target)) * inputs) - base
    assert cliffs["tokens_for_target"] == first_room(-1, need)


def same_lab(config, sweep):
    """The replay's lab workload is the scenario the sweep reads (its first passes the same)."""
    workload, lab = config["replay"]["workloads"]["lab"], config["scenario"]
    assert (workload["docs"], workload["tokens"]) == (lab["docs"], lab["tokens"])
    assert workload["passes"][: len(sweep["passes"])] == sweep["passes"]


def test_the_lab_gpu_curve_has_the_gpu_cliff_of_the_sweep(config):
    """results/cliff.json (pass 2 hits per GPU room, no CPU) is the lab's GPU curve read at its grid."""
    sweep, lab = config["sweeps"]["cliff"], config["scenario"]
    same_lab(config, sweep)
    assert (sweep["vary"], sweep["fixed"], sweep["record"], sweep["passes"]) == (
        "gpu",
        {"cpu": 0},
        {"pass": 2, "value": "hits"},
        ["fwd", "fwd"],
    )
    hits = {int(room): value for room, value in read_json(ROOT / "results" / "cliff.json").items()}
    cliff = min(room for room, value in hits.items() if value == lab["docs"])
    assert cliff == 50110 and max(value for room, value in hits.items() if room < cliff) == 0
    cliffs = read_json(MRC / "lab" / "block5011-gpu.json")
    assert cliffs["tokens_for_full_reuse"] == cliff == 50110
    assert cliffs["rounds"][1]["round"] == "pass2" and cliffs["rounds"][1]["tokens_for_full_reuse"] == cliff
    header, rows, _ = read_curve(MRC / "lab" / "block5011-gpu.csv")
    column = header.index("pass2_gpu_hit_tokens")
    for room, value in hits.items():
        assert step_value(rows, column, room) == value * lab["tokens"], room


def test_the_lab_cpu_curve_has_the_cpu_cliff_of_the_sweep(config):
    """results/cpu_cliff.json (pass 2 misses per CPU room at the lab's GPU room) is the CPU curve read at its grid."""
    sweep, lab = config["sweeps"]["cpu_cliff"], config["scenario"]
    same_lab(config, sweep)
    assert (sweep["vary"], sweep["fixed"], sweep["record"]) == ("cpu", {"gpu": 21520}, {"pass": 2, "value": "misses"})
    misses = {int(room): value for room, value in read_json(ROOT / "results" / "cpu_cliff.json").items()}
    cliff = min(room for room, value in misses.items() if value == 0)
    assert cliff == 50110 and min(value for room, value in misses.items() if room < cliff) == lab["docs"]
    cliffs = read_json(MRC / "lab" / "block5011-cpu-at-gpu21520.json")
    assert cliffs["cache"]["gpu_tokens"] == sweep["fixed"]["gpu"]
    assert cliffs["tokens_for_full_reuse"] == cliff == 50110
    header, rows, _ = read_curve(MRC / "lab" / "block5011-cpu-at-gpu21520.csv")
    column = header.index("pass2_cpu_hit_tokens")
    from_gpu = cliffs["rounds"][1]["served_in_front_tokens"]
    for room, value in misses.items():
        assert from_gpu + step_value(rows, column, room) == (lab["docs"] - value) * lab["tokens"], room


def test_the_lab_plan_is_the_handouts_budget(config):
    result = read_json(PLAN / "lab.json")
    shape = read_json(ROOT / QWEN_1_5B)
    per_token = (
        shape["num_hidden_layers"]
        * shape["num_key_value_heads"]
        * (shape["hidden_size"] // shape["num_attention_heads"])
        * 2  # K and V
        * 2  # bfloat16
    )
    assert per_token == 28672 == result["model"]["bytes_per_token"]
    cache = result["cache"]
    assert cache["cpu_tokens"] == int(Decimal("1.5") * 2**30) // per_token == 56173
    assert (cache["gpu_tokens"], cache["chunk_tokens"], cache["cpu_gib"]) == (21520, 256, 1.5)
    curve = read_json(MRC / "lab" / "block256-cpu-at-gpu21520.json")
    assert result["cpu_tokens_for_full_reuse"] == curve["tokens_for_full_reuse"] == 48640
    assert result["cpu_tokens_for_target"] == curve["tokens_for_target"]
    assert result["gpu_hit_tokens"] == curve["served_in_front_tokens"]
    assert result["max_token_hit_ratio"] == curve["max_token_hit_ratio"]
    header, rows, _ = read_curve(MRC / "lab" / "block256-cpu-at-gpu21520.csv")
    assert result["cpu_hit_tokens"] == step_value(rows, -1, cache["cpu_tokens"])
    for index, entry in enumerate(result["rounds"], start=1):
        assert entry["cpu_hit_tokens"] == step_value(rows, index, cache["cpu_tokens"])
    assert result["computed_tokens"] == result["input_tokens"] - result["gpu_hit_tokens"] - result["cpu_hit_tokens"]


def test_the_lab_documents_plan_reproduces_the_offload_run(config):
    """Whole documents as chunks: the plan's per-pass tokens are results/offload.json's documents."""
    result, offload = read_json(PLAN / "lab_documents.json"), read_json(ROOT / "results" / "offload.json")
    tokens = config["scenario"]["tokens"]
    assert result["cache"]["chunk_tokens"] == tokens
    assert len(result["rounds"]) == len(offload["passes"]) == 3
    for entry, run in zip(result["rounds"], offload["passes"], strict=True):
        assert (entry["gpu_hit_tokens"], entry["cpu_hit_tokens"], entry["computed_tokens"]) == (
            run["gpu_hits"] * tokens,
            run["cpu_hits"] * tokens,
            run["misses"] * tokens,
        )
    assert (
        result["cpu_tokens_for_full_reuse"]
        == read_json(MRC / "lab" / "block5011-cpu-at-gpu21520.json")["tokens_for_full_reuse"]
    )


# --- the schema ----------------------------------------------------------------------------------------------------


def edit(*steps):
    """A mutation of the config: each step (path, value) sets it, (path,) deletes it."""

    def mutate(config):
        for step in steps:
            *parents, last = step[0]
            node = config
            for key in parents:
                node = node[key]
            if len(step) == 1:
                del node[last]
            else:
                node[last] = step[1]

    return mutate


SCHEMA_REJECTS = {
    "plan with gpu_tokens and gpu_gib": edit((["plans", "lab", "gpu_gib"], 1.0)),
    "plan with neither gpu_tokens nor gpu_gib": edit((["plans", "lab", "gpu_tokens"],)),
    "negative cpu_gib": edit((["plans", "lab", "cpu_gib"], -1)),
    "cpu_gib as text": edit((["plans", "lab", "cpu_gib"], "1.5 GB")),
    "plan without cpu_gib": edit((["plans", "lab", "cpu_gib"],)),
    "plan without model_config": edit((["plans", "lab", "model_config"],)),
    "plan without workload": edit((["plans", "lab", "workload"],)),
    "empty model_config": edit((["plans", "lab", "model_config"], "")),
    "negative gpu_gib": edit((["plans", "lab", "gpu_tokens"],), (["plans", "lab", "gpu_gib"], -0.5)),
    "fractional gpu_tokens": edit((["plans", "lab", "gpu_tokens"], 21520.5)),
    "plan target_hit_ratio 1.5": edit((["plans", "lab", "target_hit_ratio"], 1.5)),
    "mrc target_hit_ratio 1.5": edit((["mrc", "target_hit_ratio"], 1.5)),
    "mrc target_hit_ratio negative": edit((["mrc", "target_hit_ratio"], -0.1)),
    "unknown key in mrc": edit((["mrc", "cpu_tokens"], [0])),
    "unknown key in a plan": edit((["plans", "lab", "gpus"], 2)),
    "tp 0": edit((["plans", "lab", "tp"], 0)),
    "fractional tp": edit((["plans", "lab", "tp"], 1.5)),
    "chunk_tokens 0": edit((["plans", "lab", "chunk_tokens"], 0)),
    "unknown plan write policy": edit((["plans", "lab", "write_policy"], "write-around")),
    "bad plan name": edit(
        (["plans", "Lab-2"], {"workload": "lab", "model_config": QWEN_1_5B, "gpu_tokens": 1, "cpu_gib": 1})
    ),
    "missing mrc section": edit((["mrc"],)),
    "missing plans section": edit((["plans"],)),
    "mrc without workloads": edit((["mrc", "workloads"],)),
    "mrc without block_tokens": edit((["mrc", "block_tokens"],)),
    "mrc without gpu_tokens": edit((["mrc", "gpu_tokens"],)),
    "mrc block 0": edit((["mrc", "block_tokens"], [0, 256])),
    "mrc empty block grid": edit((["mrc", "block_tokens"], [])),
    "mrc duplicate block": edit((["mrc", "block_tokens"], [256, 256])),
    "mrc negative gpu room": edit((["mrc", "gpu_tokens"], [-1])),
    "mrc duplicate workload": edit((["mrc", "workloads"], ["lab", "lab"])),
    "mrc workloads as a string": edit((["mrc", "workloads"], "lab")),
}


@pytest.mark.parametrize("mutate", SCHEMA_REJECTS.values(), ids=SCHEMA_REJECTS.keys())
def test_schema_rejects(config, mutate):
    validate(config, str(SCHEMA))  # the committed config passes: the mutation alone fails it
    mutate(config)
    with pytest.raises(WorkflowError):
        validate(config, str(SCHEMA))


SCHEMA_ACCEPTS = {
    "plan with gpu_gib only": edit((["plans", "lab", "gpu_tokens"],), (["plans", "lab", "gpu_gib"], 0.5)),
    "plan with only the required keys": edit(
        (["plans", "lab"], {"workload": "lab", "model_config": QWEN_1_5B, "gpu_tokens": 0, "cpu_gib": 0})
    ),
    "no plans": edit((["plans"], {}), (["ttft", "budgets"],)),
    "mrc without target": edit((["mrc", "target_hit_ratio"],)),
    "mrc target 1": edit((["mrc", "target_hit_ratio"], 1)),
    "plan target 0": edit((["plans", "lab", "target_hit_ratio"], 0)),
    "integer cpu_gib": edit((["plans", "lab", "cpu_gib"], 2)),
    "tp 2": edit((["plans", "lab", "tp"], 2)),
}


@pytest.mark.parametrize("mutate", SCHEMA_ACCEPTS.values(), ids=SCHEMA_ACCEPTS.keys())
def test_schema_and_checks_accept(config, mutate):
    mutate(config)
    checked(config)


# --- cross-field checks --------------------------------------------------------------------------------------------


def broken_model(tmp_path, text):
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    return str(path)


CROSS_FIELD = {
    "mrc workload not replayed": (
        edit((["mrc", "workloads"], ["lab", "sharegpt"])),
        "config: mrc.workloads names 'sharegpt', which is not in replay.workloads",
    ),
    "plan workload not replayed": (
        edit((["plans", "lab", "workload"], "sharegpt")),
        "config: plans.lab.workload names 'sharegpt', which is not in replay.workloads",
    ),
    "plan model_config missing": (
        edit((["plans", "lab", "model_config"], "models/Nope/config.json")),
        "config: plans.lab.model_config: models/Nope/config.json: cannot read",
    ),
    "tp does not split the KV heads": (
        edit((["plans", "lab", "model_config"], QWEN_7B), (["plans", "lab", "tp"], 3)),
        "config: plans.lab.tp: 4 KV heads do not split over tp 3",
    ),
    "tp 3 over 2 KV heads": (
        edit((["plans", "lab", "tp"], 3)),
        "config: plans.lab.tp: 2 KV heads do not split over tp 3",
    ),
    # A trace without block sizes of its own takes the mrc section's (and the replay section's: all of 512 here).
    "mooncake curve with a block not a multiple of 512": (
        edit(
            (["replay", "rooms", "block_tokens"], [512]),
            (["replay", "workloads", "trace"], {"source": "mooncake", "trace": TRACE}),
            (["mrc", "workloads"], ["lab", "trace"]),
        ),
        "config: mrc.block_tokens: a Mooncake trace's blocks must be multiples of 512, got 256",
    ),
    "mooncake curve, second block size": (
        edit(
            (["replay", "rooms", "block_tokens"], [512]),
            (["replay", "workloads", "trace"], {"source": "mooncake", "trace": TRACE}),
            (["mrc", "workloads"], ["trace"]),
            (["mrc", "block_tokens"], [512, 1000]),
        ),
        "config: mrc.block_tokens: a Mooncake trace's blocks must be multiples of 512, got 1000",
    ),
    "a trace that is not there": (
        edit((["replay", "workloads", "trace"], {**MOONCAKE, "trace": "traces/none.jsonl"})),
        "config: replay.workloads.trace.trace: traces/none.jsonl: no such file",
    ),
    "mooncake plan with a chunk not a multiple of 512": (
        edit(
            (["replay", "workloads", "trace"], MOONCAKE),
            (["plans", "lab", "workload"], "trace"),
            (["plans", "lab", "chunk_tokens"], 768),
        ),
        "config: plans.lab.chunk_tokens: a Mooncake trace's blocks must be multiples of 512, got 768",
    ),
}


@pytest.mark.parametrize(("mutate", "message"), CROSS_FIELD.values(), ids=CROSS_FIELD.keys())
def test_cross_field_rules(config, mutate, message):
    mutate(config)
    validate(config, str(SCHEMA))  # the schema alone lets these through
    with pytest.raises(checks.ConfigError) as raised:
        checks.check_config(config)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "malformed JSON"),
        ('{"num_hidden_layers": NaN, "num_attention_heads": 12}', "num_hidden_layers must be a whole number"),
        ('{"num_hidden_layers": 1e999, "num_attention_heads": 12}', "num_hidden_layers must be a whole number"),
        ("[]", "expected a JSON object"),
        ('{"num_hidden_layers": 28}', "missing"),
        (
            '{"num_hidden_layers": 28, "num_attention_heads": 12, "head_dim": 128, "torch_dtype": "int3"}',
            "torch_dtype 'int3'",
        ),
    ],
)
def test_a_malformed_model_config_is_named(config, tmp_path, text, problem):
    path = broken_model(tmp_path, text)
    config["plans"]["lab"]["model_config"] = path
    validate(config, str(SCHEMA))
    with pytest.raises(checks.ConfigError) as raised:
        checks.check_config(config)
    message = str(raised.value)
    assert message.startswith(f"config: plans.lab.model_config: {path}: ") and problem in message
    assert "\n" not in message


def test_tp_that_splits_the_kv_heads_passes(config):
    config["plans"]["lab"]["model_config"] = LLAMA_8B
    for tp in (1, 2, 4, 8, 16):  # 16: each KV head on two GPUs (32 attention heads split over 16)
        config["plans"]["lab"]["tp"] = tp
        checked(config)


def test_tp_that_does_not_split_the_attention_heads_is_refused(config):
    """vLLM refuses it (``ModelConfig.verify_with_parallel_config``): 28 heads over tp 8."""
    config["plans"]["lab"]["model_config"] = QWEN_7B
    config["plans"]["lab"]["tp"] = 8
    with pytest.raises(checks.ConfigError, match="plans.lab.tp: 28 attention heads do not split over tp 8"):
        checks.check_config(config)


def test_mooncake_block_sizes_that_are_multiples_of_512_pass(config):
    config["replay"]["workloads"]["trace"] = MOONCAKE
    config["mrc"]["workloads"] = ["lab", "trace"]
    config["mrc"]["block_tokens"] = [512, 1024, 5120]
    config["plots"]["mrc_block_tokens"] = 512
    config["plans"]["trace"] = {
        "workload": "trace",
        "model_config": QWEN_1_5B,
        "chunk_tokens": 1024,
        "gpu_tokens": 100000,
        "cpu_gib": 1,
    }
    checked(config)
    assert commands.job_args(config, "mrc_gpu", workload="trace", block_tokens=512).startswith(
        f"--workload mooncake --trace {TRACE} "
    )
    assert "results/plan/trace.json" in paths.all_targets(config)


def test_a_mooncake_plan_may_leave_the_chunk_to_the_trace(config, tmp_path):
    config["replay"]["workloads"]["trace"] = MOONCAKE
    config["plans"]["trace"] = {"workload": "trace", "model_config": QWEN_1_5B, "gpu_tokens": 100000, "cpu_gib": 1}
    args = parse_plan(commands.job_args(config, "plan", plan="trace"))
    assert make_workload(args, args.chunk_tokens).block_tokens == 512  # what `kvlab plan` would use
    checked(config)


# --- Snakemake on a copy -------------------------------------------------------------------------------------------


def snakemake(folder, *args):
    return subprocess.run([str(BIN / "snakemake"), "--cores", "2", *args], cwd=folder, capture_output=True, text=True)


def job_counts(output):
    """``{rule: jobs}`` from Snakemake's "Job stats" table (empty when there is nothing to do)."""
    table = output.split("Job stats:", 1)[1].split("\n\n", 1)[0] if "Job stats:" in output else ""
    return {rule: int(count) for rule, count in re.findall(r"^(\w+)\s+(\d+)$", table, flags=re.MULTILINE)}


def rule_outputs(output, rule):
    """The output files of every job of ``rule`` in a dry run's listing (without the flags Snakemake shows beside
    them: ``results/x.json (update)``)."""
    jobs = re.findall(rf"^rule {rule}:\n((?:    .*\n)+)", output, flags=re.MULTILINE)
    listed = [
        path for job in jobs for path in re.findall(r"^    output: (.*)$", job, flags=re.MULTILINE)[0].split(", ")
    ]
    return sorted(re.sub(r" \(\w+\)$", "", path) for path in listed)


@pytest.fixture(scope="module")
def planner_run(tmp_path_factory):
    """A copy of the project whose committed results are in place except the curves and plans, which Snakemake's
    default target then builds (so that their provenance is recorded, as in a regenerated copy)."""
    copy = tmp_path_factory.mktemp("kvlab-planner")
    results = []
    for name in project_files():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        if name.startswith(("results/mrc/", "results/plan/")):
            continue
        if name.startswith("results/"):
            results.append(copy / name)
            shutil.copyfile(ROOT / name, copy / name)
        else:
            shutil.copy2(ROOT / name, copy / name)  # keeps mtimes, so numba's cache beside the code stays valid
    for compiled in [*ROOT.glob("kvlab/**/__pycache__/*.nbi"), *ROOT.glob("kvlab/**/__pycache__/*.nbc")]:
        target = copy / compiled.relative_to(ROOT)
        target.parent.mkdir(exist_ok=True)
        shutil.copy2(compiled, target)
    # Snakemake writes the jobs' stamp files (work/stamps/) as it builds the DAG, in a dry run too: the stamps
    # first, then the results made newer than them and than the code, so that they are up to date (they carry no
    # provenance: only mtimes count). Not in the future: a job's output must not be older than its inputs.
    done = snakemake(copy, "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    newest = max(path.stat().st_mtime for path in copy.rglob("*") if path.is_file() and path not in results)
    while time.time() <= newest:  # a coarse file clock: strictly newer
        time.sleep(0.01)
    now = time.time()
    for path in results:
        os.utime(path, (now, now))
    done = snakemake(copy)
    assert done.returncode == 0, done.stdout + done.stderr
    return copy, done.stdout + done.stderr


def curve_plots(config):
    """The figures drawn from curves or plans (results/plots/mrc.png, the trace's figure)."""
    planner = ("results/mrc/", "results/plan/")
    return [name for name, inputs in paths.plot_inputs(config).items() if any(i.startswith(planner) for i in inputs)]


def test_snakemake_builds_only_the_missing_curves_and_plans(planner_run):
    _, output = planner_run
    config = load_config()
    plots = len(curve_plots(config))
    assert plots >= 1  # the curves' figure at least
    grids = [grid_of(config, workload) for workload in config["mrc"]["workloads"]]
    gpu_curves = sum(len(blocks) for blocks, _ in grids)
    cpu_curves = sum(len(blocks) * len(gpus) for blocks, gpus in grids)
    assert job_counts(output) == {
        "mrc_gpu": gpu_curves,
        "mrc_cpu": cpu_curves,
        "plan": len(config["plans"]),
        "plot": plots,
        "all": 1,
        "total": gpu_curves + cpu_curves + len(config["plans"]) + plots + 1,
    }


def test_snakemake_rules_reproduce_the_committed_curves_and_plans(planner_run):
    copy, _ = planner_run
    built = sorted(
        str(path.relative_to(copy))
        for folder in ("mrc", "plan")
        for path in (copy / "results" / folder).rglob("*")
        if path.is_file()  # no leftover .tmp either
    )
    committed = [name for name in project_files() if name.startswith(("results/mrc/", "results/plan/"))]
    assert built == committed
    stale = [name for name in committed if (copy / name).read_bytes() != (ROOT / name).read_bytes()]
    assert not stale


def extended(planner_run, tmp_path, change):
    """A copy of the built project whose config.yaml has ``change`` applied; the dry run's output."""
    copy = tmp_path / "copy"
    shutil.copytree(planner_run[0], copy)  # keeps mtimes and Snakemake's metadata
    config = yaml.safe_load((copy / "config.yaml").read_text(encoding="utf-8"))
    change(config)
    (copy / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    done = snakemake(copy, "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    return config, done.stdout + done.stderr


def test_nothing_to_do_after_the_build(planner_run, tmp_path):
    _, output = extended(planner_run, tmp_path, lambda config: None)
    assert "Nothing to be done" in output and job_counts(output) == {}


def rooms_of(config, workload):
    """A replay workload's own rooms (which replace the mrc section's grid for its curves)."""
    return config["replay"]["workloads"][workload].get("rooms", {})


def test_appending_a_block_size_runs_only_its_curves(planner_run, tmp_path):
    block = new_block(load_config())
    config, output = extended(planner_run, tmp_path, lambda config: config["mrc"]["block_tokens"].append(block))
    gpus = config["mrc"]["gpu_tokens"]
    workloads = [name for name in config["mrc"]["workloads"] if block in grid_of(config, name)[0]]
    own = [name for name in config["mrc"]["workloads"] if "block_tokens" in rooms_of(config, name)]
    assert not [name for name in own if block in grid_of(config, name)[0]]  # their own block sizes: no new curve
    assert sorted(workloads + own) == sorted(config["mrc"]["workloads"]) and grid_of(config, workloads[0])[1] == gpus
    assert job_counts(output) == {
        "mrc_gpu": len(workloads),
        "mrc_cpu": len(workloads) * len(gpus),
        "all": 1,
        "total": len(workloads) * (1 + len(gpus)) + 1,
    }
    assert rule_outputs(output, "mrc_gpu") == sorted(
        f"results/mrc/{workload}/block{block}-gpu.{suffix}" for workload in workloads for suffix in ("csv", "json")
    )
    assert rule_outputs(output, "mrc_cpu") == sorted(
        f"results/mrc/{workload}/block{block}-cpu-at-gpu{gpu}.{suffix}"
        for workload in workloads
        for gpu in gpus
        for suffix in ("csv", "json")
    )


def test_appending_a_gpu_room_runs_only_the_cpu_curves_at_it(planner_run, tmp_path):
    room = new_gpu_room(load_config())
    config, output = extended(planner_run, tmp_path, lambda config: config["mrc"]["gpu_tokens"].append(room))
    blocks = config["mrc"]["block_tokens"]
    workloads = [name for name in config["mrc"]["workloads"] if room in grid_of(config, name)[1]]
    own = [name for name in config["mrc"]["workloads"] if "gpu_tokens" in rooms_of(config, name)]
    assert not [name for name in own if room in grid_of(config, name)[1]]  # their own GPU rooms: no new curve
    assert sorted(workloads + own) == sorted(config["mrc"]["workloads"]) and grid_of(config, workloads[0])[0] == blocks
    assert job_counts(output) == {
        "mrc_cpu": len(workloads) * len(blocks),
        "all": 1,
        "total": len(workloads) * len(blocks) + 1,
    }
    assert rule_outputs(output, "mrc_cpu") == sorted(
        f"results/mrc/{workload}/block{block}-cpu-at-gpu{room}.{suffix}"
        for workload in workloads
        for block in blocks
        for suffix in ("csv", "json")
    )


def test_a_new_curve_target_reruns_every_curve_but_no_plan(planner_run, tmp_path):
    """The curves' command lines are in their stamp files (work/stamps/): a changed flag rewrites them and so
    reruns the curves, by file times alone."""
    target = other_ratio(load_config()["mrc"].get("target_hit_ratio"))
    config, output = extended(planner_run, tmp_path, lambda config: config["mrc"].update(target_hit_ratio=target))
    grids = [grid_of(config, workload) for workload in config["mrc"]["workloads"]]
    gpu_curves = sum(len(blocks) for blocks, _ in grids)
    cpu_curves = sum(len(blocks) * len(gpus) for blocks, gpus in grids)
    plots = len(curve_plots(config))  # every curve reruns: so does every figure of curves
    assert job_counts(output) == {
        "mrc_gpu": gpu_curves,
        "mrc_cpu": cpu_curves,
        "plot": plots,
        "all": 1,
        "total": gpu_curves + cpu_curves + plots + 1,
    }
    stamped = re.findall(r"reason: Updated input files: (work/stamps/\S+)$", output, flags=re.MULTILINE)
    assert len(stamped) == len(set(stamped)) == gpu_curves + cpu_curves
    assert all(re.fullmatch(r"work/stamps/mrc_(gpu|cpu)/[\w-]+\.json", stamp) for stamp in stamped), stamped
    assert all(f"--target-hit-ratio {target}" in (tmp_path / "copy" / stamp).read_text() for stamp in stamped)


def test_a_new_cpu_budget_reruns_only_that_plan(planner_run, tmp_path):
    budget = int(load_config()["plans"]["lab"]["cpu_gib"]) + 1  # another budget, a whole number of GiB
    _, output = extended(planner_run, tmp_path, lambda config: config["plans"]["lab"].update(cpu_gib=budget))
    assert job_counts(output) == {"plan": 1, "all": 1, "total": 2}
    assert rule_outputs(output, "plan") == ["results/plan/lab.json"]
    stamped = re.findall(r"reason: Updated input files: (.+)$", output, flags=re.MULTILINE)
    assert stamped == ["work/stamps/plan/lab.json"]
    assert f"--cpu-gib {budget} " in (tmp_path / "copy" / stamped[0]).read_text()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda config: config["mrc"]["workloads"].append("sharegpt"),
            "config: mrc.workloads names 'sharegpt', which is not in replay.workloads",
        ),
        (
            lambda config: config["plans"]["lab"].update(model_config=QWEN_7B, tp=3),
            "config: plans.lab.tp: 4 KV heads do not split over tp 3",
        ),
        (
            lambda config: config["plans"]["lab"].update(model_config="models/Nope/config.json"),
            "config: plans.lab.model_config: models/Nope/config.json: cannot read: No such file or directory",
        ),
        (lambda config: config["plans"]["lab"].update(gpu_gib=1), "is valid under each of"),
        (lambda config: config["mrc"].update(target_hit_ratio=1.5), "1.5 is greater than the maximum of 1"),
    ],
    ids=["mrc workload", "plan tp", "plan model", "plan gpu twice", "mrc target"],
)
def test_bad_planner_config_stops_before_any_job(tmp_path, change, message):
    for name in project_files():
        kept = name.endswith((".smk", ".py", ".yaml", ".json")) and not name.startswith(("results/", "data/"))
        if kept or name == "Snakefile":
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, tmp_path / name)
    (tmp_path / "data").symlink_to(ROOT / "data")  # the traces config.yaml names (its inputs must exist)
    config = load_config()
    change(config)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    done = snakemake(tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    if message.startswith("config: "):
        assert message in output.splitlines(), output  # one clear line
    else:
        assert message in output
    assert not (tmp_path / "results").exists() and not (tmp_path / "work").exists() and not (tmp_path / "logs").exists()
