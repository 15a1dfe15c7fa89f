"""``kvlab simulate``'s fast engine: the driver of the compiled event loop (``kvlab/simulator/kernel.py``).

It serves what the loop models (a trace, vLLM v1's scheduler, open-loop arrivals, no CPU tier or one written
through with LMCache's switches off) and the Python engine (``kvlab/simulator/events.py``) everything else; both
give the same outputs byte for byte (tests/test_simulate_compiled.py). The driver reads the trace a batch at a
time, numbers its blocks densely (``kvlab/workloads/dense.py``) and each request's generated blocks after them,
grows the loop's arrays before each batch, and answers the loop's questions: the next batch, a step's prices (the
hardware model's, :class:`kvlab.simulator.cost.StepCost`, each asked once), more room. What the run holds: its arrays
per distinct block and per request (:data:`FOOTPRINT`), the trace's batch, and the requests in flight; where that
would pass ``--max-memory``, ``kvlab.simulate`` gives the run to the Python engine, which holds only what is in flight
and in the tiers.
"""

import os
import random
from array import array

from kvlab.cache.compiled import TABLE_BYTES_PER_KEY
from kvlab.simulator.arrivals import going_back
from kvlab.simulator.events import MAX_PREEMPTIONS, NO_OUTPUTS, STUCK, SimulatorStats, thrashing, unserved
from kvlab.util.errors import KvlabError
from kvlab.util.memory import Footprint

__all__ = [
    "FOOTPRINT",
    "NUMBERING_BYTES_PER_KEY",
    "STATE_BYTES_PER_KEY",
    "Arrays",
    "Blocks",
    "arrivals_of",
    "compiles",
    "run",
    "settings_of",
    "stats_of",
]

# Per distinct block: the interner's table (as the compiled replay's, kvlab/cache/compiled.py: 72 + 48 bytes at its
# worst), its place among the run's ids (8 bytes), and the pool's and the CPU tier's state (28 bytes, grown by
# doubling: up to 3 x 28 while it grows). Per request: its times and counts (88 bytes, by doubling: 3 x 88). Per block
# access: its key in the batch's ids (kvlab's readers count those in READING_BYTES) and, while the request is in
# flight, in the loop's arena.
NUMBERING_BYTES_PER_KEY = TABLE_BYTES_PER_KEY + 2 * TABLE_BYTES_PER_KEY // 3 + 8  # the interner, the ids' places
STATE_BYTES_PER_KEY = 3 * 28  # an instance's pool and CPU tier per id
FOOTPRINT = Footprint(key=NUMBERING_BYTES_PER_KEY + STATE_BYTES_PER_KEY, request=3 * 88)
ROW_BYTES = 480  # a --per-request row as a tuple of Python numbers, and its CSV text (Instance.footprint)
FIRST_SLOTS = 1024  # requests in flight the arrays hold at first (grown by doubling)


def compiles(workload, engine, rules, chosen, arrivals):
    """Whether the compiled loop serves this run: a trace read as columns, vLLM's scheduler, arrivals from the trace's
    clock or a Poisson rate, and the CPU tier (if any) kvlab's write-through (vLLM's before 0.33: ``rules``) with LRU,
    LMCache's switches off."""
    return (
        hasattr(workload, "timed_columns")
        and engine.scheduler == "vllm"
        and arrivals.kind != "clients"
        and (chosen.cpu_tokens == 0 or (chosen.write_policy == "write-through" and not rules.offloading_connector))
        and not chosen.touch_cpu_on_gpu_hit
        and not chosen.re_store_on_gpu_hit
        and chosen.gpu_eviction == chosen.cpu_eviction == "lru"
        and chosen.partial_blocks == "drop"
        and chosen.gpu_tokens < 2**30  # the prices' keys: a served chunk's tokens, a batch, below 2**30
        and engine.max_num_seqs < 2**30
    )


class Arrays:
    """The loop's arrays (kvlab/simulator/kernel.py names them), grown by doubling."""

    def __init__(self, kernel, np, settings):
        K = self.K = kernel
        self.np = np
        self.S = np.zeros(K.S_SIZE, dtype=np.int64)
        self.F = np.zeros(K.F_SIZE, dtype=np.float64)
        self.F[K.FIRST] = self.F[K.LAST] = np.nan
        self.F[K.UNTIL] = np.inf
        for index, value in settings.items():
            self.S[index] = value
        # max_num_seqs as the loop sees it: at most the slots (requests in flight), which bounds the requests running
        # just as well (a waiting request takes a slot too) and the events the loop keeps room for (room_for_events),
        # so that --max-num-seqs 10**8 sizes nothing by 10**8
        self.max_seqs = settings[K.MAX_SEQS]
        self.S[K.MAX_SEQS] = 0
        for name in ("C_HEAD", "C_TAIL", "CPU_HEAD", "CPU_TAIL"):
            self.S[getattr(K, name)] = K.NONE
        self.ids = 0
        self.P = np.zeros((0, 4), dtype=np.int32)  # per id: holders, flags, the free queue's previous and next
        self.C = np.zeros((0, 3), dtype=np.int32)  # per id: held by the CPU, the LRU list's previous and next
        self.slots = 0
        self.R = np.zeros((0, K.R_SIZE), dtype=np.int64)
        self.RF = np.zeros((0, K.RF_SIZE), dtype=np.float64)
        self.W = np.zeros(1, dtype=np.int64)
        self.RUN = self.FREE = self.SKIP = self.FT = np.zeros(0, dtype=np.int64)
        self.SCH = np.zeros((0, 3), dtype=np.int64)
        self.Q = np.zeros((0, 2), dtype=np.int64)
        self.QA = np.zeros(0, dtype=np.float64)
        self.EVF = np.zeros(0, dtype=np.float64)
        self.EVI = np.zeros((0, K.E_SIZE), dtype=np.int64)
        self.H = self.EVFREE = np.zeros(0, dtype=np.int64)
        self.KB = np.zeros(1 << 12, dtype=np.int64)
        self.OUTF = np.zeros((0, K.OUTF_SIZE), dtype=np.float64)
        self.OUTI = np.zeros((0, K.OUTI_SIZE), dtype=np.int64)
        self.SCR = np.zeros(0, dtype=np.int64)
        self.copy_ms = np.zeros(0, dtype=np.float64)
        self.arena = np.zeros(0, dtype=np.int64)
        self.fed_arrival = np.zeros(0, dtype=np.float64)
        self.fed_ints = np.zeros((0, 5), dtype=np.int64)
        self.PK = np.full(1 << 10, K.NONE, dtype=np.int64)  # the prices' table: keys (kernel.prefill_key, decode_key)
        self.PV = np.zeros(1 << 10, dtype=np.float64)  # and ms
        self.S[K.PRICE_SHIFT] = 64 - 10
        self.S[K.PRICE_MULTIPLIER] = int.from_bytes(os.urandom(8), "little") >> 1 | 1

    def _grown(self, array, size, fill=0):
        np = self.np
        shape = (size, *array.shape[1:])
        grown = np.zeros(shape, dtype=array.dtype) if fill == 0 else np.full(shape, fill, dtype=array.dtype)
        grown[: len(array)] = array
        return grown

    def room_for_ids(self, count):
        if count <= len(self.P):
            return
        size = max(count, 2 * len(self.P), 1 << 12)
        self.P, self.C = self._grown(self.P, size), self._grown(self.C, size)

    def room_for_slots(self, count):
        """At least ``count`` request slots (and the queues, steps and events that many requests take)."""
        if count <= self.slots:
            return
        np, S, K = self.np, self.S, self.K
        old, size = self.slots, max(count, 2 * self.slots, FIRST_SLOTS)
        self.R, self.RF = self._grown(self.R, size), self._grown(self.RF, size)
        waiting = [self.W[(S[K.W_HEAD] + i) % len(self.W)] for i in range(S[K.W_N])]
        self.W = np.zeros(size, dtype=np.int64)
        self.W[: len(waiting)] = waiting
        S[K.W_HEAD] = 0
        self.RUN, self.SKIP, self.FT = (
            self._grown(self.RUN, size),
            self._grown(self.SKIP, size),
            self._grown(self.FT, size),
        )
        free = self.FREE[: S[K.FREE_N]]
        self.FREE = np.zeros(size, dtype=np.int64)
        fresh = np.arange(size - 1, old - 1, -1, dtype=np.int64)  # the lowest slot is taken first
        self.FREE[: len(fresh)] = fresh
        self.FREE[len(fresh) : len(fresh) + len(free)] = free
        S[K.FREE_N] = len(fresh) + len(free)
        self.SCH, self.Q, self.QA = self._grown(self.SCH, size), self._grown(self.Q, size), self._grown(self.QA, size)
        self.slots = size
        S[K.MAX_SEQS] = min(self.max_seqs, size)
        self.room_for_events(2 * size + S[K.MAX_SEQS] + 16)

    def room_for_events(self, count):
        if count <= len(self.H):
            return
        np, S, K = self.np, self.S, self.K
        old, size = len(self.H), max(count, 2 * len(self.H))
        self.EVF, self.EVI, self.H = self._grown(self.EVF, size), self._grown(self.EVI, size), self._grown(self.H, size)
        free = self.EVFREE[: S[K.EVFREE_N]]
        self.EVFREE = np.zeros(size, dtype=np.int64)
        fresh = np.arange(size - 1, old - 1, -1, dtype=np.int64)
        self.EVFREE[: len(fresh)] = fresh
        self.EVFREE[len(fresh) : len(fresh) + len(free)] = free
        S[K.EVFREE_N] = len(fresh) + len(free)

    def room(self):
        """NEED_ROOM: more events or stored keys (what the loop checked at its top)."""
        S, K = self.S, self.K
        self.room_for_events(S[K.EV_N] + S[K.W_N] + S[K.MAX_SEQS] + 2 + 1)
        if len(self.KB) - S[K.KB_END] < 2 * S[K.ALIVE_KEYS]:
            self.KB = self._grown(self.KB, max(2 * len(self.KB), 2 * (S[K.KB_END] + 2 * S[K.ALIVE_KEYS])))

    def room_for_lookups(self, blocks, cost):
        """Scratch for a request of ``blocks`` lookup keys, and the price of copying up to that many blocks."""
        if blocks < len(self.SCR):
            return
        size = max(blocks + 1, 2 * len(self.SCR))
        self.SCR = self._grown(self.SCR, size)
        start = len(self.copy_ms)
        self.copy_ms = self._grown(self.copy_ms, size)
        for count in range(start, size):
            self.copy_ms[count] = cost.copy_ms(count)

    def call(self):
        return self.K.run(
            self.S, self.F, self.R, self.RF, self.P, self.C, self.arena, self.fed_arrival, self.fed_ints, self.W,
            self.RUN, self.FREE, self.SKIP, self.EVF, self.EVI, self.H, self.EVFREE, self.KB, self.OUTF, self.OUTI,
            self.PK, self.PV, self.copy_ms, self.SCR, self.SCH, self.Q, self.QA, self.FT,
        )  # fmt: skip

    def room_for_prices(self, count):
        """The prices' table at most half full with ``count`` more."""
        S, K = self.S, self.K
        if 2 * (S[K.PRICES] + count) <= len(self.PK):
            return
        size = len(self.PK)
        while 2 * (S[K.PRICES] + count) > size:
            size *= 2
        keys, values = self.np.full(size, K.NONE, dtype=self.np.int64), self.np.zeros(size)
        S[K.PRICE_SHIFT] = 64 - (size.bit_length() - 1)
        K.moved_prices(S, self.PK, self.PV, keys, values)
        self.PK, self.PV = keys, values

    def live_offset(self):
        """The arena's first key a request in flight (or sent and not yet arrived) still needs (the end: none)."""
        np, S, K = self.np, self.S, self.K
        alive = np.ones(self.slots, dtype=bool)
        alive[self.FREE[: S[K.FREE_N]]] = False
        offsets = np.concatenate((self.R[alive, K.R_OFFSET], self.fed_ints[S[K.CURSOR] : S[K.FED], 3]))
        return int(offsets.min()) if len(offsets) else S[K.ARENA_BASE] + len(self.arena)

    def take_arena(self, live, prompt, nkeys):
        """The arena: the keys from ``live`` on, then a batch's ``prompt`` ids; each request's offset in it."""
        np, S, K = self.np, self.S, self.K
        base = S[K.ARENA_BASE]
        self.arena = np.concatenate((self.arena[live - base :], prompt))
        S[K.ARENA_BASE] = live
        end = live + len(self.arena) - len(prompt)
        return end + np.cumsum(nkeys) - nkeys

    def room_for_rows(self, requests):
        """A row per request that may finish."""
        if requests > len(self.OUTF):
            self.OUTF = self._grown(self.OUTF, max(requests, 2 * len(self.OUTF)))
            self.OUTI = self._grown(self.OUTI, len(self.OUTF))

    def price_known(self, cost):
        """The prices' table filled with what ``cost`` knows before the run."""
        K = self.K
        chunks, chunk_ms, steps, step_ms = cost.known()
        # within the table's keys (kernel.prefill_key, decode_key): 30 bits of tokens or of a batch, 32 of the rest
        fits = [
            (0 < rows[:, 0]) & (rows[:, 0] < 2**30) & (0 <= rows[:, 1]) & (rows[:, 1] < 2**32)
            for rows in (chunks, steps)
        ]
        self.room_for_prices(int(fits[0].sum() + fits[1].sum()))
        K.known_prices(self.S, self.PK, self.PV, chunks[fits[0]], chunk_ms[fits[0]], steps[fits[1]], step_ms[fits[1]])

    def answered(self, code, cost):
        """The loop's question ``code`` answered (prices, room): whether to call it again (not where it is done or
        paused); its errors raised in the Python engine's words."""
        K, S = self.K, self.S
        if code == K.NEED_PRICES:
            for j, (tokens, cached) in enumerate(self.Q[: S[K.N_QUERIES]].tolist()):
                self.QA[j] = cost.prefill_ms(tokens, cached)
            if S[K.DECODE_QUERY]:
                batch, mean = int(S[K.DECODE_BATCH]), int(S[K.DECODE_MEAN])
                self.F[K.DECODE_ANSWER] = cost.decode_ms(batch, mean * batch)
            return True
        if code == K.NEED_ROOM:
            self.room()
            return True
        if code in (K.DONE, K.PAUSED):
            return False
        if code == K.STUCK:
            raise KvlabError(STUCK)
        if code == K.THRASH:
            raise thrashing(S[K.ERROR_NUMBER], S[K.ERROR_COUNT])
        raise unserved(S[K.W_N])  # UNSERVED


def run(workload, settings, rules, gpu_blocks, cpu_blocks, block, cost, arrivals, per_request, tail_first, meter):
    """``workload`` through the compiled loop; a :class:`kvlab.simulator.events.SimulatorStats` as the Python engine's
    ``Simulator.run`` gives."""
    import numpy as np

    from kvlab.simulator import kernel as K

    given = settings_of(settings, rules, gpu_blocks, cpu_blocks, block, tail_first)
    state = Arrays(K, np, given)
    state.price_known(cost)
    S = state.S
    batches = arrivals_of(workload, settings, arrivals, np)
    blocks = Blocks(workload, given, np)
    requests = accesses = 0
    while True:
        state.room_for_prices(state.slots + 2)  # a step's answers
        code = state.call()
        if code == K.NEED_REQUESTS:
            batch = next(batches, None)
            if batch is None:
                S[K.EXHAUSTED] = 1
                continue
            arrival, tokens, outputs, counts, keys = batch
            prompt, nkeys, fits, generated = blocks.number(tokens, outputs, counts, keys)
            genbase = blocks.generated(generated)
            offsets = state.take_arena(state.live_offset(), prompt, nkeys)
            state.fed_arrival = arrival
            state.fed_ints = np.stack((tokens, outputs, nkeys, offsets, genbase), axis=1).astype(np.int64)
            S[K.CURSOR], S[K.FED] = 0, len(tokens)
            requests += len(tokens)
            accesses += int(counts.sum())
            footprint = Footprint(
                key=FOOTPRINT.key,
                request=FOOTPRINT.request + (ROW_BYTES if per_request else 0),
                fixed=meter.footprint.fixed + 8 * (len(state.arena) + len(state.KB)),
            )
            meter.check(accesses, requests, blocks.ids, workload.read_fraction, footprint)  # before the arrays grow
            state.room_for_ids(blocks.ids)
            alive = state.slots - S[K.FREE_N]
            state.room_for_slots(alive + len(tokens))
            state.room_for_rows(requests)
            state.room_for_lookups(int(((tokens + outputs) // block)[fits].max(initial=0)) + 2, cost)
        elif not state.answered(code, cost):
            break
    return stats_of(state, per_request)


def settings_of(settings, rules, gpu_blocks, cpu_blocks, block, tail_first):
    """The loop's settings (``S``'s first entries) of an instance: its engine's ``settings``, vLLM's ``rules``, its
    rooms in blocks of ``block`` tokens."""
    from kvlab.simulator import kernel as K
    from kvlab.simulator.cost import DECODE_CONTEXT_STEP

    return {
        K.BLOCKS: gpu_blocks,
        K.BLOCK: block,
        K.CPU_CAP: cpu_blocks,
        K.MAX_BATCHED: settings.max_num_batched_tokens,
        K.MAX_SEQS: settings.max_num_seqs,
        K.CHUNKED: int(settings.chunked_prefill),
        K.KEEP: int(settings.generated_blocks == "keep"),
        K.TAIL_FIRST: int(tail_first),
        K.WHOLE: int(rules.full_sequence_admission),
        K.MAX_PREEMPTIONS: MAX_PREEMPTIONS,
        K.CONTEXT_STEP: DECODE_CONTEXT_STEP,
    }


class Blocks:
    """The run's block ids (``0, 1, ...``): a trace's keys numbered as they first come (keys cut from trace blocks
    are dense already: ``TraceWorkload._columns``), then each request's generated blocks, a range of its own."""

    def __init__(self, workload, given, np):
        from kvlab.simulator import kernel as K
        from kvlab.workloads.dense import Interner

        self.np, self.K = np, K
        self.block, self.gpu_blocks, self.keep = given[K.BLOCK], given[K.BLOCKS], given[K.KEEP]
        self.interner = Interner() if getattr(workload, "split", 1) == 1 else None
        self.place = np.zeros(0, dtype=np.int64)  # each key's id in the run (-1: none yet)
        self.ids = 0

    def number(self, tokens, outputs, counts, keys):
        """A batch's prompt ids, each request's count of them, whether it fits the pool, and its generated blocks'
        count."""
        np, block = self.np, self.block
        if self.interner is not None:
            keys = self.interner.dense(keys)
        if len(keys) and keys.max() >= len(self.place):
            size = max(int(keys.max()) + 1, 2 * len(self.place))
            self.place = np.concatenate((self.place, np.full(size - len(self.place), -1, dtype=np.int64)))
        nkeys = np.minimum(counts, tokens // block)
        prompt, self.ids = self.K.number_blocks(keys, counts, nkeys, self.place, self.ids)
        # A request longer than the pool with its output is refused as it arrives (kernel._arrive): it numbers no
        # generated blocks and looks nothing up, so that --output-tokens 10**9 sizes nothing by it.
        fits = (tokens + outputs - 1 + block - 1) // block <= self.gpu_blocks
        generated = np.maximum(0, (tokens + outputs) // block - nkeys + 1) if self.keep else 0 * nkeys
        return prompt, nkeys, fits, np.where(fits, generated, 0)

    def generated(self, generated):
        """Each request's range of ids for its ``generated`` blocks: their first."""
        first = self.ids + self.np.cumsum(generated) - generated
        self.ids += int(generated.sum())
        return first


def arrivals_of(workload, settings, arrivals, np):
    """``(arrival_s, tokens, outputs, counts, keys)`` per batch of the trace (open-loop arrivals, as
    ``Arrivals.open_times`` gives them; outputs as ``Simulator._arrive`` takes them)."""
    draw = random.Random(arrivals.seed).expovariate if arrivals.kind == "rate" else None
    speedup = arrivals.speedup or 1.0
    now = 0.0
    first = last = None
    number = 0
    for columns, outputs in workload.timed_columns():
        count = len(columns.tokens)
        if not count:
            continue
        if settings.output_tokens:
            output = np.full(count, settings.output_tokens, dtype=np.int64)
        elif any(value is None for value in outputs):
            raise KvlabError(NO_OUTPUTS)
        else:
            output = np.maximum(1, np.asarray(outputs, dtype=np.int64))
        # the first request no step could compute (Simulator._arrive's check)
        unserved = columns.tokens < 1
        if not settings.chunked_prefill:
            unserved |= columns.tokens + output - 1 > settings.max_num_batched_tokens
        for i in np.flatnonzero(unserved)[:1].tolist():
            settings.check_sequence(number + i + 1, int(columns.tokens[i]), int(output[i]))
        if draw is not None:
            times = np.empty(count)
            for i in range(count):
                times[i] = now
                now += draw(arrivals.rate)
        else:
            stamps = columns.labels * workload.seconds
            previous = np.concatenate(([stamps[0] if last is None else last], stamps[:-1]))
            back = np.flatnonzero(stamps < previous)
            if len(back):
                i = int(back[0])
                raise going_back(number + i + 1, float(stamps[i]), float(previous[i]), getattr(workload, "trace", None))
            if first is None:
                first = float(stamps[0])
            last = float(stamps[-1])
            times = (stamps - first) / speedup
        number += count
        yield times, columns.tokens.astype(np.int64), output, columns.counts.astype(np.int64), columns.keys


def stats_of(state, per_request):
    """The run's :class:`SimulatorStats`, as the Python engine adds them up."""
    K, S, F = state.K, state.S, state.F
    stats = SimulatorStats(per_request)
    done = int(S[K.FINISHED])
    times, counts = state.OUTF[:done], state.OUTI[:done]
    stats.queue_ms, stats.ttft_ms, stats.tpot_ms, stats.e2e_ms = (
        array("d", times[:, i].tolist()) for i in (1, 2, 3, 4)
    )
    names = ("requests", "input_tokens", "gpu_hit_tokens", "cpu_hit_tokens", "output_tokens", "preemptions")
    for name, index in zip(names, (K.REQUESTS, K.INPUT, K.GPU_HIT, K.CPU_HIT, K.OUTPUT, K.PREEMPTIONS), strict=True):
        setattr(stats, name, int(S[index]))
    stats.steps, stats.refused, stats.mixed_steps = int(S[K.STEPS]), int(S[K.REFUSED]), int(S[K.MIXED])
    stats.lookups = {"queries": int(S[K.QUERIES]), "gpu_hits": int(S[K.Q_GPU]), "cpu_hits": int(S[K.Q_CPU])}
    stats.busy = {"h2d": float(F[K.BUSY_H2D]), "d2h": float(F[K.BUSY_D2H])}
    stats.copied = {"h2d": int(S[K.COPIED_H2D]), "d2h": int(S[K.COPIED_D2H])}
    stats.first = None if F[K.FIRST] != F[K.FIRST] else float(F[K.FIRST])
    stats.last = None if F[K.LAST] != F[K.LAST] else float(F[K.LAST])
    if per_request:
        ints, floats = counts.tolist(), times.tolist()
        stats.rows = [
            (number, arrival, queue, ttft, tpot, e2e, tokens, output, gpu, cpu, preemptions)
            for (number, tokens, output, gpu, cpu, preemptions), (arrival, queue, ttft, tpot, e2e) in zip(
                ints, floats, strict=True
            )
        ]
    return stats
