"""``kvlab.plan``: a CPU offload budget for a workload and a model (what ``kvlab plan`` prints)."""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from kvlab.api.common import (
    _choice,
    _exclusive,
    _frame,
    _grid,
    _meter,
    _ratio,
    _Result,
    _setting,
    compile_notice,
    workload_of,
)
from kvlab.util.errors import SettingError
from kvlab.util.files import dump_json


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

    def to_frame(self):
        """One row per round, ``all`` first: the tokens served from GPU, from CPU, recomputed, the hit ratio."""
        document = self.to_dict()
        columns = ["round", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens", "token_hit_ratio"]
        rows = [{**document, "round": "all"}, *document["rounds"]]
        return _frame([{key: row[key] for key in columns} for row in rows], columns)


def plan(
    *,
    workload,
    model_config,
    gpu_tokens=None,
    gpu_gib=None,
    cpu_gib=0,
    tp=1,
    kv_dtype="auto",
    chunk_tokens=None,
    partial_blocks="drop",
    eviction_order="tail-first",
    write_policy="write-through",
    target_hit_ratio=None,
    engine=None,
    window_rule=None,
    max_memory=None,
    **options,
):
    """A CPU offload budget for ``workload`` served by the model of ``model_config`` (a Hugging Face config.json):
    the tokens served from GPU, from CPU and recomputed per round, and the GiB full reuse (or ``target_hit_ratio``)
    takes; ``kvlab plan``'s flags, one of ``gpu_tokens`` and ``gpu_gib``. A :class:`Plan`, or a :class:`Grid` of them
    where ``gpu_tokens``, ``gpu_gib`` or ``cpu_gib`` is a list."""
    settings = dict(locals())
    settings.update(settings.pop("options"))
    return _grid(_plan, settings, ("gpu_tokens", "gpu_gib", "cpu_gib"))


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


def _plan(*, workload, model_config, max_memory, **settings):
    from kvlab.cache.costs import WINDOW_RULES
    from kvlab.cache.prefix import EVICTION_ORDERS, PARTIAL_BLOCKS
    from kvlab.cache.write_policies import WRITE_POLICIES
    from kvlab.curves.mrc import FOOTPRINT
    from kvlab.sizing import plan as planner
    from kvlab.sizing.engines import ENGINES
    from kvlab.sizing.model_size import KV_DTYPES, decimal_gib
    from kvlab.workloads import whole_number

    options = {key: settings.pop(key) for key in list(settings) if key not in PLAN_SETTINGS}
    checked = {
        "tp": _setting("tp", whole_number(1, 2**20), settings["tp"]),
        "kv_dtype": _choice("kv_dtype", settings["kv_dtype"], tuple(KV_DTYPES)),
        "chunk_tokens": _setting("chunk_tokens", whole_number(1), settings["chunk_tokens"]),
        "partial_blocks": _choice("partial_blocks", settings["partial_blocks"], PARTIAL_BLOCKS),
        "eviction_order": _choice("eviction_order", settings["eviction_order"], EVICTION_ORDERS),
        "gpu_tokens": _setting("gpu_tokens", whole_number(0), settings["gpu_tokens"]),
        "gpu_gib": _setting("gpu_gib", decimal_gib, settings["gpu_gib"]),
        "cpu_gib": _setting("cpu_gib", decimal_gib, settings["cpu_gib"]),
        "write_policy": _choice("write_policy", settings["write_policy"], tuple(WRITE_POLICIES)),
        "target_hit_ratio": _setting("target_hit_ratio", _ratio, settings["target_hit_ratio"]),
        "engine": _choice("engine", settings["engine"], ENGINES),
        "window_rule": _choice("window_rule", settings["window_rule"], WINDOW_RULES),
    }
    _exclusive(checked, "gpu_tokens", "gpu_gib")
    if checked["cpu_gib"] is None:
        checked["cpu_gib"] = decimal_gib(0)
    window_rule = checked["window_rule"] or ("in-window" if checked["engine"] == "vllm" else "all-layers")
    made, shape, _, gpu_tokens = plan_setting(
        workload,
        options,
        model_config,
        **{key: checked[key] for key in ("tp", "kv_dtype", "chunk_tokens", "gpu_tokens", "gpu_gib")},
    )
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
    )
    return Plan.of(dump_json(result))


PLAN_SETTINGS = (
    "gpu_tokens",
    "gpu_gib",
    "cpu_gib",
    "tp",
    "kv_dtype",
    "chunk_tokens",
    "partial_blocks",
    "eviction_order",
    "write_policy",
    "target_hit_ratio",
    "engine",
    "window_rule",
)
