"""The numbers every layer shares, defined once (the lab's three standard-library files keep their own copies:
they must run alone)."""

import math

__all__ = ["GIB", "MAX_POINTS", "MAX_WHOLE", "grid_points", "yaml_text_number"]

MAX_WHOLE = 2**53  # any count of tokens, blocks, documents or bytes, and timestamps: exact as a float and in int64 sums
GIB = 2**30  # a GiB (gibibyte): every budget in kvlab is in GiB of 2**30 bytes
# Points of one grid a command or kvlab's Python API runs (the product of its lists: budgets, rooms, token counts), as
# the pipeline bounds its jobs (kvlab/workflow/checks.py MAX_JOBS): a plan's point takes milliseconds, a replay's up to
# seconds; 20,000 budgets or a 3,000 x 3,000 grid ran for minutes and more without a word (issue 36).
MAX_POINTS = 5_000


def too_many_points(points, shape=""):
    """What is said of a grid of ``points`` points past :data:`MAX_POINTS` (``shape``: its lists' lengths)."""
    shape = f" ({shape})" if shape else ""
    return f"a grid of {points:,} points{shape}, more than the bound of {MAX_POINTS:,}: give fewer, or run it in parts"


def grid_points(sizes):
    """The points of a grid of ``sizes`` (``{flag's name: values}``, ``cpu_gib``); SettingError past
    :data:`MAX_POINTS`, in the words a command's own list flag says it in (kvlab/cli/base.py ``listing``)."""
    from kvlab.util.errors import SettingError

    points = math.prod(sizes.values())
    if points > MAX_POINTS:
        flags = ", ".join("--" + name.replace("_", "-") for name in sizes)
        shape = " x ".join(f"{count:,}" for count in sizes.values()) if len(sizes) > 1 else ""
        raise SettingError(f"argument{'s' if len(sizes) > 1 else ''} {flags}: {too_many_points(points, shape)}")
    return points


def yaml_text_number(value):
    """What to say of a YAML value that reads as a number to a person but as text to YAML 1.1 (PyYAML's resolver,
    Snakemake's too: ``989e12`` and ``4e-1`` need a dot, ``989.0e12``), or "" for any other value."""
    import re

    if isinstance(value, str) and re.fullmatch(r"[-+]?[0-9]+[eE][-+]?[0-9]+", value.strip()):
        mantissa, _, exponent = value.strip().lower().partition("e")
        return f" (YAML 1.1 reads {value} as text: write {mantissa}.0e{exponent})"
    return ""
