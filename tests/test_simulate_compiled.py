"""The compiled event loop (kvlab/simulator/kernel.py, driven by kvlab/simulator/compiled.py) against the Python
engine it mirrors (kvlab/simulator/events.py, itself checked against a brute-force model in tests/test_engine.py): the
same figures, per request and per run, bit for bit, on random workloads through small pools (chunked prefills,
preemptions, refusals, the CPU tier's loads and stores, generated blocks kept or dropped), the trace read a few
requests at a time; and ``kvlab simulate`` prints the same bytes whichever engine serves it."""

import json
import math

import numpy as np
import pytest
from engine_reference import ToyCost
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine import chains, trace_head

from kvlab.cache.write_policies import make_cache
from kvlab.serving.vllm import RULES, rules_for
from kvlab.simulator import compiled
from kvlab.simulator.arrivals import Arrivals
from kvlab.simulator.events import Simulator
from kvlab.simulator.pool import BlockPool
from kvlab.simulator.settings import EngineSettings
from kvlab.util.errors import KvlabError
from kvlab.util.memory import Footprint, Meter
from kvlab.workloads import Timed
from kvlab.workloads.stream import Columns

STATS = ("requests", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "output_tokens", "preemptions", "steps")
STATS += ("refused", "mixed_steps", "lookups", "busy", "copied", "first", "last")


class Columnar:
    """A trace held in memory, read ``batch`` requests at a time, as a TraceWorkload gives it to either engine."""

    split = 1
    read_fraction = None

    def __init__(self, requests, stamps, batch, seconds):
        self.requests, self.stamps, self.batch, self.seconds = requests, stamps, batch, seconds

    def timed(self):
        for (keys, tokens, output), stamp in zip(self.requests, self.stamps, strict=True):
            yield Timed(keys, tokens, stamp * self.seconds, output)

    def timed_columns(self):
        for start in range(0, len(self.requests), self.batch):
            part = self.requests[start : start + self.batch]
            counts = np.array([len(keys) for keys, _, _ in part], dtype=np.int64)
            keys = np.array([key for keys, _, _ in part for key in keys], dtype=np.int64)
            labels = np.array(self.stamps[start : start + self.batch])
            tokens = np.array([tokens for _, tokens, _ in part], dtype=np.int64)
            columns = Columns(np.zeros(len(part), dtype=np.int64), labels, tokens, counts, keys)
            yield columns, [output for _, _, output in part]


def both(workload, block, gpu, cpu, order, arrivals, engine, rules=None):
    """Each engine's stats, or the one line it stopped with, under vLLM's ``rules`` (default: 0.24.0's, the newest
    whose CPU tier the compiled loop serves)."""
    rules = rules or rules_for("0.24.0")
    results = []
    for fast in (False, True):
        cost = ToyCost(block)
        try:
            if fast:
                meter = Meter(2**60, Footprint())
                stats = compiled.run(
                    workload, engine, rules, gpu, cpu, block, cost, arrivals, True, order == "tail-first", meter
                )
            else:
                offload = make_cache("write-through", 0, cpu * block, block, eviction_order=order) if cpu else None
                pool = BlockPool(gpu, block)
                simulator = Simulator(pool, cost, offload, engine, True, tail_first=order == "tail-first", rules=rules)
                stats = simulator.run(arrivals.open_times(workload.timed()))
        except KvlabError as error:
            results.append(str(error))
            continue
        figures = {name: getattr(stats, name) for name in STATS}
        times = {name: [repr(value) for value in getattr(stats, name)] for name in ("ttft_ms", "tpot_ms", "e2e_ms")}
        rows = [repr(row) for row in sorted(stats.rows)]
        results.append((figures, times, [repr(value) for value in stats.queue_ms], rows))
    return results


@settings(max_examples=200, deadline=None)
@given(chains(whole_blocks=False), st.data())
def test_compiled_loop_equals_the_python_engine(workload, data):
    """Random requests over a tree of prefixes, close together through a small pool with or without a CPU tier: the
    compiled loop's every figure equals the Python engine's exactly (floats by their repr), or both stop with the
    same line."""
    block, requests = workload
    needs = [math.ceil((tokens + output - 1) / block) for _, tokens, output in requests]
    largest = max(len(keys) for keys, _, _ in requests)
    gpu = data.draw(st.integers(max(1, max(needs) - 1), max(needs) + 3 * len(requests)), label="gpu blocks")
    cpu = data.draw(st.sampled_from([0, 1, largest, largest + 3, 3 * largest]), label="cpu blocks")
    order = data.draw(st.sampled_from(["tail-first", "head-first"]), label="eviction order")
    gaps = data.draw(st.lists(st.floats(0, 0.05), min_size=len(requests), max_size=len(requests)), label="gaps")
    stamps = [sum(gaps[: number + 1]) for number in range(len(requests))]
    rate = data.draw(st.sampled_from([None, 20.0, 400.0]), label="rate")
    arrivals = Arrivals(rate=rate, seed=data.draw(st.integers(0, 3))) if rate else Arrivals(speedup=0.5)
    engine = EngineSettings(
        max_num_batched_tokens=data.draw(st.sampled_from([block, 3 * block + 1, 64, 8192]), label="budget"),
        max_num_seqs=data.draw(st.integers(1, 6), label="max seqs"),
        chunked_prefill=data.draw(st.booleans(), label="chunked"),
        generated_blocks=data.draw(st.sampled_from(["keep", "drop"]), label="generated"),
        output_tokens=data.draw(st.sampled_from([None, None, 1, 7]), label="output tokens"),
    )
    columnar = Columnar(requests, stamps, data.draw(st.integers(1, 5), label="batch"), 1.0)
    versions = ["0.14.0", "0.24.0"] if cpu else [rules.version for rules in RULES]
    rules = rules_for(data.draw(st.sampled_from(versions), label="engine version"))
    reference, fast = both(columnar, block, gpu, cpu, order, arrivals, engine, rules)
    assert fast == reference


def test_compiled_loop_grows_past_its_first_arrays():
    """Many requests in flight at once (more than the arrays' first 1,024 slots, the events that many loads and
    stores take, the stored keys' buffer): still equal to the Python engine."""
    rng = np.random.default_rng(5)
    requests = []
    for number in range(3000):
        document = int(rng.integers(0, 40))
        count = int(rng.integers(1, 12))
        keys = [document * 100 + j for j in range(count)] + [10**6 + number]
        requests.append((keys, 16 * len(keys) - 3, int(rng.integers(1, 40))))
    stamps = [number * 1e-4 for number in range(len(requests))]
    engine = EngineSettings(max_num_seqs=64, max_num_batched_tokens=512)
    fast, reference = both(Columnar(requests, stamps, 700, 1.0), 16, 400, 300, "tail-first", Arrivals(), engine)
    assert fast == reference
    assert fast[0]["preemptions"] > 0 and fast[0]["copied"]["h2d"] > 0


def test_a_clock_that_goes_back_stops_either_engine_alike():
    requests = [([1, 2], 40, 3), ([1, 3], 40, 3), ([4], 20, 2)]
    workload = Columnar(requests, [0.0, 2.0, 1.5], 2, 1.0)
    results = both(workload, 16, 20, 0, "tail-first", Arrivals(), EngineSettings())
    assert results[0] == results[1] == "request 3: its timestamp goes back (1.5 s after 2.0 s)"


@pytest.mark.parametrize(
    ("requests", "block", "gpu", "engine", "line"),
    [
        (  # found by a seeded search: seven requests at once through five blocks of four tokens, two on the CPU
            [([0, 11], 8, 7), ([30, 31], 8, 7), ([10, 11], 8, 14), ([30, 41, 42], 12, 7), ([30, 51], 8, 5)]
            + [([30, 41, 2], 12, 4), ([0], 4, 1)],
            4,
            5,
            EngineSettings(max_num_batched_tokens=64, max_num_seqs=4, generated_blocks="drop"),
            "the engine is stuck: requests wait for blocks that nothing will free",
        ),
        (  # and five requests through seven blocks of two (and two on the CPU), preempting each other
            [([20, 51, 52, 53], 8, 6), ([0], 2, 3), ([0, 41, 32, 3, 34], 10, 7), ([40, 31, 12, 33, 24], 10, 5)]
            + [([10, 41, 2], 6, 3)],
            2,
            7,
            EngineSettings(max_num_batched_tokens=2, max_num_seqs=6, generated_blocks="drop"),
            "the engine thrashes: request 3 was preempted 1001 times",
        ),
    ],
)
def test_an_engine_that_cannot_go_on_stops_either_way_alike(requests, block, gpu, engine, line):
    workload = Columnar(requests, [0.0] * len(requests), 2, 1.0)
    # vLLM 0.14's admission (a first chunk fitting), under which the search found them
    results = both(workload, block, gpu, 2, "tail-first", Arrivals(), engine, rules_for("0.14.0"))
    assert results[0] == results[1] and results[0].startswith(line)


def test_no_output_lengths_stops_either_engine_alike():
    workload = Columnar([([1, 2], 40, None)], [0.0], 1, 1.0)
    results = both(workload, 16, 20, 0, "tail-first", Arrivals(), EngineSettings())
    assert results[0] == results[1] == "this workload has no output lengths: give --output-tokens"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """The conversation trace's first 400 requests."""
    return trace_head(tmp_path_factory, 400)


@pytest.mark.parametrize(
    "flags",
    [
        {"block_tokens": 64, "gpu_blocks": 1500, "cpu_blocks": 6000, "speedup": 0.05},
        {"block_tokens": 512, "gpu_blocks": 200, "cpu_tokens": 400_000, "rate": 3.0, "generated_blocks": "drop"},
        {"block_tokens": 128, "gpu_blocks": 900, "speedup": 0.2, "eviction_order": "head-first", "max_num_seqs": 8},
    ],
)
def test_simulate_prints_the_same_whichever_engine(trace, monkeypatch, flags):
    """``kvlab.simulate`` on the conversation trace's head, priced by the measured database: the JSON, the
    per-request table and the percentiles are the same bytes from the compiled loop and from the Python engine."""
    import kvlab

    model = {"model_config": "models/Llama-3.1-8B-Instruct/config.json", "gpu_system": "h100_sxm"}
    outputs = []
    for fast in (True, False):
        if not fast:
            monkeypatch.setattr(compiled, "compiles", lambda *args: False)
        result = kvlab.simulate(
            workload="mooncake", trace=str(trace), per_request=True, percentiles=True, **model, **flags
        )
        outputs.append((result.text, result.per_request, result.percentiles))
    assert outputs[0] == outputs[1]
    document = json.loads(outputs[0][0])
    assert document["requests"] + document["refused"] == 400 and document["steps"] > document["requests"] > 300


@pytest.mark.parametrize(
    ("settings", "served"),
    [
        ({}, True),
        ({"scheduler": "sglang"}, False),
        ({"clients": 4}, False),
        ({"write_policy": "write-back", "cpu_blocks": 100}, False),
        ({"write_policy": "selective", "cpu_blocks": 100}, False),
        ({"touch_cpu_on_gpu_hit": True, "cpu_blocks": 100}, False),
        ({"write_policy": "write-back", "cpu_blocks": 0}, True),
        ({"cpu_blocks": 100, "engine_version": "0.24.0"}, True),  # kvlab's write-through before vLLM 0.33
        ({"cpu_blocks": 100, "engine_version": "0.33.0"}, False),  # vLLM's OffloadingConnector
        ({"workload": "long_doc_qa"}, False),
    ],
)
def test_the_compiled_loop_serves_what_it_models(trace, monkeypatch, settings, served):
    """Which engine serves a run: the compiled loop exactly where it models the settings (a trace, vLLM's scheduler,
    open-loop arrivals, a CPU tier written through before vLLM 0.33), the Python engine elsewhere."""
    import kvlab

    calls = []
    real = compiled.run
    monkeypatch.setattr(compiled, "run", lambda *args: calls.append(1) or real(*args))
    settings = dict(settings)
    workload = settings.pop("workload", "mooncake")
    source = {"trace": str(trace)} if workload == "mooncake" else {"num_documents": 2, "output_tokens": 4}
    arrivals = {} if "clients" in settings or workload != "mooncake" else {"speedup": 0.5}
    if workload != "mooncake" and "clients" not in settings:
        arrivals = {"rate": 1.0}
    kvlab.simulate(
        workload=workload,
        model_config="models/Llama-3.1-8B-Instruct/config.json",
        gpu_system="h100_sxm",
        latency_source="roofline",
        gpu_blocks=3000,
        block_tokens=512,
        **source,
        **arrivals,
        **settings,
    )
    assert bool(calls) == served


def test_a_run_the_compiled_loop_cannot_hold_goes_to_the_python_engine(trace, monkeypatch):
    """Where the compiled loop's state (per distinct block) would pass ``max_memory``, the run is served by the Python
    engine, which holds only what is in flight: the same output; from standard input, which cannot be read twice,
    the one-line stop instead."""
    import kvlab
    from kvlab.util.memory import MemoryLimitError

    flags = {"model_config": "models/Llama-3.1-8B-Instruct/config.json", "gpu_system": "h100_sxm", "speedup": 0.5}
    flags.update(workload="mooncake", trace=str(trace), block_tokens=512, gpu_blocks=300, cpu_blocks=600)
    expected = kvlab.simulate(**flags).text
    attempts = []
    real = compiled.run

    def heavy(*args):
        attempts.append(1)
        monkeypatch.setattr(compiled, "FOOTPRINT", compiled.Footprint(request=2**40))  # a terabyte a request
        return real(*args)

    monkeypatch.setattr(compiled, "run", heavy)
    assert kvlab.simulate(**flags, max_memory="4G").text == expected
    assert attempts == [1]
    monkeypatch.setattr("sys.stdin", open(trace))  # noqa: SIM115 (closed with the test's process)
    with pytest.raises(MemoryLimitError, match="more than --max-memory"):
        kvlab.simulate(**{**flags, "trace": "-"}, max_memory="4G")
