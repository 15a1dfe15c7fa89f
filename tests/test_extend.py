"""Extending any grid is safe: in a scratch copy with a small config, a run, then every list of config.yaml given
a new valid value and every map a new entry, found by walking the config (nothing listed by hand but the lists
that already hold every valid value); a second run, without Snakemake's metadata, then gives byte for byte what a
run from scratch of the extended config gives. The figures are left out of the three runs (they read the
artifacts, grid-free; the session's regeneration draws them): the runs are of every other artifact."""

import gzip
import shutil
import subprocess
import sys

import pytest
import yaml
from conftest import ROOT, load_config, results_tree, run_pipeline, scratch_copy

from kvlab.cache.eviction import EVICTION_POLICIES
from kvlab.cache.write_policies import WRITE_POLICIES
from kvlab.fleet.routers import ROUTERS
from kvlab.latency.systems import system_names
from kvlab.workflow import checks, paths
from kvlab.workflow.config import validate

pytestmark = pytest.mark.pipeline

EXEMPT = {"policies.write_policies", "policies.evictions"}  # they hold every valid value already
TRACE = "data/traces/mooncake/conversation_trace.jsonl.gz"
TRACE_LINES = 200  # of the real trace, in the copies: the same format, a fraction of the work


def shrink(config):
    """Every list of numbers cut to its first value, in place (shared parts stay shared): the config's shape
    with the fewest jobs."""
    for _, node in list(walk(config)):
        if isinstance(node, list) and node and all(isinstance(item, (int, float)) for item in node):
            del node[1:]
    return config


def valid(config):
    try:
        validate(config)
        checks.check_config(config)
    except ValueError:
        return False
    return True


def walk(node, path=()):
    """``(path, node)`` of every list and dict in the config."""
    if isinstance(node, (dict, list)):
        yield path, node
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in children:
        yield from walk(value, (*path, key))


def copy(node):
    """A deep copy that keeps the config's shared (aliased) parts shared, as YAML does."""
    return yaml.load(yaml.dump(node, Dumper=yaml.CSafeDumper), Loader=yaml.CSafeLoader)  # libyaml: the same, faster


def at(config, path):
    for key in path:
        config = config[key]
    return config


def candidates(items, pool):
    """New values to try for a list: a larger number (and a doubled one: a block size of a trace must stay a
    multiple of its own), or a name from the pool."""
    numbers = [item for item in items if isinstance(item, (int, float)) and not isinstance(item, bool)]
    if numbers and len(numbers) == len(items):
        top = max(numbers)
        return [top + 0.25] if isinstance(top, float) else [top + 1, 2 * top, top + 512]
    return pool  # a name already there may be valid again (a pass read twice): the schema says


def extensions(config):
    """The extended config, and the dotted paths of the maps and lists extended and of those left as they are.
    Each trial is made in the extended config itself and undone if it is not valid (valid() reads a config and
    changes nothing): what a trial on a copy of it would decide, without a copy per trial (about 300 of them)."""
    extended = copy(config)
    maps, homes = {}, {}
    for path, node in list(walk(config)):
        if isinstance(node, dict) and node:
            name = "x_" + "_".join(map(str, path))  # a new entry: a copy of the first, under a name of its own
            undo = put(at(extended, path), name, copy(next(iter(node.values()))))
            if valid(extended):
                maps[".".join(map(str, path))] = name
                homes[name] = path
            else:
                undo()
    pool = ["rev", "fwd", *WRITE_POLICIES, *EVICTION_POLICIES, *ROUTERS, *system_names(), *maps.values()]
    lists, exempt = [], []
    for path, node in list(walk(extended)):
        if not isinstance(node, list):
            continue
        name = ".".join(map(str, path))
        for value in candidates(node, pool):
            node.append(value)  # node is the extended config's own list (and its aliases')
            if valid(extended):
                lists.append(name)
                break
            node.pop()
        else:
            (lists if named_anew(extended, path, maps, homes) else exempt).append(name)
    return extended, maps, lists, exempt


def named_anew(extended, path, maps, homes):
    """Extend the list at ``path`` with the name of a new map entry made for it (a copy of each entry in turn),
    when no name the map already has fits (a file re-dumped with sorted keys puts a trace workload first, and a
    copy of it may not fit a list of lab-sized blocks): whether one fits."""
    names = at(extended, path)
    for first, home in homes.items():
        entries = at(extended, home)
        for index, template in enumerate(list(entries.values())):
            name = f"{first}_{index}"
            undo = put(entries, name, copy(template))
            names.append(name)
            if valid(extended):
                return True
            names.pop()
            undo()
    return False


def put(mapping, key, value):
    """``mapping[key] = value``; the function that undoes it (the entry it replaced back in its place, or none)."""
    if key not in mapping:
        mapping[key] = value
        return lambda: mapping.pop(key)
    previous, mapping[key] = mapping[key], value
    return lambda: mapping.__setitem__(key, previous)


def targets(config):
    """Every artifact of ``config`` but the figures."""
    figures = set(map(paths.plot_path, paths.plot_inputs(config)))
    return [path for path in paths.all_targets(config) if path not in figures]


def write_config(folder, config):
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")


def small_trace(folder):
    """The copy's conversation trace cut to its first lines (written as the config names it)."""
    with gzip.open(ROOT / TRACE, "rt", encoding="utf-8") as handle:
        head = "".join(handle.readline() for _ in range(TRACE_LINES))
    (folder / TRACE).write_bytes(gzip.compress(head.encode("utf-8"), mtime=0))


@pytest.fixture(scope="module")
def extended(tmp_path_factory, monkeypatch_module):
    """``(incremental folder, from-scratch folder, maps, lists, exempt)``: the from-scratch run of the extended
    config goes on beside the two runs of the incremental folder."""
    work = tmp_path_factory.mktemp("extend")
    first, scratch = scratch_copy(work / "incremental"), scratch_copy(work / "scratch")
    for folder in (first, scratch):
        small_trace(folder)
    monkeypatch_module.chdir(first)  # the config's paths are relative to its folder
    small = shrink(load_config())
    assert valid(small)
    bigger, maps, lists, exempt = extensions(small)
    write_config(scratch, bigger)
    beside = subprocess.Popen(
        [sys.executable, "-m", "kvlab", "run", "--", "--cores", "1", *targets(bigger)],
        cwd=scratch,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        write_config(first, small)
        done = run_pipeline(first, *targets(small))
        assert done.returncode == 0, done.stdout + done.stderr
        write_config(first, bigger)
        shutil.rmtree(first / ".snakemake")  # no metadata: a fresh clone's second run decides the same way
        done = run_pipeline(first, *targets(bigger))
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        output = beside.communicate(timeout=600)[0]
    assert beside.returncode == 0, output
    return first, scratch, maps, lists, exempt


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_every_list_but_the_exempt_and_every_map_is_extended(extended):
    _, _, maps, lists, exempt = extended
    assert set(exempt) == EXEMPT
    assert {"runs", "sweeps", "replay.workloads", "plans", "example_measurement.passes"} <= set(maps)
    assert {"sweeps.cliff.grid", "replay.rooms.gpu_tokens", "mrc.block_tokens", "ttft.budgets.cpu_gib"} <= set(lists)


def test_the_extended_run_is_what_a_regeneration_makes(extended):
    first, scratch, *_ = extended
    assert results_tree(first) == results_tree(scratch)
    maps = extended[2]
    for new in (maps["runs"], maps["sweeps"]):
        assert (first / "results" / f"{new}.json").is_file()
