"""Many engine instances on one clock (issue 39, part 2): N copies of the one engine model (``events.py``), each
driven to every arrival in turn (:meth:`kvlab.simulator.events.Simulator.advance`), and a router
(``kvlab/fleet/routers/``) that picks the instance of each request from what it sees of them at its arrival: their
caches, and their load as their engines report it. An instance's step that started before an arrival has ended when
the router looks (its effects are seen a step early: a real router reads metrics its engines publish after each
step)."""

import heapq
import math
from dataclasses import dataclass, fields

from kvlab.fleet import MAX_INSTANCES, cpu_scope_setting, instances_setting, router_setting
from kvlab.fleet.routers import ROUTERS
from kvlab.fleet.routers.base import Load
from kvlab.latency.transfer import DISK_MEDIA, Link
from kvlab.simulator.events import SimulatorStats
from kvlab.util.errors import SettingError
from kvlab.util.settings import Declared, checked, setting
from kvlab.workloads import whole_number

__all__ = [
    "FLEET_REQUEST_BYTES",
    "NETWORK",
    "ROUTER_SETTING_NAMES",
    "ROUTER_SETTINGS",
    "FleetSettings",
    "RemoteKV",
    "SharedHosts",
    "TimedFleet",
    "fleet_stats",
    "router_of",
]

FLEET_REQUEST_BYTES = 48  # per request, a fleet's record of it: its instance and its number there (two list entries)
NETWORK = Link(*DISK_MEDIA["rdma"])  # one 200 Gb/s NIC, as a Mooncake Store is read (kvlab/latency/transfer.py)
GROUP = "a fleet: instances behind a router, on one clock (kvlab/simulator/fleet.py)"
ROUTER_SETTINGS = {name: router.Settings for name, router in ROUTERS.items() if router.Settings is not None}
ROUTER_SETTING_NAMES = {found.name: name for name, kind in ROUTER_SETTINGS.items() for found in fields(kind)}


@dataclass(frozen=True, kw_only=True)
class FleetSettings(Declared):
    """``kvlab simulate``'s fleet: ``--instances`` copies of the engine behind ``--router`` (any router, those that
    read the load too), their CPU tiers each one's or one for all (``--cpu-scope``)."""

    instances: int = instances_setting(GROUP)
    router: str = router_setting(GROUP, clock=True)
    cpu_scope: str = cpu_scope_setting(GROUP)
    prefill_instances: int | None = setting(
        None,
        convert=whole_number(1, MAX_INSTANCES),
        group=GROUP,
        help="prefill apart from decode: this many prefill instances, behind --router (with --decode-instances)",
    )
    decode_instances: int | None = setting(
        None,
        convert=whole_number(1, MAX_INSTANCES),
        group=GROUP,
        help="and this many decode instances, each request's to the one with the fewest in flight; its prompt's KV"
        " moved over the network",
    )

    def check(self):
        given = [name for name in ("prefill_instances", "decode_instances") if getattr(self, name) is not None]
        if len(given) == 1:
            other = "--decode-instances" if given[0] == "prefill_instances" else "--prefill-instances"
            raise SettingError(f"argument --{given[0].replace('_', '-')}: needs {other} too")
        if given and self.instances != 1:
            raise SettingError("argument --instances: not with --prefill-instances and --decode-instances")

    @property
    def disaggregated(self):
        return self.prefill_instances is not None

    @property
    def size(self):
        """The instances a request may go to first: the prefill pool's where prefill is apart."""
        return self.prefill_instances if self.disaggregated else self.instances


def router_of(name, given):
    """The router ``name`` with its settings from ``given`` (every router's settings by name, None where not
    given); SettingError where a setting of another router is given."""
    for found, owner in ROUTER_SETTING_NAMES.items():
        if owner != name and given.get(found) is not None:
            raise SettingError(f"argument --{found.replace('_', '-')}: applies to --router {owner} only")
    own = ROUTER_SETTINGS.get(name)
    return ROUTERS[name](own(**checked(own, given)) if own else None)


class TimedFleet:
    """``simulators`` (one :class:`kvlab.simulator.events.Simulator` per instance) behind ``router``; what a router
    sees of a fleet (kvlab/fleet/routers/base.py). With ``decode`` (a fleet of decode instances), these are prefill
    instances: each request computes its prompt and first token here (``engine``'s output is the first token), then
    goes to a decode instance, its prompt's KV moved to it (:class:`RemoteKV`), for the rest of its output."""

    def __init__(self, simulators, router, engine, decode=None):
        self.simulators = simulators
        self.router = router
        self.engine = engine  # kvlab.simulator.settings.EngineSettings: each request's length checked in its number
        self.decode = decode
        self.size = len(simulators)
        self.block_tokens = simulators[0].block
        self.gpu_blocks = simulators[0].pool.blocks  # each instance's pool
        self.sent = [0] * self.size
        self.inflight = [0] * self.size  # sent and not finished
        self.numbers = [[] for _ in simulators]  # per instance, the fleet's number of each request it was sent
        self.chosen = []  # each request's instance, in the order sent
        self.outputs = {}  # with ``decode``: each request in prefill, its whole output and its Timed
        self.handoffs = []  # with ``decode``: (first token's time, number, the rest of it) for a decode instance
        self.refused_numbers = set()  # requests an instance refused
        self.clients = {}  # a closed loop's requests in flight: each one's client
        self.ready = []  # a closed loop's clients, each with when it sends its next
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

    def run(self, arrivals, clients=None):
        """Serve ``arrivals`` (``(arrival_s, Timed)`` in order) or, with ``clients`` (a number of them), the requests
        of the iterator ``arrivals`` (``Timed``), each client sending its next as its last finishes; each instance's
        stats (with ``decode``, the prefill instances' and then the decode instances')."""
        self.start()
        if clients:
            self._closed_loop(iter(arrivals), clients)
        else:
            for number, (when, timed) in enumerate(arrivals):
                self._check(number, timed)
                self.send(number, when, timed)
        return self.finish()

    def _check(self, number, timed):
        whole = self.engine.output_tokens or timed.output_tokens
        if whole is not None:
            self.engine.check_sequence(number + 1, timed.tokens, max(1, whole))
        if self.decode is not None:
            self.outputs[number] = max(1, whole or 1), timed

    def _closed_loop(self, source, clients):
        """Each client's next request sent when its last finishes, the fleet always on its earliest event: an
        instance runs until the next request is due, or stops where a client's request finished (its next may be
        due before anything else), so the router sees every instance at each request's arrival."""
        self.ready = [(0.0, client) for client in range(clients)]  # (when a client sends its next, the client)
        self.clients = {}  # a request in flight: its client
        simulators, number = self.simulators, 0
        while True:
            due = self.ready[0][0] if self.ready else math.inf
            nearest = min(simulators, key=lambda simulator: simulator.next_activity())
            if due == math.inf and nearest.next_activity() == math.inf:
                return
            if due <= nearest.next_activity():
                when, client = heapq.heappop(self.ready)
                timed = next(source, None)
                if timed is None:
                    continue
                self._check(number, timed)
                self.clients[number] = client
                self.send(number, when, timed)
                number += 1
            else:
                nearest.advance(due)

    def start(self):
        for simulator in self.simulators:
            simulator.begin()
        if self.decode is not None:
            self.decode.start()

    def send(self, number, when, timed):
        """Every instance run to ``when``; the request the router picks an instance for sent there."""
        simulators = self.simulators
        for simulator in simulators:
            simulator.advance(when)
        if self.decode is not None:
            self._hand_off(when)
        self.now = when
        keys = timed.keys[: timed.tokens // self.block_tokens]
        index = self.router.choose(keys, timed.tokens, self)
        self.router.sent_to(index, keys, timed.tokens, number, self)
        simulator = simulators[index]
        if simulator.remote is not None:
            simulator.remote.add(keys)
        simulator.deliver(when, timed)
        self.sent[index] += 1
        self.inflight[index] += 1
        self.numbers[index].append(number)
        self.chosen.append(index)

    def finish(self):
        for simulator in self.simulators:
            simulator.advance()
        each = [simulator.end() for simulator in self.simulators]
        if self.decode is None:
            return each
        self._hand_off(math.inf)
        return each + self.decode.finish()

    def _hand_off(self, until):
        """Each request whose first token came by ``until``, to the decode instance with the fewest in flight."""
        handoffs = self.handoffs
        while handoffs and handoffs[0][0] <= until:
            when, number, timed = heapq.heappop(handoffs)
            self.decode.send(number, when, timed)

    def first_token(self, request, number):
        """With ``decode``: request ``number`` computed its prompt and first token here; the rest of its output is
        a decode instance's, from its first token's time (the KV's move is the decode instance's load)."""
        whole, timed = self.outputs.pop(number)
        if whole > 1:
            rest = type(timed)(timed.keys, timed.tokens, None, whole - 1)
            heapq.heappush(self.handoffs, (request.first_token, number, rest))

    def merged(self, each):
        """The fleet's stats from each instance's ``each``: counts added, times and rows gathered (rows by the
        fleet's request numbers)."""
        if self.decode is not None:
            return self._disaggregated(each[: self.size], each[self.size :])
        return fleet_stats(each, self.numbers)

    @staticmethod
    def rows_of(each, numbers):
        """By the fleet's number, each request's row in ``each`` (its instances' stats; ``numbers`` theirs)."""
        return {numbers[index][row[0]]: row for index, stats in enumerate(each) for row in stats.rows}

    def _disaggregated(self, prefill, decode):
        """Each request's figures from its prefill (its queue, its first token, its prompt's tokens per tier) and
        its decode (the rest of its output, from its first token): its end-to-end is the first token's time and the
        decode's, its TPOT the decode's over the rest of its output."""
        merged = SimulatorStats(True)
        _add_counts(merged, prefill + decode)
        _add_lookups(merged, prefill)  # the prompts' (a decode instance's lookup finds what was sent to it)
        first = self.rows_of(prefill, self.numbers)
        rest = self.rows_of(decode, self.decode.numbers)
        for number in sorted(first):
            _, arrival, queue, ttft, _, e2e, tokens, _, gpu, cpu, preemptions = first[number]
            whole, tpot = 1, math.nan
            if number in rest:  # (a request of one output token, or one the decode instance refused, has none)
                _, _, _, _, _, decoded, _, output, _, _, more = rest[number]
                whole, tpot, e2e, preemptions = output + 1, decoded / output, ttft + decoded, preemptions + more
            elif number in self.decode.refused_numbers:  # its whole sequence longer than a decode instance's pool
                continue
            merged.rows.append((number, arrival, queue, ttft, tpot, e2e, tokens, whole, gpu, cpu, preemptions))
            for name, value in (("ttft_ms", ttft), ("tpot_ms", tpot), ("e2e_ms", e2e), ("queue_ms", queue)):
                getattr(merged, name).append(value)
            merged.requests += 1
            merged.input_tokens += tokens
            merged.gpu_hit_tokens += gpu
            merged.cpu_hit_tokens += cpu
            merged.output_tokens += whole
        merged.refused = sum(stats.refused for stats in prefill + decode)
        return merged


def fleet_stats(each, numbers):
    """A fleet's stats from each instance's ``each``: counts added, times and rows gathered (rows by the fleet's
    request numbers: ``numbers[i]``, instance ``i``'s)."""
    fleet = SimulatorStats(each[0].rows is not None)
    _add_counts(fleet, each)
    _add_lookups(fleet, each)
    for stats in each:
        for name in ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms"):
            getattr(fleet, name).extend(getattr(stats, name))
        for name in ("requests", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "output_tokens"):
            setattr(fleet, name, getattr(fleet, name) + getattr(stats, name))
    if fleet.rows is not None:
        for index, stats in enumerate(each):
            own = numbers[index]
            fleet.rows.extend((own[row[0]], *row[1:]) for row in stats.rows)
    return fleet


def _add_lookups(merged, each):
    """vLLM's lookup counters of ``each`` added to ``merged``'s."""
    for stats in each:
        for name, value in stats.lookups.items():
            merged.lookups[name] += value


def _add_counts(merged, each):
    """The counts every instance adds to a fleet's: steps, preemptions, refusals, links; the first and last times."""
    for stats in each:
        for name in ("preemptions", "steps", "refused", "mixed_steps"):
            setattr(merged, name, getattr(merged, name) + getattr(stats, name))
        for added in ("busy", "copied"):
            totals = getattr(merged, added)
            for key, value in getattr(stats, added).items():
                totals[key] = totals.get(key, 0) + value
    firsts = [stats.first for stats in each if stats.first is not None]
    lasts = [stats.last for stats in each if stats.last is not None]
    merged.first = min(firsts) if firsts else None
    merged.last = max(lasts) if lasts else None


class _Watch:
    """What instance ``index`` tells the fleet of its requests, which the router learns as the responses stream back."""

    def __init__(self, fleet, index):
        self.fleet, self.index = fleet, index

    def first_token(self, request):
        fleet = self.fleet
        number = fleet.numbers[self.index][request.number]
        fleet.router.first_token(self.index, number)
        if fleet.decode is not None:
            fleet.first_token(request, number)

    def finished(self, request):
        fleet = self.fleet
        number = fleet.numbers[self.index][request.number]
        fleet.inflight[self.index] -= 1
        client = fleet.clients.pop(number, None)
        if client is not None:  # its client sends its next now
            simulator = fleet.simulators[self.index]
            heapq.heappush(fleet.ready, (simulator.now, client))
            simulator.halt = True
        fleet.router.finished(self.index, number)
        if request.first_token is None:  # refused: longer than the pool
            fleet.refused_numbers.add(number)
            fleet.outputs.pop(number, None)


def network(composition):
    """The network's figures for a run's JSON, and how a copy over it is composed."""
    source = "kvlab/latency/transfer.py DISK_MEDIA rdma: one 200 Gb/s NIC (Mooncake's README: 87 GB/s on 4 x 200 Gbps)"
    return {**NETWORK.describe(), "from": source, "composition": composition}


class OverNetwork:
    """What reads blocks of ``bytes_per_block`` over an instance's NIC (:data:`NETWORK`, its copies queued as a
    link's)."""

    def __init__(self, bytes_per_block):
        self.bytes_per_block = bytes_per_block

    def network_ms(self, blocks):
        return NETWORK.ms(blocks * self.bytes_per_block, self.bytes_per_block)


class SharedHosts(OverNetwork):
    """A CPU tier all instances share, spread over their hosts as Mooncake Store pools each node's memory (and
    LMCache's peer-to-peer backend reads another instance's): a block lives on the host of the instance that stored
    it last, and another instance's load of it crosses the network (:data:`NETWORK`) before its host-to-GPU copy."""

    def __init__(self, bytes_per_block):
        super().__init__(bytes_per_block)
        self.owner = {}

    def stored(self, simulator, keys):
        for key in keys:
            self.owner[key] = simulator.host

    def remote(self, simulator, keys):
        """How many of ``keys`` are on another instance's host."""
        owner, host = self.owner, simulator.host
        return sum(1 for key in keys if owner.get(key, host) != host)

    @staticmethod
    def describe():
        return network("another instance's block crosses the network, then the host-to-GPU link")


class RemoteKV(OverNetwork):
    """A decode instance's view of the KV its prefill instances computed for the requests sent to it: each prompt's
    full blocks found, until they are loaded, as vLLM's NixlConnector finds them (``get_num_new_matched_tokens``: the
    request waits in ``WAITING_FOR_REMOTE_KVS`` while the blocks its own prefix cache lacks are read). The read is
    GPU to GPU over the network (:data:`NETWORK`, NIXL's RDMA), on the decode instance's NIC."""

    def __init__(self, bytes_per_block):
        super().__init__(bytes_per_block)
        self.waiting = {}  # key -> requests sent here whose KV holds it and that have not found it yet
        self.released = set()  # the numbers (the instance's) of the requests that found theirs

    def add(self, keys):
        for key in keys:
            self.waiting[key] = self.waiting.get(key, 0) + 1

    def prefix_end(self, keys, start):
        waiting = self.waiting
        for index in range(start, len(keys)):
            if keys[index] not in waiting:
                return index
        return len(keys)

    def release(self, request):
        """``request`` found its KV (its load started, or its GPU held it): its blocks are not offered again (a
        preempted request computes its prompt again: its prefill instance's KV is gone)."""
        if request.number in self.released:
            return
        self.released.add(request.number)
        waiting = self.waiting
        for key in request.keys:
            count = waiting.get(key, 0) - 1
            if count > 0:
                waiting[key] = count
            else:
                waiting.pop(key, None)

    @staticmethod
    def describe():
        return network("the prompt's blocks the decode instance lacks, GPU to GPU (NIXL's RDMA), before its decode")
