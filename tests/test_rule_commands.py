"""Each rule's `run:` spells its command (rules/*.smk), and kvlab/workflow/commands.py builds the same line for
every job, so that `kvlab config` parses, before any job runs, the very flags each job will run with. Held
together here: every job's line (for config.yaml and for a config whose grids are extended) is its rule's spelled
line with the job's wildcards and the rule's values filled in, and the files the rule adds left out."""

import ast
import re

import pytest
from conftest import ROOT, load_config

from kvlab.workflow import commands

FILE = re.compile(r"\{(input|output|log)\b[^}]*\}")  # what the rule adds: files
KEPT_FILES = ("--model-config",)  # a file flag whose value comes from config: job lines keep it


def spelled_commands():
    """``{rule: the string its kvlab(...) call spells}`` from every rule file, read as Python literals."""
    found = {}
    for path in sorted((ROOT / "rules").glob("*.smk")):
        text = path.read_text(encoding="utf-8")
        for rule in re.finditer(r"^\s*rule (\w+):\n(.*?)(?=^\s*rule |\Z)", text, flags=re.M | re.S):
            call = re.search(r"\bkvlab\(\s*((?:\"[^\"\n]*\"\s*)+),", rule.group(2))
            if call:
                found[rule.group(1)] = ast.literal_eval("(" + call.group(1) + ")")
    return found


SPELLED = spelled_commands()


def pattern(template, wildcards):
    """A regular expression for the job lines of ``template``: its words literally, a wildcard as its value, a
    params value as anything, a file the rule adds left out (with its flag), a config file as any one word."""
    words = template.split()
    parts, skip = [], False
    for index, word in enumerate(words):
        if skip:
            skip = False
            continue
        following = words[index + 1] if index + 1 < len(words) else ""
        if word.startswith("--") and FILE.fullmatch(following):
            if word in KEPT_FILES:
                parts += [re.escape(word), r"\S+"]
            skip = word not in KEPT_FILES
            continue
        if FILE.fullmatch(word):
            continue
        wildcard = re.fullmatch(r"\{wildcards\.(\w+)\}", word)
        if wildcard:
            parts.append(re.escape(str(wildcards[wildcard.group(1)])))
        elif word.startswith("{params."):
            parts.append(r"(?:.*?)")
        else:
            parts.append(re.escape(word))
    return r"\s*".join(parts)


def extended(config):
    """config.yaml with a replay grid, a curve grid, a plan, a hardware-priced lab config and budget, and a simulated
    CPU tier and load added: values not already in them."""
    rooms = config["replay"]["rooms"]
    rooms["gpu_tokens"].append(max(rooms["gpu_tokens"]) + 7)
    config["mrc"]["block_tokens"].append(max(config["mrc"]["block_tokens"]) * 2)
    first = next(iter(config["plans"]))
    config["plans"][f"{first}_again"] = dict(config["plans"][first])
    hardware = config["ttft"]["hardware"]
    hardware["lab"]["configs"] = {**hardware["lab"]["configs"], "bigger": {"gpu_tokens": 50110, "cpu_tokens": 0}}
    hardware["budgets"]["cpu_gib"].append(max(hardware["budgets"]["cpu_gib"]) * 2)
    hardware["simulate"]["budgets"]["cpu_blocks"].append(max(hardware["simulate"]["budgets"]["cpu_blocks"]) * 2)
    hardware["simulate"]["load"]["speedup"].append(max(hardware["simulate"]["load"]["speedup"]) + 0.25)
    return config


@pytest.mark.parametrize("config", [load_config(), extended(load_config())], ids=["config.yaml", "extended"])
def test_every_job_line_is_its_rules_spelled_command(config):
    seen = set()
    for _, rule, wildcards in commands.jobs(config):
        line = " ".join(commands.LINES[rule](config, **wildcards).split())
        assert re.fullmatch(pattern(SPELLED[rule], wildcards), line), (rule, SPELLED[rule], line)
        seen.add(rule)
    assert seen == set(commands.LINES)


def test_every_rule_with_values_from_config_has_its_job_lines():
    """A rule whose command takes a value from config (a params or wildcards field) is checked before any job."""
    with_values = {rule for rule, template in SPELLED.items() if re.search(r"\{(params|wildcards)\.", template)}
    assert with_values == set(commands.LINES)


def test_the_pattern_tells_a_changed_flag():
    """The check can fail: a rule spelling a flag the line builder does not is caught."""
    config = load_config()
    _, rule, wildcards = next(job for job in commands.jobs(config) if job[1] == "replay_point")
    line = commands.LINES[rule](config, **wildcards)
    assert re.fullmatch(pattern(SPELLED[rule], wildcards), " ".join(line.split()))
    changed = SPELLED[rule].replace("--cpu-tokens", "--cpu-room")
    assert not re.fullmatch(pattern(changed, wildcards), " ".join(line.split()))
