"""kvlab from Python: :func:`plan`, :func:`replay`, :func:`curve` and :func:`size`, the work of ``kvlab plan``,
``kvlab replay``, ``kvlab mrc`` and ``kvlab size`` (those commands parse their flags and call these functions, so
what they print is what these return). docs/python.md shows them in use.

Every argument is keyword-only and named as the command's flag and the config key (``gpu_tokens`` is
``--gpu-tokens``, ``cpu_gib`` is ``--cpu-gib``), taking what the flag takes (``cpu_gib=1.5`` or ``"1.5"``) with the
flag's default. A workload is a source's name with its options as keywords (``workload="lab", docs=4``) or a
mapping as config.yaml writes one (``workload={"source": "lab", "docs": 4}``). A list where a room or a budget goes
(``cpu_gib=[0, 0.5, 1.5]``) is a grid: the answer is a :class:`Grid`, one result per point.

Each result is a frozen dataclass: its headline figures as fields, ``text`` the JSON the command prints (byte for
byte), ``to_dict()`` that JSON as data, ``to_frame()`` a pandas DataFrame. Bad input raises :class:`SettingError`
(a setting the command refuses with exit 2) or :class:`KvlabError` (bad data or a file it cannot read, exit 1),
both ValueErrors whose message is the one line the command prints after ``kvlab COMMAND: error:``.
"""

import json
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from itertools import product

from kvlab.util.errors import KvlabError, SettingError
from kvlab.util.files import dump_json, number_text, shown

__all__ = [
    "Curve",
    "Grid",
    "KvlabError",
    "Plan",
    "Replay",
    "SettingError",
    "Size",
    "curve",
    "plan",
    "replay",
    "size",
]


# --- results --------------------------------------------------------------------------------------------------


def _scalars(document):
    """The figures of a JSON object that are single values: its ``cache``'s, then its own."""
    found = {key: value for key, value in document.get("cache", {}).items() if not isinstance(value, dict | list)}
    found.update({key: value for key, value in document.items() if not isinstance(value, dict | list)})
    return found


def _frame(rows, columns=None):
    import pandas as pd

    return pd.DataFrame(rows, columns=columns)


class _Result:
    """What every result shares: ``text``, the command's JSON, read back as data."""

    def to_dict(self):
        """The command's JSON as data."""
        return json.loads(self.text)

    def summary(self):
        """The single figures (the cache's, then the result's own): a row of a grid's frame."""
        return _scalars(self.to_dict())


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


@dataclass(frozen=True)
class Replay(_Result):
    """What ``kvlab replay`` prints; ``per_request`` is its ``--per-request`` CSV (with ``per_request=True``)."""

    gpu_tokens: int
    cpu_tokens: int
    block_tokens: int
    input_tokens: int
    gpu_hit_tokens: int
    cpu_hit_tokens: int
    computed_tokens: int
    token_hit_ratio: float | None
    block_hit_ratio: float | None
    text: str = field(repr=False)
    per_request: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, text, per_request=None):
        document = json.loads(text)
        rooms = {key: document["cache"][key] for key in ("gpu_tokens", "cpu_tokens", "block_tokens")}
        names = ("input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "computed_tokens")
        figures = {key: document[key] for key in (*names, "token_hit_ratio", "block_hit_ratio")}
        return cls(**rooms, **figures, text=text, per_request=per_request)

    def to_frame(self):
        """One row per round, ``all`` first: every figure the replay reports."""
        document = self.to_dict()
        rows = [{"round": "all", **{key: value for key, value in document.items() if key in document["rounds"][0]}}]
        return _frame([*rows, *document["rounds"]]) if document["rounds"] else _frame(rows)

    def requests(self):
        """One row per request (the ``--per-request`` table); only with ``per_request=True``."""
        import io

        import pandas as pd

        if self.per_request is None:
            raise KvlabError("the per-request table is kept with per_request=True")
        return pd.read_csv(io.StringIO(self.per_request))


@dataclass(frozen=True)
class Curve(_Result):
    """What ``kvlab mrc`` prints (the cliffs); ``csv`` its ``--curve`` table: the tier's hits at every room."""

    tier: str
    block_tokens: int
    gpu_tokens: int | None
    max_token_hit_ratio: float | None
    tokens_for_full_reuse: int | None
    tokens_for_target: int | None
    text: str = field(repr=False)
    csv: str | None = field(default=None, repr=False)

    @classmethod
    def of(cls, text, csv=None):
        document = json.loads(text)
        cache = document["cache"]
        found = {key: document.get(key) for key in ("max_token_hit_ratio", "tokens_for_full_reuse")}
        rooms = {"tier": cache["tier"], "block_tokens": cache["block_tokens"], "gpu_tokens": cache.get("gpu_tokens")}
        return cls(**rooms, **found, tokens_for_target=document.get("tokens_for_target"), text=text, csv=csv)

    def to_frame(self):
        """The curve: one row per step of the room (``gpu_tokens`` or ``cpu_tokens``), the hit tokens per round and
        in all, the token hit ratio (counting what the GPU served in front of a CPU tier)."""
        import io

        import pandas as pd

        if self.csv is None:
            raise KvlabError("the curve's table is kept with table=True")
        return pd.read_csv(io.StringIO(self.csv))


@dataclass(frozen=True)
class Size(_Result):
    """What ``kvlab size`` prints: a model's KV per token on one GPU, and a prompt's."""

    model: str
    tp: int
    kv_dtype: str
    bytes_per_token: int
    tokens: int | None
    gib_for_tokens: float | None
    text: str = field(repr=False)

    @classmethod
    def of(cls, text):
        document = json.loads(text)
        names = ("model", "tp", "kv_dtype", "bytes_per_token")
        return cls(
            **{key: document[key] for key in names},
            **{key: document.get(key) for key in ("tokens", "gib_for_tokens")},
            text=text,
        )

    def to_frame(self):
        """One row per layer group: its kind, layers, bytes per token (and per request, where it is bounded)."""
        return _frame(self.to_dict()["groups"])


@dataclass(frozen=True)
class Grid:
    """One result per point of a grid (a list given where a room or a budget goes), in order: ``axes`` name the
    settings that vary, ``points`` their values at each result (the last axis varying fastest)."""

    axes: tuple
    points: tuple
    results: tuple

    def __len__(self):
        return len(self.results)

    def __iter__(self):
        return iter(self.results)

    def __getitem__(self, index):
        return self.results[index]

    def to_dict(self):
        """A list: what the command prints at each point, in order."""
        return [result.to_dict() for result in self.results]

    def to_frame(self):
        """One row per point: its settings, then the result's single figures (a plan's hit ratio, its budgets)."""
        rows = []
        for point, result in zip(self.points, self.results, strict=True):
            given = dict(zip(self.axes, point, strict=True))
            rows.append({**given, **{key: value for key, value in result.summary().items() if key not in given}})
        return _frame(rows)


# --- settings: each checked as the command's flag checks it, the same words on a bad one ------------------------


def _flag(name):
    return "--" + name.replace("_", "-")


def _text(value):
    """What the flag would be given: a number (numpy's too) as its text, as the flags' converters read text."""
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, numbers.Real):
        return repr(float(value))
    return value


class _Keyword(TypeError):
    """A keyword the function does not take (Python's own words for it)."""


def _setting(name, convert, value):
    """``value`` through the converter of flag ``--name``; SettingError as argparse words it."""
    if value is None:
        return None
    try:
        return convert(_text(value))
    except (ValueError, TypeError) as error:
        raise SettingError(f"argument {_flag(name)}: {error}") from None


def _choice(name, value, choices):
    if value is None:
        return None
    if not isinstance(value, str) or value not in choices:
        raise SettingError(
            f"argument {_flag(name)}: invalid choice: {shown(value)} (choose from {', '.join(map(repr, choices))})"
        )
    return value


def _switch(name, value):
    if not isinstance(value, bool):
        raise SettingError(f"argument {_flag(name)}: expected True or False, got {shown(value)}")
    return value


def _ratio(text):
    value = float(text) if number_text(text) else math.nan
    if not 0 <= value <= 1:
        raise ValueError(f"expected a ratio between 0 and 1, got {shown(text)}")
    return value


def _exclusive(settings, first, second):
    """Exactly one of two flags (a required, mutually exclusive pair)."""
    if settings[first] is not None and settings[second] is not None:
        raise SettingError(f"argument {_flag(second)}: not allowed with argument {_flag(first)}")
    if settings[first] is None and settings[second] is None:
        raise SettingError(f"one of the arguments {_flag(first)} {_flag(second)} is required")


def workload_of(workload, options, block_tokens=None, function="kvlab"):
    """The workload: a source's name and its options, or a mapping of both (``source`` and options); an option of
    another source, or a bad one, is a SettingError in the command's words."""
    from kvlab.workloads import WORKLOADS, WorkloadError

    if isinstance(workload, Mapping):
        spec = dict(workload)
        source = spec.pop("source", None)
        twice = sorted(set(spec) & set(options))
        if twice:
            raise _Keyword(f"{function}() got {twice[0]!r} in the workload and as a keyword")
        options = {**spec, **options}
    else:
        source = workload
    _choice("workload", source, sorted(WORKLOADS))
    known = {option.name for other in WORKLOADS.values() for option in other.options}
    unknown = sorted(set(options) - known)
    if unknown:
        raise _Keyword(f"{function}() got an unexpected keyword argument {unknown[0]!r}")
    chosen = WORKLOADS[source]
    own = {option.name for option in chosen.options}
    for other in WORKLOADS.values():
        for option in other.options:
            if option.name not in own and options.get(option.name) is not None:
                raise SettingError(f"{option.flag} is a setting of --workload {other.name}, not {source}")
    settings = {option.name: _text(options.get(option.name)) for option in chosen.options}
    try:
        return chosen(block_tokens, **settings)
    except WorkloadError as error:
        raise SettingError(str(error)) from None


def _meter(max_memory, footprint):
    from kvlab.util.memory import Meter, default_limit, memory_size

    limit = _setting("max_memory", memory_size, max_memory)
    return Meter(limit or default_limit(), footprint)


def _grid(one, settings, axes):
    """``one(settings)``, or a :class:`Grid` of it over every axis given a list (each point's value in its place; a
    numpy array or a pandas Series is a list too)."""
    for axis in axes:
        if hasattr(settings[axis], "tolist") and not isinstance(settings[axis], numbers.Number):
            settings[axis] = settings[axis].tolist()
    varied = [axis for axis in axes if isinstance(settings[axis], list | tuple | range)]
    if not varied:
        return _guarded(one, settings)
    for axis in varied:
        if not len(settings[axis]):
            raise SettingError(f"argument {_flag(axis)}: expected a value or a list of values, got an empty list")
    points = tuple(product(*(settings[axis] for axis in varied)))
    results = tuple(_guarded(one, {**settings, **dict(zip(varied, point, strict=True))}) for point in points)
    return Grid(tuple(varied), points, results)


def _guarded(one, settings):
    """``one(settings)`` with every error of bad input a KvlabError in the command's words (a SettingError stays
    one); memory running out and an interrupt are left as they are."""
    from kvlab.util.memory import MemoryLimitError

    try:
        return one(**settings)
    except _Keyword as error:
        raise TypeError(str(error)) from None
    except KvlabError:
        raise
    except MemoryLimitError as error:
        raise KvlabError(str(error)) from error
    except (ValueError, OSError, ArithmeticError, RecursionError, LookupError, TypeError) as error:
        raise KvlabError(_described(error)) from error


def _described(error):
    """One line for an error of the domain or the system, as the commands say it (an input is read, never written)."""
    if isinstance(error, OSError):
        if not error.filename:
            return f"cannot read or write: {error.strerror or error}"
        return f"{error.filename}: cannot read: {error.strerror or error}"
    if isinstance(error, RecursionError):
        return "an input is nested too deeply"
    if isinstance(error, LookupError | TypeError):
        return f"an input has the wrong shape ({type(error).__name__}: {shown(error, 200)})"
    return (str(error) or type(error).__name__).replace("\n", "\\n").replace("\r", "\\r")


# --- plan -----------------------------------------------------------------------------------------------------


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


def compile_notice():
    """Said on a terminal before numba compiles the curve kernels, so that a first run's pause has a reason (never in
    a log, a pipe or a notebook, where stderr is not a terminal)."""
    import sys

    if sys.stderr.isatty():
        sys.stderr.write("kvlab: compiling the exact-curve kernels (numba; once per checkout, about 10 s) ...\n")
        sys.stderr.flush()


# --- replay ---------------------------------------------------------------------------------------------------


def replay(
    *,
    workload,
    gpu_tokens,
    cpu_tokens=0,
    block_tokens=None,
    partial_blocks="drop",
    eviction_order="tail-first",
    write_policy="write-through",
    gpu_eviction="lru",
    cpu_eviction="lru",
    touch_cpu_on_gpu_hit=False,
    re_store_on_gpu_hit=False,
    server=None,
    state_extra_tokens=0,
    bos=False,
    per_request=False,
    max_memory=None,
    progress=None,
    **options,
):
    """``workload`` through a GPU + CPU prefix cache of KV blocks (``kvlab replay``'s flags; ``per_request=True``
    keeps the per-request table, ``progress`` is a function of the number of requests returning a progress bar,
    such as ``lambda total: tqdm(total=total)``, or None). A :class:`Replay`, or a :class:`Grid` of them where
    ``gpu_tokens``, ``cpu_tokens`` or ``block_tokens`` is a list."""
    settings = dict(locals())
    settings.update(settings.pop("options"))
    return _grid(_replay, settings, ("gpu_tokens", "cpu_tokens", "block_tokens"))


SERVER_SETTINGS = ("server", "state_extra_tokens", "bos")  # a modelled server's, besides the cache's


def replay_settings():
    """Every setting of a replay that is not the workload's: the cache's (:class:`kvlab.cache.interface.CacheSettings`'
    fields), then a modelled server's."""
    from dataclasses import fields

    from kvlab.cache.interface import CacheSettings

    return (*(setting.name for setting in fields(CacheSettings)), *SERVER_SETTINGS)


def replay_footprint(cache, per_request):
    """What a replay holds (kvlab/util/memory.py): the tiers' state and the table of dense ids per distinct block,
    what reading holds at once; the table's row per request, if kept (its columns, pandas' frame and its copy, the
    CSV text)."""
    from kvlab.cache.compiled import FOOTPRINT, READING_BYTES
    from kvlab.cache.interface import BatchEngine
    from kvlab.util.memory import PANDAS_BYTES, Footprint

    row, table = (408, PANDAS_BYTES) if per_request else (0, 0)
    if isinstance(cache, BatchEngine):
        return Footprint(request=row, key=FOOTPRINT.key, fixed=FOOTPRINT.fixed + table)
    fixed = FOOTPRINT.fixed if cache.offline else READING_BYTES  # opt loads the whole workload as the compiled do
    return Footprint(access=120 if cache.offline else 0, request=row, key=250, fixed=fixed + table)  # Python objects


def _replay(*, workload, per_request, max_memory, progress, **settings):
    from kvlab.cache.eviction import EVICTION_POLICIES
    from kvlab.cache.interface import CACHE_SETTINGS, CacheSettings
    from kvlab.cache.llama_cpp import SERVERS, LlamaCppServer
    from kvlab.cache.prefix import EVICTION_ORDERS, PARTIAL_BLOCKS
    from kvlab.cache.write_policies import WRITE_POLICIES
    from kvlab.loop import per_request_csv, report
    from kvlab.loop import replay as replayed
    from kvlab.workloads import whole_number

    options = {key: settings.pop(key) for key in list(settings) if key not in replay_settings()}
    checked = {
        "gpu_tokens": _setting("gpu_tokens", whole_number(0), settings["gpu_tokens"]),
        "cpu_tokens": _setting("cpu_tokens", whole_number(0), settings["cpu_tokens"]),
        "block_tokens": _setting("block_tokens", whole_number(1), settings["block_tokens"]),
        "partial_blocks": _choice("partial_blocks", settings["partial_blocks"], PARTIAL_BLOCKS),
        "eviction_order": _choice("eviction_order", settings["eviction_order"], EVICTION_ORDERS),
        "write_policy": _choice("write_policy", settings["write_policy"], tuple(WRITE_POLICIES)),
        "gpu_eviction": _choice("gpu_eviction", settings["gpu_eviction"], tuple(EVICTION_POLICIES)),
        "cpu_eviction": _choice("cpu_eviction", settings["cpu_eviction"], tuple(EVICTION_POLICIES)),
        "touch_cpu_on_gpu_hit": _switch("touch_cpu_on_gpu_hit", settings["touch_cpu_on_gpu_hit"]),
        "re_store_on_gpu_hit": _switch("re_store_on_gpu_hit", settings["re_store_on_gpu_hit"]),
        "server": _choice("server", settings["server"], SERVERS),
        "state_extra_tokens": _setting("state_extra_tokens", whole_number(0), settings["state_extra_tokens"]),
        "bos": _switch("bos", settings["bos"]),
    }
    if checked["gpu_tokens"] is None:
        raise SettingError("the following arguments are required: --gpu-tokens")
    if checked["cpu_tokens"] is None:
        checked["cpu_tokens"] = 0
    server, extra, bos = checked["server"], checked["state_extra_tokens"] or 0, checked["bos"]
    if not server and (extra or bos):
        raise SettingError("--state-extra-tokens and --bos apply to --server only")
    made = workload_of(workload, options, checked["block_tokens"], "replay")
    rooms = {
        "gpu_tokens": checked["gpu_tokens"],
        "cpu_tokens": checked["cpu_tokens"],
        "block_tokens": made.block_tokens,
    }
    if server:
        defaults = CacheSettings(gpu_tokens=0, block_tokens=1).policies()
        for key in CACHE_SETTINGS:
            if checked[key] != defaults[key]:
                raise SettingError(f"{_flag(key)} does not apply to --server {server}")
        cache = LlamaCppServer(*rooms.values(), extra, bos)
        described = {**rooms, "server": server, "state_extra_tokens": extra, "bos": bos}
    else:
        try:
            chosen = CacheSettings(**rooms, **{key: checked[key] for key in CACHE_SETTINGS})
        except ValueError as error:
            raise SettingError(str(error)) from None
        cache, described = chosen.build(made), chosen.describe()
    rows = [] if per_request else None
    meter = _meter(max_memory, replay_footprint(cache, rows is not None))
    bar = progress(len(made)) if progress else None
    try:
        totals = replayed(made, cache, rows, bar.update if bar else None, meter)
    finally:
        if bar:
            bar.close()
    table = per_request_csv(made, rows) if rows is not None else None
    return Replay.of(dump_json(report(made, described, totals)), table)


# --- curve ----------------------------------------------------------------------------------------------------


def curve(
    *,
    workload,
    block_tokens=None,
    gpu_tokens=None,
    partial_blocks="drop",
    eviction_order="tail-first",
    target_hit_ratio=None,
    table=True,
    max_memory=None,
    **options,
):
    """The exact LRU curve of the GPU tier at every room (``kvlab mrc``'s flags), or with ``gpu_tokens`` the CPU
    tier's (write-through) at that GPU room; ``table=False`` keeps the cliffs only (no pandas, less memory). A
    :class:`Curve`, or a :class:`Grid` of them where ``block_tokens`` or ``gpu_tokens`` is a list."""
    settings = dict(locals())
    settings.update(settings.pop("options"))
    return _grid(_curve, settings, ("block_tokens", "gpu_tokens"))


CURVE_SETTINGS = ("block_tokens", "gpu_tokens", "partial_blocks", "eviction_order", "target_hit_ratio")


def _curve(*, workload, table, max_memory, **settings):
    from kvlab.cache.prefix import EVICTION_ORDERS, PARTIAL_BLOCKS
    from kvlab.curves.mrc import FOOTPRINT, cliffs, curve_csv, tier_curve
    from kvlab.util.memory import PANDAS_BYTES
    from kvlab.workloads import whole_number

    options = {key: settings.pop(key) for key in list(settings) if key not in CURVE_SETTINGS}
    block = _setting("block_tokens", whole_number(1), settings["block_tokens"])
    partial = _choice("partial_blocks", settings["partial_blocks"], PARTIAL_BLOCKS)
    order = _choice("eviction_order", settings["eviction_order"], EVICTION_ORDERS)
    gpu_tokens = _setting("gpu_tokens", whole_number(0), settings["gpu_tokens"])
    target = _setting("target_hit_ratio", _ratio, settings["target_hit_ratio"])
    _switch("table", table)
    made = workload_of(workload, options, block, "curve")
    tier = "gpu" if gpu_tokens is None else "cpu"
    meter = _meter(max_memory, replace(FOOTPRINT, fixed=FOOTPRINT.fixed + PANDAS_BYTES) if table else FOOTPRINT)
    found = tier_curve(made, partial, order, gpu_tokens, compile_notice, meter)
    cache = {
        "tier": tier,
        "block_tokens": made.block_tokens,
        "partial_blocks": partial,
        "eviction_order": order,
        "eviction": "lru",
    }
    if tier == "cpu":
        cache.update(write_policy="write-through", gpu_tokens=gpu_tokens)
    result = {"workload": made.describe(), "cache": cache, **cliffs(found, target)}
    return Curve.of(dump_json(result), curve_csv(found, tier) if table else None)


# --- size -----------------------------------------------------------------------------------------------------


def size(*, model_config, tp=1, kv_dtype="auto", tokens=None, gib=None):
    """A model's KV cache as an engine allocates it, layer group by layer group (``kvlab size``'s flags): the bytes per
    token on one GPU, and the GiB a prompt of ``tokens`` takes (or the tokens ``gib`` holds). A :class:`Size`, or a
    :class:`Grid` of them where ``tokens`` or ``gib`` is a list."""
    return _grid(_size, dict(locals()), ("tokens", "gib"))


def fitting(shape, budget, tp, kv_dtype):
    """The most tokens one prompt may have within ``budget`` bytes (the bytes never fall as a prompt grows)."""
    from kvlab.util.numbers import MAX_WHOLE

    if shape.bytes_for(1, tp, kv_dtype) > budget:
        return 0
    low, high = 1, 1
    while shape.bytes_for(high, tp, kv_dtype) <= budget and high < MAX_WHOLE:
        low, high = high, min(2 * high, MAX_WHOLE)
    if shape.bytes_for(high, tp, kv_dtype) <= budget:
        return high
    while high - low > 1:  # bytes_for(low) fits, bytes_for(high) does not
        middle = (low + high) // 2
        low, high = (middle, high) if shape.bytes_for(middle, tp, kv_dtype) <= budget else (low, middle)
    return low


def _size(*, model_config, tp, kv_dtype, tokens, gib):
    from kvlab.sizing.model_size import KV_DTYPES, decimal_gib, read_model_config
    from kvlab.sizing.model_size import gib as gib_of
    from kvlab.sizing.plan import model_name
    from kvlab.util.numbers import GIB, MAX_WHOLE
    from kvlab.workloads import whole_number

    tp = _setting("tp", whole_number(1, 2**20), tp)
    kv_dtype = _choice("kv_dtype", kv_dtype, tuple(KV_DTYPES))
    tokens = _setting("tokens", whole_number(0, MAX_WHOLE), tokens)
    budget = _setting("gib", decimal_gib, gib)
    if tokens is not None and budget is not None:
        raise SettingError("argument --gib: not allowed with argument --tokens")
    shape = read_model_config(model_config)
    try:
        per_token = shape.bytes_per_token(tp, kv_dtype)
    except ValueError as error:
        raise SettingError(f"--tp: {error}") from None
    result = {
        "model": model_name(model_config),
        "tp": tp,
        "kv_dtype": kv_dtype,
        "element_bytes": shape.element_bytes(kv_dtype),
        "groups": shape.groups(tp, kv_dtype),
        "bytes_per_token": per_token,
    }
    if budget is not None:
        tokens = fitting(shape, int(budget * GIB), tp, kv_dtype)
        result["gib"] = float(budget)
    if tokens is not None:
        held = shape.bytes_for(tokens, tp, kv_dtype)
        result.update(tokens=tokens, bytes=held, gib_for_tokens=gib_of(held, 1))
    return Size.of(dump_json(result))
