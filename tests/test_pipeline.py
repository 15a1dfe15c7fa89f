"""config.yaml → schema validation, cross-field checks, targets and command lines (kvlab/workflow/: checks.py,
paths.py, commands.py)."""

import copy
import re
import shlex

import pytest
from conftest import SCHEMA, both, deleter, setter
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from kvlab import scenario
from kvlab.cli import policies as policies_command
from kvlab.cli import replay as replay_command
from kvlab.cli.flags import make_workload
from kvlab.workflow import checks, commands, paths


def test_committed_config_is_valid(config):
    validate(config, str(SCHEMA))
    checks.check_config(config)


BAD_VALUES = {
    "negative gpu room": setter(["runs", "offload", "gpu"], -1),
    "fractional cpu room": setter(["runs", "offload", "cpu"], 1.5),
    "room as text": setter(["runs", "cyclic", "gpu"], "21520"),
    "room as boolean": setter(["runs", "cyclic", "gpu"], True),
    "unknown pass order": setter(["runs", "baseline", "passes"], ["fwd", "bwd"]),
    "no passes": setter(["runs", "baseline", "passes"], []),
    "passes as a string": setter(["runs", "baseline", "passes"], "fwd,fwd"),
    "unknown run key": setter(["runs", "cyclic", "gpus"], 1),
    "run without passes": deleter(["runs", "cyclic", "passes"]),
    "bad artifact name": setter(["runs", "Bad-Name"], {"gpu": 1, "cpu": 0, "passes": ["fwd"]}),
    "negative docs": setter(["scenario", "docs"], -3),
    "empty grid": setter(["sweeps", "cliff", "grid"], []),
    "duplicate grid value": setter(["sweeps", "cliff", "grid"], [21520, 21520]),
    "negative grid value": setter(["sweeps", "cpu_cliff", "grid"], [0, -5]),
    "fractional grid value": setter(["sweeps", "cpu_cliff", "grid"], [0, 2.5]),
    "unknown vary": setter(["sweeps", "cliff", "vary"], "room"),
    "unknown record value": setter(["sweeps", "cliff", "record", "value"], "hit_ratio"),
    "record pass 0": setter(["sweeps", "cliff", "record", "pass"], 0),
    "fixed unknown setting": setter(["sweeps", "cliff", "fixed", "ram"], 3),
    "missing measurement source": deleter(["measurement", "source"]),
    "empty measurement source": setter(["measurement", "source"], ""),
    "unknown top-level section": setter(["sweep"], {}),
    "negative latency": setter(["example_measurement", "latency_ms", "recompute"], -576.0),
    "latency as text": setter(["example_measurement", "latency_ms", "cpu_load"], "48.6 ms"),
    "negative jitter": setter(["example_measurement", "jitter"], -0.1),
    "example pass order": setter(["example_measurement", "passes", "pass1-cold"], "forward"),
    "example config without cpu": deleter(["example_measurement", "configs", "lmcache", "cpu_tokens"]),
    "missing example seed": deleter(["example_measurement", "seed"]),
    "missing replay section": deleter(["replay"]),
    "unknown replay source": setter(["replay", "workloads", "lab", "source"], "sharegpt"),
    "replay workload without source": deleter(["replay", "workloads", "lab", "source"]),
    "setting of another source": setter(["replay", "workloads", "lab", "num_documents"], 3),
    "unknown long_doc_qa setting": setter(["replay", "workloads", "long_doc_qa", "docs"], 3),
    "unknown repeat mode": setter(["replay", "workloads", "long_doc_qa", "repeat_mode"], "zigzag"),
    "lab document of 0 tokens": setter(["replay", "workloads", "lab", "tokens"], 0),
    "mooncake without trace": setter(["replay", "workloads", "trace"], {"source": "mooncake"}),
    "mooncake with a lab setting": setter(
        ["replay", "workloads", "trace"], {"source": "mooncake", "trace": "t.jsonl", "docs": 3}
    ),
    "block of 0 tokens": setter(["replay", "rooms", "block_tokens"], [0, 256]),
    "empty room grid": setter(["replay", "rooms", "gpu_tokens"], []),
    "duplicate room": setter(["replay", "rooms", "cpu_tokens"], [0, 0]),
    "negative room": setter(["replay", "rooms", "cpu_tokens"], [-1]),
    "rooms without cpu grid": deleter(["replay", "rooms", "cpu_tokens"]),
    "unknown room grid": setter(["replay", "rooms", "ram_tokens"], [1]),
    "unknown partial-block rule": setter(["replay", "partial_blocks"], "round"),
    "unknown eviction order": setter(["replay", "workloads", "lab", "eviction_order"], "random"),
    "bad workload name": setter(["replay", "workloads", "Lab-2"], {"source": "lab"}),
    "unknown write policy": setter(["replay", "write_policy"], "write-around"),
    "run with an unknown write policy": setter(["runs", "offload", "write_policy"], "write-around"),
    "sweep fixing an unknown write policy": setter(["sweeps", "cpu_cliff", "fixed", "write_policy"], "exclusive"),
    "unknown eviction policy": setter(["replay", "gpu_eviction"], "clock"),
    "unknown workload eviction": setter(["replay", "workloads", "lab", "cpu_eviction"], "mru"),
    "switch as text": setter(["replay", "touch_cpu_on_gpu_hit"], "yes"),
    "missing write policy": deleter(["replay", "write_policy"]),
    "missing cpu eviction": deleter(["replay", "cpu_eviction"]),
    "unknown replay key": setter(["replay", "write_policies"], ["write-back"]),
    "unknown mooncake key": setter(
        ["replay", "workloads", "trace"], {"source": "mooncake", "trace": "t.jsonl", "gpu_evictions": "lru"}
    ),
    "missing policies section": deleter(["policies"]),
    "unknown policy in the list": setter(["policies", "write_policies"], ["write-through", "write-around"]),
    "duplicate eviction": setter(["policies", "evictions"], ["lru", "lru"]),
    "empty eviction list": setter(["policies", "evictions"], []),
    "policy cliff without sweep": deleter(["policies", "cpu_cliff", "sweep"]),
    "policy cliff negative room": setter(["policies", "cpu_cliff", "grid"], [0, -1]),
    "policy table rooms without block grid": deleter(["policies", "tables", "rooms", "block_tokens"]),
    "unknown policies key": setter(["policies", "designs"], []),
    "measurement without its model": deleter(["measurement", "model_config"]),
    "measurement without measured_on": deleter(["measurement", "measured_on"]),
    "synthetic as text": setter(["measurement", "synthetic"], "yes"),
    "real measurement without its model": deleter(["real_measurement", "model_config"]),
    "hardware without a system": deleter(["ttft", "hardware", "gpu_system"]),
    "hardware system with a space": setter(["ttft", "hardware", "gpu_system"], "h100 sxm"),
    "unknown engine": setter(["ttft", "hardware", "engine"], "trtllm"),
    "unknown hardware key": setter(["ttft", "hardware", "tp"], 2),
    "hardware lab without block": deleter(["ttft", "hardware", "lab", "block_tokens"]),
    "hardware lab without configs": setter(["ttft", "hardware", "lab", "configs"], {}),
    "hardware lab block of 0": setter(["ttft", "hardware", "lab", "block_tokens"], 0),
    "hardware budgets without a GPU room": deleter(["ttft", "hardware", "budgets", "gpu_gib"]),
    "hardware budgets with both GPU rooms": setter(["ttft", "hardware", "budgets", "gpu_tokens"], 1000),
    "hardware budgets empty grid": setter(["ttft", "hardware", "budgets", "cpu_gib"], []),
    "hardware budgets negative budget": setter(["ttft", "hardware", "budgets", "cpu_gib"], [0, -1]),
    "simulate without its load grid": deleter(["ttft", "hardware", "simulate", "load"]),
    "simulate without its model": deleter(["ttft", "hardware", "simulate", "model_config"]),
    "simulate at a standstill": setter(["ttft", "hardware", "simulate", "budgets", "speedup"], 0),
    "simulate a negative load": setter(["ttft", "hardware", "simulate", "load", "speedup"], [0.2, -1]),
    "simulate a load twice": setter(["ttft", "hardware", "simulate", "load", "speedup"], [0.2, 0.2]),
    "simulate a load grid as one number": setter(["ttft", "hardware", "simulate", "load", "speedup"], 0.2),
    "simulate part of a CPU block": setter(["ttft", "hardware", "simulate", "load", "cpu_blocks"], [0, 1.5]),
    "simulate an empty CPU grid": setter(["ttft", "hardware", "simulate", "budgets", "cpu_blocks"], []),
    "unknown simulate key": setter(["ttft", "hardware", "simulate", "gpu_blocks"], 845),
}


@pytest.mark.parametrize("mutate", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_schema_rejects(config, mutate):
    mutate(config)
    with pytest.raises(WorkflowError):
        validate(config, str(SCHEMA))


CROSS_FIELD = {
    "run and sweep share a name": (
        setter(["runs", "cliff"], {"gpu": 1, "cpu": 0, "passes": ["fwd"]}),
        "'cliff' is used twice",
    ),
    "reserved name": (setter(["runs", "measured"], {"gpu": 1, "cpu": 0, "passes": ["fwd"]}), "'measured'"),
    "record pass beyond the passes": (
        setter(["sweeps", "cliff", "record", "pass"], 3),
        "sweeps.cliff.record.pass is 3",
    ),
    "varied setting also fixed": (setter(["sweeps", "cpu_cliff", "fixed", "cpu"], 0), "sweeps.cpu_cliff varies 'cpu'"),
    "LMCache switch on write-back": (
        both(
            setter(["replay", "workloads", "lab", "write_policy"], "write-back"),
            setter(["replay", "workloads", "lab", "re_store_on_gpu_hit"], True),
        ),
        "replay.workloads.lab: re_store_on_gpu_hit applies to write_policy write-through only, not write-back",
    ),
    "opt with kept partial blocks": (
        both(
            setter(["replay", "workloads", "long_doc_qa", "partial_blocks"], "keep"),
            setter(["replay", "workloads", "long_doc_qa", "gpu_eviction"], "opt"),
        ),
        "replay.workloads.long_doc_qa: gpu_eviction opt needs equal-sized blocks: partial_blocks drop",
    ),
    "policy table keeps partial blocks with arc": (
        setter(["replay", "workloads", "lab", "partial_blocks"], "keep"),
        "policies.evictions has arc, opt, which need partial_blocks drop; replay.workloads.lab keeps",
    ),
    "policy table of an unknown workload": (
        setter(["policies", "tables", "workloads"], ["lab", "sharegpt"]),
        "policies.tables.workloads names 'sharegpt', which is not in replay.workloads",
    ),
    "policy cliff of a GPU sweep": (
        setter(["policies", "cpu_cliff", "sweep"], "cliff"),
        "policies.cpu_cliff.sweep must name a sweep that varies cpu, got 'cliff'",
    ),
    "policy table of a trace at another block": (
        setter(["policies", "tables", "workloads"], ["lab", "conversation"]),
        "policies.tables.rooms.block_tokens: a Mooncake trace's blocks must be multiples of 512, got",
    ),
    "mooncake block not a multiple of 512": (
        setter(["replay", "workloads", "trace"], {"source": "mooncake", "trace": "t.jsonl"}),
        "replay.workloads.trace: a Mooncake trace's blocks must be multiples of 512, got 16",
    ),
    "the example measurement called real": (
        setter(["measurement", "synthetic"], False),
        "measurement.synthetic: the example measurement .* is synthetic",
    ),
    "a measurement's model that is not there": (
        setter(["measurement", "model_config"], "models/none/config.json"),
        "measurement.model_config: models/none/config.json: cannot read",
    ),
    "the real measurement's model that is not there": (
        setter(["real_measurement", "model_config"], "models/none/config.json"),
        "real_measurement.model_config: models/none/config.json: cannot read",
    ),
    "an unknown GPU system": (
        setter(["ttft", "hardware", "gpu_system"], "h999_sxm"),
        "ttft.hardware.gpu_system: 'h999_sxm' is not a system of aiconfigurator-core",
    ),
    "a GPU system file that is not there": (
        setter(["ttft", "hardware", "gpu_system"], "data/systems/none.yaml"),
        "ttft.hardware.gpu_system: no such file: 'data/systems/none.yaml'",
    ),
    "a hardware lab model that is not there": (
        setter(["ttft", "hardware", "lab", "model_config"], "models/none/config.json"),
        "ttft.hardware.lab.model_config: models/none/config.json: cannot read",
    ),
    "hardware budgets of an unknown workload": (
        setter(["ttft", "hardware", "budgets", "workload"], "sharegpt"),
        "ttft.hardware.budgets.workload names 'sharegpt', which is not in replay.workloads",
    ),
    "simulate a workload without a clock": (
        setter(["ttft", "hardware", "simulate", "workload"], "lab"),
        "config: ttft.hardware.simulate.workload names 'lab', which has no clock: name a trace workload",
    ),
    "simulate an unknown workload": (
        setter(["ttft", "hardware", "simulate", "workload"], "sharegpt"),
        "ttft.hardware.simulate.workload names 'sharegpt', which is not in replay.workloads",
    ),
    "simulate a model that is not there": (
        setter(["ttft", "hardware", "simulate", "model_config"], "models/none/config.json"),
        "ttft.hardware.simulate.model_config: models/none/config.json: cannot read",
    ),
    "hardware budgets of a trace at another chunk": (
        setter(["ttft", "hardware", "budgets", "chunk_tokens"], 256),
        "ttft.hardware.budgets.chunk_tokens: a Mooncake trace's blocks must be multiples of 512, got 256",
    ),
    "hardware budgets' model not split over its tp": (
        setter(["ttft", "hardware", "budgets", "tp"], 3),
        "ttft.hardware.budgets.tp: ",
    ),
}


@pytest.mark.parametrize(("mutate", "message"), CROSS_FIELD.values(), ids=CROSS_FIELD.keys())
def test_cross_field_rules(config, mutate, message):
    mutate(config)
    validate(config, str(SCHEMA))  # the schema alone lets these through
    with pytest.raises(checks.ConfigError, match=message) as raised:
        checks.check_config(config)
    assert "\n" not in str(raised.value)


def parse(args):
    """Parse a generated scenario command line with scenario.py's own parser (``kvlab scenario`` uses it too)."""
    return scenario.build_parser().parse_args(shlex.split(args))


def test_run_args_carry_run_settings_and_shared_defaults(config):
    for name, run in config["runs"].items():
        args = parse(commands.job_args(config, "lab_run", run=name))
        assert (args.gpu, args.cpu, args.passes) == (run["gpu"], run["cpu"], run["passes"])
        assert (args.docs, args.tokens) == (config["scenario"]["docs"], config["scenario"]["tokens"])


def test_a_run_or_a_sweep_may_choose_a_write_policy(config):
    config["runs"]["offload"]["write_policy"] = "write-back"
    config["sweeps"]["cpu_cliff"]["fixed"]["write_policy"] = "selective"
    validate(config, str(SCHEMA))
    assert parse(commands.job_args(config, "lab_run", run="offload")).write_policy == "write-back"
    assert parse(commands.job_args(config, "lab_run", run="baseline")).write_policy == "write-through"
    assert parse(commands.job_args(config, "sweep_point", sweep="cpu_cliff", value="0")).write_policy == "selective"


def test_a_run_may_override_shared_defaults(config):
    config["runs"]["cyclic"]["docs"] = 7
    assert parse(commands.job_args(config, "lab_run", run="cyclic")).docs == 7


def test_sweep_point_args_vary_one_setting(config):
    for name, sweep in config["sweeps"].items():
        for value in sweep["grid"]:
            args = vars(parse(commands.job_args(config, "sweep_point", sweep=name, value=str(value))))
            assert args[sweep["vary"]] == value
            for key, fixed in sweep["fixed"].items():
                assert args[key] == fixed
            assert args["passes"] == sweep["passes"]


def test_sweep_points_follow_grid_order(config):
    config["sweeps"]["cliff"]["grid"] = [50110, 10, 30000]
    points = paths.sweep_points(config, "cliff")
    assert points == [paths.sweep_point_path("cliff", value) for value in (50110, 10, 30000)]


def test_point_args_do_not_depend_on_the_rest_of_the_grid(config):
    """Appending to a grid must not change (and so rerun) the existing points."""
    grid = config["sweeps"]["cliff"]["grid"]
    before = {value: commands.job_args(config, "sweep_point", sweep="cliff", value=str(value)) for value in grid}
    extended = copy.deepcopy(config)
    extended["sweeps"]["cliff"]["grid"].append(max(grid) + 1)  # a value the grid does not hold
    validate(extended, str(SCHEMA))
    assert {
        value: commands.job_args(extended, "sweep_point", sweep="cliff", value=str(value)) for value in grid
    } == before


def test_simulate_points_are_each_point_once_and_do_not_depend_on_the_rest_of_the_grid(config):
    """ttft.hardware.simulate: each budget at the one load and each CPU tier at each load, a point shared by both
    grids run once; a speedup spelled as its float (1 and 1.0 are one point); appending to a grid adds its points
    and changes no existing point's command line."""
    spec = config["ttft"]["hardware"]["simulate"]
    points = paths.simulate_points(config)
    budgets = {(cpu, repr(float(spec["budgets"]["speedup"]))) for cpu in spec["budgets"]["cpu_blocks"]}
    load = {(cpu, repr(float(speedup))) for cpu in spec["load"]["cpu_blocks"] for speedup in spec["load"]["speedup"]}
    assert len(points) == len(set(points)) and set(points) == budgets | load
    assert len(points) < len(budgets) + len(load)  # the committed grids share points: each runs once

    def line(config, point):
        return commands.job_args(
            config, "ttft_hardware_simulate", workload=spec["workload"], cpu_blocks=point[0], speedup=point[1]
        )

    before = {point: line(config, point) for point in points}
    extended = copy.deepcopy(config)
    simulate = extended["ttft"]["hardware"]["simulate"]
    simulate["load"]["speedup"].append(1)
    simulate["budgets"]["cpu_blocks"].append(6760)
    validate(extended, str(SCHEMA))
    checks.check_config(extended)
    added = set(paths.simulate_points(extended)) - set(points)
    at_budgets = repr(float(spec["budgets"]["speedup"]))
    assert added == {(6760, at_budgets), *((cpu, "1.0") for cpu in spec["load"]["cpu_blocks"])}
    assert {point: line(extended, point) for point in points} == before
    assert line(extended, (0, "1.0")).endswith("--cpu-blocks 0 --speedup 1.0")
    targets = paths.all_targets(extended)
    assert f"results/ttft/hardware/simulate-{spec['workload']}/cpu0-speedup1.0-percentiles.csv" in targets
    assert paths.plot_inputs(extended)["simulate_ttft_load"][len(spec["load"]["speedup"])].endswith(
        "cpu0-speedup1.0.json"
    )


def test_all_targets_name_every_artifact(config):
    targets = paths.all_targets(config)
    for name in [*config["runs"], *config["sweeps"], "measured"]:
        assert f"results/{name}.json" in targets
    assert "results/ttft.jsonl" in targets
    assert len(targets) == len(set(targets))


def test_name_pattern_matches_exactly_the_names():
    pattern = re.compile(f"^(?:{paths.name_pattern(['cliff', 'cpu_cliff'])})$")
    assert pattern.match("cliff") and pattern.match("cpu_cliff")
    assert not pattern.match("measured") and not pattern.match("cliffs")
    assert not re.match(f"^(?:{paths.name_pattern([])})$", "anything")


def parse_replay(args):
    """Parse a generated ``kvlab replay`` command line with the command's own parser."""
    return replay_command.build_parser("kvlab replay").parse_args(shlex.split(args))


def test_replay_args_carry_the_workload_settings_and_the_point(config):
    config["replay"]["workloads"]["lab"]["eviction_order"] = "head-first"  # a workload may override
    for name, spec in config["replay"]["workloads"].items():
        args = parse_replay(
            commands.job_args(
                config, "replay_point", workload=name, gpu_tokens="21520", cpu_tokens="0", block_tokens="256"
            )
        )
        assert (args.workload, args.gpu_tokens, args.cpu_tokens, args.block_tokens) == (spec["source"], 21520, 0, 256)
        workload = make_workload(args)
        for key, value in spec.items():
            if key not in ("source", "rooms", "partial_blocks", "eviction_order"):
                assert getattr(workload, key) == value, key
        assert args.partial_blocks == config["replay"]["partial_blocks"]
        assert args.eviction_order == spec.get("eviction_order", config["replay"]["eviction_order"])


def test_replay_args_quote_a_trace_path(config):
    config["replay"]["workloads"]["trace"] = {"source": "mooncake", "trace": "my traces/a b.jsonl"}
    args = parse_replay(
        commands.job_args(config, "replay_point", workload="trace", gpu_tokens="1", cpu_tokens="2", block_tokens="512")
    )
    assert args.trace == "my traces/a b.jsonl"
    assert paths.replay_trace(config, "trace") == "my traces/a b.jsonl"
    assert paths.replay_trace(config, "lab") is None


def test_replay_points_cover_the_grid_block_outermost(config):
    config["replay"]["rooms"] = {"gpu_tokens": [2, 1], "cpu_tokens": [0, 5], "block_tokens": [16, 8]}
    config["replay"]["workloads"]["lab"]["rooms"] = {"cpu_tokens": [7]}  # a workload overrides one grid
    expected = [(16, 2, 0), (16, 2, 5), (16, 1, 0), (16, 1, 5), (8, 2, 0), (8, 2, 5), (8, 1, 0), (8, 1, 5)]
    assert paths.replay_points(config, "long_doc_qa") == [
        paths.replay_point_path("long_doc_qa", gpu, cpu, block) for block, gpu, cpu in expected
    ]
    assert paths.replay_points(config, "lab") == [
        paths.replay_point_path("lab", gpu, 7, block) for block in (16, 8) for gpu in (2, 1)
    ]


def test_all_targets_include_one_replay_table_per_workload(config):
    targets = paths.all_targets(config)
    for name in config["replay"]["workloads"]:
        assert paths.replay_table_path(name) in targets


def test_replay_args_carry_the_policies_and_the_switches(config):
    """Every cache setting reaches ``kvlab replay``: names as values, a true switch as a bare flag, a false one not
    at all."""
    lab = config["replay"]["workloads"]["lab"]
    lab.update(write_policy="write-back", gpu_eviction="opt", cpu_eviction="arc")
    config["replay"]["touch_cpu_on_gpu_hit"] = True
    args = parse_replay(
        commands.job_args(
            config, "replay_point", workload="long_doc_qa", gpu_tokens="1", cpu_tokens="2", block_tokens="256"
        )
    )
    assert (args.write_policy, args.gpu_eviction, args.cpu_eviction) == ("write-through", "lru", "lru")
    assert args.touch_cpu_on_gpu_hit and not args.re_store_on_gpu_hit
    text = commands.job_args(config, "replay_point", workload="lab", gpu_tokens="1", cpu_tokens="2", block_tokens="256")
    args = parse_replay(text)
    assert (args.write_policy, args.gpu_eviction, args.cpu_eviction) == ("write-back", "opt", "arc")
    assert "re-store" not in text


def parse_policy(args):
    """Parse a generated ``kvlab policies`` command line with the command's own parser."""
    return policies_command.build_parser("kvlab policies").parse_args(shlex.split(args))


def test_policy_cliff_args_take_the_lab_sweep_and_the_policy_grid(config):
    sweep = config["sweeps"]["cpu_cliff"]
    args = parse_policy("cliff " + commands.job_args(config, "policy_cliff") + " --out x.json")
    assert args.cpu_tokens == config["policies"]["cpu_cliff"]["grid"]
    assert args.gpu_tokens == sweep["fixed"]["gpu"]
    assert (args.docs, args.tokens) == (config["scenario"]["docs"], config["scenario"]["tokens"])
    assert args.passes == sweep["passes"] and args.record_pass == sweep["record"]["pass"]
    assert args.write_policies == config["policies"]["write_policies"]
    del config["policies"]["cpu_cliff"]["grid"]  # without a grid of its own: the lab sweep's
    assert parse_policy("cliff " + commands.job_args(config, "policy_cliff") + " --out x").cpu_tokens == sweep["grid"]


def test_policy_table_args_take_the_workload_and_the_table_rooms(config):
    config["replay"]["workloads"]["lab"]["eviction_order"] = "head-first"
    config["replay"]["re_store_on_gpu_hit"] = True
    rooms = config["policies"]["tables"]["rooms"]
    for name, spec in config["replay"]["workloads"].items():
        args = parse_policy("table " + commands.job_args(config, "policy_table", workload=name) + " --out x.csv")
        assert args.workload == spec["source"]
        assert (args.gpu_tokens, args.cpu_tokens, args.block_tokens) == (
            rooms["gpu_tokens"],
            rooms["cpu_tokens"],
            rooms["block_tokens"],
        )
        assert args.evictions == config["policies"]["evictions"]
        assert args.eviction_order == spec.get("eviction_order", "tail-first")
        assert args.re_store_on_gpu_hit and not args.touch_cpu_on_gpu_hit


def test_all_targets_include_the_policy_artifacts(config):
    targets = paths.all_targets(config)
    assert paths.POLICY_CLIFF in targets
    for name in config["policies"]["tables"]["workloads"]:
        assert paths.policy_table_path(name) in targets
