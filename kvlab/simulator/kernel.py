"""The time-aware replay's event loop in one compiled function: :class:`kvlab.simulator.events.Simulator` (vLLM v1's
scheduler, the CPU tier written through, LRU on both tiers) over dense block ids, every state an array, so that the
loop runs at machine speed. The Python engine stays the reference: tests/test_simulate_compiled.py checks the two
agree request by request and byte for byte; each function here names the method it mirrors.

The loop returns to its driver (``kvlab/simulator/compiled.py``) whenever it lacks something, and picks up where it
stopped when called again: more requests (:data:`NEED_REQUESTS`, at the top of the loop, when the next arrival is not
yet read), prices of a step (:data:`NEED_PRICES`: the step is scheduled and its chunks and decode batch are in ``Q``;
the next call prices it and goes on), or room (:data:`NEED_ROOM`, at the top of the loop: more events or stored keys
than the arrays hold). An instance of a fleet (``kvlab/simulator/compiled_fleet.py``, ``S[FLEET]``) is sent its requests
by its driver and runs until ``F[UNTIL]``, the fleet's next arrival (:data:`PAUSED`: ``Simulator.advance``), logging
the numbers of the requests whose first token came (``FT``) for the fleet's router.

Blocks are ids ``0, 1, ...``: a trace's keys and every request's generated blocks (a range of its own, vLLM's hashes of
generated tokens are the request's alone). Per id the GPU pool keeps its holders, whether it is cached (free, in the
free queue: a doubly linked list, least recently freed first) or being loaded, and the CPU tier whether it holds it
(a doubly linked LRU list).
"""

import math

import numpy as np
from numba import njit

from kvlab.util.kernels import discard_damaged

discard_damaged(__file__)  # a damaged cache of this module's kernels compiles again, not fails

# What a call returns (S[CODE] holds it, with details in S).
DONE, NEED_REQUESTS, NEED_PRICES, NEED_ROOM, STUCK, THRASH, UNSERVED, PAUSED = range(8)
NONE = -1
CACHED, PENDING = 1, 2  # the flags of an id (P[id, 1]); C[id]: held by the CPU tier, its LRU list's previous and next

# S: the run's integers. Settings first (set by the driver, with the constants of events.py and cost.py: a
# compiled function keeps the constants it was compiled with), then counters and the loop's state.
(
    BLOCKS,
    BLOCK,
    CPU_CAP,
    MAX_BATCHED,
    MAX_SEQS,
    CHUNKED,
    KEEP,
    TAIL_FIRST,
    WHOLE,
    MAX_PREEMPTIONS,
    CONTEXT_STEP,
    CODE,
    PHASE,
    NUMBERED,
    REQUESTS,
    INPUT,
    GPU_HIT,
    CPU_HIT,
    OUTPUT,
    PREEMPTIONS,
    STEPS,
    REFUSED,
    MIXED,
    QUERIES,
    Q_GPU,
    Q_CPU,
    COPIED_H2D,
    COPIED_D2H,
    LOADS,
    ORDER,
    N_HELD,
    N_CACHED,
    ANON,
    C_HEAD,
    C_TAIL,
    CPU_N,
    CPU_HEAD,
    CPU_TAIL,
    FINISHED,
    CURSOR,
    FED,
    EXHAUSTED,
    W_HEAD,
    W_N,
    RUN_N,
    FREE_N,
    EV_N,
    EVFREE_N,
    KB_END,
    ALIVE_KEYS,
    N_SCHED,
    PREEMPTED,
    N_QUERIES,
    DECODE_QUERY,
    DECODE_BATCH,
    DECODE_MEAN,
    PRICES,
    PRICE_MULTIPLIER,
    PRICE_SHIFT,
    ERROR_NUMBER,
    ERROR_COUNT,
    ARENA_BASE,
    N_PENDING,
    FLEET,
    FT_N,
    S_SIZE,
) = range(66)
# F: the run's floats.
NOW, H2D_FREE, D2H_FREE, BUSY_H2D, BUSY_D2H, FIRST, LAST, DECODE_ANSWER, UNTIL, F_SIZE = range(10)
# R[slot]: a request's integers (Request's fields in kvlab/simulator/events.py).
(
    R_NUMBER,
    R_TOKENS,
    R_OUTPUT,
    R_NKEYS,
    R_OFFSET,
    R_GENBASE,
    R_COMPUTED,
    R_GENERATED,
    R_LENGTH,
    R_JOINED,
    R_HELD,
    R_ANON,
    R_GPU_HIT,
    R_CPU_HIT,
    R_LGPU,
    R_LCPU,
    R_PREEMPTIONS,
    R_LOADING,
    R_STORING,
    R_COPYING,
    R_DONE,
    R_SIZE,
) = range(22)
# RF[slot]: its times.
RF_ARRIVAL, RF_SCHEDULED, RF_FIRST_TOKEN, RF_SIZE = range(4)
# EVI[event]: an event's integers (EVF[event]: its time).
E_ORDER, E_KIND, E_SLOT, E_KOFF, E_KLEN, E_GPU, E_CPU, E_SIZE = range(8)
LOADED, STORED = 0, 1
# OUTF[finished]: arrival, queue, ttft, tpot, e2e (ms); OUTI[finished]: number, tokens, output, gpu, cpu, preemptions.
OUTF_SIZE, OUTI_SIZE = 5, 6


@njit(cache=True)
def _price_slot(S, PK, key):
    """Where ``key`` is in the prices' table, or the empty slot it would take (linear probing from a multiply-shift
    hash whose odd multiplier the driver draws at random: a crafted trace cannot aim its keys at one slot)."""
    mask = len(PK) - 1
    slot = np.int64((np.uint64(key) * np.uint64(S[PRICE_MULTIPLIER])) >> np.uint64(S[PRICE_SHIFT]))
    while PK[slot] != key and PK[slot] != NONE:
        slot = (slot + 1) & mask
    return slot


@njit(cache=True)
def price_of(S, PK, PV, key):
    """The price of ``key``; -1.0 where the table lacks it (a price is never negative)."""
    slot = _price_slot(S, PK, key)
    return PV[slot] if PK[slot] == key else -1.0


@njit(cache=True)
def set_price(S, PK, PV, key, value):
    slot = _price_slot(S, PK, key)
    if PK[slot] != key:
        PK[slot] = key
        S[PRICES] += 1
    PV[slot] = value


@njit(cache=True)
def known_prices(S, PK, PV, chunks, chunk_ms, steps, step_ms):
    """The table filled with prices known before the run: ``chunks`` (tokens, cached) and ``steps`` (batch, mean
    context) rows and their ms; the table must hold them at most half full."""
    for i in range(len(chunks)):
        set_price(S, PK, PV, prefill_key(chunks[i, 0], chunks[i, 1]), chunk_ms[i])
    for i in range(len(steps)):
        set_price(S, PK, PV, decode_key(steps[i, 0], steps[i, 1]), step_ms[i])


@njit(cache=True)
def moved_prices(S, PK, PV, NK, NV):
    """The table's prices in the larger ``NK``, ``NV`` (``S[PRICE_SHIFT]`` already theirs)."""
    S[PRICES] = 0
    for slot in range(len(PK)):
        if PK[slot] != NONE:
            set_price(S, NK, NV, PK[slot], PV[slot])


@njit(cache=True)
def prefill_key(tokens, cached):
    """A prefill chunk's key (``HardwareModel._prefill_ms`` caps the cached prefix at tokens - 1; tokens below
    2**30)."""
    if cached > tokens - 1:
        cached = tokens - 1
    return (tokens << 32) | cached


@njit(cache=True)
def decode_key(batch, mean):
    """A decode batch's key (apart from every prefill's: bit 62)."""
    return (1 << 62) | (batch << 32) | mean


@njit(cache=True)
def number_blocks(keys, counts, nkeys, place, ids):
    """The run's ids of each request's first ``nkeys`` keys (``place[key]``; a key not seen before takes the next id,
    from ``ids``); the ids, and the next one."""
    out = np.empty(nkeys.sum(), dtype=np.int64)
    start = written = 0
    for request in range(len(counts)):
        for i in range(start, start + nkeys[request]):
            found = place[keys[i]]
            if found < 0:
                found = place[keys[i]] = ids
                ids += 1
            out[written] = found
            written += 1
        start += counts[request]
    return out, ids


@njit(cache=True)
def key_at(R, arena, base, slot, index):
    """The ``index``-th of a request's lookup keys (``Simulator._lookup_keys``): its prompt's, then its generated
    ones."""
    nkeys = R[slot, R_NKEYS]
    if index < nkeys:
        return arena[R[slot, R_OFFSET] - base + index]
    return R[slot, R_GENBASE] + index - nkeys


@njit(cache=True)
def lookup_length(S, R, slot):
    nkeys = R[slot, R_NKEYS]
    if S[KEEP] and R[slot, R_GENERATED] > 0:
        full = R[slot, R_LENGTH] // S[BLOCK]
        return full if full > nkeys else nkeys
    return nkeys


# --- the GPU pool (kvlab/simulator/pool.py BlockPool) --------------------------------------------------------------
# Its free queue and the CPU tier's LRU order are two doubly linked lists, each written out with its own columns:
# one unlink and one append shared by both, the columns passed in, made the whole command 25% slower on the
# conversation trace (1.3 s -> 1.65 s of CPU, measured side by side), inlined or not.


@njit(cache=True)
def _unlink_cached(S, P, key):
    before, after = P[key, 2], P[key, 3]
    if before == NONE:
        S[C_HEAD] = after
    else:
        P[before, 3] = after
    if after == NONE:
        S[C_TAIL] = before
    else:
        P[after, 2] = before
    P[key, 1] &= ~CACHED
    S[N_CACHED] -= 1


@njit(cache=True)
def _append_cached(S, P, key):
    tail = S[C_TAIL]
    P[key, 2] = tail
    P[key, 3] = NONE
    if tail == NONE:
        S[C_HEAD] = key
    else:
        P[tail, 3] = key
    S[C_TAIL] = key
    P[key, 1] |= CACHED
    S[N_CACHED] += 1


@njit(cache=True)
def pool_found(P, key):
    """``key in pool``: cached, or held and not being loaded."""
    flag = P[key, 1]
    return (flag & CACHED) != 0 or (P[key, 0] > 0 and (flag & PENDING) == 0)


@njit(cache=True)
def localized(local, column, ids, start, count, out, at, next_id):
    """A fleet's instance ``column`` numbers the blocks it sees on its own (its pool and CPU tier hold what it saw,
    not the whole run): ``out[at:at + count]`` = its ids of the run's ``ids[start:start + count]``
    (``local[id, column]`` - 1; 0: none yet), those it had not seen numbered from ``next_id``; the next id."""
    for i in range(count):
        run_id = ids[start + i]
        own = local[run_id, column]
        if own == 0:
            next_id += 1
            local[run_id, column] = next_id
            own = next_id
        out[at + i] = own - 1
    return next_id


@njit(cache=True)
def held(S, P, C, local, column, ids, start, count):
    """``Simulator.held`` on instance ``column`` of the run's ``ids[start:start + count]``: ``(blocks, GPU blocks)``
    from the head that a lookup would find now, on the GPU and then on the CPU (what a fleet's router sees)."""
    gpu_end = count
    for i in range(count):
        own = local[ids[start + i], column] - 1
        if own < 0 or not pool_found(P, own):
            gpu_end = i
            break
    end = gpu_end
    if S[CPU_CAP]:
        while end < count:
            own = local[ids[start + end], column] - 1
            if own < 0 or not C[own, 0]:
                break
            end += 1
    return end, gpu_end


@njit(cache=True)
def pool_hold(S, P, keys, start, count, anonymous, pending):
    """``BlockPool.hold``: hold ``keys[start:start + count]`` (distinct) and ``anonymous`` slots, or change nothing
    (False)."""
    end = start + count
    shared = 0
    for i in range(start, end):
        if P[keys[i], 0] > 0:
            shared += 1
    if anonymous + count - shared > S[BLOCKS] - S[N_HELD] - S[ANON]:
        return False
    if shared < count:  # out of the free queue (if there), held once more (one pass: the queue's order is the same)
        for i in range(start, end):
            key = keys[i]
            if P[key, 1] & CACHED:
                _unlink_cached(S, P, key)
            if P[key, 0] > 0:
                P[key, 0] += 1
            else:
                P[key, 0] = 1
                S[N_HELD] += 1
                if pending:
                    P[key, 1] |= PENDING
                    S[N_PENDING] += 1
    else:
        for i in range(start, end):
            P[keys[i], 0] += 1
    S[ANON] += anonymous
    excess = S[N_HELD] + S[N_CACHED] + S[ANON] - S[BLOCKS]
    for _ in range(excess):
        _unlink_cached(S, P, S[C_HEAD])
    return True


@njit(cache=True)
def pool_release(S, P, keys, start, end, step):
    """``BlockPool.release`` of ``keys[start:end:step]`` (anonymous slots apart: the caller's)."""
    for i in range(start, end, step):
        key = keys[i]
        count = P[key, 0]
        if count > 1:
            P[key, 0] = count - 1
        else:
            P[key, 0] = 0
            S[N_HELD] -= 1
            _append_cached(S, P, key)
    if S[N_PENDING]:  # BlockPool.release: ``if self.pending``
        pool_unpend(S, P, keys, start, end, step)


@njit(cache=True)
def pool_unpend(S, P, keys, start, end, step):
    """``BlockPool.loaded`` and ``uncounted``: their copies completed."""
    for i in range(start, end, step):
        key = keys[i]
        if P[key, 1] & PENDING:
            P[key, 1] &= ~PENDING
            S[N_PENDING] -= 1


# --- the CPU tier (kvlab/cache/eviction/lru.py LRU, equal-sized blocks) ----------------------------------------


@njit(cache=True)
def _cpu_unlink(S, C, key):
    before, after = C[key, 1], C[key, 2]
    if before == NONE:
        S[CPU_HEAD] = after
    else:
        C[before, 2] = after
    if after == NONE:
        S[CPU_TAIL] = before
    else:
        C[after, 1] = before


@njit(cache=True)
def _cpu_append(S, C, key):
    tail = S[CPU_TAIL]
    C[key, 1] = tail
    C[key, 2] = NONE
    if tail == NONE:
        S[CPU_HEAD] = key
    else:
        C[tail, 2] = key
    S[CPU_TAIL] = key


@njit(cache=True)
def cpu_access(S, C, key):
    """``LRU.access``: a hit moves to the end; a miss evicts the oldest until it fits, then goes at the end."""
    if C[key, 0]:
        if S[CPU_TAIL] != key:
            _cpu_unlink(S, C, key)
            _cpu_append(S, C, key)
        return
    while S[CPU_N] >= S[CPU_CAP]:
        oldest = S[CPU_HEAD]
        _cpu_unlink(S, C, oldest)
        C[oldest, 0] = 0
        S[CPU_N] -= 1
    _cpu_append(S, C, key)
    C[key, 0] = 1
    S[CPU_N] += 1


@njit(cache=True)
def cpu_refresh(S, C, key):
    if C[key, 0] and S[CPU_TAIL] != key:
        _cpu_unlink(S, C, key)
        _cpu_append(S, C, key)


# --- small queues -------------------------------------------------------------------------------------------------


@njit(cache=True)
def _push_front(S, W, slot):
    S[W_HEAD] = (S[W_HEAD] - 1) % len(W)
    W[S[W_HEAD]] = slot
    S[W_N] += 1


@njit(cache=True)
def _push_back(S, W, slot):
    W[(S[W_HEAD] + S[W_N]) % len(W)] = slot
    S[W_N] += 1


@njit(cache=True)
def _pop_front(S, W):
    slot = W[S[W_HEAD]]
    S[W_HEAD] = (S[W_HEAD] + 1) % len(W)
    S[W_N] -= 1
    return slot


@njit(cache=True)
def _earlier(EVF, EVI, a, b):
    return EVF[a] < EVF[b] or (EVF[a] == EVF[b] and EVI[a, E_ORDER] < EVI[b, E_ORDER])


@njit(cache=True)
def _push_event(S, EVF, EVI, H, EVFREE, when, kind, slot, koff, klen, gpu_end, cpu_end):
    """``Simulator._push``: an event at ``when``, after every earlier one pushed for the same time."""
    S[EVFREE_N] -= 1
    event = EVFREE[S[EVFREE_N]]
    S[ORDER] += 1
    EVF[event] = when
    EVI[event, E_ORDER] = S[ORDER]
    EVI[event, E_KIND] = kind
    EVI[event, E_SLOT] = slot
    EVI[event, E_KOFF] = koff
    EVI[event, E_KLEN] = klen
    EVI[event, E_GPU] = gpu_end
    EVI[event, E_CPU] = cpu_end
    i = S[EV_N]
    S[EV_N] += 1
    H[i] = event
    while i > 0:
        parent = (i - 1) >> 1
        if not _earlier(EVF, EVI, H[i], H[parent]):
            break
        H[i], H[parent] = H[parent], H[i]
        i = parent
    return event


@njit(cache=True)
def _pop_event(S, EVF, EVI, H):
    top = H[0]
    S[EV_N] -= 1
    n = S[EV_N]
    if n:
        H[0] = H[n]
        i = 0
        while True:
            left = 2 * i + 1
            if left >= n:
                break
            child = left
            if left + 1 < n and _earlier(EVF, EVI, H[left + 1], H[left]):
                child = left + 1
            if not _earlier(EVF, EVI, H[child], H[i]):
                break
            H[i], H[child] = H[child], H[i]
            i = child
    return top


# --- the engine (kvlab/simulator/events.py Simulator) ----------------------------------------------------------------


@njit(cache=True)
def _lookup_ids(R, arena, base, slot, start, end, out):
    """``out[:end - start]`` = lookup keys ``[start, end)``."""
    for i in range(start, end):
        out[i - start] = key_at(R, arena, base, slot, i)
    return end - start


@njit(cache=True)
def _upcoming(S, F, EVF, H, fed_arrival):
    """``Simulator._upcoming``: the next event or arrival, at most ``F[UNTIL]`` (a fleet's next arrival, which may
    come here: ``Simulator.wait`` and ``_run_length`` stop at it); -1.0 for none (the clock never goes below 0)."""
    upcoming = -1.0
    if S[EV_N]:
        upcoming = EVF[H[0]]
    if S[CURSOR] < S[FED]:
        arrival = fed_arrival[S[CURSOR]]
        if upcoming < 0 or arrival < upcoming:
            upcoming = arrival
    if F[UNTIL] < math.inf and (upcoming < 0 or F[UNTIL] < upcoming):
        upcoming = F[UNTIL]
    return upcoming


@njit(cache=True)
def _copy(S, F, copy_ms, link, blocks):
    """``Simulator._copy``: queue ``blocks`` on ``link`` (0: host to device, 1: device to host); when it completes."""
    seconds = copy_ms[blocks] / 1000
    free = H2D_FREE if link == 0 else D2H_FREE
    start = F[NOW] if F[NOW] > F[free] else F[free]
    F[free] = start + seconds
    if link == 0:
        F[BUSY_H2D] += seconds
        S[COPIED_H2D] += blocks
    else:
        F[BUSY_D2H] += seconds
        S[COPIED_D2H] += blocks
    return start + seconds


@njit(cache=True)
def run(
    S,
    F,
    R,
    RF,
    P,
    C,
    arena,
    fed_arrival,
    fed_ints,
    W,
    RUN,
    FREE,
    SKIP,
    EVF,
    EVI,
    H,
    EVFREE,
    KB,
    OUTF,
    OUTI,
    PK,
    PV,
    copy_ms,
    SCR,
    SCH,
    Q,
    QA,
    FT,
):
    """Run until done or until it lacks something (the module's docstring); the code is also ``S[CODE]``."""
    if S[N_QUERIES] or S[DECODE_QUERY]:  # the driver's answers (QA) to the queries of the last call
        for j in range(S[N_QUERIES]):
            set_price(S, PK, PV, prefill_key(Q[j, 0], Q[j, 1]), QA[j])
        if S[DECODE_QUERY]:
            set_price(S, PK, PV, S[DECODE_QUERY], F[DECODE_ANSWER])
        S[N_QUERIES] = S[DECODE_QUERY] = 0
    while True:
        if S[PHASE] == 1:  # a step scheduled, waiting for its prices
            code = _execute(
                S, F, R, RF, P, C, arena, fed_arrival, RUN,
                FREE, EVF, EVI, H, EVFREE, KB, OUTF, OUTI, PK, PV, copy_ms, SCR, SCH, Q, FT,
            )  # fmt: skip
            if code != DONE:
                S[CODE] = code
                return code
            S[PHASE] = 0
            continue
        # room for one step: its events (a load per waiting request, a store per running one) and stored keys
        if S[EV_N] + S[W_N] + S[MAX_SEQS] + 2 > len(H) or len(KB) - S[KB_END] < S[ALIVE_KEYS]:
            if not _compact_keys(S, EVI, H, KB) or S[EV_N] + S[W_N] + S[MAX_SEQS] + 2 > len(H):
                S[CODE] = NEED_ROOM
                return NEED_ROOM
        # Simulator._admit: the arrivals by now, then the events by now
        now = F[NOW]
        while S[CURSOR] < S[FED] and fed_arrival[S[CURSOR]] <= now:
            _arrive(S, F, R, RF, fed_arrival, fed_ints, W, FREE, S[CURSOR])
            S[CURSOR] += 1
        if S[CURSOR] == S[FED] and not S[EXHAUSTED]:
            S[CODE] = NEED_REQUESTS
            return NEED_REQUESTS
        while S[EV_N] and EVF[H[0]] <= now:
            event = _pop_event(S, EVF, EVI, H)
            _event(S, R, P, C, arena, FREE, EVI, KB, SCR,
                   event)  # fmt: skip
            EVFREE[S[EVFREE_N]] = event
            S[EVFREE_N] += 1
        if (S[RUN_N] or S[W_N] > S[LOADS]) and now < F[UNTIL]:
            code = _step(
                S, F, R, RF, P, C, arena, fed_arrival, W, RUN, SKIP, EVF, EVI, H, EVFREE, KB, copy_ms, SCR, SCH
            )
            if code != DONE:
                S[CODE] = code
                return code
            continue
        upcoming = _upcoming(S, F, EVF, H, fed_arrival)
        if upcoming < 0:
            break
        if upcoming >= F[UNTIL]:  # Simulator.advance(until): a fleet sends its next arrival (kvlab/simulator/fleet.py)
            S[CODE] = PAUSED
            return PAUSED
        if upcoming > F[NOW]:
            F[NOW] = upcoming
    if S[W_N]:
        S[CODE] = UNSERVED
        return UNSERVED
    S[CODE] = DONE
    return DONE


@njit(cache=True)
def _compact_keys(S, EVI, H, KB):
    """Move the stored keys of the events in flight (all from the first of them on) to the front of ``KB``; whether
    there is room for two steps' worth of stores now."""
    low = S[KB_END]
    for i in range(S[EV_N]):
        event = H[i]
        if EVI[event, E_KIND] == STORED and EVI[event, E_KLEN] > 0 and EVI[event, E_KOFF] < low:
            low = EVI[event, E_KOFF]
    if low:
        for i in range(low, S[KB_END]):
            KB[i - low] = KB[i]
        for i in range(S[EV_N]):
            event = H[i]
            if EVI[event, E_KIND] == STORED and EVI[event, E_KLEN] > 0:
                EVI[event, E_KOFF] -= low
        S[KB_END] -= low
    return len(KB) - S[KB_END] >= 2 * S[ALIVE_KEYS]  # else grown: a compaction every step or so would cost more


@njit(cache=True)
def _arrive(S, F, R, RF, fed_arrival, fed_ints, W, FREE, i):
    """``Simulator._arrive`` (fed_ints[i]: tokens, output, nkeys, offset, generated ids' base)."""
    when = fed_arrival[i]
    tokens, output = fed_ints[i, 0], fed_ints[i, 1]
    number = S[NUMBERED]
    S[NUMBERED] += 1
    if number == 0:
        F[FIRST] = when
    block = S[BLOCK]
    if (tokens + output - 1 + block - 1) // block > S[BLOCKS]:
        S[REFUSED] += 1
        return
    S[FREE_N] -= 1
    slot = FREE[S[FREE_N]]
    for field in range(R_SIZE):
        R[slot, field] = 0
    R[slot, R_NUMBER] = number
    R[slot, R_TOKENS] = tokens
    R[slot, R_OUTPUT] = output
    R[slot, R_NKEYS] = fed_ints[i, 2]
    R[slot, R_OFFSET] = fed_ints[i, 3]
    R[slot, R_GENBASE] = fed_ints[i, 4]
    R[slot, R_LENGTH] = tokens
    R[slot, R_GPU_HIT] = NONE
    R[slot, R_LGPU] = NONE
    R[slot, R_COPYING] = NONE
    RF[slot, RF_ARRIVAL] = when
    RF[slot, RF_SCHEDULED] = np.nan
    RF[slot, RF_FIRST_TOKEN] = np.nan
    S[ALIVE_KEYS] += fed_ints[i, 2]
    _push_back(S, W, slot)


@njit(cache=True)
def _free_slot(S, R, FREE, slot):
    S[ALIVE_KEYS] -= R[slot, R_NKEYS]
    FREE[S[FREE_N]] = slot
    S[FREE_N] += 1


@njit(cache=True)
def _event(S, R, P, C, arena, FREE, EVI, KB, SCR, event):
    """``Simulator._admit``'s events: a load or a store completed."""
    slot = EVI[event, E_SLOT]
    base = S[ARENA_BASE]
    if EVI[event, E_KIND] == LOADED:
        count = _lookup_ids(R, arena, base, slot, EVI[event, E_GPU], EVI[event, E_CPU], SCR)
        pool_unpend(S, P, SCR, 0, count, 1)
        R[slot, R_LOADING] = 0
        S[LOADS] -= 1
        return
    # stored: the CPU holds the copies (WriteThrough.cpu_after: the blocks from the GPU hit on, tail first)
    stored = R[slot, R_NKEYS]
    gpu_end = EVI[event, E_GPU]
    first = gpu_end if gpu_end < stored else stored
    offset = R[slot, R_OFFSET] - base
    if S[TAIL_FIRST]:
        for i in range(stored - 1, first - 1, -1):
            cpu_access(S, C, arena[offset + i])
    else:
        for i in range(first, stored):
            cpu_access(S, C, arena[offset + i])
    koff, klen = EVI[event, E_KOFF], EVI[event, E_KLEN]
    if R[slot, R_COPYING] == event:
        R[slot, R_COPYING] = NONE
        pool_unpend(S, P, KB, koff, koff + klen, 1)
    else:
        pool_release(S, P, KB, koff, koff + klen, 1)
    R[slot, R_STORING] -= 1
    if R[slot, R_DONE] and not R[slot, R_STORING]:
        _release(S, R, P, arena, EVI, KB, SCR, slot)
        _free_slot(S, R, FREE, slot)


@njit(cache=True)
def _release(S, R, P, arena, EVI, KB, SCR, slot):
    """``Simulator._release``: its blocks let go of, tail first (generated ones kept cached with ``keep``)."""
    copying = R[slot, R_COPYING]
    if copying != NONE:  # its store goes on holding them
        koff = EVI[copying, E_KOFF]
        pool_hold(S, P, KB, koff, EVI[copying, E_KLEN], 0, 0)
        R[slot, R_COPYING] = NONE
    held, anonymous = R[slot, R_HELD], R[slot, R_ANON]
    base = S[ARENA_BASE]
    if S[KEEP] and anonymous:
        block = S[BLOCK]
        full = R[slot, R_COMPUTED] // block
        if full > held + anonymous:
            full = held + anonymous
        count = _lookup_ids(R, arena, base, slot, held, full, SCR) if full > held else 0
        start, end, step = (count - 1, -1, -1) if S[TAIL_FIRST] else (0, count, 1)
        for i in range(start, end, step):  # BlockPool.park
            key = SCR[i]
            if P[key, 1] & CACHED:
                _unlink_cached(S, P, key)
            _append_cached(S, P, key)
    S[ANON] -= anonymous
    count = _lookup_ids(R, arena, base, slot, 0, held, SCR)
    if S[TAIL_FIRST]:
        pool_release(S, P, SCR, count - 1, -1, -1)
    else:
        pool_release(S, P, SCR, 0, count, 1)
    R[slot, R_HELD] = 0
    R[slot, R_ANON] = 0


@njit(cache=True)
def _hold(S, R, P, arena, SCR, slot, end, anonymous):
    """``Simulator._hold`` of its lookup keys from what it holds to ``end`` and ``anonymous`` more."""
    held = R[slot, R_HELD]
    count = _lookup_ids(R, arena, S[ARENA_BASE], slot, held, end, SCR)
    if not pool_hold(S, P, SCR, 0, count, anonymous, 0):
        return False
    R[slot, R_HELD] = held + count
    R[slot, R_ANON] += anonymous
    return True


@njit(cache=True)
def _allocate(S, R, P, arena, SCR, slot, tokens):
    """``Simulator.allocate``: the blocks of its first ``tokens`` tokens, those they fill keyed."""
    block = S[BLOCK]
    blocks = (tokens + block - 1) // block
    held, anonymous = R[slot, R_HELD], R[slot, R_ANON]
    have = held + anonymous
    keyed = tokens // block
    length = lookup_length(S, R, slot)
    if keyed > length:
        keyed = length
    if blocks <= have and keyed <= held:
        return True
    if keyed < held:
        keyed = held
    total = blocks if blocks > have else have
    return _hold(S, R, P, arena, SCR, slot, keyed, total - keyed - anonymous)


@njit(cache=True)
def _preempt(S, R, P, arena, W, EVI, KB, SCR, slot):
    """``Simulator.preempt``: its blocks freed, back to the front of the queue; its tokens computed again."""
    _release(S, R, P, arena, EVI, KB, SCR, slot)
    R[slot, R_COMPUTED] = 0
    R[slot, R_LGPU] = NONE
    R[slot, R_PREEMPTIONS] += 1
    S[PREEMPTIONS] += 1
    if R[slot, R_PREEMPTIONS] > S[MAX_PREEMPTIONS]:
        S[ERROR_NUMBER] = R[slot, R_NUMBER]
        S[ERROR_COUNT] = R[slot, R_PREEMPTIONS]
        return False
    _push_front(S, W, slot)
    return True


@njit(cache=True)
def _decoding(R, slot):
    return R[slot, R_GENERATED] > 0 and R[slot, R_COMPUTED] == R[slot, R_LENGTH] - 1


@njit(cache=True)
def _step(S, F, R, RF, P, C, arena, fed_arrival, W, RUN, SKIP, EVF, EVI, H, EVFREE, KB, copy_ms, SCR, SCH):
    """``VLLMScheduler.step`` (vLLM v1): the running requests first, the newest preempted when blocks run out, then the
    waiting ones; the step left for :func:`run` to execute (``S[PHASE]`` 1), or, with nothing to run, the clock moved
    on."""
    budget = S[MAX_BATCHED]
    n = 0
    preempted = False
    index = 0
    while index < S[RUN_N] and budget > 0:
        slot = RUN[index]
        tokens = R[slot, R_LENGTH] - R[slot, R_COMPUTED]
        if tokens > budget:
            tokens = budget
        fits = True
        while not _allocate(S, R, P, arena, SCR, slot, R[slot, R_COMPUTED] + tokens):
            S[RUN_N] -= 1
            victim = RUN[S[RUN_N]]
            if not _preempt(S, R, P, arena, W, EVI, KB, SCR, victim):
                return THRASH
            preempted = True
            if victim == slot:
                fits = False
                break
        if not fits:
            break
        SCH[n, 0] = slot
        SCH[n, 1] = tokens
        n += 1
        budget -= tokens
        index += 1
    if not preempted:
        n, budget = _schedule_waiting(S, F, R, RF, P, C, arena, W,
                                      RUN, SKIP, EVF, EVI, H, EVFREE, copy_ms, SCR, SCH, n, budget)  # fmt: skip
    if n == 0:
        if preempted:
            return DONE
        upcoming = _upcoming(S, F, EVF, H, fed_arrival)  # Simulator.wait
        if upcoming < 0:
            return STUCK
        if upcoming > F[NOW]:
            F[NOW] = upcoming
        return DONE
    S[N_SCHED] = n
    S[PREEMPTED] = 1 if preempted else 0
    S[PHASE] = 1  # run() executes it
    return DONE


@njit(cache=True)
def _find(S, R, P, C, arena, slot):
    """``Simulator._find``: ``(gpu_end, cpu_end)`` of its lookup keys."""
    base = S[ARENA_BASE]
    length = lookup_length(S, R, slot)
    gpu_end = length
    for i in range(length):
        if not pool_found(P, key_at(R, arena, base, slot, i)):
            gpu_end = i
            break
    cap = (R[slot, R_LENGTH] - 1) // S[BLOCK]  # a token short of the sequence, in whole blocks
    if gpu_end > cap:
        gpu_end = cap
    cpu_end = gpu_end
    if S[CPU_CAP]:
        cpu_end = length
        for i in range(gpu_end, length):
            if not C[key_at(R, arena, base, slot, i), 0]:
                cpu_end = i
                break
    return gpu_end, cpu_end


@njit(cache=True)
def _commit(S, R, C, arena, slot, gpu_end, cpu_end):
    """``Simulator._commit``: counted, and the CPU hit refreshed tail to head."""
    block = S[BLOCK]
    if S[CPU_CAP] and cpu_end > gpu_end:
        base = S[ARENA_BASE]
        for i in range(cpu_end - 1, gpu_end - 1, -1):
            cpu_refresh(S, C, key_at(R, arena, base, slot, i))
    R[slot, R_LGPU] = gpu_end
    R[slot, R_LCPU] = cpu_end
    length = R[slot, R_LENGTH]
    found = cpu_end * block if cpu_end * block < length else length
    R[slot, R_COMPUTED] = found if found < length - 1 else length - 1
    gpu = gpu_end * block if gpu_end * block < length else length
    S[QUERIES] += length
    S[Q_GPU] += gpu
    S[Q_CPU] += found - gpu
    if R[slot, R_GPU_HIT] == NONE:
        tokens = R[slot, R_TOKENS]
        gpu_hit = gpu_end * block if gpu_end * block < tokens else tokens
        cpu_hit = cpu_end * block if cpu_end * block < tokens else tokens
        R[slot, R_GPU_HIT] = gpu_hit
        R[slot, R_CPU_HIT] = cpu_hit - gpu_hit


@njit(cache=True)
def _schedule_waiting(
    S, F, R, RF, P, C, arena, W, RUN, SKIP, EVF, EVI, H, EVFREE,
    copy_ms, SCR, SCH, n, budget,
):  # fmt: skip
    """``Simulator.schedule_waiting`` (vLLM's: no reserve)."""
    block = S[BLOCK]
    skipped = 0
    while S[W_N] and budget > 0 and S[RUN_N] < S[MAX_SEQS]:
        slot = W[S[W_HEAD]]
        if R[slot, R_LOADING]:
            SKIP[skipped] = _pop_front(S, W)
            skipped += 1
            continue
        found = False
        gpu_end = cpu_end = 0
        computed = R[slot, R_COMPUTED]
        length = R[slot, R_LENGTH]
        if R[slot, R_LGPU] == NONE:
            found = True
            gpu_end, cpu_end = _find(S, R, P, C, arena, slot)
            if cpu_end > gpu_end:  # hold the CPU hit's blocks and wait for their load (Simulator._hold, pending)
                count = _lookup_ids(R, arena, S[ARENA_BASE], slot, 0, cpu_end, SCR)
                shared = 0
                for i in range(count):
                    if P[SCR[i], 0] > 0:
                        shared += 1
                if count - shared > S[BLOCKS] - S[N_HELD] - S[ANON]:
                    break
                pool_hold(S, P, SCR, 0, gpu_end, 0, 0)
                pool_hold(S, P, SCR, gpu_end, cpu_end - gpu_end, 0, 1)
                R[slot, R_HELD] = cpu_end
                _commit(S, R, C, arena, slot, gpu_end, cpu_end)
                R[slot, R_LOADING] = 1  # Simulator._load
                S[LOADS] += 1
                done = _copy(S, F, copy_ms, 0, cpu_end - gpu_end)
                _push_event(S, EVF, EVI, H, EVFREE, done, LOADED, slot, 0, 0, gpu_end, cpu_end)
                SKIP[skipped] = _pop_front(S, W)
                skipped += 1
                continue
            computed = gpu_end * block if gpu_end * block < length - 1 else length - 1
        tokens = length - computed
        if not S[CHUNKED] and tokens > budget:
            break
        if tokens > budget:
            tokens = budget
        if S[WHOLE]:  # VLLMScheduler.admits
            need = (length + block - 1) // block
            if found:
                count = _lookup_ids(R, arena, S[ARENA_BASE], slot, 0, gpu_end, SCR)
                for i in range(count):
                    if P[SCR[i], 0] > 0:
                        need -= 1
            else:
                need -= R[slot, R_HELD] + R[slot, R_ANON]
            if need > S[BLOCKS] - S[N_HELD] - S[ANON]:
                break
        if not _allocate(S, R, P, arena, SCR, slot, computed + tokens):
            break
        if found:
            _commit(S, R, C, arena, slot, gpu_end, cpu_end)
        _pop_front(S, W)
        RUN[S[RUN_N]] = slot
        S[RUN_N] += 1
        R[slot, R_JOINED] = 1
        if np.isnan(RF[slot, RF_SCHEDULED]):
            RF[slot, RF_SCHEDULED] = F[NOW]
        SCH[n, 0] = slot
        SCH[n, 1] = tokens
        n += 1
        budget -= tokens
    for i in range(skipped - 1, -1, -1):
        _push_front(S, W, SKIP[i])
    return n, budget


@njit(cache=True)
def _decode_mean(context, batch, step):
    """``kvlab.simulator.cost.context_step``."""
    return math.ceil(math.ceil(context / batch) / step) * step


@njit(cache=True)
def _execute(
    S, F, R, RF, P, C, arena, fed_arrival, RUN, FREE, EVF, EVI,
    H, EVFREE, KB, OUTF, OUTI, PK, PV, copy_ms, SCR, SCH, Q, FT,
):  # fmt: skip
    """``Simulator.execute``: the step priced (or, with a price missing, the queries in ``Q`` and NEED_PRICES), its
    tokens computed at its end, its stores queued, its finished requests done."""
    n = S[N_SCHED]
    # the prices first, changing nothing: what is missing goes to the driver
    missing = 0
    decodes = 0
    context = 0
    for j in range(n):
        slot, tokens = SCH[j, 0], SCH[j, 1]
        if tokens == 1 and not R[slot, R_JOINED] and _decoding(R, slot):
            decodes += 1
            context += R[slot, R_LENGTH]
        else:
            computed = R[slot, R_COMPUTED]
            if price_of(S, PK, PV, prefill_key(computed + tokens, computed)) < 0:
                Q[missing, 0] = computed + tokens
                Q[missing, 1] = computed
                missing += 1
    S[DECODE_QUERY] = 0
    if decodes:
        mean = _decode_mean(context, decodes, S[CONTEXT_STEP])
        if price_of(S, PK, PV, decode_key(decodes, mean)) < 0:
            S[DECODE_QUERY] = decode_key(decodes, mean)
            S[DECODE_BATCH], S[DECODE_MEAN] = decodes, mean
            missing += 1
    if missing:
        S[N_QUERIES] = missing - (1 if S[DECODE_QUERY] else 0)
        return NEED_PRICES
    prefill_ms = 0.0
    decodes = 0
    context = 0
    for j in range(n):
        slot, tokens = SCH[j, 0], SCH[j, 1]
        if tokens == 1 and not R[slot, R_JOINED] and _decoding(R, slot):
            decodes += 1
            context += R[slot, R_LENGTH]
        else:
            R[slot, R_JOINED] = 0
            computed = R[slot, R_COMPUTED]
            prefill_ms += price_of(S, PK, PV, prefill_key(computed + tokens, computed))
    decode_ms = 0.0
    if decodes:
        decode_ms = price_of(S, PK, PV, decode_key(decodes, _decode_mean(context, decodes, S[CONTEXT_STEP])))
    step_ms = prefill_ms + decode_ms
    if decodes and decodes < n:
        S[MIXED] += 1
    start = F[NOW]
    steps = 1
    if decodes == n and not S[PREEMPTED]:
        steps = _run_length(S, F, R, EVF, H, fed_arrival, RUN, step_ms, start)
    end = start + steps * step_ms / 1000
    S[STEPS] += steps
    finished = 0
    run = steps > 1
    for j in range(n):
        slot, tokens = SCH[j, 0], SCH[j, 1]
        before = R[slot, R_COMPUTED]
        if run:
            _allocate(S, R, P, arena, SCR, slot, before + steps)
            tokens = steps
        computed = before + tokens
        R[slot, R_COMPUTED] = computed
        if computed < R[slot, R_LENGTH]:
            continue
        sampled = tokens if run else 1
        R[slot, R_GENERATED] += sampled
        R[slot, R_LENGTH] += sampled
        if np.isnan(RF[slot, RF_FIRST_TOKEN]):
            RF[slot, RF_FIRST_TOKEN] = end
            if S[FLEET]:  # a fleet's router learns of it (Simulator.watch): its number logged for the driver
                FT[S[FT_N]] = R[slot, R_NUMBER]
                S[FT_N] += 1
        if before < R[slot, R_TOKENS] <= computed:
            _store(S, F, R, P, C, arena, EVF, EVI, H, EVFREE, KB, copy_ms, slot)
        if R[slot, R_GENERATED] >= R[slot, R_OUTPUT]:
            SCH[finished, 2] = slot
            finished += 1
    F[NOW] = end
    for j in range(finished):
        _finish(S, F, R, RF, P, arena, RUN, FREE, EVI, KB, SCR, OUTF, OUTI,
                SCH[j, 2], end)  # fmt: skip
    return DONE


@njit(cache=True)
def _run_length(S, F, R, EVF, H, fed_arrival, RUN, step_ms, start):
    """``Simulator._run_length``: how many decode steps of this batch run alike."""
    running = S[RUN_N]
    steps = R[RUN[0], R_OUTPUT] - R[RUN[0], R_GENERATED]
    total = 0
    for i in range(running):
        slot = RUN[i]
        left = R[slot, R_OUTPUT] - R[slot, R_GENERATED]
        if left < steps:
            steps = left
        total += R[slot, R_LENGTH]
    mean = -(-total // running)
    grain = -(-mean // S[CONTEXT_STEP]) * S[CONTEXT_STEP] - mean + 1
    if grain < steps:
        steps = grain
    upcoming = _upcoming(S, F, EVF, H, fed_arrival)
    if upcoming >= 0 and step_ms > 0:
        until = math.ceil((upcoming - start) * 1000 / step_ms)
        if until < 1:
            until = 1
        if until < steps:
            steps = until
    if steps <= 1:
        return 1
    room = S[BLOCKS] - S[N_HELD] - S[ANON]
    block = S[BLOCK]
    while steps > 1:
        more = 0
        for i in range(running):
            slot = RUN[i]
            extra = (R[slot, R_COMPUTED] + steps + block - 1) // block - R[slot, R_HELD] - R[slot, R_ANON]
            if extra > 0:
                more += extra
        if more <= room:
            break
        steps -= 1
    return steps


@njit(cache=True)
def _store(S, F, R, P, C, arena, EVF, EVI, H, EVFREE, KB, copy_ms, slot):
    """``Simulator._store``: its computed prompt blocks the CPU lacks copied out (write-through), held until done."""
    if not S[CPU_CAP]:
        return
    gpu_end, cpu_end = R[slot, R_LGPU], R[slot, R_LCPU]
    nkeys = R[slot, R_NKEYS]
    offset = R[slot, R_OFFSET] - S[ARENA_BASE]
    first = gpu_end if gpu_end > cpu_end else cpu_end
    koff = S[KB_END]
    count = 0
    for i in range(first, nkeys):
        key = arena[offset + i]
        if not C[key, 0]:
            KB[koff + count] = key
            count += 1
    if S[TAIL_FIRST]:
        for i in range(count // 2):
            KB[koff + i], KB[koff + count - 1 - i] = KB[koff + count - 1 - i], KB[koff + i]
    S[KB_END] = koff + count
    copying = R[slot, R_HELD] >= nkeys
    if not copying:
        pool_hold(S, P, KB, koff, count, 0, 0)
    done = _copy(S, F, copy_ms, 1, count) if count else F[NOW]
    R[slot, R_STORING] += 1
    event = _push_event(S, EVF, EVI, H, EVFREE, done, STORED, slot, koff, count, gpu_end, cpu_end)
    if copying:
        R[slot, R_COPYING] = event


@njit(cache=True)
def _finish(S, F, R, RF, P, arena, RUN, FREE, EVI, KB, SCR, OUTF, OUTI, slot, end):
    """``Simulator._finish``: its times and counts; its blocks freed (once its stores complete)."""
    if R[slot, R_STORING]:
        R[slot, R_DONE] = 1
    else:
        _release(S, R, P, arena, EVI, KB, SCR, slot)
    running = S[RUN_N]
    for i in range(running):
        if RUN[i] == slot:
            for j in range(i, running - 1):
                RUN[j] = RUN[j + 1]
            break
    S[RUN_N] = running - 1
    S[REQUESTS] += 1
    S[INPUT] += R[slot, R_TOKENS]
    S[GPU_HIT] += R[slot, R_GPU_HIT]
    S[CPU_HIT] += R[slot, R_CPU_HIT]
    output = R[slot, R_OUTPUT]
    S[OUTPUT] += output
    arrival, first_token = RF[slot, RF_ARRIVAL], RF[slot, RF_FIRST_TOKEN]
    row = S[FINISHED]
    S[FINISHED] += 1
    OUTF[row, 0] = arrival
    OUTF[row, 1] = (RF[slot, RF_SCHEDULED] - arrival) * 1000
    OUTF[row, 2] = (first_token - arrival) * 1000
    OUTF[row, 3] = (end - first_token) * 1000 / (output - 1) if output > 1 else np.nan
    OUTF[row, 4] = (end - arrival) * 1000
    OUTI[row, 0] = R[slot, R_NUMBER]
    OUTI[row, 1] = R[slot, R_TOKENS]
    OUTI[row, 2] = output
    OUTI[row, 3] = R[slot, R_GPU_HIT]
    OUTI[row, 4] = R[slot, R_CPU_HIT]
    OUTI[row, 5] = R[slot, R_PREEMPTIONS]
    F[LAST] = end
    if not R[slot, R_STORING]:
        _free_slot(S, R, FREE, slot)
