"""config.yaml → schema validation, cross-field checks, targets and command lines (kvlab/pipeline.py)."""

import copy
import re
import shlex

import pytest
from conftest import SCHEMA
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

from kvlab import pipeline, replay, scenario


def test_committed_config_is_valid(config):
    validate(config, str(SCHEMA))
    pipeline.check_config(config)


def setter(path, value):
    """A mutation that sets config[path[0]][path[1]]... to ``value``."""

    def mutate(config):
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return mutate


def deleter(path):
    def mutate(config):
        node = config
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return mutate


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
    "example config without cpu": deleter(["example_measurement", "configs", "lmcache", "cpu"]),
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
    "mooncake block not a multiple of 512": (
        setter(["replay", "workloads", "trace"], {"source": "mooncake", "trace": "t.jsonl"}),
        "replay.workloads.trace is a Mooncake trace, its block_tokens must be multiples of 512, got 16",
    ),
}


@pytest.mark.parametrize(("mutate", "message"), CROSS_FIELD.values(), ids=CROSS_FIELD.keys())
def test_cross_field_rules(config, mutate, message):
    mutate(config)
    validate(config, str(SCHEMA))  # the schema alone lets these through
    with pytest.raises(pipeline.ConfigError, match=message) as raised:
        pipeline.check_config(config)
    assert "\n" not in str(raised.value)


def parse(args):
    """Parse a generated scenario.py command line with scenario.py's own parser."""
    return scenario.build_parser().parse_args(shlex.split(args))


def test_run_args_carry_run_settings_and_shared_defaults(config):
    for name, run in config["runs"].items():
        args = parse(pipeline.run_args(config, name))
        assert (args.gpu, args.cpu, args.passes) == (run["gpu"], run["cpu"], run["passes"])
        assert (args.docs, args.tokens) == (config["scenario"]["docs"], config["scenario"]["tokens"])


def test_a_run_may_override_shared_defaults(config):
    config["runs"]["cyclic"]["docs"] = 7
    assert parse(pipeline.run_args(config, "cyclic")).docs == 7


def test_sweep_point_args_vary_one_setting(config):
    for name, sweep in config["sweeps"].items():
        for value in sweep["grid"]:
            args = vars(parse(pipeline.sweep_point_args(config, name, str(value))))
            assert args[sweep["vary"]] == value
            for key, fixed in sweep["fixed"].items():
                assert args[key] == fixed
            assert args["passes"] == sweep["passes"]


def test_sweep_points_follow_grid_order(config):
    config["sweeps"]["cliff"]["grid"] = [50110, 10, 30000]
    points = pipeline.sweep_points(config, "cliff")
    assert points == [pipeline.sweep_point_path("cliff", value) for value in (50110, 10, 30000)]


def test_point_args_do_not_depend_on_the_rest_of_the_grid(config):
    """Appending to a grid must not change (and so rerun) the existing points."""
    before = pipeline.sweep_point_args(config, "cliff", "30000")
    extended = copy.deepcopy(config)
    extended["sweeps"]["cliff"]["grid"].append(12345)
    assert pipeline.sweep_point_args(extended, "cliff", "30000") == before


def test_all_targets_name_every_artifact(config):
    targets = pipeline.all_targets(config)
    for name in [*config["runs"], *config["sweeps"], "measured"]:
        assert f"results/{name}.json" in targets
    assert "results/ttft.jsonl" in targets
    assert len(targets) == len(set(targets))


def test_name_pattern_matches_exactly_the_names():
    pattern = re.compile(f"^(?:{pipeline.name_pattern(['cliff', 'cpu_cliff'])})$")
    assert pattern.match("cliff") and pattern.match("cpu_cliff")
    assert not pattern.match("measured") and not pattern.match("cliffs")
    assert not re.match(f"^(?:{pipeline.name_pattern([])})$", "anything")


def parse_replay(args):
    """Parse a generated replay.py command line with replay.py's own parser."""
    return replay.build_parser().parse_args(shlex.split(args))


def test_replay_args_carry_the_workload_settings_and_the_point(config):
    config["replay"]["workloads"]["lab"]["eviction_order"] = "head-first"  # a workload may override
    for name, spec in config["replay"]["workloads"].items():
        args = parse_replay(pipeline.replay_args(config, name, "21520", "0", "256"))
        assert (args.workload, args.gpu_tokens, args.cpu_tokens, args.block_tokens) == (spec["source"], 21520, 0, 256)
        workload = replay.make_workload(args)
        for key, value in spec.items():
            if key not in ("source", "rooms", "partial_blocks", "eviction_order"):
                assert getattr(workload, key) == value, key
        assert args.partial_blocks == config["replay"]["partial_blocks"]
        assert args.eviction_order == spec.get("eviction_order", config["replay"]["eviction_order"])


def test_replay_args_quote_a_trace_path(config):
    config["replay"]["workloads"]["trace"] = {"source": "mooncake", "trace": "my traces/a b.jsonl"}
    args = parse_replay(pipeline.replay_args(config, "trace", "1", "2", "512"))
    assert args.trace == "my traces/a b.jsonl"
    assert pipeline.replay_trace(config, "trace") == "my traces/a b.jsonl"
    assert pipeline.replay_trace(config, "lab") is None


def test_replay_points_cover_the_grid_block_outermost(config):
    config["replay"]["rooms"] = {"gpu_tokens": [2, 1], "cpu_tokens": [0, 5], "block_tokens": [16, 8]}
    config["replay"]["workloads"]["lab"]["rooms"] = {"cpu_tokens": [7]}  # a workload overrides one grid
    expected = [(16, 2, 0), (16, 2, 5), (16, 1, 0), (16, 1, 5), (8, 2, 0), (8, 2, 5), (8, 1, 0), (8, 1, 5)]
    assert pipeline.replay_points(config, "long_doc_qa") == [
        pipeline.replay_point_path("long_doc_qa", gpu, cpu, block) for block, gpu, cpu in expected
    ]
    assert pipeline.replay_points(config, "lab") == [
        pipeline.replay_point_path("lab", gpu, 7, block) for block in (16, 8) for gpu in (2, 1)
    ]


def test_all_targets_include_one_replay_table_per_workload(config):
    targets = pipeline.all_targets(config)
    for name in config["replay"]["workloads"]:
        assert pipeline.replay_table_path(name) in targets
