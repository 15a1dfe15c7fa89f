"""Exact LRU hit curves: the hits at every capacity from one pass (``kvlab/curves/stack_distance.py``).

Two uses:

* :func:`lru_curve`: a plain stream of sized accesses through the lab's ``LRUCache``.
* :func:`tier_curve`: the tokens a tier of the block-level prefix cache serves, per round, at
  every room of that tier: the GPU tier (the same in every write policy), the CPU tier of
  write-through at a fixed GPU room (it sees exactly the blocks the GPU did not serve), or the disk
  tier below both at fixed GPU and CPU rooms (it sees exactly what both missed). All use
  LRU and the replay's rules (``kvlab/cache/prefix.py``): a request is looked up before its blocks
  are written, so a block counts when it was present at the lookup and so were all before it.

A curve is a step function: ``values[:, i]`` holds from ``capacities[i]`` up to the next
capacity. It need not rise everywhere: an entry larger than the room never evicts, so a small
cache can keep what a larger one loses.

The command is ``kvlab mrc`` (``kvlab/cli/mrc.py``).
"""

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numba import njit

from kvlab.cache.compiled import FOOTPRINT as COMPILED
from kvlab.cache.compiled import CompiledLRU
from kvlab.cache.prefix import EVICTION_ORDERS, PARTIAL_BLOCKS, Blocks, choose
from kvlab.curves.equal_sizes import equal_sizes, levels
from kvlab.curves.stack_distance import INFINITY, _grow, last_positions, presence_intervals
from kvlab.loop import ratio
from kvlab.util.kernels import compiled, discard_damaged
from kvlab.util.memory import Footprint
from kvlab.workloads.stream import load, requests_of, round_sums

discard_damaged(__file__)  # a damaged cache of this module's kernels compiles again, not fails

__all__ = ["FOOTPRINT", "Curve", "lru_curve", "tier_curve"]

# What a curve holds (kvlab/util/memory.py): per access its key, the Fenwick tree, the batches while they are joined
# (int32 each); per request its columns and what the GPU served; per distinct block the hash table of dense ids,
# its latest access, its level per round and the GPU's state. The general path (blocks of several sizes) holds
# about ten times more.
FOOTPRINT = Footprint(access=4 + 4 + 4, request=5 * 8 + 4 * 8, key=88, fixed=COMPILED.fixed)  # bench/memory_footprint
GENERAL = Footprint(access=400, request=100, key=150, fixed=COMPILED.fixed)  # Python lists of the stream, then arrays


@dataclass(frozen=True)
class Curve:
    """Per-round hits (rows) of a step function of the capacity; ``capacities[0]`` is 0.

    ``inputs`` is what each round asks for (tokens, or accesses) and ``base`` what a tier in front
    already served of it (the GPU's tokens, for the CPU tier's curve), per round.
    """

    rounds: tuple
    capacities: np.ndarray
    values: np.ndarray  # shape (len(rounds), len(capacities))
    inputs: np.ndarray
    base: np.ndarray

    def total(self):
        """The rounds added up, one value per capacity."""
        return self.values.sum(axis=0)

    def at(self, capacity):
        """Per-round values at ``capacity`` (a whole number >= 0)."""
        return self.values[:, np.searchsorted(self.capacities, capacity, side="right") - 1]

    def final(self):
        """Per-round values at an unlimited capacity."""
        return self.values[:, -1]

    def smallest_reaching(self, value, values=None):
        """The smallest capacity whose total (or ``values``, one per capacity) reaches ``value``; None if none."""
        reached = np.flatnonzero((self.total() if values is None else values) >= value)
        return int(self.capacities[reached[0]]) if len(reached) else None

    def smallest_for_ratio(self, ratio):
        """The smallest capacity at which (base + hits) / inputs over all rounds reaches ``ratio``; None if none."""
        need = math.ceil(Fraction(str(ratio)) * int(self.inputs.sum())) - int(self.base.sum())  # 0.9 is 9/10
        return self.smallest_reaching(max(need, 0))


def curve_from_intervals(owner, start, end, weights, groups, rounds, inputs, base):
    """Add ``weights[owner]`` over each interval, per group ``groups[owner]``: one row per round."""
    ends = end < INFINITY
    capacities = np.unique(np.concatenate(([0], start, end[ends])))
    deltas = np.zeros((len(rounds), len(capacities) + 1), dtype=np.int64)
    np.add.at(deltas, (groups[owner], np.searchsorted(capacities, start)), weights[owner])
    np.add.at(deltas, (groups[owner[ends]], np.searchsorted(capacities, end[ends])), -weights[owner[ends]])
    values = np.cumsum(deltas, axis=1)[:, :-1]
    return Curve(
        tuple(rounds), capacities, values, np.asarray(inputs, dtype=np.int64), np.asarray(base, dtype=np.int64)
    )


def lru_curve(keys, sizes, weigh_by_size=False):
    """Hits of ``LRUCache(capacity).access(key, size)`` over the stream, at every capacity.

    With ``weigh_by_size`` a hit counts its size (hit tokens or bytes) instead of 1.
    """
    keys = np.asarray(keys, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    owner, start, end = presence_intervals(keys, sizes, np.arange(len(keys)), last_positions(keys))
    weights = sizes if weigh_by_size else np.ones(len(keys), dtype=np.int64)
    inputs = [int(weights.sum())]
    return curve_from_intervals(owner, start, end, weights, np.zeros(len(keys), dtype=np.int64), ["all"], inputs, [0])


class _Stream:
    """A tier's accesses (keys and sizes) and its lookups, built request by request (the general path)."""

    def __init__(self):
        self.keys, self.sizes, self.last = [], [], {}
        self.query_time, self.query_previous, self.query_request = [], [], []
        self.query_weight, self.query_round = [], []

    def look_up(self, keys, first, request, round_index, blocks):
        """Queries for ``keys[first:]`` at this point, until a key this tier never had."""
        time = len(self.keys)
        last = self.last
        for index in range(first, len(keys)):
            previous = last.get(keys[index])
            if previous is None:
                break
            self.query_time.append(time)
            self.query_previous.append(previous)
            self.query_request.append(request)
            self.query_weight.append(blocks.block if index < len(keys) - 1 else blocks.last)
            self.query_round.append(round_index)

    def access(self, keys, order, blocks):
        """The tier's accesses of ``keys[i]`` for ``i`` in ``order``."""
        for index in order:
            key = keys[index]
            self.last[key] = len(self.keys)
            self.keys.append(key)
            self.sizes.append(blocks.block if index < blocks.full else blocks.last)

    def curve(self, rounds, inputs, base):
        times = np.array(self.query_time, dtype=np.int64)
        owner, start, end = presence_intervals(
            np.array(self.keys, dtype=np.int64),
            np.array(self.sizes, dtype=np.int64),
            times,
            np.array(self.query_previous, dtype=np.int64),
        )
        owner, start, end = _served(owner, start, end, np.array(self.query_request, dtype=np.int64))
        return curve_from_intervals(
            owner,
            start,
            end,
            np.array(self.query_weight, dtype=np.int64),
            np.array(self.query_round, dtype=np.int64),
            rounds,
            inputs,
            base,
        )


def tier_curve(
    workload,
    partial_blocks="drop",
    eviction_order="tail-first",
    gpu_tokens=None,
    before_compile=None,
    meter=None,
    method=None,
    cpu_tokens=None,
    instances=1,
    router="round-robin",
):
    """Tokens served per round by the GPU tier (``gpu_tokens`` None), by the CPU tier of write-through at GPU room
    ``gpu_tokens``, or by the disk tier below both at GPU and CPU rooms ``gpu_tokens`` and ``cpu_tokens``
    (``kvlab/cache/tiers.py``: it sees exactly the blocks the two above did not serve), at every room of that tier
    (LRU on every tier). ``before_compile()`` is
    called once the workload is read, if the kernels are still to be compiled (to say so); ``meter``
    (:class:`kvlab.util.memory.Meter`) stops a workload too large for the memory allowed. ``method``:
    ``"equal"`` (blocks of one size, ``kvlab/curves/equal_sizes.py``), ``"general"`` (any sizes), or None
    for the first that applies; both give the same curve. With ``instances`` > 1: the curve of the CPU tier that
    ``instances`` instances of GPU room ``gpu_tokens`` share, behind ``router`` (``kvlab/fleet/``): its room the
    pool's, and each request's GPU prefix its own instance's; the router must not read the CPU tier."""
    if workload.token_bound() >= 2**62:  # the curve's sums are 64-bit: past this they would wrap, not fail
        raise ValueError(
            f"the workload's tokens may add up to {workload.token_bound():,}: the exact curve counts in 64 bits"
            " (at most 2**62 tokens in all); kvlab replay counts exactly at any size"
        )
    block = workload.block_tokens
    keep = choose("partial_blocks", partial_blocks, PARTIAL_BLOCKS) == "keep"
    choose("eviction_order", eviction_order, EVICTION_ORDERS)
    tail_first = eviction_order == "tail-first"
    columns, keys = load(workload, meter)
    rounds = len(workload.rounds)
    inputs = round_sums(columns.rounds, columns.tokens, rounds)
    first = np.zeros(len(columns.counts), dtype=np.int64)
    base = np.zeros(rounds, dtype=np.int64)
    if before_compile is not None and not compiled():
        before_compile()
    if instances > 1:  # a fleet's GPU tiers in front of the CPU tier they share (kvlab/fleet/)
        from kvlab.cache.interface import CacheSettings
        from kvlab.fleet import gpu_served

        rules = {"partial_blocks": partial_blocks, "eviction_order": eviction_order}
        settings = CacheSettings(gpu_tokens=gpu_tokens, cpu_tokens=0, block_tokens=block, **rules)
        served = gpu_served(workload, settings, instances, router)
        first = served[:, 0]
        base = round_sums(columns.rounds, served[:, 2], rounds)
    elif gpu_tokens is not None:  # the tiers in front alone decide what reaches this one
        above = CompiledLRU(
            gpu_tokens, cpu_tokens or 0, block, partial_blocks=partial_blocks, eviction_order=eviction_order
        )
        served = above.served(columns, rounds)
        first = served[:, 0] + served[:, 1]
        base = round_sums(columns.rounds, served[:, 2] + served[:, 3], rounds)
    equal = equal_sizes(columns, block, keep) and block * (keys + 2) < INFINITY
    small = rounds * (keys + 2) <= 4 * len(columns.keys) + 2**20  # the table of levels per round
    if method == "equal" and not equal:
        raise ValueError("the equal-sizes curve needs blocks of one size: partial_blocks drop")
    if method == "equal" or (method is None and equal and small):
        served = levels(columns, rounds, first, block, keep, tail_first, keys)
        return curve_from_levels(served, block, workload.rounds, inputs, base)
    if meter is not None:
        meter.check(len(columns.keys), len(columns.counts), keys, footprint=GENERAL)
    stream = _Stream()
    for number, (round_index, _, request_keys, tokens) in enumerate(requests_of(columns)):
        if not request_keys:
            continue
        blocks = Blocks(request_keys, tokens, block, keep)
        stream.look_up(request_keys, int(first[number]), number, round_index, blocks)
        hit = min(int(first[number]), blocks.stored)
        order = range(blocks.stored - 1, hit - 1, -1) if tail_first else range(hit, blocks.stored)
        stream.access(request_keys, order, blocks)
    return stream.curve(workload.rounds, inputs, base)


def curve_from_levels(served, block, rounds, inputs, base):
    """The curve of :func:`kvlab.curves.equal_sizes.levels`' tokens per round and level (room ``block x level``)."""
    used = np.flatnonzero(served.any(axis=0))
    values = np.cumsum(served[:, used], axis=1)
    return Curve(
        tuple(rounds),
        np.concatenate(([0], used * block)).astype(np.int64),
        np.concatenate((np.zeros((len(rounds), 1), dtype=np.int64), values), axis=1),
        np.asarray(inputs, dtype=np.int64),
        np.asarray(base, dtype=np.int64),
    )


@njit(cache=True)
def _served(owner, start, end, request):
    """Where each looked-up block is served: present, and so is every block before it in its request.

    Queries of one request are consecutive, head first; the result has the same layout.
    """
    out_owner = np.empty(owner.shape[0], dtype=np.int64)
    out_start = np.empty(owner.shape[0], dtype=np.int64)
    out_end = np.empty(owner.shape[0], dtype=np.int64)
    current_start = np.empty(owner.shape[0] + 1, dtype=np.int64)
    current_end = np.empty(owner.shape[0] + 1, dtype=np.int64)
    next_start = np.empty(owner.shape[0] + 1, dtype=np.int64)
    next_end = np.empty(owner.shape[0] + 1, dtype=np.int64)
    used = 0
    i = 0
    queries = request.shape[0]
    held = 0  # intervals of the running intersection
    for q in range(queries):
        begin = i
        while i < owner.shape[0] and owner[i] == q:
            i += 1
        if q == 0 or request[q] != request[q - 1]:
            held = i - begin
            current_start[:held] = start[begin:i]
            current_end[:held] = end[begin:i]
        else:
            count, a, b = 0, 0, begin
            while a < held and b < i:
                lo = max(current_start[a], start[b])
                hi = min(current_end[a], end[b])
                if lo < hi:
                    next_start[count], next_end[count] = lo, hi
                    count += 1
                if current_end[a] < end[b]:
                    a += 1
                else:
                    b += 1
            held = count
            current_start[:held] = next_start[:held]
            current_end[:held] = next_end[:held]
        if used + held > out_owner.shape[0]:
            grown = 2 * (used + held)
            out_owner = _grow(out_owner, grown, used)
            out_start = _grow(out_start, grown, used)
            out_end = _grow(out_end, grown, used)
        for k in range(held):
            out_owner[used], out_start[used], out_end[used] = q, current_start[k], current_end[k]
            used += 1
    return out_owner[:used].copy(), out_start[:used].copy(), out_end[:used].copy()


def cliffs(curve, target=None):
    """What the curve says in a few numbers: the reuse it can give and the smallest room for it (and for
    ``target``, a token hit ratio over all rounds counting what the tier in front served), overall and per round."""
    final = curve.final()
    inputs, base = int(curve.inputs.sum()), int(curve.base.sum())
    reusable = int(final.sum())
    found = {
        "input_tokens": inputs,
        "served_in_front_tokens": base,
        "reusable_tokens": reusable,
        "max_token_hit_ratio": ratio(base + reusable, inputs),
        "tokens_for_full_reuse": curve.smallest_reaching(reusable),
    }
    if target is not None:
        found["target_hit_ratio"] = target
        found["tokens_for_target"] = curve.smallest_for_ratio(target)
    found["rounds"] = [
        {
            "round": name,
            "input_tokens": int(curve.inputs[index]),
            "served_in_front_tokens": int(curve.base[index]),
            "reusable_tokens": int(final[index]),
            "tokens_for_full_reuse": curve.smallest_reaching(final[index], curve.values[index]),
        }
        for index, name in enumerate(curve.rounds)
    ]
    return found


def curve_csv(curve, tier):
    """The curve as CSV text: one row per step (its room), the hit tokens per round and in all, the hit ratio (6
    decimals; empty where no token came in)."""
    import numpy as np

    total = curve.total()
    inputs = int(curve.inputs.sum())
    columns = {f"{tier}_tokens": curve.capacities}
    columns |= {f"{name}_{tier}_hit_tokens": curve.values[index] for index, name in enumerate(curve.rounds)}
    columns[f"{tier}_hit_tokens"] = total
    columns["token_hit_ratio"] = np.round((total + int(curve.base.sum())) / inputs, 6) if inputs else [""] * len(total)
    rows = zip(*(np.asarray(values).tolist() for values in columns.values()), strict=True)
    return "".join(",".join(map(str, row)) + "\n" for row in [columns, *rows])
