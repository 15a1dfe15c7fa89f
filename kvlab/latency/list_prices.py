"""What a plan costs per hour, and what a node can pin (issue 40, part 2): a prices file (``kvlab plan --prices
FILE``, or kvlab's shipped ``list_prices.yaml``, public list prices each with its source and date) gives per GPU system
the price of a GPU-hour and the node's shape (GPUs, host memory, disk), and the price of a GiB of host memory and a
TiB of disk for an hour. A CPU tier lives in pinned host memory, so a node's host memory caps it: a budget per GPU
above the node's memory over its GPUs is refused with the figures."""

import math
from dataclasses import dataclass
from pathlib import Path

from kvlab.util.errors import SettingError, printable

__all__ = ["DEFAULT", "Node", "Prices", "PricesError", "SystemPrice", "load_prices"]

DEFAULT = Path(__file__).with_name("list_prices.yaml")
TOP = {"currency", "host_memory_gib_hour", "host_memory_source", "disk_tib_hour", "disk_source", "systems"}
SYSTEM = {"gpu_hour", "node", "source"}
NODE = {"gpus", "host_memory_gib", "disk_tib"}
MAX_PRICE = 1e9  # per hour: past it a figure is a typing slip, not a price
MAX_SHAPE = 1e9  # GPUs, GiB or TiB of a node


class PricesError(SettingError):
    """A prices file kvlab cannot read, or a plan its prices refuse: one line, the file and its line where there is
    one (what the file says in it made printable)."""

    def __init__(self, message):
        super().__init__(printable(message))


@dataclass(frozen=True)
class Node:
    gpus: int
    host_memory_gib: float
    disk_tib: float


@dataclass(frozen=True)
class SystemPrice:
    gpu_hour: float
    node: Node
    source: str


@dataclass(frozen=True)
class Prices:
    """A prices file's figures (``name``: the file as the user named it, or ``default``)."""

    name: str
    currency: str
    host_memory_gib_hour: float
    host_memory_source: str
    disk_tib_hour: float
    disk_source: str
    systems: dict

    def system(self, name):
        """The price of GPU system ``name``; PricesError where the file has none."""
        if name not in self.systems:
            listed = ", ".join(sorted(self.systems)) or "none"
            raise PricesError(f"argument --prices: {self.name} prices no GPU system {name} (it prices: {listed})")
        return self.systems[name]

    def check_host(self, name, cpu_gib):
        """PricesError where a CPU tier of ``cpu_gib`` per GPU needs more pinned memory than a node of system
        ``name`` has per GPU."""
        node = self.system(name).node
        per_gpu = node.host_memory_gib / node.gpus
        if float(cpu_gib) > per_gpu:
            raise PricesError(
                f"argument --cpu-gib: {float(cpu_gib):g} GiB per GPU of pinned host memory is more than a node of"
                f" {name} has: {node.host_memory_gib:g} GiB for {node.gpus} GPUs, {per_gpu:g} GiB per GPU ({self.name})"
            )

    def per_hour(self, name, gpus, cpu_gib, disk_gib=0):
        """What ``gpus`` GPUs of system ``name`` cost for an hour with ``cpu_gib`` of host memory and ``disk_gib``
        of disk per GPU: each part and the total, in :attr:`currency`, to 4 decimals."""
        parts = {
            "gpus": self.system(name).gpu_hour * gpus,
            "host_memory": self.host_memory_gib_hour * float(cpu_gib) * gpus,
            "disk": self.disk_tib_hour * float(disk_gib) / 1024 * gpus,
        }
        return {**{part: round(value, 4) for part, value in parts.items()}, "total": round(sum(parts.values()), 4)}

    def describe(self, name):
        """Where a plan's prices come from, for its JSON."""
        return {
            "prices": self.name,
            "currency": self.currency,
            "gpu_hour": self.system(name).gpu_hour,
            "gpu_source": self.system(name).source,
            "host_memory_gib_hour": self.host_memory_gib_hour,
            "host_memory_source": self.host_memory_source,
            "disk_tib_hour": self.disk_tib_hour,
            "disk_source": self.disk_source,
        }


def load_prices(given):
    """The prices of the file ``given`` (a path, or ``default``: kvlab's shipped ``list_prices.yaml``); PricesError, one
    line with the file and its line, for one that is not a prices file."""
    from kvlab.latency.systems import read_system, system_names
    from kvlab.util.files import line_of, shown
    from kvlab.util.numbers import yaml_text_number
    from kvlab.util.yamldata import read

    if not str(given):
        raise PricesError("argument --prices: an empty name: give a prices file, or default")
    path, name = (DEFAULT, "default") if given == "default" else (Path(given), str(given))
    data, root = read(path, PricesError)

    def refuse(keys, why):
        line = line_of(root, keys)
        where = f"{name}:{line}" if line else name
        raise PricesError(f"argument --prices: {where}: {'.'.join(map(str, keys)) or '(top level)'}: {why}")

    def mapping(value, keys, allowed=None):
        if not isinstance(value, dict):
            refuse(keys, "not a mapping")
        for key in value:
            if allowed is not None and key not in allowed:
                refuse((*keys, key), f"not a key of a prices file here (these are: {', '.join(sorted(allowed))})")
        return value

    def number(value, keys, whole=False, largest=MAX_PRICE):
        if isinstance(value, bool) or not isinstance(value, int | float) or (whole and not isinstance(value, int)):
            refuse(keys, f"not a {'whole ' if whole else ''}number: {shown(value, 60)}" + yaml_text_number(value))
        if not -largest <= value <= largest or not math.isfinite(value) or value < 0 or (whole and value < 1):
            refuse(keys, f"{shown(value, 60)} is not a figure from {1 if whole else 0} to {largest:g}")
        return value

    def text(value, keys):
        if not isinstance(value, str) or not value.strip():
            refuse(keys, "not a text")
        return printable(" ".join(value.split()))  # a source is printed: no terminal escapes from the file

    mapping(data, (), TOP)
    for key in TOP - {"currency"}:
        if key not in data:
            refuse((key,), "missing")
    known = set(system_names())
    systems = {}
    for system, value in mapping(data["systems"], ("systems",)).items():
        at = ("systems", system)
        if system not in known:
            refuse(at, "not a GPU system of aiconfigurator-core (kvlab ttft systems lists them)")
        mapping(value, at, SYSTEM)
        node = mapping(value.get("node"), (*at, "node"), NODE)
        for key in ("gpu_hour", "source"):
            if key not in value:
                refuse((*at, key), "missing")
        for key in ("host_memory_gib", "disk_tib"):
            if key not in node:
                refuse((*at, "node", key), "missing")
        gpus = node.get("gpus", read_system(system).gpus_per_node)
        systems[system] = SystemPrice(
            number(value["gpu_hour"], (*at, "gpu_hour")),
            Node(
                number(gpus, (*at, "node", "gpus"), whole=True, largest=MAX_SHAPE),
                float(number(node["host_memory_gib"], (*at, "node", "host_memory_gib"), largest=MAX_SHAPE)),
                float(number(node["disk_tib"], (*at, "node", "disk_tib"), largest=MAX_SHAPE)),
            ),
            text(value["source"], (*at, "source")),
        )
    return Prices(
        name,
        text(data.get("currency", "USD"), ("currency",)),
        float(number(data["host_memory_gib_hour"], ("host_memory_gib_hour",))),
        text(data["host_memory_source"], ("host_memory_source",)),
        float(number(data["disk_tib_hour"], ("disk_tib_hour",))),
        text(data["disk_source"], ("disk_source",)),
        systems,
    )
