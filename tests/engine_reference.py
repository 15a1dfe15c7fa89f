"""A brute-force model of the engine's scheduler and GPU pool, written apart from ``kvlab/simulator``: one step at a
time (no runs of decode steps priced at once), the free queue a plain list, every block a Python object, no CPU tier.

The rules it follows are vLLM v1's as ``kvlab/simulator/events.py`` states them: running requests first, each its
next chunk (or one decode token) within the step's budget, the newest running request preempted while a
request's blocks do not fit; then, if nothing was preempted, waiting requests in order while the budget and the
sequence limit allow, each looked up again (its hit a token short of its sequence, in whole blocks) and admitted only
if its whole sequence fits the free blocks (vLLM's ``scheduler_reserve_full_isl``); a block keyed once filled; a
request's blocks freed tail first into the free queue, its full generated blocks kept there when ``keep``; a step's
tokens computed at its end.
"""

import math

from kvlab.simulator.cost import context_step


class ToyCost:
    """A cost with the engine's interface: linear prefills, a decode batch by its size and its context's grain."""

    def __init__(self, block_tokens):
        self.block_tokens = block_tokens

    def prefill_ms(self, tokens, cached):
        return 1.0 + 0.01 * (tokens - cached) + 0.001 * cached

    def decode_ms(self, batch, context):
        return 2.0 + 0.1 * batch + 0.0001 * context_step(context, batch) * batch

    def copy_ms(self, blocks):
        return 0.5 * blocks if blocks else 0.0

    def known(self):
        """No prices known before a run (StepCost.known: the database's memo)."""
        import numpy as np

        rows = np.zeros((0, 2), dtype=np.int64)
        return rows, np.zeros(0), rows, np.zeros(0)

    def describe(self):
        return {"latency_source": "toy"}


class Slot:
    """One request's state in the reference."""

    def __init__(self, number, arrival, keys, tokens, output, block):
        self.number, self.arrival, self.tokens, self.output = number, arrival, tokens, max(1, output)
        self.keys = list(keys[: tokens // block])
        self.computed = self.generated = self.anonymous = self.preemptions = 0
        self.held = []
        self.gpu_hit = self.scheduled = self.first_token = self.finished = None

    @property
    def length(self):
        return self.tokens + self.generated


def reference(requests, blocks, block, budget, max_seqs, keep, cost):
    """``{number: (first_token, finished, gpu_hit, preemptions, scheduled)}`` of ``requests`` (``(arrival, keys,
    tokens, output)`` in arrival order) through a pool of ``blocks`` blocks of ``block`` tokens."""
    slots = [Slot(number, *request, block) for number, request in enumerate(requests)]
    held, free = {}, []  # key -> holders; cached keys no one holds, least recently freed first
    anonymous = [0]
    waiting, running, done = [], [], {}
    upcoming = [slot for slot in slots if math.ceil((slot.tokens + slot.output - 1) / block) <= blocks]
    upcoming.reverse()
    now = 0.0

    def lookup_keys(slot):
        keys = list(slot.keys)
        if keep and slot.generated:
            keys += [("generated", slot.number, index) for index in range(len(slot.keys), slot.length // block)]
        return keys

    def found(keys):
        count = 0
        for key in keys:
            if key not in held and key not in free:
                break
            count += 1
        return count

    def hold(slot, keys, extra):
        new = [key for key in keys if key not in held]
        if len(new) + extra > blocks - len(held) - anonymous[0]:
            return False
        for key in keys:
            if key in held:
                held[key] += 1
            else:
                if key in free:
                    free.remove(key)
                held[key] = 1
        anonymous[0] += extra
        while len(held) + len(free) + anonymous[0] > blocks:
            free.pop(0)
        slot.held += keys
        slot.anonymous += extra
        return True

    def allocate(slot, tokens):
        # the blocks for its first `tokens` tokens; those they fill keyed (vLLM caches full blocks only, when the step
        # filling them is scheduled), a partly filled one held as an anonymous slot
        need = math.ceil(tokens / block)
        keys = lookup_keys(slot)
        full = min(tokens // block, len(keys))
        new_keys = keys[len(slot.held) : full]
        slots = max(need, len(slot.held) + slot.anonymous)
        extra = slots - len(slot.held) - len(new_keys) - slot.anonymous  # below 0: an anonymous slot became keyed
        if not new_keys and extra == 0:
            return True
        return hold(slot, new_keys, extra)

    def release(slot):
        if keep and slot.anonymous:
            first = len(slot.held)
            full = min(slot.computed // block, first + slot.anonymous)
            for index in reversed(range(first, full)):
                key = ("generated", slot.number, index)
                if key in free:
                    free.remove(key)
                free.append(key)
        anonymous[0] -= slot.anonymous
        for key in reversed(slot.held):
            held[key] -= 1
            if not held[key]:
                del held[key]
                free.append(key)
        slot.held, slot.anonymous = [], 0

    while upcoming or waiting or running:
        while upcoming and upcoming[-1].arrival <= now:
            waiting.append(upcoming.pop())
        if not running and not waiting:
            now = max(now, upcoming[-1].arrival)
            continue
        left, scheduled, preempted, joined = budget, [], False, set()  # joined: taken from the queue (a prefill)
        index = 0
        while index < len(running) and left > 0:
            slot = running[index]
            tokens = min(slot.length - slot.computed, left)
            fits = allocate(slot, slot.computed + tokens)
            while not fits:
                victim = running.pop()
                release(victim)
                victim.computed = 0
                victim.preemptions += 1
                waiting.insert(0, victim)
                preempted = True
                if victim is slot:
                    break
                fits = allocate(slot, slot.computed + tokens)
            if not fits:
                break
            scheduled.append((slot, tokens))
            left -= tokens
            index += 1
        if not preempted:
            while waiting and left > 0 and len(running) < max_seqs:
                slot = waiting[0]
                keys = lookup_keys(slot)
                hit = min(found(keys), (slot.length - 1) // block)  # a token short of the sequence, whole blocks
                computed = hit * block
                tokens = min(slot.length - computed, left)
                # admitted only if its whole sequence fits the free blocks (held hits shared, cached ones taken)
                whole = math.ceil(slot.length / block) - sum(1 for key in keys[:hit] if key in held)
                if whole > blocks - len(held) - anonymous[0]:
                    break
                if not allocate(slot, computed + tokens):
                    break
                slot.computed = computed
                if slot.gpu_hit is None:
                    slot.gpu_hit = min(hit * block, slot.tokens)
                if slot.scheduled is None:
                    slot.scheduled = now
                waiting.pop(0)
                running.append(slot)
                scheduled.append((slot, tokens))
                joined.add(slot.number)
                left -= tokens
        if not scheduled:
            if preempted:
                continue
            raise RuntimeError("stuck")
        prefill, decodes, context = 0.0, 0, 0
        for slot, tokens in scheduled:
            if tokens == 1 and slot.generated and slot.computed == slot.length - 1 and slot.number not in joined:
                decodes += 1
                context += slot.length
            else:
                prefill += cost.prefill_ms(slot.computed + tokens, slot.computed)
        now += (prefill + (cost.decode_ms(decodes, context) if decodes else 0.0)) / 1000
        for slot, tokens in scheduled:
            slot.computed += tokens
            if slot.computed < slot.length:
                continue
            slot.generated += 1
            if slot.first_token is None:
                slot.first_token = now
            if slot.generated >= slot.output:
                release(slot)
                running.remove(slot)
                done[slot.number] = (slot.first_token, now, slot.gpu_hit, slot.preemptions, slot.scheduled)
    return done
