"""A plan's figures as data and a grid of plans as one table (issue 36, items 16 and 17): every figure a plan
prints is a column of ``kvlab.plan(...).to_frame()``, named by its keys in ``to_dict()``, and ``kvlab plan
--format table`` over a grid of budgets answers with one row per point and the lines they share once."""

import numbers
import re
import shlex

import pytest
from conftest import ROOT, kvlab

from kvlab import api

LLAMA = "models/Llama-3.1-8B-Instruct/config.json"
# a tiny workload with output lengths and a clock (what --load simulates), priced by the roofline (no database)
WORKLOAD = {"workload": "multi_round_qa", "num_users": 2, "num_rounds": 2, "time": 60}
PRICED = {"engine": "vllm", "gpu_system": "h100_sxm", "latency_source": "roofline"}
KEYWORDS = {**WORKLOAD, "model_config": LLAMA, "gpu_tokens": 4000, **PRICED, "load": "rate=2"}


def flags(**keywords):
    """The command's flags for the API's keywords (a list: its values comma-separated)."""
    found = []
    for key, value in keywords.items():
        found += [f"--{key.replace('_', '-')}", ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return found


def numbers_in(value, path=()):
    """``{column: figure}`` of every number in a plan's JSON: the cache's by its key, the rest by its path of keys
    joined with dots (a round by its name)."""
    found = {}
    if isinstance(value, dict):
        for key, inner in value.items():
            found |= numbers_in(inner, path if path == () and key == "cache" else (*path, key))
    elif isinstance(value, list):
        for inner in value:
            if isinstance(inner, dict) and "round" in inner:
                found |= numbers_in({k: v for k, v in inner.items() if k != "round"}, (*path, inner["round"]))
    elif isinstance(value, numbers.Number) and not isinstance(value, bool):
        found[".".join(path)] = value
    return found


@pytest.fixture(scope="module")
def grid():
    """A grid of CPU budgets, priced and under load."""
    return api.plan(**KEYWORDS, cpu_gib=[0, 0.5])


def test_every_figure_a_plan_prints_is_a_column(grid):
    """Each point's row holds every number of its JSON (its TTFT per round and in all, its time under load, its
    engine's setting, its budgets), under the keys that lead to it, with the same value."""
    frame = grid.to_frame()
    assert len(frame) == len(grid)
    for (_, row), plan in zip(frame.iterrows(), grid, strict=True):
        printed = numbers_in(plan.to_dict())
        assert {"ttft.all.p50_ms", "load.ttft_ms.p99", "load.requests_per_s", "rounds.round2.cpu_hit_tokens"} <= set(
            printed
        )
        assert printed.keys() <= set(frame.columns)
        assert {column: row[column] for column in printed} == printed


def test_one_plans_frame_has_its_time_under_load_and_its_disk(grid):
    """A single plan's frame (one row per round) carries the whole run's time under load on its ``all`` row, and
    a disk tier's tokens per round; its ``summary()`` is its row of a grid's frame."""
    plan = grid[1]
    frame = plan.to_frame()
    document = plan.to_dict()
    under = {column: value for column, value in numbers_in(document).items() if column.startswith("load.")}
    assert under and {column: frame.loc[0, column] for column in under} == under
    assert numbers_in(document).items() <= plan.summary().items()
    with_disk = api.plan(**WORKLOAD, model_config=LLAMA, gpu_tokens=4000, cpu_gib=0.5, disk_gib=1)
    rows = [with_disk.to_dict(), *with_disk.to_dict()["rounds"]]
    assert with_disk.to_frame()["disk_hit_tokens"].tolist() == [row["disk_hit_tokens"] for row in rows]


GRIDS = {  # a grid of kvlab plan's budgets: its flags as the API's keywords (a list: the points)
    "per node": {"cpu_gib_per_node": ["0", "8", "20"], "tp": 2, **PRICED, "engine": "lmcache", "load": "rate=2"},
    "per GPU": {"cpu_gib": ["0", "1"], **PRICED, "load": "rate=2", "target_hit_ratio": 0.5},
    "CPU x disk": {"cpu_gib": ["0", "0.5"], "disk_gib": ["0.5", "1"], **PRICED, "engine": "lmcache"},
}


def table_rows(text):
    """The grid's table: its headings and its rows of cells (columns apart by two spaces or more)."""
    lines = text.splitlines()
    start = lines.index("") + 1
    end = lines.index("", start)
    heads, *rows = (re.split(r" {2,}", line.strip()) for line in lines[start:end])
    return heads, rows


@pytest.mark.parametrize("name", GRIDS)
def test_a_grid_is_one_table_and_its_shared_lines_once(name):
    """``kvlab plan --format table`` over a grid: one row per point whose figures are the API's frame's, and each
    line every point's own table has (the model, the budgets, the engine's fixed setting, what priced the TTFT, the
    load) said once, not once per point."""
    from kvlab.sizing.plan import GRID_COLUMNS

    setting = {**WORKLOAD, "model_config": LLAMA, "gpu_tokens": 4000, **GRIDS[name]}
    done = kvlab("plan", *flags(**setting), "--format", "table", cwd=ROOT)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    grid = api.plan(**setting)
    frame = grid.to_frame()
    heads, rows = table_rows(done.stdout)
    assert len(rows) == len(grid) == len(frame) > 1
    named = dict(GRID_COLUMNS)
    assert {"from GPU", "from CPU", "hit ratio", "TTFT p50 ms", "TTFT p99 ms"} <= set(heads)
    for row, (_, expected), plan in zip(rows, frame.iterrows(), grid, strict=True):
        cells = dict(zip(heads, row, strict=True))
        assert {head: float(cells[head]) for head in cells if head in named} == {
            head: float(expected[named[head]]) for head in cells if head in named
        }
        engine = plan.to_dict().get("engine")
        if "setting" in cells:  # the part of the engine's setting that changes, from its flags and exports
            given = {*engine["flags"], *(f"{key}={value}" for key, value in engine["environment"].items())}
            words = {word for item in cells["setting"].split("; ") for word in shlex.split(item)}
            assert words - {"export"} <= given
            assert set(cells["setting"].split("; ")) <= set(expected["engine.setting"].split("; "))  # the whole
    if "load" in setting:
        assert {"load TTFT p50 ms", "load TTFT p99 ms", "requests/s", "output tokens/s"} <= set(heads)
    singles = []
    for point in grid.points:
        one = {**setting, **dict(zip(grid.axes, point, strict=True))}
        alone = kvlab("plan", *flags(**one), "--format", "table", cwd=ROOT)
        singles.append(alone.stdout.splitlines())
    rounds = {row["round"] for row in grid[0].to_dict()["rounds"]} | {"all", "round"}
    shared = [line for line in singles[0] if line.strip() and all(line in lines for lines in singles[1:])]
    shared = [line for line in shared if line.split()[0].rstrip(":") not in rounds]  # the rounds: in the JSON
    assert any(line.startswith("model:") for line in shared) and any("source:" in line for line in shared)
    printed = done.stdout.splitlines()
    for line in shared:  # a block's heading, the model, the budgets once; a line of figures at most (the table's)
        said = sum(text.startswith(line.rstrip(":")) for text in printed)
        assert said == 1 if line.endswith(":") or line.startswith(("model:", "full reuse", "  source:")) else said <= 1
