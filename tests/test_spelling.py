"""One spelling per quantity (issue 23): outside the lab contract a room is ``gpu_tokens``/``cpu_tokens`` and a
budget ``*_gib``, in flags and config keys alike. The former spellings work for one release: a flag is read as
its new one after one line on stderr (kvlab/cli/base.py, ``deprecated``), a config key is renamed as the file is
loaded, after one line naming the file and the new key (kvlab/workflow/config.py, ``RENAMED``)."""

import json
import re

import pytest
import yaml
from conftest import ROOT, command_parsers, kvlab

from kvlab.cli import COMMANDS
from kvlab.cli.base import respelled
from kvlab.util.settings import setting
from kvlab.workflow import config as config_file

QWEN = "models/Qwen2.5-1.5B-Instruct/config.json"
PLAN = ["plan", "--workload", "lab", "--docs", "3", "--model-config", QWEN]
SWEEP = ["ttft", "sweep", "--model", "results/ttft/model.json", "--docs", "3", "--tokens", "5011", "--passes", "fwd"]
BUDGETS = ["ttft", "budgets", "--model", "results/ttft/model.json", "--workload", "lab", "--docs", "2"]
BUDGETS += ["--model-config", QWEN, "--gpu-tokens", "5011"]

# (the command and its other flags, the former spelling, the new one); each pair gives the same output
RENAMED_FLAGS = [
    (PLAN + ["--gpu-tokens", "5011"], ["--cpu-gb", "0.25"], ["--cpu-gib", "0.25"], "--cpu-gb", "--cpu-gib"),
    (PLAN + ["--gpu-tokens", "5011"], ["--cpu-gb=0.25"], ["--cpu-gib=0.25"], "--cpu-gb", "--cpu-gib"),
    (PLAN + ["--cpu-gib", "0.25"], ["--gpu-gb", "0.2"], ["--gpu-gib", "0.2"], "--gpu-gb", "--gpu-gib"),
    (
        PLAN + ["--gpu-tokens", "5011"],
        ["--cpu-gb-per-node", "2"],
        ["--cpu-gib-per-node", "2"],
        "--cpu-gb-per-node",
        "--cpu-gib-per-node",
    ),
    (
        PLAN + ["--gpu-tokens", "5011"],
        ["--cpu-gb-per-node=0.5,2"],
        ["--cpu-gib-per-node=0.5,2"],
        "--cpu-gb-per-node",
        "--cpu-gib-per-node",
    ),
    (BUDGETS, ["--cpu-gb-grid", "0,0.25"], ["--cpu-gib-grid", "0,0.25"], "--cpu-gb-grid", "--cpu-gib-grid"),
    (SWEEP + ["--vary", "cpu_tokens", "--grid", "0,5011"], ["--gpu", "5011"], ["--gpu-tokens", "5011"], "--gpu", None),
    (SWEEP + ["--vary", "gpu_tokens", "--grid", "0,5011"], ["--cpu", "5011"], ["--cpu-tokens", "5011"], "--cpu", None),
    (SWEEP + ["--grid", "0,5011"], ["--vary", "gpu"], ["--vary", "gpu_tokens"], "--vary gpu", "--vary gpu_tokens"),
    (SWEEP + ["--grid", "0,5011"], ["--vary=cpu"], ["--vary=cpu_tokens"], "--vary cpu", "--vary cpu_tokens"),
]


def outputs(args, tmp_path, name):
    """``kvlab ARGS`` (an ``--out`` in ``tmp_path`` where the command writes one): its result and what it wrote."""
    out = tmp_path / f"{name}.csv"
    done = kvlab(*args, *(["--out", out] if args[0] == "ttft" else []), cwd=ROOT)
    return done, out.read_bytes() if out.exists() else None


@pytest.mark.parametrize(("base", "old", "new", "old_flag", "new_flag"), RENAMED_FLAGS)
def test_a_deprecated_flag_works_after_one_line_naming_the_new_one(tmp_path, base, old, new, old_flag, new_flag):
    new_flag = new_flag or f"{old_flag}-tokens"
    before, written_before = outputs([*base, *old], tmp_path, "old")
    after, written_after = outputs([*base, *new], tmp_path, "new")
    assert (after.returncode, after.stderr) == (0, ""), after.stderr
    assert before.returncode == 0, before.stderr
    assert before.stderr == f"kvlab: {old_flag} is deprecated; use {new_flag}\n"
    assert (before.stdout, written_before) == (after.stdout, written_after)


def test_a_flag_given_in_both_spellings_is_given_twice():
    done = kvlab(*PLAN, "--gpu-tokens", "5011", "--cpu-gib", "1", "--cpu-gb", "2", cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "kvlab: --cpu-gb is deprecated; use --cpu-gib",
        "kvlab plan: error: argument --cpu-gib: given twice",
    ]


def test_a_required_flag_may_be_given_in_its_former_spelling_and_errors_name_the_new_one():
    done = kvlab(*PLAN, "--cpu-gib", "1", cwd=ROOT)  # neither GPU room
    assert done.stderr == "kvlab plan: error: one of the arguments --gpu-tokens --gpu-gib is required\n"
    done = kvlab(*PLAN, "--gpu-tokens", "1", "--cpu-gb", "lots", cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == "kvlab: --cpu-gb is deprecated; use --cpu-gib"
    assert done.stderr.splitlines()[1].startswith("kvlab plan: error: argument --cpu-gib: expected a number of GiB")


def test_respelled_leaves_values_and_what_follows_a_double_dash():
    renamed = {"--cpu-gb": "--cpu-gib", "--vary gpu": "--vary gpu_tokens"}
    args = ["--vary", "gpu", "--note", "gpu", "--cpu-gb=1", "--", "--cpu-gb", "2"]
    assert respelled(renamed, args) == ["--vary", "gpu_tokens", "--note", "gpu", "--cpu-gib=1", "--", "--cpu-gb", "2"]
    assert respelled(renamed, ["--vary"]) == ["--vary"]  # a flag without its value: argparse says so


# --- config keys --------------------------------------------------------------------------------------------------

CONFIG_TEXT = (ROOT / "config.yaml").read_text(encoding="utf-8")


def former(text):
    """config.yaml in the former spellings: plans' and the TTFT budgets' cpu_gb (keys of a section's entry, four
    spaces in; ttft.hardware.budgets' cpu_gib, six in, is new and has no former spelling), the measurements'
    gpu/cpu."""
    text = re.sub(r"^(    )cpu_gib:", r"\1cpu_gb:", text, flags=re.M)
    return re.sub(r"^(      )(gpu|cpu)_tokens: (\d+)$", r"\1\2: \3", text, flags=re.M)  # a measured config's rooms


def test_the_former_spellings_fixture_changes_the_renamed_keys_only():
    old = former(CONFIG_TEXT)
    config, renamed = yaml.safe_load(CONFIG_TEXT), yaml.safe_load(old)
    assert old.count("cpu_gb:") == len(config["plans"]) + 1 == 3  # two plans, the TTFT budgets
    assert all("cpu_gb" in plan and "cpu_gib" not in plan for plan in renamed["plans"].values())
    assert "cpu_gb" in renamed["ttft"]["budgets"] and "cpu_gib" not in renamed["ttft"]["budgets"]
    assert old.count("cpu_gib:") == CONFIG_TEXT.count("cpu_gib:") - 3  # a key with no former spelling stays
    if "budgets" in config["ttft"].get("hardware", {}):  # its cpu_gib is new: it has no former spelling
        assert renamed["ttft"]["hardware"]["budgets"] == config["ttft"]["hardware"]["budgets"]
    rooms = [len(re.findall(r"^      (gpu|cpu):", text, flags=re.M)) for text in (old, CONFIG_TEXT)]
    assert rooms[0] - rooms[1] == 8  # two measurements, two configs each (the sweeps' fixed rooms stay)
    assert yaml.safe_load(old)["replay"]["rooms"] == yaml.safe_load(CONFIG_TEXT)["replay"]["rooms"]


def test_deprecated_config_keys_are_renamed_with_one_notice_each(tmp_path, capsys):
    path = tmp_path / "old.yaml"
    path.write_text(former(CONFIG_TEXT), encoding="utf-8")
    config, _ = config_file.load(path)
    notices = capsys.readouterr().err.splitlines()
    assert config == config_file.load(ROOT / "config.yaml")[0] == yaml.safe_load(CONFIG_TEXT)
    assert config["ttft"]["setting"]["configs"] is config["example_measurement"]["configs"]  # still one mapping
    expected = [f"kvlab: {path}: plans.{name}.cpu_gb is deprecated; use cpu_gib" for name in config["plans"]]
    expected.append(f"kvlab: {path}: ttft.budgets.cpu_gb is deprecated; use cpu_gib")
    for section in ("example_measurement", "real_measurement"):
        for name in config[section]["configs"]:
            for room in ("gpu", "cpu"):
                expected.append(f"kvlab: {path}: {section}.configs.{name}.{room} is deprecated; use {room}_tokens")
    assert sorted(notices) == sorted(expected) and len(notices) == len(set(notices))
    config_file.load(path)  # loaded again in this process: said once
    assert capsys.readouterr().err == ""


def test_kvlab_config_and_snakemake_read_the_former_keys(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(former(CONFIG_TEXT), encoding="utf-8")
    done = kvlab("config", path, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert f"kvlab: {path}: plans.lab.cpu_gb is deprecated; use cpu_gib\n" in done.stderr
    assert all(line.startswith(f"kvlab: {path}: ") for line in done.stderr.splitlines())
    assert config_file.load_workflow_config(str(path)) == yaml.safe_load(CONFIG_TEXT)  # the Snakefile's config


def test_the_run_that_kvlab_run_starts_says_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KVLAB_CONFIG_CHECKED", "1")
    path = tmp_path / "config.yaml"
    path.write_text(former(CONFIG_TEXT), encoding="utf-8")
    assert config_file.load(path)[0] == yaml.safe_load(CONFIG_TEXT)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("line", "twice", "key", "both"),
    [
        ("    cpu_gib: 1.5\n", "    cpu_gb: 2\n", "plans.lab", "cpu_gb and cpu_gib"),
        ("      cpu_tokens: 0\n", "      cpu: 0\n", "example_measurement.configs.baseline", "cpu and cpu_tokens"),
    ],
)
def test_a_key_in_both_spellings_is_refused_in_one_line(tmp_path, line, twice, key, both):
    assert line in CONFIG_TEXT
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG_TEXT.replace(line, line + twice, 1), encoding="utf-8")
    with pytest.raises(config_file.ConfigFileError) as raised:
        config_file.load(path)
    message = str(raised.value)
    assert "\n" not in message and re.match(rf"{re.escape(str(path))}:\d+: {re.escape(key)}: both {both};", message)
    done = kvlab("config", path, cwd=ROOT)
    assert (done.returncode, done.stderr) == (1, f"kvlab config: error: {message}\n")


def test_every_renamed_key_is_in_the_schema_under_its_new_spelling_only():
    schema = (ROOT / "schemas" / "config.schema.yaml").read_text(encoding="utf-8")
    for (*_, old), new in config_file.RENAMED.items():
        assert re.search(rf"\b{new}\b", schema), new
        if old.endswith("_gb"):
            assert not re.search(rf"\b{old}\b", schema), old


# --- every command's visible flags -----------------------------------------------------------------------------

LAB_CONTRACT = {"scenario", "summarize"}  # the lab scripts' own parsers: --gpu/--cpu are the handout's
ROOM_WORDS = {"tokens", "gib"}  # --gpu-tokens, --cpu-gib, ...
NOT_ROOMS = {"--gpu-eviction", "--cpu-eviction", "--touch-cpu-on-gpu-hit", "--re-store-on-gpu-hit"}
NOT_ROOMS |= {"--gpu-hit-ms", "--cpu-load-ms"}  # the example measurement's latency of a tier
NOT_ROOMS |= {"--gpu-system"}  # the hardware TTFT is priced on (aiconfigurator-core's system: h100_sxm, ...)
ROOM_WORDS |= {"blocks"}  # kvlab simulate's --gpu-blocks/--cpu-blocks (issue 25 names them): an engine's pool
NOT_ROOMS |= {"--gpu-memory-utilization"}  # vLLM's flag: the share of GPU memory the engine takes
NOT_ROOMS |= {"--cpu-scope"}  # issue 39's name: whether the instances share the CPU tier, not its room
NOT_BUDGETS = {"--max-memory"}  # this machine's memory for the command itself (8G, 512M), not a cache's


def misspelled(spelled, metadata):
    """Why a visible flag (``spelled``, declared with ``metadata``) spells a room or a budget otherwise than
    ``--gpu-tokens``/``--cpu-tokens``/``--block-tokens`` or ``*-gib``, or None."""
    words = spelled.lstrip("-").split("-")
    if spelled.startswith("--") and spelled not in NOT_ROOMS | NOT_BUDGETS:
        if {"gb", "gigabytes", "mb", "room", "capacity", "budget"} & set(words):
            return f"{spelled}: a room is *-tokens, a budget *-gib"
        if words[0] in ("gpu", "cpu", "block") and not ROOM_WORDS & set(words[1:]):
            return f"{spelled}: a room is --{words[0]}-tokens" + (
                "" if words[0] == "block" else f" or --{words[0]}-gib"
            )
    if re.search(r"\b(GPU|CPU)\b", metadata["metavar"] or ""):
        return f"{spelled}: metavar {metadata['metavar']}: a room is GPU_TOKENS, CPU_TOKENS"
    if {"gpu", "cpu"} & set(metadata["choices"] or ()):
        return f"{spelled}: a choice of room is gpu_tokens, cpu_tokens"
    return None


def test_no_visible_flag_spells_a_room_or_a_budget_otherwise():
    parsers = command_parsers()
    assert {prog.split()[1] for prog in parsers} == set(COMMANDS) - LAB_CONTRACT
    assert {"kvlab plan", "kvlab ttft sweep", "kvlab ttft budgets", "kvlab replay", "kvlab mrc"} <= set(parsers)
    found = []
    for prog, parser in parsers.items():
        found += [
            f"{prog} {problem}"
            for spelled, field in parser.declared
            if (problem := misspelled(spelled, field.metadata))
        ]
        text = parser.format_help()
        found += [f"{prog}: the deprecated {old} shows in --help" for old in parser.renamed if f"{old} " in text]
    assert found == []


def test_the_walk_finds_a_misspelling():
    """The checker itself: the former spellings are what it refuses."""
    for flag in ("--cpu-gb", "--gpu", "--cpu-room"):
        assert misspelled(flag, setting(help="").metadata), flag
    assert misspelled("--config", setting(help="", metavar="NAME:GPU,CPU").metadata)
    assert misspelled("--vary", setting(help="", choices=("gpu", "cpu")).metadata)
    for flag in ("--gpu-tokens", "--cpu-gib-grid", "--block-tokens", "--gpu-eviction", "--gib"):
        assert misspelled(flag, setting(help="").metadata) is None, flag


def test_the_scenario_wrapper_keeps_the_lab_contracts_flags():
    done = kvlab("scenario", "--gpu", "21520", "--cpu", "0", "--passes", "fwd,fwd", cwd=ROOT)
    assert done.returncode == 0 and done.stderr == ""
    assert json.loads(done.stdout) == json.loads((ROOT / "results" / "cyclic.json").read_text(encoding="utf-8"))
