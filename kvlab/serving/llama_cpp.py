"""llama.cpp's two servers, as kvlab models them: llama-cpp-python's (a cache design the replay serves through,
:class:`LlamaCppServer`: ``kvlab replay --server llama-cpp``) and llama.cpp's own ``llama-server`` under load (a
discrete-event model: :class:`Server`, :func:`simulate`, :func:`fit`; ``server/load_check.py`` holds it to a real
one). Neither offloads to a CPU tier kvlab prices: ``kvlab plan --engine`` does not offer them.

**llama-cpp-python's server as a cache design**: a context of one prompt, and a RAM cache of whole saved states.

Read from llama-cpp-python 0.3.16 (``llama_cpp/llama.py`` ``Llama._create_completion`` and ``Llama.generate``,
``llama_cpp/llama_cache.py`` ``LlamaRAMCache``), and checked request by request against the real server
(``server/check.py``):

* The context keeps the KV of the last prompt served (and its completion): a prompt that starts with part of
  it reuses that part (``generate``'s prefix match). Requests are served one at a time.
* With ``--cache true --cache_type ram`` an OrderedDict maps each saved prompt's tokens to its state. A lookup
  takes the key with the longest common prefix with the prompt (the first, oldest, among equals; none when no
  key shares the first token) and moves it to the newest end, whether or not it is then used: it is loaded
  only if it shares more than the context does. So when every prompt starts with the same BOS token, a lookup
  that matches only the BOS still refreshes the oldest entry (``bos``).
* After the completion the state of prompt and completion is saved under a new key (the one it hit stays: a
  reused document can hold two states), added at the newest end; then the oldest states are dropped while the
  states' bytes exceed the room, the new one included: a state larger than the room empties the cache.

A request of the workload is the prompt's shared part (the document); a saved state also holds
``state_extra_tokens`` more (the request's own question and completion, and the state's fixed bytes in tokens
of KV), which no later prompt shares. Rooms are in tokens of KV: the GPU's is the context's (a prompt longer is
not kept), the CPU's the RAM cache's. Hits are in tokens and in whole blocks of the request.

**llama-server**: a discrete-event model of llama.cpp's ``llama-server`` (b11434) with ``--parallel`` slots and its
host-RAM prompt cache (``--cache-ram``): which slot takes each request, what it reuses (the server's ``cache_n``),
and when its first and last tokens come out.

The rules, as read from llama.cpp b11434 (``tools/server/``; line numbers of that tag):

* **Slots** (``--parallel N`` without ``--kv-unified``): each slot holds one sequence of up to ``n_ctx / N``
  tokens. A released slot keeps its prompt and all but the last generated token (``server_slot::release``,
  server-context.cpp ~582; the last sampled token is never decoded).
* **Slot selection** (``get_available_slot``, server-context.cpp ~1680-1797), one task at a time on the single
  main loop: among the idle slots that hold tokens, the one with the largest ``LCP(slot, prompt) / len(prompt)``
  over ``--slot-prompt-similarity`` (strictly better, so the lowest id wins a tie); it marks a cache update when
  ``f_keep = LCP / len(slot) < 0.5``. Otherwise the least recently used idle slot (the smallest ``t_last_used``,
  set at release, ``-1`` for a slot never used; ``<=`` so the highest id wins a tie), always marking a cache
  update. A cache update is ``prompt_save`` of the slot's content into the RAM cache, ``prompt_load`` of the best
  state there, ``update()``.
* **Deferral** (``process_single_task``, ~2600-2660; ``server_queue::pop_deferred_task``, server-queue.cpp ~90): a
  task that finds no idle slot is deferred; each release moves the first deferred task to the *front* of the task
  queue (``emplace_front``: two releases in one step put the second one's task first).
* **Idle slots to RAM** (``--cache-idle-slots``, on by default with ``--cache-ram``; ~2641): after every launch,
  every idle slot's content is saved into the RAM cache.
* **Reuse** (``update_slots``, ~3350-3590): ``n_past = LCP(slot, prompt)``; a full match still recomputes one
  token ([TAG_PROMPT_LOGITS]); ``cache_n = n_past``; the slot is trimmed to ``n_past``.
* **Batching** (~3180-3340): one ``llama_decode`` of at most ``n_batch`` (2048) tokens per main-loop step: the
  sampled token of every generating slot first, then pending prompt tokens in slot order, a prompt split across
  steps when it does not fit. A slot whose prompt ends in a step samples its first token after it (``post_decode``,
  ~4114); a slot releases in the step that samples its ``n_predict``-th token.
* **RAM cache** (``server_prompt_cache``, server-task.cpp ~1700-1912): a list of whole-sequence states in insertion
  order. ``alloc``: skip if an entry already holds this sequence as a prefix; skip if it is over the size limit;
  drop the entries that are prefixes of it; drop the oldest until it fits; append (a hit does not refresh an
  entry). ``load``: the baseline is the slot's own ``f_keep``/``f_sim`` (``f_keep = -1`` for an empty slot); an
  entry with ``f_keep < 0.25`` is ignored; an entry must beat the best so far on both; the winner is written into
  the slot and *removed* from the cache (a move, not a copy). ``update``: the size limit, then a token limit of
  ``max(n_ctx, limit_bytes / bytes_per_token)``.

Time: the main loop is one thread, so the model is a single clock. A step costs :meth:`Costs.step_ms_of` (a linear
model in its prompt tokens, the slots with prompt tokens in it, its generating slots and the ubatches the KV cache
splits it into, :func:`ubatches`); a RAM save or restore
costs its MiB times a rate. :func:`fit` calibrates the step's coefficients by least squares on the per-request
``prompt_ms`` and ``predicted_ms`` that the server reports (each is a sum of steps the model knows the make-up of).

Standard library and numpy only (numpy for :func:`fit`).
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import dataclass, field, replace

from kvlab.serving.base import ServingEngine

__all__ = [
    "Costs",
    "ENGINE",
    "LlamaCpp",
    "LlamaCppServer",
    "PromptCache",
    "Request",
    "Served",
    "Server",
    "common_prefix",
    "fit",
    "simulate",
    "ubatches",
    "with_warm_up",
]


class LlamaCppServer:
    """The server's two tiers over a workload's requests (block keys, tokens): a
    :class:`kvlab.cache.interface.Cache`."""

    name = "llama-cpp"
    offline = False

    def __init__(self, gpu_tokens, cpu_tokens, block_tokens, state_extra_tokens=0, bos=False):
        rooms = {"gpu_tokens": gpu_tokens, "cpu_tokens": cpu_tokens, "state_extra_tokens": state_extra_tokens}
        for name, value in rooms.items():
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        if block_tokens < 1:
            raise ValueError(f"block_tokens must be >= 1, got {block_tokens!r}")
        self.gpu_tokens, self.cpu_tokens, self.block_tokens = gpu_tokens, cpu_tokens, block_tokens
        self.extra, self.bos = state_extra_tokens, bos
        self.context = ()  # the keys of the prompt in the context
        self.states = OrderedDict()  # number of the request that saved it -> (its keys, its size in tokens)
        self.used = 0
        self._served = 0

    def shared(self, keys, other):
        """Blocks ``keys`` and ``other`` share from the start."""
        count = 0
        for mine, theirs in zip(keys, other, strict=False):
            if mine != theirs:
                break
            count += 1
        return count

    def lookup(self, keys):
        """The RAM cache's lookup: the blocks its best state shares (that state refreshed), or 0."""
        bos = 1 if self.bos else 0  # with a BOS every state shares the prompt's first token
        best, found = 0, None
        for number, (saved, _size) in self.states.items():
            length = bos + self.shared(keys, saved)
            if length > best:  # the first of the longest, as LlamaRAMCache._find_longest_prefix_key
                best, found = length, number
        if found is None:
            return 0
        self.states.move_to_end(found)
        return best - bos

    def foresee(self, columns):
        """Nothing to learn: the server's design needs no future."""

    def serve(self, keys, tokens):
        """Serve one request; return ``(gpu_blocks, cpu_blocks, gpu_tokens, cpu_tokens)`` it reused."""
        keys = tuple(keys)
        in_context = self.shared(keys, self.context)
        in_cache = self.lookup(keys) if self.cpu_tokens else 0
        gpu_blocks = cpu_blocks = 0
        if in_cache > in_context:
            cpu_blocks = in_cache
        else:
            gpu_blocks = in_context
        size = tokens + self.extra
        self.context = keys if size <= self.gpu_tokens else ()
        if self.cpu_tokens:
            self.states[self._served] = (keys, size)
            self.used += size
            while self.used > self.cpu_tokens and self.states:
                self.used -= self.states.popitem(last=False)[1][1]
        self._served += 1
        block = self.block_tokens
        return gpu_blocks, cpu_blocks, min(gpu_blocks * block, tokens), min(cpu_blocks * block, tokens)

    def __repr__(self):
        return f"LlamaCppServer(context={len(self.context)} blocks, states={len(self.states)}, used={self.used})"


# --- llama-server under load ------------------------------------------------------------------------------------------


MIB = 1024 * 1024
TERMS = ("step_ms", "prompt_token_ms", "prompt_slot_ms", "generate_ms", "ubatch_ms")  # the step's coefficients, in
# its features' order: 1, prompt tokens in the step, slots with prompt tokens in the step, generating slots in the
# step, ubatches the step is split into (:func:`ubatches`)
# What fit() fits by default: no per-step intercept. With per-slot KV (no --kv-unified) a step's fixed cost is per
# ubatch (each is a graph compute), and every step has at least one, so the ubatch price is the intercept; a separate
# one cannot be told from it on a run whose steps are mostly one ubatch.
FITTED = TERMS[1:]
N_UBATCH = 512  # -ub, the server's default (common/common.h): the most tokens one ubatch computes


def ubatches(parts, n_ubatch=N_UBATCH):
    """How many ubatches (graph computes) one ``llama_decode`` of ``parts`` takes: ``[(slot, tokens)]`` in the
    batch's order (the generating slots' tokens, then the prompts'). With per-slot KV (``n_stream > 1``) the KV
    cache splits a batch by ``split_equal(n_ubatch, sequential=true)`` (llama-kv-cache.cpp ``init_batch``,
    llama-batch.cpp ``split_equal``): a ubatch takes, in batch order, sequences whose ids follow each other
    (``seq == last + 1``), and as many tokens from each as the shortest of them has left, at most ``n_ubatch``
    in all. So two generating slots share a ubatch when their ids are adjacent and cost two when they are not,
    and a prompt behind them is computed apart from its first token's ubatch."""
    left = [[slot, tokens] for slot, tokens in parts if tokens]
    count = 0
    while left:
        chosen = [left[0]]
        for entry in left[1:]:
            if entry[0] == chosen[-1][0] + 1:
                chosen.append(entry)
        take = max(1, min(min(tokens for _, tokens in chosen), n_ubatch // len(chosen)))
        for entry in chosen:
            entry[1] -= min(take, entry[1])
        left = [entry for entry in left if entry[1]]
        count += 1
    return count


@dataclass(frozen=True)
class Server:
    """The server's flags that the model needs (load.py's defaults)."""

    parallel: int = 4  # --parallel
    ctx: int = 9216  # --ctx-size: all slots' KV; a slot holds ctx // parallel tokens
    n_batch: int = 2048  # -b
    cache_ram_mib: int = 256  # --cache-ram (0: off; < 0: no size limit)
    slot_prompt_similarity: float = 0.1  # -sps
    cache_idle_slots: bool = True  # --cache-idle-slots (the server's default)
    state_bytes_per_token: float = 2060.4  # a saved state's size: the KV (2,048 B/token here) and per-cell metadata
    state_fixed_bytes: float = 0.0  # ... and its header and last logits

    def state_bytes(self, tokens):
        return self.state_fixed_bytes + self.state_bytes_per_token * tokens


@dataclass(frozen=True)
class Costs:
    """The model's prices, in ms. A step (one ``llama_decode``) costs ``step_ms + prompt_token_ms * P +
    prompt_slot_ms * S + generate_ms * G + ubatch_ms * U`` (P prompt tokens from S slots, G generating slots, U
    ubatches; ``ubatch_ms`` is 0 until :func:`fit` prices it); a state saved to RAM
    ``save_ms_per_mib`` per MiB, one restored ``restore_ms_per_mib``; ``http_ms`` is added to TTFT and e2e (the
    request's way in and its first/last chunk's way out)."""

    step_ms: float = 0.0
    prompt_token_ms: float = 0.16
    prompt_slot_ms: float = 25.0
    generate_ms: float = 2.7
    ubatch_ms: float = 0.0
    save_ms_per_mib: float = 0.5
    restore_ms_per_mib: float = 0.27
    http_ms: float = 2.0

    def coefficients(self):
        return [getattr(self, name) for name in TERMS]

    def step_ms_of(self, features):
        return sum(c * x for c, x in zip(self.coefficients(), features, strict=True))


@dataclass(frozen=True)
class Request:
    """One request: when it reaches the server (s), its prompt (token ids, or any hashable keys), how many tokens
    it generates (``n_predict`` with ``ignore_eos``)."""

    arrival_s: float
    tokens: list
    output_tokens: int


@dataclass
class Served:
    """What the model says of one request, in load.py's terms: ``cached_tokens`` is the server's ``cache_n``,
    ``source`` ``ram`` (a RAM state was restored into its slot), ``slot`` (it reused its slot's own tokens) or
    ``none``; ``queue_ms`` runs from arrival to its slot taking it (after the slot's RAM-cache update)."""

    index: int
    arrival_s: float
    slot: int | None = None
    slot_choice: str | None = None  # "lcp" or "lru"
    source: str | None = None
    cached_tokens: int | None = None
    computed_tokens: int | None = None
    ram_restore: bool = False
    ram_restored_tokens: int | None = None  # the restored state's common prefix with the prompt
    queue_ms: float | None = None
    prompt_ms: float | None = None  # as the server times it: from its first step to the step that ends it
    predicted_ms: float | None = None  # from there to the step that samples its last token
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    # for fit(): the steps' features summed over the prompt's window and the generation's, and the time in those
    # windows that is not steps (RAM-cache work between steps); the launch's idle-slot saves
    prompt_features: list = field(default_factory=lambda: [0] * len(TERMS))
    generate_features: list = field(default_factory=lambda: [0] * len(TERMS))
    prompt_other_ms: float = 0.0
    generate_other_ms: float = 0.0
    launch_ms: float = 0.0

    def record(self):
        keys = ("index", "arrival_s", "slot", "slot_choice", "source", "cached_tokens", "computed_tokens")
        keys += ("ram_restore", "ram_restored_tokens", "queue_ms", "prompt_ms", "predicted_ms", "ttft_ms", "e2e_ms")
        return {key: getattr(self, key) for key in keys}


def common_prefix(a, b):
    """``server_tokens::get_common_prefix``: the length of the longest common prefix of two token sequences
    (lists or tuples), by bisection on slices (C-speed comparisons)."""
    if type(a) is not type(b):
        a, b = list(a), list(b)
    n = min(len(a), len(b))
    if n == 0 or a[0] != b[0]:
        return 0
    if a[:n] == b[:n]:
        return n
    low, high = 1, n  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        if a[low:mid] == b[low:mid]:
            low = mid
        else:
            high = mid
    return low


class PromptCache:
    """``server_prompt_cache`` (server-task.cpp ~1700-1912): whole-sequence states in insertion order, with the
    counters load.py reads from the log (``saved``, ``duplicates_skipped``, ``obsoleted``, ``evicted``,
    ``restored``)."""

    def __init__(self, server):
        self.server = server
        self.limit_bytes = MIB * max(server.cache_ram_mib, 0)  # 0: no size limit
        self.limit_tokens = server.ctx  # make_unique<server_prompt_cache>(cache_ram_mib, n_ctx)
        self.states = []  # [tokens, bytes]
        self.counts = dict.fromkeys(("saved", "duplicates_skipped", "obsoleted", "evicted", "restored"), 0)

    def size(self):
        return sum(size for _, size in self.states)

    def n_tokens(self):
        return sum(len(tokens) for tokens, _ in self.states)

    def alloc(self, tokens):
        """``prompt_save`` → ``alloc``: the bytes stored (0 when skipped)."""
        for cached, _ in self.states:
            if common_prefix(cached, tokens) == len(tokens):
                self.counts["duplicates_skipped"] += 1
                return 0
        size = self.server.state_bytes(len(tokens))
        if self.limit_bytes and size > self.limit_bytes:
            return 0
        kept = [state for state in self.states if common_prefix(state[0], tokens) != len(state[0])]
        self.counts["obsoleted"] += len(self.states) - len(kept)
        self.states = kept
        if self.limit_bytes:
            while self.states and self.size() + size > self.limit_bytes:
                self.states.pop(0)
                self.counts["evicted"] += 1
        self.states.append([list(tokens), size])
        self.counts["saved"] += 1
        return size

    def load(self, slot_tokens, prompt):
        """``prompt_load`` → ``load``: ``(tokens, bytes, lcp)`` of the state moved out of the cache into the slot,
        or ``None`` when the slot keeps its own."""
        lcp = common_prefix(slot_tokens, prompt)
        keep_best = lcp / len(slot_tokens) if slot_tokens else -1.0
        sim_best = lcp / len(prompt)
        best = None
        for i, (tokens, _) in enumerate(self.states):
            lcp_cur = common_prefix(tokens, prompt)
            keep_cur, sim_cur = lcp_cur / len(tokens), lcp_cur / len(prompt)
            if keep_cur < 0.25:  # don't trash large prompts
                continue
            if keep_best < keep_cur and sim_best < sim_cur:
                keep_best, sim_best, best = keep_cur, sim_cur, (i, lcp_cur)
        if best is None:
            return None
        tokens, size = self.states.pop(best[0])
        self.counts["restored"] += 1
        return tokens, size, best[1]

    def update(self):
        if self.limit_bytes:
            while self.states and self.size() > self.limit_bytes:
                self.states.pop(0)
                self.counts["evicted"] += 1
        per_token = max(1.0, self.size() / max(1, self.n_tokens()))
        limit = max(self.limit_tokens, int(self.limit_bytes / per_token)) if self.limit_bytes else self.limit_tokens
        if self.limit_tokens > 0:
            while self.states and self.n_tokens() > limit:
                self.states.pop(0)
                self.counts["evicted"] += 1

    def summary(self):
        return self.counts | {"states": len(self.states), "mib": round(self.size() / MIB, 3)}


class _Slot:
    def __init__(self, index):
        self.id = index
        self.tokens = []  # the sequence in its KV
        self.t_last_used = -1  # a release counter: only the order matters
        self.state = "idle"  # idle, started, prompt, generating
        self.task = None  # the index of its request
        self.done = 0  # prompt tokens in the KV
        self.generated = 0
        self.prompt_start_ms = None


def with_warm_up(requests, warm_up):
    """``requests`` (:class:`Request`) behind the ``warm_up`` ones (each its tokens and output tokens), these an
    hour apart and long before the first request, so that each is served alone, in order."""
    start = min((r.arrival_s for r in requests), default=0.0)
    early = [Request(start - 3600.0 * (len(warm_up) - k), list(t), int(n)) for k, (t, n) in enumerate(warm_up)]
    return [*early, *requests]


def simulate(requests, server=Server(), costs=Costs(), warm_up=None):
    """Replay ``requests`` (``(arrival_s, tokens, output_tokens)`` or :class:`Request`, any order) through the
    model; a list of :class:`Served` in the requests' order, and the RAM cache's :meth:`PromptCache.summary`.
    ``warm_up``: untimed requests (each its tokens and its output tokens) served one at a time, alone and in order,
    before them, as load.py sends its warm-up request and, with ``--warm-docs``, every document."""
    requests = [
        Request(float(r.arrival_s), list(r.tokens), int(r.output_tokens))
        if isinstance(r, Request)
        else Request(float(r[0]), list(r[1]), int(r[2]))
        for r in requests
    ]
    slot_tokens = server.ctx // server.parallel
    for i, request in enumerate(requests):
        if not request.tokens or len(request.tokens) + request.output_tokens > slot_tokens:
            raise ValueError(
                f"request {i}: {len(request.tokens)} prompt tokens and {request.output_tokens} to "
                f"generate do not fit a slot of {slot_tokens} tokens (or the prompt is empty)"
            )
    warm_up = list(warm_up or ())
    requests = with_warm_up(requests, warm_up)
    served = [Served(i, r.arrival_s) for i, r in enumerate(requests)]
    order = deque(sorted(range(len(requests)), key=lambda i: (requests[i].arrival_s, i)))
    slots = [_Slot(i) for i in range(server.parallel)]
    cache = PromptCache(server) if server.cache_ram_mib != 0 else None
    queue, deferred = deque(), deque()
    released = 0
    now = 1e3 * requests[order[0]].arrival_s if order else 0.0  # ms, the server's clock
    windows = {}  # slot id -> (Served, "prompt" | "generate") of the steps being summed

    def arrive():
        while order and 1e3 * requests[order[0]].arrival_s <= now:
            queue.append(order.popleft())

    def other_time(ms):
        """RAM-cache work between steps: counted in the windows of the slots busy with a prompt or a generation."""
        for record, kind in windows.values():
            if kind == "prompt":
                record.prompt_other_ms += ms
            else:
                record.generate_other_ms += ms

    def save(slot):
        nonlocal now
        if slot.tokens:
            stored = cache.alloc(slot.tokens)
            if stored:
                ms = costs.save_ms_per_mib * stored / MIB
                now += ms
                other_time(ms)
                return ms
        return 0.0

    def get_available_slot(prompt):
        """get_available_slot (server-context.cpp ~1680-1797): the slot, how it was chosen, the restore if any."""
        nonlocal now
        chosen, how, update, sim_best = None, None, False, 0.0
        if server.slot_prompt_similarity != 0.0:
            for slot in slots:
                if slot.state != "idle" or not slot.tokens:
                    continue
                sim = common_prefix(slot.tokens, prompt) / len(prompt)
                if sim > sim_best and sim > server.slot_prompt_similarity:
                    sim_best, chosen = sim, slot
            if chosen is not None:
                how = "lcp"
                update = sim_best * len(prompt) / len(chosen.tokens) < 0.5
        if chosen is None:
            for slot in slots:
                if slot.state != "idle":
                    continue
                if chosen is None or slot.t_last_used <= chosen.t_last_used:
                    chosen = slot
            if chosen is not None:
                how, update = "lru", True
        restored = None
        if chosen is not None and update and cache is not None:
            save(chosen)
            restored = cache.load(chosen.tokens, prompt)
            if restored is not None:
                chosen.tokens = list(restored[0])
                ms = costs.restore_ms_per_mib * restored[1] / MIB
                now += ms
                other_time(ms)
            cache.update()
        return chosen, how, restored

    def process_new_tasks():
        nonlocal now
        arrive()
        while queue:
            index = queue.popleft()
            request, record = requests[index], served[index]
            slot, how, restored = get_available_slot(request.tokens)
            if slot is None:
                deferred.append(index)
                arrive()
                continue
            record.slot, record.slot_choice = slot.id, how
            record.ram_restore = restored is not None
            record.ram_restored_tokens = restored[2] if restored is not None else None
            slot.state, slot.task, slot.done, slot.generated = "started", index, 0, 0
            record.queue_ms = now - 1e3 * request.arrival_s
            if server.cache_idle_slots and cache is not None:
                before = now
                for other in slots:
                    if other.state == "idle" and save(other):
                        cache.update()
                record.launch_ms = now - before
            arrive()

    def step():
        """update_slots: one decode; False when no slot has work."""
        nonlocal now, released
        batch = 0
        generating = [slot for slot in slots if slot.state == "generating"]
        batch += len(generating)
        prompt_tokens, prompt_slots, finishing = 0, 0, []
        parts = [(slot.id, 1) for slot in generating]
        for slot in slots:
            if batch >= server.n_batch:
                break
            if slot.state not in ("started", "prompt"):
                continue
            prompt = requests[slot.task].tokens
            record = served[slot.task]
            if slot.state == "started":
                n_past = common_prefix(slot.tokens, prompt)
                if n_past == len(prompt):
                    n_past -= 1  # [TAG_PROMPT_LOGITS]: at least one token is computed
                record.cached_tokens, record.computed_tokens = n_past, len(prompt) - n_past
                del slot.tokens[n_past:]
                slot.done, slot.state, slot.prompt_start_ms = n_past, "prompt", now
                windows[slot.id] = (record, "prompt")
            take = min(len(prompt) - slot.done, server.n_batch - batch)
            slot.tokens.extend(prompt[slot.done : slot.done + take])
            slot.done += take
            batch += take
            prompt_tokens += take
            prompt_slots += 1
            parts.append((slot.id, take))
            if slot.done == len(prompt):
                finishing.append(slot)
        if batch == 0:
            return False
        features = (1, prompt_tokens, prompt_slots, len(generating), ubatches(parts))
        for record, kind in windows.values():
            target = record.prompt_features if kind == "prompt" else record.generate_features
            for k, x in enumerate(features):
                target[k] += x
        now += costs.step_ms_of(features)
        for slot in generating:
            slot.tokens.append(object())  # the token sampled last step, now in the KV (never matches a prompt)
        for slot in slots:  # post_decode, in slot order
            if slot not in generating and slot not in finishing:
                continue
            record, request = served[slot.task], requests[slot.task]
            slot.generated += 1
            if slot in finishing:
                slot.state = "generating"
                record.prompt_ms = now - slot.prompt_start_ms
                record.ttft_ms = now + costs.http_ms - 1e3 * request.arrival_s
                windows[slot.id] = (record, "generate")
                slot.prompt_start_ms = now
            if slot.generated >= request.output_tokens:
                record.predicted_ms = now - slot.prompt_start_ms
                record.e2e_ms = now + costs.http_ms - 1e3 * request.arrival_s
                slot.state, slot.task = "idle", None
                slot.t_last_used = released
                released += 1
                del windows[slot.id]
                if deferred:
                    queue.appendleft(deferred.popleft())  # pop_deferred_task: emplace_front
        return True

    while True:
        process_new_tasks()
        if not step():
            if not order:
                break
            now = max(now, 1e3 * requests[order[0]].arrival_s)
    for record in served:
        record.source = "ram" if record.ram_restore else ("slot" if record.cached_tokens else "none")
    if warm_up:
        served = served[len(warm_up) :]
        for record in served:
            record.index -= len(warm_up)
    return served, (cache.summary() if cache is not None else None)


def _nonnegative_least_squares(a, b):
    """Least squares with every coefficient >= 0 (an active set: a negative one is pinned to 0 and the rest
    solved again)."""
    import numpy as np

    a, b = np.asarray(a, float), np.asarray(b, float)
    free = list(range(a.shape[1]))
    x = np.zeros(a.shape[1])
    while free:
        solution = np.linalg.lstsq(a[:, free], b, rcond=None)[0]
        if (solution >= 0).all():
            x[:] = 0
            x[free] = solution
            break
        free.pop(int(np.argmin(solution)))
    return x


def fit(requests, measured, server=Server(), costs=Costs(), warm_up=None, terms=FITTED, rounds=8):
    """The step's coefficients (:data:`TERMS`) fitted to a run: ``measured`` holds per request (in the requests'
    order) the server's ``prompt_ms`` and ``predicted_ms``. Each is a sum of steps whose make-up the model knows
    from its replay of the run, so the fit is linear least squares (coefficients >= 0) on those sums; the replay
    depends on the coefficients, so it is redone with the fitted ones until they settle (a window whose make-up
    changed between the last two replays is left out; a cycle between two schedules ends with the better fit).
    ``terms``: the coefficients fitted (the others keep their values in ``costs``; by default the per-step intercept
    stays 0, see :data:`FITTED`). Returns ``(costs, report)``: the fitted :class:`Costs` and the fit's residuals."""
    import numpy as np

    columns = [TERMS.index(term) for term in terms]
    fixed = [k for k in range(len(TERMS)) if k not in columns]
    candidates, previous = [], None  # (rms on the equations it was fitted to, Costs, residuals, left out)
    for _ in range(rounds):
        served, _ = simulate(requests, server, costs, warm_up)
        equations = {}  # (request, window) -> (features, measured ms less the model's non-step time in it)
        for i, (record, truth) in enumerate(zip(served, measured, strict=True)):
            if truth.get("prompt_ms") is not None and record.prompt_ms is not None:
                equations[i, "prompt"] = (tuple(record.prompt_features), truth["prompt_ms"] - record.prompt_other_ms)
            if truth.get("predicted_ms") is not None and record.predicted_ms is not None:
                equations[i, "generate"] = (
                    tuple(record.generate_features),
                    truth["predicted_ms"] - record.generate_other_ms,
                )
        # a window whose make-up changed since the last replay is on a knife's edge of timing (another request's
        # step lands in it or not): it says little about the prices, and it would make the fit flip. Unless most
        # changed (the first replays, at prices far from the run's): then the schedule is still moving, keep all.
        stable = [
            key for key in equations if previous is not None and previous.get(key, (None,))[0] == equations[key][0]
        ]
        if len(stable) < len(equations) / 2:
            stable = list(equations)
        previous = equations
        a = np.asarray([equations[key][0] for key in stable], float)
        b = np.asarray([equations[key][1] for key in stable], float)
        b_free = b - a[:, fixed] @ np.asarray(costs.coefficients())[fixed] if fixed else b
        x = _nonnegative_least_squares(a[:, columns], b_free)
        fitted = replace(costs, **{term: float(v) for term, v in zip(terms, x, strict=True)})
        residuals = a @ np.asarray(fitted.coefficients()) - b
        repeat = [
            j
            for j, (_, c, _, _) in enumerate(candidates)
            if all(
                math.isclose(u, v, rel_tol=1e-4, abs_tol=1e-4)
                for u, v in zip(fitted.coefficients(), c.coefficients(), strict=True)
            )
        ]
        candidates.append((float(np.sqrt(np.mean(residuals**2))), fitted, residuals, len(equations) - len(stable)))
        costs, replays = fitted, len(candidates)
        if repeat:  # a fixed point, or a cycle (the replay's schedule flips): the best of the cycle
            candidates = candidates[repeat[0] :]
            break
    else:
        candidates = candidates[-1:]  # no fixed point in ``rounds``: the last
    rms, costs, residuals, dropped = min(candidates, key=lambda candidate: candidate[0])
    report = {
        "equations": len(residuals),
        "left_out": dropped,
        "rms_ms": rms,
        "median_abs_ms": float(np.median(np.abs(residuals))),
        "replays": replays,
    }
    return costs, report


class LlamaCpp(ServingEngine):
    name = "llama-cpp"
    title = "llama.cpp"
    version = "b11434"  # llama-server's tag; llama-cpp-python 0.3.16 for the cache design
    server = "llama-cpp"


ENGINE = LlamaCpp()
