"""How much memory a command may take, and a stop with one line before it would take more (``--max-memory``).

A replay, a curve, a plan, a policy table or a plan's TTFTs hold state that grows with the workload: per block
access, per request, per distinct block, besides a fixed part (the reader's batch). The command counts them as it
reads and projects the total (from the fraction of the file read so far, where the file's size is known; a ``.gz``
file or standard input only as it streams), and stops with one line, before the kernel's out-of-memory killer
would stop it without one. Each command declares its :class:`Footprint` at its worst (arrays grown by doubling, and
the old copy while they grow), checked against the peak resident memory by ``bench/memory_footprint.py``. The
amount is above the command's start-up (Python, numpy, numba: about 150 MB). The default limit is 80% of the
smaller of the memory the machine has available and the limit of its control group (a container's).
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

from kvlab.util.settings import setting

__all__ = ["PANDAS_BYTES", "Footprint", "MemoryLimitError", "MemorySettings", "Meter", "default_limit", "memory_size"]

PANDAS_BYTES = 40 * 2**20  # importing pandas to write a CSV (32 MiB measured, bench/memory_footprint.py)

UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(?:I?B)?", re.IGNORECASE)  # ASCII digits (not \d's ١٢٣)


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


@dataclass
class MemorySettings:
    """``--max-memory`` (the API's ``max_memory``), declared once for every command that takes it."""

    max_memory: int = setting(
        None,
        help="stop with one line, before reading on, when the state would pass this much memory above the"
        " command's start-up (Python, numpy, numba: about 150 MB) (e.g. 8G, 512M; default: 80%% of the smaller of"
        " the memory available and the control group's limit)",
        convert=memory_size,
    )


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
    """Bytes a command holds above its start-up: per block access, per request, per distinct block, and ``fixed``
    bytes that do not grow with the workload (the reader's batch of lines and its arrays).

    Each figure is the most held at once, not the arrays' final sizes: an array grown by doubling holds up to
    twice what it needs and, while it grows, the old copy besides. Each command declares its own beside the arrays
    it counts; ``bench/memory_footprint.py`` checks them against the peak resident memory.
    """

    access: int = 0
    request: int = 0
    key: int = 0
    fixed: int = 0

    def of(self, accesses, requests, keys):
        """The bytes that grow with the workload (``fixed`` apart: it is not projected from a fraction)."""
        return self.access * accesses + self.request * requests + self.key * keys


class Meter:
    """Counts what a command has read against its limit; ``check`` stops it with one line when the total it
    projects would exceed ``limit`` bytes. ``projected`` is the largest total it projected (for the bench)."""

    def __init__(self, limit, footprint):
        self.limit = limit
        self.footprint = footprint
        self.projected = 0

    def project(self, accesses, requests, keys, fraction=None, footprint=None):
        """The bytes the whole input would take, judged by the part read (``check``'s arguments)."""
        footprint = footprint or self.footprint
        need = footprint.of(accesses, requests, keys)
        return footprint.fixed + (need / fraction if fraction else need)

    def check(self, accesses, requests, keys, fraction=None, footprint=None):
        """``accesses``, ``requests`` and distinct ``keys`` read so far, ``fraction`` of the input (None: unknown);
        ``footprint`` instead of the meter's own (a later step that holds more)."""
        whole = self.project(accesses, requests, keys, fraction, footprint)
        self.projected = max(self.projected, whole)
        if whole > self.limit:
            read = f"the {fraction:.0%} read so far" if fraction and fraction < 1 else f"{accesses:,} block accesses"
            read = read if accesses or requests or keys else "its settings, before reading"
            raise MemoryLimitError(
                f"this workload would need about {gib(whole)} of memory (judged by {read}), more than --max-memory"
                f" {gib(self.limit)}: give it more with --max-memory, or read a part of the input"
            )
