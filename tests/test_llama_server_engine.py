"""The llama-server model (kvlab/serving/llama_cpp.py) against brute-force readings of the rules it models: no
server, small synthetic workloads. Each expectation comes from a function written here from the rules (llama.cpp
b11434, tools/server/), not from the model's code: one slot and no RAM cache is a FIFO queue with a longest-common-
prefix cache of one; with requests that never overlap, slot selection (LCP over --slot-prompt-similarity, else LRU)
and the RAM cache (alloc / load-as-a-move / FIFO eviction, idle slots saved at every launch) can be replayed one
request at a time."""

import random
from dataclasses import replace

import pytest

from kvlab.serving import llama_cpp as model

FAST = model.Costs(
    step_ms=0.0,
    prompt_token_ms=0.1,
    prompt_slot_ms=5.0,
    generate_ms=1.0,
    save_ms_per_mib=0.0,
    restore_ms_per_mib=0.0,
    http_ms=0.0,
)


def lcp(a, b):
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def workload(seed, n, docs=3, doc_tokens=40, question=4, output=3, gap_s=None, rate=5.0, partial=True):
    """Prompts built from a few documents (some prompts keep only part of one: partial prefixes, to cross the
    similarity and f_keep thresholds), fresh questions, and now and then a prompt sent again word for word (a full
    match); arrivals every ``gap_s`` or Poisson at ``rate``."""
    rng = random.Random(seed)
    documents = [[1000 * (d + 1) + i for i in range(doc_tokens)] for d in range(docs)]
    requests, clock = [], 0.0
    for _ in range(n):
        clock += gap_s if gap_s is not None else rng.expovariate(rate)
        doc = documents[rng.randrange(docs)]
        cut = rng.choice([doc_tokens, doc_tokens, doc_tokens // 2, doc_tokens // 8]) if partial else doc_tokens
        tokens = doc[:cut] + [rng.randrange(10**6, 2 * 10**6) for _ in range(question)]
        if requests and rng.random() < 0.15:
            tokens = list(requests[-1][1])
        requests.append((clock, tokens, rng.choice([1, output, output + 2])))
    return requests


def one_slot_fifo(requests, costs, n_batch):
    """One slot, no RAM cache: served in arrival order; reuse is the LCP with the previous prompt (its generated
    tokens match nothing), less one on a full match; a prompt costs a slot's price per step of ``n_batch`` and its
    tokens, each generated token after the first a generating step."""
    out, free_at, previous = [], 0.0, []
    for arrival_s, tokens, output in requests:
        arrival = 1e3 * arrival_s
        start = max(arrival, free_at)
        cached = min(lcp(previous, tokens), len(tokens) - 1)
        computed = len(tokens) - cached
        steps = -(-computed // n_batch)
        first = start + steps * costs.prompt_slot_ms + computed * costs.prompt_token_ms
        free_at = first + (output - 1) * costs.generate_ms
        out.append({"cached": cached, "ttft": first - arrival, "e2e": free_at - arrival, "queue": start - arrival})
        previous = list(tokens)
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n_batch", [2048, 16])
def test_one_slot_without_a_ram_cache_is_a_fifo_queue_with_an_lcp_cache_of_one(seed, n_batch):
    requests = workload(seed, 40, rate=20.0)
    server = model.Server(parallel=1, ctx=512, n_batch=n_batch, cache_ram_mib=0)
    served, cache = model.simulate(requests, server, FAST)
    expected = one_slot_fifo(requests, FAST, n_batch)
    assert cache is None
    assert [r.cached_tokens for r in served] == [e["cached"] for e in expected]
    assert [r.slot for r in served] == [0] * len(requests)
    for record, want in zip(served, expected, strict=True):
        assert record.ttft_ms == pytest.approx(want["ttft"], abs=1e-6)
        assert record.e2e_ms == pytest.approx(want["e2e"], abs=1e-6)
        assert record.queue_ms == pytest.approx(want["queue"], abs=1e-6)
        assert record.source == ("slot" if record.cached_tokens else "none")


class BruteServer:
    """The rules replayed one request at a time (every slot idle when a request arrives)."""

    def __init__(self, parallel, sps, ram_bytes, ctx, bytes_per_token):
        self.slots = [[] for _ in range(parallel)]
        self.last = [-1] * parallel
        self.released = 0
        self.sps, self.ram_bytes, self.ctx, self.bpt = sps, ram_bytes, ctx, bytes_per_token
        self.ram = []  # token lists, oldest first
        self.evicted = 0

    def choose(self, prompt):
        best, best_sim = None, 0.0
        for s, tokens in enumerate(self.slots):
            sim = lcp(tokens, prompt) / len(prompt) if tokens else 0.0
            if tokens and sim > best_sim and sim > self.sps:
                best, best_sim = s, sim
        if best is not None:
            return best, "lcp", best_sim * len(prompt) / len(self.slots[best]) < 0.5
        oldest = min(self.last)
        return max(s for s in range(len(self.slots)) if self.last[s] == oldest), "lru", True

    def save(self, tokens):
        if not tokens or any(lcp(entry, tokens) == len(tokens) for entry in self.ram):
            return
        size = self.bpt * len(tokens)
        if size > self.ram_bytes:
            return
        self.ram = [entry for entry in self.ram if lcp(entry, tokens) != len(entry)]
        while self.ram and self.bpt * (sum(map(len, self.ram)) + len(tokens)) > self.ram_bytes:
            self.ram.pop(0)
            self.evicted += 1
        self.ram.append(list(tokens))
        self.limit()

    def limit(self):
        limit = max(self.ctx, int(self.ram_bytes / self.bpt))
        while self.ram and sum(map(len, self.ram)) > limit:
            self.ram.pop(0)
            self.evicted += 1

    def load(self, s, prompt):
        own = lcp(self.slots[s], prompt)
        keep = own / len(self.slots[s]) if self.slots[s] else -1.0
        sim, pick = own / len(prompt), None
        for i, entry in enumerate(self.ram):
            n = lcp(entry, prompt)
            if n / len(entry) >= 0.25 and n / len(entry) > keep and n / len(prompt) > sim:
                keep, sim, pick = n / len(entry), n / len(prompt), i
        if pick is None:
            return None
        self.slots[s] = self.ram.pop(pick)
        return lcp(self.slots[s], prompt)

    def serve(self, prompt, output):
        s, how, update = self.choose(prompt)
        restored = None
        if update and self.ram_bytes:
            self.save(self.slots[s])
            restored = self.load(s, prompt)
        cached = min(lcp(self.slots[s], prompt), len(prompt) - 1)
        if self.ram_bytes:
            for other in range(len(self.slots)):
                if other != s:
                    self.save(self.slots[other])
        self.slots[s] = list(prompt) + [object() for _ in range(output - 1)]
        self.last[s] = self.released
        self.released += 1
        source = "ram" if restored is not None else ("slot" if cached else "none")
        return {"slot": s, "how": how, "cached": cached, "source": source, "restored": restored}


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("ram_states", [0, 2, 5, 1000])
@pytest.mark.parametrize("parallel", [1, 2, 4])
def test_one_request_at_a_time_the_model_follows_the_rules(seed, ram_states, parallel):
    """Slot choice (LCP vs LRU, its ties), reuse and the RAM cache's restores, against the brute force."""
    per_token = model.MIB / 48  # a whole state (a prompt of 44 tokens and its output) is about a MiB
    requests = workload(seed, 30, gap_s=10.0)
    ram_mib = ram_states  # room for about that many whole states
    ctx = 64 * parallel
    server = model.Server(parallel=parallel, ctx=ctx, cache_ram_mib=ram_mib, state_bytes_per_token=per_token)
    served, cache = model.simulate(requests, server, FAST)
    brute = BruteServer(parallel, server.slot_prompt_similarity, ram_mib * model.MIB, ctx, per_token)
    for request, record in zip(requests, served, strict=True):
        want = brute.serve(request[1], request[2])
        got = {
            "slot": record.slot,
            "how": record.slot_choice,
            "cached": record.cached_tokens,
            "source": record.source,
            "restored": record.ram_restored_tokens,
        }
        assert got == want, (record.index, got, want)
        assert record.queue_ms == pytest.approx(0.0)  # nothing overlaps
    if cache is not None:
        assert cache["evicted"] == brute.evicted
        assert cache["states"] == len(brute.ram)


def test_an_lcp_tie_goes_to_the_lowest_slot_and_a_full_match_recomputes_one_token():
    """Two slots hold the same document (two requests for it at once); the next one for it finds both equally
    similar: the strict ``f_sim_cur > f_sim_best`` keeps the first, the lowest id."""
    doc = list(range(1, 41))
    requests = [(0.0, doc + [1], 2), (0.0, doc + [2], 2), (10.0, doc + [3], 2), (20.0, doc + [3], 2)]
    served, _ = model.simulate(requests, model.Server(parallel=3, ctx=3 * 64, cache_ram_mib=0), FAST)
    assert sorted(r.slot for r in served[:2]) == [1, 2]  # LRU among never-used slots: the highest ids
    assert (served[2].slot, served[2].slot_choice, served[2].cached_tokens) == (1, "lcp", 40)
    assert (served[3].slot, served[3].cached_tokens, served[3].computed_tokens) == (1, 40, 1)


def test_both_paths_and_the_ram_cache_are_exercised():
    """The brute-force comparison above means something: its workloads take both paths and restore from RAM."""
    requests = workload(3, 30, gap_s=10.0)
    served, cache = model.simulate(
        requests, model.Server(parallel=2, ctx=128, cache_ram_mib=1, state_bytes_per_token=1024.0), FAST
    )
    assert {r.slot_choice for r in served} == {"lcp", "lru"}
    assert {r.source for r in served} == {"slot", "ram", "none"}
    assert cache["restored"] > 0 and cache["duplicates_skipped"] > 0


@pytest.mark.parametrize("seed", range(6))
def test_a_ram_cache_large_enough_never_evicts_and_a_restore_is_a_move(seed):
    requests = workload(seed, 60, rate=30.0)
    server = model.Server(parallel=3, ctx=3 * 64, cache_ram_mib=10_000, state_bytes_per_token=1024.0)
    served, cache = model.simulate(requests, server, FAST)
    assert cache["evicted"] == 0
    # every state saved is still there unless it was restored (moved out) or made obsolete by a longer one
    assert cache["states"] == cache["saved"] - cache["restored"] - cache["obsoleted"]
    assert cache["restored"] == sum(r.ram_restore for r in served) > 0


def test_a_restored_state_leaves_the_cache():
    cache = model.PromptCache(model.Server(cache_ram_mib=64))
    a, b = [1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12]
    assert cache.alloc(a) and cache.alloc(b)
    assert cache.alloc(a[:5]) == 0  # already held as a prefix of a
    tokens, _, common = cache.load([], [1, 2, 3, 4, 5, 6, 99])
    assert tokens == a and common == 6
    assert [t for t, _ in cache.states] == [b]
    assert cache.load([], [1, 2, 3, 4, 5, 6, 99]) is None  # moved, not copied


def test_the_ram_cache_evicts_by_insertion_and_a_hit_does_not_refresh():
    per_token = 64 * 1024.0  # 16 tokens to the MiB
    cache = model.PromptCache(model.Server(cache_ram_mib=2, state_bytes_per_token=per_token))  # 32 tokens
    first, second, third = list(range(10)), list(range(100, 110)), list(range(200, 210))
    cache.alloc(first)
    cache.alloc(second)
    assert cache.load([7], [100, 101, 102, 103, 104, 105, 106, 107, 108, 0]) is not None  # second moved out
    cache.alloc(second)  # back in, newest
    cache.alloc(third)  # 30 tokens: they fit
    assert [t[0] for t, _ in cache.states] == [0, 100, 200]
    cache.alloc(list(range(300, 310)))  # 40 tokens: the oldest by insertion goes
    assert [t[0] for t, _ in cache.states] == [100, 200, 300]
    assert cache.counts["evicted"] == 1


def test_a_longer_state_replaces_its_prefixes():
    cache = model.PromptCache(model.Server(cache_ram_mib=64))
    cache.alloc([1, 2, 3])
    cache.alloc([5, 6])
    cache.alloc([1, 2, 3, 4])
    assert [t for t, _ in cache.states] == [[5, 6], [1, 2, 3, 4]]
    assert cache.counts["obsoleted"] == 1


def test_two_releases_in_one_step_serve_the_later_deferred_task_first():
    """pop_deferred_task puts the task at the front of the queue: two slots release in one step, so the second
    deferred task is launched first and takes the least recently used slot (the one released first); in arrival
    order the first would have taken it."""
    doc = list(range(1, 41))
    requests = [
        (0.0, doc + [1], 3),
        (0.0, doc + [2], 3),  # both prompts in the first step: both slots release in the same step
        (0.001, [500 + i for i in range(40)], 3),  # deferred first (no slot idle) ...
        (0.002, [900 + i for i in range(40)], 3),  # ... then this one
    ]
    served, _ = model.simulate(requests, model.Server(parallel=2, ctx=128, cache_ram_mib=0), FAST)
    assert served[0].slot != served[1].slot
    assert served[0].e2e_ms == served[1].e2e_ms
    first_released = served[1].slot  # slots release in id order within a step; LRU ties go to the highest id
    assert first_released < served[0].slot
    assert (served[3].slot, served[2].slot) == (first_released, served[0].slot)


def test_common_prefix_matches_a_plain_loop():
    rng = random.Random(0)
    for _ in range(500):
        n = rng.randrange(0, 30)
        a = [rng.randrange(3) for _ in range(n)]
        b = a[: rng.randrange(0, n + 1)] + [rng.randrange(3) for _ in range(rng.randrange(0, 5))]
        assert model.common_prefix(a, b) == lcp(a, b) == model.common_prefix(tuple(b), a)


def test_fit_recovers_the_prices_it_was_given():
    """Measurements made by the model itself at known prices: the fit finds them again."""
    truth = replace(FAST, prompt_token_ms=0.2, prompt_slot_ms=12.0, generate_ms=2.5)
    requests = workload(1, 80, rate=8.0)
    server = model.Server(parallel=3, ctx=3 * 64, cache_ram_mib=1, state_bytes_per_token=1024.0)
    served, _ = model.simulate(requests, server, truth)
    measured = [{"prompt_ms": r.prompt_ms, "predicted_ms": r.predicted_ms} for r in served]
    fitted, report = model.fit(requests, measured, server, FAST)
    assert fitted.prompt_token_ms == pytest.approx(0.2, rel=1e-6)
    assert fitted.prompt_slot_ms == pytest.approx(12.0, rel=1e-6)
    assert fitted.generate_ms == pytest.approx(2.5, rel=1e-6)
    assert report["rms_ms"] == pytest.approx(0.0, abs=1e-6)


def test_a_prompt_that_does_not_fit_a_slot_is_refused():
    with pytest.raises(ValueError, match="do not fit a slot"):
        model.simulate([(0.0, list(range(300)), 4)], model.Server(parallel=4, ctx=1024), FAST)
