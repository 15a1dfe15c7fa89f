"""The compiled loop of ``kvlab/cache/compiled.py``: write-through over two LRU tiers, request by request.

Each tier is a doubly linked recency list threaded through one array indexed by key: per key the key before it,
the key after it and its stored size (0: absent), one cache line per key.
"""

from numba import njit

from kvlab.util.kernels import discard_damaged

discard_damaged(__file__)  # a damaged cache of this module's kernels compiles again, not fails

__all__ = ["serve"]

GPU, CPU = 0, 1
NONE = -1
BEFORE, AFTER, SIZE = 0, 1, 2  # a key's entry in a tier


@njit(cache=True, inline="always")
def _unlink(state, tier, key, ends):
    previous, following = state[tier, key, BEFORE], state[tier, key, AFTER]
    if previous != NONE:
        state[tier, previous, AFTER] = following
    else:
        ends[tier, 0] = following
    if following != NONE:
        state[tier, following, BEFORE] = previous
    else:
        ends[tier, 1] = previous


@njit(cache=True, inline="always")
def _append(state, tier, key, ends):
    last = ends[tier, 1]
    state[tier, key, BEFORE] = last
    state[tier, key, AFTER] = NONE
    if last != NONE:
        state[tier, last, AFTER] = key
    else:
        ends[tier, 0] = key
    ends[tier, 1] = key


@njit(cache=True, inline="always")
def _refresh(state, tier, key, ends):
    if ends[tier, 1] != key:
        _unlink(state, tier, key, ends)
        _append(state, tier, key, ends)


@njit(cache=True, inline="always")
def _access(state, tier, key, size, used, ends, capacity):
    """The lab's LRU access: a hit is refreshed; a miss evicts the least recent until it fits, unless it is
    larger than the whole room (then nothing is stored or evicted)."""
    if state[tier, key, SIZE] > 0:
        _refresh(state, tier, key, ends)
        return
    if size > capacity[tier]:
        return
    limit = capacity[tier] - size
    while used[tier] > limit:
        victim = ends[tier, 0]
        used[tier] -= state[tier, victim, SIZE]
        state[tier, victim, SIZE] = 0
        _unlink(state, tier, victim, ends)
    _append(state, tier, key, ends)
    state[tier, key, SIZE] = size
    used[tier] += size


@njit(cache=True)
def serve(
    state,
    used,
    ends,
    capacity,
    rounds,
    tokens,
    counts,
    keys,
    block,
    keep_partial,
    tail_first,
    on_gpu_hit,
    totals,
    served,
    per_request,
):
    start = 0
    has_cpu = capacity[CPU] > 0
    for request in range(len(counts)):
        count = counts[request]
        length = tokens[request]
        row = rounds[request]
        totals[row, 0] += 1
        totals[row, 1] += count
        totals[row, 2] += length
        if count == 0:
            continue
        gpu_end = 0
        while gpu_end < count and state[GPU, keys[start + gpu_end], SIZE] > 0:
            gpu_end += 1
        cpu_end = gpu_end
        if has_cpu:
            while cpu_end < count and state[CPU, keys[start + cpu_end], SIZE] > 0:
                cpu_end += 1
        gpu_tokens = min(gpu_end * block, length)
        cpu_tokens = min(cpu_end * block, length) - gpu_tokens
        totals[row, 3] += gpu_end
        totals[row, 4] += cpu_end - gpu_end
        totals[row, 5] += gpu_tokens
        totals[row, 6] += cpu_tokens
        if per_request:
            served[request, 0] = gpu_end
            served[request, 1] = cpu_end - gpu_end
            served[request, 2] = gpu_tokens
            served[request, 3] = cpu_tokens
        last = length - block * (count - 1)  # the last block's size
        full = count if last == block else count - 1
        stored = count if keep_partial else full
        for step in range(stored):  # the GPU: every stored block accessed, in the eviction order
            index = stored - 1 - step if tail_first else step
            _access(state, GPU, keys[start + index], block if index < full else last, used, ends, capacity)
        if has_cpu:
            gpu_hit = min(gpu_end, stored)
            for step in range(stored):
                index = stored - 1 - step if tail_first else step
                key = keys[start + index]
                size = block if index < full else last
                if index >= gpu_hit or on_gpu_hit == 3:
                    _access(state, CPU, key, size, used, ends, capacity)
                elif on_gpu_hit == 1:
                    if state[CPU, key, SIZE] > 0:
                        _refresh(state, CPU, key, ends)
                elif on_gpu_hit == 2:
                    if state[CPU, key, SIZE] == 0:
                        _access(state, CPU, key, size, used, ends, capacity)
        start += count
