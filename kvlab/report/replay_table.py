"""Fold the replay points of one workload into one CSV table: a row per (point, round), "all" first.

Each point file is ``replay.py``'s JSON output for one (GPU, CPU, block) point; the table keeps the
order of the files (the grid order) and adds the cache settings in front of each row.
"""

from pathlib import Path

from kvlab.loop import COUNTERS, figures
from kvlab.util.files import frame_csv, read_json, shown
from kvlab.util.numbers import MAX_WHOLE

__all__ = ["COLUMNS", "table_csv", "table_rows"]

SETTINGS = (
    "block_tokens",
    "gpu_tokens",
    "cpu_tokens",
    "partial_blocks",
    "eviction_order",
    "write_policy",
    "gpu_eviction",
    "cpu_eviction",
)
FIGURES = tuple(figures([0] * len(COUNTERS)))  # the keys replay.py reports per round, in its order
COLUMNS = (*SETTINGS, "round", *FIGURES)


def table_rows(points):
    """One dict per (point, round) in the order of ``points``; ValueError naming the file if one is not a replay."""
    rows = []
    for point in points:
        path = Path(point)
        result = read_json(path)
        try:
            settings = {key: result["cache"][key] for key in SETTINGS}
            rounds = [{"round": "all", **result}, *result["rounds"]]
            rows += [{**settings, "round": one["round"], **figures_of(one, path)} for one in rounds]
        except (KeyError, TypeError, AttributeError):
            raise ValueError(f"{path}: not a replay output") from None
    return rows


def figures_of(one, path):
    """The figures of one round of a replay output: counts >= 0, ratios >= 0 or null; ValueError otherwise."""
    found = {key: one[key] for key in FIGURES}
    for key, value in found.items():
        if value is None and key.endswith("ratio"):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_WHOLE:
            raise ValueError(f"{path}: {key} must be a number >= 0, got {shown(value)}")
    return found


def table_csv(points):
    import pandas as pd

    return frame_csv(pd.DataFrame(table_rows(points), columns=list(COLUMNS)))
