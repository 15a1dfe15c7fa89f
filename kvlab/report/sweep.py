"""Fold the per-point scenario outputs of one sweep into ``{"<grid value>": number}`` in grid order.

Each point file is ``scenario.py``'s output for one grid value and is named after that value
(``work/sweeps/cliff/30000.json``); the collector records one pass's hits or misses per point.
"""

from pathlib import Path

from kvlab.util.files import read_json
from kvlab.util.numbers import MAX_WHOLE

__all__ = ["VALUES", "collect"]

COUNTS = ("gpu_hits", "cpu_hits", "misses")

VALUES = {
    "hits": lambda counts: counts["gpu_hits"] + counts["cpu_hits"],
    "misses": lambda counts: counts["misses"],
}


def collect(points, pass_number, value):
    """Return ``{point stem: value of pass ``pass_number`` (1-based)}`` in the order of ``points``."""
    folded = {}
    for point in points:
        path = Path(point)
        document = read_json(path)
        passes = document.get("passes") if isinstance(document, dict) else None
        if not isinstance(passes, list) or not all(isinstance(one, dict) for one in passes):
            raise ValueError(f"{path}: not a scenario output (no passes list)")
        if not 1 <= pass_number <= len(passes):
            raise ValueError(f"{path}: has {len(passes)} pass(es), cannot record pass {pass_number}")
        if path.stem in folded:
            raise ValueError(f"{path}: grid value {path.stem} appears twice")
        counts = passes[pass_number - 1]
        if not all(type(counts.get(key)) is int and 0 <= counts[key] <= MAX_WHOLE for key in COUNTS):
            raise ValueError(f"{path}: pass {pass_number} needs {', '.join(COUNTS)} as whole numbers >= 0")
        folded[path.stem] = VALUES[value](counts)
    return folded
