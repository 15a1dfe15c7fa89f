"""Argument types several commands share: rooms in tokens, and the ``NAME:VALUE`` pairs of the measurement's
configs and passes. Kept apart from the flag groups, so that a command that needs only these imports nothing
of the cache."""

from kvlab.cli.base import listing
from kvlab.util.files import number_in, shown
from kvlab.workloads import ORDERS, whole_number

__all__ = ["block_tokens", "named_order", "named_rooms", "number_in", "rooms", "tokens"]


tokens = whole_number(0)  # a room in tokens
block_tokens = whole_number(1)


def rooms(what, minimum=0):
    """A comma-separated grid of distinct rooms (or block sizes) in tokens."""
    return listing(whole_number(minimum), what)


def named_rooms(text):
    """``NAME:GPU_TOKENS,CPU_TOKENS`` (rooms in tokens)."""
    name, _, pair = text.partition(":")
    gpu, _, cpu = pair.partition(",")
    if not name or not (gpu + cpu).isascii() or not gpu.isdigit() or not cpu.isdigit():
        raise ValueError(f"expected NAME:GPU_TOKENS,CPU_TOKENS with rooms in tokens, got {shown(text)}")
    return name, (whole_number(0)(gpu), whole_number(0)(cpu))


def named_order(text):
    """``NAME:fwd`` or ``NAME:rev``."""
    name, _, order = text.partition(":")
    if not name or order not in ORDERS:
        raise ValueError(f"expected NAME:fwd or NAME:rev, got {shown(text)}")
    return name, order
