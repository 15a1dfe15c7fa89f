"""``kvlab.ttft_predict``, ``kvlab.ttft_breakeven``, ``kvlab.ttft_systems``: TTFT from the hardware (what
``kvlab ttft predict``, ``ttft breakeven`` and ``ttft systems`` print)."""

import json
from dataclasses import dataclass, field

from kvlab.api.common import _frame, _hardware_values, _Result
from kvlab.util.errors import KvlabError, SettingError
from kvlab.util.files import dump_json

REQUEST_COLUMNS = (
    "request",
    "round",
    "input_tokens",
    "gpu_hit_tokens",
    "cpu_hit_tokens",
    "computed_tokens",
    "load_ms",
    "prefill_ms",
    "ttft_ms",
    "latency_source",
)


@dataclass(frozen=True)
class TtftPrediction(_Result):
    """What ``kvlab ttft predict`` prints; ``per_request`` its ``--per-request`` CSV (with ``per_request=True``)."""

    latency_source: str
    p50_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    text: str = field(repr=False)
    per_request: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, text, per_request=None):
        document = json.loads(text)
        figures = document["ttft"]
        return cls(
            document["latency_source"], figures["p50_ms"], figures["p99_ms"], figures["mean_ms"], text, per_request
        )

    def to_frame(self):
        """One row per round, ``all`` first: the TTFT percentiles and the tokens per tier."""
        document = self.to_dict()
        return _frame([{"round": "all", "requests": document["requests"], **document["ttft"]}, *document["rounds"]])

    def requests(self):
        import io

        import pandas as pd

        if self.per_request is None:
            raise KvlabError("the per-request table is kept with per_request=True")
        return pd.read_csv(io.StringIO(self.per_request))


def _hardware(settings):
    """The :class:`kvlab.latency.hardware.HardwareSettings` among ``settings`` (taken out of them)."""
    from kvlab.latency.hardware import HardwareSettings, settings_names

    given = _hardware_values({name: settings.pop(name) for name in settings_names() if name in settings})
    if given.get("model_config") is None or given.get("gpu_system") is None:
        raise SettingError("the following arguments are required: --model-config, --gpu-system")
    try:
        return HardwareSettings(**given)
    except TypeError as error:
        raise SettingError(str(error)) from None


def ttft_predict(*, workload, per_request=False, max_memory=None, progress=None, **settings):
    """``workload`` through the cache of ``kvlab replay``'s settings (``gpu_tokens``, ``cpu_tokens``, ...), each
    request priced from the hardware (:class:`kvlab.latency.hardware.HardwareSettings`' fields: ``model_config``,
    ``gpu_system``, ``engine``, ``tp``, ...). A :class:`TtftPrediction`."""
    import inspect

    from kvlab.api.replays import replay, replay_parts, replay_settings
    from kvlab.latency.hardware import HardwareModel, no_disk_pricing
    from kvlab.latency.pricing import price_requests, round_times
    from kvlab.loop import report

    hardware = _hardware(settings)
    if not settings.get("disk_tokens"):
        no_disk_pricing(hardware, "takes --disk-tokens")
    defaults = {  # kvlab.replay's, for the settings not given
        name: parameter.default
        for name, parameter in inspect.signature(replay).parameters.items()
        if name in replay_settings() and parameter.default is not inspect.Parameter.empty
    }
    settings = {**defaults, **settings}
    model = HardwareModel(hardware)  # its refusals come before the replay
    made, described, totals, parts, _ = replay_parts(workload, True, max_memory, progress, settings)
    model.block_tokens = made.block_tokens
    priced = price_requests(model, parts, described["cpu_tokens"] > 0)
    reported = report(made, described, totals)
    has_disk = bool(described.get("disk_tokens"))
    tiers = ("input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", *("disk_hit_tokens",) * has_disk, "computed_tokens")
    everything, per_round = round_times(priced, made.rounds)
    figures = {entry["round"]: entry for entry in reported["rounds"]}
    rounds = [
        {"round": times.pop("round"), "requests": figures[name]["requests"], **times}
        | {key: figures[name][key] for key in tiers}
        for name, times in zip(made.rounds, per_round, strict=True)
    ]
    document = {
        "workload": reported["workload"],
        "cache": reported["cache"],
        "latency_source": model.source,
        "latency": model.describe(disk=has_disk),
        "requests": len(priced),
        "ttft": {**everything, **{key: reported[key] for key in tiers}},
        "rounds": rounds,
    }
    table = None
    if per_request:
        from kvlab.util.files import csv_text

        names = made.rounds
        lines = []
        for number, (index, tokens, gpu, cpu, load, prefill, ttft) in enumerate(priced):
            computed = tokens - gpu - cpu
            lines.append(
                dict(
                    zip(
                        REQUEST_COLUMNS,
                        (number, names[index], tokens, gpu, cpu, computed)
                        + tuple(round(value, 3) for value in (load, prefill, ttft))
                        + (model.source,),
                        strict=True,
                    )
                )
            )
        table = csv_text(lines, REQUEST_COLUMNS)
    return TtftPrediction.of(dump_json(document), table)


def ttft_breakeven(*, prefix_tokens, **settings):
    """The link bandwidth above which loading a ``prefix_tokens`` prefix beats recomputing it (Mooncake, FAST'25,
    Eq. 2: the prefix's KV bytes over the time of its prefill), for :class:`HardwareSettings`' fields."""
    from kvlab.latency.hardware import HardwareModel, no_disk_pricing
    from kvlab.workloads import whole_number

    try:
        prefix = whole_number(1)(prefix_tokens)
    except ValueError as error:
        raise SettingError(f"prefix_tokens: {error}") from None
    settings.setdefault("engine", "vllm")
    hardware = _hardware(settings)
    no_disk_pricing(hardware, "the breakeven of a CPU tier's link does not take")
    model = HardwareModel(hardware)
    recompute = model.prefill_ms(prefix, 0)
    per_gpu = prefix * model.bytes_per_token
    tp = model.settings.tp
    load = model.load_ms(prefix)
    document = {
        "prefix_tokens": prefix,
        "latency_source": model.source,
        "latency": model.describe(),
        "recompute_ms": round(recompute, 3),
        "kv_bytes_per_gpu": per_gpu,
        "kv_bytes": per_gpu * tp,
        "breakeven_gbps": round(per_gpu * tp / recompute / 1e6, 3),
        "breakeven_gbps_per_gpu": round(per_gpu / recompute / 1e6, 3),
        "load_ms_at_link": round(load, 3),
        "loading_wins_at_link": load < recompute,
    }
    return dump_json(document)


def ttft_systems():
    """The GPU systems aiconfigurator-core ships, their specs and the engine versions its database covers."""
    from kvlab.latency.systems import (
        BACKENDS,
        PACKAGE,
        database_version,
        database_versions,
        package_version,
        read_system,
        system_names,
    )

    systems = []
    for name in system_names():
        covered = database_versions(name)
        current = {}
        for backend in sorted(set(BACKENDS.values()) & set(covered)):
            try:
                current[backend] = database_version(name, backend)
            except SettingError:
                continue
        systems.append({**read_system(name).describe(), "database": covered, "current": current})
    return dump_json({"package": f"{PACKAGE} {package_version()}", "systems": systems})
