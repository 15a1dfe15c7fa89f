"""``kvlab.plan``: a CPU offload budget for a workload and a model (what ``kvlab plan`` prints)."""

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from decimal import Decimal

from kvlab.api.common import (
    _bound,
    _declared,
    _exclusive,
    _flag,
    _frame,
    _grid,
    _hardware_values,
    _leaves,
    _meter,
    _ratio,
    _Result,
    _scalars,
    _setting,
    compile_notice,
    workload_of,
)
from kvlab.cache.costs import WINDOW_RULES
from kvlab.cache.prefix import eviction_order_setting, partial_blocks_setting
from kvlab.cache.write_policies import WRITE_POLICIES
from kvlab.fleet import FLEET_SETTINGS, cpu_scope_setting, instances_setting, router_setting
from kvlab.latency.hardware import HardwareSettings
from kvlab.serving import OFFLOADING
from kvlab.sizing.model_size import MAX_GIB, decimal_gib, kv_dtype_setting
from kvlab.util.errors import KvlabError, SettingError
from kvlab.util.files import dump_json
from kvlab.util.settings import Declared, setting
from kvlab.workloads import whole_number

DEFAULT_GPUS_PER_NODE = 8  # the node --cpu-gib-per-node is divided over without --gpu-system


FLEET = "a fleet: instances behind a router, without a clock (kvlab/fleet/); rooms and budgets per instance"


@dataclass(frozen=True, kw_only=True)
class PlanSettings(Declared):
    """A plan's settings at one point of its grid (``kvlab plan``'s flags and ``kvlab.plan``'s keywords, declared
    once: kvlab/util/settings.py); ``grid`` marks a flag that takes a list of values (a grid, also the API's for
    the rooms), ``exclusive`` the flags of which one at most is given (and one must be, where it says so)."""

    gpu_tokens: int | None = setting(
        None,
        convert=whole_number(0),
        group="cache",
        exclusive=("gpu", True),
        metavar="GPU_TOKENS",
        help="the GPU's KV room in tokens (vLLM's figure)",
    )
    gpu_gib: Decimal | None = setting(
        None,
        convert=decimal_gib,
        group="cache",
        exclusive=("gpu", True),
        renamed="--gpu-gb",
        metavar="GPU_GIB",
        help=f"the GPU's KV room in GiB (2**30 bytes; at most {MAX_GIB})",
    )
    cpu_gib: Decimal | None = setting(
        None,
        convert=decimal_gib,
        group="cache",
        exclusive=("cpu", False),
        grid="GiB amounts",
        renamed="--cpu-gb",
        metavar="CPU_GIB",
        help=f"CPU offload budget per GPU in GiB (2**30 bytes; default 0, at most {MAX_GIB}); a comma-separated list"
        " of distinct budgets plans each (a JSON array, in order)",
    )
    cpu_gib_per_node: Decimal | None = setting(
        None,
        convert=decimal_gib,
        group="cache",
        exclusive=("cpu", False),
        grid="GiB amounts",
        renamed="--cpu-gb-per-node",
        metavar="AMOUNT[,AMOUNT...]",
        help="instead: the node's host memory for the KV cache in GiB, divided over the instance's ranks on the node"
        " (per GPU: AMOUNT / min(tp, GPUs per node), as each engine sizes its CPU cache per rank); GPUs per node:"
        f" --gpu-system's, else {DEFAULT_GPUS_PER_NODE}",
    )
    disk_gib: Decimal | None = setting(
        None,
        convert=decimal_gib,
        group="cache",
        exclusive=("disk", False),
        grid="GiB amounts",
        renamed="--disk-gb",
        metavar="DISK_GIB",
        help="a disk (or remote) tier below the CPU, per GPU in GiB (2**30 bytes), written through with every block"
        " neither tier above served (kvlab/cache/tiers.py); a comma-separated list plans each",
    )
    disk_tokens: int | None = setting(
        None,
        convert=whole_number(0),
        group="cache",
        exclusive=("disk", False),
        metavar="DISK_TOKENS",
        help="instead: the disk tier's room in tokens",
    )
    tp: int = setting(
        1, convert=whole_number(1, 2**20), group="model", help="tensor-parallel degree (default 1); rooms are per GPU"
    )
    kv_dtype: str = kv_dtype_setting("model")
    chunk_tokens: int | None = setting(
        None,
        convert=whole_number(1),
        group="cache",
        help="tokens per chunk (default 256, LMCache's; mooncake: 512 or a multiple of it)",
    )
    partial_blocks: str = partial_blocks_setting("cache")
    eviction_order: str = eviction_order_setting("cache")
    write_policy: str = setting(
        "write-through",
        choices=tuple(WRITE_POLICIES),
        group="cache",
        help="how the CPU tier is filled (default write-through: exact curve; others: bisection over replays)",
    )
    target_hit_ratio: float | None = setting(
        None,
        convert=_ratio,
        help="also the smallest CPU budget for this token hit ratio over the whole workload (0..1)",
    )
    engine: str | None = setting(
        None,
        choices=OFFLOADING,
        help="also the settings to paste into this engine for the CPU budget, and the host memory it allocates",
    )
    window_rule: str | None = setting(
        None,
        choices=WINDOW_RULES,
        help="what a sliding-window layer stores: all-layers (LMCache: every token) or in-window (vLLM's hybrid"
        " allocator: only the last window of each request; budgets by bisection over replays); default in-window"
        " with --engine vllm, else all-layers",
    )
    prices: str | None = setting(
        None,
        metavar="FILE",
        help="also what the plan costs per hour, its CPU budget capped by the node's host memory: a prices file"
        " (kvlab/latency/list_prices.yaml's shape), or default (kvlab's, public list prices with their sources);"
        " with --gpu-system",
    )
    instances: int = instances_setting(FLEET)
    router: str = router_setting(FLEET)
    cpu_scope: str = cpu_scope_setting(FLEET)

    def check(self):
        _exclusive(vars(self), "gpu_tokens", "gpu_gib")
        if self.disk_gib is not None and self.disk_tokens is not None:
            raise SettingError("argument --disk-tokens: not allowed with argument --disk-gib")
        if self.cpu_gib is not None and self.cpu_gib_per_node is not None:
            raise SettingError("argument --cpu-gib-per-node: not allowed with argument --cpu-gib")


@dataclass(frozen=True)
class Plan(_Result):
    """What ``kvlab plan`` prints: rooms and budgets per GPU; ``text`` is its JSON."""

    gpu_tokens: int
    cpu_gib: float
    cpu_tokens: int
    token_hit_ratio: float | None
    max_token_hit_ratio: float | None
    cpu_tokens_for_full_reuse: int | None
    cpu_gib_for_full_reuse: float | None
    text: str = field(repr=False)

    @classmethod
    def of(cls, text):
        document = json.loads(text)
        cache = document["cache"]
        top = ("token_hit_ratio", "max_token_hit_ratio", "cpu_tokens_for_full_reuse", "cpu_gib_for_full_reuse")
        rooms = {key: cache[key] for key in ("gpu_tokens", "cpu_gib", "cpu_tokens")}
        return cls(**rooms, **{key: document[key] for key in top}, text=text)

    def summary(self):
        """Every figure the plan prints, one row of a grid's frame: the cache's and the plan's own by their keys, and
        those of its blocks (``model``, ``rounds``, ``engine``, ``ttft``, ``load``...) at their path in
        :meth:`to_dict` joined by dots, a round by its name (``ttft.all.p50_ms``, ``load.ttft_ms.p99``,
        ``rounds.pass2.cpu_hit_tokens``)."""
        document = self.to_dict()
        found = _scalars(document)
        blocks = {key: value for key, value in document.items() if key != "cache" and isinstance(value, dict | list)}
        found.update({".".join(path): value for path, value in _leaves(blocks)})
        if "engine" in document:  # what to paste, as the table's setting column shows it
            from kvlab.sizing.plan import setting_items

            found["engine.setting"] = "; ".join(setting_items(document["engine"]))
        if document.get("notes"):
            found["notes"] = "; ".join(document["notes"])
        return found

    def instances_frame(self):
        """A fleet's plan (``instances`` > 1): one row per instance at the plan's budget (what it served, as
        ``kvlab replay --instances`` reports it), then one for the fleet (``all``)."""
        document = self.to_dict()
        if "instances" not in document:
            raise KvlabError("a plan of one instance has no instances' table (instances=N, N > 1)")
        names = [key for key in document["instances"][0] if key != "instance"]
        fleet = {"instance": "all", **{key: document.get(key) for key in names}}
        fleet["requests"] = sum(one["requests"] for one in document["instances"])
        return _frame([*document["instances"], fleet])

    def to_frame(self):
        """One row per round, ``all`` first: the tokens served from GPU, from CPU (and disk), recomputed, the hit
        ratio (and the predicted TTFT's percentiles, where the plan has them: ``gpu_system``; the time under
        ``load``, a figure of the whole run, on the ``all`` row, named as in :meth:`summary`)."""
        document = self.to_dict()
        disk = ["disk_hit_tokens"] if "disk_hit_tokens" in document else []
        columns = ["round", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", *disk, "computed_tokens"]
        columns.append("token_hit_ratio")
        rows = [{**document, "round": "all"}, *document["rounds"]]
        if "ttft" in document:
            times = [document["ttft"]["all"], *document["ttft"]["rounds"]]
            rows = [
                {**row, **{key: value for key, value in time.items() if key != "round"}}
                for row, time in zip(rows, times, strict=True)
            ]
            columns += [key for key in times[0] if key != "round"]
        if "load" in document:
            under = {".".join(path): value for path, value in _leaves({"load": document["load"]})}
            rows[0] = {**rows[0], **under}
            columns += list(under)
        return _frame([{key: row.get(key) for key in columns} for row in rows], columns)


def plan(*, workload, model_config, load=None, max_memory=None, **settings):
    """A CPU offload budget for ``workload`` served by the model of ``model_config`` (a Hugging Face config.json):
    the tokens served from GPU, from CPU and recomputed per round, and the GiB full reuse (or ``target_hit_ratio``)
    takes; ``kvlab plan``'s flags (:class:`PlanSettings`), one of ``gpu_tokens`` and ``gpu_gib``. ``cpu_gib`` is per
    GPU (default 0), or ``cpu_gib_per_node``, the node's, is divided over the instance's ranks on a node (min(tp, GPUs
    per node): the ``gpu_system``'s, else 8). With ``gpu_system`` (and ``engine``) the plan also prices each round's
    TTFT (:class:`kvlab.latency.hardware.HardwareSettings`' keywords; None: its default). A :class:`Plan`, or a
    :class:`Grid` of them where ``gpu_tokens``, ``gpu_gib``, ``cpu_gib`` or ``cpu_gib_per_node`` is a list. With
    ``load`` (``"speedup=S"``, ``"rate=R"`` or ``"clients=N"``: ``kvlab simulate``'s arrivals) each plan also
    gives the TTFT percentiles and the throughput under that load (``kvlab.simulate`` at the plan's rooms); the
    workload's options are keywords too."""
    given = {"workload": workload, "model_config": model_config, "load": load, "max_memory": max_memory}
    given = _bound(plan, {**given, **settings})
    # one hardware model, and one plan without a CPU tier (the verdict's), for every point of a grid
    priced = functools.partial(_plan, models={}, baselines={})
    return _grid(priced, given, ("gpu_tokens", "gpu_gib", "cpu_gib", "cpu_gib_per_node", "disk_gib", "disk_tokens"))


def plan_setting(
    workload, options, model_config, tp=1, kv_dtype="auto", chunk_tokens=None, gpu_tokens=None, gpu_gib=None
):
    """``(workload, model shape, bytes per token, GPU tokens)`` of a plan's setting (``kvlab plan``'s and ``kvlab ttft
    budgets``'): SettingError for a setting the command refuses, ModelConfigError for a model it cannot size."""
    from kvlab.sizing.model_size import ModelConfigError, no_tokens, read_model_config, tokens_in
    from kvlab.workloads import WORKLOADS

    source = workload.get("source") if isinstance(workload, Mapping) else workload
    trace_format = getattr(WORKLOADS.get(source) if isinstance(source, str) else None, "format", None)
    unit = getattr(trace_format, "block_tokens", None)
    if unit and chunk_tokens is not None and chunk_tokens % unit:
        raise SettingError(
            f"--chunk-tokens must be a multiple of the trace's {unit}-token hash blocks (the finest it can replay),"
            f" got {chunk_tokens}; without it the replay is in {unit}-token blocks"
        )
    try:
        made = workload_of(workload, options, chunk_tokens, "plan")
    except SettingError as error:  # a workload's message names replay's flag for the chunk
        raise SettingError(str(error).replace("--block-tokens", "--chunk-tokens")) from None
    shape = read_model_config(model_config)
    try:
        per_token = shape.bytes_per_token(tp, kv_dtype, windows=True)
    except ValueError as error:
        raise SettingError(f"--tp: {error}") from None
    refused = no_tokens(shape)
    if refused:
        raise ModelConfigError(f"{model_config}: {refused}")
    return made, shape, per_token, gpu_tokens if gpu_tokens is not None else tokens_in(gpu_gib, per_token)


def _plan(*, workload, model_config, max_memory, models, baselines, load, **settings):
    from kvlab.curves.mrc import FOOTPRINT
    from kvlab.latency.hardware import no_disk_pricing
    from kvlab.serving import ENGINES
    from kvlab.sizing import plan as planner
    from kvlab.sizing.verdict import verdict

    hardware = {key: settings.pop(key) for key in HARDWARE_SETTINGS}
    options = {key: settings.pop(key) for key in list(settings) if key not in PLAN_SETTINGS}
    checked = dict(vars(PlanSettings(**settings)))
    hardware = _hardware(hardware, checked["engine"])
    fleet = tuple(checked[key] for key in FLEET_SETTINGS) if checked["instances"] > 1 else None
    if fleet is not None:
        for given, flag in ((hardware, "--gpu-system"), (load, "--load")):
            if given is not None:
                raise SettingError(f"{flag}: a fleet's time comes with kvlab simulate --instances (not modelled yet)")
        if checked["disk_gib"] is not None or checked["disk_tokens"] is not None:
            raise SettingError("--disk-gib, --disk-tokens: a fleet's disk tier is not modelled yet (--instances 1)")
    node = None
    if checked["cpu_gib_per_node"] is not None:
        node = _per_node(checked["cpu_gib_per_node"], checked["tp"], hardware)
        checked["cpu_gib"] = node["cpu_gib"]
    if checked["cpu_gib"] is None:
        checked["cpu_gib"] = decimal_gib(0)
    prices = None
    if checked["prices"] is not None:  # before any work: the file read, the node's host memory checked
        from kvlab.latency.list_prices import load_prices

        if hardware is None:
            raise SettingError("argument --prices: prices the GPUs of a --gpu-system: give --gpu-system")
        prices = load_prices(checked["prices"])
        prices.check_host(hardware["gpu_system"], checked["cpu_gib"])
    engine = ENGINES.get(checked["engine"])
    window_rule = checked["window_rule"] or (engine.window_rule if engine else "all-layers")
    made, shape, _, gpu_tokens = plan_setting(
        workload,
        options,
        model_config,
        **{key: checked[key] for key in ("tp", "kv_dtype", "chunk_tokens", "gpu_tokens", "gpu_gib")},
    )
    priced = None  # the hardware model that prices the TTFT (made before the plan: a bad setting stops at once)
    if hardware is not None:
        setting = (model_config, checked["engine"], checked["tp"], checked["kv_dtype"], made.block_tokens)
        priced = _hardware_model(hardware, *setting, models)
        if checked["disk_gib"] is None and checked["disk_tokens"] is None:
            no_disk_pricing(priced.settings, "takes --disk-gib or --disk-tokens")
    if load is not None:  # before any work: what --load asks of the hardware and the workload
        if priced is None:
            raise SettingError("argument --load: the time under load is priced from the hardware: give --gpu-system")
        load = _load_ready(load if isinstance(load, dict) else _setting("load", load_spec, load), made)
    meter = _meter(max_memory, FOOTPRINT)
    result = planner.plan(
        made,
        planner.model_name(model_config),
        shape,
        checked["tp"],
        gpu_tokens,
        checked["cpu_gib"],
        checked["write_policy"],
        checked["partial_blocks"],
        checked["eviction_order"],
        checked["target_hit_ratio"],
        compile_notice,
        meter,
        checked["kv_dtype"],
        checked["engine"],
        window_rule,
        checked["chunk_tokens"],
        checked["disk_gib"],
        checked["disk_tokens"],
        fleet,
    )
    if node is not None:
        cache = result["cache"]
        at = list(cache).index("cpu_tokens") + 1
        given = {"cpu_gib_per_node": float(node["cpu_gib_per_node"]), "ranks_per_node": node["ranks_per_node"]}
        given["gpus_per_node"] = node["gpus_per_node"]
        result["cache"] = dict([*list(cache.items())[:at], *given.items(), *list(cache.items())[at:]])
    judged = result["cpu_hit_tokens"] > 0  # the verdict weighs the tier's time and cost only where it serves
    without = {}  # the same blocks with no CPU tier, for the verdict
    if priced is not None:
        rules = {key: checked[key] for key in ("write_policy", "partial_blocks", "eviction_order")}
        rooms = (checked["tp"], checked["kv_dtype"], gpu_tokens)
        disk = result["cache"].get("disk_tokens")
        result["ttft"] = _ttft(priced, made, shape, (*rooms, checked["cpu_gib"]), rules, window_rule, meter, disk)
        if judged:  # a grid's points differ in their rooms only: the GPU's and the disk's name the baseline
            key = ("ttft", gpu_tokens, disk)
            if key not in baselines:
                baselines[key] = _ttft(priced, made, shape, (*rooms, 0), rules, window_rule, meter, disk)
            without["ttft"] = baselines[key]
    if load is not None:
        result["load"] = _load(load, workload, options, model_config, checked, hardware, result["cache"], max_memory)
        if judged:
            key = ("load", gpu_tokens)
            if key not in baselines:
                alone = {**result["cache"], "cpu_tokens": 0}
                baselines[key] = _load(load, workload, options, model_config, checked, hardware, alone, max_memory)
            without["load"] = baselines[key]
    if prices is not None:
        system, gpus = hardware["gpu_system"], checked["tp"]
        disk_gib = result["cache"].get("disk_gib", 0)
        per_hour = prices.per_hour(system, gpus, checked["cpu_gib"], disk_gib)
        result["cost"] = {"gpus": gpus, "per_hour": per_hour, **prices.describe(system)}
        without["cost"] = {**result["cost"], "per_hour": prices.per_hour(system, gpus, 0, disk_gib)}
    result["verdict"] = verdict(result, without)
    return Plan.of(dump_json(result))


# --- the hardware's TTFT (kvlab/latency/hardware.py) and the node's budget ------------------------------------


HARDWARE_OWN = ("model_config", "engine", "tp", "kv_dtype")  # the hardware's settings that are the plan's own
HARDWARE_SETTINGS = tuple(found.name for found in fields(HardwareSettings) if found.name not in HARDWARE_OWN)


def _hardware(given, engine):
    """The hardware settings given (None: their default), checked; None without ``gpu_system`` (then none other
    may be given): the plan prices no TTFT."""
    if given["gpu_system"] is None:
        for name in HARDWARE_SETTINGS:
            if given[name] is not None and given[name] is not False:
                raise SettingError(f"argument {_flag(name)}: prices the TTFT, which takes --gpu-system")
        return None
    if engine is None:
        raise SettingError("argument --gpu-system: the TTFT is the engine's: give --engine too (vllm, lmcache, sglang)")
    return _hardware_values({name: given[name] for name in HARDWARE_SETTINGS})


def _per_node(amount, tp, hardware):
    """The per-GPU budget of ``amount`` GiB of a node's host memory for the KV cache: divided over the instance's
    ranks on the node, min(tp, GPUs per node: the ``gpu_system``'s, else 8), rounded down to the 18 decimal places
    a budget takes. Every engine sizes its CPU cache per rank (LMCache's max_local_cpu_size per worker, SGLang's
    --hicache-size per rank); vLLM's --kv-offloading-size is then the ranks' total (kvlab/serving/)."""
    import math
    from fractions import Fraction

    from kvlab.sizing.model_size import MAX_GIB_PLACES, decimal_gib

    if hardware is not None:
        from kvlab.latency.systems import read_system

        gpus = read_system(hardware["gpu_system"]).gpus_per_node
    else:
        gpus = DEFAULT_GPUS_PER_NODE
    ranks = min(tp, gpus)
    steps = math.floor(Fraction(amount) * 10**MAX_GIB_PLACES / ranks)  # exact, then down
    whole, places = divmod(steps, 10**MAX_GIB_PLACES)
    text = f"{whole}.{places:0{MAX_GIB_PLACES}d}".rstrip("0").rstrip(".")
    return {"cpu_gib": decimal_gib(text), "cpu_gib_per_node": amount, "ranks_per_node": ranks, "gpus_per_node": gpus}


def _hardware_model(hardware, model_config, engine, tp, kv_dtype, block_tokens, models):
    """The :class:`kvlab.latency.hardware.HardwareModel` of the plan's setting, made once per grid (``models``)."""
    from pathlib import Path

    from kvlab.latency.hardware import HardwareModel, HardwareSettings

    settings = HardwareSettings(
        model_config=Path(model_config).as_posix(), engine=engine, tp=tp, kv_dtype=kv_dtype, **hardware
    )
    key = (settings, block_tokens)
    if key not in models:
        models[key] = HardwareModel(settings, block_tokens)
    return models[key]


def _ttft(model, made, shape, rooms, rules, window_rule, meter, disk_tokens=None):
    """The plan's ``ttft``: one replay at its rooms (a disk tier of ``disk_tokens`` below, where there is one), each
    request priced by the hardware ``model``, the percentiles in all and per round, and what priced them
    (``latency``)."""
    from kvlab.latency.pricing import price_requests, round_times
    from kvlab.loop import replay
    from kvlab.sizing.plan import plan_cache

    cache = plan_cache(made, shape, *rooms, **rules, window_rule=window_rule, disk_tokens=disk_tokens)
    parts = []
    replay(made, cache, parts, meter=meter)
    everything, per_round = round_times(price_requests(model, parts), made.rounds)
    return {"latency": model.describe(disk=bool(disk_tokens)), "all": everything, "rounds": per_round}


LOADS = ("speedup", "rate", "clients")  # kvlab simulate's arrivals (kvlab/simulator/arrivals.py)


def load_spec(text):
    """``"rate=0.5"`` -> ``{"rate": 0.5}``: one of :data:`LOADS` and its number (``clients`` a whole one; a rate or
    a speedup within kvlab simulate's range, :data:`kvlab.simulator.arrivals.PACE`)."""
    from kvlab.simulator.arrivals import MAX_CLIENTS, pace
    from kvlab.util.files import number_text, shown

    name, _, value = str(text).partition("=")
    if name not in LOADS or not number_text(value, whole=name == "clients"):
        raise ValueError(f"expected speedup=S, rate=R or clients=N, got {shown(text)}")
    if name == "clients":
        if not 1 <= int(value) <= MAX_CLIENTS:
            raise ValueError(f"clients: expected a whole number from 1 to {MAX_CLIENTS}, got {shown(value)}")
        return {name: int(value)}
    try:
        return {name: pace(value)}
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None


def _load_ready(arrivals, made):
    """``arrivals`` (:func:`load_spec`'s) once the workload is seen to take them, in plan's words, before the plan
    runs: its first request has a time to speed up and an output length (the engine decodes it). A trace from
    standard input is read once, by the plan: kvlab simulate's own check stands there."""
    first = None if getattr(made, "trace", None) == "-" else next(iter(made.timed()), None)
    if first is not None and "speedup" in arrivals and first.arrival_s is None:
        raise SettingError(
            f"argument --load: workload {made.name} has no timestamps to speed up: give --load rate=R or clients=N"
        )
    if first is not None and first.output_tokens is None:
        raise SettingError(
            f"argument --load: workload {made.name} has no output lengths, which the engine decodes under load: plan"
            " a trace or a benchmark that has them (bench_multiturn, multi_round_qa)"
        )
    return arrivals


def _load(load, workload, options, model_config, checked, hardware, cache, max_memory):
    """The plan's ``load``: ``kvlab simulate`` at its GPU and CPU rooms under ``load``: TTFT p50/p90/p99 and the
    throughput (vLLM v1's scheduler; the full-attention pool: a window rule is the replay's only)."""
    arrivals = load if isinstance(load, dict) else _setting("load", load_spec, load)
    from kvlab.api.simulates import simulate

    simulated = simulate(
        workload=workload,
        **options,
        gpu_tokens=cache["gpu_tokens"],
        cpu_tokens=cache["cpu_tokens"],
        block_tokens=checked["chunk_tokens"],
        model_config=model_config,
        engine=checked["engine"],
        tp=checked["tp"],
        kv_dtype=checked["kv_dtype"],
        write_policy=checked["write_policy"],
        eviction_order=checked["eviction_order"],
        max_memory=max_memory,
        **hardware,
        **arrivals,
    ).to_dict()
    figures = ("requests", "ttft_ms", "tpot_ms", "queue_ms", "requests_per_s", "output_tokens_per_s", "preemptions")
    return {
        "arrivals": simulated["arrivals"],
        "gpu_blocks": simulated["cache"]["gpu_blocks"],
        "cpu_blocks": simulated["cache"]["cpu_blocks"],
        **{name: simulated[name] for name in figures},
        "token_hit_ratio": simulated["token_hit_ratio"],
        "latency_source": simulated["latency_source"],
        **({"note": disk_note(cache["disk_tokens"])} if cache.get("disk_tokens") else {}),
    }


def disk_note(disk_tokens):
    """What the load leaves out of a plan with a disk tier: kvlab simulate's engine has a GPU pool and a CPU tier
    only (kvlab/simulator/events.py), so its times are those of the plan without its disk."""
    return (
        f"kvlab simulate has no disk tier: the time under load is without the plan's disk of {disk_tokens:,} tokens"
        " (its hits recomputed)"
    )


PLAN_SETTINGS = (*(found.name for found in fields(PlanSettings)), "load", *HARDWARE_SETTINGS)


# kvlab.plan's keywords and defaults, from the declarations: the plan's own, then the hardware's (None: not given)
plan.__signature__ = _declared(
    ("workload", "model_config"),
    PlanSettings,
    {**{name: False if name == "layerwise" else None for name in HARDWARE_SETTINGS}, "load": None, "max_memory": None},
)
