"""Tests for the bench_multiturn and multi_round_qa sources (kvlab/workloads/benchmarks.py, __init__.py).

What they expect comes from models written here in the benchmarks' own shape, on explicit token lists: SGLang's
bench_multiturn.py (its ReadyQueue on the global ``random`` seeded as its main does, its response handler appending
the output and a new sub-question to a client's history, its round barrier) with a server that answers in the order
it is asked; LMCache's multi-round-qa.py (its UserSessionManager and UserSession stepped every 0.1 s of an exact
clock, as its dry run answers at once). The workloads' keys must induce the prefixes' equality (same key iff the same
tokens up to the block's end), and a replay must reuse what a brute-force LRU of those prefixes reuses.
"""

import itertools
import json
import random
from collections import OrderedDict, deque
from fractions import Fraction

import pytest
from conftest import ROOT, kvlab
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvlab import api
from kvlab.workloads import MAX_ACCESSES, READY_QUEUE_POLICIES, WORKLOADS, WorkloadError

BenchMultiturn = WORKLOADS["bench_multiturn"]
MultiRoundQA = WORKLOADS["multi_round_qa"]
SMALL = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --------------------------------------------------------------------------------------------------------------
# The models, on token lists.
# --------------------------------------------------------------------------------------------------------------


def bench_multiturn_model(settings):
    """``(round, client, prompt)`` of each request in the order bench_multiturn sends them, ``prompt`` a list of tokens.

    Its WorkloadGenerator: per-client rounds (``random.randint`` only when min and max differ), the ReadyQueue
    starting with every client's first prompt, ``request_sender`` popping while fewer than ``max_parallel`` are out
    and drawing its sleep after each pop, ``response_handler`` extending the history with the output and a new
    sub-question, straight to the queue or held for the round barrier. Answers come back oldest first.
    """
    s = {option.name: option.default for option in BenchMultiturn.options} | settings
    low, high = s["min_rounds"], s["max_rounds"]
    if low == 0 and high == 0:
        low = high = s["num_rounds"]
    elif low == 0:
        low = high
    elif high == 0:
        high = low
    random.seed(s["multiturn_seed"])
    clients = s["num_clients"]
    totals = [low] * clients if low == high else [random.randint(low, high) for _ in range(clients)]
    per_round = [sum(1 for total in totals if total > turn) for turn in range(high)]
    history = {client: [("prompt", client, j) for j in range(s["request_length"])] for client in range(clients)}
    ready = [(client, list(history[client])) for client in range(clients)]
    record = dict.fromkeys(range(clients), 0)
    sub_questions = itertools.count()
    sent, out, next_round, barrier_round, finished = [], deque(), [], 0, 0
    while ready or out:
        if ready and len(out) < s["max_parallel"]:
            client, prompt = ready.pop(random.randrange(len(ready)) if s["ready_queue_policy"] == "random" else 0)
            random.expovariate(s["request_rate"])
            sent.append((record[client], client, prompt))
            out.append(client)
            continue
        client = out.popleft()
        history[client] += [("output", client, record[client], j) for j in range(s["output_length"])]
        record[client] += 1
        if record[client] < totals[client]:
            question = next(sub_questions)
            history[client] += [
                ("sub", question, j) for j in range(s["sub_question_input_length"] or s["request_length"])
            ]
            (next_round if s["enable_round_barrier"] else ready).append((client, list(history[client])))
        if s["enable_round_barrier"] and barrier_round < high:
            finished += 1
            if finished == per_round[barrier_round]:
                ready += next_round
                next_round, barrier_round, finished = [], barrier_round + 1, 0
    return sent


def multi_round_qa_model(settings):
    """``(round, user id, prompt, arrival_s)`` of each request multi-round-qa.py sends by ``--time``, its main loop
    stepping the manager at 0, 0.1, 0.2, ... s exactly, every answer back at once."""
    s = {option.name: option.default for option in MultiRoundQA.options} | settings
    users, rounds, qps = s["num_users"], s["num_rounds"], s["qps"]
    gap = users / qps
    session_alive_time = gap * (rounds - 1)
    between = session_alive_time / (users + 0)
    ramp_up_time = users * between
    sessions, sent = [], []

    def create():
        session = {"id": len(sessions) + 1, "question_id": 0, "last": None, "history": [], "sent": 0}
        sessions.append(session)
        return session

    last_join = None
    for step in range(s["time"] * 10 + 1):
        now = Fraction(step, 10)
        if step == 0:
            for i in range(users):
                session = create()
                offset = ramp_up_time - i * between
                if offset < 0:
                    break
                passed = int(offset / gap) + 1
                session["last"] = now - Fraction(offset) + Fraction((passed - 1) * gap)
                session["question_id"] = passed
        if last_join is None or now - last_join > Fraction(between):
            create()
            last_join = now
        for session in sessions:
            if session["question_id"] >= rounds:
                continue
            if session["last"] is not None and not now - session["last"] > Fraction(gap):
                continue
            session["question_id"] += 1
            user, question = session["id"], session["question_id"]
            if not session["history"]:
                session["history"] += [("system", j) for j in range(s["shared_system_prompt"])]
                session["history"] += [("user", user, j) for j in range(s["user_history_prompt"])]
            session["history"] += [("question", user, question, j) for j in range(s["question_len"])]
            sent.append((session["sent"], user, list(session["history"]), float(now)))
            session["history"] += [("answer", user, question, j) for j in range(s["answer_len"])]
            session["last"], session["sent"] = now, session["sent"] + 1
    return sent


def block_ends(tokens, block):
    return [*range(block, tokens + 1, block), *([tokens] if tokens % block else [])]


def check_keys(requests, prompts, block):
    """Each request's tokens and blocks are its prompt's, and two blocks share a key iff they end the same prefix."""
    prefix_of, key_of = {}, {}
    for request, prompt in zip(requests, prompts, strict=True):
        assert request.tokens == len(prompt)
        ends = block_ends(len(prompt), block)
        assert len(request.keys) == len(ends)
        for key, end in zip(request.keys, ends, strict=True):
            prefix = tuple(prompt[:end])
            assert prefix_of.setdefault(key, prefix) == prefix
            assert key_of.setdefault(prefix, key) == key


def check_sizes(workload, prompts):
    assert len(workload) == len(prompts)
    assert workload.accesses() == sum(len(block_ends(len(prompt), workload.block_tokens)) for prompt in prompts)
    assert workload.token_bound() == sum(map(len, prompts))


def lru_gpu_hits(prompts, rounds, block, room_blocks):
    """Per round, the tokens a GPU-only LRU prefix cache of ``room_blocks`` full blocks serves, keyed by the prefixes
    themselves: a request's leading cached blocks are served, then its full blocks are touched tail to head."""
    cache, hits = OrderedDict(), [0] * rounds
    for round_index, prompt in prompts:
        prefixes = [tuple(prompt[:end]) for end in range(block, len(prompt) + 1, block)]
        served = next((index for index, prefix in enumerate(prefixes) if prefix not in cache), len(prefixes))
        hits[round_index] += served * block
        for prefix in reversed(prefixes):
            cache[prefix] = True
            cache.move_to_end(prefix)
            if len(cache) > room_blocks:
                cache.popitem(last=False)
    return hits


# --------------------------------------------------------------------------------------------------------------
# bench_multiturn
# --------------------------------------------------------------------------------------------------------------

bench_settings = st.fixed_dictionaries(
    {
        "num_clients": st.integers(0, 5),
        "num_rounds": st.integers(1, 4),
        "request_length": st.integers(1, 40),
        "output_length": st.integers(0, 5),
        "sub_question_input_length": st.integers(0, 20),
        "max_parallel": st.integers(1, 4),
        "ready_queue_policy": st.sampled_from(READY_QUEUE_POLICIES),
        "enable_round_barrier": st.booleans(),
        "multiturn_seed": st.integers(-5, 5),
    },
    optional={"min_rounds": st.integers(0, 3), "max_rounds": st.integers(0, 4)},
)


@SMALL
@given(bench_settings, st.integers(1, 16))
def test_bench_multiturn_is_the_benchmarks_conversations_in_its_order(settings, block):
    """Requests in the benchmark's order, each its client's history so far; keys are the prefixes; sizes exact."""
    low, high = settings.get("min_rounds", 0), settings.get("max_rounds", 0)
    assume(not (low and high and low > high))
    workload = BenchMultiturn(block, **settings)
    expected = bench_multiturn_model(settings)
    requests = list(workload.requests())
    assert [(r.round, r.label) for r in requests] == [(turn, client) for turn, client, _ in expected]
    check_keys(requests, [prompt for *_, prompt in expected], block)
    check_sizes(workload, [prompt for *_, prompt in expected])
    reached = max((turn + 1 for turn, *_ in expected), default=0)  # the rounds some request reaches, listed alone
    assert workload.rounds == [f"round{n}" for n in range(1, reached + 1)]
    assert reached <= max([high, low] if high or low else [settings["num_rounds"]])


@pytest.mark.parametrize("policy", READY_QUEUE_POLICIES)
def test_with_the_barrier_rounds_come_whole_and_fifo_keeps_client_order(policy):
    """The round barrier sends round i+1 after all of round i: rounds in a row, each every client once; fifo sends
    them in client order (answers come back as they were asked), random in the seeded queue's order."""
    clients, rounds = 6, 3
    workload = BenchMultiturn(
        num_clients=clients, num_rounds=rounds, ready_queue_policy=policy, enable_round_barrier=True
    )
    requests = list(workload.requests())
    for turn in range(rounds):
        order = [r.label for r in requests[turn * clients : (turn + 1) * clients]]
        assert {r.round for r in requests[turn * clients : (turn + 1) * clients]} == {turn}
        assert sorted(order) == list(range(clients))
        if policy == "fifo":
            assert order == list(range(clients))
    first = [r.label for r in requests[:clients]]
    random.seed(workload.multiturn_seed)  # the benchmark's first round: ReadyQueue.pop then the sender's sleep
    queue, popped = list(range(clients)), []
    while queue:
        popped.append(queue.pop(random.randrange(len(queue)) if policy == "random" else 0))
        random.expovariate(workload.request_rate)
    assert first == popped


def test_the_seed_and_the_parallel_cap_change_the_order_only_where_the_benchmark_lets_them():
    base = {"num_clients": 8, "num_rounds": 3, "enable_round_barrier": True}

    def order(**changes):
        return [(r.round, r.label) for r in BenchMultiturn(**base | changes).requests()]

    assert order(multiturn_seed=1) != order(multiturn_seed=2)
    assert order(max_parallel=1) == order(max_parallel=8)  # with the barrier, the cap only times the rounds
    assert order(enable_round_barrier=False, max_parallel=1) != order(enable_round_barrier=False, max_parallel=8)


def test_bench_multiturn_timed_has_no_clock_and_the_output_length():
    workload = BenchMultiturn(num_clients=3, num_rounds=2, request_length=70, output_length=7)
    timed = list(workload.timed())
    requests = list(workload.requests())
    assert [t.tokens for t in timed] == [r.tokens for r in requests]
    assert {(t.arrival_s, t.output_tokens) for t in timed} == {(None, workload.output_length)}
    keys = [key for t in timed for key in t.keys]
    assert sorted(set(keys)) == list(range(len(set(keys))))  # dense, as the base Workload.timed gives them


def test_a_replay_reuses_what_an_lru_of_the_prefixes_reuses():
    """Through kvlab.api.replay: per round, the GPU hits of a brute-force LRU on the prefixes, unlimited and tight;
    with room for everything each round reuses a larger part of its prompt than the last."""
    settings = {"num_clients": 3, "num_rounds": 4, "request_length": 100, "output_length": 3, "max_parallel": 2}
    block = 16
    expected = [(turn, prompt) for turn, _, prompt in bench_multiturn_model(settings)]
    for room_blocks in (10**6, 40):
        replay = api.replay(
            workload={"source": "bench_multiturn", **settings}, gpu_tokens=room_blocks * block, block_tokens=block
        )
        rounds = replay.to_dict()["rounds"]
        assert [r["gpu_hit_tokens"] for r in rounds] == lru_gpu_hits(expected, 4, block, room_blocks)
    ratios = [
        r["token_hit_ratio"]
        for r in api.replay(
            workload={"source": "bench_multiturn", **settings}, gpu_tokens=10**7, block_tokens=block
        ).to_dict()["rounds"]
    ]
    assert ratios[0] == 0 and ratios == sorted(ratios) and len(set(ratios)) == len(ratios)


# --------------------------------------------------------------------------------------------------------------
# multi_round_qa
# --------------------------------------------------------------------------------------------------------------

qa_settings = st.fixed_dictionaries(
    {
        "num_users": st.integers(1, 4),
        "num_rounds": st.integers(1, 4),
        "qps": st.sampled_from([0.25, 0.5, 1.0, 2.0, 3.7, 10.0]),
        "time": st.integers(0, 25),
        "shared_system_prompt": st.integers(0, 40),
        "user_history_prompt": st.integers(0, 20),
        "question_len": st.integers(0, 6),
        "answer_len": st.integers(0, 10),
    }
)


@SMALL
@given(qa_settings, st.integers(1, 32))
def test_multi_round_qa_is_the_benchmarks_sessions_on_its_clock(settings, block):
    """Requests in the benchmark's order with its arrivals, each its user's history so far, the system prompt shared
    by all users; keys are the prefixes; sizes exact; outputs are the answer length."""
    assume(settings["shared_system_prompt"] + settings["user_history_prompt"] + settings["question_len"])
    workload = MultiRoundQA(block, **settings)
    expected = multi_round_qa_model(settings)
    requests = list(workload.requests())
    assert [(r.round, r.label) for r in requests] == [(turn, user) for turn, user, *_ in expected]
    check_keys(requests, [prompt for _, _, prompt, _ in expected], block)
    check_sizes(workload, [prompt for _, _, prompt, _ in expected])
    timed = list(workload.timed())
    assert [t.arrival_s for t in timed] == [arrival for *_, arrival in expected]
    assert {t.output_tokens for t in timed} <= {settings["answer_len"]}
    reached = max((turn + 1 for turn, *_ in expected), default=0)  # the rounds some request reaches, listed alone
    assert workload.rounds == [f"round{n}" for n in range(1, reached + 1)]


def test_the_system_prompt_is_reused_across_users_and_the_rest_only_by_its_user():
    """A replay reuses what the LRU of the prefixes says, with room for everything and without; the first requests
    share the system prompt's full blocks and nothing after them."""
    settings = {"num_users": 3, "num_rounds": 3, "qps": 1.0, "time": 20, "shared_system_prompt": 300}
    block = 64
    workload = MultiRoundQA(block, **settings)
    expected = [(turn, prompt) for turn, _, prompt, _ in multi_round_qa_model(settings)]
    for room_blocks in (10**6, 120):
        replay = api.replay(
            workload={"source": "multi_round_qa", **settings}, gpu_tokens=room_blocks * block, block_tokens=block
        )
        rounds = replay.to_dict()["rounds"]
        assert [r["gpu_hit_tokens"] for r in rounds] == lru_gpu_hits(expected, 3, block, room_blocks)
    first = [r for r in workload.requests() if r.round == 0]
    shared = workload.shared_system_prompt // block
    assert len({tuple(r.keys[:shared]) for r in first}) == 1
    assert len({r.keys[shared] for r in first}) == len(first)


# --------------------------------------------------------------------------------------------------------------
# Bad input, limits, the flags.
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "setting", "needles"),
    [
        ("bench_multiturn", {"num_clients": -1}, ["--num-clients", ">= 0"]),
        ("bench_multiturn", {"num_rounds": 0}, ["--num-rounds", ">= 1"]),
        ("bench_multiturn", {"ready_queue_policy": "lifo"}, ["--ready-queue-policy", "'random', 'fifo'", "lifo"]),
        ("bench_multiturn", {"enable_round_barrier": "yes"}, ["--enable-round-barrier", "true or false"]),
        ("bench_multiturn", {"min_rounds": 3, "max_rounds": 2}, ["--min-rounds (3) must be <= --max-rounds (2)"]),
        ("bench_multiturn", {"request_rate": "0"}, ["--request-rate", "positive"]),
        ("bench_multiturn", {"request_length": 0}, ["--request-length", ">= 1"]),
        ("bench_multiturn", {"num_clients": 10**6, "num_rounds": 101}, ["at least 101000000", f"{MAX_ACCESSES}"]),
        ("bench_multiturn", {"num_clients": 1, "request_length": 10**9}, ["would make", f"at most {MAX_ACCESSES}"]),
        ("multi_round_qa", {"num_users": 0}, ["--num-users", ">= 1"]),
        ("multi_round_qa", {"qps": -1.0}, ["--qps", "positive"]),
        ("multi_round_qa", {"qps": "nan"}, ["--qps", "positive"]),
        ("multi_round_qa", {"time": -1}, ["--time", ">= 0"]),
        ("multi_round_qa", {"qps": 1e-320}, ["--qps", "too long"]),
        (
            "multi_round_qa",
            {"shared_system_prompt": 0, "user_history_prompt": 0, "question_len": 0},
            ["a prompt needs a token"],
        ),
        ("multi_round_qa", {"time": 10**8, "qps": 1e6}, ["at least", f"at most {MAX_ACCESSES}"]),
    ],
    ids=repr,
)
def test_bad_settings_are_one_line_errors(source, setting, needles):
    with pytest.raises(WorkloadError) as excinfo:
        WORKLOADS[source](**setting)
    message = str(excinfo.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--workload", "bench_multiturn", "--ready-queue-policy", "lifo"], "--ready-queue-policy"),
        (["--workload", "bench_multiturn", "--num-rounds", "-2"], "--num-rounds"),
        (["--workload", "bench_multiturn", "--qps", "1"], "--qps is a setting of --workload multi_round_qa"),
        (["--workload", "multi_round_qa", "--num-users", "-1"], "--num-users"),
        (["--workload", "multi_round_qa", "--multiturn-seed", "3"], "--multiturn-seed is a setting of"),
    ],
)
def test_the_cli_refuses_bad_settings_in_one_line(args, needle):
    done = kvlab("replay", *args, "--gpu-tokens", "1000")
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert needle in done.stderr


def test_the_commands_take_the_benchmarks_flags():
    """Every command with a workload builds its flags (no clash with its own, as simulate's --seed), and a replay on
    the command line is the API's."""
    for command in (["replay"], ["mrc"], ["plan"], ["simulate"], ["policies", "table"], ["trace", "stats"]):
        done = kvlab(*command, "--help")
        assert done.returncode == 0, command
        assert "--multiturn-seed" in done.stdout and "--shared-system-prompt" in done.stdout
    flags = ["--num-clients", "4", "--num-rounds", "3", "--enable-round-barrier", "true", "--block-tokens", "32"]
    done = kvlab("replay", "--workload", "bench_multiturn", *flags, "--gpu-tokens", "100000")
    assert done.returncode == 0, done.stderr
    settings = {"num_clients": 4, "num_rounds": 3, "enable_round_barrier": True}
    same = api.replay(workload={"source": "bench_multiturn", **settings}, gpu_tokens=100000, block_tokens=32)
    assert json.loads(done.stdout) == same.to_dict()
    shared = [source for source in WORKLOADS.values() if "num_rounds" in {o.name for o in source.options}]
    assert [source.name for source in shared] == ["bench_multiturn", "multi_round_qa"]
    assert len({id(o) for source in shared for o in source.options if o.name == "num_rounds"}) == 1


def test_simulate_takes_the_outputs_and_multi_round_qa_s_clock():
    """kvlab simulate: bench_multiturn under --rate with its output length; multi_round_qa on its own arrivals."""
    import io

    import pandas as pd

    hardware = {"model_config": str(ROOT / "models/Llama-3.1-8B-Instruct/config.json"), "gpu_system": "h100_sxm"}
    bench = {"num_clients": 3, "num_rounds": 2, "request_length": 100, "output_length": 5}
    simulation = api.simulate(workload={"source": "bench_multiturn", **bench}, rate=1, per_request=True, **hardware)
    table = pd.read_csv(io.StringIO(simulation.per_request))
    assert list(table["output_tokens"]) == [bench["output_length"]] * len(BenchMultiturn(**bench))
    qa = {"num_users": 2, "num_rounds": 3, "time": 30}
    simulation = api.simulate(workload={"source": "multi_round_qa", **qa}, per_request=True, **hardware)
    table = pd.read_csv(io.StringIO(simulation.per_request))
    timed = list(MultiRoundQA(**qa).timed())
    assert list(table["arrival_s"]) == [t.arrival_s for t in timed]
    assert list(table["input_tokens"]) == [t.tokens for t in timed]
    assert set(table["output_tokens"]) == {MultiRoundQA(**qa).answer_len}
