"""kvlab from Python: :func:`plan`, :func:`replay`, :func:`curve`, :func:`size` and :func:`ttft_predict` (with
:func:`ttft_breakeven` and :func:`ttft_systems`), the work of ``kvlab plan``, ``kvlab replay``, ``kvlab mrc``,
``kvlab size`` and ``kvlab ttft predict`` (``breakeven``, ``systems``): those commands parse their flags and call
these functions, so what they print is what these return. docs/python.md shows them in use.

Every argument is keyword-only and named as the command's flag and the config key (``gpu_tokens`` is
``--gpu-tokens``, ``cpu_gib`` is ``--cpu-gib``), taking what the flag takes (``cpu_gib=1.5`` or ``"1.5"``) with the
flag's default. A workload is a source's name with its options as keywords (``workload="lab", docs=4``) or a
mapping as config.yaml writes one (``workload={"source": "lab", "docs": 4}``). A list where a room or a budget goes
(``cpu_gib=[0, 0.5, 1.5]``) is a grid: the answer is a :class:`Grid`, one result per point.

Each result is a frozen dataclass: its headline figures as fields, ``text`` the JSON the command prints (byte for
byte), ``to_dict()`` that JSON as data, ``to_frame()`` a pandas DataFrame. Bad input raises :class:`SettingError`
(a setting the command refuses with exit 2) or :class:`KvlabError` (bad data or a file it cannot read, exit 1),
both ValueErrors whose message is the one line the command prints after ``kvlab COMMAND: error:``.

One module per function (``plans``, ``replays``, ``curves``, ``sizes``, ``ttfts``; what they share in ``common``),
so that a command imports the domain its own function needs and no other: a job's code stamp (kvlab/workflow/stamps.py)
then reruns it only when that code changes. The names below come from their modules when first asked for
(through importlib: importing the package, as every command's module does, runs none of them).
"""

from kvlab.util.errors import KvlabError, SettingError

HOMES = {
    "plans": ("plan", "Plan", "plan_setting", "PLAN_SETTINGS"),
    "replays": ("replay", "Replay", "replay_settings", "replay_footprint", "SERVER_SETTINGS"),
    "curves": ("curve", "Curve", "CURVE_SETTINGS"),
    "sizes": ("size", "Size", "fitting"),
    "simulates": ("simulate", "Simulation"),
    "searches": ("search", "Search"),
    "ttfts": ("ttft_predict", "ttft_breakeven", "ttft_systems", "TtftPrediction"),
    "common": ("Grid", "workload_of", "compile_notice"),
}
HOME = {name: module for module, names in HOMES.items() for name in names}

__all__ = [
    "Curve",
    "Grid",
    "KvlabError",
    "Plan",
    "Replay",
    "Search",
    "SettingError",
    "Simulation",
    "Size",
    "TtftPrediction",
    "curve",
    "plan",
    "replay",
    "search",
    "simulate",
    "size",
    "ttft_breakeven",
    "ttft_predict",
    "ttft_systems",
]


def __getattr__(name):
    """A name of the API, from its module, imported on first use."""
    if name not in HOME:
        raise AttributeError(f"module 'kvlab.api' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"kvlab.api.{HOME[name]}"), name)


def __dir__():
    return sorted({*globals(), *HOME})
