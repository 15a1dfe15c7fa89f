"""When requests arrive: from the trace's clock (sped up or slowed down), at a Poisson rate, or from clients that
each send their next request when the last one finishes (closed loop, no think time)."""

import math
import random
from dataclasses import dataclass

from kvlab.util.errors import SettingError

__all__ = ["ARRIVALS", "Arrivals"]

ARRIVALS = ("speedup", "rate", "clients")  # the settings of which exactly one is given (or none: speedup 1)


@dataclass(frozen=True)
class Arrivals:
    """``speedup``: the trace's timestamps divided by it (the first request at 0); ``rate``: requests per second,
    exponential gaps drawn from ``seed``; ``clients``: that many closed-loop clients."""

    speedup: float | None = None
    rate: float | None = None
    clients: int | None = None
    seed: int = 0

    def __post_init__(self):
        given = [name for name in ARRIVALS if getattr(self, name) is not None]
        if len(given) > 1:
            raise SettingError(f"--{given[0]} and --{given[1]} do not go together: arrivals come one way")
        for name in ("speedup", "rate"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not (0 < value < math.inf)):
                raise SettingError(f"argument --{name}: expected a positive number, got {value!r}")
        if self.clients is not None and (type(self.clients) is not int or self.clients < 1):
            raise SettingError(f"argument --clients: expected a whole number >= 1, got {self.clients!r}")

    @property
    def kind(self):
        return next((name for name in ARRIVALS if getattr(self, name) is not None), "speedup")

    def describe(self):
        kind = self.kind
        if kind == "speedup":
            return {"arrivals": "trace timestamps", "speedup": self.speedup or 1.0}
        if kind == "rate":
            return {"arrivals": "poisson", "rate": self.rate, "seed": self.seed}
        return {"arrivals": "closed loop", "clients": self.clients}

    def open_times(self, requests):
        """``(arrival_s, request)`` for an open-loop source (``speedup`` or ``rate``), in order; a trace's clock
        must not go back, and a source without one needs ``rate`` or ``clients``."""
        if self.kind == "rate":
            draw = random.Random(self.seed).expovariate
            now = 0.0
            for request in requests:
                yield now, request
                now += draw(self.rate)
            return
        speedup = self.speedup or 1.0
        first = last = None
        for number, request in enumerate(requests, 1):
            stamp = request.arrival_s
            if stamp is None:
                raise SettingError("this workload has no timestamps: give --rate or --clients")
            if first is None:
                first = last = stamp
            if stamp < last:
                raise going_back(number, stamp, last)
            last = stamp
            yield (stamp - first) / speedup, request


def going_back(number, stamp, last):
    """The stop at request ``number`` (from 1) whose timestamp ``stamp`` (s) comes before the last one's."""
    return SettingError(f"request {number}: its timestamp goes back ({stamp} s after {last} s)")
