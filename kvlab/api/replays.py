"""``kvlab.replay``: a workload through a GPU + CPU prefix cache of KV blocks (what ``kvlab replay`` prints)."""

import json
from dataclasses import dataclass, field, fields

from kvlab.api.common import (
    _bound,
    _declared,
    _flag,
    _frame,
    _grid,
    _meter,
    _Result,
    workload_of,
)
from kvlab.cache.eviction import EVICTION_POLICIES
from kvlab.cache.prefix import eviction_order_setting, partial_blocks_setting
from kvlab.cache.write_policies import WRITE_POLICIES
from kvlab.fleet import FLEET_SETTINGS, cpu_scope_setting, disk_scope_setting, instances_setting, router_setting
from kvlab.serving import SERVERS
from kvlab.util.errors import KvlabError, SettingError
from kvlab.util.files import dump_json
from kvlab.util.settings import Declared, setting
from kvlab.workloads import whole_number

ONLINE = tuple(name for name, policy in EVICTION_POLICIES.items() if not policy.offline)  # a disk tier's
CACHE_GROUP = "cache"
SERVER_GROUP = "a server's own design (instead of the write and eviction policies)"
FLEET_GROUP = "a fleet: instances behind a router, without a clock (kvlab/fleet/)"


def tier_eviction(tier):
    """``--gpu-eviction`` or ``--cpu-eviction``: the eviction policy of ``tier`` (``GPU``, ``CPU``)."""
    help_text = f"eviction policy of the {tier} tier (default %(default)s; opt: Belady's offline optimum)"
    return setting("lru", choices=tuple(EVICTION_POLICIES), group=CACHE_GROUP, help=help_text)


@dataclass(frozen=True, kw_only=True)
class ReplaySettings(Declared):
    """A replay's settings at one point of its grid: the cache's (:class:`kvlab.cache.interface.CacheSettings`, which
    checks how they go together), or a server's own design (``kvlab replay``'s flags and ``kvlab.replay``'s keywords,
    declared once: kvlab/util/settings.py)."""

    gpu_tokens: int = setting(convert=whole_number(0), group=CACHE_GROUP, help="GPU room in tokens")
    cpu_tokens: int = setting(
        0, convert=whole_number(0), group=CACHE_GROUP, help="CPU room in tokens; 0 = no CPU tier (default)"
    )
    block_tokens: int | None = setting(
        None,
        convert=whole_number(1),
        group=CACHE_GROUP,
        help="tokens per block (default: the workload's: 256, LMCache's chunk; mooncake: 512, the trace's, a multiple"
        " of it or a divisor, as 64)",
    )
    partial_blocks: str = partial_blocks_setting(CACHE_GROUP)
    eviction_order: str = eviction_order_setting(CACHE_GROUP)
    write_policy: str = setting(
        "write-through",
        choices=tuple(WRITE_POLICIES),
        group=CACHE_GROUP,
        help="how the CPU tier is filled (default %(default)s, the lab's rule)",
    )
    gpu_eviction: str = tier_eviction("GPU")
    cpu_eviction: str = tier_eviction("CPU")
    touch_cpu_on_gpu_hit: bool = setting(
        False,
        switch="on",
        group=CACHE_GROUP,
        help="write-through only: a GPU hit also refreshes the block's CPU copy (LMCache's lookup)",
    )
    re_store_on_gpu_hit: bool = setting(
        False,
        switch="on",
        group=CACHE_GROUP,
        help="write-through only: a GPU-hit block whose CPU copy was evicted is stored on the CPU again (LMCache)",
    )
    disk_tokens: int = setting(
        0,
        convert=whole_number(0),
        group=CACHE_GROUP,
        help="room of a disk (or remote) tier below the CPU, in tokens, written through with every block neither tier"
        " above served; 0 = none (default)",
    )
    disk_eviction: str = setting(
        "lru",
        choices=ONLINE,
        group=CACHE_GROUP,
        help="eviction policy of the disk tier (default %(default)s, LMCache's local disk)",
    )
    server: str | None = setting(
        None,
        choices=SERVERS,
        group=SERVER_GROUP,
        help="llama-cpp: llama-cpp-python's context of one prompt and RAM cache of whole saved states"
        " (kvlab/serving/llama_cpp.py); the rooms are its context and its --cache_size in tokens of KV",
    )
    state_extra_tokens: int = setting(
        0,
        convert=whole_number(0),
        group=SERVER_GROUP,
        help="tokens a saved state holds beyond the request (its question, its completion, its fixed bytes)",
    )
    bos: bool = setting(False, switch="on", group=SERVER_GROUP, help="every prompt starts with the same BOS token")
    instances: int = instances_setting(FLEET_GROUP)
    router: str = router_setting(FLEET_GROUP)
    cpu_scope: str = cpu_scope_setting(FLEET_GROUP)
    disk_scope: str = disk_scope_setting(FLEET_GROUP)

    def check(self):
        if not self.server and (self.state_extra_tokens or self.bos):
            raise SettingError("--state-extra-tokens and --bos apply to --server only")
        if self.instances > 1:
            if self.server:
                raise SettingError(f"--instances applies to the cache's designs, not to --server {self.server}")
            for tier in ("gpu_eviction", "cpu_eviction"):
                if EVICTION_POLICIES[getattr(self, tier)].offline:
                    raise SettingError(f"{_flag(tier)} {getattr(self, tier)} reads the future: not with --instances")


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

    def instances_frame(self):
        """One row per instance of a fleet (``instances`` > 1): what it served, as the replay reports the whole."""
        document = self.to_dict()
        if "instances" not in document:
            raise KvlabError("a replay of one instance has no instances' table (instances=N, N > 1)")
        return _frame(document["instances"])

    def requests(self):
        """One row per request (the ``--per-request`` table); only with ``per_request=True``."""
        import io

        import pandas as pd

        if self.per_request is None:
            raise KvlabError("the per-request table is kept with per_request=True")
        return pd.read_csv(io.StringIO(self.per_request))


def replay(*, workload, per_request=False, max_memory=None, progress=None, **settings):
    """``workload`` through a GPU + CPU prefix cache of KV blocks (``kvlab replay``'s flags: :class:`ReplaySettings`;
    ``per_request=True`` keeps the per-request table, ``progress`` is a function of the number of requests returning a
    progress bar, such as ``lambda total: tqdm(total=total)``, or None). A :class:`Replay`, or a :class:`Grid` of them
    where ``gpu_tokens``, ``cpu_tokens`` or ``block_tokens`` is a list; the workload's options are keywords too."""
    given = {"workload": workload, "per_request": per_request, "max_memory": max_memory, "progress": progress}
    return _grid(_replay, _bound(replay, {**given, **settings}), ("gpu_tokens", "cpu_tokens", "block_tokens"))


SERVER_SETTINGS = tuple(found.name for found in fields(ReplaySettings) if found.metadata["group"] == SERVER_GROUP)


def replay_settings():
    """Every setting of a replay that is not the workload's: the cache's, then a modelled server's."""
    return tuple(found.name for found in fields(ReplaySettings))


def replay_footprint(cache, per_request):
    """What a replay holds (kvlab/util/memory.py): the tiers' state and the table of dense ids per distinct block,
    what reading holds at once; the table's row per request, if kept (its columns, pandas' frame and its copy, the
    CSV text)."""
    from kvlab.cache.compiled import FOOTPRINT, READING_BYTES
    from kvlab.cache.interface import BatchCache
    from kvlab.util.memory import PANDAS_BYTES, Footprint

    row, table = (408, PANDAS_BYTES) if per_request else (0, 0)
    if isinstance(cache, BatchCache):
        return Footprint(request=row, key=FOOTPRINT.key, fixed=FOOTPRINT.fixed + table)
    fixed = FOOTPRINT.fixed if cache.offline else READING_BYTES  # opt loads the whole workload as the compiled do
    copies = len(getattr(cache, "caches", ())) or 1  # a fleet's instances may each hold a block
    return Footprint(access=120 if cache.offline else 0, request=row, key=250 * copies, fixed=fixed + table)


def _replay(*, workload, per_request, max_memory, progress, **settings):
    from kvlab.loop import per_request_csv, report

    made, described, totals, rows, fleet = replay_parts(workload, per_request, max_memory, progress, settings)
    chosen = fleet.chosen if fleet is not None else None
    table = per_request_csv(made, rows, chosen) if rows is not None else None
    document = report(made, described, totals)
    if fleet is not None:
        document["instances"] = fleet.instances()
    return Replay.of(dump_json(document), table)


def replay_parts(workload, per_request, max_memory, progress, settings):
    """``(workload, the cache described, totals, per-request parts or None, the fleet or None)`` of one checked replay:
    what :func:`replay` reports, and what ``kvlab ttft predict`` prices request by request."""
    from kvlab.cache.interface import CACHE_SETTINGS, CacheSettings
    from kvlab.cache.tiers import DISK_SETTINGS
    from kvlab.loop import replay as replayed
    from kvlab.serving.llama_cpp import LlamaCppServer

    options = {key: settings.pop(key) for key in list(settings) if key not in replay_settings()}
    if settings["gpu_tokens"] is None:
        raise SettingError("the following arguments are required: --gpu-tokens")
    for room in ("cpu_tokens", "disk_tokens"):
        if settings[room] is None:
            settings[room] = 0
    checked = dict(vars(ReplaySettings(**settings)))
    server, extra, bos = checked["server"], checked["state_extra_tokens"], checked["bos"]
    made = workload_of(workload, options, checked["block_tokens"], "replay")
    rooms = {
        "gpu_tokens": checked["gpu_tokens"],
        "cpu_tokens": checked["cpu_tokens"],
        "block_tokens": made.block_tokens,
    }
    if server:
        defaults = CacheSettings(gpu_tokens=0, block_tokens=1)
        for key in (*CACHE_SETTINGS, *DISK_SETTINGS):
            if checked[key] != getattr(defaults, key):
                raise SettingError(f"{_flag(key)} does not apply to --server {server}")
        cache = LlamaCppServer(*rooms.values(), extra, bos)
        described = {**rooms, "server": server, "state_extra_tokens": extra, "bos": bos}
    else:
        try:
            chosen = CacheSettings(**rooms, **{key: checked[key] for key in (*CACHE_SETTINGS, *DISK_SETTINGS)})
            cache = chosen.build(made) if checked["instances"] == 1 else build_fleet(chosen, checked)
        except ValueError as error:
            raise SettingError(str(error)) from None
        described = chosen.describe()
        if checked["instances"] > 1:
            described |= {key: checked[key] for key in (*FLEET_SETTINGS, *("disk_scope",) * bool(chosen.disk_tokens))}
    rows = [] if per_request else None
    meter = _meter(max_memory, replay_footprint(cache, rows is not None))
    bar = progress(len(made)) if progress else None
    try:
        totals = replayed(made, cache, rows, bar.update if bar else None, meter)
    finally:
        if bar:
            bar.close()
    return made, described, totals, rows, cache if checked["instances"] > 1 else None


def build_fleet(chosen, checked):
    from kvlab.fleet import build

    return build(chosen, *(checked[key] for key in (*FLEET_SETTINGS, "disk_scope")))


# --- curve ----------------------------------------------------------------------------------------------------


replay.__signature__ = _declared(
    ("workload",), ReplaySettings, {"per_request": False, "max_memory": None, "progress": None}
)
