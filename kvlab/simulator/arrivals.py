"""When requests arrive: from the trace's clock (sped up or slowed down), at a Poisson rate, or from clients that
each send their next request when the last one finishes (closed loop, no think time)."""

import random
from dataclasses import dataclass, fields

from kvlab.util.errors import SettingError
from kvlab.util.files import number_in
from kvlab.util.settings import Declared, check_value, setting
from kvlab.workloads import whole_number

__all__ = ["ARRIVALS", "PACE", "Arrivals", "pace"]

MAX_CLIENTS = 10**6  # closed-loop clients: kvlab simulate's --clients, plan's --load clients=N
ARRIVALS = ("speedup", "rate", "clients")  # the settings of which exactly one is given (or none: speedup 1)
# The one range of a rate (requests/s) and a speedup, wherever one enters (the flags, --load, the Python API, the
# config check). The clock is float64 seconds; the outputs print each request's times to the microsecond,
# requests/s to 4 decimals and output tokens/s to 2. At 0.01 requests/s (one a 100 s) the 2.7 million requests that
# take 2**28 s (8.5 years) leave a clock reading exact to 2**-24 s (60 ns), and requests/s prints 2 figures; at
# 1e-12 the first gap (~2**40 s) leaves it exact to 2**-12 s (0.24 ms), and requests/s prints 0.0 (issue 36).
PACE = (0.01, 1e12)
WITHIN = f"{PACE[0]:g} to {PACE[1]:g}"
pace = number_in(*PACE, f"a number from {WITHIN}")


@dataclass(frozen=True)
class Arrivals(Declared):
    """How requests arrive: one of ``speedup``, ``rate`` and ``clients`` (or none: the trace's clock); the Poisson
    draw's ``seed`` goes with ``rate`` only (it draws nothing else)."""

    speedup: float | None = setting(None, convert=pace, help=f"the trace's timestamps divided by this ({WITHIN})")
    rate: float | None = setting(None, convert=pace, help=f"Poisson arrivals, requests per second ({WITHIN})")
    clients: int | None = setting(None, convert=whole_number(1, MAX_CLIENTS), help="closed-loop clients")
    # >= 0: random.Random takes a negative seed's absolute value (-1 draws as 1)
    seed: int | None = setting(None, convert=whole_number(0), help="the Poisson draw of --rate's seed (default 0)")

    def check(self):
        given = [name for name in ARRIVALS if getattr(self, name) is not None]
        if len(given) > 1:
            raise SettingError(f"--{given[0]} and --{given[1]} do not go together: arrivals come one way")
        if self.seed is not None and self.rate is None:
            raise SettingError("argument --seed: it draws the Poisson arrivals of --rate, and there is no --rate")
        if self.rate is not None and self.seed is None:
            object.__setattr__(self, "seed", 0)

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

    def open_times(self, requests, source=None):
        """``(arrival_s, request)`` for an open-loop source (``speedup`` or ``rate``), in order; a trace's clock
        must not go back (``source``: the trace's file, named in the error), and a source without one needs
        ``rate`` or ``clients``."""
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
                raise going_back(number, stamp, last, source)
            last = stamp
            yield (stamp - first) / speedup, request


fields_of = {found.name: found for found in fields(Arrivals)}


def paced(name, value):
    """``value`` of ``--name`` (``rate`` or ``speedup``: text or a number) within :data:`PACE`; SettingError in the
    flag's words, the same whichever way it came."""
    return check_value(name, fields_of[name].metadata, value)


def going_back(number, stamp, last, source=None):
    """The stop at request ``number`` (from 1) of the trace ``source`` whose timestamp ``stamp`` (s) comes before the
    last one's."""
    where = f"{source}: " if source else ""
    return SettingError(f"{where}request {number}: its timestamp goes back ({stamp} s after {last} s)")
