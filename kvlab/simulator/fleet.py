"""Many engine instances on one clock (issue 39, part 2): N copies of the one engine model (``events.py``), each
driven to every arrival in turn (:meth:`kvlab.simulator.events.Simulator.advance`), and a router
(``kvlab/fleet/routers/``) that picks the instance of each request from what it sees of them at its arrival: their
caches, and their load as their engines report it. An instance's step that started before an arrival has ended when
the router looks (its effects are seen a step early: a real router reads metrics its engines publish after each
step)."""

from dataclasses import dataclass

from kvlab.fleet import cpu_scope_setting, instances_setting, router_setting
from kvlab.fleet.routers import ROUTERS
from kvlab.fleet.routers.base import Load
from kvlab.latency.transfer import DISK_MEDIA, Link
from kvlab.simulator.events import SimulatorStats
from kvlab.util.errors import SettingError
from kvlab.util.settings import Declared, checked

__all__ = ["NETWORK", "ROUTER_SETTINGS", "FleetSettings", "SharedHosts", "TimedFleet", "router_of"]

NETWORK = Link(*DISK_MEDIA["rdma"])  # one 200 Gb/s NIC, as a Mooncake Store is read (kvlab/latency/transfer.py)
GROUP = "a fleet: instances behind a router, on one clock (kvlab/simulator/fleet.py)"
ROUTER_SETTINGS = {name: router.Settings for name, router in ROUTERS.items() if router.Settings is not None}


@dataclass(frozen=True, kw_only=True)
class FleetSettings(Declared):
    """``kvlab simulate``'s fleet: ``--instances`` copies of the engine behind ``--router`` (any router, those that
    read the load too), their CPU tiers each one's or one for all (``--cpu-scope``)."""

    instances: int = instances_setting(GROUP)
    router: str = router_setting(GROUP, clock=True)
    cpu_scope: str = cpu_scope_setting(GROUP)


def router_of(name, given):
    """The router ``name`` with its settings from ``given`` (every router's settings by name, None where not
    given); SettingError where a setting of another router is given."""
    from dataclasses import fields

    own = ROUTER_SETTINGS.get(name)
    names = {found.name for found in fields(own)} if own else set()
    for other, settings in ROUTER_SETTINGS.items():
        for found in fields(settings):
            if found.name not in names and given.get(found.name) is not None:
                raise SettingError(f"argument --{found.name.replace('_', '-')}: applies to --router {other} only")
    return ROUTERS[name](own(**checked(own, given)) if own else None)


class TimedFleet:
    """``simulators`` (one :class:`kvlab.simulator.events.Simulator` per instance) behind ``router``; what a router
    sees of a fleet (kvlab/fleet/routers/base.py)."""

    def __init__(self, simulators, router, engine):
        self.simulators = simulators
        self.router = router
        self.engine = engine  # kvlab.simulator.settings.EngineSettings: each request's length checked in its number
        self.size = len(simulators)
        self.block_tokens = simulators[0].block
        self.gpu_blocks = simulators[0].pool.blocks  # each instance's pool
        self.sent = [0] * self.size
        self.inflight = [0] * self.size  # sent and not finished
        self.numbers = [[] for _ in simulators]  # per instance, the fleet's number of each request it was sent
        self.chosen = []  # each request's instance, by number
        self.now = 0.0
        for index, simulator in enumerate(simulators):
            simulator.watch = _Watch(self, index)

    def held(self, index, keys):
        return self.simulators[index].held(keys)

    def load(self, index):
        simulator = self.simulators[index]
        pool = simulator.pool
        waiting = len(simulator.waiting) + len(simulator.holding) + len(simulator.fed)
        waiting += simulator.next_arrival is not None
        return Load(waiting, len(simulator.running), 1 - pool.available / pool.blocks)

    def run(self, arrivals):
        """Serve ``arrivals`` (``(arrival_s, Timed)`` in order); each instance's stats."""
        simulators, router, block = self.simulators, self.router, self.block_tokens
        for simulator in simulators:
            simulator.begin()
        output = self.engine.output_tokens
        for number, (when, timed) in enumerate(arrivals):
            if timed.output_tokens is not None or output is not None:
                self.engine.check_sequence(number + 1, timed.tokens, max(1, output or timed.output_tokens))
            for simulator in simulators:
                simulator.advance(when)
            self.now = when
            keys = timed.keys[: timed.tokens // block]
            index = router.choose(keys, timed.tokens, self)
            router.sent_to(index, keys, timed.tokens, number, self)
            simulators[index].deliver(when, timed)
            self.sent[index] += 1
            self.inflight[index] += 1
            self.numbers[index].append(number)
            self.chosen.append(index)
        for simulator in simulators:
            simulator.advance()
        return [simulator.end() for simulator in simulators]

    def merged(self, each):
        """The fleet's stats from each instance's ``each``: counts added, times and rows gathered (rows by the
        fleet's request numbers)."""
        merged = SimulatorStats(each[0].rows is not None)
        for stats in each:
            for name in ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms"):
                getattr(merged, name).extend(getattr(stats, name))
            for name in ("requests", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "output_tokens"):
                setattr(merged, name, getattr(merged, name) + getattr(stats, name))
            for name in ("preemptions", "steps", "refused", "mixed_steps"):
                setattr(merged, name, getattr(merged, name) + getattr(stats, name))
            for added in ("lookups", "busy", "copied"):
                totals = getattr(merged, added)
                for key, value in getattr(stats, added).items():
                    totals[key] = totals.get(key, 0) + value
        firsts = [stats.first for stats in each if stats.first is not None]
        lasts = [stats.last for stats in each if stats.last is not None]
        merged.first = min(firsts) if firsts else None
        merged.last = max(lasts) if lasts else None
        if merged.rows is not None:
            for index, stats in enumerate(each):
                numbers = self.numbers[index]
                merged.rows.extend((numbers[row[0]], *row[1:]) for row in stats.rows)
        return merged


class _Watch:
    """What instance ``index`` tells the fleet of its requests, which the router learns as the responses stream back."""

    def __init__(self, fleet, index):
        self.fleet, self.index = fleet, index

    def first_token(self, request):
        self.fleet.router.first_token(self.index, self.fleet.numbers[self.index][request.number])

    def finished(self, request):
        fleet = self.fleet
        fleet.inflight[self.index] -= 1
        fleet.router.finished(self.index, fleet.numbers[self.index][request.number])


class SharedHosts:
    """A CPU tier all instances share, spread over their hosts as Mooncake Store pools each node's memory (and
    LMCache's peer-to-peer backend reads another instance's): a block lives on the host of the instance that stored
    it last, and another instance's load of it crosses the network (:data:`NETWORK`) before its host-to-GPU copy."""

    def __init__(self, bytes_per_block):
        self.bytes_per_block = bytes_per_block
        self.owner = {}

    def stored(self, simulator, keys):
        for key in keys:
            self.owner[key] = simulator.host

    def remote(self, simulator, keys):
        """How many of ``keys`` are on another instance's host."""
        owner, host = self.owner, simulator.host
        return sum(1 for key in keys if owner.get(key, host) != host)

    def network_ms(self, blocks):
        return NETWORK.ms(blocks * self.bytes_per_block, self.bytes_per_block)

    @staticmethod
    def describe():
        return {
            **NETWORK.describe(),
            "from": "kvlab/latency/transfer.py DISK_MEDIA rdma: one 200 Gb/s NIC (Mooncake's README: 87 GB/s on"
            " 4 x 200 Gbps)",
            "composition": "another instance's block crosses the network, then the host-to-GPU link",
        }
