"""``kvlab simulate --instances``'s fast engine: a fleet of the compiled loop (``kernel.py``), one set of its arrays per
instance, driven on one clock as :class:`kvlab.simulator.fleet.TimedFleet` drives the Python engine. Every instance
runs to each arrival (``F[UNTIL]``, as ``Simulator.advance(until)``), the router sees what they hold and their load,
and the request goes to the one it picks (``Simulator.deliver``). It serves what the compiled loop serves
(:func:`kvlab.simulator.compiled.compiles`) with each instance's CPU tier its own and open arrivals; the Python engine
serves a shared tier, prefill apart from decode and a closed loop. Both give the same outputs request by request
(tests/test_fleet_compiled.py). Each instance numbers the blocks it is sent on its own (``kernel.localized``), so that
its arrays grow with what it saw, not with the whole run, and has its own arena of its requests' ids, pool, CPU tier,
queues, events and prices.
"""

import math
from collections import deque

from kvlab.fleet.routers.base import Load, Router
from kvlab.simulator.compiled import (
    FOOTPRINT,
    NUMBERING_BYTES_PER_KEY,
    ROW_BYTES,
    STATE_BYTES_PER_KEY,
    Arrays,
    Blocks,
    arrivals_of,
    settings_of,
    stats_of,
)
from kvlab.simulator.fleet import FLEET_REQUEST_BYTES, fleet_stats
from kvlab.util.memory import Footprint

__all__ = ["FIRST_ROOM", "CompiledFleet"]

FIRST_ROOM = 64  # an instance's first room for requests sent and not yet arrived, and for its arena's keys / 16


class CompiledFleet:
    """``size`` instances of the compiled loop behind ``router``, each with ``gpu_blocks`` and ``cpu_blocks`` of its
    own; what a router sees of a fleet (kvlab/fleet/routers/base.py), as :class:`TimedFleet` shows it."""

    decode = None  # prefill is not apart from decode here

    def __init__(self, settings, rules, gpu_blocks, cpu_blocks, block, tail_first, router, size):
        import numpy as np

        from kvlab.simulator import kernel as K

        self.np, self.K = np, K
        self.settings, self.router, self.size = settings, router, size
        self.given = settings_of(settings, rules, gpu_blocks, cpu_blocks, block, tail_first)
        self.block_tokens, self.gpu_blocks = block, gpu_blocks
        self.sent = [0] * size
        self.inflight = [0] * size
        self.numbers = [[] for _ in range(size)]  # per instance, the fleet's number of each request it was sent
        self.chosen = []  # each request's instance, in the order sent
        self.now = 0.0
        self.states = []
        for _ in range(size):
            state = Arrays(K, np, self.given)
            state.S[K.FLEET] = state.S[K.EXHAUSTED] = 1  # its requests are sent to it, none read
            state.fed_arrival = np.zeros(FIRST_ROOM)
            state.fed_ints = np.zeros((FIRST_ROOM, 5), dtype=np.int64)
            self.states.append(state)
        self.finished = [0] * size  # per instance, its finished requests the router has heard of
        self.refused = [deque() for _ in range(size)]  # per instance, the numbers of those it will refuse
        self.refused_heard = [0] * size
        self.hears_first = type(router).first_token is not Router.first_token
        self.request = (0, 0)  # the request being routed: where its prompt's ids start in the batch's, their count
        self.prompt = np.zeros(0, dtype=np.int64)  # the batch's prompts' ids, the run's
        self.local = np.zeros((0, size), dtype=np.int32)  # per run's id, each instance's own id of it + 1 (0: none)
        self.arena_end = [0] * size  # per instance, where its arena's next key goes (counted from the run's start)
        self.prices = None  # the prices' table the instances share (:meth:`_prices_of`)

    # --- what a router sees ----------------------------------------------------------------------------------------

    def held(self, index, keys):
        """``(blocks, GPU blocks)`` on ``index`` of the request being routed (``keys``, the trace's, read through its
        ids: :attr:`request`)."""
        state = self.states[index]
        start, count = self.request
        return self.K.held(state.S, state.P, state.C, self.local, index, self.prompt, start, count)

    def load(self, index):
        K, S = self.K, self.states[index].S
        waiting = int(S[K.W_N] + S[K.FED] - S[K.CURSOR])
        blocks = self.gpu_blocks
        return Load(waiting, int(S[K.RUN_N]), 1 - int(blocks - S[K.N_HELD] - S[K.ANON]) / blocks)

    # --- the run ---------------------------------------------------------------------------------------------------

    def run(self, workload, arrivals, cost, meter, per_request):
        """Serve the workload's requests at ``arrivals``; each instance's stats."""
        np, states, size = self.np, self.states, self.size
        states[0].price_known(cost)
        self._prices_of(states[0])
        blocks = Blocks(workload, self.given, np)
        block, router = self.block_tokens, self.router
        number = accesses = 0
        for times, tokens, outputs, counts, keys in arrivals_of(workload, self.settings, arrivals, np):
            listed = keys.tolist()  # the router's keys: the trace's, as the Python engine's requests carry them
            self.prompt, nkeys, fits, generated = blocks.number(tokens, outputs, counts, keys)
            if blocks.ids > len(self.local):
                grown = np.zeros((max(blocks.ids, 2 * len(self.local)), size), dtype=np.int32)
                grown[: len(self.local)] = self.local
                self.local = grown
            accesses += int(counts.sum())
            # per run's id: its numbering, each instance's id of it (by doubling: 3 x 4 bytes), and the instances'
            # states of their own ids (as many as they numbered so far per run's id)
            own = sum(state.ids for state in states) / max(1, blocks.ids)
            footprint = Footprint(
                key=NUMBERING_BYTES_PER_KEY + 3 * 4 * size + math.ceil(STATE_BYTES_PER_KEY * own),
                request=FOOTPRINT.request + FLEET_REQUEST_BYTES + (ROW_BYTES if per_request else 0),
                fixed=meter.footprint.fixed
                + 40 * len(listed)  # the router's keys, as Python numbers
                + sum(8 * (len(state.arena) + len(state.KB)) for state in states),
            )
            meter.check(accesses, number + len(tokens), blocks.ids, workload.read_fraction, footprint)
            lookups = int(((tokens + outputs) // block)[fits].max(initial=0)) + 2
            for state in states:
                state.room_for_lookups(lookups, cost)
            starts = np.cumsum(nkeys) - nkeys
            start = 0
            columns = (times, counts, nkeys, starts, fits, tokens, outputs, generated)
            for when, count, nkey, first, fit, prompt_tokens, output, more in zip(
                *(column.tolist() for column in columns), strict=True
            ):
                for index in range(size):
                    self._advance(index, when, cost)
                self.now = when
                request_keys = listed[start : start + nkey]
                start += count
                self.request = (first, nkey)
                index = router.choose(request_keys, prompt_tokens, self)
                router.sent_to(index, request_keys, prompt_tokens, number, self)
                self._deliver(index, when, (prompt_tokens, output, nkey, first, more))
                if not fit:
                    self.refused[index].append(number)
                self.sent[index] += 1
                self.inflight[index] += 1
                self.numbers[index].append(number)
                self.chosen.append(index)
                number += 1
        for index in range(size):
            self._advance(index, math.inf, cost)
        return [stats_of(state, per_request) for state in states]

    def merged(self, each):
        return fleet_stats(each, self.numbers)

    def _deliver(self, index, when, request):
        """``Simulator.deliver``: the request (tokens, output, its prompt's ids and where they start in the batch's,
        its generated blocks) arrives at ``index`` at ``when``; its prompt's ids, the instance's own, at the end of
        its arena."""
        K, np, state = self.K, self.np, self.states[index]
        S = state.S
        tokens, output, count, first, generated = request
        end, base = self.arena_end[index], int(S[K.ARENA_BASE])
        if end - base + count > len(state.arena):  # the keys no request needs dropped, room doubled
            live = min(state.live_offset(), end)
            kept = state.arena[live - base : end - base]
            state.arena = np.zeros(max(16 * FIRST_ROOM, 2 * (len(kept) + count)), dtype=np.int64)
            state.arena[: len(kept)] = kept
            S[K.ARENA_BASE] = base = live
        state.ids = K.localized(self.local, index, self.prompt, first, count, state.arena, end - base, state.ids)
        self.arena_end[index] = end + count
        genbase = state.ids
        state.ids += generated
        state.room_for_ids(state.ids)
        fed, cursor = int(S[K.FED]), int(S[K.CURSOR])
        if fed == len(state.fed_arrival):  # the arrived ones dropped, room doubled
            pending = fed - cursor
            room = max(FIRST_ROOM, 2 * pending)
            arrival, ints = np.zeros(room), np.zeros((room, 5), dtype=np.int64)
            arrival[:pending], ints[:pending] = state.fed_arrival[cursor:fed], state.fed_ints[cursor:fed]
            state.fed_arrival, state.fed_ints = arrival, ints
            S[K.CURSOR], fed, cursor = 0, pending, 0
        state.fed_arrival[fed] = when
        state.fed_ints[fed] = (tokens, output, count, end, genbase)
        S[K.FED] = fed + 1
        state.room_for_slots(state.slots - int(S[K.FREE_N]) + fed + 1 - cursor)
        state.room_for_rows(len(self.numbers[index]) + 1)

    def _advance(self, index, until, cost):
        """``Simulator.advance(until)`` of instance ``index`` (no call where nothing happens by then), and what its
        router hears of it."""
        K, state = self.K, self.states[index]
        S, F = state.S, state.F
        now = F[K.NOW]
        if not (now < until and (S[K.RUN_N] or S[K.W_N] > S[K.LOADS])):
            upcoming = state.EVF[state.H[0]] if S[K.EV_N] else math.inf
            if S[K.CURSOR] < S[K.FED]:
                upcoming = min(upcoming, state.fed_arrival[S[K.CURSOR]])
            if upcoming > now and upcoming >= until and until < math.inf:
                return
        F[K.UNTIL] = until
        state.PK, state.PV, S[K.PRICES], S[K.PRICE_SHIFT], S[K.PRICE_MULTIPLIER] = self.prices
        while True:
            state.room_for_prices(state.slots + 2)  # a step's answers
            if not state.answered(state.call(), cost):
                break
        self._prices_of(state)
        self._hear(index)

    def _prices_of(self, state):
        """The prices' table every instance reads next: ``state``'s, as its last call left it (one cost prices them
        all)."""
        K, S = self.K, state.S
        self.prices = state.PK, state.PV, S[K.PRICES], S[K.PRICE_SHIFT], S[K.PRICE_MULTIPLIER]

    def _hear(self, index):
        """The first tokens, finished requests and refusals of instance ``index`` since last heard, to its router."""
        K, state, router = self.K, self.states[index], self.router
        S, numbers = state.S, self.numbers[index]
        if S[K.FT_N]:
            if self.hears_first:
                for own in state.FT[: S[K.FT_N]].tolist():
                    router.first_token(index, numbers[own])
            S[K.FT_N] = 0
        done = int(S[K.FINISHED])
        if done > self.finished[index]:
            for own in state.OUTI[self.finished[index] : done, 0].tolist():
                self.inflight[index] -= 1
                router.finished(index, numbers[own])
            self.finished[index] = done
        refused = int(S[K.REFUSED])
        while self.refused_heard[index] < refused:
            self.refused_heard[index] += 1
            self.inflight[index] -= 1
            router.finished(index, self.refused[index].popleft())
