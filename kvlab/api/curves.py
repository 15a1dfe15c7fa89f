"""``kvlab.curve``: the exact LRU curve of a tier at every room, and its cliffs (what ``kvlab mrc`` prints)."""

import json
from dataclasses import dataclass, field, fields, replace

from kvlab.api.common import _bound, _declared, _grid, _meter, _ratio, _Result, _switch, compile_notice, workload_of
from kvlab.cache.prefix import eviction_order_setting, partial_blocks_setting
from kvlab.fleet import instances_setting, router_setting
from kvlab.util.errors import KvlabError, SettingError
from kvlab.util.files import dump_json
from kvlab.util.settings import Declared, setting
from kvlab.workloads import whole_number

CACHE = "cache (LRU on every tier, write-through)"
FLEET = "a fleet: the curve of the CPU tier its instances share (kvlab/fleet/)"


@dataclass(frozen=True, kw_only=True)
class CurveSettings(Declared):
    """A curve's settings at one point of its grid (``kvlab mrc``'s flags and ``kvlab.curve``'s keywords, declared
    once: kvlab/util/settings.py)."""

    block_tokens: int | None = setting(
        None,
        convert=whole_number(1),
        group=CACHE,
        help="tokens per block (default 256, LMCache's chunk; mooncake: 512 or a multiple of it)",
    )
    gpu_tokens: int | None = setting(
        None,
        convert=whole_number(0),
        group=CACHE,
        help="the CPU tier's curve at this GPU room in tokens (default: the GPU tier's)",
    )
    cpu_tokens: int | None = setting(
        None,
        convert=whole_number(0),
        group=CACHE,
        help="with --gpu-tokens: the disk tier's curve below this CPU room in tokens (kvlab/cache/tiers.py)",
    )
    partial_blocks: str = partial_blocks_setting(CACHE)
    eviction_order: str = eviction_order_setting(CACHE)
    target_hit_ratio: float | None = setting(
        None,
        convert=_ratio,
        group=CACHE,
        help="also the smallest room for this token hit ratio over all rounds (0..1)",
    )

    instances: int = instances_setting(FLEET)
    router: str = router_setting(FLEET)

    def check(self):
        if self.cpu_tokens is not None and self.gpu_tokens is None:
            raise SettingError("--cpu-tokens gives the disk tier's curve below a GPU room: give --gpu-tokens too")
        if self.instances > 1:
            if self.gpu_tokens is None or self.cpu_tokens is not None:
                raise SettingError("--instances: a fleet's curve is its shared CPU tier's: give --gpu-tokens alone")
            if self.router == "prefix":
                raise SettingError("--router prefix reads the CPU tier, whose room the curve varies: no exact curve")


@dataclass(frozen=True)
class Curve(_Result):
    """What ``kvlab mrc`` prints (the cliffs); ``csv`` its ``--curve`` table: the tier's hits at every room."""

    tier: str
    block_tokens: int
    gpu_tokens: int | None
    cpu_tokens: int | None
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
        rooms = {key: cache.get(key) for key in ("tier", "block_tokens", "gpu_tokens", "cpu_tokens")}
        return cls(**rooms, **found, tokens_for_target=document.get("tokens_for_target"), text=text, csv=csv)

    def to_frame(self):
        """The curve: one row per step of the room (``gpu_tokens``, ``cpu_tokens`` or ``disk_tokens``), the hit tokens
        per round and in all, the token hit ratio (counting what the tiers in front served)."""
        import io

        import pandas as pd

        if self.csv is None:
            raise KvlabError("the curve's table is kept with table=True")
        return pd.read_csv(io.StringIO(self.csv))


def curve(*, workload, table=True, max_memory=None, **settings):
    """The exact LRU curve of the GPU tier at every room (``kvlab mrc``'s flags: :class:`CurveSettings`), with
    ``gpu_tokens`` the CPU tier's (write-through) at that GPU room, and with ``cpu_tokens`` as well the disk tier's
    below both (``kvlab/cache/tiers.py``); ``table=False`` keeps the cliffs only (no pandas, less memory). A
    :class:`Curve`, or a :class:`Grid` of them where ``block_tokens``, ``gpu_tokens`` or ``cpu_tokens`` is a list;
    the workload's options are keywords too."""
    given = _bound(curve, {"workload": workload, "table": table, "max_memory": max_memory, **settings})
    return _grid(_curve, given, ("block_tokens", "gpu_tokens", "cpu_tokens"))


CURVE_SETTINGS = tuple(found.name for found in fields(CurveSettings))


def _curve(*, workload, table, max_memory, **settings):
    from kvlab.curves.mrc import FOOTPRINT, cliffs, curve_csv, tier_curve
    from kvlab.util.memory import PANDAS_BYTES

    options = {key: settings.pop(key) for key in list(settings) if key not in CURVE_SETTINGS}
    checked = CurveSettings(**settings)
    block, partial, order = checked.block_tokens, checked.partial_blocks, checked.eviction_order
    gpu_tokens, cpu_tokens, target = checked.gpu_tokens, checked.cpu_tokens, checked.target_hit_ratio
    _switch("table", table)
    made = workload_of(workload, options, block, "curve")
    tier = "gpu" if gpu_tokens is None else "cpu" if cpu_tokens is None else "disk"
    meter = _meter(max_memory, replace(FOOTPRINT, fixed=FOOTPRINT.fixed + PANDAS_BYTES) if table else FOOTPRINT)
    fleet = {"instances": checked.instances, "router": checked.router} if checked.instances > 1 else {}
    found = tier_curve(made, partial, order, gpu_tokens, compile_notice, meter, cpu_tokens=cpu_tokens, **fleet)
    cache = {
        "tier": tier,
        "block_tokens": made.block_tokens,
        "partial_blocks": partial,
        "eviction_order": order,
        "eviction": "lru",
    }
    if tier != "gpu":
        cache.update(write_policy="write-through", gpu_tokens=gpu_tokens)
    if tier == "disk":
        cache.update(cpu_tokens=cpu_tokens)
    if fleet:
        cache.update(**fleet, cpu_scope="shared")
    result = {"workload": made.describe(), "cache": cache, **cliffs(found, target)}
    return Curve.of(dump_json(result), curve_csv(found, tier) if table else None)


# --- size -----------------------------------------------------------------------------------------------------


curve.__signature__ = _declared(("workload",), CurveSettings, {"table": True, "max_memory": None})
