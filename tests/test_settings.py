"""Settings declared once (kvlab/util/settings.py): every declared field of a command's settings is a flag of the
command and a keyword of its Python function, and a bad value is refused by both in one and the same line (argparse's
words). The fields are read from the declarations, never listed here."""

import ast
import dataclasses
import inspect
import re

import pytest
from conftest import KVLAB, command_parsers, kvlab

from kvlab import api
from kvlab.api.curves import CurveSettings
from kvlab.api.plans import PlanSettings
from kvlab.api.replays import FLEET_GROUP, SERVER_SETTINGS, ReplaySettings
from kvlab.api.sizes import SizeSettings
from kvlab.latency.hardware import HardwareSettings
from kvlab.simulator.arrivals import Arrivals
from kvlab.simulator.settings import EngineSettings
from kvlab.util.errors import SettingError
from kvlab.util.settings import flag as flag_of

MODEL = "models/Llama-3.1-8B-Instruct/config.json"
FLEET = tuple(found.name for found in dataclasses.fields(ReplaySettings) if found.metadata["group"] == FLEET_GROUP)
LAB = {"workload": "lab", "docs": 2, "tokens": 10}
SIMULATE = {**LAB, "model_config": MODEL, "gpu_system": "h100_sxm", "latency_source": "roofline"}
SIMULATE |= {"gpu_blocks": 64, "output_tokens": 2}
# (command, function, a setting that runs, the declarations it takes, the fields it leaves to other commands)
COMMANDS = [
    (["replay"], api.replay, {**LAB, "gpu_tokens": 100}, ReplaySettings, ()),
    (["mrc"], api.curve, LAB, CurveSettings, ()),
    (["plan"], api.plan, {**LAB, "model_config": MODEL, "gpu_tokens": 100}, PlanSettings, ()),
    (["size"], api.size, {"model_config": MODEL}, SizeSettings, ()),
    (["simulate"], api.simulate, SIMULATE, EngineSettings, ()),
    (["simulate"], api.simulate, SIMULATE, Arrivals, ()),
    (["simulate"], api.simulate, SIMULATE, HardwareSettings, ("disk_medium", "disk_gbps", "disk_us")),
    (
        ["simulate"],
        api.simulate,
        SIMULATE,
        ReplaySettings,
        ("disk_tokens", "disk_eviction", *SERVER_SETTINGS, *FLEET),
    ),
    (["ttft", "predict"], api.ttft_predict, {**LAB, "gpu_tokens": 100, "model_config": MODEL}, HardwareSettings, ()),
]


def declared(settings, leave):
    """The fields of ``settings`` a command takes: declared ones (a field of metadata) it does not leave out."""
    return [found for found in dataclasses.fields(settings) if found.metadata and found.name not in leave]


def flag(name):
    return "--" + name.replace("_", "-")


def arguments(settings):
    argv = []
    for key, value in settings.items():
        argv += [flag(key)] if value is True else [flag(key), str(value)]
    return argv


@pytest.mark.parametrize(("command", "function", "base", "settings", "leave"), COMMANDS)
def test_every_declared_setting_is_a_flag_and_a_keyword(command, function, base, settings, leave):
    shown = kvlab(*command, "--help").stdout
    taken = inspect.signature(function).parameters
    for found in declared(settings, leave):
        assert f"{flag(found.name)} " in shown or f"{flag(found.name)}\n" in shown, (command, found.name)
        keyword = found.name in taken or any(p.kind is p.VAR_KEYWORD for p in taken.values())
        assert keyword, (function.__name__, found.name)


def cases():
    for command, function, base, settings, leave in COMMANDS:
        for found in declared(settings, leave):
            if found.metadata["switch"] is None:  # a switch takes no value to refuse
                yield pytest.param(command, function, base, found.name, id=f"{' '.join(command)}:{found.name}")


@pytest.mark.parametrize(("command", "function", "base", "name"), list(cases()))
def test_a_bad_value_is_one_line_in_the_command_and_the_function_alike(command, function, base, name):
    """An empty value: no converter or choice of a declared setting takes it."""
    given = {**base, name: ""}
    with pytest.raises(SettingError) as raised:
        function(**given)
    done = kvlab(*command, *arguments(given))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"kvlab {' '.join(command)}: error: {raised.value}\n"
    assert str(raised.value).startswith(f"argument {flag(name)}: "), str(raised.value)


# --- every argument of every command is made from a declaration ------------------------------------------------

OPTION = re.compile(r"^  (?:-h, )?(--[a-z][a-z0-9-]*)(?:, (--no-[a-z0-9-]+))?", re.MULTILINE)


def derived(found):
    """The flags a declared field gives: its name with dashes (or its declared spelling), and a switch's negation."""
    spelled = flag_of(found.name, found.metadata)
    return [spelled, "--no-" + spelled[2:]] if found.metadata["switch"] == "both" else [spelled]


@pytest.mark.parametrize("prog", sorted(command_parsers()))
def test_every_flag_of_every_command_is_derived_from_a_declaration(prog):
    """What --help lists is exactly what the command's declared fields give: no flag made by hand."""
    parser = command_parsers()[prog]
    shown = parser.format_help()
    listed = {name for pair in OPTION.findall(shown) for name in pair if name} - {"--help"}
    options = [found for spelled, found in parser.declared if not found.metadata["positional"]]
    assert listed == {name for found in options for name in derived(found)}
    section = shown.partition("positional arguments:\n")[2].split("\n\n")[0]
    positionals = ["{" if name.startswith("{") else name for name in re.findall(r"^  (\S+)", section, flags=re.M)]
    declared = [found for _, found in parser.declared if found.metadata["positional"]]
    expected = ["{" if found.metadata["choices"] else found.name for found in declared]
    assert positionals == expected + ["{"] * bool(parser.subcommands)  # a choice shows as {a,b,...}


def test_no_argument_is_made_outside_the_one_builder():
    """``add_argument`` is called in kvlab/cli/base.py's ``add_arguments`` only, and in the lab's stand-alone
    scripts (they import nothing of kvlab: the handout's standard-library files)."""
    found = []
    for path in sorted(KVLAB.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
        if not any("kvlab" in (getattr(node, "module", None) or "") for node in imports):
            continue  # stand-alone
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.Module)):
                continue
            calls = [node for node in ast.iter_child_nodes(function) if not isinstance(node, ast.FunctionDef)]
            for node in (inner for call in calls for inner in ast.walk(call)):
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                    name = getattr(function, "name", "<module>")
                    found.append(f"{path.relative_to(KVLAB.parent)}:{node.lineno} ({name})")
    assert {entry.split(":")[0] for entry in found} == {"kvlab/cli/base.py"}, found
    assert all(entry.endswith("(add_arguments)") for entry in found), found
