"""Fold the per-point scenario outputs of one sweep into ``{"<grid value>": number}`` in grid order.

Each point file is ``scenario.py``'s output for one grid value and is named after that value
(``work/sweeps/cliff/30000.json``); the collector records one pass's hits or misses per point.
"""

import json
import sys
from pathlib import Path

from kvlab.files import write_json
from kvlab.scenario import OneLineParser

VALUES = {
    "hits": lambda counts: counts["gpu_hits"] + counts["cpu_hits"],
    "misses": lambda counts: counts["misses"],
}


def collect(points, pass_number, value):
    """Return ``{point stem: value of pass ``pass_number`` (1-based)}`` in the order of ``points``."""
    folded = {}
    for point in points:
        path = Path(point)
        try:
            passes = json.loads(path.read_text(encoding="utf-8"))["passes"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path}: not a scenario.py output (no passes list)") from None
        if not 1 <= pass_number <= len(passes):
            raise ValueError(f"{path}: has {len(passes)} pass(es), cannot record pass {pass_number}")
        if path.stem in folded:
            raise ValueError(f"{path}: grid value {path.stem} appears twice")
        folded[path.stem] = VALUES[value](passes[pass_number - 1])
    return folded


def main(argv=None):
    parser = OneLineParser(prog="collect_sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--pass", dest="pass_number", type=int, required=True, help="which pass to record (1-based)")
    parser.add_argument("--value", choices=sorted(VALUES), required=True, help="what to record of that pass")
    parser.add_argument("--out", required=True, help="the sweep artifact to write")
    parser.add_argument("points", nargs="+", help="point files in grid order, each named <grid value>.json")
    args = parser.parse_args(argv)
    try:
        folded = collect(args.points, args.pass_number, args.value)
    except (OSError, ValueError) as error:
        parser.fail(str(error))
    write_json(args.out, folded)
    return 0


if __name__ == "__main__":
    sys.exit(main())
