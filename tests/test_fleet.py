"""Many instances behind a router, without a clock (kvlab/fleet/, issue 39 part 1): one instance is the replay of
today request by request, whatever the router and the CPU tier's scope; under ``session`` routing the instances are
N separate replays of their sessions; a shared CPU tier holds one copy of a block for every instance; ``prefix``
routing sends a request where its prefix is cached; what the instances served adds up to the fleet's figures; and the
exact curve of a shared tier is the fleet's replay at every room."""

import json

import pytest
from conftest import kvlab, toy_workloads
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab import replay as api_replay
from kvlab.cache.prefix import EVICTION_ORDERS, PARTIAL_BLOCKS
from kvlab.cache.write_policies import WRITE_POLICIES, CacheSettings
from kvlab.curves.mrc import tier_curve
from kvlab.fleet import CLOCKLESS, CPU_SCOPES, build
from kvlab.fleet.routers.session import session_of
from kvlab.loop import COUNTERS, figures, overall, replay, rows_of
from kvlab.util.errors import KvlabError, SettingError
from kvlab.workloads import LabWorkload

LAB = ["--workload", "lab", "--docs", "2", "--tokens", "100", "--block-tokens", "10"]


def cache_settings(workload, gpu, cpu, policy, disk=0):
    rooms = {"gpu_tokens": gpu, "cpu_tokens": cpu, "disk_tokens": disk, "block_tokens": workload.block_tokens}
    return CacheSettings(**rooms, write_policy=policy)


@settings(max_examples=80)
@given(
    toy_workloads(),
    st.integers(0, 20),
    st.integers(0, 20),
    st.sampled_from([0, 0, 5, 20]),
    st.sampled_from(sorted(WRITE_POLICIES)),
    st.sampled_from(sorted(CLOCKLESS)),
    st.sampled_from(CPU_SCOPES),
    st.sampled_from(CPU_SCOPES),
)
def test_one_instance_is_the_replay_request_by_request(workload, gpu, cpu, disk, policy, router, scope, disk_scope):
    chosen = cache_settings(workload, gpu, cpu, policy, disk)
    alone, fleet = [], []
    expected = replay(workload, chosen.build(), alone)
    assert replay(workload, build(chosen, 1, router, scope, disk_scope), fleet) == expected
    names = ("gpu_hit_tokens", "cpu_hit_tokens", *("disk_hit_tokens",) * bool(disk))
    assert list(rows_of(fleet, names)) == list(rows_of(alone, names))


@settings(max_examples=60)
@given(
    toy_workloads(), st.integers(2, 4), st.integers(0, 20), st.integers(0, 20), st.sampled_from(sorted(WRITE_POLICIES))
)
def test_session_routing_is_separate_replays_of_the_sessions(workload, instances, gpu, cpu, policy):
    """With private tiers, instance i serves exactly the requests whose first block's session number is i modulo N,
    as a cache of its own would; a request without blocks goes to the least used and reuses nothing."""
    chosen = cache_settings(workload, gpu, cpu, policy)
    fleet = build(chosen, instances, "session", "private")
    replay(workload, fleet)
    for index in range(instances):
        own, served = chosen.build(), [0] * len(COUNTERS)
        for request in workload.requests():
            if request.keys and session_of(request.keys) % instances == index:
                for column, value in enumerate(
                    (1, len(request.keys), request.tokens, *own.serve(request.keys, request.tokens))
                ):
                    served[column] += value
        empty = fleet.counts[index][0] - served[0]
        assert empty >= 0
        assert fleet.counts[index] == [served[0] + empty, *served[1:]]  # an empty request adds a request only


def lab(passes):
    return LabWorkload(10, docs=2, tokens=100, passes=passes)


def test_a_shared_cpu_tier_holds_one_copy_for_every_instance():
    """Documents 0, 1, 1, 0 round-robin over two instances without GPU room, each with a CPU room of one document:
    private tiers never see a document twice; the shared one (two documents' room) serves both second reads, and
    holds each block once."""
    chosen = CacheSettings(gpu_tokens=0, cpu_tokens=100, block_tokens=10)
    private = build(chosen, 2, "round-robin", "private")
    shared = build(chosen, 2, "round-robin", "shared")
    assert figures(overall(replay(lab("fwd,rev"), private)))["cpu_hit_tokens"] == 0
    assert figures(overall(replay(lab("fwd,rev"), shared)))["cpu_hit_tokens"] == 200
    first, second = shared.caches
    assert first.cpu is second.cpu and len(first.cpu) == 20 and first.cpu.capacity == 200


def test_a_shared_disk_tier_holds_one_copy_for_every_instance():
    """As the CPU tier's, one tier down: no GPU or CPU room, a disk room of one document per instance."""
    chosen = CacheSettings(gpu_tokens=0, cpu_tokens=0, disk_tokens=100, block_tokens=10)
    private = build(chosen, 2, "round-robin", "private", "private")
    shared = build(chosen, 2, "round-robin", "private", "shared")
    assert figures(overall(replay(lab("fwd,rev"), private)))["disk_hit_tokens"] == 0
    assert figures(overall(replay(lab("fwd,rev"), shared)))["disk_hit_tokens"] == 200
    first, second = shared.caches
    assert first.disk is second.disk and len(first.disk) == 20 and first.disk.capacity == 200


def test_prefix_routing_sends_a_request_where_its_prefix_is_cached():
    """Documents 0, 1, 1, 0 over two instances of one document's GPU room: round-robin sends each second read to the
    instance that never saw it; prefix routing to the one that holds it."""
    chosen = CacheSettings(gpu_tokens=100, cpu_tokens=0, block_tokens=10)
    by_turn = figures(overall(replay(lab("fwd,rev"), build(chosen, 2, "round-robin", "private"))))
    by_prefix = figures(overall(replay(lab("fwd,rev"), build(chosen, 2, "prefix", "private"))))
    assert (by_turn["gpu_hit_tokens"], by_prefix["gpu_hit_tokens"]) == (0, 200)


@pytest.mark.parametrize("router", sorted(CLOCKLESS))
@pytest.mark.parametrize("scope", CPU_SCOPES)
def test_the_instances_add_up_to_the_fleet(router, scope):
    fleet = ["--instances", "3", "--router", router, "--cpu-scope", scope, "--disk-scope", scope]
    done = kvlab("replay", *LAB, "--gpu-tokens", "100", "--cpu-tokens", "50", "--disk-tokens", "50", *fleet)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert [entry["instance"] for entry in document["instances"]] == [0, 1, 2]
    said = {"instances": 3, "router": router, "cpu_scope": scope, "disk_scope": scope}
    assert document["cache"] | said == document["cache"]
    names = ("requests", "block_accesses", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "disk_hit_tokens")
    for name in (*names, "computed_tokens"):
        assert sum(entry[name] for entry in document["instances"]) == document[name]


def test_the_python_api_gives_a_row_per_instance():
    result = api_replay(
        workload="lab", docs=2, tokens=100, block_tokens=10, gpu_tokens=100, instances=2, router="prefix"
    )
    frame = result.instances_frame()
    assert list(frame["instance"]) == [0, 1]
    assert frame["input_tokens"].sum() == result.input_tokens
    assert frame["gpu_hit_tokens"].sum() == result.gpu_hit_tokens


@pytest.mark.parametrize("router", sorted(CLOCKLESS))
def test_the_per_request_table_names_each_requests_instance(router):
    result = api_replay(
        workload="lab",
        docs=3,
        tokens=100,
        block_tokens=10,
        gpu_tokens=100,
        cpu_tokens=100,
        instances=3,
        router=router,
        per_request=True,
    )
    rows = result.requests().groupby("instance")[["input_tokens", "gpu_hit_tokens", "cpu_hit_tokens"]].sum()
    instances = result.instances_frame().set_index("instance")
    served = instances[instances["requests"] > 0][["input_tokens", "gpu_hit_tokens", "cpu_hit_tokens"]]
    assert rows.to_dict() == served.to_dict()


def test_one_instance_prints_what_the_replay_prints():
    plain = kvlab("replay", *LAB, "--gpu-tokens", "100", "--cpu-tokens", "100")
    one = kvlab(
        "replay",
        *LAB,
        "--gpu-tokens",
        "100",
        "--cpu-tokens",
        "100",
        "--instances",
        "1",
        "--router",
        "prefix",
        "--cpu-scope",
        "shared",
    )
    assert (one.returncode, one.stdout, one.stderr) == (0, plain.stdout, "")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--gpu-eviction", "opt"], "--gpu-eviction opt reads the future: not with --instances"),
        (["--server", "llama-cpp"], "--instances applies to the cache's designs, not to --server llama-cpp"),
    ],
)
def test_what_a_fleet_does_not_model_is_refused_in_one_line(extra, message):
    done = kvlab("replay", *LAB, "--gpu-tokens", "100", "--instances", "2", *extra)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"kvlab replay: error: {message}\n")
    keywords = {extra[0][2:].replace("-", "_"): extra[1]}
    keywords = {key: int(value) if value.isdigit() else value for key, value in keywords.items()}
    with pytest.raises(SettingError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        api_replay(workload="lab", docs=2, tokens=100, block_tokens=10, gpu_tokens=100, instances=2, **keywords)


@settings(max_examples=60, deadline=None)  # the first example loads the compiled kernels
@given(
    toy_workloads(),
    st.integers(2, 3),
    st.integers(0, 20),
    st.lists(st.integers(0, 25), min_size=1, max_size=4),
    st.sampled_from(["round-robin", "session"]),
    st.sampled_from(PARTIAL_BLOCKS),
    st.sampled_from(EVICTION_ORDERS),
)
def test_the_shared_tiers_curve_is_the_fleet_at_every_room(workload, instances, gpu, rooms, router, partial, order):
    """The exact curve of the CPU tier a fleet shares, at a pool room of N times an instance's, is what the fleet's
    replay with that shared tier serves from the CPU, round by round (write-through, LRU)."""
    curve = tier_curve(workload, partial, order, gpu_tokens=gpu, instances=instances, router=router)
    for room in rooms:
        rules = {"partial_blocks": partial, "eviction_order": order}
        chosen = CacheSettings(gpu_tokens=gpu, cpu_tokens=room, block_tokens=workload.block_tokens, **rules)
        totals = replay(workload, build(chosen, instances, router, "shared"))
        assert list(curve.at(room * instances)) == [row[COUNTERS.index("cpu_tokens")] for row in totals]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "--instances: a fleet's curve is its shared CPU tier's: give --gpu-tokens alone"),
        (
            ["--gpu-tokens", "100", "--cpu-tokens", "10"],
            "--instances: a fleet's curve is its shared CPU tier's: give --gpu-tokens alone",
        ),
        (
            ["--gpu-tokens", "100", "--router", "prefix"],
            "--router prefix reads the CPU tier, whose room the curve varies: no exact curve",
        ),
    ],
)
def test_a_curve_a_fleet_cannot_have_is_refused_in_one_line(extra, message):
    done = kvlab("mrc", *LAB, "--instances", "2", *extra)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"kvlab mrc: error: {message}\n")


QWEN = "models/Qwen2.5-1.5B-Instruct/config.json"
PLAN = ["plan", "--workload", "lab", "--docs", "3", "--tokens", "200", "--chunk-tokens", "10", "--model-config", QWEN]


def planned(*extra):
    done = kvlab(*PLAN, "--gpu-tokens", "200", *extra)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def replayed(cpu_tokens, *extra):
    done = kvlab(
        "replay",
        "--workload",
        "lab",
        "--docs",
        "3",
        "--tokens",
        "200",
        "--block-tokens",
        "10",
        "--gpu-tokens",
        "200",
        "--cpu-tokens",
        str(cpu_tokens),
        *extra,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("router", "scope"),
    [("round-robin", "shared"), ("prefix", "shared"), ("round-robin", "private"), ("session", "private")],
)
def test_a_fleets_plan_is_its_replay_at_the_budget_and_at_full_reuse(router, scope):
    """The plan's figures at its CPU budget, in all and instance by instance, and its room for full reuse, per
    instance, are what the fleet's replay serves at those rooms (a shared tier's curve, or bisection over replays:
    prefix routing reads the CPU tier); one block less per instance does not reach full reuse."""
    fleet = ["--instances", "3", "--router", router, "--cpu-scope", scope]
    plan = planned("--cpu-gib", "0.001", *fleet)
    assert plan["cache"] | {"instances": 3, "router": router, "cpu_scope": scope} == plan["cache"]
    at_budget = replayed(plan["cache"]["cpu_tokens"], *fleet)
    assert (plan["gpu_hit_tokens"], plan["cpu_hit_tokens"]) == (
        at_budget["gpu_hit_tokens"],
        at_budget["cpu_hit_tokens"],
    )
    each = plan["instances"]  # and per instance, what the replay's instances served, adding up to the plan's
    assert each == [{key: one[key] for key in each[0]} for one in at_budget["instances"]]
    assert sum(one["cpu_hit_tokens"] for one in each) == plan["cpu_hit_tokens"]
    full = plan["cpu_tokens_for_full_reuse"]
    assert replayed(full, *fleet)["token_hit_ratio"] == plan["max_token_hit_ratio"]
    assert full == 0 or replayed(full - 10, *fleet)["token_hit_ratio"] < plan["max_token_hit_ratio"]


def test_a_fleets_plan_for_people_says_it_is_a_fleet():
    done = kvlab(
        *PLAN,
        "--gpu-tokens",
        "200",
        "--cpu-gib",
        "0.001",
        "--instances",
        "3",
        "--cpu-scope",
        "shared",
        "--format",
        "table",
    )
    assert done.returncode == 0, done.stderr
    said = "fleet: 3 instances, round-robin routing, one CPU tier of 3 x the budget, shared"
    assert done.stdout.splitlines()[2] == f"{said}; rooms and budgets per instance"


def test_a_plan_of_one_instance_is_the_plan():
    assert planned("--cpu-gib", "0.001", "--instances", "1", "--router", "prefix", "--cpu-scope", "shared") == planned(
        "--cpu-gib", "0.001"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--gpu-system", "h100_sxm", "--engine", "vllm"],
            "--gpu-system: a fleet's time comes with kvlab simulate --instances (not modelled yet)",
        ),
        (["--load", "rate=1"], "--load: a fleet's time comes with kvlab simulate --instances (not modelled yet)"),
        (["--disk-gib", "1"], "--disk-gib, --disk-tokens: a fleet's disk tier is not modelled yet (--instances 1)"),
    ],
)
def test_what_a_fleets_plan_does_not_model_is_refused_in_one_line(extra, message):
    done = kvlab(*PLAN, "--gpu-tokens", "200", "--instances", "2", *extra)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", f"kvlab plan: error: {message}\n")


def test_a_fleets_plan_frame_has_a_row_per_instance_and_one_for_the_fleet():
    """``kvlab.plan(..., instances=3).instances_frame()``: the instances' rows, then ``all``, whose figures are the
    plan's and whose requests are theirs added up; a plan of one instance has no such table."""
    from kvlab import plan as api_plan

    given = {"workload": "lab", "docs": 3, "tokens": 200, "chunk_tokens": 10, "model_config": QWEN}
    result = api_plan(**given, gpu_tokens=200, cpu_gib=0.001, instances=3, cpu_scope="shared")
    frame, document = result.instances_frame(), result.to_dict()
    assert list(frame["instance"]) == [0, 1, 2, "all"]
    fleet = frame.iloc[-1]
    assert fleet["cpu_hit_tokens"] == document["cpu_hit_tokens"] == frame["cpu_hit_tokens"][:3].sum()
    assert fleet["requests"] == frame["requests"][:3].sum() > 0
    with pytest.raises(KvlabError, match="no instances' table"):
        api_plan(**given, gpu_tokens=200, cpu_gib=0.001).instances_frame()
