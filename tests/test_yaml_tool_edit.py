"""A config.yaml rewritten by a YAML tool stays a working config (tracker issue 22, item 15).

A user appends a value to five grids with a config tool -- ``yaml.safe_dump`` of the parsed file: no comments, the
anchors renamed, every list in block style -- then commits. In a scratch copy of the project, that config must pass
``kvlab config``, and the pipeline's dry run must plan the jobs of the new values. The
suite's tests take their cases from the parsed config.yaml (never its text), so they follow such a file too.

The new values are ones the lab already uses in another grid (the rooms a test is likeliest to name as "new"),
each one its grid does not hold.
"""

import pytest
import yaml
from conftest import kvlab, load_config, scratch_copy, tool

from kvlab.workflow import paths

pytestmark = pytest.mark.pipeline


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


def test_a_config_rewritten_by_a_yaml_tool_is_checked_and_plans_the_new_points(tmp_path):
    copy = scratch_copy(tmp_path / "copy", results=True)
    added = tool_written(copy)
    committed = load_config()
    assert len(added) == 5 and all(value not in at(committed, grid) for grid, value in added.items())
    text = (copy / "config.yaml").read_text(encoding="utf-8")
    assert "&measured_passes" not in text  # the tool's layout (its own anchor names), not the committed one

    done = kvlab("config", "config.yaml", cwd=copy)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", ""), done.stderr

    planned = tool("snakemake", "-n", "-p", "--cores", "1", cwd=copy)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    for point in (paths.sweep_point_path("cliff", added[("sweeps", "cliff", "grid")]),):
        assert f"output: {point}" in planned.stdout, planned.stdout[-3000:]
