"""--max-memory judged by counts (kvlab/util/memory.py): every metered command stops, in one line and before writing
anything, exactly when its projection passes the limit; a projection grows with the workload; and a compiled
replay's projection covers the arrays it really allocates, so a footprint set too low fails here (the resident
memory itself is bench/memory_footprint.py's: too noisy for a test)."""

import json
import math
import random

import pytest
from conftest import ROOT, kvlab
from hypothesis import given
from hypothesis import strategies as st

from kvlab.cache.compiled import FOOTPRINT, CompiledLRU
from kvlab.cli.policies import TABLE_FOOTPRINT
from kvlab.cli.ttft import budgets_footprint
from kvlab.curves.mrc import FOOTPRINT as MRC_FOOTPRINT
from kvlab.curves.mrc import GENERAL
from kvlab.loop import replay
from kvlab.util import memory
from kvlab.util.memory import Footprint, MemoryLimitError, Meter
from kvlab.workloads import LabWorkload, MooncakeWorkload, dense

# Priced from the hardware (a fitted model prices only the setting it was fitted in); the roofline: no database.
HARDWARE = ("--gpu-system", "h100_sxm", "--engine", "vllm", "--latency-source", "roofline")
MODEL_CONFIG = ROOT / "models" / "Qwen2.5-7B-Instruct" / "config.json"
COMMANDS = ["replay", "mrc", "plan", "policies table", "ttft budgets"]


def write_trace(path, requests, seed=0, most_blocks=30, share=0.7):
    """A Mooncake trace of ``requests`` requests, each extending a recent one's prefix with chance ``share``;
    ``(accesses, distinct blocks)``."""
    rng = random.Random(seed)
    recent, fresh, accesses = [], 0, 0
    with open(path, "w") as out:
        for number in range(requests):
            blocks = rng.randint(1, most_blocks)
            shared = []
            if recent and rng.random() < share:
                parent = rng.choice(recent)
                shared = parent[: min(rng.randint(1, len(parent)), blocks)]
            ids = shared + list(range(fresh, fresh + blocks - len(shared)))
            fresh += blocks - len(shared)
            tokens = 512 * (blocks - 1) + rng.randint(1, 512)
            out.write(json.dumps({"timestamp": number, "input_length": tokens, "output_length": 1, "hash_ids": ids}))
            out.write("\n")
            recent = [*recent[-99:], ids]
            accesses += blocks
    return accesses, fresh


def arguments(command, trace, folder):
    """The command's arguments on ``trace``, writing its outputs in ``folder`` (where it has any)."""
    workload = ["--workload", "mooncake", "--trace", trace]
    plan = ["--model-config", MODEL_CONFIG, "--gpu-tokens", 20 * 512]
    return {
        "replay": ["replay", *workload, "--gpu-tokens", 20 * 512, "--per-request", folder / "rows.csv"],
        "mrc": ["mrc", *workload, "--curve", folder / "curve.csv"],
        "plan": ["plan", *workload, *plan],
        "policies table": [
            *("policies", "table", *workload, "--gpu-tokens", 20 * 512, "--cpu-tokens", 200 * 512),
            *("--block-tokens", 512, "--write-policies", "write-through", "--evictions", "lru"),
            *("--out", folder / "table.csv"),
        ],
        "ttft budgets": [
            *("ttft", "budgets", *HARDWARE, *workload, *plan),
            *("--cpu-gib-grid", "1,4", "--out", folder / "budgets.csv"),
        ],
    }[command]


def projected(monkeypatch, argv):
    """The run of ``kvlab ARGV`` and the largest total its meters projected (under an unbounded limit)."""
    meters = []
    init = Meter.__init__

    def register(self, limit, footprint):
        init(self, limit, footprint)
        meters.append(self)

    with monkeypatch.context() as patch:
        patch.setattr(Meter, "__init__", register)
        done = kvlab(*argv, "--max-memory", 2**50)
    assert done.returncode == 0, done.stderr
    assert meters, "the command made no meter"
    return max(meter.projected for meter in meters)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """A trace of one reader's batch (so the meter checks once, on all of it)."""
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    write_trace(path, 600)
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_stops_exactly_past_its_projection_in_one_line_and_writes_nothing(
    command, trace, tmp_path, monkeypatch
):
    """A byte under the projection stops it, before any output; at the projection it runs: judged by counts."""
    argv = arguments(command, trace, tmp_path)
    need = math.ceil(projected(monkeypatch, argv))
    for path in list(tmp_path.iterdir()):
        path.unlink()
    done = kvlab(*argv, "--max-memory", need - 1)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"kvlab {command}: error: this workload would need about ")
    assert f"more than --max-memory {memory.gib(need - 1)}" in done.stderr
    assert list(tmp_path.iterdir()) == []
    assert kvlab(*argv, "--max-memory", need).returncode == 0


@pytest.mark.parametrize("command", ["policies table", "ttft budgets"])
def test_the_new_flag_takes_amounts_as_the_others_do(command, trace, tmp_path):
    """The same flag as replay's, mrc's and plan's (kvlab/cli/flags.py): a bad amount is a usage error."""
    done = kvlab(*arguments(command, trace, tmp_path), "--max-memory", "lots")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "argument --max-memory: expected an amount of memory" in done.stderr
    assert list(tmp_path.iterdir()) == []


def declared():
    """Every footprint a command declares (kvlab/cli/replay.py's by its engine and table)."""
    from kvlab.cache.interface import CacheSettings
    from kvlab.cli.replay import footprint

    references = (CacheSettings(gpu_tokens=0, block_tokens=1, gpu_eviction=policy).build() for policy in ("lru", "opt"))
    engines = [CompiledLRU(0, 0, 1), *references]  # compiled, reference, offline reference
    found = [footprint(engine, rows) for engine in engines for rows in (False, True)]
    assert len(set(found)) == len(found)  # each engine's own
    for workload in (LabWorkload(256, docs=4, tokens=256, passes=["fwd"]), MooncakeWorkload(trace="unread.jsonl")):
        found += [budgets_footprint(workload, policy, {}) for policy in ("write-through", "write-back")]
    return [*found, FOOTPRINT, MRC_FOOTPRINT, GENERAL, TABLE_FOOTPRINT]


COUNTS = st.tuples(st.integers(0, 10**9), st.integers(0, 10**8), st.integers(0, 10**9))


@given(COUNTS, COUNTS, st.floats(0.001, 1), st.floats(0.001, 1))
def test_a_projection_grows_with_the_workload_and_with_what_is_left_to_read(small, more, fraction, less):
    """Every declared footprint: more read, or the same read from less of the input, never projects less."""
    accesses, requests, keys = small
    bigger = (accesses + more[0], requests + more[1], keys + more[2])
    lower = min(fraction, less)
    for footprint in declared():
        assert min(footprint.access, footprint.request, footprint.key, footprint.fixed) >= 0
        meter = Meter(math.inf, footprint)
        assert meter.project(*small, fraction) <= meter.project(*bigger, fraction)
        assert meter.project(*small, fraction) <= meter.project(*small, lower)  # less read: more to come
        assert meter.project(*small) >= footprint.fixed


def test_a_projection_grows_with_the_trace_end_to_end(tmp_path, monkeypatch):
    """The same trace cut shorter projects no more, command by command."""
    whole = tmp_path / "whole.jsonl"
    write_trace(whole, 600)
    lines = whole.read_text().splitlines(keepends=True)
    needs = {}
    for size in (50, 200, 600):
        folder = tmp_path / str(size)
        folder.mkdir()
        path = folder / "t.jsonl"
        path.write_text("".join(lines[:size]))
        for command in ("replay", "policies table", "ttft budgets"):
            needs.setdefault(command, []).append(projected(monkeypatch, arguments(command, path, folder)))
    for command, sizes in needs.items():
        assert sizes == sorted(sizes) and sizes[0] < sizes[-1], command


def test_the_meter_refuses_before_the_replay_serves_anything(tmp_path):
    """A stop comes at the first check, before the cache has served a request."""
    path = tmp_path / "t.jsonl"
    write_trace(path, 300)
    workload = MooncakeWorkload(trace=str(path))
    cache = CompiledLRU(512 * 20, 0, 512)
    with pytest.raises(MemoryLimitError, match="more than --max-memory"):
        replay(workload, cache, meter=Meter(FOOTPRINT.fixed, FOOTPRINT))
    assert cache.state.shape[1] == 0 and cache.used.sum() == 0


def allocated(monkeypatch, run):
    """``run()``'s result and the most bytes the compiled replay's arrays held at once: the hash tables of dense
    ids and the tiers' states, each while it doubles (the old array beside the new) and at the end."""
    interners, caches, most = [], [], [0]

    def held():
        return sum(interner.nbytes for interner in interners) + sum(cache.nbytes for cache in caches)

    rehash, reserve, make = dense._rehash, CompiledLRU.reserve, dense.Interner.__init__

    def rehashed(*args):  # the old table is still the interner's: both count
        grown = rehash(*args)
        most[0] = max(most[0], held() + grown[0].nbytes + grown[1].nbytes)
        return grown

    def reserved(self, keys):
        if self not in caches:
            caches.append(self)
        old = self.state
        reserve(self, keys)
        if self.state is not old:
            most[0] = max(most[0], held() + old.nbytes)

    def interner(self, *args):
        make(self, *args)
        interners.append(self)

    monkeypatch.setattr(dense, "_rehash", rehashed)
    monkeypatch.setattr(CompiledLRU, "reserve", reserved)
    monkeypatch.setattr(dense.Interner, "__init__", interner)
    result = run()
    return result, max(most[0], held())


@pytest.mark.parametrize("requests, share", [(300, 0.7), (12000, 0.0), (40000, 0.7)])
def test_the_compiled_replay_projects_at_least_the_arrays_it_allocates(requests, share, tmp_path, monkeypatch):
    """Traces of one batch and of several, keys fresh or shared; the footprint the compiled engine declares."""
    path = tmp_path / "t.jsonl"
    write_trace(path, requests, share=share)
    workload = MooncakeWorkload(trace=str(path))
    meter = Meter(math.inf, FOOTPRINT)
    cache = CompiledLRU(512 * 20, 512 * 200, 512)
    _, held = allocated(monkeypatch, lambda: replay(workload, cache, meter=meter))
    assert held > 0
    assert meter.projected >= held
    if requests >= 1000:  # the test tells: issue 22's footprint, the state's 24 bytes a key and 24 for the table
        assert Meter(math.inf, Footprint(key=24 + 24)).project(*counts(workload)) < held


def counts(workload):
    """``(accesses, requests, distinct blocks)`` of ``workload``."""
    accesses = requests = keys = 0
    for columns in workload.batches():
        accesses += len(columns.keys)
        requests += len(columns.counts)
        keys = max(keys, int(columns.keys.max()) + 1 if len(columns.keys) else 0)
    return accesses, requests, keys


def test_kvlab_replay_projects_at_least_the_arrays_it_allocates(monkeypatch):
    """The committed trace: one batch of 288,500 ids, whose hash table outgrows 24 bytes a key."""
    argv = ["replay", "--workload", "mooncake", "--trace", ROOT / "data/traces/mooncake/conversation_trace.jsonl.gz"]
    need, held = allocated(monkeypatch, lambda: projected(monkeypatch, [*argv, "--gpu-tokens", 20 * 512]))
    assert need >= held
