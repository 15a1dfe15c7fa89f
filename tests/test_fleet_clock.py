"""Many instances on one clock (kvlab/simulator/fleet.py, issue 39 part 2): one instance is the engine of today
request by request; under ``session`` routing of disjoint sessions the instances are N separate runs; at zero load
every router that needs no clock sends each request where the clockless fleet sends it and it is served the same
tokens per tier, and ``least-loaded`` is round-robin; the routers that read the load follow their rules; and
``kvlab simulate --instances`` says what each instance served, in figures that add up."""

import json
import math
import re

import pytest
from conftest import ROOT, kvlab
from engine_reference import ToyCost
from hypothesis import given, settings
from hypothesis import strategies as st
from test_engine import chains, trace_head

from kvlab import simulate as api_simulate
from kvlab.cache.write_policies import CacheSettings, make_cache
from kvlab.fleet import CLOCKLESS, CPU_SCOPES, build
from kvlab.fleet.routers import ROUTERS
from kvlab.fleet.routers.session import session_of
from kvlab.loop import replay, rows_of
from kvlab.simulator.events import Simulator
from kvlab.simulator.fleet import RemoteKV, SharedHosts, TimedFleet
from kvlab.simulator.pool import BlockPool
from kvlab.simulator.settings import EngineSettings
from kvlab.util.errors import KvlabError, SettingError
from kvlab.workloads import Request, Timed

MODEL = ["--model-config", str(ROOT / "models/Llama-3.1-8B-Instruct/config.json"), "--gpu-system", "h100_sxm"]


def simulator(block, gpu, cpu, **engine):
    offload = make_cache("write-through", 0, cpu * block, block) if cpu else None
    return Simulator(BlockPool(gpu, block), ToyCost(block), offload, EngineSettings(**engine), True)


def timed(requests, times):
    return [
        (when, Timed(keys, tokens, None, output)) for when, (keys, tokens, output) in zip(times, requests, strict=True)
    ]


def rows(stats):
    """Per request, by its number in the run: its figures (times to 1e-9 ms, counts exactly)."""
    return {row[0]: tuple(_figure(value) for value in row[1:]) for row in stats}


def _figure(value):
    if isinstance(value, float):
        return "nan" if math.isnan(value) else round(value, 9)
    return value


def fleet_run(requests, times, block, gpu, cpu, instances, router, scope="private", **engine):
    """A fleet of ``instances`` engines of ``gpu`` and ``cpu`` blocks each; with ``scope`` shared, one CPU tier of
    their rooms, another host's block read over the network (as ``kvlab simulate --cpu-scope shared`` runs it)."""
    engine_settings = EngineSettings(**engine)
    simulators = [simulator(block, gpu, cpu, **engine) for _ in range(instances)]
    if scope == "shared" and cpu:
        shared, hosts = make_cache("write-through", 0, cpu * instances * block, block), SharedHosts(1000)
        for index, one in enumerate(simulators):
            one.offload, one.hosts, one.host = shared, hosts, index
    fleet = TimedFleet(simulators, ROUTERS[router](), engine_settings)
    each = fleet.run(timed(requests, times))
    return fleet, fleet.merged(each)


def gaps(data, count, widest):
    steps = data.draw(st.lists(st.floats(0, widest), min_size=count, max_size=count), label="gaps")
    return [sum(steps[: number + 1]) for number in range(count)]


@settings(max_examples=60, deadline=None)
@given(chains(whole_blocks=False), st.data())
def test_one_instance_is_the_engine_request_by_request(workload, data):
    """A fleet of one, under load (chunked prefills, preemptions, a CPU tier), whatever the router: every request's
    times, tokens per tier and preemptions are those of the engine alone."""
    block, requests = workload
    needs = [math.ceil((tokens + output - 1) / block) for _, tokens, output in requests]
    gpu = data.draw(st.integers(max(needs), max(needs) + 3 * len(requests)), label="gpu blocks")
    cpu = data.draw(st.sampled_from([0, max(needs), 4 * max(needs)]), label="cpu blocks")
    times = gaps(data, len(requests), 0.05)
    router = data.draw(st.sampled_from(sorted(ROUTERS)), label="router")
    budget = data.draw(st.sampled_from([block, 3 * block + 1, 8192]), label="budget")
    try:
        alone = simulator(block, gpu, cpu, max_num_batched_tokens=budget).run(timed(requests, times))
    except KvlabError as error:  # stuck (vLLM's deadlock with a CPU tier), or thrashing: the fleet says the same
        with pytest.raises(KvlabError, match=re.escape(str(error))):
            fleet_run(requests, times, block, gpu, cpu, 1, router, max_num_batched_tokens=budget)
        return
    fleet, merged = fleet_run(requests, times, block, gpu, cpu, 1, router, max_num_batched_tokens=budget)
    assert rows(merged.rows) == rows(alone.rows)
    assert (merged.steps, merged.preemptions, merged.copied) == (alone.steps, alone.preemptions, alone.copied)
    assert fleet.chosen == [0] * len(requests)


@settings(max_examples=60, deadline=None)
@given(chains(whole_blocks=False), st.integers(2, 4), st.data())
def test_session_routing_of_disjoint_sessions_is_separate_runs(workload, instances, data):
    """Each request's session its own first block (sessions share no block): instance i serves exactly the sessions
    whose number is i modulo N, each request timed as in a run of those requests alone on one engine."""
    block, requests = workload
    sessions = data.draw(st.lists(st.integers(0, 5), min_size=len(requests), max_size=len(requests)), label="sessions")
    requests = [
        ([("session", session, key) for key in keys], tokens, output)
        for (keys, tokens, output), session in zip(requests, sessions, strict=True)
        if tokens >= block  # a session known by its first full block
    ]
    if not requests:
        return
    needs = [math.ceil((tokens + output - 1) / block) for _, tokens, output in requests]
    gpu = data.draw(st.integers(max(needs), max(needs) + 2 * len(requests)), label="gpu blocks")
    cpu = data.draw(st.sampled_from([0, 2 * max(needs)]), label="cpu blocks")
    times = gaps(data, len(requests), 0.05)
    alone = []
    for index in range(instances):
        mine = [number for number, (keys, _, _) in enumerate(requests) if session_of(keys) % instances == index]
        try:
            stats = simulator(block, gpu, cpu).run(timed([requests[n] for n in mine], [times[n] for n in mine]))
        except KvlabError as error:  # one instance stuck or thrashing: the fleet stops with its words
            with pytest.raises(KvlabError, match=re.escape(str(error))):
                fleet_run(requests, times, block, gpu, cpu, instances, "session")
            return
        alone.append((mine, stats))
    fleet, merged = fleet_run(requests, times, block, gpu, cpu, instances, "session")
    found = rows(merged.rows)
    for index, (mine, stats) in enumerate(alone):
        assert [number for number, chosen in enumerate(fleet.chosen) if chosen == index] == mine
        assert {mine[number]: row for number, row in rows(stats.rows).items()} == {n: found[n] for n in mine}


def zero_load(requests):
    """Whole-block prompts and a token (vLLM's hit ends a token short), one output token, far apart."""
    served = [(keys, len(keys) * block_of(requests) + 1, 1) for keys, _, _ in requests]
    return served, [number * 1e6 for number in range(len(requests))]


def block_of(requests):
    return requests[0][1] // max(1, len(requests[0][0]))


@settings(max_examples=60, deadline=None)
@given(chains(whole_blocks=True), st.integers(2, 4), st.data())
def test_at_zero_load_the_clockless_routers_are_the_fleet_replay(workload, instances, data):
    """Each request after the last one finished: under round-robin, session and prefix routing, with private CPU
    tiers or a shared one, every request goes to the instance ``kvlab replay --instances`` sends it to, and its
    instance serves it the same GPU and CPU tokens."""
    block, requests = workload
    largest = max(len(keys) for keys, _, _ in requests)
    gpu = data.draw(st.integers(largest, largest + 12), label="gpu blocks")
    cpu = data.draw(st.sampled_from([0, largest, 3 * largest]), label="cpu blocks")
    router = data.draw(st.sampled_from(CLOCKLESS), label="router")
    scope = data.draw(st.sampled_from(CPU_SCOPES), label="cpu scope")
    served = [(keys, tokens + 1, 1) for keys, tokens, _ in requests]
    times = [number * 1e6 for number in range(len(requests))]
    fleet, merged = fleet_run(served, times, block, gpu + 1, cpu, instances, router, scope, generated_blocks="drop")

    class Workload:
        rounds = ["all"]
        read_fraction = None

        def requests(self):
            return (Request(0, number, keys, tokens) for number, (keys, tokens, _) in enumerate(requests))

    chosen = CacheSettings(gpu_tokens=gpu * block, cpu_tokens=cpu * block, block_tokens=block)
    parts = []
    clockless = build(chosen, instances, router, scope)
    replay(Workload(), clockless, parts)
    assert fleet.chosen == clockless.chosen
    expected = [(gpu_tokens, cpu_tokens) for _, _, _, _, gpu_tokens, cpu_tokens in rows_of(parts)]
    found = rows(merged.rows)
    assert [found[number][7:9] for number in range(len(requests))] == expected


@settings(max_examples=30, deadline=None)
@given(chains(whole_blocks=False), st.integers(2, 5))
def test_at_zero_load_least_loaded_is_round_robin(workload, instances):
    """Nothing in flight when a request arrives and every pool empty of requests: the fewest in flight is every
    instance, and the tie goes to the one sent the fewest, the first among equals: round-robin."""
    block, requests = workload
    needs = max(math.ceil((tokens + output - 1) / block) for _, tokens, output in requests)
    times = [number * 1e6 for number in range(len(requests))]
    fleet, _ = fleet_run(requests, times, block, needs, 0, instances, "least-loaded")
    assert fleet.chosen == [number % instances for number in range(len(requests))]


def test_least_loaded_sends_a_burst_to_the_idle_instance():
    """Two long requests at once, then a third: the third goes to neither busy instance but the idle one."""
    requests = [([number * 100 + key for key in range(8)], 64, 50) for number in range(3)]
    fleet, _ = fleet_run(requests, [0.0, 0.0, 0.0001], 8, 64, 0, 3, "least-loaded")
    assert fleet.chosen == [0, 1, 2]


def test_the_prefix_aware_routers_follow_a_cached_prefix_until_the_load_outweighs_it():
    """A document read by requests far apart: llm-d (precise), dynamo and sglang send every read after the first to
    the instance that holds it; ``round-robin`` spreads them."""
    document = list(range(40))
    requests = [(document, 40 * 16 + 1, 1) for _ in range(6)]
    times = [number * 1e6 for number in range(6)]
    for router, expected in (("dynamo", [0] * 6), ("sglang", [0] * 6), ("round-robin", [0, 1, 2, 0, 1, 2])):
        fleet, _ = fleet_run(requests, times, 16, 100, 0, 3, router)
        assert fleet.chosen == expected, router
    settings_of = ROUTERS["llm-d"].Settings
    fleet = TimedFleet(
        [simulator(16, 100, 0) for _ in range(3)],
        ROUTERS["llm-d"](settings_of(llm_d_prefix_cache="precise")),
        EngineSettings(),
    )
    fleet.run(timed(requests, times))
    assert fleet.chosen == [0] * 6


def test_sglang_balances_when_the_load_is_out_of_balance():
    """SGLang router's thresholds: with an absolute threshold of 1 and a relative one of 1, three requests of one
    document at once go to 0 (nothing cached: the smallest tree), 1 (the load out of balance), then 0 (the load even
    again: the instance that got the document first)."""
    document = list(range(10))
    requests = [(document, 160, 200) for _ in range(3)]
    tight = ROUTERS["sglang"].Settings(sglang_balance_abs_threshold=0, sglang_balance_rel_threshold=1)
    fleet = TimedFleet([simulator(16, 100, 0) for _ in range(2)], ROUTERS["sglang"](tight), EngineSettings())
    fleet.run(timed(requests, [0.0, 0.0, 0.0]))
    assert fleet.chosen == [0, 1, 0]


def test_a_shared_tier_reads_another_hosts_blocks_over_the_network():
    """Two documents round-robin over two instances whose GPU holds one: a document stored by instance 0 and read by
    instance 1 crosses the network, priced by the NIC, before its copy to the GPU; instance 0's read of its own,
    evicted from its GPU by the other, does not."""
    first, other = list(range(4)), list(range(10, 14))
    requests = [(keys, 4 * 16 + 1, 1) for keys in (first, first, other, other, first)]
    fleet, merged = fleet_run(requests, [number * 1e6 for number in range(5)], 16, 5, 8, 2, "round-robin", "shared")
    assert fleet.chosen == [0, 1, 0, 1, 0]
    assert merged.copied["net"] == 8 and merged.copied["h2d"] == 12  # instance 1's two reads; and instance 0's own
    ttft = [row[3] for row in sorted(merged.rows)]
    assert ttft[1] - ttft[4] == pytest.approx(SharedHosts(1000).network_ms(4), rel=1e-4)  # (times of 10**6 s)


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    return trace_head(tmp_path_factory, 60)


@pytest.mark.parametrize("router", sorted(ROUTERS))
def test_simulate_instances_figures_add_up(head, router):
    """``kvlab.simulate(instances=3)``: each instance's requests and tokens per tier add up to the fleet's, and the
    per-request table's ``instance`` column counts each instance's requests."""
    rooms = {"block_tokens": 64, "cpu_blocks": 4000, "speedup": 4, "output_tokens": 8}
    result = api_simulate(**hardware(head), **rooms, instances=3, router=router, per_request=True)
    document = result.to_dict()
    assert document["fleet"]["instances"] == 3 and document["fleet"]["router"] == router
    each = result.instances_frame()
    for name in ("requests", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens"):
        assert each[name].sum() == document[name]
    frame = result.requests_frame()
    assert frame["instance"].value_counts().reindex(range(3), fill_value=0).tolist() == each["requests"].tolist()
    assert frame["request"].tolist() == list(range(document["requests"]))


def hardware(head):
    return {"workload": "mooncake", "trace": str(head), "model_config": MODEL[1], "gpu_system": "h100_sxm"}


def test_a_fleet_says_what_it_refuses(head):
    """One line, in the flag's words, from the command and the API alike."""
    flags = ["--workload", "mooncake", "--trace", str(head), *MODEL]
    for extra, words in (
        (
            ["--instances", "2", "--router", "dynamo", "--llm-d-queue-weight", "1"],
            "argument --llm-d-queue-weight: applies to --router llm-d only",
        ),
        (
            ["--prefill-instances", "1", "--decode-instances", "1", "--clients", "4"],
            "argument --clients: prefill apart from decode takes open arrivals",
        ),
        (
            ["--instances", "2", "--router", "llm-d", "--llm-d-kv-weight", "-1"],
            "argument --llm-d-kv-weight: expected a weight from 0 to 1000",
        ),
    ):
        result = kvlab("simulate", *flags, *extra)
        assert result.returncode != 0 and words in result.stderr and result.stderr.count("\n") == 1, result.stderr
        given = {name.lstrip("-").replace("-", "_"): value for name, value in zip(extra[::2], extra[1::2], strict=True)}
        with pytest.raises(SettingError, match=re.escape(words.split(": ", 1)[1][:30])):
            api_simulate(**hardware(head), **given)
    result = kvlab("replay", "--workload", "mooncake", "--trace", str(head), "--instances", "2", "--router", "llm-d")
    assert result.returncode == 2 and "invalid choice: 'llm-d'" in result.stderr


def test_the_llm_d_configuration_to_paste_carries_the_weights_simulated(head):
    """``kvlab simulate --router llm-d`` with weights of its own: the EndpointPickerConfig it gives is YAML whose one
    profile weighs each scorer as the simulation did, and names the precise scorer with the run's KV block."""
    import yaml

    flags = ["--workload", "mooncake", "--trace", str(head), *MODEL, "--block-tokens", "32", "--speedup", "4"]
    weights = ["--llm-d-queue-weight", "5", "--llm-d-kv-weight", "0.5", "--llm-d-prefix-cache", "precise"]
    result = kvlab("simulate", *flags, "--instances", "2", "--router", "llm-d", *weights)
    assert result.returncode == 0, result.stderr
    (paste,) = json.loads(result.stdout)["fleet"]["routers"]
    config = yaml.safe_load(paste["setting"])
    (profile,) = config["schedulingProfiles"]
    weighed = {plugin["pluginRef"]: plugin.get("weight") for plugin in profile["plugins"]}
    assert weighed == {
        "queue-scorer": 5,
        "kv-cache-utilization-scorer": 0.5,
        "precise-prefix-cache-scorer": 3,
        "max-score-picker": None,
    }
    (precise,) = [plugin for plugin in config["plugins"] if plugin["type"] == "precise-prefix-cache-scorer"]
    assert precise["parameters"]["tokenProcessorConfig"]["blockSize"] == 32


@pytest.mark.parametrize("router", CLOCKLESS)
def test_a_fleets_plan_gives_each_real_routers_setting(head, router):
    """``kvlab plan --instances --router R``: for each real router a setting to paste and the file it is read from;
    the table says them under the routing's name."""
    flags = ["--workload", "mooncake", "--trace", str(head), "--model-config", MODEL[1], "--gpu-tokens", "20000"]
    flags += ["--cpu-gib", "1", "--instances", "3", "--router", router]
    result = kvlab("plan", *flags)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)["router"]
    assert document["router"] == router and document["settings"]
    assert all(paste["setting"] and paste["source"] for paste in document["settings"])
    table = kvlab("plan", *flags, "--format", "table").stdout
    assert f"routers, for {router} routing:" in table
    assert all(paste["setting"].splitlines()[0] in table for paste in document["settings"])


def disaggregated(requests, times, block, gpu, prefill, decode, router="round-robin"):
    """Prefill apart from decode, as ``kvlab simulate --prefill-instances --decode-instances`` runs it: ``prefill``
    instances computing each prompt and its first token behind ``router``, then ``decode`` instances (the fewest in
    flight) reading its KV over the network, for the rest of its output."""
    decoders = [simulator(block, gpu, 0) for _ in range(decode)]
    for one in decoders:
        one.remote = RemoteKV(1000)
    decode_fleet = TimedFleet(decoders, ROUTERS["least-loaded"](), EngineSettings())
    prefills = [simulator(block, gpu, 0, output_tokens=1) for _ in range(prefill)]
    fleet = TimedFleet(prefills, ROUTERS[router](), EngineSettings(), decode_fleet)
    each = fleet.run(timed(requests, times))
    return fleet, fleet.merged(each), each


@settings(max_examples=40, deadline=None)
@given(chains(whole_blocks=False), st.integers(1, 3), st.integers(1, 3), st.data())
def test_prefill_apart_from_decode(workload, prefill, decode, data):
    """Under load: each request's queue, first token and tokens per tier are those of the prefill instances alone
    computing one token each (decode never holds prefill back); the rest of its output is its decode instance's,
    from its first token, so its end-to-end is the first token's time and the decode's; the network carries each
    decode instance's blocks read from the prefill (its hit beyond its own GPU), and nothing else."""
    block, requests = workload
    needs = [math.ceil((tokens + output - 1) / block) for _, tokens, output in requests]
    gpu = data.draw(st.integers(max(needs), max(needs) + 3 * len(requests)), label="gpu blocks")
    times = gaps(data, len(requests), 0.05)
    try:
        fleet, merged, each = disaggregated(requests, times, block, gpu, prefill, decode)
    except KvlabError as error:  # a decode instance stuck (its loads hold the blocks the queue's first needs)
        assert "stuck" in str(error) or "thrashes" in str(error)
        return
    _, alone = fleet_run(requests, times, block, gpu, 0, prefill, "round-robin", output_tokens=1)
    first = rows(alone.rows)
    decoded = {
        fleet.decode.numbers[index][row[0]]: row for index, stats in enumerate(each[prefill:]) for row in stats.rows
    }
    for number, row in rows(merged.rows).items():
        arrival, queue, ttft, tpot, e2e, tokens, output, gpu_hit, cpu_hit, _ = row
        assert (arrival, queue, ttft, tokens, gpu_hit, cpu_hit) == tuple(first[number][i] for i in (0, 1, 2, 5, 7, 8))
        assert output == requests[number][2]
        if output > 1:
            rest = decoded[number]
            assert rest[1] == pytest.approx(arrival + ttft / 1000, abs=1e-9)  # sent on at its first token
            assert e2e == pytest.approx(ttft + rest[5], abs=1e-6)
            assert tpot == pytest.approx(rest[5] / (output - 1), abs=1e-6)
        else:
            assert number not in decoded
    read = sum(stats.cpu_hit_tokens for stats in each[prefill:])
    assert merged.copied.get("net", 0) * block == read
    assert sum(stats.copied.get("h2d", 0) for stats in each[prefill:]) == 0


def test_a_decode_instance_reads_the_prompt_then_decodes():
    """One request of four blocks and a token, five output tokens, alone: the decode instance reads the four blocks
    over the network, computes the last token (vLLM's hit ends a token short), then decodes three more."""
    requests = [(list(range(4)), 4 * 16 + 1, 5)]
    fleet, merged, _ = disaggregated(requests, [0.0], 16, 10, 1, 1)
    ((_, _, _, ttft, tpot, e2e, _, output, _, _, _),) = merged.rows
    cost = ToyCost(16)
    rest = RemoteKV(1000).network_ms(4) + cost.prefill_ms(65, 64) + 3 * cost.decode_ms(1, 66)
    assert output == 5 and merged.copied["net"] == 4
    assert e2e - ttft == pytest.approx(rest, rel=1e-9) and tpot == pytest.approx(rest / 4, rel=1e-9)
    assert ttft == pytest.approx(cost.prefill_ms(65, 0), rel=1e-9)


def test_simulate_prefill_apart_from_decode_says_each_pool(head):
    """``kvlab.simulate(prefill_instances=2, decode_instances=3)``: each prefill instance's requests add up to the
    fleet's; the decode instances serve the requests of more than one output token; each row names both."""
    rooms = {"block_tokens": 64, "cpu_blocks": 4000, "speedup": 4}
    result = api_simulate(**hardware(head), **rooms, prefill_instances=2, decode_instances=3, per_request=True)
    document, each, frame = result.to_dict(), result.instances_frame(), result.requests_frame()
    prefill, decode = each[each["role"] == "prefill"], each[each["role"] == "decode"]
    assert list(prefill["instance"]) == [0, 1] and list(decode["instance"]) == [2, 3, 4]
    for name in ("requests", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens"):
        assert prefill[name].sum() == document[name]
    assert decode["requests"].sum() == (frame["output_tokens"] > 1).sum()
    assert frame["instance"].isin([0, 1]).all() and frame["decode_instance"].dropna().isin([2, 3, 4]).all()
    assert document["links"]["net"]["blocks"] > 0 and document["output_tokens"] == frame["output_tokens"].sum()
    for refused, words in (
        ({"prefill_instances": 2}, "argument --prefill-instances: needs --decode-instances too"),
        ({"prefill_instances": 2, "decode_instances": 2, "instances": 2}, "argument --instances: not with"),
    ):
        with pytest.raises(SettingError, match=re.escape(words)):
            api_simulate(**hardware(head), **refused)


def test_llm_d_approximate_index_forgets_beyond_its_room():
    """llm-d's approximate index, at the instances' pool (autoTune), follows a document read far apart; with room for
    one block (``--llm-d-lru-tokens``) it keeps only the document's last block, its walk stops at the first, and the
    reads spread as round-robin does."""
    document = list(range(4))
    requests = [(document, 4 * 16 + 1, 1) for _ in range(6)]
    times = [number * 1e6 for number in range(6)]
    settings_of = ROUTERS["llm-d"].Settings
    for room, expected in ((None, [0] * 6), (16, [0, 1, 2, 0, 1, 2])):
        router = ROUTERS["llm-d"](settings_of(llm_d_lru_tokens=room))
        fleet = TimedFleet([simulator(16, 100, 0) for _ in range(3)], router, EngineSettings())
        fleet.run(timed(requests, times))
        assert fleet.chosen == expected, room


@settings(max_examples=60, deadline=None)
@given(chains(whole_blocks=False), st.integers(1, 4), st.data())
def test_a_closed_loop_of_one_instance_is_the_engine_request_by_request(workload, clients, data):
    """``--clients``: a fleet of one, each client sending its next request as its last finishes, times every request
    as the engine's own closed loop does, whatever the router."""
    block, requests = workload
    needs = [math.ceil((tokens + output - 1) / block) for _, tokens, output in requests]
    gpu = data.draw(st.integers(max(needs), max(needs) + 3 * len(requests)), label="gpu blocks")
    cpu = data.draw(st.sampled_from([0, 2 * max(needs)]), label="cpu blocks")
    router = data.draw(st.sampled_from(sorted(ROUTERS)), label="router")
    source = [Timed(keys, tokens, None, output) for keys, tokens, output in requests]
    try:
        alone = simulator(block, gpu, cpu).run(iter(source), clients)
    except KvlabError as error:
        with pytest.raises(KvlabError, match=re.escape(str(error))):
            TimedFleet([simulator(block, gpu, cpu)], ROUTERS[router](), EngineSettings()).run(source, clients)
        return
    fleet = TimedFleet([simulator(block, gpu, cpu)], ROUTERS[router](), EngineSettings())
    merged = fleet.merged(fleet.run(source, clients))
    assert rows(merged.rows) == rows(alone.rows)
    assert (merged.steps, merged.preemptions) == (alone.steps, alone.preemptions)


def test_a_closed_loop_keeps_each_client_to_one_request_at_a_time(head):
    """``kvlab.simulate(clients=6, instances=3)``: at most six requests in flight at once, every one of the trace's
    requests served, and least-loaded routing spreads them over the three instances."""
    result = api_simulate(
        **hardware(head),
        block_tokens=64,
        output_tokens=4,
        clients=6,
        instances=3,
        router="least-loaded",
        per_request=True,
    )
    frame = result.requests_frame()
    assert len(frame) == 60 and sorted(result.instances_frame()["requests"]) != [0, 0, 60]
    starts, ends = frame["arrival_s"], frame["arrival_s"] + frame["e2e_ms"] / 1000
    for start in starts:  # (the table's times are rounded: a client's next starts as its last ends)
        assert ((starts <= start) & (ends > start + 1e-5)).sum() <= 6
