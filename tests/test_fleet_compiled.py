"""A fleet of the compiled loop (kvlab/simulator/compiled_fleet.py) against the fleet of Python engines it mirrors
(kvlab/simulator/fleet.py TimedFleet, itself checked against the engine alone in tests/test_fleet_clock.py): under
every router, on random workloads through small pools (chunked prefills, preemptions, refusals, a CPU tier per
instance), the trace read a few requests at a time and the instances' rooms grown from one request, the same
instance for each request and the same figures per instance, bit for bit; and ``kvlab simulate --instances`` prints
the same bytes whichever engine serves it."""

import math
from unittest import mock

import pytest
from conftest import ROOT, kvlab
from engine_reference import ToyCost
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine import chains
from test_simulate_compiled import STATS, Columnar

from kvlab.cache.write_policies import make_cache
from kvlab.fleet.routers import ROUTERS
from kvlab.serving.vllm import rules_for
from kvlab.simulator import compiled, compiled_fleet
from kvlab.simulator.arrivals import Arrivals
from kvlab.simulator.events import Simulator
from kvlab.simulator.fleet import TimedFleet
from kvlab.simulator.pool import BlockPool
from kvlab.simulator.settings import EngineSettings
from kvlab.util.errors import KvlabError
from kvlab.util.memory import Footprint, Meter

MODEL = ["--model-config", str(ROOT / "models/Llama-3.1-8B-Instruct/config.json"), "--gpu-system", "h100_sxm"]


def fleets(workload, instances, router, block, gpu, cpu, order, arrivals, engine):
    """Each fleet's figures (the instance of each request, each instance's stats and rows), or the one line it
    stopped with: the Python engines', then the compiled loops'."""
    rules = rules_for("0.24.0")  # the newest whose CPU tier the compiled loop serves
    tail_first = order == "tail-first"
    results = []
    for fast in (False, True):
        cost = ToyCost(block)
        try:
            if fast:
                fleet = compiled_fleet.CompiledFleet(
                    engine, rules, gpu, cpu, block, tail_first, ROUTERS[router](), instances
                )
                each = fleet.run(workload, arrivals, cost, Meter(2**60, Footprint()), True)
            else:
                simulators = []
                for _ in range(instances):
                    offload = make_cache("write-through", 0, cpu * block, block, eviction_order=order) if cpu else None
                    pool = BlockPool(gpu, block)
                    simulators.append(Simulator(pool, cost, offload, engine, True, tail_first=tail_first, rules=rules))
                fleet = TimedFleet(simulators, ROUTERS[router](), engine)
                each = fleet.run(arrivals.open_times(workload.timed()))
        except KvlabError as error:
            results.append(str(error))
            continue
        figures = [{name: getattr(stats, name) for name in STATS} for stats in each]
        rows = [repr(row) for row in sorted(fleet.merged(each).rows)]
        results.append((fleet.chosen, figures, rows))
    return results


@settings(max_examples=150, deadline=None)
@given(chains(whole_blocks=False), st.integers(1, 4), st.sampled_from(sorted(ROUTERS)), st.data())
def test_compiled_fleet_equals_the_python_fleet(workload, instances, router, data):
    """Random requests over a tree of prefixes, close together, through instances of small pools with or without a
    CPU tier each: every request goes to the same instance, and every instance's figures and every request's row
    are the Python fleet's exactly (floats by their repr), or both stop with the same line."""
    block, requests = workload
    needs = [math.ceil((tokens + output - 1) / block) for _, tokens, output in requests]
    largest = max(len(keys) for keys, _, _ in requests)
    gpu = data.draw(st.integers(max(1, max(needs) - 1), max(needs) + 2 * len(requests)), label="gpu blocks")
    cpu = data.draw(st.sampled_from([0, 1, largest, 3 * largest]), label="cpu blocks")
    order = data.draw(st.sampled_from(["tail-first", "head-first"]), label="eviction order")
    gaps = data.draw(st.lists(st.floats(0, 0.05), min_size=len(requests), max_size=len(requests)), label="gaps")
    stamps = [sum(gaps[: number + 1]) for number in range(len(requests))]
    rate = data.draw(st.sampled_from([None, 40.0]), label="rate")
    arrivals = Arrivals(rate=rate, seed=data.draw(st.integers(0, 3))) if rate else Arrivals(speedup=0.5)
    engine = EngineSettings(
        max_num_batched_tokens=data.draw(st.sampled_from([block, 3 * block + 1, 8192]), label="budget"),
        max_num_seqs=data.draw(st.integers(1, 4), label="max seqs"),
        chunked_prefill=data.draw(st.booleans(), label="chunked"),
        generated_blocks=data.draw(st.sampled_from(["keep", "drop"]), label="generated"),
        output_tokens=data.draw(st.sampled_from([None, None, 1, 7]), label="output tokens"),
    )
    columnar = Columnar(requests, stamps, data.draw(st.integers(1, 5), label="batch"), 1.0)
    room = data.draw(st.sampled_from([1, compiled_fleet.FIRST_ROOM]), label="first room")
    with mock.patch.object(compiled_fleet, "FIRST_ROOM", room):
        reference, fast = fleets(columnar, instances, router, block, gpu, cpu, order, arrivals, engine)
    assert fast == reference


@pytest.mark.parametrize("router", ["llm-d", "dynamo"])
def test_kvlab_simulate_prints_the_same_bytes_from_either_fleet(tmp_path, monkeypatch, router):
    """``kvlab simulate --instances 3`` with a CPU tier each, its JSON and per-request table, from the compiled
    fleet and from the Python one (the compiled loop turned off)."""
    lines = [
        f'{{"timestamp": {10 * n}, "input_length": {1030 + 11 * n}, "output_length": {5 + n % 4}, '
        f'"hash_ids": [{n % 3}, {n % 5 + 10}, {n}]}}'
        for n in range(40)
    ]
    (tmp_path / "trace.jsonl").write_text("\n".join(lines) + "\n")
    common = ["simulate", "--workload", "mooncake", "--trace", "trace.jsonl", *MODEL, "--block-tokens", "64"]
    common += ["--gpu-blocks", "40", "--cpu-blocks", "60", "--instances", "3", "--router", router, "--speedup", "8"]
    outputs, served = [], []
    real = compiled_fleet.CompiledFleet.run
    monkeypatch.setattr(compiled_fleet.CompiledFleet, "run", lambda *args: served.append(1) or real(*args))
    for turned_off in (False, True):
        if turned_off:
            monkeypatch.setattr(compiled, "compiles", lambda *args: False)
        result = kvlab(*common, "--per-request", f"rows{turned_off}.csv", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        outputs.append((result.stdout, (tmp_path / f"rows{turned_off}.csv").read_text()))
    assert served == [1]  # the compiled fleet served the first run only
    assert outputs[0] == outputs[1]


def test_a_fleet_the_compiled_loops_cannot_hold_goes_to_the_python_engines(tmp_path, monkeypatch):
    """Where the compiled fleet's state would pass ``max_memory``, the run is served by the Python engines (a router
    that has not seen the first attempt): the same output."""
    import kvlab as api

    lines = [
        f'{{"timestamp": {n}, "input_length": 600, "output_length": 3, "hash_ids": [{n % 2}, {n}]}}' for n in range(30)
    ]
    (tmp_path / "trace.jsonl").write_text("\n".join(lines) + "\n")
    flags = {"model_config": MODEL[1], "gpu_system": "h100_sxm", "speedup": 4, "instances": 2, "router": "dynamo"}
    flags.update(workload="mooncake", trace=str(tmp_path / "trace.jsonl"), block_tokens=64, gpu_blocks=40)
    expected = api.simulate(**flags, cpu_blocks=20).text
    monkeypatch.setattr(compiled_fleet, "FLEET_REQUEST_BYTES", 2**40)  # a terabyte a request
    attempts = []
    real = compiled_fleet.CompiledFleet.run
    monkeypatch.setattr(compiled_fleet.CompiledFleet, "run", lambda *args: attempts.append(1) or real(*args))
    assert api.simulate(**flags, cpu_blocks=20, max_memory="4G").text == expected
    assert attempts == [1]


def test_a_large_fleet_counts_one_trace_reader(tmp_path):
    """100 instances of a small pool each fit 1 GiB: the memory rule counts each instance's tiers, and the trace's
    reader once (it counted one reader per instance, 100 MB each, before)."""
    import kvlab as api

    lines = [
        f'{{"timestamp": {n}, "input_length": 600, "output_length": 3, "hash_ids": [{n % 2}, {n}]}}' for n in range(30)
    ]
    (tmp_path / "trace.jsonl").write_text("\n".join(lines) + "\n")
    flags = {"model_config": MODEL[1], "gpu_system": "h100_sxm", "speedup": 4, "instances": 100, "router": "llm-d"}
    flags.update(workload="mooncake", trace=str(tmp_path / "trace.jsonl"), block_tokens=64, gpu_blocks=200)
    figures = api.simulate(**flags, cpu_blocks=100, max_memory="1G").to_dict()
    assert figures["requests"] == 30 and len(figures["instances"]) == 100


@pytest.mark.parametrize("instances", [1, 3])
@pytest.mark.parametrize("compiled_loop", [True, False])
def test_an_empty_prompt_stops_the_run_naming_the_request(tmp_path, monkeypatch, instances, compiled_loop):
    """A trace's request of no prompt tokens (vLLM refuses it; no step could price it) stops ``kvlab simulate`` in
    one line naming it, from either engine, one instance or a fleet."""
    lines = [
        f'{{"timestamp": {n}, "input_length": 600, "output_length": 3, "hash_ids": [{n % 2}, {n}]}}' for n in range(5)
    ]
    lines[2] = '{"timestamp": 2, "input_length": 0, "output_length": 3, "hash_ids": []}'
    (tmp_path / "trace.jsonl").write_text("\n".join(lines) + "\n")
    if not compiled_loop:
        monkeypatch.setattr(compiled, "compiles", lambda *args: False)
    common = ["simulate", "--workload", "mooncake", "--trace", "trace.jsonl", *MODEL, "--block-tokens", "64"]
    done = kvlab(*common, "--gpu-blocks", "40", "--instances", instances, "--speedup", "4", cwd=tmp_path)
    line = "request 3: its prompt is empty (input length 0), which vLLM refuses"
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"kvlab simulate: error: {line}\n")
