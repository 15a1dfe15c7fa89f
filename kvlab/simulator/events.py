"""The time-aware replay of one engine instance: requests arrive, queue, are scheduled step by step under a token
budget, hold their blocks while in flight, load from and store to the CPU tier over links with queues, and every
step is priced by the hardware model. One event loop (vidur's shape: ``vidur/simulator.py``).

A scheduler forms each step's batch (``kvlab/simulator/schedulers.py``: vLLM v1's or SGLang's, as the serving engine
runs); the loop owns the clock, the queues, the pool and the copies. A request whose prefix continues on the CPU tier
first holds the blocks for it and waits for their load (``WAITING_FOR_REMOTE_KVS``), skipped by the queue meanwhile;
its prefill starts after the load completes. A step's tokens are computed at its end: a request whose every token is
computed samples one.

The CPU tier is the write policy's (``kvlab/cache/write_policies.py``, the same code as ``kvlab replay``'s):
write-through and selective store a request's computed prompt blocks when its prefill completes (vLLM's
OffloadingConnector and LMCache store off the critical path; the copy holds the GPU blocks until it completes,
and the CPU finds them once it has); write-back takes what the GPU evicts (HiCache's ``write_back``: the eviction
waits for the copy, so the step that evicts starts when the copy is done). Loads and stores each queue on their
own link (host to device, device to host), first come first served.
"""

import heapq
import math
from array import array
from collections import deque

from kvlab.cache.prefix import Blocks
from kvlab.util.errors import KvlabError

__all__ = ["Simulator", "SimulatorStats", "Request"]

QUEUED_REQUEST_BYTES, QUEUED_BLOCK_BYTES = 300, 36  # a waiting request: its object, and per block its key (an int)
MAX_PREEMPTIONS = 1000  # a request preempted this often: the engine thrashes (a real one would stall too)
GENERATED = "generated"  # a generated block's key: (GENERATED, request, block), never a workload's (an int)


def unserved(count):
    return KvlabError(f"{count} requests could not be served (the pool cannot hold them)")


def thrashing(number, times):
    return KvlabError(
        f"the engine thrashes: request {number} was preempted {times} times "
        "(the pool is too small for this load: give more --gpu-blocks or a smaller --max-num-seqs)"
    )


# Nothing runs and nothing is in flight, yet the queue's first request does not fit: the blocks it needs are held by
# requests behind it that loaded their prefix from the CPU tier and wait their turn (tests/test_engine.py checks that
# this is the only way to it). vLLM v1 deadlocks the same way under KV pressure with a CPU offloading connector: its
# waiting loop stops at an unschedulable head (vllm-project/vllm#45388; a fix is open as PR #57841).
STUCK = (
    "the engine is stuck: requests wait for blocks that nothing will free (requests loaded from the CPU tier, or on"
    " a decode instance read from a prefill instance, hold them behind the queue's first, as in vLLM's deadlock"
    " vllm-project/vllm#45388); a larger GPU pool avoids it"
)
NO_OUTPUTS = "this workload has no output lengths: give --output-tokens"


class Request:
    """One request in the engine; times in seconds on the engine's clock."""

    __slots__ = (
        "number",
        "arrival",
        "keys",
        "tokens",
        "output",
        "computed",
        "generated",
        "held",
        "anonymous",
        "gpu_hit",
        "cpu_hit",
        "lookup",
        "scheduled",
        "first_token",
        "preemptions",
        "length",
        "joined",
        "loading",
        "storing",
        "copying",
        "done",
        "client",
        "offload",
    )

    def __init__(self, number, arrival, keys, tokens, output, block_tokens, client=None):
        self.number = number
        self.arrival = arrival
        self.keys = keys[: tokens // block_tokens]  # the full prompt blocks: what a cache can hold and find
        self.tokens = tokens
        self.output = output
        self.computed = 0  # tokens whose KV is on the GPU
        self.generated = 0  # output tokens sampled
        self.length = tokens  # its tokens so far: the prompt and what it generated (vLLM's ``num_tokens``)
        self.joined = False  # taken from the queue this step: its tokens are a prefill's, however few
        self.held = []  # keyed blocks held, head first
        self.anonymous = 0  # blocks held beyond them (a partial block, generated tokens)
        self.gpu_hit = self.cpu_hit = None  # tokens, at its first lookup
        self.lookup = None  # (gpu_end, cpu_end) of its last lookup, in blocks
        self.scheduled = None  # when it was first scheduled
        self.first_token = None
        self.preemptions = 0
        self.loading = False  # waiting for a load from the CPU
        self.storing = 0  # its stores in flight
        self.copying = None  # the keys of a store in flight that the pool does not count (its own hold covers them)
        self.done = False  # finished, its blocks held until its stores complete (vLLM's delay_free_blocks)
        self.client = client
        self.offload = None  # its side of vLLM 0.33's OffloadingConnector (kvlab/simulator/offloading.py), once used

    def decoding(self):
        """Whether its next step is a decode (every token computed but the last sampled one)."""
        return self.generated > 0 and self.computed == self.length - 1


class SimulatorStats:
    """What the run adds up, and the per-request times (typed arrays: a long trace keeps 8 bytes per figure)."""

    def __init__(self, per_request):
        self.ttft_ms, self.tpot_ms, self.e2e_ms, self.queue_ms = (array("d") for _ in range(4))
        self.requests = self.input_tokens = self.gpu_hit_tokens = self.cpu_hit_tokens = 0
        self.output_tokens = self.preemptions = self.steps = self.refused = 0
        self.mixed_steps = 0  # steps with prefill chunks and decodes both (vLLM v1's; never SGLang's)
        self.lookups = {"queries": 0, "gpu_hits": 0, "cpu_hits": 0}  # every lookup (vLLM's prefix cache metrics)
        self.busy = {"h2d": 0.0, "d2h": 0.0}  # seconds each link copied
        self.copied = {"h2d": 0, "d2h": 0}  # blocks
        self.first = self.last = None
        self.rows = [] if per_request else None


class Simulator:
    """One engine instance over ``pool`` (:class:`kvlab.simulator.pool.BlockPool`), priced by ``cost``
    (:class:`kvlab.simulator.cost.StepCost`), with the CPU tier of ``offload`` (a write policy's cache of
    ``kvlab/cache/write_policies.py`` whose CPU tier is used, or None)."""

    def __init__(self, pool, cost, offload, settings, per_request=False, tail_first=True, rules=None):
        from kvlab.serving.vllm import NEWEST, rules_for

        self.rules = rules if rules is not None else rules_for(NEWEST)  # vLLM's, by --engine-version
        from kvlab.simulator.offloading import OffloadingConnector
        from kvlab.simulator.schedulers import SCHEDULERS

        self.pool = pool
        self.scheduler = SCHEDULERS[settings.scheduler](self)  # forms each step's batch
        # vLLM 0.33's CPU tier (kvlab/simulator/offloading.py), or a write policy's (``offload``)
        self.connector = offload if isinstance(offload, OffloadingConnector) and offload.capacity else None
        if isinstance(offload, OffloadingConnector):
            offload = None
        self.holding = deque()  # waiting requests that hold blocks (a load started): vLLM 0.33's kv_holding_waiting
        self.inflight = set()  # requests from their load's start to their last prefill chunk (_inflight_prefills)
        self.finished_last = []  # requests that finished in the last step: the connector's next step sees them
        self.tail_first = tail_first  # a request's blocks join the free queue tail first (vLLM), or head first
        self.cost = cost
        self.offload = offload if offload is not None and offload.cpu.capacity else None
        self.settings = settings
        self.block = pool.block_tokens
        self.stats = SimulatorStats(per_request)
        self.now = 0.0
        self.waiting = deque()
        self.running = []
        self.events = []  # (time, order, kind, payload): arrivals of closed-loop clients and copies completing
        self.order = 0
        self.loads = 0  # waiting requests whose load is in flight
        self.meter = None  # a kvlab.util.memory.Meter the queue is checked against as it grows
        self.links = {"h2d": 0.0, "d2h": 0.0}  # when each link is next free
        self.evicting = self.offload is not None and self.offload.takes_victims
        self.evicted_until = 0.0  # when the copies of what the GPU evicted complete (write-back)
        self.watch = None  # a fleet's look at its requests: told each one's first token and its end (fleet.py)
        self.hosts = None  # a shared CPU tier's hosts: whose host holds each block, the network's price (fleet.py)
        self.remote = None  # a decode instance's KV from its prefill instances, read over the network (fleet.py)
        self.halt = False  # stop advancing at once (a fleet's closed loop: a client's request finished)
        if self.evicting:
            pool.victims = []

    # --- the loop -----------------------------------------------------------------------------------------------

    def run(self, arrivals, closed=None):
        """Serve ``arrivals`` (``(arrival_s, Timed)`` in order) or, with ``closed`` (a number of clients), the
        requests of the iterator ``arrivals`` (``Timed``), each client sending its next as its last finishes."""
        self.begin(arrivals, closed)
        self.advance()
        return self.end()

    def begin(self, arrivals=(), closed=None):
        """Take ``arrivals`` (as :meth:`run`); a fleet's instance (``kvlab/simulator/fleet.py``) begins with none and
        is sent each of its requests (:meth:`deliver`)."""
        self.source = iter(arrivals)
        self.fed = deque()  # arrivals a fleet's router sent here, not yet the next
        self.closed = closed
        self.numbered = 0
        self.next_arrival = None
        if closed:
            for client in range(closed):
                self._issue(0.0, client)
        else:
            self._pull()

    def advance(self, until=math.inf):
        """Run every step that starts before ``until`` (the last may end after it), and take every arrival and copy
        by then: one instance's loop, which a fleet drives to each of its arrivals in turn (any may be sent here, so a
        run of decode steps stops at it as at an arrival of its own)."""
        self.until = until
        while True:
            self._admit()
            if self.halt:  # a fleet's client finished here: its next request may come before anything else
                self.halt = False
                return
            if self.now < until and (self.running or self._schedulable()):
                self.scheduler.step()
                continue
            upcoming = self._upcoming()
            if upcoming is None or upcoming >= until:
                return
            self.now = max(self.now, upcoming)

    def next_activity(self):
        """When this instance next does something: now where it has work, else its next copy or arrival (inf for
        none)."""
        if self.running or self._schedulable():
            return self.now
        upcoming = self._upcoming()
        return math.inf if upcoming is None else upcoming

    def deliver(self, when, timed):
        """A request a fleet's router sent here, arriving at ``when`` (no earlier than the last sent)."""
        if self.next_arrival is None:
            self.next_arrival = (when, timed)
        else:
            self.fed.append((when, timed))

    def end(self):
        """The run's stats, once everything was served."""
        if self.waiting or self.holding:
            raise unserved(len(self.waiting) + len(self.holding))
        return self.stats

    def _pull(self):
        self.next_arrival = self.fed.popleft() if self.fed else next(self.source, None)

    def _issue(self, when, client):
        timed = next(self.source, None)
        if timed is not None:
            self._push(when, "arrive", (timed, client))

    def _push(self, when, kind, payload):
        self.order += 1
        heapq.heappush(self.events, (when, self.order, kind, payload))

    def _upcoming(self):
        times = [self.events[0][0]] if self.events else []
        if self.next_arrival is not None:
            times.append(self.next_arrival[0])
        return min(times) if times else None

    def _admit(self):
        """Everything that happened by now: arrivals, copies completed."""
        now = self.now
        while self.next_arrival is not None and self.next_arrival[0] <= now:
            when, timed = self.next_arrival
            self._arrive(when, timed, None)
            self._pull()
        events = self.events
        while events and events[0][0] <= now:
            when, _, kind, payload = heapq.heappop(events)
            if kind == "arrive":
                self._arrive(when, *payload)
            elif kind == "loaded":
                request, keys = payload
                self.pool.loaded(keys)
                if self.connector is not None:
                    self.connector.loaded(keys)
                request.loading = False
                self.loads -= 1
            elif kind == "offloaded":  # a store of vLLM 0.33's connector completed: the CPU finds its blocks
                request, keys = payload
                self.connector.stored(keys)
                request.storing -= 1
            else:  # stored: the CPU holds the copies; the GPU lets go of them
                request, blocks, lookup, keys = payload
                self.offload.cpu_after(blocks, *lookup, gpu=self.pool)
                if self.hosts is not None:
                    self.hosts.stored(self, keys)
                if request.copying is keys:
                    request.copying = None
                    self.pool.uncounted(keys)
                else:
                    self.pool.release(keys)
                request.storing -= 1
                if request.done and not request.storing:
                    self._release(request)

    def _arrive(self, when, timed, client):
        output = self.settings.output_tokens or timed.output_tokens
        if output is None:
            raise KvlabError(NO_OUTPUTS)
        self.settings.check_sequence(self.numbered + 1, timed.tokens, max(1, output))
        request = Request(self.numbered, when, timed.keys, timed.tokens, max(1, output), self.block, client)
        self.numbered += 1
        stats = self.stats
        if stats.first is None:
            stats.first = when
        if -(-(request.tokens + request.output - 1) // self.block) > self.pool.blocks:
            stats.refused += 1  # longer than the whole pool: the engine refuses it (max_model_len)
            if self.watch is not None:
                self.watch.finished(request)
            self._finished_client(request)
            return
        self.waiting.append(request)
        if self.meter is not None and not len(self.waiting) % 4096:
            self._check_queue()

    def _check_queue(self):
        """The memory the waiting requests hold, with what the run holds besides (its meter's footprint)."""
        from kvlab.util.memory import Footprint

        own = self.meter.footprint
        besides = own.fixed + own.of(0, self.numbered, 0)  # the times of every request so far, the tiers
        queued = Footprint(QUEUED_BLOCK_BYTES, QUEUED_REQUEST_BYTES, 0, besides)
        self.meter.check(sum(len(request.keys) for request in self.waiting), len(self.waiting), 0, None, queued)

    def _schedulable(self):
        return len(self.waiting) + len(self.holding) > self.loads

    # --- one step (or a run of decode steps at one price) -----------------------------------------------------

    def wait(self):
        """Nothing could be scheduled: on to the next arrival or completed copy (none: the engine is stuck)."""
        upcoming = self._upcoming()
        if upcoming is None or upcoming > self.until:  # (a fleet's next arrival may come here)
            if self.until == math.inf:
                raise KvlabError(STUCK)
            upcoming = self.until
        self.now = max(self.now, upcoming)

    def schedule_waiting(self, scheduled, budget, admits):
        """Waiting requests join in order while the budget and ``max_num_seqs`` allow and the scheduler ``admits``
        them (``admits(request, found)``: its admission rule, ``found`` the lookup of a request that holds no blocks
        yet)."""
        settings, running, block, connector = self.settings, self.running, self.block, self.connector
        skipped, skipped_holding = [], []  # (vLLM 0.33: those that hold blocks go back to kv_holding_waiting)
        while budget > 0 and len(running) < settings.max_num_seqs:
            waiting = self.holding or self.waiting  # vLLM 0.33 (sched/scheduler.py:1065): those holding blocks first
            if not waiting:
                break
            request = waiting[0]
            if request.loading:
                (skipped_holding if waiting is self.holding else skipped).append(waiting.popleft())
                continue
            found = None
            computed = request.computed
            if request.lookup is None:  # looked up again at every try, as vLLM's get_computed_blocks
                found = keys, gpu_end, cpu_end = self._find(request)
                if connector is not None:  # get_num_new_matched_tokens (the connector's scheduler.py:1210)
                    self._offload_state(request).next_stored = 0  # every block offered again from the head
                    if request.storing or (cpu_end > gpu_end and connector.prefix_end(keys, gpu_end)[1]):
                        skipped.append(waiting.popleft())  # its stores, or a block of its hit, in flight
                        continue
                if cpu_end > gpu_end:  # hold the blocks of the CPU hit and wait for their load
                    if connector is not None and not self._fits_load(request, keys, gpu_end, cpu_end):
                        break
                    if not self._hold(request, keys[:cpu_end], 0, keys[gpu_end:cpu_end]):
                        break
                    self._commit(request, *found)
                    self._load(request, keys[gpu_end:cpu_end])
                    if connector is None:
                        skipped.append(waiting.popleft())
                        continue
                    state = self._offload_state(request)
                    state.next_stored = cpu_end  # the hit is not offered again (OffloadPolicy.CHUNK_LEVEL)
                    connector.load(state, keys[gpu_end:cpu_end], state.positions)
                    self.inflight.add(request)
                    skipped_holding.append(waiting.popleft())
                    continue
                computed = min(gpu_end * block, request.length - 1)
            tokens = request.length - computed
            if not settings.chunked_prefill and tokens > budget:
                break
            tokens = min(tokens, budget)
            if not admits(request, found):
                break
            if not self.allocate(request, computed + tokens):
                break
            if found is not None:
                self._commit(request, *found)
            elif self.evicting:
                self.write_back()
            waiting.popleft()
            running.append(request)
            request.joined = True
            if request.scheduled is None:
                request.scheduled = self.now
            scheduled.append((request, tokens))
            budget -= tokens
        self.waiting.extendleft(reversed(skipped))
        self.holding.extendleft(reversed(skipped_holding))
        return budget

    def _fits_load(self, request, keys, gpu_end, cpu_end):
        """vLLM 0.33's admission of an async load (``Scheduler.schedule``, ``allocate_slots`` with
        ``reserved_blocks``, ``vllm/v1/core/sched/scheduler.py:1428-1450``): its whole sequence fits the free blocks,
        and the blocks of its hit fit them less what the requests loaded before it still need to finish their
        prefills (``_inflight_prefill_reserved_blocks``, ``scheduler.py:3432``)."""
        pool, block = self.pool, self.block
        hit = keys[:gpu_end]
        whole = -(-request.length // block)
        if self.rules.full_sequence_admission and pool.needed(hit, whole - gpu_end) > pool.available:
            return False
        reserved = sum(max(0, -(-other.length // block) - len(other.held) - other.anonymous) for other in self.inflight)
        return pool.needed(hit, cpu_end - gpu_end) <= pool.available - reserved

    def _offload_state(self, request):
        from kvlab.simulator.offloading import RequestState

        if request.offload is None:
            request.offload = RequestState(request.keys)
        return request.offload

    def _offload_step(self, scheduled):
        """vLLM 0.33's connector after a step is scheduled (``build_connector_meta``,
        ``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py:2103``): each scheduled request offers
        the prompt blocks its step fills, then each request that finished in the last step offers the rest and
        commits its blocks' recency."""
        for request, tokens in scheduled:
            self._offer(request, request.computed + tokens)
        for request in self.finished_last:
            self._offer(request, request.tokens)
            self.connector.finished(request.offload, request.offload.positions)
        self.finished_last = []

    def _offer(self, request, tokens):
        """Its prompt's blocks full within ``tokens``, from where it last stopped, offered to the CPU; a copy of those
        it lacks queued (``_build_store_jobs``, the connector's ``scheduler.py:1815``; ``offload_prompt_only``,
        ``:769``)."""
        state = self._offload_state(request)
        chunks = min(tokens, request.tokens) // self.block
        if chunks <= state.next_stored:
            return
        taken = self.connector.offer(state, request.keys[state.next_stored : chunks], state.positions)
        if taken is None:  # no room: offered again at the next step
            return
        state.next_stored = chunks
        if taken:
            request.storing += 1
            self._push(self._copy("d2h", len(taken)), "offloaded", (request, taken))

    # --- SGLang's scheduler ------------------------------------------------------------------------------------

    def _lookup_keys(self, request):
        """The keys a lookup walks: the prompt's full blocks, then its generated ones where they are kept."""
        keys = request.keys
        if self.settings.generated_blocks == "keep" and request.generated:
            first = len(keys)
            full = request.length // self.block
            keys = keys + [self._generated_key(request, index) for index in range(first, full)]
        return keys

    def _generated_key(self, request, index):
        return GENERATED, request.number, index

    def _find(self, request):
        """``(keys, gpu_end, cpu_end)``: its prefix found on the GPU, then continued on the CPU."""
        keys = self._lookup_keys(request)
        gpu_end = self.pool.prefix_end(keys)
        if self.settings.scheduler == "vllm":  # a hit ends a token short of the sequence, in whole blocks
            gpu_end = min(gpu_end, (request.length - 1) // self.block)  # (vllm/v1/core/kv_cache_manager.py:302)
        return keys, gpu_end, self._cpu_end(keys, gpu_end)

    def _cpu_end(self, keys, gpu_end):
        """Index of the first of ``keys[gpu_end:]`` the CPU tier (a decode instance: its prefill's KV) lacks."""
        if self.remote is not None:
            return self.remote.prefix_end(keys, gpu_end)
        if self.connector is not None:
            return self.connector.prefix_end(keys, gpu_end)[0]
        offload = self.offload
        return offload.cpu.prefix_end(keys, gpu_end) if offload is not None else gpu_end

    def held(self, keys):
        """``(blocks, GPU blocks)`` of ``keys`` from the head that a lookup would find now, on the GPU and then on the
        CPU: what a router that reads the engine's cache sees (kvlab/fleet/routers/base.py)."""
        gpu_end = self.pool.prefix_end(keys)
        return self._cpu_end(keys, gpu_end), gpu_end

    def _commit(self, request, keys, gpu_end, cpu_end):
        """It is scheduled (or its load starts) on this lookup: count it, and tell the CPU tier."""
        offload, block, stats = self.offload, self.block, self.stats
        if offload is not None:
            if cpu_end > gpu_end:  # refreshed now, so that the LRU keeps them while they load (vLLM's touch)
                offload.cpu.refresh_all(keys[cpu_end - 1 : gpu_end - 1 if gpu_end else None : -1], block)
            offload.cpu_before(Blocks(request.keys, len(request.keys) * block, block, False), gpu_end, cpu_end)
            if cpu_end == gpu_end:  # (a load's victims wait for its prefill's: one of them may come back)
                self.write_back()  # what its blocks evicted: after its own copies left the CPU, as kvlab replay
        request.lookup = gpu_end, cpu_end
        if self.remote is not None:
            self.remote.release(request)
        length = request.length
        found = min(cpu_end * block, length)
        request.computed = min(found, length - 1)
        gpu = min(gpu_end * block, length)
        stats.lookups["queries"] += length
        stats.lookups["gpu_hits"] += gpu
        stats.lookups["cpu_hits"] += found - gpu
        if request.gpu_hit is None:
            request.gpu_hit = min(gpu_end * block, request.tokens)
            request.cpu_hit = min(cpu_end * block, request.tokens) - request.gpu_hit

    def _hold(self, request, keys, anonymous, pending=()):
        """Hold ``keys`` (the request's next keyed blocks) and ``anonymous`` more for it; False where they do not
        fit. The keys in ``pending`` are being loaded."""
        pool = self.pool
        if pending:
            found = keys[: len(keys) - len(pending)]
            if pool.needed(keys, anonymous) > pool.available:
                return False
            pool.hold(found)
            pool.hold(pending, anonymous, pending=True)
        elif not pool.hold(keys, anonymous):
            return False
        request.held.extend(keys)
        request.anonymous += anonymous
        return True

    def allocate(self, request, tokens):
        """The blocks for its first ``tokens`` tokens held; False where they do not fit. A block is keyed (found by a
        lookup, cached when let go of) once these tokens fill it, as vLLM caches a block when the step that fills it
        is scheduled (``KVCacheManager.allocate_slots`` caches ``min(computed + new, num_tokens)`` tokens' full
        blocks: ``vllm/v1/core/kv_cache_manager.py:621``); a partly filled block is held empty of a key, so a
        preempted request's last chunk is never found again."""
        block = self.block
        blocks = -(-tokens // block)
        have = len(request.held) + request.anonymous
        held = len(request.held)
        keyed = tokens // block
        if keyed > held and keyed > len(request.keys):
            keyed = min(keyed, self._key_count(request))
        if blocks <= have and keyed <= held:
            return True
        keys = self._lookup_keys(request)[held:keyed] if keyed > held else ()
        total = max(blocks, have)
        return self._hold(request, keys, total - held - len(keys) - request.anonymous)

    def _key_count(self, request):
        """How many of its blocks have keys: the prompt's full blocks, then its full generated ones where kept."""
        if self.settings.generated_blocks == "keep" and request.generated:
            return max(len(request.keys), request.length // self.block)
        return len(request.keys)

    def _load(self, request, keys):
        request.loading = True
        self.loads += 1
        if self.remote is not None:  # a prefill instance's KV, GPU to GPU over the network
            self._push(self._copy("net", len(keys), self.remote.network_ms), "loaded", (request, keys))
            return
        hosts, after = self.hosts, 0.0
        if hosts is not None:  # a shared tier's blocks on other hosts come over the network first
            remote = hosts.remote(self, keys)
            if remote:
                after = self._copy("net", remote, hosts.network_ms)
        done = self._copy("h2d", len(keys), after=after)
        self._push(done, "loaded", (request, keys))

    def _copy(self, link, blocks, price=None, after=0.0):
        """Queue a copy of ``blocks`` blocks on ``link`` (priced by ``price``, else the cost's copy), starting no
        earlier than ``after``; when it completes."""
        seconds = (price or self.cost.copy_ms)(blocks) / 1000
        start = max(self.now, self.links.get(link, 0.0), after)
        self.links[link] = start + seconds
        self.stats.busy[link] = self.stats.busy.get(link, 0.0) + seconds
        self.stats.copied[link] = self.stats.copied.get(link, 0) + blocks
        return start + seconds

    def write_back(self):
        """What the GPU evicted goes to the CPU (write-back), its copy queued; the evicting step waits for it."""
        victims = self.pool.victims
        if not victims:
            return
        self.offload.cpu_after(None, 0, 0, list(victims), gpu=self.pool)
        if self.hosts is not None:
            self.hosts.stored(self, [key for key, _ in victims])
        self.evicted_until = max(self.evicted_until, self._copy("d2h", len(victims)))
        victims.clear()

    def _store(self, request):
        """Its prefill completed: copy its computed prompt blocks to the CPU (write-through, selective)."""
        offload = self.offload
        if offload is None or offload.takes_victims:
            return
        gpu_end, cpu_end = request.lookup
        block = self.block
        keys = offload.stores(request.keys, gpu_end, cpu_end)
        blocks = Blocks(request.keys, len(request.keys) * block, block, False)
        order = keys[::-1] if self.tail_first else keys
        # The copy holds them until it completes. Where the request holds them all (its whole prompt), the pool counts
        # that hold only if the request lets go of them first (_release); the pool is the same either way.
        if len(request.held) >= len(request.keys):
            request.copying = order
        else:
            self.pool.hold(keys)
        done = self._copy("d2h", len(keys)) if keys else self.now
        request.storing += 1
        self._push(done, "stored", (request, blocks, (gpu_end, cpu_end), order))

    def preempt(self, request, front=True):
        """Free its blocks (tail first) and send it to the front of the queue (SGLang's retraction: the back); its
        tokens are computed again."""
        self._release(request)
        self.inflight.discard(request)
        request.computed = 0
        request.lookup = None
        request.preemptions += 1
        self.stats.preemptions += 1
        if request.preemptions > MAX_PREEMPTIONS:
            raise thrashing(request.number, request.preemptions)
        if front:
            self.waiting.appendleft(request)
        else:
            self.waiting.append(request)

    def _release(self, request):
        pool = self.pool
        if request.copying is not None:  # its store goes on holding them (_store)
            pool.hold(request.copying)
            request.copying = None
        if self.settings.generated_blocks == "keep" and request.anonymous:
            first = len(request.held)
            full = min(request.computed // self.block, first + request.anonymous)
            kept = [self._generated_key(request, index) for index in range(first, full)]
            pool.park(kept[::-1] if self.tail_first else kept, request.anonymous)
        else:
            pool.release((), request.anonymous)
        pool.release(request.held[::-1] if self.tail_first else request.held)
        request.held = []
        request.anonymous = 0

    def execute(self, scheduled, preempted):
        if self.connector is not None:
            self._offload_step(scheduled)
        cost = self.cost
        prefill = cost.prefill_ms
        prefill_ms = 0.0
        decodes = context = 0
        for request, tokens in scheduled:
            if tokens == 1 and not request.joined and request.decoding():
                decodes += 1
                context += request.length
            else:
                request.joined = False
                prefill_ms += prefill(request.computed + tokens, request.computed)
        step_ms = prefill_ms + (cost.decode_ms(decodes, context) if decodes else 0.0)
        if decodes and decodes < len(scheduled):
            self.stats.mixed_steps += 1
        start = max(self.now, self.evicted_until) if self.evicting else self.now
        steps = self._run_length(step_ms, start) if decodes == len(scheduled) and not preempted else 1
        end = start + steps * step_ms / 1000
        self.stats.steps += steps
        finished = []
        run, evicting = steps > 1, self.evicting
        for request, tokens in scheduled:
            before = request.computed
            if run:  # a run of decode steps: the blocks of all of them now (nothing looks in between)
                self.allocate(request, before + steps)
                if evicting:
                    self.write_back()
                tokens = steps
            computed = request.computed = before + tokens
            if computed < request.length:
                continue  # a chunk of its prefill
            self.inflight.discard(request)
            sampled = tokens if run else 1
            request.generated += sampled
            request.length += sampled
            if request.first_token is None:
                request.first_token = end
                if self.watch is not None:
                    self.watch.first_token(request)
            if before < request.tokens <= computed:
                self._store(request)
            if request.generated >= request.output:
                finished.append(request)
        self.now = end
        for request in finished:
            self._finish(request, end)
        return steps

    def _run_length(self, step_ms, start):
        """How many decode steps of this batch run alike: until a request finishes, the mean context's grain
        changes, something arrives or completes, or the next blocks would not fit (under write-back: would evict)."""
        from kvlab.simulator.cost import DECODE_CONTEXT_STEP

        running = self.running
        steps = min(request.output - request.generated for request in running)
        batch = len(running)
        mean = -(-sum(request.length for request in running) // batch)
        steps = min(steps, -(-mean // DECODE_CONTEXT_STEP) * DECODE_CONTEXT_STEP - mean + 1)
        upcoming = self._upcoming()
        upcoming = self.until if upcoming is None else min(upcoming, self.until)
        if upcoming < math.inf and step_ms > 0:
            steps = min(steps, max(1, math.ceil((upcoming - start) * 1000 / step_ms)))
        if steps <= 1:
            return 1
        pool, block = self.pool, self.block
        room = pool.available
        if self.evicting:
            room -= len(pool.cached)

        def more(count):
            return sum(
                max(0, -(-(request.computed + count) // block) - len(request.held) - request.anonymous)
                for request in running
            )

        while steps > 1 and more(steps) > room:
            steps -= 1
        return steps

    def _finish(self, request, end):
        if self.connector is not None:  # freed at once; its last offer and its recency at the next step
            self._release(request)
            self.finished_last.append(request)
        elif request.storing:  # its blocks are freed when its stores complete (kvlab's write-through)
            request.done = True
        else:
            self._release(request)
        self.running.remove(request)
        if self.watch is not None:
            self.watch.finished(request)
        stats = self.stats
        stats.requests += 1
        stats.input_tokens += request.tokens
        stats.gpu_hit_tokens += request.gpu_hit
        stats.cpu_hit_tokens += request.cpu_hit
        stats.output_tokens += request.output
        ttft = (request.first_token - request.arrival) * 1000
        e2e = (end - request.arrival) * 1000
        tpot = (end - request.first_token) * 1000 / (request.output - 1) if request.output > 1 else math.nan
        queue = (request.scheduled - request.arrival) * 1000
        stats.ttft_ms.append(ttft)
        stats.e2e_ms.append(e2e)
        stats.tpot_ms.append(tpot)
        stats.queue_ms.append(queue)
        stats.last = end
        if stats.rows is not None:
            stats.rows.append(
                (
                    request.number,
                    request.arrival,
                    queue,
                    ttft,
                    tpot,
                    e2e,
                    request.tokens,
                    request.output,
                    request.gpu_hit,
                    request.cpu_hit,
                    request.preemptions,
                )
            )
        self._finished_client(request)

    def _finished_client(self, request):
        if self.closed:
            self._issue(self.now, request.client)
