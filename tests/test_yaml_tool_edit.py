"""A config.yaml rewritten by a YAML tool keeps the suite green (tracker issue 22, item 15).

A user appends a value to five grids with a config tool -- ``yaml.safe_dump`` of the parsed file: no comments, the
anchors renamed, every list in block style -- then commits. In a scratch copy of the project (a git checkout of its
own, as a clone is), that config must pass ``kvlab config``, the whole suite must collect, and the tests that take
their cases from config.yaml (its keys' lines, its grids, the values they append) must pass against the copy's
config: each test in the copy finds its ROOT from its own file, so it reads the copy's config.yaml.

The new values are ones the lab already uses in another grid (the rooms a test is likeliest to name as "new"),
each one its grid does not hold; the copy's results are the committed ones (no pipeline run: the tests chosen
read the config; the values the planner's append tests add are checked to be new and valid against it).
"""

import json
import os
import subprocess
import sys

import pytest
import yaml
from conftest import kvlab, load_config, scratch_copy

pytestmark = pytest.mark.pipeline

HANG = 600  # seconds: a guard against a hang, not a measure of speed

# The tests that read config.yaml (its text's lines, its grids) and need no result of the new grid values.
CONFIG_CASES = [
    "unknown-top-key",
    "unknown-nested-key",
    "negative-room",
    "negative-room-tool-written",
    "nan",
    "inf",
    "minus-inf",
    "1e999",
    "invalid-yaml-tab",
    "duplicate-key",
    "yte-header",
    "yte-header-late",
    "alias-bomb-in-config",
]
CONFIG_TESTS = [
    *(f"tests/test_bad_input.py::test_bad_input[config:{case}]" for case in CONFIG_CASES),
    "tests/test_bad_input.py::test_config_yaml_of_the_repository_is_good",
    "tests/test_pipeline.py::test_committed_config_is_valid",
    "tests/test_pipeline.py::test_point_args_do_not_depend_on_the_rest_of_the_grid",
    "tests/test_plots.py::test_ttft_setting_is_the_example_measurements_by_yaml_reference",
    "tests/test_planner_pipeline.py::test_all_targets_include_every_curve_and_plan",
    "tests/test_planner_pipeline.py::test_mrc_args_of_one_curve_do_not_depend_on_the_rest_of_the_grid",
    "tests/test_planner_pipeline.py::test_the_values_the_append_tests_add_are_new_and_valid",
]


def at(config, path):
    for key in path:
        config = config[key]
    return config


def new_value(grid, others):
    """The first of ``others`` (another grid's values) that ``grid`` does not hold, else one past its largest."""
    return next((value for value in others if value not in grid), max(grid) + 1)


def extensions(config):
    """``{grid path: the value appended to it}``, each value one its grid does not hold."""
    sources = {
        ("sweeps", "cliff", "grid"): at(config, ("replay", "rooms", "gpu_tokens")),
        ("sweeps", "cpu_cliff", "grid"): at(config, ("policies", "cpu_cliff", "grid")),
        ("replay", "rooms", "gpu_tokens"): at(config, ("sweeps", "cliff", "grid")),
        ("mrc", "gpu_tokens"): at(config, ("sweeps", "cliff", "grid")),
        ("ttft", "budgets", "cpu_gib"): [max(at(config, ("ttft", "budgets", "cpu_gib"))) + 0.25],
    }
    return {path: new_value(at(config, path), others) for path, others in sources.items()}


def tool_written(folder):
    """The folder's config.yaml with the five grids extended, rewritten as a YAML tool writes it; the values."""
    path = folder / "config.yaml"
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    added = extensions(config)
    for grid, value in added.items():
        assert value not in at(config, grid)
        at(config, grid).append(value)
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return added


def pytest_in(folder, *args, basetemp, path=()):
    """pytest with this interpreter in ``folder`` (its own tests, conftest and config), untouched by this run's
    pytest settings and workers; ``path``: folders put first on its PYTHONPATH (a plugin's)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST_")}
    if path:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, path), *filter(None, [env.get("PYTHONPATH")])])
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", f"--basetemp={basetemp}"]
    return subprocess.run(
        [*argv, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=HANG, check=False
    )


# A plugin for the copy's pytest: the whole suite is collected (every test module imported, every case drawn from
# the copy's config), every test id it collected is written to COLLECTED, and all but the chosen tests (CHOSEN)
# are deselected, so that they run in that same process: one start-up and one collection, where a
# `--collect-only` run and a run of the chosen tests by id took two of each (about 5 s of CPU).
SELECT_PLUGIN = """
import json
import pytest

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    chosen = set(json.loads(open({chosen!r}, encoding="utf-8").read()))
    with open({collected!r}, "w", encoding="utf-8") as out:
        json.dump([item.nodeid for item in items], out)
    config.hook.pytest_deselected(items=[item for item in items if item.nodeid not in chosen])
    items[:] = [item for item in items if item.nodeid in chosen]
"""


def select_plugin(folder):
    """The plugin's folder (for PYTHONPATH) and the files it reads and writes."""
    folder.mkdir()
    chosen, collected = folder / "chosen.json", folder / "collected.json"
    chosen.write_text(json.dumps(CONFIG_TESTS), encoding="utf-8")
    plugin = SELECT_PLUGIN.format(chosen=str(chosen), collected=str(collected))
    (folder / "kvlab_select_plugin.py").write_text(plugin, encoding="utf-8")
    return folder, collected


def test_a_config_rewritten_by_a_yaml_tool_keeps_the_suite_green(tmp_path):
    copy = scratch_copy(tmp_path / "copy", results=True, link_code=False)  # the copy's tests import its kvlab/
    added = tool_written(copy)
    committed = load_config()
    assert len(added) == 5 and all(value not in at(committed, grid) for grid, value in added.items())
    text = (copy / "config.yaml").read_text(encoding="utf-8")
    assert "&measured_passes" not in text  # the tool's layout (its own anchor names), not the committed one
    for command in (["init", "-q"], ["add", "-A"]):  # committed, as the user does: a checkout of its own
        subprocess.run(["git", *command], cwd=copy, check=True, capture_output=True, timeout=HANG)

    done = kvlab("config", "config.yaml", cwd=copy)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), done.stderr

    plugin, collected_file = select_plugin(tmp_path / "plugin")
    ran = pytest_in(copy, "-x", "-q", "-p", "kvlab_select_plugin", "tests", basetemp=tmp_path / "run", path=[plugin])
    # the whole suite collected: a module that fails to import (or a case that fails to draw) is an error, and
    # pytest then stops before any test with a status that is not 0
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-3000:]
    collected = json.loads(collected_file.read_text(encoding="utf-8"))
    assert len(collected) > len(CONFIG_TESTS) and set(CONFIG_TESTS) <= set(collected)
    # the copy's tests are parametrized from the copy's config: a curve at the new GPU room is among them
    room, block = added[("mrc", "gpu_tokens")], committed["mrc"]["block_tokens"][0]
    curve = f"test_mrc_args_reproduce_the_committed_curve_and_cliffs[lab-{block}-{room}]"
    assert any(nodeid.endswith(f"::{curve}") for nodeid in collected), curve
    # and the chosen tests, each once, passed against the copy's config
    assert f"{len(CONFIG_TESTS)} passed" in ran.stdout.splitlines()[-1], ran.stdout[-3000:]
