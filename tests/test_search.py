"""kvlab search (issue 40): the cheapest configuration that meets an SLO, against a brute force that simulates every
configuration of the space with kvlab.simulate and prices it from the prices file; the bounds it prunes by, against
the same simulations; its fan-out (candidates, one evaluation each, the answer from them) against the search on one
machine; bad input."""

import itertools
from decimal import Decimal

import pytest
from conftest import kvlab

from kvlab import api
from kvlab.api import searches
from kvlab.latency.list_prices import load_prices

LLAMA = "models/Llama-3.1-8B-Instruct/config.json"
WORKLOAD = {"workload": "multi_round_qa", "num_users": 10, "num_rounds": 4, "time": 60}
# an H100 left room for about 13,000 tokens (an H200 for ten times more), priced by the roofline (no database)
HARDWARE = {"latency_source": "roofline", "gpu_memory_utilization": 0.26}
SPACE = {
    "gpu_system": ["h100_sxm", "h200_sxm"],
    "instances": [1, 2],
    "cpu_gib": [0, 1, 4],
    "router": ["round-robin", "llm-d"],
}
LOAD = {"rate": 8}
SLO = "ttft_p99<=1500ms,tpot_p99<=20ms"


def brute_force(space, slo, load):
    """Every configuration of ``space`` simulated by kvlab.simulate and priced from the shipped prices, as a list of
    ``(cost per hour, configuration, figures)``."""
    prices = load_prices("default")
    per_token = 131_072  # Llama-3.1-8B at TP 1: 32 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes
    rows = []
    for system, instances, gib, router in itertools.product(
        space["gpu_system"], space["instances"], space["cpu_gib"], space["router"]
    ):
        if instances == 1 and router != space["router"][0]:
            continue  # one instance: no router
        cost = prices.per_hour(system, instances, gib)["total"]
        figures = api.simulate(
            **WORKLOAD,
            **HARDWARE,
            **load,
            model_config=LLAMA,
            gpu_system=system,
            engine="vllm",
            instances=instances,
            router=router,
            cpu_tokens=int(Decimal(gib) * 2**30 // per_token),
        ).to_dict()
        rows.append((cost, {"gpu_system": system, "instances": instances, "cpu_gib": gib, "router": router}, figures))
    return rows


def meets(figures, slo):
    return all(term.met(term.value(figures)) for term in searches.SLO.parse(slo))


@pytest.fixture(scope="module")
def brute():
    return brute_force(SPACE, SLO, LOAD)


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    folder = tmp_path_factory.mktemp("evaluations")
    return api.search(**WORKLOAD, **HARDWARE, **LOAD, **SPACE, model_config=LLAMA, slo=SLO, evaluations=str(folder))


def test_the_winner_is_the_cheapest_that_meets_the_slo(brute, found):
    meeting = [(cost, config) for cost, config, figures in brute if meets(figures, SLO)]
    assert meeting, "the test's space has a configuration that meets its SLO"
    cheapest = min(cost for cost, _ in meeting)
    winner = found.winner
    assert winner["cost_per_hour"] == pytest.approx(cheapest)
    config = winner["configuration"]
    same = [figures for _, other, figures in brute if other == {k: config[k] for k in other}]
    assert meets(same[0], SLO)
    assert winner["figures"]["ttft_ms"] == same[0]["ttft_ms"]
    assert [cost for cost, _ in meeting if cost < cheapest] == []


def test_the_verdict_weighs_the_winner_against_the_cheapest_without_a_cpu_tier(brute, found):
    without = min(cost for cost, config, figures in brute if not config["cpu_gib"] and meets(figures, SLO))
    assert found.winner["configuration"]["cpu_gib"] > 0 and found.verdict["reason"] == "cheaper_with"
    assert f"the cheapest that does costs {without:g}" in found.verdict["line"]


def test_the_frontier_is_simulated_in_full_and_improves_with_cost(brute, found):
    frontier = found.frontier
    assert frontier[-1] == {key: value for key, value in found.winner.items() if key in frontier[-1]}
    costs = [row["cost_per_hour"] for row in frontier]
    values = [row["ttft_p99"] for row in frontier]
    assert costs == sorted(costs) and values == sorted(values, reverse=True) and len(set(values)) == len(values)
    for row in frontier:
        config = row["configuration"]
        same = [figures for _, other, figures in brute if other == {k: config[k] for k in other}]
        assert row["ttft_p99"] == same[0]["ttft_ms"]["p99"]
        assert row["tpot_p99"] <= 20  # the other targets met


def test_the_bounds_hold_for_every_configuration(brute):
    searcher = searches._Searcher(
        WORKLOAD["workload"],
        LLAMA,
        None,
        {**{k: v for k, v in WORKLOAD.items() if k != "workload"}, **HARDWARE, **LOAD, **SPACE, "slo": SLO},
    )
    terms = searches.SLO.parse("ttft_p50<=1ms,ttft_p99<=1ms,tpot_p99<=1ms,e2e_p90<=1ms,throughput>=1")
    for _, config, figures in brute:
        bounds = searcher.bounds(config["gpu_system"], "vllm", 1)
        for term in terms:
            bound, value = bounds.of(term), term.value(figures)
            assert (bound <= value + 1e-6) if term.time else (bound >= value - 1e-6), (config, term, bound, value)
        for bound_ms in (5, 20, 80, 400):
            term = searches.SLO.parse(f"ttft_p90<={bound_ms}ms")[0]
            if config["instances"] < bounds.instances_needed(term):
                assert not term.met(term.value(figures)), (config, term)


def test_kept_evaluations_are_read_not_simulated(found, tmp_path):
    again = api.search(**WORKLOAD, **HARDWARE, **LOAD, **SPACE, model_config=LLAMA, slo=SLO, evaluations=str(tmp_path))
    assert again.simulated > 0 and again.text == found.text
    third = api.search(**WORKLOAD, **HARDWARE, **LOAD, **SPACE, model_config=LLAMA, slo=SLO, evaluations=str(tmp_path))
    assert third.simulated == 0 and third.kept > 0 and third.text == found.text


def flags(**keywords):
    found = []
    for key, value in keywords.items():
        found += [f"--{key.replace('_', '-')}", ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    return found


COMMAND = ["search", *flags(**WORKLOAD, **HARDWARE, **LOAD, **SPACE, model_config=LLAMA, slo=SLO)]


def test_the_fan_out_gives_the_same_answer(found, tmp_path):
    folder = ["--evaluations", str(tmp_path)]
    listed = kvlab(*COMMAND, *folder, "--candidates")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines and all(len(line.split()[0]) == 32 for line in lines)
    missing = kvlab(*COMMAND, *folder, "--from-evaluations")
    assert missing.returncode == 1 and "not simulated yet: kvlab search --evaluate" in missing.stderr
    for line in lines:
        assert kvlab(*COMMAND, *folder, "--evaluate", line.split()[0]).returncode == 0
    answer = kvlab(*COMMAND, *folder, "--from-evaluations")
    assert answer.returncode == 0 and answer.stdout == found.text


def test_the_table_names_the_winner_and_ends_with_the_verdict(found):
    shown = kvlab(*COMMAND, "--format", "table")
    assert shown.returncode == 0
    winner = found.winner
    assert (
        f"winner: {searches.label(winner['configuration'])}: {winner['cost_per_hour']:g} USD per hour" in shown.stdout
    )
    assert shown.stdout.splitlines()[-1] == f"offloading helps? {found.verdict['line']}"


@pytest.mark.parametrize(
    "change, words",
    [
        ({"slo": "ttft_p99<=2"}, "argument --slo: ttft_p99: give the time's unit, ms or s"),
        ({"slo": "ttft_p42<=2s"}, "argument --slo: 'ttft_p42' is not a metric"),
        ({"slo": "throughput<=5"}, "argument --slo: throughput: a rate is a floor"),
        ({"slo": "ttft_p99<=1s,ttft_p99<=2s"}, "argument --slo: ttft_p99 is given twice"),
        ({"gpu_system": ["h100_sxm", "nope"]}, "argument --gpu-system: 'nope': no such GPU system"),
        ({"prefill_decode": ["2-1"]}, "argument --prefill-decode: expected PREFILL:DECODE"),
        ({"frontier_reach": "0.5"}, "argument --frontier-reach: expected a factor from 1 to 1000"),
        ({"instances": [1, 1]}, "argument --instances: instance counts: an item is given twice"),
    ],
)
def test_bad_input_is_one_line(change, words):
    keywords = {**WORKLOAD, **HARDWARE, **LOAD, **SPACE, "model_config": LLAMA, "slo": SLO, **change}
    done = kvlab("search", *flags(**keywords))
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and words in done.stderr, done.stderr
    with pytest.raises(api.SettingError, match=words.partition(": ")[2][:30].replace("(", r"\(")):
        api.search(**keywords)


def test_a_budget_past_the_nodes_memory_is_left_aside():
    result = api.search(
        **WORKLOAD, **HARDWARE, **LOAD, model_config=LLAMA, slo=SLO, gpu_system="h100_sxm", cpu_gib=[0, 300]
    ).to_dict()
    assert result["search"]["host_memory"] == 1 and result["search"]["candidates"] == 1


def test_prefill_apart_from_decode_alone_searches_only_splits():
    result = api.search(
        **WORKLOAD,
        **HARDWARE,
        **LOAD,
        model_config=LLAMA,
        slo=SLO,
        gpu_system="h200_sxm",
        prefill_decode=["1:1", "2:1"],
    ).to_dict()
    assert result["space"]["instances"] == [] and result["search"]["configurations"] == 2
    for row in [*result["frontier"], *([result["winner"]] if result["winner"] else [])]:
        assert {"prefill_instances", "decode_instances"} <= set(row["configuration"])
        assert (
            row["configuration"]["gpus"]
            == row["configuration"]["prefill_instances"] + row["configuration"]["decode_instances"]
        )


def test_a_throughput_target_is_a_floor_and_a_tp_that_does_not_split_is_left_aside():
    found = api.search(
        **WORKLOAD,
        **HARDWARE,
        **LOAD,
        model_config=LLAMA,
        slo="throughput>=100,ttft_p99<=1500ms",
        gpu_system="h200_sxm",
        tp=[1, 3],
    ).to_dict()
    assert found["search"]["no_room"] == 1  # 8 KV heads do not split over TP 3
    winner = found["winner"]
    assert winner["configuration"]["tp"] == 1 and winner["figures"]["output_tokens_per_s"] >= 100
    unreachable = api.search(
        **WORKLOAD, **HARDWARE, **LOAD, model_config=LLAMA, slo="throughput>=1e9", gpu_system="h200_sxm"
    ).to_dict()
    assert unreachable["search"]["bounds"] == 1 and unreachable["winner"] is None


def test_a_damaged_evaluation_is_simulated_again_or_named(found, tmp_path):
    folder = ["--evaluations", str(tmp_path)]
    assert kvlab(*COMMAND, *folder).returncode == 0
    kept = sorted(tmp_path.glob("*.json"))
    kept[0].write_text('{"gpu_tokens": -1}', encoding="utf-8")
    named = kvlab(*COMMAND, *folder, "--from-evaluations")
    assert named.returncode == 1 and named.stderr.startswith(f"kvlab search: error: {kept[0]}: not an evaluation")
    again = kvlab(*COMMAND, *folder)
    assert again.returncode == 0 and again.stdout == found.text
    assert "1 simulated" in again.stderr


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--candidates", "--from-evaluations"], "argument --from-evaluations: not allowed with argument --candidates"),
        (["--candidates", "--format", "table"], "argument --format: --candidates prints no answer"),
    ],
)
def test_the_fan_out_steps_are_one_at_a_time(extra, words):
    done = kvlab(*COMMAND, *extra)
    assert done.returncode == 2 and words in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    "change, words",
    [
        ({"gpu_system": None}, "argument --gpu-system: expected a value, got None"),
        ({"router": None}, "argument --router: expected a value, got None"),
        ({"prices": 5}, "argument --prices: expected a name, got 5"),
        ({"evaluations": ""}, "argument --evaluations: expected a name, got ''"),
        ({"max_memory": "abc"}, "argument --max-memory: "),
        ({"simulate": "no"}, "simulate: expected True or False, got 'no'"),
        ({"frontier_reach": True}, "argument --frontier-reach: expected a factor from 1 to 1000, got True"),
        ({"rate": None, "clients": 4, "prefill_decode": ["1:1"]}, "argument --clients: prefill apart from decode"),
    ],
)
def test_the_api_refuses_in_the_commands_words(change, words):
    keywords = {**WORKLOAD, **HARDWARE, **LOAD, **SPACE, "model_config": LLAMA, "slo": SLO, **change}
    with pytest.raises(api.SettingError) as raised:
        api.search(**keywords)
    assert str(raised.value).startswith(words)
