"""How much memory a command may take, and a stop with one line before it would take more (``--max-memory``).

A replay, a curve or a plan holds state that grows with the workload: per block access, per request, per
distinct block. The command counts them as it reads and projects the total (from the fraction of the file read
so far, where the file's size is known; a ``.gz`` file or standard input only as it streams), and stops with
one line, before the kernel's out-of-memory killer would stop it without one. The default limit is 80% of the
smaller of the memory the machine has available and the limit of its control group (a container's).
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Footprint", "MemoryLimitError", "Meter", "default_limit", "memory_size"]

UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?", re.IGNORECASE)


class MemoryLimitError(ValueError):
    """The command would need more memory than it may take; the message says how much, and what to do."""


def memory_size(text):
    """Bytes in ``text``: a number with an optional binary unit, ``512M``, ``8G``, ``1.5GiB``, ``2000000000``."""
    match = SIZE.fullmatch(str(text).strip())
    if not match:
        raise ValueError(f"expected an amount of memory such as 8G, 512M or 2000000000, got {text!r}")
    amount = int(float(match.group(1)) * UNITS[match.group(2).upper()])
    if amount < 1:
        raise ValueError(f"expected an amount of memory of at least 1 byte, got {text!r}")
    return amount


def available():
    """The memory this process can have: MemAvailable, or the control group's limit if smaller (bytes)."""
    found = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            value = Path(limit).read_text().strip()
        except OSError:
            continue
        if value.isdigit():
            found.append(int(value))
    if not found:  # not Linux: what sysconf says the machine has
        found.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return min(found)


def default_limit():
    return int(0.8 * available())


def gib(nbytes):
    """An amount of memory for people: GiB, MiB or bytes."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{int(nbytes)} bytes"


@dataclass(frozen=True)
class Footprint:
    """Bytes a command holds per block access, per request and per distinct block, above its start-up."""

    access: int = 0
    request: int = 0
    key: int = 0

    def of(self, accesses, requests, keys):
        return self.access * accesses + self.request * requests + self.key * keys


class Meter:
    """Counts what a command has read against its limit; ``check`` stops it with one line when the total it
    projects would exceed ``limit`` bytes."""

    def __init__(self, limit, footprint):
        self.limit = limit
        self.footprint = footprint

    def check(self, accesses, requests, keys, fraction=None, footprint=None):
        """``accesses``, ``requests`` and distinct ``keys`` read so far, ``fraction`` of the input (None: unknown);
        ``footprint`` instead of the meter's own (a later step that holds more)."""
        need = (footprint or self.footprint).of(accesses, requests, keys)
        whole = need / fraction if fraction else need
        if whole > self.limit:
            read = f"{accesses:,} block accesses" if whole == need else f"the {fraction:.0%} read so far"
            raise MemoryLimitError(
                f"this workload would need about {gib(whole)} of memory (judged by {read}), more than --max-memory"
                f" {gib(self.limit)}: give it more with --max-memory, or read a part of the input"
            )
