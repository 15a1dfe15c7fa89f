"""``kvlab.simulate``: a workload through one engine instance on a clock (what ``kvlab simulate`` prints)."""

import json
import math
from dataclasses import dataclass, field

from kvlab.api.common import _frame, _hardware_values, _meter, _Result, workload_of
from kvlab.loop import ratio as _ratio
from kvlab.util.errors import KvlabError, SettingError
from kvlab.util.files import dump_json

__all__ = ["PERCENTILES", "REQUEST_COLUMNS", "Simulation", "simulate"]

REQUEST_COLUMNS = (
    "request",
    "arrival_s",
    "queue_ms",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "input_tokens",
    "output_tokens",
    "gpu_hit_tokens",
    "cpu_hit_tokens",
    "computed_tokens",
    "preemptions",
)
TIMES = ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms")
PERCENTILES = (*range(100), 99.5, 99.9, 100)  # the rows of --percentiles: every whole percentile, and the tail's
CACHE_RULES = (  # kvlab replay's cache flags that simulate takes, with the values its engine models
    "partial_blocks",
    "eviction_order",
    "write_policy",
    "gpu_eviction",
    "cpu_eviction",
    "touch_cpu_on_gpu_hit",
    "re_store_on_gpu_hit",
)


@dataclass(frozen=True)
class Simulation(_Result):
    """What ``kvlab simulate`` prints; ``per_request`` its ``--per-request`` CSV (with ``per_request=True``), and
    ``percentiles`` its ``--percentiles`` CSV (with ``percentiles=True``)."""

    requests: int
    ttft_ms: dict
    tpot_ms: dict
    e2e_ms: dict
    requests_per_s: float | None
    gpu_hit_tokens: int
    cpu_hit_tokens: int
    preemptions: int
    text: str = field(repr=False)
    per_request: str | None = field(default=None, repr=False)
    percentiles: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, text, per_request=None, percentiles=None):
        document = json.loads(text)
        names = ("requests", "ttft_ms", "tpot_ms", "e2e_ms", "requests_per_s", "gpu_hit_tokens", "cpu_hit_tokens")
        figures = {name: document[name] for name in names}
        kept = {"per_request": per_request, "percentiles": percentiles}
        return cls(**figures, preemptions=document["preemptions"], text=text, **kept)

    def to_frame(self):
        """One row per time (TTFT, TPOT, end-to-end, queueing): its percentiles and mean."""
        document = self.to_dict()
        return _frame([{"time": name, **document[name]} for name in TIMES])

    def requests_frame(self):
        """One row per request (the ``--per-request`` table); only with ``per_request=True``."""
        import io

        import pandas as pd

        if self.per_request is None:
            raise KvlabError("the per-request table is kept with per_request=True")
        return pd.read_csv(io.StringIO(self.per_request))


def _times(values):
    import numpy as np

    times = np.asarray(values, dtype=float)
    return times[~np.isnan(times)]


def _at(times, percentiles):
    """``times``' percentiles (numpy's linear ones), each rounded to 0.1 ms."""
    import numpy as np

    return [round(float(value), 1) for value in np.percentile(times, percentiles)]


def spread(values):
    """``{p50, p90, p99, mean}`` of ``values`` (ms, NaN left out), each rounded to 0.1 ms (numpy's linear
    percentiles); None each when there are none."""
    times = _times(values)
    if not len(times):
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    found = _at(times, [50, 90, 99])
    return {**dict(zip(("p50", "p90", "p99"), found, strict=True)), "mean": round(float(times.mean()), 1)}


def percentiles_table(stats):
    """The ``--percentiles`` CSV: a row per percentile of :data:`PERCENTILES`, each time's value at it (ms, rounded
    as :func:`spread`'s, so that its p50, p90 and p99 are the JSON's; empty where a time has no value)."""
    from kvlab.util.files import csv_text

    columns = {}
    for name in TIMES:
        times = _times(getattr(stats, name))
        columns[name] = _at(times, PERCENTILES) if len(times) else [""] * len(PERCENTILES)
    rows = [
        {"percentile": percentile, **{name: columns[name][index] for name in TIMES}}
        for index, percentile in enumerate(PERCENTILES)
    ]
    return csv_text(rows, ("percentile", *TIMES))


def simulate(
    *,
    workload,
    gpu_tokens=None,
    cpu_tokens=0,
    block_tokens=None,
    speedup=None,
    rate=None,
    clients=None,
    seed=None,
    per_request=False,
    percentiles=False,
    max_memory=None,
    dry_run=False,
    **settings,
):
    """``workload`` through one engine instance on a clock: arrivals (``speedup`` of the trace's clock, a Poisson
    ``rate`` or ``clients``), the engine's settings (:class:`kvlab.simulator.settings.EngineSettings`' fields), the
    cache's (``kvlab replay``'s: ``gpu_tokens`` or ``gpu_blocks``, ``cpu_tokens`` or ``cpu_blocks``,
    ``block_tokens``, ``write_policy``, ...) and the hardware's (:class:`kvlab.latency.hardware.HardwareSettings`'
    fields). With ``per_request`` the result keeps the per-request table, with ``percentiles`` the times'
    percentiles. A :class:`Simulation`; with ``dry_run``, None once every setting is checked as the run checks it
    (``kvlab config``'s look at a job before any job runs), nothing read or run."""
    from kvlab.cache.interface import CacheSettings
    from kvlab.latency.hardware import HardwareModel, HardwareSettings, settings_names
    from kvlab.serving.vllm import gpu_pool
    from kvlab.simulator.arrivals import Arrivals
    from kvlab.simulator.cost import StepCost
    from kvlab.simulator.settings import EngineSettings, engine_setting_names
    from kvlab.workloads import whole_number

    hardware = _hardware_values({name: settings.pop(name) for name in settings_names() if name in settings})
    if hardware.get("model_config") is None or hardware.get("gpu_system") is None:
        raise SettingError("the following arguments are required: --model-config, --gpu-system")
    engine = EngineSettings(**{name: settings.pop(name) for name in engine_setting_names() if name in settings})
    rules = {name: settings.pop(name) for name in CACHE_RULES if name in settings}
    arrivals = Arrivals(speedup, rate, clients, seed)
    made = workload_of(workload, settings, block_tokens, "simulate")
    block = made.block_tokens
    for name, given, other in (("gpu", gpu_tokens, engine.gpu_blocks), ("cpu", cpu_tokens, engine.cpu_blocks)):
        if given and other is not None:
            raise SettingError(f"argument --{name}-blocks: not allowed with argument --{name}-tokens")
    for name, value in (("gpu_tokens", gpu_tokens), ("cpu_tokens", cpu_tokens)):
        if value is not None:
            try:
                whole_number(0)(value)
            except ValueError as error:
                raise SettingError(f"argument --{name.replace('_', '-')}: {error}") from None
    model = HardwareModel(HardwareSettings(**hardware), block)
    pool_from = "--gpu-blocks"
    if engine.gpu_blocks is not None:
        gpu_blocks = engine.gpu_blocks
    elif gpu_tokens is not None:
        gpu_blocks, pool_from = int(gpu_tokens) // block, "--gpu-tokens"
    else:
        rule = gpu_pool(model, block, engine.gpu_memory_utilization, engine.max_num_batched_tokens)
        gpu_blocks, pool_from = rule.blocks, rule.describe()
    cpu_blocks = engine.cpu_blocks if engine.cpu_blocks is not None else int(cpu_tokens or 0) // block
    try:
        chosen = CacheSettings(
            gpu_tokens=gpu_blocks * block, cpu_tokens=cpu_blocks * block, block_tokens=block, **rules
        )
    except (ValueError, TypeError) as error:
        raise SettingError(str(error)) from None
    for name, value, modelled in (
        ("partial_blocks", chosen.partial_blocks, "drop"),
        ("gpu_eviction", chosen.gpu_eviction, "lru"),
        ("cpu_eviction", chosen.cpu_eviction, "lru"),
    ):
        if value != modelled:
            raise SettingError(
                f"argument --{name.replace('_', '-')}: kvlab simulate models {modelled} only (vLLM's block pool), got"
                f" {value}"
            )
    rules, rules_from = _rules(engine, model)
    usable = gpu_blocks - 1 if engine.scheduler == "vllm" else gpu_blocks  # vLLM's null block
    if usable < 1:
        raise SettingError(
            f"argument --gpu-blocks: the engine needs a GPU pool of at least {gpu_blocks - usable + 1} blocks"
            + (" (vLLM keeps block 0 out of use: its null block)" if usable < gpu_blocks else "")
        )
    meter = _meter(max_memory, simulate_footprint(gpu_blocks, cpu_blocks, per_request, getattr(made, "split", 1) > 1))
    meter.check(0, 0, 0)  # the pool's and the tier's entries alone
    if dry_run:
        return None
    cost = StepCost(model, block)
    tail_first = chosen.eviction_order == "tail-first"
    try:
        stats = _run(made, engine, rules, chosen, arrivals, cost, meter, usable, cpu_blocks, per_request, tail_first)
    except MemoryError:  # the machine's memory ran out (--max-memory bounds what the run projects): the command's line
        raise KvlabError("out of memory") from None
    if stats.refused and not stats.requests:
        raise KvlabError(
            f"every request ({stats.refused:,}) is longer with its output than the GPU pool ({usable:,} blocks of"
            f" {block} tokens), and the engine refuses it (as vLLM refuses a model length its KV cache cannot hold):"
            " give a larger pool or fewer --output-tokens"
        )
    document = _document(made, chosen, engine, arrivals, cost, pool_from, gpu_blocks, cpu_blocks, stats)
    if engine.scheduler == "vllm":
        document["engine"]["version"] = rules.version if rules_from == "--engine-version" else rules_from[0]
        document["engine"]["rules"] = rules_from if rules_from == "--engine-version" else rules_from[1]
        document["cache"]["gpu_blocks_usable"] = usable
    table = _table(stats, made.request_ids()) if per_request else None
    return Simulation.of(dump_json(document), table, percentiles_table(stats) if percentiles else None)


def _rules(engine, model):
    """vLLM's rules (:func:`kvlab.serving.vllm.rules_for`) of ``--engine-version``, else of the database's
    version where it prices the run (rules and prices from one version), else the newest; and where they come from:
    ``--engine-version``, or (the version, why)."""
    from kvlab.serving.vllm import NEWEST, rules_for

    asked = model.settings.engine_version
    if asked is not None:
        return rules_for(asked), "--engine-version"
    database = model.database
    if database is not None and database.backend == "vllm":
        rules = rules_for(database.version)
        return rules, (database.version, f"vLLM {rules.version}'s, the version the database measured")
    return rules_for(NEWEST), (NEWEST, "the newest kvlab models (--engine-version for another)")


def _connector(engine, rules, chosen, cost):
    """Whether the CPU tier is vLLM's OffloadingConnector (kvlab/simulator/offloading.py): vLLM's engine and scheduler
    from 0.33, written through, LMCache's switches off; else the write policy's (kvlab/cache/write_policies.py)."""
    return (
        rules.offloading_connector
        and engine.scheduler == "vllm"
        and cost.model.settings.engine == "vllm"
        and chosen.write_policy == "write-through"
        and not chosen.touch_cpu_on_gpu_hit
        and not chosen.re_store_on_gpu_hit
    )


def _run(made, engine, rules, chosen, arrivals, cost, meter, gpu_blocks, cpu_blocks, per_request, tail_first):
    """The run's :class:`kvlab.simulator.events.SimulatorStats`: the compiled loop's where it serves the run within
    --max-memory, else the Python engine's. ``gpu_blocks``: the blocks a request can take (vLLM's null block
    aside)."""
    from kvlab.simulator import compiled
    from kvlab.simulator.events import Simulator
    from kvlab.simulator.pool import BlockPool
    from kvlab.util.memory import MemoryLimitError

    block = chosen.block_tokens
    stats = None
    if compiled.compiles(made, engine, rules, chosen, arrivals):
        try:
            rooms = gpu_blocks, cpu_blocks, block
            stats = compiled.run(made, engine, rules, *rooms, cost, arrivals, per_request, tail_first, meter)
        except MemoryLimitError:
            if made.trace == "-":  # standard input cannot be read again
                raise
            # The compiled loop's state per distinct block would pass --max-memory: the Python engine holds only what
            # is in flight and in the tiers. It reads the trace again (the same outputs either way).
            meter.projected = 0
    if stats is None:
        offload = None
        if cpu_blocks and _connector(engine, rules, chosen, cost):
            from kvlab.simulator.offloading import OffloadingConnector

            offload = OffloadingConnector(cpu_blocks)
        elif cpu_blocks:
            from kvlab.cache.write_policies import make_cache

            offload = make_cache(chosen.write_policy, 0, cpu_blocks * block, block, **_policy_rules(chosen))
        pool = BlockPool(gpu_blocks, block)
        simulator = Simulator(pool, cost, offload, engine, per_request, tail_first=tail_first, rules=rules)
        simulator.meter = meter
        timed = _metered(made, meter)
        stats = simulator.run(
            timed if arrivals.kind == "clients" else arrivals.open_times(timed, getattr(made, "trace", None)),
            arrivals.clients,
        )
    return stats


def simulate_footprint(gpu_blocks, cpu_blocks, per_request, interned):
    """What ``kvlab simulate`` holds (kvlab/util/memory.py): per request its four times (typed arrays, up to twice
    while they grow, and the copies the percentiles take) and, if kept, its table row (a tuple, the frame, the CSV
    text); per distinct block the dense ids of blocks cut from a trace block; fixed, reading the trace (its batch of
    lines: what every trace reader holds) and the GPU pool's and the CPU tier's entries (an OrderedDict entry and its
    key each). A waiting request holds more (kvlab/simulator/events.py: the engine checks its queue)."""
    from kvlab.cache.compiled import READING_BYTES
    from kvlab.util.memory import Footprint

    per = 96 + (480 if per_request else 0)
    return Footprint(request=per, key=24 if interned else 0, fixed=READING_BYTES + 150 * (gpu_blocks + cpu_blocks))


def _policy_rules(chosen):
    rules = {name: getattr(chosen, name) for name in CACHE_RULES if name != "write_policy"}
    rules.pop("gpu_eviction")
    return rules


def _metered(workload, meter):
    """The workload's timed requests, checked against ``meter`` every 4,096 of them (and at the end)."""
    accesses = number = 0
    for number, request in enumerate(workload.timed(), 1):
        accesses += len(request.keys)
        if not number % 4096:
            meter.check(accesses, number, accesses, workload.read_fraction)
        yield request
    meter.check(accesses, number, accesses, workload.read_fraction)


def _document(made, chosen, engine, arrivals, cost, pool_from, gpu_blocks, cpu_blocks, stats):
    block = chosen.block_tokens
    inputs, gpu, cpu = stats.input_tokens, stats.gpu_hit_tokens, stats.cpu_hit_tokens
    span = (stats.last - stats.first) if stats.last is not None else 0.0
    lookups = stats.lookups
    cache = {
        "gpu_blocks": gpu_blocks,
        "gpu_tokens": gpu_blocks * block,
        "gpu_pool_from": pool_from,
        "cpu_blocks": cpu_blocks,
        "cpu_tokens": cpu_blocks * block,
        **{name: value for name, value in chosen.describe().items() if name not in ("gpu_tokens", "cpu_tokens")},
    }
    links = {
        link: {
            "blocks": stats.copied[link],
            "busy_s": round(stats.busy[link], 3),
            "utilisation": round(stats.busy[link] / span, 6) if span else None,
        }
        for link in ("h2d", "d2h")
    }
    return {
        "workload": made.describe(),
        "cache": cache,
        "engine": {
            "scheduler": "vllm-v1" if engine.scheduler == "vllm" else engine.scheduler,
            **{k: v for k, v in engine.describe().items() if "blocks" not in k and k != "scheduler"},
        },
        "arrivals": arrivals.describe(),
        "latency_source": cost.model.source,
        "latency": cost.describe(),
        "requests": stats.requests,
        "refused": stats.refused,
        "input_tokens": inputs,
        "output_tokens": stats.output_tokens,
        "gpu_hit_tokens": gpu,
        "cpu_hit_tokens": cpu,
        "computed_tokens": inputs - gpu - cpu,
        "token_hit_ratio": _ratio(gpu + cpu, inputs),
        "hit_ratios": {
            "kvlab": {"gpu": _ratio(gpu, inputs), "cpu": _ratio(cpu, inputs), "total": _ratio(gpu + cpu, inputs)},
            "vllm": {
                "queries": lookups["queries"],
                "gpu": _ratio(lookups["gpu_hits"], lookups["queries"]),
                "cpu": _ratio(lookups["cpu_hits"], lookups["queries"]),
            },
        },
        **{name: spread(getattr(stats, name)) for name in TIMES},
        "makespan_s": round(span, 3),
        "requests_per_s": round(stats.requests / span, 4) if span else None,
        "output_tokens_per_s": round(stats.output_tokens / span, 2) if span else None,
        "preemptions": stats.preemptions,
        "steps": stats.steps,
        "links": links,
    }


def _table(stats, ids=None):
    """The ``--per-request`` CSV; with ``ids`` (the trace's own, by request number) a ``request_id`` column."""
    from kvlab.util.files import csv_text

    rows = []
    for number, arrival, queue, ttft, tpot, e2e, tokens, output, gpu, cpu, preemptions in sorted(stats.rows):
        times = [round(value, 3) if not math.isnan(value) else "" for value in (queue, ttft, tpot, e2e)]
        values = (number, round(arrival, 6), *times, tokens, output, gpu, cpu, tokens - gpu - cpu, preemptions)
        rows.append(dict(zip(REQUEST_COLUMNS, values, strict=True)))
        if ids is not None:
            rows[-1]["request_id"] = "" if ids[number] is None else ids[number]
    columns = REQUEST_COLUMNS if ids is None else (REQUEST_COLUMNS[0], "request_id", *REQUEST_COLUMNS[1:])
    return csv_text(rows, columns)
