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

    def instances_frame(self):
        """One row per instance of a fleet (``instances`` > 1): what it served, and its TTFT's spread."""
        document = self.to_dict()
        if "instances" not in document:
            raise KvlabError("a simulation of one instance has no instances' table (instances=N, N > 1)")
        rows = [
            {**one, **{f"ttft_{key}_ms": value for key, value in one.pop("ttft_ms").items()}}
            for one in document["instances"]
        ]
        return _frame(rows)

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
    instances=1,
    router="round-robin",
    cpu_scope="private",
    prefill_instances=None,
    decode_instances=None,
    dry_run=False,
    **settings,
):
    """``workload`` through one engine instance on a clock: arrivals (``speedup`` of the trace's clock, a Poisson
    ``rate`` or ``clients``), the engine's settings (:class:`kvlab.simulator.settings.EngineSettings`' fields), the
    cache's (``kvlab replay``'s: ``gpu_tokens`` or ``gpu_blocks``, ``cpu_tokens`` or ``cpu_blocks``,
    ``block_tokens``, ``write_policy``, ...) and the hardware's (:class:`kvlab.latency.hardware.HardwareSettings`'
    fields). ``instances`` copies of the engine behind ``router``, their CPU tiers of ``cpu_scope``, make a fleet on
    one clock (``kvlab/simulator/fleet.py``; a router's settings by their names, ``llm_d_queue_weight``...). With
    ``per_request`` the result keeps the per-request table, with ``percentiles`` the times' percentiles. A
    :class:`Simulation`; with ``dry_run``, None once every setting is checked as the run checks it (``kvlab
    config``'s look at a job before any job runs), nothing read or run."""
    from kvlab.api.replays import ReplaySettings
    from kvlab.latency.hardware import HardwareModel, HardwareSettings, settings_names
    from kvlab.simulator.arrivals import Arrivals
    from kvlab.simulator.cost import StepCost
    from kvlab.simulator.fleet import ROUTER_SETTING_NAMES, FleetSettings, RemoteKV, SharedHosts, router_of
    from kvlab.simulator.instance import CACHE_RULES, Instance
    from kvlab.simulator.settings import EngineSettings, engine_setting_names
    from kvlab.util.settings import checked

    hardware = _hardware_values({name: settings.pop(name) for name in settings_names() if name in settings})
    if hardware.get("model_config") is None or hardware.get("gpu_system") is None:
        raise SettingError("the following arguments are required: --model-config, --gpu-system")
    engine = EngineSettings(**{name: settings.pop(name) for name in engine_setting_names() if name in settings})
    rooms = checked(ReplaySettings, {"gpu_tokens": gpu_tokens, "cpu_tokens": cpu_tokens, "block_tokens": block_tokens})
    gpu_tokens, cpu_tokens = rooms.get("gpu_tokens"), rooms.get("cpu_tokens")
    rules = checked(ReplaySettings, {name: settings.pop(name) for name in CACHE_RULES if name in settings})
    arrivals = Arrivals(speedup, rate, clients, seed)
    fleet = FleetSettings(
        instances=instances,
        router=router,
        cpu_scope=cpu_scope,
        prefill_instances=prefill_instances,
        decode_instances=decode_instances,
    )
    given = {name: settings.pop(name) for name in ROUTER_SETTING_NAMES if name in settings}
    chosen_router = router_of(fleet.router, given)
    if fleet.disaggregated and arrivals.kind == "clients":
        raise SettingError("argument --clients: prefill apart from decode takes open arrivals (--speedup or --rate)")
    made = workload_of(workload, settings, rooms.get("block_tokens"), "simulate")
    block = made.block_tokens
    for name, given, other in (("gpu", gpu_tokens, engine.gpu_blocks), ("cpu", cpu_tokens, engine.cpu_blocks)):
        if given and other is not None:
            raise SettingError(f"argument --{name}-blocks: not allowed with argument --{name}-tokens")
    model = HardwareModel(HardwareSettings(**hardware), block)
    instance = Instance.of(made, engine, rules, gpu_tokens, cpu_tokens, model)
    instances = fleet.size + (fleet.decode_instances or 0)
    footprint = instance.footprint(per_request, instances)
    meter = _meter(max_memory, footprint)
    meter.check(0, 0, 0)  # the pool's and the tier's entries alone
    if dry_run:
        return None
    cost = StepCost(model, block)
    each = timed_fleet = None
    try:
        if instances == 1:
            stats = instance.run(cost, arrivals, meter, per_request)
        else:
            timed_fleet, each = instance.run_fleet(cost, arrivals, meter, per_request, fleet, chosen_router)
            stats = timed_fleet.merged(each)
    except MemoryError:  # the machine's memory ran out (--max-memory bounds what the run projects): the command's line
        raise KvlabError("out of memory") from None
    if stats.refused and not stats.requests:
        raise KvlabError(
            f"every request ({stats.refused:,}) is longer with its output than the GPU pool ({instance.usable:,}"
            f" blocks of {block} tokens), and the engine refuses it (as vLLM refuses a model length its KV cache cannot"
            " hold): give a larger pool or fewer --output-tokens"
        )
    document = _document(instance, arrivals, cost, stats, instances)
    version, usable = instance.describe()
    document["engine"] |= version
    document["cache"] |= usable
    if timed_fleet is not None:
        described = chosen_router.settings.describe() if chosen_router.settings is not None else {}
        document["fleet"] = {**fleet.describe(), **described}
        if fleet.disaggregated:
            document["fleet"]["decode_router"] = "least-loaded (Dynamo's decode routing: load only)"
            document["fleet"]["kv_transfer"] = RemoteKV.describe()
        document["fleet"]["routers"] = [paste.describe() for paste in chosen_router.paste(block)]
        if fleet.cpu_scope == "shared" and instance.cpu_blocks:
            document["fleet"]["network"] = SharedHosts.describe()
        roles = ["prefill" if fleet.disaggregated else None] * fleet.size + ["decode"] * (instances - fleet.size)
        document["instances"] = [
            _instance_figures(index, one, role) for index, (one, role) in enumerate(zip(each, roles, strict=True))
        ]
    chosen = None
    if timed_fleet is not None:
        chosen = {"instance": timed_fleet.chosen}
        if fleet.disaggregated:
            decoded = timed_fleet.decode.numbers
            chosen["decode_instance"] = {n: fleet.size + d for d, numbers in enumerate(decoded) for n in numbers}
    table = _table(stats, made.request_ids(), chosen) if per_request else None
    return Simulation.of(dump_json(document), table, percentiles_table(stats) if percentiles else None)


def _instance_figures(index, stats, role=None):
    """One instance's figures in a fleet's JSON: what it served, and its times' spread (``role``: prefill or decode,
    where prefill is apart: a prefill instance's TTFT is its requests', a decode instance's counts from the KV's
    arrival and its tokens from the network are its ``cpu_hit_tokens``)."""
    inputs, gpu, cpu = stats.input_tokens, stats.gpu_hit_tokens, stats.cpu_hit_tokens
    return {
        "instance": index,
        **({"role": role} if role else {}),
        "requests": stats.requests,
        "refused": stats.refused,
        "input_tokens": inputs,
        "gpu_hit_tokens": gpu,
        "cpu_hit_tokens": cpu,
        "token_hit_ratio": _ratio(gpu + cpu, inputs),
        "ttft_ms": spread(stats.ttft_ms),
        "preemptions": stats.preemptions,
    }


def _document(instance, arrivals, cost, stats, instances=1):
    """The run's JSON; ``instances`` instances' links added up in ``stats`` (a fleet's: utilisation is their mean)."""
    made, chosen, engine = instance.made, instance.chosen, instance.engine
    gpu_blocks, cpu_blocks, block = instance.gpu_blocks, instance.cpu_blocks, chosen.block_tokens
    inputs, gpu, cpu = stats.input_tokens, stats.gpu_hit_tokens, stats.cpu_hit_tokens
    span = (stats.last - stats.first) if stats.last is not None else 0.0
    lookups = stats.lookups
    cache = {
        "gpu_blocks": gpu_blocks,
        "gpu_tokens": gpu_blocks * block,
        "gpu_pool_from": instance.pool_from,
        "cpu_blocks": cpu_blocks,
        "cpu_tokens": cpu_blocks * block,
        **{name: value for name, value in chosen.describe().items() if name not in ("gpu_tokens", "cpu_tokens")},
    }
    links = {
        link: {
            "blocks": stats.copied[link],
            "busy_s": round(stats.busy[link], 3),
            "utilisation": round(stats.busy[link] / span / instances, 6) if span else None,
        }
        for link in stats.copied
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


def _table(stats, ids=None, chosen=None):
    """The ``--per-request`` CSV; with ``ids`` (the trace's own, by request number) a ``request_id`` column, with
    ``chosen`` (a fleet's: by column name, each request's instance by number) its columns."""
    from kvlab.util.files import csv_text

    rows = []
    for number, arrival, queue, ttft, tpot, e2e, tokens, output, gpu, cpu, preemptions in sorted(stats.rows):
        times = [round(value, 3) if not math.isnan(value) else "" for value in (queue, ttft, tpot, e2e)]
        values = (number, round(arrival, 6), *times, tokens, output, gpu, cpu, tokens - gpu - cpu, preemptions)
        row = dict(zip(REQUEST_COLUMNS, values, strict=True))
        if ids is not None:
            row["request_id"] = "" if ids[number] is None else ids[number]
        for name, instances in (chosen or {}).items():
            row[name] = instances[number] if isinstance(instances, list) else instances.get(number, "")
        rows.append(row)
    columns = REQUEST_COLUMNS if ids is None else (REQUEST_COLUMNS[0], "request_id", *REQUEST_COLUMNS[1:])
    if chosen:
        at = columns.index("arrival_s")
        columns = (*columns[:at], *chosen, *columns[at:])
    return csv_text(rows, columns)
